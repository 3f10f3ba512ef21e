"""Op calls: binding arguments to a registry op's signature, converting them for its shape rule,
and turning the rule's `OpError` into a located diagnostic.

Shape rules live in the op registry (snf/ops/); `ShapeCtx` is all a rule may ask of the checker.
"""

from __future__ import annotations


from .. import ir
from ..dims import Dim, DimError, Divides, equal
from ..ir import BOOL, FLOAT, STR, ErrorT, ListT, NoneT, ScalarT, SeqT, SliceT, TensorT
from ..names import close_name
from ..ops.registry import REQUIRED, OpError
from ..source import Span

ERR = ErrorT()
_FAIL = object()  # an argument that did not convert (already reported)


class ShapeCtx:
    """What a shape rule may ask of the checker."""

    def __init__(self, checker, span: Span):
        self.checker, self.span, self.recovered = checker, span, None

    def eq(self, a: Dim, b: Dim) -> bool:
        ok, conds = equal(a, b)
        if ok:
            for cond in conds:
                self.checker.require(cond, self.span)
        return ok

    def divisible(self, d: Dim, n: int) -> bool:
        if d.value is not None:
            return d.value % n == 0
        self.checker.require(Divides(d, Dim.const(n)), self.span)
        return True

    def static(self, d: Dim) -> bool:
        """Whether `d` names config values only (no run-time dim such as B or T)."""
        return not any(s in self.checker.runtime for s in d.symbols())

    def bound(self, lo: Dim, hi: Dim, arg: str) -> None:
        """`lo <= hi` (an `arange`'s start and end, a window's least size): proved, or checked by
        the module; a `bad-constraint` error when it is false for the default config."""
        shown = f"{self.show_dim(lo)} <= {self.show_dim(hi)}"
        if not self.need(lo, "<=", hi, f"`{arg}` needs {shown}"):
            raise OpError(f"`{arg}` needs {shown}, which is false{self.defaults_note(hi - lo)}", arg,
                          code="bad-constraint")

    def need(self, lhs: Dim, op: str, rhs: Dim, why: str = "") -> bool:
        """`lhs op rhs` must hold: proved, or checked by the module; False when it is false always
        or for the config's defaults (the rule then raises its error). See check/facts.py."""
        return self.checker.need(lhs, op, rhs, self.span, why)

    def size(self, d: Dim, what: str, arg: str | None = None) -> None:
        """`d` is the size of an axis: not negative (proved or checked); else an OpError."""
        if not self.checker.need(Dim.const(0), "<=", d, self.span, f"{what} must not be negative"):
            shown = self.show_dim(d) if d.value is not None else \
                f"{self.show_dim(d)} = {self.checker.at_defaults(d)} with the default config"
            raise OpError(f"{what} is {shown}: a size cannot be negative", arg, code="bad-constraint",
                          hint="sizes are dims >= 0; change the expression, or the defaults in `param:`")

    def defaults_note(self, d: Dim) -> str:
        """", with the default config" when `d` is only known through the defaults."""
        return "" if d.value is not None else " with the default config"

    def product(self, dims) -> Dim:
        out = Dim.const(1)
        for d in dims:
            out = self.dim_op(lambda a, b: a * b, out, d)
        return out

    def dim_op(self, fn, a: Dim, b: Dim) -> Dim:
        try:
            return fn(a, b)
        except (DimError, ZeroDivisionError) as e:
            raise OpError(str(e), code="bad-constraint")

    def show(self, shape) -> str:
        return self.checker.show(shape)

    def show_dim(self, d: Dim) -> str:
        return self.checker.show_dim(d)

    def recover(self, ty) -> None:
        """The rule found an error but knows what was meant: later checks continue from `ty`."""
        self.recovered = ty


def index_items(items) -> tuple[tuple, ir.TExpr | None]:
    """Index items as shape rules take them: a slice's SliceT, an int's dim. Stops at the first
    item that is neither (an int not known as a dim cannot be bounded), returned second."""
    out = []
    for item in items:
        if isinstance(item.ty, SliceT):
            out.append(item.ty)
        elif isinstance(item.ty, ScalarT) and item.ty.kind == "int" and item.ty.dim is not None:
            out.append(item.ty.dim)
        else:
            return tuple(out), item
    return tuple(out), None


