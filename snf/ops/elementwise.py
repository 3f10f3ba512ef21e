"""Elementwise selection, bounds, casts and rounding: `where`, `abs`, `minimum`, `maximum`, `clamp`,
`cast`, and `int`, `floor`, `ceil`, `round` (of a number: an int, a dim when computed from params;
of a float tensor, elementwise). The same conventions as core.py.
"""

from __future__ import annotations

import math

from ..dims import Dim
from ..ir import ScalarT, TensorT
from .arithmetic import scalar_or_tensor
from .lazy_numpy import np
from . import sharding
from .registry import OpDef, OpError, Param, ScalarError, may_fail, registrar
from .shapes import FLOATS, INTS, broadcast, require_float, same_dtype

OPS: dict[str, OpDef] = {}
register = registrar(OPS)


def _number_fits(t: TensorT, n, tname: str, nname: str) -> None:
    """A Python number beside a tensor: a float with an integer or bool tensor, or an int with a bool
    one, would change the dtype (torch promotes to the number's kind)."""
    wider = isinstance(n, ScalarT) and (n.kind == "float" and t.dtype not in FLOATS
                                        or n.kind == "int" and t.dtype == "bool")
    if wider:
        target = "float32" if n.kind == "float" else "int64"
        raise OpError(f"`{nname}` is {'a' if n.kind == 'float' else 'an'} {n.kind} but `{tname}` is {t.dtype}", nname,
                      code="dtype-mismatch", hint=f"cast the tensor first: `cast(x, {target})`, or give a {t.dtype} value",
                      blame=(tname, nname))


def _where_rule(ctx, args):
    cond, x, y = args["cond"], args["a"], args["b"]
    if cond.dtype != "bool":
        raise OpError(f"`cond` must be a bool tensor (a comparison such as `x < y`), got {cond.dtype}", "cond",
                      code="dtype-mismatch")
    tx, ty = (t if isinstance(t, TensorT) else None for t in (x, y))
    if tx and ty:
        same_dtype(tx, ty, "a", "b")
    elif tx or ty:
        _number_fits(tx or ty, y if tx else x, "a" if tx else "b", "b" if tx else "a")
    dtype = (tx or ty).dtype if tx or ty else ("float32" if "float" in (x.kind, y.kind) else "int64")
    shape = cond.shape
    for n, t in (("a", tx), ("b", ty)):
        if t is not None:
            shape = broadcast(ctx, shape, t.shape, "cond", n)
    return TensorT(shape, dtype)


def _numbers_dtype(a, b) -> str | None:
    """The dtype `where` makes its first value a tensor of when both values are numbers."""
    if any(isinstance(t, TensorT) for t in (a, b)):
        return None
    return "float32" if "float" in (a.kind, b.kind) else "int64"


def _lower_where(call):
    dtype = _numbers_dtype(call.ty("a"), call.ty("b"))
    if dtype is not None:  # two numbers: say the dtype
        first = f"torch.tensor({call.code('a')}, dtype={call.dtype(dtype)}, device={call.device})"
        return f"torch.where({call.code('cond')}, {first}, {call.code('b')})"
    return f"torch.where({call.code('cond')}, {call.code('a')}, {call.code('b')})"


register(OpDef("where", (Param("cond", "tensor"), Param("a", "value"), Param("b", "value")), _where_rule,
               numpy=lambda cond, a, b: np.where(cond, a, b), torch=_lower_where,
               doc="`a` where `cond` holds, else `b`, elementwise with broadcasting.", shard=sharding.pointwise))


def _numeric(ctx, x, name: str):
    if isinstance(x, TensorT) and x.dtype == "bool":
        raise OpError(f"`{name}` must be a numeric tensor, got bool", name, code="dtype-mismatch",
                      hint="cast it first: `cast(x, int64)`")


def _abs_rule(ctx, args):
    x = args["x"]
    _numeric(ctx, x, "x")
    if isinstance(x, ScalarT):
        v = x.dim.value if x.dim is not None else None
        return ScalarT(x.kind, Dim.const(abs(v)) if v is not None else None)
    return x


register(OpDef("abs", (Param("x", "value"),), _abs_rule, numpy=lambda x: np.abs(x),
               torch=lambda call: scalar_or_tensor(call, "torch.abs", "abs"), doc="absolute value", elementwise=True,
               scalar=abs, shard=sharding.pointwise))


def _extremum_rule(fn):
    def rule(ctx, args):
        x, y = args["a"], args["b"]
        for n in ("a", "b"):
            _numeric(ctx, args[n], n)
        if isinstance(x, ScalarT) and isinstance(y, ScalarT):
            kind = "float" if "float" in (x.kind, y.kind) else "int"
            const = kind == "int" and x.dim is not None and y.dim is not None and \
                x.dim.value is not None and y.dim.value is not None
            return ScalarT(kind, Dim.const(fn(x.dim.value, y.dim.value)) if const else None)
        tx, ty = (t if isinstance(t, TensorT) else None for t in (x, y))
        if tx and ty:
            same_dtype(tx, ty, "a", "b")
            return TensorT(broadcast(ctx, tx.shape, ty.shape, "a", "b"), tx.dtype)
        _number_fits(tx or ty, y if tx else x, "a" if tx else "b", "b" if tx else "a")
        return tx or ty
    return rule


