"""Attention and rotary position embeddings: `flash_attention` (scaled dot-product attention over
[B, T, H, head_dim], with a causal mask aligned for KV caches and an optional padding mask) and
`rope`. The same conventions as core.py.
"""

from __future__ import annotations

import math

from ..ir import TensorT
from .core import np_softmax
from .lazy_numpy import np
from .registry import OpDef, OpError, Param, registrar
from .shapes import require_float, same_dtype

OPS: dict[str, OpDef] = {}
register = registrar(OPS)


def _attention_rule(ctx, args):
    q, k, v, mask = args["q"], args["k"], args["v"], args.get("mask")
    for n in ("q", "k", "v"):
        t = args[n]
        require_float(t, n)
        if t.rank != 4:
            raise OpError(f"`{n}` must be [B, T, H, head_dim], got {ctx.show(t.shape)}", n, code="rank-mismatch",
                          hint="reshape the projection to [B, T, H, head_dim] first")
    same_dtype(q, k, "q", "k")
    same_dtype(q, v, "q", "v")
    for n, t in (("k", k), ("v", v)):
        for axis, label in ((0, "batch"), (2, "heads")):
            if not ctx.eq(q.shape[axis], t.shape[axis]):
                raise OpError(f"`{n}` is {ctx.show(t.shape)} but `q` is {ctx.show(q.shape)}: the {label} axes "
                              f"({ctx.show_dim(t.shape[axis])} vs {ctx.show_dim(q.shape[axis])}) differ; "
                              f"layout is [B, T, H, head_dim]", n, blame=("q", n))
    if not ctx.eq(q.shape[3], k.shape[3]):
        raise OpError(f"`k` is {ctx.show(k.shape)} but `q` is {ctx.show(q.shape)}: head dims differ", "k",
                      blame=("q", "k"))
    if not ctx.eq(k.shape[1], v.shape[1]):
        raise OpError(f"`v` is {ctx.show(v.shape)} but `k` is {ctx.show(k.shape)}: key lengths differ", "v",
                      blame=("k", "v"))
    if mask is not None:
        if mask.rank != 2 or not ctx.eq(mask.shape[0], q.shape[0]) or not ctx.eq(mask.shape[1], k.shape[1]):
            raise OpError(f"`mask` is {ctx.show(mask.shape)}; a padding mask is [B, T_keys] = "
                          f"[{ctx.show_dim(q.shape[0])}, {ctx.show_dim(k.shape[1])}]", "mask")
    return TensorT(q.shape[:3] + (v.shape[3],), q.dtype)


def _np_attention(q, k, v, causal=False, scale=None, mask=None, dropout=0.0):
    q, k, v = (np.swapaxes(t, 1, 2) for t in (q, k, v))  # [B, H, T, hd]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ np.swapaxes(k, -1, -2)) * scale
    tq, tk = s.shape[-2], s.shape[-1]
    if causal:  # bottom-right aligned: query i sees keys j <= i + (tk - tq)
        allowed = np.tril(np.ones((tq, tk), dtype=bool), k=tk - tq)
        s = np.where(allowed, s, -np.inf)
    if mask is not None:
        s = np.where(mask[:, None, None, :] != 0, s, -np.inf)
    return np.swapaxes(np_softmax(s, -1) @ v, 1, 2)


def _attention_flops(args, out, grads):
    """q k^T and p v over every (query, key) pair, causal or not, as torch's FlopCounterMode counts
    SDPA; the backward recomputes the scores and takes four more products (its SDPA formula)."""
    (b, tq, h, hd), tk, hv = args["q"].shape, args["k"].shape[1], args["v"].shape[3]
    pairs = 2 * b * h * tq * tk
    return pairs * (hd + hv), pairs * (3 * hd + 2 * hv) if grads & {"q", "k", "v"} else pairs * 0


def _lower_attention(call):
    q, k, v = (f"{call.code(n, prec=50)}.transpose(1, 2)" for n in ("q", "k", "v"))
    causal = call.val("causal")
    extra = ""
    if call.given("dropout"):
        extra += f", dropout_p=({call.code('dropout', prec=5)} if self.training else 0.0)"
    if call.given("scale"):
        extra += f", scale={call.code('scale')}"
    same_len = call.eq(call.ty("q").shape[1], call.ty("k").shape[1])
    if call.given("mask") or (causal and not same_len):
        mask = call.code("mask") if call.given("mask") else "None"
        if causal and not same_len and call.cache_position:  # keys may sit in a preallocated cache
            extra += f", cache_position={call.cache_position}"
        return f"_attention({q}, {k}, {v}, {mask}, causal={bool(causal)}{extra}).transpose(1, 2)"
    return f"F.scaled_dot_product_attention({q}, {k}, {v}, is_causal={bool(causal)}{extra}).transpose(1, 2)"


register(OpDef(
    "flash_attention",
    (Param("q", "tensor", aliases=("Q",)), Param("k", "tensor", aliases=("K",)), Param("v", "tensor", aliases=("V",)),
     Param("causal", "bool", False, aliases=("is_causal",), static=True), Param("scale", "float", None),
     Param("mask", "tensor?", None, aliases=("attention_mask",)),
     Param("dropout", "float", None, aliases=("dropout_p",))),
    _attention_rule, numpy=_np_attention, torch=_lower_attention, helpers=("_attention",), flops=_attention_flops,
    doc="softmax(q k^T * scale) v over [B, T, H, head_dim]; `causal` is aligned bottom-right; "
        "`mask` is a [B, T_keys] padding mask (0 = padding). Lowers to F.scaled_dot_product_attention."))


def _rope_rule(ctx, args):
    x = args["x"]
    require_float(x, "x")
    if x.rank != 4:
        raise OpError(f"`x` must be [B, T, H, head_dim], got {ctx.show(x.shape)}", "x", code="rank-mismatch")
    hd = x.shape[3]
    if not ctx.divisible(hd, 2):
        raise OpError(f"RoPE needs an even head_dim, got {ctx.show_dim(hd)}", "x", code="bad-constraint")
    return x


def _np_rope(x, offset=0, base=10000.0):
    t, hd = x.shape[1], x.shape[3]
    inv = 1.0 / (base ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    ang = np.outer(np.arange(offset, offset + t, dtype=np.float64), inv)
    emb = np.concatenate([ang, ang], axis=-1)  # [T, hd]
    cos, sin = np.cos(emb)[None, :, None, :], np.sin(emb)[None, :, None, :]
    rot = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], axis=-1)
    return x * cos + rot * sin


register(OpDef(
    "rope", (Param("x", "tensor"), Param("offset", "int", 0, aliases=("pos",)),
             Param("base", "float", 10000.0, aliases=("theta",))),
    _rope_rule, numpy=_np_rope,
    torch=lambda call: f"_rope({call.code('x')}, {call.code('offset')}, {call.code('base')})", helpers=("_rope",),
    doc="rotary position embedding on [B, T, H, head_dim], HF Llama's rotate-half convention; "
        "positions start at `offset`."))
