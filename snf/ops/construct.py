"""Tensors made from dims, or stretched along axes: `arange`, `expand`, `repeat_interleave`. The same
conventions as core.py.
"""

from __future__ import annotations

from ..dims import Dim
from ..ir import ScalarT, TensorT
from .lazy_numpy import np
from . import sharding
from .registry import OpDef, OpError, Param, registrar
from .shapes import FLOATS, axis_index

OPS: dict[str, OpDef] = {}
register = registrar(OPS)


def _int_dim(x, name: str, what: str) -> Dim:
    """An argument that must be a dim (an int known symbolically), from a `value` parameter."""
    if not (isinstance(x, ScalarT) and x.kind == "int" and x.dim is not None):
        raise OpError(f"{what} must be a dim (an int param or dim expression)", name, code="arg-kind")
    return x.dim


def _arange_rule(ctx, args):
    start = _int_dim(args["start"], "start", "each bound of `arange`")
    end = _int_dim(args["end"], "end", "each bound of `arange`") if args["end"] is not None else None
    lo, hi = (Dim.const(0), start) if end is None else (start, end)
    if lo.value is not None and hi.value is not None and lo.value > hi.value:
        raise OpError(f"`arange` counts up: its end ({hi.value}) is below its start ({lo.value})",
                      "end" if end is not None else "start", code="bad-constraint")
    if end is not None:  # start <= end: checked by Config, or on entry to forward (`arange(n)` is a size's)
        ctx.bound(lo, hi, "end")
    return TensorT((hi - lo,), args["dtype"])


def _np_arange(start, end=None, dtype="int64"):
    lo, hi = (0, start) if end is None else (start, end)
    return np.arange(lo, hi, dtype=np.float64 if dtype in FLOATS else np.int64)


def _lower_arange(call):
    bounds = call.code("start") if not call.given("end") else f"{call.code('start')}, {call.code('end')}"
    return f"torch.arange({bounds}, dtype={call.dtype(call.val('dtype'))}, device={call.device})"


register(OpDef("arange", (Param("start", "value"), Param("end", "value", None), Param("dtype", "dtype", "int64")),
               _arange_rule, numpy=_np_arange, torch=_lower_arange,
               doc="`start, start + 1, ..., end - 1` (`arange(n)` is 0..n-1), int64 unless `dtype` says otherwise.",
               shard=sharding.mixed("takes it as a bound")))


def _expand_rule(ctx, args):
    x, dims = args["x"], tuple(args["shape"])
    if len(dims) < x.rank:
        raise OpError(f"cannot expand {ctx.show(x.shape)} to {ctx.show(dims)}: fewer axes", "shape",
                      code="rank-mismatch", blame=("x", "shape"))
    for i, d in enumerate(dims):  # torch reads -1 as "keep this size": no size here is negative
        ctx.size(d, f"axis {i} of the new shape", "shape")
    for d, want in zip(x.shape, dims[len(dims) - x.rank:]):
        if d.value != 1 and not ctx.eq(d, want):
            raise OpError(f"cannot expand {ctx.show(x.shape)} to {ctx.show(dims)}: only axes of size 1 stretch "
                          f"({ctx.show_dim(d)} vs {ctx.show_dim(want)})", "shape", blame=("x", "shape"),
                          hint="to repeat each entry, use `repeat_interleave(x, n, axis)`")
    return TensorT(dims, x.dtype)


register(OpDef("expand", (Param("x", "tensor"), Param("shape", "dims")), _expand_rule,
               numpy=lambda x, shape: np.broadcast_to(x, shape),
               torch=lambda call: f"{call.code('x', prec=50)}.expand({call.dims_code('shape')})", view=True,
               doc="a view of `x` with its size-1 axes stretched to `shape` (new leading axes allowed).",
               shard=sharding.repeat))


def _repeat_interleave_rule(ctx, args):
    x, n = args["x"], args["repeats"]
    ax = axis_index(args["axis"], x.rank)
    if n is None:
        raise OpError("`repeats` must be a dim (an int param or dim expression)", "repeats", code="arg-kind")
    if n.value is not None and n.value < 1:
        raise OpError(f"the repeat count must be at least 1, got {n.value}", "repeats", code="bad-constraint")
    ctx.bound(Dim.const(1), n, "repeats")  # a repeat count from params or sizes: checked
    s = list(x.shape)
    s[ax] = ctx.dim_op(lambda p, q: p * q, s[ax], n)
    return TensorT(tuple(s), x.dtype)


def _lower_repeat_interleave(call):
    return f"{call.code('x', prec=50)}.repeat_interleave({call.code('repeats')}, dim={call.code('axis')})"


register(OpDef("repeat_interleave",
               (Param("x", "tensor"), Param("repeats", "int"), Param("axis", "int", aliases=("dim",), static=True)),
               _repeat_interleave_rule, numpy=lambda x, repeats, axis: np.repeat(x, repeats, axis=axis),
               torch=_lower_repeat_interleave,
               doc="each entry along `axis` repeated `repeats` times in place (`[a, b]` -> `[a, a, b, b]`).",
               shard=sharding.repeat))
