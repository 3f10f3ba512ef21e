"""Initialisation of parameters and buffers: a declared initialiser (`= normal(std=0.02)`) is
checked here; without one, a tensor's role (weight, bias, norm_weight, embedding) is inferred from
the op parameter it is first passed to, and code generation picks the default init for that role."""

from __future__ import annotations

from .. import ir
from ..ir import FLOAT, ErrorT, ScalarT, TensorT
from ..ops.init import INIT_RANGES, INITS
from ..ops.shapes import FLOATS


class Inits:
    """Mixed into `Checker`; `self.roles` maps a parameter or buffer to its inferred role."""

    def initialiser(self, e: ir.Expr, ty: TensorT):
        """A typed `Op` of the initialiser, or None after reporting."""
        if isinstance(e, ir.Name) and e.id in INITS:
            e = ir.Call(e.id, (), (), e.span, e.span)
        if not isinstance(e, ir.Call) or e.func not in INITS:
            self.r.error("bad-default", "a parameter's initialiser is one of " + ", ".join(f"`{k}`" for k in INITS),
                         e.span)
            return None
        defaults = INITS[e.func]
        values = dict(defaults)
        names = list(defaults)
        for i, arg in enumerate(e.args):
            if i >= len(names):
                self.r.error("arity", f"`{e.func}` takes {len(names)} arguments", arg.span)
                return None
            values[names[i]] = arg
        for k in e.kwargs:
            if k.name not in defaults:
                self.r.error("unknown-arg", f"`{e.func}` has no argument `{k.name}`", k.span)
                return None
            values[k.name] = k.value
        args = []
        for name, value in values.items():
            if isinstance(value, float):
                args.append((name, ir.Lit(value, FLOAT)))
                continue
            typed = self.expr(value)
            if isinstance(typed.ty, ErrorT):
                return None
            if not (isinstance(typed.ty, ScalarT) and typed.ty.kind in ("int", "float")):
                self.r.error("arg-kind", f"`{name}` of `{e.func}` must be a number", value.span)
                return None
            if not self.note_number(typed, value.span, f"`{name}` of `{e.func}`", INIT_RANGES.get((e.func, name))):
                return None
            args.append((name, typed))
        if e.func in ("normal", "sinusoidal") and ty.dtype not in FLOATS:
            self.r.error("bad-default", f"`{e.func}` fills a floating tensor, and this one is {ty.dtype}", e.span,
                         hint="an integer or boolean tensor takes `zeros` (its default), `ones` or `constant`")
            return None
        if e.func == "sinusoidal" and ty.rank < 2:
            self.r.error("bad-default", "`sinusoidal` fills a [positions, dim] table", e.span)
            return None
        return ir.Op(e.func, tuple(args), ty, e.span)

    def note_role(self, param, arg: ir.TExpr) -> None:
        """`arg` passed as the op parameter `param`: its first role decides its default init."""
        if param.role and isinstance(arg, ir.Ref) and arg.kind in ("param", "layer_param", "buffer"):
            self.roles.setdefault(arg.name, param.role)

    def with_roles(self, tensors: list) -> tuple:
        return tuple(ir.replace(t, role=self.roles.get(t.name, "")) for t in tensors)
