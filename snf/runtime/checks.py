"""The checks generated modules run: a Config's fields (their types) and conditions, forward's
inputs (rank, dtype, sizes, the ids an index reads), the dims' conditions, the numbers computed
from config values, and a decode step's caches.

Real Python, imported and tested as it is (tests/test_runtime.py). Generated modules import the
definitions they call from here (a `--standalone` one holds a copy of them and what they call:
snf/runtime/__init__.py). Edit here, then regenerate generated/; a change modules generated before
cannot use raises snf.runtime.ABI.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import torch

from .writes import _DecodeState


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


def _check_fields(config) -> None:
    """Each Config field holds its declared type: an int for `int` (not a bool), a bool for `bool`,
    a str for `str`, and a number for `float` (kept as a float); a list field (`tuple[str, ...]`) a
    list or tuple of them, kept as a tuple."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        kind = field.type[6:-6] if field.type.startswith("tuple[") else None  # tuple[str, ...] -> str
        if kind is not None:
            if not isinstance(value, (list, tuple)):
                raise TypeError(f"Config.{field.name} must be a list of {kind}, got {value!r}")
            items = tuple(_field_value(field.name, kind, v, f"[{i}]") for i, v in enumerate(value))
            object.__setattr__(config, field.name, items)  # frozen: only while it is being made
            continue
        checked = _field_value(field.name, field.type, value, "")
        if checked is not value:  # an int given for a float
            object.__setattr__(config, field.name, checked)


def _field_value(name: str, kind: str, value, where: str):
    """`value` as a field (or a list field's item) of this kind holds it; TypeError if it is none."""
    if kind == "float" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    ok = {"int": isinstance(value, int) and not isinstance(value, bool), "bool": isinstance(value, bool),
          "float": isinstance(value, float), "str": isinstance(value, str)}[kind]
    if not ok:
        raise TypeError(f"Config.{name}{where} must be {'a' if kind[0] in 'bfs' else 'an'} {kind}, got {value!r}")
    return value


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
