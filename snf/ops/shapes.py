"""Helpers shared by shape rules (and by the checker's indexed assignment): each checks one thing
and raises `OpError` naming the argument it blames."""

from __future__ import annotations

from ..dims import Dim
from ..ir import ScalarT, TensorT
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


def stored(dtype: str, value, arg: str = "value") -> None:
    """`value` (a TensorT or ScalarT) written into a tensor of `dtype` (`x[i] = value`, `assign`):
    torch would cast it silently, so it must already be of that dtype (a number: of its kind)."""
    if isinstance(value, TensorT):
        if value.dtype != dtype:
            raise OpError(f"the value is {value.dtype} but the tensor written into is {dtype}", arg,
                          code="dtype-mismatch", hint="write a value of the tensor's own dtype")
        return
    fits = {"bool": ("bool",), "int": ("int",), "float": ("int", "float")}
    kind = "bool" if dtype == "bool" else "float" if dtype in FLOATS else "int"
    if isinstance(value, ScalarT) and value.kind not in fits[kind]:
        raise OpError(f"a {value.kind} written into a {dtype} tensor would be cast", arg, code="dtype-mismatch",
                      hint="write a value of the tensor's own kind")


def slices_shape(ctx, shape: tuple, items: tuple, name: str) -> tuple:
    """The shape of `x[items]` for `x` of `shape`, with Python's meaning of each item: an index
    drops its axis, a slice keeps `hi - lo` of it, and a negative constant counts from the end.

    Every index and bound must lie within its axis (a negative one too: it may not wrap past the
    start), and a slice may not end before it starts, so the length is exactly `hi - lo`: proved,
    or checked by the module (`ctx.need`); false for the default config is an `index-range` error."""
    if len(items) > len(shape):
        raise OpError(f"{len(items)} indices for a rank-{len(shape)} tensor {ctx.show(shape)}", name,
                      code="rank-mismatch")
    out = []
    for axis, (d, it) in enumerate(zip(shape, items)):
        if isinstance(it, Dim):  # a single index drops the axis
            _index(ctx, it, d, axis, name)
            continue
        lo = _bound(ctx, it.lo, d, Dim.const(0), axis, name, "start")
        hi = _bound(ctx, it.hi, d, d, axis, name, "end")
        if not ctx.need(lo, "<=", hi, f"the slice {ctx.show_dim(lo)}:{ctx.show_dim(hi)} of axis {axis} "
                                      f"must not end before it starts"):
            raise OpError(f"the slice {ctx.show_dim(lo)}:{ctx.show_dim(hi)} of axis {axis} ends before it starts"
                          f"{ctx.defaults_note(hi - lo)}", name, code="index-range",
                          hint="a slice keeps hi - lo entries, so it needs lo <= hi")
        out.append(hi - lo)
    return tuple(out) + tuple(shape[len(items):])


def _index(ctx, i: Dim, d: Dim, axis: int, name: str) -> None:
    shown, size = ctx.show_dim(i), ctx.show_dim(d)
    why = f"index {shown} must lie within axis {axis}, of size {size}"
    if i.value is not None and i.value < 0:  # from the end: -1 is the last entry
        ok = ctx.need(-i, "<=", d, why)
    else:
        ok = ctx.need(Dim.const(0), "<=", i, why) and ctx.need(i + 1, "<=", d, why)
    if not ok:
        raise OpError(f"index {shown} is outside axis {axis}, of size {size}{ctx.defaults_note(d - i)}", name,
                      code="index-range", hint=f"an index of an axis of size {size} is 0 .. {size} - 1, or "
                                              f"-{size} .. -1 from the end")


def _bound(ctx, b: Dim | None, d: Dim, default: Dim, axis: int, name: str, which: str) -> Dim:
    """A slice bound as an offset from the axis start (a negative constant counts from the end)."""
    if b is None:
        return default
    shown, size = ctx.show_dim(b), ctx.show_dim(d)
    why = f"slice {which} {shown} must lie within axis {axis}, of size {size}"
    if b.value is not None and b.value < 0:
        ok = ctx.need(-b, "<=", d, why)
        at = d + b
    else:
        ok = ctx.need(Dim.const(0), "<=", b, why) and ctx.need(b, "<=", d, why)
        at = b
    if not ok:
        raise OpError(f"slice {which} {shown} is outside axis {axis}, of size {size}{ctx.defaults_note(d - b)}",
                      name, code="index-range", hint=f"slice bounds of an axis of size {size} are 0 .. {size}, or "
                                                     f"-{size} .. -1 from the end")
    return at


def divides(ctx, part: Dim, whole: Dim) -> bool:
    """`part` divides `whole` (grouped heads: each of `part` serves whole / part): proved, or a
    constraint on config values that `Config` checks; False when it is false for the defaults."""
    return ctx.eq(whole, part * ctx.dim_op(lambda p, r: p // r, whole, part))