def _lower_extremum(name: str, bound: str, builtin: str):
    def lower(call):
        tx, ty = (isinstance(call.ty(n), TensorT) for n in ("a", "b"))
        if tx and ty:
            return f"torch.{name}({call.code('a')}, {call.code('b')})"
        if tx or ty:  # one number: a one-sided clamp
            t, n = ("a", "b") if tx else ("b", "a")
            return f"{call.code(t, prec=50)}.clamp({bound}={call.code(n)})"
        return f"{builtin}({call.code('a')}, {call.code('b')})"
    return lower


register(OpDef("minimum", (Param("a", "value"), Param("b", "value")), _extremum_rule(min),
               numpy=lambda a, b: np.minimum(a, b), torch=_lower_extremum("minimum", "max", "min"),
               doc="elementwise minimum, with broadcasting", elementwise=True, shard=sharding.pointwise))
register(OpDef("maximum", (Param("a", "value"), Param("b", "value")), _extremum_rule(max),
               numpy=lambda a, b: np.maximum(a, b), torch=_lower_extremum("maximum", "min", "max"),
               doc="elementwise maximum, with broadcasting", elementwise=True, shard=sharding.pointwise))


def _clamp_rule(ctx, args):
    x = args["x"]
    _numeric(ctx, x, "x")
    given = [n for n in ("min", "max") if args.get(n) is not None]
    if not given:
        raise OpError("`clamp` needs `min`, `max` or both", "x", code="missing-arg")
    for n in given:
        if isinstance(args[n], TensorT):
            raise OpError(f"`{n}` of `clamp` is a number; for a tensor bound use `minimum`/`maximum`", n,
                          code="arg-kind")
        _number_fits(x, args[n], "x", n)
    return x


def _lower_clamp(call):
    bounds = ", ".join(f"{n}={call.code(n)}" for n in ("min", "max") if call.given(n))
    return f"{call.code('x', prec=50)}.clamp({bounds})"


register(OpDef("clamp", (Param("x", "tensor"), Param("min", "value", None), Param("max", "value", None)), _clamp_rule,
               numpy=lambda x, min=None, max=None: np.clip(x, min, max), torch=_lower_clamp,
               doc="`x` limited to [min, max] (either bound may be left out)", elementwise=True,
               shard=sharding.pointwise))


def _cast_rule(ctx, args):
    return TensorT(args["x"].shape, args["dtype"])


def _np_cast(x, dtype):
    if dtype in FLOATS:
        return np.asarray(x, dtype=np.float64)  # the interpreter computes every float in float64
    return np.asarray(x).astype(np.int64 if dtype in INTS else bool)  # float -> int truncates, as torch


register(OpDef("cast", (Param("x", "tensor"), Param("dtype", "dtype")), _cast_rule, numpy=_np_cast,
               torch=lambda call: f"{call.code('x', prec=50)}.to({call.dtype(call.val('dtype'))})",
               doc="`x` converted to `dtype`; float to integer truncates toward zero.", passthrough=True,
               shard=sharding.pointwise))


# ----------------------------------------------------------------------------- integers from floats

def _rounding_rule(name: str):
    def rule(ctx, args):
        x = args["x"]
        if isinstance(x, TensorT):
            if name == "int":
                raise OpError("`int(...)` takes a number; convert a tensor with `cast(x, int64)`", "x",
                              code="arg-kind")
            require_float(x, "x")
            return x
        if x.kind not in ("int", "float"):
            raise OpError(f"`{name}(...)` takes a number, got {x.kind}", "x", code="arg-kind")
        return ScalarT("int", x.dim if x.kind == "int" else None)
    return rule


def _np_rounding(fn: str):
    return lambda x: getattr(np, fn)(x) if isinstance(x, np.ndarray) else int(getattr(np, fn)(x))


def _rounded(fn):
    """A rounding's `scalar`: inf and nan have no integer."""
    @may_fail
    def scalar(x):
        if not math.isfinite(x):
            raise ScalarError(f"rounds {x}")
        return fn(x)
    return scalar


_ROUNDING = {"int": ("trunc", "int", None, "toward zero, as Python's `int`", int),
             "floor": ("floor", "math.floor", "torch.floor", "down", math.floor),
             "ceil": ("ceil", "math.ceil", "torch.ceil", "up", math.ceil),
             "round": ("round", "round", "torch.round", "to the nearest integer, halves to even (as Python)", round)}
for _name, (_np_fn, _py, _pt, _how, _fn) in _ROUNDING.items():
    register(OpDef(_name, (Param("x", "value"),), _rounding_rule(_name), numpy=_np_rounding(_np_fn),
                   torch=(lambda py, pt: lambda call: scalar_or_tensor(call, pt, py))(_py, _pt),
                   doc=f"a number rounded {_how}: an int (a dim, in `param:`)"
                       + ("; on a float tensor, elementwise" if _pt else ""), scalar=_rounded(_fn),
                       shard=sharding.pointwise))