class Calls:
    """Mixed into `Checker`: `call_op` and the argument conversions of op calls."""

    def call_op(self, name: str, e, args: list, kwargs: dict, spans: list, func_span: Span | None = None):
        op = self.ops.get(name)
        span = e.span
        if op is None:
            close = close_name(name, self.ops)
            self.r.error("unknown-op", f"unknown operation `{name}`", func_span or span,
                         hint=f"did you mean `{close}`?" if close else
                         "see `docs/language.md`, section 9 (Operations), for the op list")
            return ir.Lit(None, ERR, span)
        bound = self.bind_args(op, name, args, kwargs, spans, span)
        if bound is None:
            return ir.Lit(None, ERR, span)
        values, targs, failed, numbers = {}, [], False, []
        for param in op.params:
            if param.name not in bound:
                if param.default is REQUIRED:
                    self.r.error("missing-arg", f"`{name}` needs `{param.name}`", span,
                                 hint=f"signature: {name}(" + ", ".join(q.name for q in op.params) + ")")
                    return ir.Lit(None, ERR, span)
                lit = default_lit(param)
                targs.append((param.name, lit))
                values[param.name] = value_of(lit, param.kind)
                continue
            arg, arg_span = bound[param.name]
            value = self.convert(arg, param, name, arg_span)
            if value is _FAIL:
                failed = True
                continue
            targs.append((param.name, arg))
            values[param.name] = value
            self.note_role(param, arg)
            if param.kind in ("float", "int", "value"):
                numbers.append((param, arg, arg_span))
        if failed:
            return ir.Op(name, tuple(targs), ERR, span)
        ctx = ShapeCtx(self, span)
        try:
            ty = op.shape(ctx, values)
        except OpError as err:
            self.report_op_error(err, name, bound, span)
            ty = ctx.recovered or ERR
        if not (isinstance(ty, ScalarT) and ty.kind in ("int", "float")):
            for param, arg, arg_span in numbers:  # (arithmetic on numbers is checked where it is used)
                # a number passed to an operator (`x / s`, `a < b`) or a function of one is named by its own text
                operand = op.symbol is not None or len(op.params) == 1
                what = f"`{self.spell(arg) or param.name}`" if operand else f"`{param.name}` of `{name}`"
                self.note_number(arg, arg_span, what, param.within)
        node = ir.Op(name, tuple(targs), ty, span)
        folded = self.fold(node)  # arithmetic on numbers: evaluated now, within limits
        return node if folded is ty else ir.Op(name, tuple(targs), folded, span)

    def bind_args(self, op, name: str, args: list, kwargs: dict, spans: list, span: Span) -> dict | None:
        """Parameter name -> (argument, its span); None after reporting a bad argument list."""
        bound: dict[str, tuple] = {}
        for i, arg in enumerate(args):
            if i >= len(op.params):
                self.r.error("arity", f"`{name}` takes at most {len(op.params)} positional arguments, got {len(args)}",
                             spans[i] if i < len(spans) else span)
                return None
            bound[op.params[i].name] = (arg, spans[i] if i < len(spans) else span)
        for kw, (arg, kw_span) in kwargs.items():
            param = op.param(kw)
            if param is None:
                close = close_name(kw, [q.name for q in op.params])
                self.r.error("unknown-arg", f"`{name}` has no argument `{kw}`", kw_span,
                             hint=f"did you mean `{close}`?" if close else
                             "it takes " + ", ".join(f"`{q.name}`" for q in op.params))
                return None
            if param.name in bound:
                self.r.error("arity", f"`{name}` got `{param.name}` twice", kw_span)
                return None
            bound[param.name] = (arg, kw_span)
        return bound

    def report_op_error(self, err: OpError, name: str, bound: dict, span: Span) -> None:
        """A shape rule's error at the argument it blames, in the spec's own words."""
        arg_span = bound[err.arg][1] if err.arg in bound else span
        related = []
        for blamed in err.blame:
            if blamed in bound and blamed != err.arg:
                related.append(self.origin(bound[blamed][0], blamed))
        if err.arg in bound:
            origin = self.origin(bound[err.arg][0], err.arg)
            if origin.span.line and origin.span.line != arg_span.line:
                related.insert(0, origin)
        related = tuple(r for r in related if r.span.line)
        message = err.message
        items = bound.get("tensors", (None,))[0]
        if isinstance(items, ir.TList) and name in self.ops:  # `#i`: the i-th tensor of a list argument
            for i, item in enumerate(items.items):
                text = self.source_text(item.span) or f"tensor {i}"
                message = message.replace(f"`#{i}`", f"`{text}`")
        for argname in (err.arg,) + err.blame:
            if argname in bound:
                text = self.source_text(bound[argname][1])
                if text and len(text) <= 40:
                    message = message.replace(f"`{argname}`", f"`{text}`")
        self.r.error(err.code, message, arg_span, hint=err.hint, related=related)

    def convert(self, arg: ir.TExpr, param, opname: str, span: Span):
        """An argument's value for the shape rule, by the parameter's kind; _FAIL after reporting."""
        ty, kind = arg.ty, param.kind
        if isinstance(ty, ErrorT) or (isinstance(ty, ListT) and any(isinstance(t, ErrorT) for t in ty.items)):
            return _FAIL

        def bad(what: str):
            self.r.error("arg-kind", f"`{param.name}` of `{opname}` must be {what}", span)
            return _FAIL
        if kind in ("tensor", "tensor?"):
            if isinstance(ty, NoneT):
                return None if kind == "tensor?" else bad("a tensor, not None")
            if not isinstance(ty, TensorT):
                return bad("a tensor")
            if kind == "tensor" and not self.must_exist(arg, span):
                return _FAIL
            return ty
        if kind == "value":
            if isinstance(ty, TensorT):
                return ty if self.must_exist(arg, span) else _FAIL
            if isinstance(ty, ScalarT) and ty.kind in ("int", "float", "bool"):
                return ty
            if isinstance(ty, ScalarT) and ty.kind == "str" and opname in ("eq", "ne"):
                return ty  # `layer_types[l] == "mamba"`
            return bad("a tensor or a number")
        if kind == "int":
            if isinstance(ty, ScalarT) and ty.kind == "int":
                return ty.dim
            return bad("an integer")
        if kind == "list":
            return ty if isinstance(ty, SeqT) else bad("a list-valued param (`name : list[K]`)")
        if kind == "float":
            if isinstance(ty, ScalarT) and ty.kind in ("int", "float"):
                return float(arg.value) if isinstance(arg, ir.Lit) else None
            if isinstance(ty, NoneT):
                return None
            return bad("a number")
        if param.static and not isinstance(arg, ir.Lit) and kind in ("bool", "int", "str"):
            self.r.error("arg-kind", f"`{param.name}` of `{opname}` must be a literal constant, not a computed value",
                         span, hint=f"write e.g. `{param.name}={param.default!r}`; the generated code is specialised "
                         "on it" if param.default is not REQUIRED else None)
            return _FAIL
        if kind == "bool":
            if isinstance(ty, ScalarT) and ty.kind == "bool":
                return arg.value if isinstance(arg, ir.Lit) else None
            return bad("True or False")
        if kind == "str":
            if not (isinstance(arg, ir.Lit) and isinstance(arg.value, str) and ty == STR):
                return bad("a string")
            if param.choices and arg.value not in param.choices:
                self.r.error("arg-kind", f"`{param.name}` must be one of " + ", ".join(f'"{c}"' for c in param.choices)
                             + f", got {arg.value!r}", span)
                return _FAIL
            return arg.value
        if kind == "dtype":
            if isinstance(arg, ir.Lit) and ty == ScalarT("dtype"):
                return arg.value
            return bad("a dtype such as float32")
        if not isinstance(arg, ir.TList):
            return bad("a list")
        if kind == "tensors":
            out = []
            for item in arg.items:
                if not isinstance(item.ty, TensorT):
                    return bad("a list of tensors")
                if not self.must_exist(item, item.span):
                    return _FAIL
                out.append(item.ty)
            return tuple(out)
        if kind == "dims":
            out = []
            for item in arg.items:
                if not (isinstance(item.ty, ScalarT) and item.ty.kind == "int" and item.ty.dim is not None):
                    return bad("a list of dims")
                out.append(item.ty.dim)
            return tuple(out)
        if kind == "slices":
            out, wrong = index_items(arg.items)
            return bad("a list of indices and slices whose bounds are dims") if wrong is not None else out
        return bad(kind)  # pragma: no cover


def default_lit(p) -> ir.Lit:
    """A parameter's default as the literal the typed IR carries for an argument left out."""
    v = p.default
    if v is None:
        return ir.Lit(None, NoneT())
    if isinstance(v, bool):
        return ir.Lit(v, BOOL)
    if isinstance(v, int):
        return ir.Lit(v, ScalarT("int", Dim.const(v)))
    if isinstance(v, float):
        return ir.Lit(v, FLOAT)
    if p.kind == "dtype":
        return ir.Lit(v, ScalarT("dtype"))
    return ir.Lit(v, STR)


def value_of(lit: ir.Lit, kind: str):
    if kind == "int":
        return lit.ty.dim if isinstance(lit.ty, ScalarT) else None
    return lit.value

