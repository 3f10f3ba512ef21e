"""Attention and rotary position embeddings: `flash_attention` (scaled dot-product attention over
[B, T, H, head_dim], with a causal mask aligned for KV caches, grouped-query key/value heads, a
sliding window, an additive bias and an optional padding mask) and `rope`. The same conventions as
core.py.
"""

from __future__ import annotations

import math

from ..dims import Dim
from ..ir import ScalarT, TensorT
from .core import np_softcap, np_softmax
from .lazy_numpy import np
from . import sharding
from .registry import POSITIVE, PROBABILITY, OpDef, OpError, Param, registrar
from .shapes import broadcast, divides, require_float, same_dtype

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
            raise layout_error(ctx, q, t, n, 0, "batch")
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
    _chunk_rule(ctx, args)
    if bias is not None:
        _attention_bias(ctx, q, k, bias)
    if args.get("sinks") is not None:
        _attention_sinks(ctx, q, args["sinks"])
        if args.get("chunk") is not None:  # no family has both, and no helper writes them together
            raise OpError("attention sinks with chunked attention are not supported: sinks go with a window or "
                          "full attention", "chunk", code="arg-kind", blame=("sinks", "chunk"))
    return TensorT(q.shape[:3] + (v.shape[3],), q.dtype)


def _chunk_rule(ctx, args) -> None:
    """`chunk=C` (Llama 4's chunked local attention): an int, at least 1, with `causal=True`."""
    chunk = args.get("chunk")
    if chunk is None:
        return
    if not (isinstance(chunk, ScalarT) and chunk.kind == "int"):
        raise OpError("`chunk` is a number of positions: an int", "chunk", code="arg-kind")
    if not args["causal"]:
        raise OpError("chunked attention is causal within each chunk, so it needs `causal=True`", "chunk",
                      code="arg-kind", hint="write `flash_attention(q, k, v, causal=True, chunk=C)`")
    c = chunk.dim
    if c is not None and c.value is not None and c.value < 1:
        raise OpError(f"a chunk must hold at least 1 position, got {c.value}", "chunk", code="bad-constraint")
    if c is not None:
        ctx.bound(Dim.const(1), c, "chunk")


def _attention_sinks(ctx, q: TensorT, sinks: TensorT) -> None:
    """gpt-oss's attention sinks: one learned logit per query head, [H]."""
    if sinks.rank != 1 or not ctx.eq(sinks.shape[0], q.shape[2]):
        raise OpError(f"`sinks` is {ctx.show(sinks.shape)}, and `q` {ctx.show(q.shape)} has "
                      f"{ctx.show_dim(q.shape[2])} heads: a sink is one logit per query head, "
                      f"[{ctx.show_dim(q.shape[2])}]", "sinks", blame=("q", "sinks"),
                      hint="the sinks are per query head (H), not per key/value head")
    if sinks.dtype != q.dtype:
        raise OpError(f"`sinks` is {sinks.dtype} but `q` is {q.dtype}", "sinks", code="dtype-mismatch",
                      hint="the sinks join the scores: give them the dtype of q", blame=("q", "sinks"))


def layout_error(ctx, q: TensorT, t: TensorT, n: str, axis: int, label: str) -> OpError:
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
        raise layout_error(ctx, q, k, "k", 2, "heads")
    if not divides(ctx, kvh, h):
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


def np_attention(q, k, v, causal=False, scale=None, mask=None, dropout=0.0, window=None, bias=None, softcap=None,
                  sinks=None):
    q, k, v = (np.swapaxes(t, 1, 2) for t in (q, k, v))  # [B, H, T, hd]
    group = q.shape[1] // k.shape[1]  # grouped-query attention: query head h reads key/value head h // group
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ np.swapaxes(k, -1, -2)) * scale
    if softcap is not None:  # Gemma 2: the scaled scores squashed into (-softcap, softcap), before any mask
        s = np_softcap(s, softcap)
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
    p = np_softmax(np.where(seen, s, 0.0), -1) * seen if sinks is None else _np_sink_softmax(s, sinks)
    return np.swapaxes(p @ v, 1, 2)


