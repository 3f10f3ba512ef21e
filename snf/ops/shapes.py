"""Helpers shared by shape rules (and by the checker's indexed assignment)."""

from __future__ import annotations

from ..dims import Dim
from .registry import OpError


def slices_shape(ctx, shape: tuple, items: tuple, name: str) -> tuple:
    """The shape of `x[items]` for `x` of `shape`: an index drops its axis, a slice keeps its length;
    a slice end past its axis is an error (or a run-time check, through `ctx.bound`)."""
    if len(items) > len(shape):
        raise OpError(f"{len(items)} indices for a rank-{len(shape)} tensor {ctx.show(shape)}", name,
                      code="rank-mismatch")
    out = []
    for d, it in zip(shape, items):
        if isinstance(it, Dim):  # a single index drops the axis
            continue
        lo = it.lo if it.lo is not None else Dim.const(0)
        hi = it.hi if it.hi is not None else d
        if it.hi is not None:
            ctx.bound(hi, d, name)
        out.append(hi - lo)
    return tuple(out) + tuple(shape[len(items):])
