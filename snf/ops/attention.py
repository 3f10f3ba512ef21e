"""Attention and rotary position embeddings: `flash_attention` (scaled dot-product attention over
[B, T, H, head_dim], with a causal mask aligned for KV caches, grouped-query key/value heads, a
sliding window, an additive bias and an optional padding mask) and `rope`. The same conventions as
core.py.
"""

from __future__ import annotations

import math

from ..dims import Dim
from ..ir import ScalarT, TensorT
from .core import np_softmax
from .lazy_numpy import np
from .registry import POSITIVE, PROBABILITY, OpDef, OpError, Param, registrar
from .shapes import broadcast, require_float, same_dtype

OPS: dict[str, OpDef] = {}
register = registrar(OPS)


def _attention_rule(ctx, args):
    q, k, v, mask = args["q"], args["k"], args["v"], args.get("mask")
    bias, window = args.get("bias"), args.get("window")
    for n in ("q", "k", "v"):
        t = args[n]
        require_float(t, n)
        if t.rank != 4:
            raise OpError(f"`{n}` must be [B, T, H, head_dim], got {ctx.show(t.shape)}", n, code="rank-mismatch",
                          hint="reshape the projection to [B, T, H, head_dim] first")
    same_dtype(q, k, "q", "k")
    same_dtype(q, v, "q", "v")
    for n, t in (("k", k), ("v", v)):
        if not ctx.eq(q.shape[0], t.shape[0]):
            raise _layout_error(ctx, q, t, n, 0, "batch")
    _kv_heads(ctx, q, k, v)
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
    if window is not None:
        if not (isinstance(window, ScalarT) and window.kind == "int"):
            raise OpError("`window` is a number of keys: an int", "window", code="arg-kind")
        if not args["causal"]:
            raise OpError("a sliding window limits how far back each query looks, so it needs `causal=True`",
                          "window", code="arg-kind", hint="write `flash_attention(q, k, v, causal=True, window=W)`")
        w = window.dim
        if w is not None and w.value is not None and w.value < 1:
            raise OpError(f"the window must be at least 1 (a query sees itself), got {w.value}", "window",
                          code="bad-constraint")
        if w is not None:
            ctx.bound(Dim.const(1), w, "window")
    if bias is not None:
        _attention_bias(ctx, q, k, bias)
    return TensorT(q.shape[:3] + (v.shape[3],), q.dtype)


def _layout_error(ctx, q: TensorT, t: TensorT, n: str, axis: int, label: str) -> OpError:
    return OpError(f"`{n}` is {ctx.show(t.shape)} but `q` is {ctx.show(q.shape)}: the {label} axes "
                   f"({ctx.show_dim(t.shape[axis])} vs {ctx.show_dim(q.shape[axis])}) differ; "
                   f"layout is [B, T, H, head_dim]", n, blame=("q", n))


