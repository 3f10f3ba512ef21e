"""Helpers shared by shape rules (and by the checker's indexed assignment): each checks one thing
and raises `OpError` naming the argument it blames."""

from __future__ import annotations

from ..dims import Dim
from ..ir import TensorT
from .registry import OpError

FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("int32", "int64")


def product(dims) -> Dim:
    """The product of some dims (1 for none)."""
    out = Dim.const(1)
    for d in dims:
        out = out * d
    return out


def same_dtype(a: TensorT, b: TensorT, an: str, bn: str) -> None:
    if a.dtype != b.dtype:
        raise OpError(f"`{bn}` is {b.dtype} but `{an}` is {a.dtype}", bn, code="dtype-mismatch",
                      hint="operands of one op must share a dtype", blame=(an, bn))


def require_float(t: TensorT, name: str) -> None:
    if t.dtype not in FLOATS:
        raise OpError(f"`{name}` must be a floating tensor, got {t.dtype}", name, code="dtype-mismatch")


def rank_at_least(t: TensorT, n: int, name: str, what: str = "") -> None:
    if t.rank < n:
        raise OpError(f"`{name}` must have at least {n} axes{what}, got rank {t.rank}", name, code="rank-mismatch")


def axis_index(axis: Dim | None, rank: int, name: str = "axis") -> int:
    v = axis.value if axis is not None else None
    if v is None:
        raise OpError(f"`{name}` must be a constant integer", name, code="arg-kind")
    if not -rank <= v < rank:
        raise OpError(f"axis {v} is out of range for a rank-{rank} tensor", name, code="bad-axis")
    return v % rank


def broadcast(ctx, s1: tuple, s2: tuple, n1: str, n2: str) -> tuple:
    out = []
    for i in range(1, max(len(s1), len(s2)) + 1):
        d1 = s1[-i] if i <= len(s1) else None
        d2 = s2[-i] if i <= len(s2) else None
        if d1 is None or (d2 is not None and d1.value == 1 and d2.value != 1):
            out.append(d2)
        elif d2 is None or d2.value == 1:
            out.append(d1)
        elif ctx.eq(d1, d2):
            out.append(d1)
        else:
            raise OpError(f"cannot broadcast {ctx.show(s1)} with {ctx.show(s2)}: "
                          f"{ctx.show_dim(d1)} != {ctx.show_dim(d2)}", n2, blame=(n1, n2))
    return tuple(reversed(out))


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
