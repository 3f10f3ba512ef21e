"""The run-time helpers generated modules call: input, config and value checks, caches, writes;
emitted after the model (attention is in attention.py, RoPE in rope.py, the losses in loss.py,
generate in generate.py).

Real Python, imported and tested as it is (tests/test_runtime.py). Generated modules import the
definitions they call from here (a `--standalone` one holds a copy of them and what they call:
snf/runtime/__init__.py). Edit here, then regenerate generated/; a change modules generated before
cannot use raises snf.runtime.ABI.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.utils.checkpoint
from torch import nn

from .compiling import _check_fields, _DecodeState


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
    if value is None:  # not computed: the condition it is computed under does not hold
        return
    if low is not None and high is not None:
        wanted = f"in {'(' if low_open else '['}{low:g}, {high:g}]"
    else:
        wanted = f"{'>' if low_open else '>='} {low:g}" if low is not None else "finite"
    if not math.isfinite(value) or low is not None and (value <= low if low_open else value < low) \
            or high is not None and value > high:
        raise ValueError(f"{what} must be {wanted}, got {value} ({where}); got {got}")


def _check_config(config, checks: tuple = ()) -> None:
    """Config.__post_init__: its fields' types (_check_fields), then its checks, in order. A row
    (holds, message, fields) raises ValueError(message; got each field's value) where holds(config)
    is false (a callable message gives the whole text); a row (number, (low, high, low_open), what,
    where, fields) checks number(config) with _check_number, unless it is None."""
    _check_fields(config)
    for row in checks:
        if len(row) == 5:
            number, bounds, what, where, fields = row
            _check_number(lambda: number(config), *bounds, what, where, _shown(config, fields))
        elif not row[0](config):
            holds, message, fields = row
            raise ValueError(message(config) if callable(message) else f"{message}; got {_shown(config, fields)}")


def _shown(config, fields: tuple) -> str:
    return ", ".join(f"{name}={getattr(config, name)}" for name in fields)


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


def _check_decode(decode: _DecodeState, size: Optional[int], names: str, *caches) -> None:
    """The decode position (a 0-d integer tensor: the filled slots) comes with the preallocated
    caches; the slots attention reads are an int in (position, size]. `size` None: the caches are
    recurrent states alone, with no slots to read."""
    position, length = decode
    if any(c is None for c in caches) or not (isinstance(position, torch.Tensor) and position.dim() == 0
                                              and not position.is_floating_point() and position.dtype != torch.bool):
        raise ValueError(f"the decode position must be a 0-d integer tensor, with the preallocated caches {names}")
    if size is None:
        return
    if isinstance(length, bool) or not isinstance(length, int) or not 0 < length <= size:
        raise ValueError(f"the decode length must be an int in [1, {size}], got {length!r}")
    if _eager_check(position) and not 0 <= int(position) < length:
        raise ValueError(f"the decode position {int(position)} is outside the {length} cache slots read")


def _cache_buffers(cache: torch.Tensor, axis: Optional[int], size: int, owner: Optional[nn.Module] = None,
                   name: str = "") -> list:
    """A stacked cache [n_layer, ...] as one buffer per layer with `size` slots along (the layer's)
    `axis`, the first ones holding the cache, in its dtype: the per-layer form `_check_cache`
    prefers. `axis` None: a recurrent state, copied whole into buffers of its own shape."""
    shape = cache.shape[1:] if axis is None else cache.shape[1:axis + 1] + (size,) + cache.shape[axis + 2:]
    buffers = _decode_buffers(owner if cache.is_cuda else None, name, cache.size(0), shape, cache.dtype, cache.device)
    for buffer, filled in zip(buffers, cache):
        (buffer if axis is None else buffer.narrow(axis, 0, filled.size(axis))).copy_(filled)
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


def _assign(x: torch.Tensor, index: tuple, value) -> torch.Tensor:
    """A copy of x with x[index] = value."""
    out = x.clone()
    out[index] = value
    return out


def _set_layer(x, layer: int, value: torch.Tensor) -> None:
    """x[layer] = value, in place, for a block's write at its own layer. As index_copy_ at a tensor
    index, a block compiled with dynamic sizes compiles one graph for every layer: `x[layer] = value`
    compiles layer 0 apart (inductor's reinplacing guards on the index being 0). `x` may be a list of
    per-layer buffers (generate's, in a decode step): the value is copied into the layer's."""
    if isinstance(x, (list, tuple)):
        x[layer].copy_(value)
        return None
    if not torch.compiler.is_compiling():  # eagerly, the plain write: no index tensor per layer
        x[layer] = value
        return None
    if _autocast_refuses(x, value):  # index_copy_ would refuse them: see _autocast_refuses
        with torch.autocast(x.device.type, enabled=False):
            return _set_layer(x, layer, value)
    index = torch.full((1,), layer, dtype=torch.long, device=x.device)
    x.index_copy_(0, index, value.to(x.dtype).unsqueeze(0))  # `.to`: x[layer] = value casts as it writes


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