def _kv_heads(ctx, q: TensorT, k: TensorT, v: TensorT) -> None:
    """`k` and `v` have KVH heads, `q` H: equal, or grouped-query attention, where each key/value head
    serves H / KVH query heads (KVH == 1 is multi-query attention). KVH must divide H: proved, or
    a constraint on config values that `Config` checks."""
    h, kvh = q.shape[2], k.shape[2]
    if not ctx.eq(kvh, v.shape[2]):
        raise OpError(f"`v` is {ctx.show(v.shape)} but `k` is {ctx.show(k.shape)}: the heads axes "
                      f"({ctx.show_dim(v.shape[2])} vs {ctx.show_dim(kvh)}) differ", "v", blame=("k", "v"))
    if ctx.eq(h, kvh):
        return
    if not (ctx.static(h) and ctx.static(kvh)):  # a run-time length where heads belong: a layout mistake
        raise _layout_error(ctx, q, k, "k", 2, "heads")
    if not ctx.eq(h, kvh * ctx.dim_op(lambda p, r: p // r, h, kvh)):
        raise OpError(f"`k` has {ctx.show_dim(kvh)} heads and `q` {ctx.show_dim(h)}: in grouped-query attention "
                      f"each key/value head serves the same number of query heads, so {ctx.show_dim(kvh)} must "
                      f"divide {ctx.show_dim(h)}", "k", blame=("q", "k"),
                      hint=_gqa_hint(ctx, h, kvh))


def _gqa_hint(ctx, h: Dim, kvh: Dim) -> str:
    if h.value is not None and h.value > 0:
        divisors = [str(d) for d in range(1, h.value + 1) if h.value % d == 0]
        return (f"with {h.value} query heads, the key/value heads can be " + ", ".join(divisors) +
                "; the layout is [B, T, H, head_dim] for q and [B, T, KVH, head_dim] for k and v")
    return (f"make the key/value heads a config value that divides the query heads (say `n_kv_head`, "
            f"with {ctx.show_dim(h)} % n_kv_head == 0 checked by Config)")


def _attention_bias(ctx, q: TensorT, k: TensorT, bias: TensorT) -> None:
    target = (q.shape[0], q.shape[2], q.shape[1], k.shape[1])  # [B, H, T, T_keys]: heads first, as the scores
    shown = f"[{', '.join(ctx.show_dim(d) for d in target)}] = [B, H, T, T_keys]"
    if bias.dtype != q.dtype:
        raise OpError(f"`bias` is {bias.dtype} but `q` is {q.dtype}", "bias", code="dtype-mismatch",
                      hint="the bias is added to the scores: give it the dtype of q", blame=("q", "bias"))
    try:
        shape = broadcast(ctx, target, bias.shape, "q", "bias")
    except OpError:
        shape = None
    if shape is None or len(shape) != 4 or not all(ctx.eq(x, y) for x, y in zip(shape, target)):
        raise OpError(f"`bias` is {ctx.show(bias.shape)}, which does not broadcast to the scores {shown}", "bias",
                      hint="an attention bias is laid out heads first, like the scores: [1, H, T, T_keys] "
                           "for one bias per head")


def _np_attention(q, k, v, causal=False, scale=None, mask=None, dropout=0.0, window=None, bias=None):
    q, k, v = (np.swapaxes(t, 1, 2) for t in (q, k, v))  # [B, H, T, hd]
    group = q.shape[1] // k.shape[1]  # grouped-query attention: query head h reads key/value head h // group
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ np.swapaxes(k, -1, -2)) * scale
    if bias is not None:
        s = s + bias
    tq, tk = s.shape[-2], s.shape[-1]
    if causal:  # bottom-right aligned: query i (at position i + tk - tq) sees keys in (i - window, i]
        i = np.arange(tq)[:, None] + (tk - tq)
        j = np.arange(tk)[None, :]
        allowed = (j <= i) & (j > i - window) if window is not None else j <= i
        s = np.where(allowed, s, -np.inf)
    if mask is not None:
        s = np.where(mask[:, None, None, :] != 0, s, -np.inf)
    seen = (s > -np.inf).any(-1, keepdims=True)  # a query that sees no key gets zeros, as torch's SDPA
    p = np_softmax(np.where(seen, s, 0.0), -1) * seen
    return np.swapaxes(p @ v, 1, 2)


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
    if call.given("mask") or call.given("window") or call.given("bias") or (causal and not same_len):
        mask = call.code("mask") if call.given("mask") else "None"
        if causal and not same_len and call.decode:  # keys may sit in a preallocated cache
            extra += f", decode={call.decode}"
        for n in ("window", "bias"):
            if call.given(n):
                extra += f", {n}={call.code(n)}"
        return f"_attention({q}, {k}, {v}, {mask}, causal={bool(causal)}{extra}).transpose(1, 2)"
    if not call.eq(call.ty("q").shape[2], call.ty("k").shape[2]):  # grouped-query: SDPA shares each k/v head
        extra += ", enable_gqa=True"
    return f"F.scaled_dot_product_attention({q}, {k}, {v}, is_causal={bool(causal)}{extra}).transpose(1, 2)"


register(OpDef(
    "flash_attention",
    (Param("q", "tensor", aliases=("Q",)), Param("k", "tensor", aliases=("K",)), Param("v", "tensor", aliases=("V",)),
     Param("causal", "bool", False, aliases=("is_causal",), static=True), Param("scale", "float", None),
     Param("mask", "tensor?", None, aliases=("attention_mask",)),
     Param("dropout", "float", None, aliases=("dropout_p",), within=PROBABILITY),
     Param("window", "value", None, aliases=("sliding_window",)), Param("bias", "tensor?", None)),
    _attention_rule, numpy=_np_attention, torch=_lower_attention, flops=_attention_flops,
    doc="softmax(q k^T * scale + bias) v over [B, T, H, head_dim], k and v with H or fewer (grouped-query) "
        "heads; `causal` is aligned bottom-right, `window=W` keeps keys in (i - W, i]; `mask` is a [B, T_keys] "
        "padding mask (0 = padding); a query that sees no key gives zeros. Lowers to "
        "F.scaled_dot_product_attention."))


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
             Param("base", "float", 10000.0, aliases=("theta",), within=POSITIVE)),
    _rope_rule, numpy=_np_rope,
    torch=lambda call: f"_rope({call.code('x')}, {call.code('offset')}, {call.code('base')})",
    doc="rotary position embedding on [B, T, H, head_dim], HF Llama's rotate-half convention; "
        "positions start at `offset`."))
