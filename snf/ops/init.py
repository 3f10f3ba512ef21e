"""Parameter and buffer initialisers declared in a spec (`w : Tensor(...) = normal(std=0.02)`)."""

from __future__ import annotations

from .. import ir
from ..ir import FLOAT, ScalarT, TensorT

# name -> (allowed keyword args with defaults)
INITS: dict[str, dict] = {
    "normal": {"mean": 0.0, "std": 0.02},
    "zeros": {},
    "ones": {},
    "constant": {"value": 0.0},
    "sinusoidal": {"base": 10000.0},
}


def check_init(checker, e: ir.Expr, ty: TensorT):
    """Validate an initialiser expression; returns a typed `Op`-like Lit tuple, or None after reporting."""
    if isinstance(e, ir.Name) and e.id in INITS:
        e = ir.Call(e.id, (), (), e.span, e.span)
    if not isinstance(e, ir.Call) or e.func not in INITS:
        checker.r.error("bad-default", "a parameter's initialiser is one of " + ", ".join(f"`{k}`" for k in INITS),
                        e.span)
        return None
    spec = INITS[e.func]
    values = dict(spec)
    names = list(spec)
    for i, a in enumerate(e.args):
        if i >= len(names):
            checker.r.error("arity", f"`{e.func}` takes {len(names)} arguments", a.span)
            return None
        values[names[i]] = a
    for k in e.kwargs:
        if k.name not in spec:
            checker.r.error("unknown-arg", f"`{e.func}` has no argument `{k.name}`", k.span)
            return None
        values[k.name] = k.value
    args = []
    for k, v in values.items():
        if isinstance(v, float):
            args.append((k, ir.Lit(v, FLOAT)))
            continue
        t = checker.expr(v)
        if not (isinstance(t.ty, ScalarT) and t.ty.kind in ("int", "float")):
            checker.r.error("arg-kind", f"`{k}` of `{e.func}` must be a number", v.span)
            return None
        args.append((k, t))
    if e.func == "sinusoidal" and (ty.rank < 2):
        checker.r.error("bad-default", "`sinusoidal` fills a [positions, dim] table", e.span)
        return None
    return ir.Op(e.func, tuple(args), ty, e.span)
