"""Writes generated modules make: into a copy or in place (`_assign`, `_set_layer`), a KV cache grown
at the decode position (`_cache_cat`, `_narrow`, with the decode state `_DecodeState` a decode step
is handed), generate's per-layer cache buffers, and what keeps them working in a cast or autocast
model (`_held_dtype`, `_cat`, `_autocast_refuses`, `_autocast_dtype`).

Real Python, imported and tested as it is (tests/test_runtime.py); copied into a `--standalone`
module as the checks are (snf/runtime/checks.py).
"""

from __future__ import annotations

import threading
import weakref
from typing import NamedTuple, Optional

import torch
from torch import nn


class _DecodeState(NamedTuple):
    """A decode step of generate, as Model.forward and its blocks take it (`decode=`, from _decode):
    the caches are buffers of preallocated slots, `position` (a 0-d tensor) of them filled; the
    step's keys and values are written there in place, and attention reads the first `length`."""
    position: torch.Tensor
    length: Optional[int]


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


# generate's decode buffers of each model on CUDA, per thread (torch keeps a thread's CUDA graphs apart
# too): model -> {cache name: (their shapes, the buffers)}; gone with the thread, or with the model
_KEPT = threading.local()


def _decode_buffers(owner: Optional[nn.Module], name: str, count: int, shape: tuple, dtype: torch.dtype,
                    device: torch.device) -> list:
    """`count` zero buffers of `shape`; those of an `owner` (on CUDA) are kept for its next generate
    in this thread of the same shapes: there a compiled decode step is a CUDA graph, which reads its
    inputs at fixed addresses (compiling._ready_for_decode). Slots past the filled ones may hold an
    earlier call's values; attention never reads them."""
    kept = {}
    if owner is not None:
        if not hasattr(_KEPT, "by_model"):
            _KEPT.by_model = weakref.WeakKeyDictionary()
        kept = _KEPT.by_model.setdefault(owner, {})
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


def _autocast_dtype(device: str) -> Optional[torch.dtype]:
    """The dtype autocast computes in on `device` (a device type), None where it is off. A device
    without autocast (meta) has it off: torch.is_autocast_enabled raises there."""
    if torch.amp.is_autocast_available(device) and torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return None


def _autocast_refuses(*tensors: torch.Tensor) -> bool:
    """Whether autocast's promote rule (torch.cat, torch.stack, index_copy: the widest dtype of the
    tensors) would refuse one of `tensors`: a half dtype other than autocast's own, such as a spec's
    float16 value under CPU bfloat16 autocast. Plain type promotion, outside autocast, gives the
    widest dtype for every mix the rule accepts, and for these. Read while tracing: no graph cost."""
    dtype = _autocast_dtype(tensors[0].device.type)
    return dtype is not None and any(t.dtype in _HALF and t.dtype != dtype for t in tensors)


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
