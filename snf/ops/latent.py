"""Multi-head latent attention (DeepSeek-V2 and V3): `latent_attention`, attention whose keys and
values are expanded from one small per-token latent, so that a cache holds the latent, not the
expanded keys and values. The same conventions as core.py.

The op takes what the paper's equations name: the queries (their no-RoPE part, then the RoPE part,
already rotated), the latent of each key position (the normed compressed KV `c`, then the shared
RoPE key, already rotated) and the up-projection of `c` into each head's no-RoPE key and value
(transformers' `kv_b_proj.weight`). Its meaning is the expanded form: k = [c W_k, k_rope], v = c W_v,
then softmax(q k^T * scale) v. Its lowering (snf/runtime/attention.py, `_latent_attention`) also has
the absorbed plan, which folds W_k into the queries and W_v after the values, so that attention
runs over the latent itself as one key/value head shared by every query head: the plan a decode
step takes, where expanding every cached token for one query costs far more.
"""

from __future__ import annotations

from ..ir import TensorT
from .attention import layout_error, np_attention
from .lazy_numpy import np
from . import sharding
from .registry import POSITIVE, OpDef, OpError, Param, registrar
from .shapes import require_float, same_dtype

OPS: dict[str, OpDef] = {}
register = registrar(OPS)


def _latent_rule(ctx, args):
    q, latent, w = args["q"], args["latent"], args["kv_weight"]
    dr, dv = args["rope_dim"], args["v_dim"]
    for n, t, rank, layout in (("q", q, 4, "[B, T, H, nope_dim + rope_dim]"), ("latent", latent, 3,
                               "[B, T_keys, kv_rank + rope_dim]"), ("kv_weight", w, 2,
                                                                    "[H * (nope_dim + v_dim), kv_rank]")):
        require_float(t, n)
        if t.rank != rank:
            raise OpError(f"`{n}` must be {layout}, got {ctx.show(t.shape)}", n, code="rank-mismatch")
    same_dtype(q, latent, "q", "latent")
    same_dtype(q, w, "q", "kv_weight")
    for n, d in (("rope_dim", dr), ("v_dim", dv)):
        if not ctx.static(d):
            raise OpError(f"`{n}` must be a config value (a number of dims), not a run-time one", n, code="arg-kind")
    if not ctx.eq(q.shape[0], latent.shape[0]):
        raise layout_error(ctx, q, latent, "latent", 0, "batch")
    rank = w.shape[1]
    if not ctx.need(latent.shape[2], "==", rank + dr, "the latent is the kv rank's values, then the RoPE key's"):
        raise OpError(f"`latent` is {ctx.show(latent.shape)}: its last axis must be kv_rank + rope_dim = "
                      f"{ctx.show_dim(rank)} + {ctx.show_dim(dr)} (kv_rank is the last axis of `kv_weight`)", "latent",
                      blame=("latent", "kv_weight"))
    nope = q.shape[3] - dr
    if not ctx.need(dr, "<", q.shape[3], "each query head has dims without RoPE"):
        raise OpError(f"`rope_dim={ctx.show_dim(dr)}` leaves no query dims without RoPE in heads of "
                      f"{ctx.show_dim(q.shape[3])}", "rope_dim", code="bad-constraint", blame=("q", "rope_dim"))
    if not ctx.need(w.shape[0], "==", q.shape[2] * (nope + dv), "kv_weight has each head's key rows, then its value's"):
        raise OpError(f"`kv_weight` is {ctx.show(w.shape)}: its rows must be H * (nope_dim + v_dim) = "
                      f"{ctx.show_dim(q.shape[2])} * ({ctx.show_dim(nope)} + {ctx.show_dim(dv)}), each head's key "
                      f"rows then its value rows", "kv_weight", blame=("q", "kv_weight"))
    return TensorT(q.shape[:3] + (dv,), q.dtype)


def _expand(latent, kv_weight, heads: int, nope: int, rope_dim: int):
    """The paper's keys and values, [B, T_keys, H, nope + rope_dim] and [B, T_keys, H, v_dim]."""
    b, s, _ = latent.shape
    c, k_rope = latent[..., :latent.shape[-1] - rope_dim], latent[..., latent.shape[-1] - rope_dim:]
    kv = (c @ kv_weight.T).reshape(b, s, heads, kv_weight.shape[0] // heads)
    k = np.concatenate([kv[..., :nope], np.broadcast_to(k_rope[:, :, None, :], (b, s, heads, rope_dim))], axis=-1)
    return k, kv[..., nope:]


def _np_latent_attention(q, latent, kv_weight, rope_dim, v_dim, causal=False, scale=None):
    k, v = _expand(latent, kv_weight, q.shape[2], q.shape[3] - rope_dim, rope_dim)
    return np_attention(q, k, v, causal=causal, scale=scale)


def _latent_flops(args, out, grads):
    """The expanded plan's (the absorbed plan a decode step takes costs less there): c W over every key
    position, its backward a product per operand needing a gradient, as `linear`'s; then attention over
    the expanded heads, its backward SDPA's, as `flash_attention`'s (snf/ops/attention.py)."""
    (b, tq, h, hq), (_, tk, _), (rows, rank) = args["q"].shape, args["latent"].shape, args["kv_weight"].shape
    hv = out.shape[3]
    expand = 2 * b * tk * rank * rows
    pairs = 2 * b * h * tq * tk
    attention = pairs * (3 * hq + 2 * hv) if grads & {"q", "latent", "kv_weight"} else pairs * 0
    return expand + pairs * (hq + hv), expand * len(grads & {"latent", "kv_weight"}) + attention


def _latent_makes(args, out):
    """The expanded plan's c W [B, T_keys, H (nope + v_dim)] and keys [B, T_keys, H, nope + rope_dim]."""
    (b, _, h, hq), (_, tk, _), (rows, _) = args["q"].shape, args["latent"].shape, args["kv_weight"].shape
    return b * tk * (rows + h * hq)


def _lower_latent(call):
    args = ", ".join(call.code(n) for n in ("q", "latent", "kv_weight", "rope_dim", "v_dim"))
    extra = f", scale={call.code('scale')}" if call.given("scale") else ""
    if call.decode and call.val("causal"):  # the latent may sit in a preallocated cache
        extra += f", decode={call.decode}"
    return f"_latent_attention({args}, causal={bool(call.val('causal'))}{extra})"


register(OpDef(
    "latent_attention",
    (Param("q", "tensor"), Param("latent", "tensor"), Param("kv_weight", "tensor"), Param("rope_dim", "int"),
     Param("v_dim", "int"), Param("causal", "bool", False, aliases=("is_causal",), static=True),
     Param("scale", "float", None, within=POSITIVE)),
    _latent_rule, numpy=_np_latent_attention, torch=_lower_latent, flops=_latent_flops, makes=_latent_makes,
    keeps_result=True,
    keys=("latent",),
    doc="multi-head latent attention (DeepSeek-V2/V3): q [B, T, H, nope_dim + rope_dim] (the RoPE part last, "
        "rotated) over `latent` [B, T_keys, kv_rank + rope_dim] (the normed compressed KV, then the shared rotated "
        "RoPE key); each head's key is [c W_k, k_rope] and value c W_v, W = `kv_weight` [H * (nope_dim + v_dim), "
        "kv_rank] (each head's key rows, then its value rows); `causal` aligned bottom-right. A cache of `latent` "
        "holds kv_rank + rope_dim values per token; a decode step attends over it with W folded into q and out.",
        shard=sharding.heads({"q": 2, "kv_weight": 0})))
