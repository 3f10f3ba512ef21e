"""Rotary position embeddings as generated modules run them: plain, partial and interleaved
rotation, and transformers' scaling types (linear, dynamic, llama3, yarn, longrope), with the
frequencies computed in float32 or wider; and the fixed sinusoidal table.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from .writes import _autocast_refuses


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


def _sinusoidal(shape, base: float) -> torch.Tensor:
    """The fixed sin/cos position table of 'Attention Is All You Need' (even columns sin, odd cos)."""
    n, d = shape[-2], shape[-1]
    pos = torch.arange(n, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * -(math.log(base) / d))
    table = torch.zeros(n, d)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div)[:, : d // 2]
    return table.reshape(shape)
