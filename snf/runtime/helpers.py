"""The run-time helpers generated modules call: input and value checks, attention, caches, RoPE;
emitted after the model (the losses are in loss.py, generate in generate.py).

Real Python, imported and tested as it is (tests/test_runtime.py). Generated modules import the
definitions they call from here (a `--standalone` one holds a copy of them and what they call:
snf/runtime/__init__.py). Edit here, then regenerate generated/; a change modules generated before
cannot use raises snf.runtime.ABI.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from .compiling import _DecodeState


def _fits(t, rank: int, dtype: str, sizes: dict) -> bool:
    """`rank` axes, the sizes given, and the spec's dtype (any floating dtype for a floating one:
    autocast, or a cast of the model, decides the dtype it computes in)."""
    return (isinstance(t, torch.Tensor) and t.dim() == rank and all(t.size(a) == n for a, n in sizes.items())
            and (t.is_floating_point() if "float" in dtype else t.dtype == getattr(torch, dtype)))


def _described(t) -> str:
    return f"{list(t.shape)} {str(t.dtype).replace('torch.', '')}" if isinstance(t, torch.Tensor) else type(t).__name__


def _check_input(name: str, t: torch.Tensor, rank: int, shape: str, dtype: str, sizes: Optional[dict] = None) -> None:
    """Rank, dtype, and the sizes of axes fixed by the config, of one input."""
    if not _fits(t, rank, dtype, sizes or {}):
        raise ValueError(f"input {name} must be {shape} {dtype}, got {_described(t)}")


def _eager_check(t: torch.Tensor) -> bool:
    """Whether to check a tensor's values here: on the CPU, outside torch.compile. On an accelerator
    a check would wait for the device (a host sync) every step, so it is left to the kernels."""
    return not torch.compiler.is_compiling() and t.device.type == "cpu" and t.numel() > 0


def _check_index(name: str, t: torch.Tensor, size: int, size_name: str) -> None:
    """The ids in `t` index a table of `size` rows: each must be in [0, size)."""
    if _eager_check(t):
        low, high = int(t.min()), int(t.max())
        if low < 0 or high >= size:
            raise ValueError(f"input {name} must hold ids in [0, {size_name}) = [0, {size}), got "
                             f"{low if low < 0 else high}")


def _check_dims(lhs_name: str, lhs, op: str, rhs_name: str, rhs, where: str, why: str = "",
                sizes: Optional[dict] = None) -> None:
    """A run-time condition on dims (the spec's `assert`, an index or slice within its axis, a
    size that is not negative, an exact division). A dim that is a cache position (a 0-d tensor)
    is checked eagerly on the CPU only (see _eager_check). `why` is the checker's own sentence,
    said with the `sizes` it is about."""
    if isinstance(lhs, torch.Tensor):
        if not _eager_check(lhs):
            return
        lhs = int(lhs)
    if not {"<=": lhs <= rhs, "<": lhs < rhs, ">=": lhs >= rhs, ">": lhs > rhs, "==": lhs == rhs}[op]:
        if why:
            got = ", ".join(f"{name} = {int(value)}" for name, value in (sizes or {}).items())
            raise ValueError(f"{why}, got {got} ({where})")
        raise ValueError(f"expected {lhs_name} {op} {rhs_name}, got {lhs_name} = {lhs} and {rhs_name} = {rhs} ({where})")


def _check_number(compute, low: Optional[float], high: Optional[float], low_open: bool, what: str, where: str,
                  got: str) -> None:
    """A number Config computes from its fields (an initialiser's std, a dropout rate, a derived
    float): it must compute, be finite and lie in [low, high] (low excluded when low_open)."""
    try:
        value = compute()
    except (ArithmeticError, ValueError) as err:  # a division by zero, math's domain errors, an overflow
        raise ValueError(f"{what} cannot be computed ({err}) ({where}); got {got}") from None
    if low is not None and high is not None:
        wanted = f"in {'(' if low_open else '['}{low:g}, {high:g}]"
    else:
        wanted = f"{'>' if low_open else '>='} {low:g}" if low is not None else "finite"
    if not math.isfinite(value) or low is not None and (value <= low if low_open else value < low) \
            or high is not None and value > high:
        raise ValueError(f"{what} must be {wanted}, got {value} ({where}); got {got}")


def _check_together(names: tuple, values: tuple) -> None:
    """Inputs that share a run-time dim are given together, or not at all."""
    if len({v is None for v in values}) != 1:
        raise ValueError(", ".join(names) + " must be given together, or not at all")


def _check_cache(name: str, cache, rank: int, shape: str, dtype: str, sizes: dict) -> None:
    """A preallocated cache: one tensor stacked over the layers (axis 0), or a list of per-layer
    tensors. The list compiles better: each buffer is written in place on its own, where writing
    into a slice of one stacked input makes the compiled step copy the whole input back."""
    if not isinstance(cache, (list, tuple)):
        return _check_input(name, cache, rank, shape, dtype, sizes)
    layer = {axis - 1: n for axis, n in sizes.items() if axis}
    if len(cache) != sizes[0] or not all(_fits(t, rank - 1, dtype, layer) for t in cache):
        raise ValueError(f"input {name} must be {shape} {dtype}, or a list of its {sizes[0]} layers, "
                         f"got a list of {[_described(t) for t in cache]}")


def _check_decode(decode: _DecodeState, size: int, names: str, *caches) -> None:
    """The decode position (a 0-d integer tensor: the filled slots) comes with the preallocated
    caches; the slots attention reads are an int in (position, size]."""
    position, length = decode
    if any(c is None for c in caches) or not (isinstance(position, torch.Tensor) and position.dim() == 0
                                              and not position.is_floating_point() and position.dtype != torch.bool):
        raise ValueError(f"the decode position must be a 0-d integer tensor, with the preallocated caches {names}")
    if isinstance(length, bool) or not isinstance(length, int) or not 0 < length <= size:
        raise ValueError(f"the decode length must be an int in [1, {size}], got {length!r}")
    if _eager_check(position) and not 0 <= int(position) < length:
        raise ValueError(f"the decode position {int(position)} is outside the {length} cache slots read")


def _cache_buffers(cache: torch.Tensor, axis: int, size: int, owner: Optional[nn.Module] = None,
                   name: str = "") -> list:
    """A stacked cache [n_layer, ...] as one buffer per layer with `size` slots along (the layer's)
    `axis`, the first ones holding the cache, in its dtype: the per-layer form `_check_cache`
    prefers."""
    shape = cache.shape[1:axis + 1] + (size,) + cache.shape[axis + 2:]
    buffers = _decode_buffers(owner if cache.is_cuda else None, name, cache.size(0), shape, cache.dtype, cache.device)
    for buffer, filled in zip(buffers, cache):
        buffer.narrow(axis, 0, filled.size(axis)).copy_(filled)
    return buffers


def _decode_buffers(owner: Optional[nn.Module], name: str, count: int, shape: tuple, dtype: torch.dtype,
                    device: torch.device) -> list:
    """`count` zero buffers of `shape`; those of an `owner` (on CUDA) are kept for its next generate
    of the same shapes: there a compiled decode step is a CUDA graph, which reads its inputs at fixed
    addresses (compiling._ready_for_decode). Slots past the filled ones may hold an earlier call's
    values; attention never reads them."""
    kept = owner.__dict__.setdefault("_kept_buffers", {}) if owner is not None else {}  # the model's own
    key = (count, tuple(shape), dtype, device)
    if name in kept and kept[name][0] == key:
        return kept[name][1]
    buffers = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(count)]
    if owner is not None:
        kept[name] = (key, buffers)
    return buffers


def _held_dtype(model: nn.Module, default: torch.dtype) -> torch.dtype:
    """The floating dtype the model's tensors hold now (a cast's), `default` before it has any."""
    return next((t.dtype for t in (*model.parameters(), *model.buffers()) if t.is_floating_point()), default)


def _attention(q, k, v, mask, causal: bool, dropout_p: float = 0.0, scale: Optional[float] = None,
               decode: Optional[_DecodeState] = None, window: Optional[int] = None,
               bias: Optional[torch.Tensor] = None):
    """SDPA over [B, H, T, hd] with a [B, T_keys] padding mask, a bottom-right causal mask, a sliding
    `window` (query i sees keys in (i - window, i]) and an additive `bias` [B, H, T, T_keys]. k and v
    may have fewer heads than q (grouped-query attention). A query that sees no key gives zeros.

    In a decode step (`decode`), the keys are a preallocated cache: key j is visible to query i when
    j <= decode.position + i (later slots are empty)."""
    tq, tk = q.size(-2), k.size(-2)
    gqa = True if q.size(1) != k.size(1) else False  # a Python branch: SDPA refuses a symbolic bool
    if decode is None and mask is None and window is None and bias is None \
            and (not causal or tq == 1 or tq == tk):
        # no mask needed: one query (a decode step) sees every key; equal lengths is plain causal
        if causal and tq > 1:  # a Python branch, so compiled code never sees a symbolic bool
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale,
                                                  enable_gqa=gqa)
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale, enable_gqa=gqa)
    allowed = _visible_keys(q, k, mask, causal, decode, window)
    if decode is not None and tq == 1 and bias is None and dropout_p == 0.0 and q.device.type == "cpu" \
            and torch.compiler.is_compiling():
        # a compiled decode step on the CPU: one query over a buffer of mostly empty slots. Written
        # out, it fuses with its neighbours and beats an SDPA call there (benchmarks/README.md); each
        # key/value head serves its group of query heads without copying the cache
        b, h, _, hd = q.shape
        grouped = q.reshape(b, k.size(1), h // k.size(1), hd)
        scores = (grouped @ k.transpose(-1, -2)) * (hd ** -0.5 if scale is None else scale)
        wide = torch.promote_types(scores.dtype, torch.float32)
        probs = scores.masked_fill(~allowed, float("-inf")).to(wide).softmax(-1)
        if mask is not None:
            probs = probs.nan_to_num(0.0)  # a query whose every key is padding
        return (probs.to(v.dtype) @ v).reshape(b, h, 1, v.size(-1))
    scores_mask = allowed
    if bias is not None:
        bias = bias.to(q.dtype)
        scores_mask = bias if allowed is None else bias.masked_fill(~allowed, float("-inf"))
    if gqa and scores_mask is not None and q.device.type == "cuda":
        # masked grouped-query SDPA falls back to the math kernel on CUDA: repeat the k/v heads instead
        k, v = (t.repeat_interleave(q.size(1) // t.size(1), dim=1) for t in (k, v))
        gqa = False
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=scores_mask, dropout_p=dropout_p, scale=scale,
                                         enable_gqa=gqa)
    if mask is not None or causal and tk < tq:
        # a query that sees no key (all padding, or before the first key) gets zeros on every backend
        out = out.masked_fill(~allowed.any(-1, keepdim=True), 0.0)
    return out


def _visible_keys(q, k, mask, causal: bool, decode: Optional[_DecodeState] = None,
                  window: Optional[int] = None) -> Optional[torch.Tensor]:
    """Which keys each query sees, a bool [B or 1, 1, T, T_keys] (None: every key), for _attention."""
    tq, tk = q.size(-2), k.size(-2)
    allowed = None
    if causal:  # key j is visible to query i (at position first + i) when j <= first + i
        first = decode.position if decode is not None else tk - tq
        rows = first + torch.arange(tq, device=q.device)[:, None]
        cols = torch.arange(tk, device=q.device)[None, :]
        allowed = cols <= rows if window is None else (cols <= rows) & (cols > rows - window)
    if mask is not None:
        keep = (mask != 0)[:, None, None, :]
        allowed = keep if allowed is None else allowed & keep
    return allowed


def _softcapped_attention(q, k, v, mask, causal: bool, dropout_p: float = 0.0, scale: Optional[float] = None,
                          decode: Optional[_DecodeState] = None, window: Optional[int] = None,
                          bias: Optional[torch.Tensor] = None, *, softcap: float) -> torch.Tensor:
    """_attention with Gemma 2's logit soft-capping, written out as transformers computes it: the
    scores q k^T * scale are capped (softcap * tanh(scores / softcap)), then the bias is added and
    the keys a query does not see removed, and the softmax is taken in float32. SDPA has no place
    for the cap. A query that sees no key gives zeros."""
    allowed = _visible_keys(q, k, mask, causal, decode, window)
    if q.size(1) != k.size(1):  # grouped-query attention: each key/value head serves its group of query heads
        k, v = (t.repeat_interleave(q.size(1) // t.size(1), dim=1) for t in (k, v))
    scores = (q @ k.transpose(-1, -2)) * (q.size(-1) ** -0.5 if scale is None else scale)
    scores = softcap * torch.tanh(scores / softcap)
    if bias is not None:
        scores = scores + bias.to(scores.dtype)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    probs = scores.to(torch.promote_types(scores.dtype, torch.float32)).softmax(-1)
    if allowed is not None:  # a row with no key is all -inf: its softmax is nan
        probs = probs.masked_fill(~allowed.any(-1, keepdim=True), 0.0)
    if dropout_p > 0.0:
        probs = F.dropout(probs, p=dropout_p)
    return probs.to(v.dtype) @ v


def _rope(x: torch.Tensor, offset, base: float, rotary_dim: Optional[int] = None,
          interleaved: bool = False) -> torch.Tensor:
    """Rotary embedding on [B, T, H, hd], positions offset..offset+T-1. The first `rotary_dim` dims
    (all by default) rotate, the rest pass through (GPT-NeoX, Phi, GPT-J); they rotate in the pairs
    (i, i + rotary_dim / 2) (transformers' rotate_half: Llama, GPT-NeoX) or, `interleaved`, in the
    adjacent pairs (2i, 2i + 1) (rotate_every_two: GPT-J, CodeGen). Unscaled: a rope_type lowers to
    the scaled variant below, so a module without scaling holds none of that."""
    dim = x.size(3) if rotary_dim is None else rotary_dim
    return _rotate(x, offset, dim, _inv_freq(dim, base, x.device, _wide(x)), 1.0, interleaved)


def _scaled_rope(x: torch.Tensor, offset, base: float, rotary_dim: Optional[int] = None, interleaved: bool = False,
                 **scaling) -> torch.Tensor:
    """_rope with frequencies scaled as `scaling`, transformers' rope_type with its parameters, says
    (_rope_frequencies)."""
    dim = x.size(3) if rotary_dim is None else rotary_dim
    inv_freq, attention_scaling = _rope_frequencies(dim, base, offset + x.size(1), x.device, dtype=_wide(x), **scaling)
    return _rotate(x, offset, dim, inv_freq, attention_scaling, interleaved)


def _wide(x: torch.Tensor) -> torch.dtype:
    """RoPE's angles' dtype: float32 as transformers computes them, float64 kept."""
    return torch.promote_types(x.dtype, torch.float32)


def _inv_freq(dim: int, base: float, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """RoPE's unscaled inverse frequencies over `dim` dims, [dim / 2]."""
    return 1.0 / (base ** (torch.arange(0, dim, 2, device=device, dtype=dtype) / dim))


_HALF = (torch.float16, torch.bfloat16)


def _autocast_refuses(*tensors: torch.Tensor) -> bool:
    """Whether autocast's promote rule (torch.cat, torch.stack, index_copy: the widest dtype of the
    tensors) would refuse one of `tensors`: a half dtype other than autocast's own, such as a spec's
    float16 value under CPU bfloat16 autocast. Plain type promotion, outside autocast, gives the
    widest dtype for every mix the rule accepts, and for these. Read while tracing: no graph cost."""
    device = tensors[0].device.type
    return (torch.is_autocast_enabled(device)
            and any(t.dtype in _HALF and t.dtype != torch.get_autocast_dtype(device) for t in tensors))


def _cat(tensors, dim: int = 0) -> torch.Tensor:
    """`concat` of a half dtype: torch.cat, outside autocast where it would refuse them."""
    if _autocast_refuses(*tensors):
        with torch.autocast(tensors[0].device.type, enabled=False):
            return torch.cat(tensors, dim=dim)
    return torch.cat(tensors, dim=dim)


def _rotate(x: torch.Tensor, offset, dim: int, inv_freq: torch.Tensor, attention_scaling: float,
            interleaved: bool) -> torch.Tensor:
    """The first `dim` dims of x [B, T, H, hd] rotated by the angles of positions offset..offset+T-1
    at `inv_freq`, cos and sin scaled by `attention_scaling`."""
    if _autocast_refuses(x):  # its torch.cat / torch.stack would refuse x: see _autocast_refuses
        with torch.autocast(x.device.type, enabled=False):
            return _rotate(x, offset, dim, inv_freq, attention_scaling, interleaved)
    t, hd, wide = x.size(1), x.size(3), inv_freq.dtype
    pos = torch.arange(t, device=x.device, dtype=wide) + offset
    angles = torch.outer(pos, inv_freq)
    emb = angles.repeat_interleave(2, dim=-1) if interleaved else torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    if attention_scaling != 1.0:  # yarn's (a Python number: no work, and no graph, for the others)
        cos, sin = cos * attention_scaling, sin * attention_scaling
    cos, sin = cos[None, :, None, :].to(x.dtype), sin[None, :, None, :].to(x.dtype)
    r = x[..., :dim]
    if interleaved:
        rotated = torch.stack((-r[..., 1::2], r[..., ::2]), dim=-1).flatten(-2)
    else:
        rotated = torch.cat((-r[..., dim // 2:], r[..., : dim // 2]), dim=-1)
    out = r * cos + rotated * sin
    return out if dim == hd else torch.cat((out, x[..., dim:]), dim=-1)


def _rope_frequencies(dim: int, base: float, seq_len, device: torch.device, dtype: torch.dtype = torch.float32,
                      scaling: str = "none",
                      factor: float = 1.0, original_max_position: int = 1, low_freq_factor: float = 1.0,
                      high_freq_factor: float = 4.0, beta_fast: Optional[float] = None,
                      beta_slow: Optional[float] = None, mscale: Optional[float] = None,
                      mscale_all_dim: Optional[float] = None, attention_factor: Optional[float] = None,
                      truncate: Optional[bool] = None, short_factor=None, long_factor=None):
    """(inverse frequencies [dim / 2] in `dtype`, the scale of cos and sin) of RoPE over `dim` dims for a
    sequence of `seq_len` positions: transformers' ROPE_INIT_FUNCTIONS[scaling], step for step, so in
    float32 it gives the same numbers. "dynamic" recomputes the base from the sequence length once
    it passes original_max_position (transformers' dynamic_rope_update; seq_len may be a 0-d tensor,
    a cache position plus the new tokens)."""
    if scaling == "dynamic":  # NTK-aware scaling; past the trained length transformers computes it as a tensor
        if isinstance(seq_len, torch.Tensor) or seq_len > original_max_position:
            seq_len = torch.as_tensor(seq_len, device=device).clamp(min=original_max_position)
        else:
            seq_len = original_max_position
        base = base * ((factor * seq_len / original_max_position) - (factor - 1)) ** (dim / (dim - 2))
    inv_freq = _inv_freq(dim, base, device, dtype)
    if scaling == "linear":
        return inv_freq / factor, 1.0
    if scaling == "llama3":
        low_wavelen, high_wavelen = original_max_position / low_freq_factor, original_max_position / high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (original_max_position / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        return torch.where(~(wavelen < high_wavelen) * ~(wavelen > low_wavelen), smoothed, scaled), 1.0
    if scaling == "yarn":
        return _yarn_frequencies(dim, base, device, dtype, factor, original_max_position, beta_fast or 32,
                                 beta_slow or 1, mscale, mscale_all_dim, attention_factor, truncate is not False)
    if scaling == "longrope":  # Phi-3: the long factors once the sequence passes the trained length
        wide = torch.float64 if dtype == torch.float64 else torch.float32  # float32 as transformers computes it
        shape = torch.arange(0, dim, 2, dtype=torch.int64, device=device).to(wide) / dim

        def inverse(factors):
            return 1.0 / (torch.tensor(factors, dtype=wide, device=device) * base ** shape)
        if isinstance(seq_len, int) and not torch.compiler.is_compiling():  # eagerly: the one set it uses
            inv = inverse(long_factor if seq_len > original_max_position else short_factor)
        else:  # a tensor or symbolic length: both sets and a select, so that the length stays symbolic
            length = torch.zeros((), dtype=torch.int64, device=device) + seq_len
            inv = torch.where(length > original_max_position, inverse(long_factor), inverse(short_factor))
        if attention_factor is None:
            attention_factor = 1.0 if factor is None or factor <= 1.0 else \
                math.sqrt(1 + math.log(factor) / math.log(original_max_position))
        return inv.to(dtype), attention_factor
    return inv_freq, 1.0


def _yarn_mscale(scale: float, mscale: float = 1) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_frequencies(dim: int, base: float, device: torch.device, dtype: torch.dtype, factor: float, original: int,
                      fast: float, slow: float, mscale, mscale_all_dim, attention_factor, truncate: bool):
    """YaRN (transformers' _compute_yarn_parameters): each frequency a blend of itself (extrapolation)
    and itself / factor (interpolation), ramping between the dims that turn `fast` and `slow` times
    over `original` positions; cos and sin scaled by the attention factor."""
    if attention_factor is None:
        attention_factor = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim) \
            if mscale and mscale_all_dim else _yarn_mscale(factor)
    low, high = (dim * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(base)) for turns in (fast, slow))
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # no zero-width ramp
    pos_freqs = base ** (torch.arange(0, dim, 2, device=device, dtype=dtype) / dim)
    ramp = torch.clamp((torch.arange(dim // 2, dtype=dtype) - low) / (high - low), 0, 1).to(device)
    kept = 1 - ramp
    return (1.0 / (factor * pos_freqs)) * (1 - kept) + (1.0 / pos_freqs) * kept, float(attention_factor)


def _assign(x: torch.Tensor, index: tuple, value) -> torch.Tensor:
    """A copy of x with x[index] = value."""
    out = x.clone()
    out[index] = value
    return out


def _set_layer(x: torch.Tensor, layer: int, value: torch.Tensor) -> None:
    """x[layer] = value, in place, for a block's write at its own layer. As index_copy_ at a tensor
    index, a block compiled with dynamic sizes compiles one graph for every layer: `x[layer] = value`
    compiles layer 0 apart (inductor's reinplacing guards on the index being 0)."""
    if not torch.compiler.is_compiling():  # eagerly, the plain write: no index tensor per layer
        x[layer] = value
        return None
    if _autocast_refuses(x, value):  # index_copy_ would refuse them: see _autocast_refuses
        with torch.autocast(x.device.type, enabled=False):
            return _set_layer(x, layer, value)
    index = torch.full((1,), layer, dtype=torch.long, device=x.device)
    x.index_copy_(0, index, value.to(x.dtype).unsqueeze(0))  # `.to`: x[layer] = value casts as it writes


def _sinusoidal(shape, base: float) -> torch.Tensor:
    """The fixed sin/cos position table of 'Attention Is All You Need' (even columns sin, odd cos)."""
    n, d = shape[-2], shape[-1]
    pos = torch.arange(n, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * -(math.log(base) / d))
    table = torch.zeros(n, d)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div)[:, : d // 2]
    return table.reshape(shape)


def _cache_cat(past: torch.Tensor, new: torch.Tensor, decode: Optional[_DecodeState] = None) -> torch.Tensor:
    """`past` ++ `new` along time (axis 1). In a decode step, `past` is a preallocated buffer: `new`
    is written in place at the decode position and the buffer's first `length` slots are returned.
    The result has `new`'s dtype, the one the model computes in: a cast or autocast model is fed
    back its cache as the spec's float32."""
    if _autocast_refuses(past, new):  # torch.cat / index_copy_ would refuse them: see _autocast_refuses
        with torch.autocast(new.device.type, enabled=False):
            return _cache_cat(past, new, decode)
    if decode is None:
        return torch.cat([past.to(new.dtype), new], dim=1)
    past.index_copy_(1, decode.position + torch.arange(new.size(1), device=new.device), new.to(past.dtype))
    return past[:, :decode.length]


def _narrow(x: torch.Tensor, dim: int, start, length: int) -> torch.Tensor:
    """x[start:start + length] along `dim`; `start` may be a 0-d tensor (a cache position)."""
    if isinstance(start, torch.Tensor):
        return x.index_select(dim, start + torch.arange(length, device=x.device))
    return x.narrow(dim, start, length)