def _np_chunked_attention(q, k, v, chunk=None, **args):
    """np_attention with `chunk=C`: query i (at position i + T_k - T_q, as `causal` aligns it) also
    sees only the keys j of its own chunk, j // C == (i + T_k - T_q) // C, as a -inf bias."""
    if chunk is not None:
        i = np.arange(q.shape[1])[:, None] + (k.shape[1] - q.shape[1])
        outside = np.where(np.arange(k.shape[1])[None, :] // chunk == i // chunk, 0.0, -np.inf)
        args["bias"] = outside if args.get("bias") is None else args["bias"] + outside
    return np_attention(q, k, v, **args)


def _np_sink_softmax(s, sinks):
    """The keys' share of a softmax over each row of scores s [B, H, T, T_keys] and its head's sink
    logit: the sink's own share is dropped, and a row of no key (all -inf) gives zeros."""
    sink = np.asarray(sinks, dtype=np.float64)[None, :, None, None]
    top = np.maximum(s.max(-1, keepdims=True, initial=-np.inf), sink)  # no keys at all: the sink alone
    e = np.exp(s - top)
    return e / (e.sum(-1, keepdims=True) + np.exp(sink - top))


def _attention_flops(args, out, grads):
    """q k^T and p v over every (query, key) pair, causal or not, as torch's FlopCounterMode counts
    SDPA; the backward recomputes the scores and takes four more products (its SDPA formula)."""
    (b, tq, h, hd), tk, hv = args["q"].shape, args["k"].shape[1], args["v"].shape[3]
    pairs = 2 * b * h * tq * tk
    if isinstance(args.get("sinks"), TensorT):  # written out (_sink_attention): two products, each two in backward
        return pairs * (hd + hv), pairs * (2 * hd + 2 * hv) if grads & {"q", "k", "v", "sinks"} else pairs * 0
    return pairs * (hd + hv), pairs * (3 * hd + 2 * hv) if grads & {"q", "k", "v"} else pairs * 0


def _lower_attention(call):
    causal = bool(call.val("causal"))
    if call.given("sinks"):  # SDPA has no place for a sink: the attention written out
        return _helper_call(call, "_sink_attention", f"causal={causal}", f", sinks={call.code('sinks')}")
    if call.given("chunk"):  # the chunks added to what _attention (or _softcapped_attention) masks
        return _helper_call(call, "_chunked_attention", call.code("chunk"))
    same_len = call.eq(call.ty("q").shape[1], call.ty("k").shape[1])
    if any(call.given(n) for n in ("mask", "window", "bias", "softcap")) or (causal and not same_len):
        # what SDPA cannot do alone: the helper builds the mask
        helper = "_softcapped_attention" if call.given("softcap") else "_attention"
        return _helper_call(call, helper, f"causal={causal}")
    q, k, v = (f"{call.code(n, prec=50)}.transpose(1, 2)" for n in ("q", "k", "v"))
    extra = _dropout(call) + (f", scale={call.code('scale')}" if call.given("scale") else "")
    if not call.eq(call.ty("q").shape[2], call.ty("k").shape[2]):  # grouped-query: SDPA shares each k/v head
        extra += ", enable_gqa=True"
    return f"F.scaled_dot_product_attention({q}, {k}, {v}, is_causal={causal}{extra}).transpose(1, 2)"


def _dropout(call) -> str:
    return f", dropout_p=({call.code('dropout', prec=5)} if self.training else 0.0)" if call.given("dropout") else ""


def _helper_call(call, helper: str, how: str, tail: str = "") -> str:
    """A call of one of snf/runtime/attention.py's helpers: q, k and v as [B, H, T, head_dim], the
    padding mask, `how` (causal=, or the chunk), then each optional argument given, and `tail`."""
    q, k, v = (f"{call.code(n, prec=50)}.transpose(1, 2)" for n in ("q", "k", "v"))
    mask = call.code("mask") if call.given("mask") else "None"
    extra = _dropout(call) + (f", scale={call.code('scale')}" if call.given("scale") else "")
    causal = call.val("causal") or call.given("chunk")
    if causal and not call.eq(call.ty("q").shape[1], call.ty("k").shape[1]) and call.decode:
        extra += f", decode={call.decode}"  # keys may sit in a preallocated cache
    extra += "".join(f", {n}={call.code(n)}" for n in ("window", "bias", "softcap") if call.given(n))
    return f"{helper}({q}, {k}, {v}, {mask}, {how}{extra}{tail}).transpose(1, 2)"


register(OpDef(
    "flash_attention",
    (Param("q", "tensor", aliases=("Q",)), Param("k", "tensor", aliases=("K",)), Param("v", "tensor", aliases=("V",)),
     Param("causal", "bool", False, aliases=("is_causal",), static=True), Param("scale", "float", None),
     Param("mask", "tensor?", None, aliases=("attention_mask",)),
     Param("dropout", "float", None, aliases=("dropout_p",), within=PROBABILITY),
     Param("chunk", "value", None, aliases=("attention_chunk_size",)),
     Param("window", "value", None, aliases=("sliding_window",)), Param("bias", "tensor?", None),
     Param("softcap", "float", None, aliases=("logit_softcapping",), within=POSITIVE),
     Param("sinks", "tensor?", None)),
    _attention_rule, numpy=_np_chunked_attention, torch=_lower_attention, flops=_attention_flops, keeps_result=True,
    keys=("k", "v"),
    doc="softmax(q k^T * scale + bias) v over [B, T, H, head_dim], k and v with H or fewer (grouped-query) "
        "heads; `causal` is aligned bottom-right, `window=W` keeps keys in (i - W, i], `chunk=C` those of i's chunk "
        "of C positions (Llama 4); `mask` is a [B, T_keys] "
        "padding mask (0 = padding); `softcap=c` caps the scaled scores at c * tanh(s / c) before bias and masks "
        "(Gemma 2); `sinks` [H] is a logit per query head that joins each softmax as one more column, then "
        "dropped (gpt-oss); a query that sees no key gives zeros. Lowers to F.scaled_dot_product_attention (to the "
        "attention written out with `softcap` or `sinks`).",
        shard=sharding.heads({"q": 2, "k": 2, "v": 2, "sinks": 0, "bias": 1})))


# RoPE's scaling types (transformers' `rope_type`, modeling_rope_utils.py): the parameters each one
# needs, and the ones it may take; a parameter of another type is refused.
ROPE_SCALING = {
    "none": ((), ()),
    "linear": (("factor",), ()),
    "dynamic": (("factor", "original_max_position"), ()),
    "llama3": (("factor", "low_freq_factor", "high_freq_factor", "original_max_position"), ()),
    "yarn": (("factor", "original_max_position"),
             ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate")),
    # Phi-3's: per-frequency factors, the long ones once the sequence passes original_max_position
    "longrope": (("short_factor", "long_factor", "original_max_position"), ("factor", "attention_factor")),
}
_ROPE_NUMBERS = ("factor", "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow", "mscale",
                 "mscale_all_dim", "attention_factor")
_ROPE_FACTORS = ("short_factor", "long_factor")  # list params, one number per rotated pair
_ROPE_SCALING_ARGS = _ROPE_NUMBERS + ("original_max_position", "truncate") + _ROPE_FACTORS


def _rope_rule(ctx, args):
    x = args["x"]
    require_float(x, "x")
    if x.rank != 4:
        raise OpError(f"`x` must be [B, T, H, head_dim], got {ctx.show(x.shape)}", "x", code="rank-mismatch")
    hd = x.shape[3]
    if not ctx.divisible(hd, 2):
        raise OpError(f"RoPE needs an even head_dim, got {ctx.show_dim(hd)}", "x", code="bad-constraint")
    rd = args["rotary_dim"]
    if rd is not None:
        _rotary_dim(ctx, rd, hd)
    _rope_scaling(args)
    dim = hd if rd is None else rd
    for n in _ROPE_FACTORS:  # one factor per rotated pair: Config checks a length it cannot prove
        seq = args[n]
        if seq is None:
            continue
        if seq.kind not in ("float", "int"):
            raise OpError(f"`{n}=` of `rope` takes a list of numbers, not of {seq.kind}", n, code="arg-kind")
        if seq.length is None:
            raise OpError(f"`{n}=` of `rope` needs a list whose length is known: one number per pair of rotated dims",
                          n, code="index-range", hint="declare it `list[float, N]`, N the rotated dims / 2")
        if not ctx.need(2 * seq.length, "==", dim, f"`{n}` has one number per pair of rotated dims"):
            raise OpError(f"`{n}=` has {ctx.show_dim(seq.length)} numbers, and RoPE rotates "
                          f"{ctx.show_dim(dim)} dims: it needs one per pair", n, code="shape-mismatch")
    if args["scaling"] == "dynamic" and not ctx.need(Dim.const(4), "<=", dim, "dynamic RoPE needs 4 rotated dims"):
        raise OpError(f"dynamic RoPE raises its base to the power d / (d - 2) of the {ctx.show_dim(dim)} rotated "
                      f"dims, so it needs at least 4", "rotary_dim" if rd is not None else "x", code="bad-constraint")
    return x


def _rotary_dim(ctx, rd: Dim, hd: Dim) -> None:
    """The rotated dims, the first `rd` of head_dim: a config value, even, in [2, head_dim]."""
    if not ctx.static(rd):
        raise OpError("`rotary_dim` must be a config value (a number of dims), not a run-time one", "rotary_dim",
                      code="arg-kind")
    if not ctx.divisible(rd, 2):
        raise OpError(f"`rotary_dim={ctx.show_dim(rd)}` is odd: the rotated dims come in pairs", "rotary_dim",
                      code="bad-constraint")
    for lo, hi, why in ((Dim.const(2), rd, "at least 2"), (rd, hd, f"at most head_dim = {ctx.show_dim(hd)}")):
        if not ctx.need(lo, "<=", hi, f"`rotary_dim` must be {why}"):
            raise OpError(f"`rotary_dim={ctx.show_dim(rd)}`{ctx.defaults_note(hi - lo)}: it must be {why}",
                          "rotary_dim", code="bad-constraint", blame=("x", "rotary_dim"),
                          hint="the first rotary_dim dims of each head rotate, the rest pass through")


def _rope_scaling(args) -> None:
    """The parameters given must be those of the scaling type: its required ones, and no other's."""
    kind = args["scaling"]
    required, optional = ROPE_SCALING[kind]
    for n in _ROPE_NUMBERS:
        if isinstance(args[n], TensorT) or isinstance(args[n], ScalarT) and args[n].kind == "bool":
            raise OpError(f"`{n}=` of `rope` takes a number", n, code="arg-kind")
    for n in required:
        if args[n] is None:
            raise OpError(f"`rope` with `scaling=\"{kind}\"` needs `{n}`", "scaling", code="missing-arg",
                          hint=f"scaling \"{kind}\" takes " + ", ".join(f"`{m}`" for m in required + optional))
    for n in _ROPE_SCALING_ARGS:
        if args[n] is not None and n not in required + optional:
            users = [k for k, (req, opt) in ROPE_SCALING.items() if n in req + opt]
            takes = ", ".join(f"`{m}`" for m in required + optional) or "no scaling parameter"
            raise OpError(f"`{n}=` is a parameter of `scaling=` " + ", ".join(f'"{u}"' for u in users) +
                          f", not of \"{kind}\"", n, code="unknown-arg", hint=f"scaling \"{kind}\" takes {takes}")


def np_rope_frequencies(dim, base, seq_len, scaling="none", factor=None, original_max_position=None,
                        low_freq_factor=None, high_freq_factor=None, beta_fast=None, beta_slow=None, mscale=None,
                        mscale_all_dim=None, attention_factor=None, truncate=None, short_factor=None,
                        long_factor=None):
    """(inverse frequencies [dim / 2], the scale of cos and sin) of RoPE over `dim` rotated dims, for
    a sequence of `seq_len` positions, in float64: transformers' ROPE_INIT_FUNCTIONS[scaling]."""
    inv_freq = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    if scaling == "linear":
        return inv_freq / factor, 1.0
    if scaling == "dynamic":  # NTK-aware: a larger base once the sequence is longer than trained on
        seq = max(seq_len, original_max_position)
        base = base * ((factor * seq / original_max_position) - (factor - 1)) ** (dim / (dim - 2))
        return 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)), 1.0
    if scaling == "llama3":
        wavelen = 2 * math.pi / inv_freq
        scaled = np.where(wavelen > original_max_position / low_freq_factor, inv_freq / factor, inv_freq)
        smooth = (original_max_position / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
        medium = (wavelen >= original_max_position / high_freq_factor) & \
            (wavelen <= original_max_position / low_freq_factor)
        return np.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled), 1.0
    if scaling == "yarn":
        return _np_yarn(dim, base, inv_freq, factor, original_max_position, beta_fast or 32, beta_slow or 1,
                        mscale, mscale_all_dim, attention_factor, truncate is not False)
    if scaling == "longrope":
        ext = np.asarray(long_factor if seq_len > original_max_position else short_factor, dtype=np.float64)
        return inv_freq / ext, longrope_attention_factor(factor, original_max_position, attention_factor)
    return inv_freq, 1.0


def longrope_attention_factor(factor, original, attention_factor):
    """LongRoPE's scale of cos and sin: the given one, else sqrt(1 + log(factor) / log(original)) (1
    for a factor <= 1 or none)."""
    if attention_factor is not None:
        return attention_factor
    return 1.0 if factor is None or factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))


def yarn_mscale(scale, mscale=1):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_range(fast, slow, dim, base, original, truncate):
    """The dims between which YaRN ramps from extrapolation to interpolation."""
    low, high = (dim * math.log(original / (r * 2 * math.pi)) / (2 * math.log(base)) for r in (fast, slow))
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def _np_yarn(dim, base, inv_freq, factor, original, fast, slow, mscale, mscale_all_dim, attention_factor, truncate):
    if attention_factor is None:
        attention_factor = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim) \
            if mscale and mscale_all_dim else yarn_mscale(factor)
    low, high = yarn_range(fast, slow, dim, base, original, truncate)
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / ((high + 0.001 if low == high else high) - low),
                   0, 1)
    kept = 1 - ramp  # the share of each frequency kept (extrapolated) rather than divided by factor
    return inv_freq / factor * (1 - kept) + inv_freq * kept, attention_factor


def _np_rope(x, offset=0, base=10000.0, scaling="none", rotary_dim=None, interleaved=False, **params):
    t, hd = x.shape[1], x.shape[3]
    dim = hd if rotary_dim is None else rotary_dim
    inv, scale = np_rope_frequencies(dim, base, offset + t, scaling, **params)
    ang = np.outer(np.arange(offset, offset + t, dtype=np.float64), inv)  # [T, dim / 2]
    emb = np.repeat(ang, 2, axis=-1) if interleaved else np.concatenate([ang, ang], axis=-1)
    cos, sin = (f(emb)[None, :, None, :] * scale for f in (np.cos, np.sin))
    r, rest = x[..., :dim], x[..., dim:]
    if interleaved:  # GPT-J's rotate_every_two: the pairs (2i, 2i + 1)
        rot = np.stack([-r[..., 1::2], r[..., ::2]], axis=-1).reshape(r.shape)
    else:  # rotate_half: the pairs (i, i + dim / 2)
        rot = np.concatenate([-r[..., dim // 2:], r[..., :dim // 2]], axis=-1)
    return np.concatenate([r * cos + rot * sin, rest], axis=-1)


def _lower_rope(call):
    extra = "".join(f", {n}={call.code(n)}" for n in ("rotary_dim", "interleaved")
                    if call.given(n) and call.val(n) is not False)
    if call.val("scaling") == "none":  # no scaling helper in the module's code
        return f"_rope({call.code('x')}, {call.code('offset')}, {call.code('base')}{extra})"
    extra += f", scaling={call.code('scaling')}" + "".join(
        f", {n}={call.code(n)}" for n in _ROPE_SCALING_ARGS if call.given(n))
    return f"_scaled_rope({call.code('x')}, {call.code('offset')}, {call.code('base')}{extra})"


register(OpDef(
    "rope", (Param("x", "tensor"), Param("offset", "int", 0, aliases=("pos",)),
             Param("base", "float", 10000.0, aliases=("theta",), within=POSITIVE),
             Param("scaling", "str", "none", choices=tuple(ROPE_SCALING), aliases=("rope_type",), static=True),
             Param("factor", "value", None, within=POSITIVE),
             Param("original_max_position", "int", None, aliases=("original_max_position_embeddings",),
                   within=(1.0, None, False)),
             Param("low_freq_factor", "value", None, within=POSITIVE),
             Param("high_freq_factor", "value", None, within=POSITIVE),
             Param("beta_fast", "value", None, within=POSITIVE), Param("beta_slow", "value", None, within=POSITIVE),
             Param("mscale", "value", None), Param("mscale_all_dim", "value", None),
             Param("attention_factor", "value", None, within=POSITIVE),
             Param("truncate", "bool", None, static=True),
             Param("short_factor", "list", None), Param("long_factor", "list", None),
             Param("rotary_dim", "int", None, aliases=("rotary_ndims",)),
             Param("interleaved", "bool", False, static=True)),
    _rope_rule, numpy=_np_rope, torch=_lower_rope,
    doc="rotary position embedding on [B, T, H, head_dim]: positions start at `offset`; the first `rotary_dim` "
        "dims rotate (all by default), in rotate-half pairs (HF Llama, GPT-NeoX) or, `interleaved`, adjacent ones "
        "(GPT-J); `scaling` is transformers' rope_type (linear, dynamic, llama3, yarn, longrope) with its "
        "parameters.", shard=sharding.last_axis("rotates feature pairs")))
