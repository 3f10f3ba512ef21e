"""Stage 2: syntax IR -> typed IR (`ir.Model`), checking names, dtypes and symbolic shapes.

All errors are collected; a value whose check failed gets `ErrorT`, and nothing that uses it
reports again, so one root cause gives one error. Shape rules live in the op registry; this
module resolves names, binds calls to signatures, tracks optional inputs and layer loops,
and turns `OpError`s into located diagnostics.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from . import ir
from .diagnostics import Related, Reporter
from .dims import Dim, DimError, Divides, equal
from .ir import BOOL, FLOAT, INT, STR, ErrorT, ListT, NoneT, ScalarT, ShapeT, SliceT, TensorT
from .ops.registry import REQUIRED, OpError, all_ops
from .source import NO_SPAN, Span

DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64", "bool")
SCALAR_KINDS = ("int", "float", "bool", "str")
RESERVED = {"Tensor", "exists", "None", "True", "False"} | set(DTYPES)
BINOPS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "//": "floordiv", "%": "mod", "@": "matmul", "**": "pow"}
CMPOPS = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
ERR = ErrorT()


@dataclass
class Binding:
    kind: str  # config | dim | input | param | buffer | local | loopvar | output
    ty: ir.Type
    span: Span
    optional: bool = False
    uses: int = 0
    scope_depth: int = 0
    loop_depth: int = 0


@dataclass
class Scope:
    names: dict = field(default_factory=dict)
    present: frozenset = frozenset()  # optional inputs known to exist here


class ShapeCtx:
    """What a shape rule may ask of the checker."""

    def __init__(self, checker: "Checker", span: Span):
        self.c, self.span, self.recovered = checker, span, None

    def eq(self, a: Dim, b: Dim) -> bool:
        ok, conds = equal(a, b)
        if ok:
            for cond in conds:
                self.c.require(cond, self.span)
        return ok

    def divisible(self, d: Dim, n: int) -> bool:
        if d.value is not None:
            return d.value % n == 0
        self.c.require(Divides(d, Dim.const(n)), self.span)
        return True

    def bound(self, hi: Dim, size: Dim, arg: str) -> None:
        """A slice end `hi` must not pass `size`; checked here when constant, else at run time."""
        if hi.value is not None and size.value is not None:
            if hi.value > size.value:
                raise OpError(f"slice end {hi.value} is past the axis size {size.value}", arg, code="bad-axis")
            return
        if equal(hi, size)[0] or (size - hi).value is not None and (size - hi).value >= 0:
            return
        self.c.runtime_checks.setdefault((hi, size, "<="), self.span)

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
        return self.c.show(shape)

    def show_dim(self, d: Dim) -> str:
        return self.c.show_dim(d)

    def recover(self, ty) -> None:
        """The rule found an error but knows what was meant: later checks continue from `ty`."""
        self.recovered = ty


def _index_items(items) -> tuple[tuple, ir.TExpr | None]:
    """Index items as shape rules take them: a slice's SliceT, an int's dim (a fresh unknown one
    for a computed int). Stops at the first item that is neither, returned second."""
    out = []
    for item in items:
        if isinstance(item.ty, SliceT):
            out.append(item.ty)
        elif isinstance(item.ty, ScalarT) and item.ty.kind == "int":
            out.append(item.ty.dim if item.ty.dim is not None else Dim.sym("_i"))
        else:
            return tuple(out), item
    return tuple(out), None


class Checker:
    def __init__(self, spec: ir.Spec, r: Reporter):
        self.spec, self.r = spec, r
        self.ops = all_ops()
        self.scopes: list[Scope] = [Scope()]
        self.config: list[ir.ConfigField] = []
        self.derived: list[ir.Derived] = []
        self.inputs: list[ir.Tensor] = []
        self.params: list[ir.Tensor] = []
        self.buffers: list[ir.Tensor] = []
        self.outputs: list[ir.Tensor] = []
        self.decl_spans: dict[str, Span] = {}
        self.display: dict = {}
        self.runtime: dict[str, tuple[str, int]] = {}  # runtime dim -> (input, axis)
        self.owner: dict[str, str] = {}  # runtime dim -> the optional input that introduces it
        self.constraints: list[ir.Constraint] = []
        self.loops: list[dict] = []  # open loops: var, count, depth, carried, reads, stacked
        self.whole_reads: dict[str, list[Span]] = {}  # param -> where it is read other than as `p[l]`
        self.roles: dict[str, str] = {}
        self.where_dims: dict[str, Dim] = {}
        self.free_out: set[str] = set()
        self.runtime_checks: dict[tuple, Span] = {}
        self.free_bound: dict[str, Dim] = {}

    # ------------------------------------------------------------------ display & constraints
    def _atom_str(self, a) -> str:
        if a in self.display:
            return self.display[a]
        return a if isinstance(a, str) else f"({self.show_dim(a.num)} // {self.show_dim(a.den)})"

    def show_dim(self, d: Dim) -> str:
        if Dim.__eq__(d, d) and d in self.display:
            return self.display[d]
        return d.render(self._atom_str)

    def show(self, shape) -> str:
        return "[" + ", ".join(self.show_dim(d) for d in shape) + "]"

    def require(self, cond: Divides, span: Span) -> None:
        syms = cond.num.symbols() | cond.den.symbols()
        if any(s in self.runtime for s in syms):
            return  # a run-time condition; torch checks it when it reshapes
        if cond.den.value is not None and cond.num.value is not None:
            return
        if any(c.cond == cond for c in self.constraints):
            return
        why = f"{self.show_dim(cond.num)} must be divisible by {self.show_dim(cond.den)}"
        self.constraints.append(ir.Constraint(cond, span, why))

    # ------------------------------------------------------------------ scopes
    def lookup(self, name: str) -> Binding | None:
        for s in reversed(self.scopes):
            if name in s.names:
                return s.names[name]
        return None

    @property
    def present(self) -> frozenset:
        return self.scopes[-1].present

    def push(self, present: frozenset | None = None) -> None:
        self.scopes.append(Scope(present=self.present | (present or frozenset())))

    def pop(self) -> None:
        self.scopes.pop()

    def declare(self, name: str, b: Binding, span: Span) -> bool:
        if name in RESERVED:
            self.r.error("reserved-name", f"`{name}` is reserved and cannot be declared", span)
            return False
        prev = self.lookup(name)
        if prev is not None and (name in self.scopes[-1].names or prev.kind != "local"):
            self.r.error("redefinition", f"`{name}` is already declared", span,
                         hint="pick another name, or assign without `let` to update it",
                         related=(Related(prev.span, f"`{name}` first declared here"),) if prev.span.line else ())
            return False
        b.scope_depth = len(self.scopes) - 1
        b.loop_depth = len(self.loops)
        self.scopes[-1].names[name] = b
        return True

    # ------------------------------------------------------------------ declarations
    def declarations(self) -> None:
        order = {"param": 0, "input": 1, "parameter": 2, "buffer": 2, "output": 3}
        decls = sorted(self.spec.decls, key=lambda d: order[d.section])
        outputs = [d for d in decls if d.section == "output"]
        for decl in decls:
            if decl is (outputs[0] if outputs else None):
                for o in outputs:
                    self.where_clauses(o)  # `where` dims serve every output
            getattr(self, f"decl_{decl.section}")(decl)

    def decl_param(self, d: ir.Decl) -> None:
        if d.type is None:  # derived: D = n_embd, head_dim = D // H
            value = self.expr(d.value)
            ty = value.ty
            if isinstance(ty, ErrorT):
                return
            if not isinstance(ty, ScalarT) or ty.kind not in ("int", "float", "bool"):
                self.r.error("bad-type", f"`{d.name}` must be a number computed from params", d.value.span)
                return
            alias = value.name if isinstance(value, ir.Ref) and value.kind in ("config", "dim") else None
            dim = ty.dim if ty.kind == "int" else None
            if dim is not None and dim.value is not None and dim.value <= 0 and not alias:
                self.r.warning("bad-constraint", f"`{d.name}` = {dim.value} is not a positive size", d.value.span)
            if self.declare(d.name, Binding("dim", ScalarT(ty.kind, dim), d.name_span), d.name_span):
                self.derived.append(ir.Derived(d.name, dim, value, alias, d.span))
                if dim is not None:
                    atoms = dim.atoms()
                    if len(dim.terms) == 1 and dim.terms[0][1] == 1 and len(dim.terms[0][0]) == 1 \
                            and dim.terms[0][0][0][1] == 1:
                        atom = dim.terms[0][0][0][0]
                        self.display.setdefault(atom, d.name)
                    elif dim not in self.display and atoms:
                        self.display[dim] = d.name
            return
        kind = d.type.id if isinstance(d.type, ir.Name) else None
        if kind not in SCALAR_KINDS:
            self.r.error("bad-type", f"a param is `int`, `float`, `bool` or `str`, not `{_text(d.type)}`", d.type.span,
                         hint="tensors are declared in `input:`, `parameter:`, `buffer:` or `output:`")
            self.declare(d.name, Binding("config", ERR, d.name_span, uses=1), d.name_span)  # no cascade
            return
        default = ir.MISSING
        if d.value is not None:
            default = self.literal(d.value, kind)
        ty = ScalarT(kind, Dim.sym(d.name) if kind == "int" else None)
        if self.declare(d.name, Binding("config", ty, d.name_span), d.name_span):
            self.config.append(ir.ConfigField(d.name, kind, default, d.span))

    def literal(self, e: ir.Expr, kind: str):
        neg = isinstance(e, ir.Unary) and e.op == "-"
        base = e.operand if neg else e
        value = base.value if isinstance(base, (ir.Num, ir.Str, ir.Const)) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and neg:
            value = -value
        ok = {"int": lambda v: isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**62,
              "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
              "bool": lambda v: isinstance(v, bool),
              "str": lambda v: isinstance(v, str)}[kind]
        if value is None or not ok(value):
            self.r.error("bad-default", f"the default of {'an' if kind == 'int' else 'a'} `{kind}` param must be "
                         f"{'an' if kind == 'int' else 'a'} {kind} literal", e.span)
            return ir.MISSING
        return float(value) if kind == "float" else value

    def tensor_type(self, e: ir.Expr, dim_mode: str) -> TensorT | None:
        if not (isinstance(e, ir.Call) and e.func == "Tensor"):
            self.r.error("bad-type", f"expected `Tensor([dims], dtype)`, got `{_text(e)}`", e.span,
                         hint="write e.g. `Tensor([B, T, D], float32)`")
            return None
        if e.kwargs or not 1 <= len(e.args) <= 2 or not isinstance(e.args[0], ir.ListExpr):
            self.r.error("bad-type", "`Tensor` takes a list of dims and a dtype: `Tensor([B, T], int64)`", e.span)
            return None
        dtype = "float32"
        if len(e.args) == 2:
            dt = e.args[1]
            if not isinstance(dt, ir.Name) or dt.id not in DTYPES:
                self.r.error("bad-type", f"unknown dtype `{_text(dt)}`", dt.span,
                             hint="dtypes: " + ", ".join(DTYPES))
                return None
            dtype = dt.id
        dims = []
        for item in e.args[0].items:
            d = self.dim_expr(item, dim_mode)
            if d is None:
                return None
            dims.append(d)
        return TensorT(tuple(dims), dtype)

    def dim_expr(self, e: ir.Expr, mode: str, owner: str | None = None) -> Dim | None:
        """A shape entry. mode: config (params only) | input (new names bind run-time dims) | output."""
        if isinstance(e, ir.Name) and self.lookup(e.id) is None and e.id not in RESERVED:
            if mode == "input":
                self.runtime_dim(e.id, e.span, owner)
                return Dim.sym(e.id)
            if mode == "output" and e.id in self.where_dims:
                return self.where_dims[e.id]
            if mode == "output":  # a free dim, bound by unification with the computed output
                self.free_out.add(e.id)
                return Dim.sym(e.id)
            self.unknown(e.id, e.span, "unknown-dim",
                         "parameter shapes may use params and derived dims only" if mode == "config" else None)
            return None
        value = self.expr(e)
        if isinstance(value.ty, ErrorT):
            return None
        if not isinstance(value.ty, ScalarT) or value.ty.kind != "int" or value.ty.dim is None:
            self.r.error("unknown-dim", f"`{_text(e)}` is not a dimension (an int param or dim expression)", e.span)
            return None
        if mode == "config":
            bad = [s for s in value.ty.dim.symbols() if s in self.runtime]
            if bad:
                self.r.error("unknown-dim", f"`{bad[0]}` is a run-time dim; parameter shapes may use params only",
                             e.span)
                return None
        return value.ty.dim

    def runtime_dim(self, name: str, span: Span, owner: str | None) -> None:
        if name in self.runtime:
            return
        self.scopes[0].names[name] = Binding("dim", ScalarT("int", Dim.sym(name)), span)
        self.runtime[name] = ("", 0)
        if owner:
            self.owner[name] = owner

    def decl_input(self, d: ir.Decl) -> None:
        self.tensor_decl(d, "input")

    def decl_parameter(self, d: ir.Decl) -> None:
        self.tensor_decl(d, "param")

    def decl_buffer(self, d: ir.Decl) -> None:
        self.tensor_decl(d, "buffer")

    def where_clauses(self, d: ir.Decl) -> None:
        for w in d.where:
            if w.name in self.where_dims:
                self.r.error("redefinition", f"`{w.name}` is defined by two `where` clauses", w.name_span)
                continue
            dim = self.dim_expr(w.value, "input")
            if dim is not None:
                self.where_dims[w.name] = dim
                self.display.setdefault(dim, w.name)

    def decl_output(self, d: ir.Decl) -> None:
        self.tensor_decl(d, "output")

    def tensor_decl(self, d: ir.Decl, kind: str) -> None:
        if d.type is None:
            self.r.error("bad-type", f"`{d.name} = ...` belongs in `param:`; declare a tensor with a type",
                         d.span, hint=f"write `{d.name} : Tensor([dims], dtype)`")
            return
        if kind == "input":
            mode = "input"
            before = set(self.runtime)
            ty = self.tensor_type(d.type, mode)
            if ty is not None and d.optional:
                for s in set(self.runtime) - before:
                    self.owner[s] = d.name
            if ty is not None:
                for axis, dim in enumerate(ty.shape):
                    s = dim.as_symbol()
                    if s in self.runtime and self.runtime[s] == ("", 0):
                        self.runtime[s] = (d.name, axis)
                self.fixed_length_warning(d, ty)
        else:
            ty = self.tensor_type(d.type, "output" if kind == "output" else "config")
        if ty is None:
            if kind != "output":  # declared all the same, so its uses report nothing more
                self.declare(d.name, Binding(kind, ERR, d.name_span, d.optional, uses=1), d.name_span)
            return
        cond = None
        if d.condition is not None:
            if kind not in ("param", "buffer"):
                self.r.error("syntax", "only parameters and buffers may be conditional (`if c else None`)",
                             d.condition.span, hint="mark an optional input with `?`")
            else:
                cond = self.condition(d.condition)
        optional = d.optional or cond is not None
        if d.optional and kind not in ("input", "output"):
            self.r.error("syntax", "only inputs and outputs may be optional (`?`)", d.span,
                         hint="a parameter that may be absent is written `... if flag else None`")
            optional = cond is not None  # reported once; its uses are not also "unguarded"
        init = None
        if d.value is not None:
            if kind in ("param", "buffer"):
                init = self.initialiser(d.value, ty)
            else:
                self.r.error("syntax", f"an {kind} takes no default value", d.value.span)
        t = ir.Tensor(d.name, ty, optional, cond, init, d.span)
        b = Binding(kind, TensorT(ty.shape, ty.dtype, optional), d.name_span, optional)
        if kind == "output":
            if d.name in {o.name for o in self.outputs}:
                self.r.error("redefinition", f"output `{d.name}` is declared twice", d.name_span)
            self.outputs.append(t)
            self.decl_spans[d.name] = d.span
            return
        if self.declare(d.name, b, d.name_span):
            self.decl_spans[d.name] = d.span
            {"input": self.inputs, "param": self.params, "buffer": self.buffers}[kind].append(t)

    def fixed_length_warning(self, d: ir.Decl, ty: TensorT) -> None:
        if ty.dtype not in ("int32", "int64") or ty.rank < 2 or d.optional:
            return
        items = d.type.args[0].items if isinstance(d.type, ir.Call) else ()
        for axis in range(1, ty.rank):
            sym = ty.shape[axis].as_symbol()
            item = items[axis] if axis < len(items) else None
            if sym and sym not in self.runtime and isinstance(item, ir.Name):
                self.r.warning(
                    "fixed-length",
                    f"axis {axis} of `{d.name}` is `{item.id}` = {sym}, a config value: every `{d.name}` must be "
                    f"exactly {sym} long, and a cache cannot extend it", item.span,
                    hint=f"name this axis with a fresh dim that is not a param (say `T_seq`); slice position "
                         f"tables to it and check it against {sym} at run time")

    def initialiser(self, e: ir.Expr, ty: TensorT):
        from .ops.init import check_init
        return check_init(self, e, ty)

    # ------------------------------------------------------------------ expressions
    def unknown(self, name: str, span: Span, code: str = "unknown-name", hint: str | None = None) -> None:
        self.n_unknown = getattr(self, "n_unknown", 0) + 1
        names = [n for s in self.scopes for n in s.names] if self.n_unknown <= 50 else []  # bounded cost
        close = difflib.get_close_matches(name, names, n=1)
        if close and not hint:
            hint = f"did you mean `{close[0]}`?"
        self.r.error(code, f"`{name}` is not defined", span, hint=hint)

    def group(self, name: str) -> frozenset:
        """Optional inputs that share a run-time dim one of them introduces (`past_keys` and
        `past_values` share T_past) are given together or not at all: one `exists` covers all."""
        group, changed = {name}, True
        while changed:
            changed = False
            for i in self.inputs:
                if i.optional and i.name not in group:
                    dims = {s for d in i.ty.shape for s in d.symbols()}
                    member_dims = {s for g in group for t in self.inputs if t.name == g
                                   for d in t.ty.shape for s in d.symbols()}
                    if any(self.owner.get(s) in group or self.owner.get(s) == i.name for s in dims & member_dims):
                        group.add(i.name)
                        changed = True
        return frozenset(group)

    def presence(self, test: ir.TExpr) -> frozenset:
        """Optional inputs known to exist where `test` holds; after a broken test, all of them
        (so one mistake in a guard is not reported again at every use it guards)."""
        if isinstance(test, ir.IsPresent):
            return self.group(test.name)
        if isinstance(test.ty, ErrorT):
            return frozenset(i.name for i in self.inputs if i.optional)
        if isinstance(test, ir.Ref) and test.kind == "config":  # parameters declared `if flag else None`
            return frozenset(t.name for t in self.params + self.buffers
                             if isinstance(t.condition, ir.Ref) and t.condition.name == test.name)
        if isinstance(test, ir.Op) and test.op == "and":
            return self.presence(test.arg("a")) | self.presence(test.arg("b"))
        return frozenset()

    def condition(self, e: ir.Expr) -> ir.TExpr:
        t = self.expr(e)
        if not isinstance(t.ty, (ErrorT,)) and not (isinstance(t.ty, ScalarT) and t.ty.kind in ("bool", "int", "float")):
            self.r.error("bad-condition", f"`{_text(e)}` is not a condition", e.span,
                         hint="conditions use config values and `X exists`")
            return ir.Lit(False, ERR, e.span)
        return t

    def expr(self, e: ir.Expr) -> ir.TExpr:
        method = getattr(self, f"e_{type(e).__name__}")
        return method(e)

    def e_Num(self, e: ir.Num):
        if isinstance(e.value, int):
            return ir.Lit(e.value, ScalarT("int", Dim.const(e.value)), e.span)
        return ir.Lit(e.value, FLOAT, e.span)

    def e_Str(self, e: ir.Str):
        return ir.Lit(e.value, STR, e.span)

    def e_Const(self, e: ir.Const):
        return ir.Lit(e.value, BOOL if isinstance(e.value, bool) else NoneT(), e.span)

    def e_Name(self, e: ir.Name):
        b = self.lookup(e.id)
        if b is None:
            if e.id in DTYPES:
                return ir.Lit(e.id, ScalarT("dtype"), e.span)
            self.unknown(e.id, e.span)
            return ir.Ref(e.id, "error", ERR, e.span)
        b.uses += 1
        ty = b.ty
        if b.optional and e.id in self.present and isinstance(ty, TensorT):
            ty = TensorT(ty.shape, ty.dtype, False)
        if b.kind in ("param", "buffer", "input") and self.loops:
            self.note_read(e.id, b)
        if b.kind in ("param", "buffer"):
            self.whole_reads.setdefault(e.id, []).append(e.span)
        if b.kind == "local":
            self.note_read(e.id, b)
        return ir.Ref(e.id, b.kind, ty, e.span)

    def is_stacked(self, ty: TensorT) -> bool:
        return bool(self.loops) and ty.rank > 0 and ty.shape[0] == self.loops[-1]["count"]

    def note_read(self, name: str, b: Binding) -> None:
        for loop in self.loops:
            if b.kind != "local" or b.loop_depth < loop["depth"]:
                loop["reads"].setdefault(name, None)

    def e_BinOp(self, e: ir.BinOp):
        return self.call_op(BINOPS[e.op], e, [self.expr(e.left), self.expr(e.right)], {}, [e.left.span, e.right.span])

    def e_Compare(self, e: ir.Compare):
        return self.call_op(CMPOPS[e.op], e, [self.expr(e.left), self.expr(e.right)], {}, [e.left.span, e.right.span])

    def e_BoolOp(self, e: ir.BoolOp):
        left = self.expr(e.left)
        extra = self.presence(left) if e.op == "and" else frozenset()
        self.push(extra)
        right = self.expr(e.right)
        self.pop()
        return self.call_op(e.op, e, [left, right], {}, [e.left.span, e.right.span])

    def e_Unary(self, e: ir.Unary):
        operand = self.expr(e.operand)
        if e.op == "+":
            return operand
        if e.op == "-" and isinstance(operand, ir.Lit) and isinstance(operand.value, (int, float)) \
                and not isinstance(operand.value, bool):
            return self.e_Num(ir.Num(-operand.value, e.span))
        return self.call_op("neg" if e.op == "-" else "not", e, [operand], {}, [e.operand.span])

    def e_Exists(self, e: ir.Exists):
        b = self.lookup(e.name.id)
        if b is None:
            self.unknown(e.name.id, e.name.span)
            return ir.Lit(False, ERR, e.span)
        b.uses += 1
        if b.kind != "input" or not b.optional:
            self.r.error("bad-condition", f"`{e.name.id} exists` needs an optional input (declared with `?`)",
                         e.span, related=(Related(b.span, f"`{e.name.id}` declared here"),))
            return ir.Lit(True, BOOL, e.span)
        if self.loops:
            self.note_read(e.name.id, b)
        return ir.IsPresent(e.name.id, BOOL, e.span)

    def e_Cond(self, e: ir.Cond):
        test = self.condition(e.test)
        present = self.presence(test)
        self.push(present)
        body = self.expr(e.body)
        self.pop()
        if e.orelse is None:
            self.r.error("syntax", "a conditional value needs an `else`", e.span,
                         hint="only a re-assignment may end in a bare `if`: `x = f(x) if cond`")
            return ir.TCond(test, body, body, ERR, e.span)
        orelse = self.expr(e.orelse)
        return ir.TCond(test, body, orelse, self.join(test, body.ty, orelse.ty, e), e.span)

    def join(self, test, a: ir.Type, b: ir.Type, e) -> ir.Type:
        if isinstance(a, ErrorT) or isinstance(b, ErrorT):
            return ERR
        if isinstance(b, NoneT) and isinstance(a, TensorT):
            return TensorT(a.shape, a.dtype, True)
        if isinstance(a, NoneT) and isinstance(b, TensorT):
            return TensorT(b.shape, b.dtype, True)
        zero = {}
        if isinstance(test, ir.IsPresent):
            zero = {s: Dim.const(0) for s, o in self.owner.items() if o in self.group(test.name)}
        if isinstance(a, ScalarT) and isinstance(b, ScalarT):
            if a.kind == b.kind == "int" and a.dim is not None and b.dim is not None:
                if a.dim == b.dim or a.dim.subs(zero) == b.dim:
                    return a
                return INT
            return FLOAT if "float" in (a.kind, b.kind) else a
        if isinstance(a, TensorT) and isinstance(b, TensorT):
            same = a.rank == b.rank and all(x == y or x.subs(zero) == y for x, y in zip(a.shape, b.shape))
            if same and a.dtype == b.dtype:
                return TensorT(a.shape, a.dtype, a.maybe_none or b.maybe_none)
            self.r.error("shape-mismatch", f"the two branches differ: {self.show(a.shape)} {a.dtype} vs "
                         f"{self.show(b.shape)} {b.dtype}", e.span)
            return ERR
        if type(a) is type(b):
            return a
        self.r.error("arg-kind", "the two branches of a conditional have different kinds", e.span)
        return ERR

    def e_ListExpr(self, e: ir.ListExpr):
        items = tuple(self.expr(i) for i in e.items)
        return ir.TList(items, ListT(tuple(i.ty for i in items)), e.span)

    def e_SliceExpr(self, e: ir.SliceExpr):
        lo = self.expr(e.lo) if e.lo is not None else None
        hi = self.expr(e.hi) if e.hi is not None else None
        dims = []
        for part in (lo, hi):
            if part is None:
                dims.append(None)
            elif isinstance(part.ty, ScalarT) and part.ty.kind == "int":
                dims.append(part.ty.dim if part.ty.dim is not None else None)
            else:
                if not isinstance(part.ty, ErrorT):
                    self.r.error("arg-kind", "slice bounds must be integers", part.span)
                return ir.TSlice(lo, hi, ERR, e.span)
        return ir.TSlice(lo, hi, SliceT(*dims), e.span)

    def e_Attribute(self, e: ir.Attribute):
        base = self.expr(e.value)
        if e.attr == "shape" and isinstance(base.ty, TensorT):
            self.must_exist(base, e.value.span)
            return _ShapeOf(base, ShapeT(base.ty.shape), e.span)
        if isinstance(base.ty, ErrorT):
            return ir.Lit(None, ERR, e.span)
        self.r.error("syntax", f"unknown attribute `.{e.attr}`", e.span, hint="tensors have `.shape`")
        return ir.Lit(None, ERR, e.span)

    def e_Subscript(self, e: ir.Subscript):
        base = self.expr(e.value)
        if isinstance(base, _ShapeOf):
            if len(e.index) != 1:
                self.r.error("syntax", "`.shape[i]` takes one index", e.span)
                return ir.Lit(0, ERR, e.span)
            axis = self.expr(e.index[0])
            return self.call_op("size", e, [base.base, axis], {}, [e.value.span, e.index[0].span])
        if isinstance(base.ty, ErrorT):
            return ir.Lit(None, ERR, e.span)
        if not isinstance(base.ty, TensorT):
            self.r.error("arg-kind", f"`{_text(e.value)}` is not a tensor and cannot be indexed", e.value.span)
            return ir.Lit(None, ERR, e.span)
        if isinstance(base, ir.Ref) and base.kind in ("param", "buffer") and self.loops and self.is_stacked(base.ty) \
                and not (len(e.index) == 1 and isinstance(e.index[0], ir.Name) and e.index[0].id == self.loops[-1]["var"]):
            var = self.loops[-1]["var"]
            self.whole_reads[base.name].pop()  # reported here, not again as a read outside `p[l]`
            self.r.error("stacked-index", f"`{base.name}` is stacked per layer {self.show(base.ty.shape)}; inside the "
                         f"loop it is indexed by the loop variable alone", e.span,
                         hint=f"write `{base.name}[{var}]` (and index that value further if needed)")
            return ir.Lit(None, ERR, e.span)
        # a stacked parameter indexed by the loop variable: one layer's slice
        if isinstance(base, ir.Ref) and base.kind in ("param", "buffer") and len(e.index) == 1 \
                and isinstance(e.index[0], ir.Name) and self.loops and e.index[0].id == self.loops[-1]["var"]:
            loop = self.loops[-1]
            if base.ty.rank == 0 or not equal(base.ty.shape[0], loop["count"])[0]:
                self.r.error("stacked-index",
                             f"`{base.name}` is {self.show(base.ty.shape)}, but the loop over `{loop['var']}` runs "
                             f"{self.show_dim(loop['count'])} times: a stacked parameter's first axis must match",
                             e.span, related=(Related(self.decl_spans.get(base.name, NO_SPAN),
                                                      f"`{base.name}` declared here"),))
                return ir.Lit(None, ERR, e.span)
            self.whole_reads[base.name].pop()  # read as `p[l]` after all
            loop["stacked"].setdefault(base.name, None)
            loop["reads"].pop(base.name, None)
            ty = TensorT(base.ty.shape[1:], base.ty.dtype, base.ty.maybe_none)
            return ir.Ref(base.name, "layer_param", ty, e.span)
        # a stacked input (a per-layer cache) indexed by the loop variable: the layer's slice
        if isinstance(base, ir.Ref) and base.kind == "input" and len(e.index) == 1 \
                and isinstance(e.index[0], ir.Name) and self.loops and e.index[0].id == self.loops[-1]["var"] \
                and base.ty.rank > 0 and equal(base.ty.shape[0], self.loops[-1]["count"])[0]:
            self.loops[-1]["layer_inputs"].setdefault(base.name, None)
            ty = TensorT(base.ty.shape[1:], base.ty.dtype, base.ty.maybe_none)
            return ir.Ref(base.name, "layer_input", ty, e.span)
        items = ir.TList(tuple(self.expr(i) for i in e.index), ListT(()), e.span)
        items = ir.TList(items.items, ListT(tuple(i.ty for i in items.items)), e.span)
        for i in items.items:
            if isinstance(i, ir.Ref) and i.kind == "loopvar":
                self.loops[-1]["uses_var"] = True
        return self.call_op("index", e, [base, items], {}, [e.value.span, e.span])

    def must_exist(self, t: ir.TExpr, span: Span) -> bool:
        if isinstance(t.ty, TensorT) and t.ty.maybe_none:
            name = t.name if isinstance(t, ir.Ref) else _text_t(t)
            kind = "optional input" if isinstance(t, ir.Ref) and t.kind == "input" else "conditional value"
            guard = f"`if {name} exists:`" if kind == "optional input" else "the condition it is declared under"
            related = ()
            if isinstance(t, ir.Ref) and t.name in self.decl_spans:
                related = (Related(self.decl_spans[t.name], f"`{name}` declared optional here"),)
            hint = f"guard this use with {guard}"
            if self.present:
                hint += f"; only {', '.join(f'`{p}`' for p in sorted(self.present))} is known to exist here"
            self.r.error("optional-unguarded", f"`{name}` is {'an' if kind[0] in 'aeiou' else 'a'} {kind} and may "
                         "be absent here", span, hint=hint,
                         related=related)
            return False
        return True

    def e_Call(self, e: ir.Call):
        if e.func == "Tensor":
            self.r.error("bad-type", "`Tensor(...)` is a type; it belongs in a declaration", e.span)
            return ir.Lit(None, ERR, e.span)
        args = [self.expr(a) for a in e.args]
        kwargs = {k.name: (self.expr(k.value), k.span) for k in e.kwargs}
        return self.call_op(e.func, e, args, kwargs, [a.span for a in e.args], func_span=e.func_span)

    # ------------------------------------------------------------------ op calls
    def call_op(self, name: str, e, args: list, kwargs: dict, spans: list, func_span: Span | None = None):
        op = self.ops.get(name)
        span = e.span
        if op is None:
            close = difflib.get_close_matches(name, list(self.ops), n=1)
            self.r.error("unknown-op", f"unknown operation `{name}`", func_span or span,
                         hint=f"did you mean `{close[0]}`?" if close else "see `docs/ops.md` for the op list")
            return ir.Lit(None, ERR, span)
        bound: dict[str, tuple] = {}
        for i, a in enumerate(args):
            if i >= len(op.params):
                self.r.error("arity", f"`{name}` takes at most {len(op.params)} positional arguments, got {len(args)}",
                             spans[i] if i < len(spans) else span)
                return ir.Lit(None, ERR, span)
            bound[op.params[i].name] = (a, spans[i] if i < len(spans) else span)
        for kw, (a, kspan) in kwargs.items():
            p = op.param(kw)
            if p is None:
                close = difflib.get_close_matches(kw, [q.name for q in op.params], n=1)
                self.r.error("unknown-arg", f"`{name}` has no argument `{kw}`", kspan,
                             hint=f"did you mean `{close[0]}`?" if close else
                             "it takes " + ", ".join(f"`{q.name}`" for q in op.params))
                return ir.Lit(None, ERR, span)
            if p.name in bound:
                self.r.error("arity", f"`{name}` got `{p.name}` twice", kspan)
                return ir.Lit(None, ERR, span)
            bound[p.name] = (a, kspan)
        values, targs, failed = {}, [], False
        for p in op.params:
            if p.name not in bound:
                if p.default is REQUIRED:
                    self.r.error("missing-arg", f"`{name}` needs `{p.name}`", span,
                                 hint=f"signature: {name}(" + ", ".join(q.name for q in op.params) + ")")
                    return ir.Lit(None, ERR, span)
                lit = _default_lit(p)
                targs.append((p.name, lit))
                values[p.name] = _value_of(lit, p.kind)
                continue
            a, aspan = bound[p.name]
            v = self.convert(a, p, name, aspan)
            if v is _FAIL:
                failed = True
                continue
            targs.append((p.name, a))
            values[p.name] = v
            if p.role and isinstance(a, ir.Ref) and a.kind in ("param", "layer_param", "buffer"):
                self.roles.setdefault(a.name, p.role)
        if failed:
            return ir.Op(name, tuple(targs), ERR, span)
        ctx = ShapeCtx(self, span)
        try:
            ty = op.shape(ctx, values)
        except OpError as err:
            aspan = bound[err.arg][1] if err.arg in bound else span
            related = []
            for b in err.blame:
                if b in bound and b != err.arg:
                    a = bound[b][0]
                    related.append(self.origin(a, b))
            if err.arg in bound:
                origin = self.origin(bound[err.arg][0], err.arg)
                if origin.span.line and origin.span.line != aspan.line:
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
                    text = self.source_text(bound[argname][1], strip_kw=argname)
                    if text and len(text) <= 40:
                        message = message.replace(f"`{argname}`", f"`{text}`")
            self.r.error(err.code, message, aspan, hint=err.hint, related=related)
            ty = ctx.recovered or ERR
        return ir.Op(name, tuple(targs), ty, span)

    def source_text(self, span: Span, strip_kw: str | None = None) -> str | None:
        if span.line != span.end_line or not span.line:
            return None
        text = self.r.source.line(span.line)[span.col - 1:span.end_col - 1].strip()
        head, sep, tail = text.partition("=")
        if sep and head.strip().isidentifier() and not tail.startswith("="):
            text = tail.strip()
        return text

    def origin(self, a: ir.TExpr, argname: str) -> Related:
        """Where the value passed as `argname` comes from, for 'declared here' notes."""
        if isinstance(a, ir.Ref):
            if a.name in self.decl_spans:
                ty = self.lookup(a.name).ty if self.lookup(a.name) else a.ty
                shown = f" as {self.show(ty.shape)}" if isinstance(ty, TensorT) else ""
                return Related(self.decl_spans[a.name], f"`{a.name}` declared{shown} here")
            b = self.lookup(a.name)
            if b is not None and b.kind == "local" and isinstance(a.ty, TensorT):
                return Related(b.span, f"`{a.name}` is {self.show(a.ty.shape)}, from here")
        if isinstance(a, ir.TList):
            for item in a.items:
                r = self.origin(item, argname)
                if r.span.line:
                    return r
        if isinstance(a, ir.Op) and a.op == "index":
            return self.origin(a.args[0][1], argname)
        return Related(NO_SPAN, "")

    def convert(self, a: ir.TExpr, p, opname: str, span: Span):
        """An argument's value for the shape rule, by the parameter's kind; _FAIL after reporting."""
        ty, kind = a.ty, p.kind
        if isinstance(ty, ErrorT) or (isinstance(ty, ListT) and any(isinstance(t, ErrorT) for t in ty.items)):
            return _FAIL
        def bad(what: str):
            self.r.error("arg-kind", f"`{p.name}` of `{opname}` must be {what}", span)
            return _FAIL
        if kind in ("tensor", "tensor?"):
            if isinstance(ty, NoneT):
                return None if kind == "tensor?" else bad("a tensor, not None")
            if not isinstance(ty, TensorT):
                return bad("a tensor")
            if kind == "tensor" and not self.must_exist(a, span):
                return _FAIL
            return ty
        if kind == "value":
            if isinstance(ty, TensorT):
                return ty if self.must_exist(a, span) else _FAIL
            if isinstance(ty, ScalarT) and ty.kind in ("int", "float", "bool"):
                return ty
            return bad("a tensor or a number")
        if kind == "int":
            if isinstance(ty, ScalarT) and ty.kind == "int":
                return ty.dim
            return bad("an integer")
        if kind == "float":
            if isinstance(ty, ScalarT) and ty.kind in ("int", "float"):
                return float(a.value) if isinstance(a, ir.Lit) else None
            if isinstance(ty, NoneT):
                return None
            return bad("a number")
        if p.static and not isinstance(a, ir.Lit) and kind in ("bool", "int", "str"):
            self.r.error("arg-kind", f"`{p.name}` of `{opname}` must be a literal constant, not a computed value",
                         span, hint=f"write e.g. `{p.name}={p.default!r}`; the generated code is specialised on it"
                         if p.default is not REQUIRED else None)
            return _FAIL
        if kind == "bool":
            if isinstance(ty, ScalarT) and ty.kind == "bool":
                return a.value if isinstance(a, ir.Lit) else None
            return bad("True or False")
        if kind == "str":
            if not (isinstance(a, ir.Lit) and isinstance(a.value, str) and ty == STR):
                return bad("a string")
            if p.choices and a.value not in p.choices:
                self.r.error("arg-kind", f"`{p.name}` must be one of " + ", ".join(f'"{c}"' for c in p.choices)
                             + f", got {a.value!r}", span)
                return _FAIL
            return a.value
        if kind == "dtype":
            if isinstance(a, ir.Lit) and ty == ScalarT("dtype"):
                return a.value
            return bad("a dtype such as float32")
        if not isinstance(a, ir.TList):
            return bad("a list")
        if kind == "tensors":
            out = []
            for item in a.items:
                if not isinstance(item.ty, TensorT):
                    return bad("a list of tensors")
                if not self.must_exist(item, item.span):
                    return _FAIL
                out.append(item.ty)
            return tuple(out)
        if kind == "dims":
            out = []
            for item in a.items:
                if not (isinstance(item.ty, ScalarT) and item.ty.kind == "int" and item.ty.dim is not None):
                    return bad("a list of dims")
                out.append(item.ty.dim)
            return tuple(out)
        if kind == "slices":
            out, wrong = _index_items(a.items)
            return bad("a list of indices and slices") if wrong is not None else out
        return bad(kind)  # pragma: no cover

    # ------------------------------------------------------------------ statements
    def block(self, stmts) -> tuple:
        out = []
        for s in stmts:
            t = getattr(self, f"s_{type(s).__name__}")(s)
            if t is not None:
                out.append(t)
        return tuple(out)

    def s_Let(self, s: ir.Let):
        value = self.expr(s.value)
        if self.declare(s.name, Binding("local", value.ty, s.name_span), s.name_span):
            return ir.Bind(s.name, value, True, s.span)
        return None

    def s_Assign(self, s: ir.Assign):
        guard = None
        value_e = s.value
        if isinstance(value_e, ir.Cond) and value_e.orelse is None:
            guard = self.condition(value_e.test)
            value_e = value_e.body
        b = self.lookup(s.name)
        present = self.presence(guard) if guard is not None else frozenset()
        self.push(present)
        value = self.expr(value_e)
        self.pop()
        if b is None:
            if s.index is None and s.name in {o.name for o in self.outputs} and guard is None:
                self.declare(s.name, Binding("local", value.ty, s.name_span), s.name_span)
                return ir.Bind(s.name, value, True, s.span)
            self.r.error("assign-undeclared", f"`{s.name}` is assigned but was never declared", s.name_span,
                         hint=f"declare it first: `let {s.name} = ...`")
            return None
        if b.kind != "local":
            what = _KIND_NAMES.get(b.kind, b.kind)
            self.r.error("assign-undeclared", f"`{s.name}` is {'an' if what[0] in 'aeiou' else 'a'} {what}; only `let` "
                         f"values can be re-assigned", s.name_span, related=(Related(b.span, "declared here"),))
            return None
        self.note_write(s.name, b)
        if s.index is not None:
            idx = tuple(self.expr(i) for i in s.index)
            stmt = self.set_item(s, b, idx, value)
        else:
            if not isinstance(value.ty, ErrorT) and not isinstance(b.ty, ErrorT) and not _same_type(b.ty, value.ty):
                self.r.error("reassign-type", f"`{s.name}` was {_show_t(self, b.ty)} and is re-assigned "
                             f"{_show_t(self, value.ty)}", s.span,
                             hint=f"use a new name: `let {s.name}_2 = ...`",
                             related=(Related(b.span, f"`{s.name}` declared here"),))
            elif isinstance(b.ty, ErrorT) and not isinstance(value.ty, ErrorT):
                b.ty = value.ty
            stmt = ir.Bind(s.name, value, False, s.span)
        if stmt is None:
            return None
        if guard is not None:
            return ir.TIf(guard, (stmt,), (), s.span)
        return stmt

    def set_item(self, s: ir.Assign, b: Binding, idx: tuple, value: ir.TExpr):
        if isinstance(b.ty, ErrorT) or isinstance(value.ty, ErrorT) or any(isinstance(i.ty, ErrorT) for i in idx):
            return ir.SetItem(s.name, idx, value, s.span)
        if not isinstance(b.ty, TensorT):
            self.r.error("arg-kind", f"`{s.name}` is not a tensor and cannot be indexed", s.name_span)
            return None
        items, bad = _index_items(idx)
        if bad is not None:
            self.r.error("arg-kind", "indices must be integers or slices", bad.span)
            return None
        if any(isinstance(i, ir.Ref) and i.kind == "loopvar" for i in idx):
            self.loops[-1]["uses_var"] = True
        from .ops.core import _slices_shape
        ctx = ShapeCtx(self, s.span)
        try:
            region = _slices_shape(ctx, b.ty.shape, tuple(items), "index")
        except OpError as err:
            self.r.error(err.code, err.message, s.span)
            return None
        if isinstance(value.ty, TensorT):
            if len(region) != value.ty.rank or not all(ctx.eq(x, y) for x, y in zip(region, value.ty.shape)):
                related = [Related(b.span, f"`{s.name}` is {self.show(b.ty.shape)}, declared here")]
                o = self.origin(value, "value")
                if o.span.line:
                    related.append(o)
                self.r.error("shape-mismatch", f"`{_text(ir.Subscript(ir.Name(s.name), s.index))}` is "
                             f"{self.show(region)} but the value is {self.show(value.ty.shape)}", s.span,
                             related=tuple(related))
        return ir.SetItem(s.name, idx, value, s.span)

    def note_write(self, name: str, b: Binding) -> None:
        for loop in self.loops:
            if b.loop_depth < loop["depth"]:
                loop["carried"].setdefault(name, None)

    def s_Assert(self, s: ir.Assert):
        e = s.test
        if not (isinstance(e, ir.Compare) and e.op in ("<=", "<", ">=", ">", "==")):
            self.r.error("bad-condition", "`assert` compares two dims, e.g. `assert T <= block_size`", s.test.span)
            return None
        lhs, rhs = self.expr(e.left), self.expr(e.right)
        dims = []
        for side, part in ((lhs, e.left), (rhs, e.right)):
            if isinstance(side.ty, ErrorT):
                return None
            if not (isinstance(side.ty, ScalarT) and side.ty.kind == "int" and side.ty.dim is not None):
                self.r.error("bad-condition", f"`{_text(part)}` is not a dim", part.span)
                return None
            dims.append(side.ty.dim)
        a, b = dims
        if a.value is not None and b.value is not None:
            if not {"<=": a.value <= b.value, "<": a.value < b.value, ">=": a.value >= b.value,
                    ">": a.value > b.value, "==": a.value == b.value}[e.op]:
                self.r.error("bad-constraint", f"this assertion is always false ({a.value} {e.op} {b.value})", s.span)
            return None
        self.runtime_checks.setdefault((a, b, e.op), s.span)
        return None

    def s_If(self, s: ir.If):
        test = self.condition(s.test)
        present = self.presence(test)
        self.push(present)
        body = self.block(s.body)
        self.pop()
        self.push()
        orelse = self.block(s.orelse)
        self.pop()
        return ir.TIf(test, body, orelse, s.span)

    def s_For(self, s: ir.For):
        if self.loops:
            self.r.error("syntax", "layer loops cannot nest", s.span, hint="write one loop over the layers")
            return None
        lo, hi = self.expr(s.lo), self.expr(s.hi)
        if isinstance(lo.ty, ErrorT) or isinstance(hi.ty, ErrorT):
            return None
        if not all(isinstance(t.ty, ScalarT) and t.ty.kind == "int" and t.ty.dim is not None for t in (lo, hi)):
            self.r.error("loop-range", "a loop runs over `0..N-1` with N an int param", s.lo.span.to(s.hi.span))
            return None
        if lo.ty.dim.value != 0:
            self.r.error("loop-range", f"layer loops start at 0, not {self.show_dim(lo.ty.dim)}", s.lo.span,
                         hint=f"write `for {s.var} in 0..{_text(s.hi)}:`")
            return None
        count = hi.ty.dim + 1
        if any(sym in self.runtime for sym in count.symbols()):
            self.r.error("loop-range", "the number of layers must come from params, not run-time dims", s.hi.span)
            return None
        loop = {"var": s.var, "count": count, "depth": len(self.loops) + 1, "carried": {}, "reads": {},
                "stacked": {}, "uses_var": False, "layer_inputs": {}}
        self.loops.append(loop)
        self.push()
        self.declare(s.var, Binding("loopvar", ScalarT("int", None), s.span), s.span)
        body = self.block(s.body)
        self.pop()
        self.loops.pop()
        return ir.Loop(s.var, count, body, tuple(loop["carried"]), tuple(n for n in loop["reads"] if n not in
                                                                          loop["carried"]),
                       tuple(loop["stacked"]), s.span, loop["uses_var"], tuple(loop["layer_inputs"]))

    # ------------------------------------------------------------------ whole spec
    def run(self) -> ir.Model | None:
        self.declarations()
        body = self.block(self.spec.body)
        if not self.outputs and not self.r.has_errors:
            self.r.error("output-unbound", "the spec declares no output", Span(1, 1, 1, 2),
                         hint="add an `output:` section, e.g. `output:` / `  y : Tensor([B, D], float32)`")
        outputs = []
        for o in self.outputs:
            b = self.scopes[0].names.get(o.name)
            if b is None or b.kind != "local":
                self.r.error("output-unbound", f"output `{o.name}` is never computed", o.span,
                             hint=f"bind it with `let {o.name} = ...`")
                continue
            b.uses += 1
            got = b.ty
            if isinstance(got, TensorT) and not isinstance(got, ErrorT):
                ok = got.rank == o.ty.rank and all(self.output_dim(d, g) for d, g in zip(o.ty.shape, got.shape))
                if got.maybe_none and not o.optional:
                    self.r.error("output-mismatch", f"output `{o.name}` may be None here; declare it optional `?`",
                                 o.span)
                if not ok or got.dtype != o.ty.dtype:
                    self.r.error("output-mismatch", f"output `{o.name}` is declared {self.show(o.ty.shape)} "
                                 f"{o.ty.dtype} but computed as {self.show(got.shape)} {got.dtype}", o.span,
                                 related=(Related(b.span, f"`{o.name}` computed here"),))
            elif isinstance(got, ScalarT):
                self.r.error("output-mismatch", f"output `{o.name}` must be a tensor", o.span)
            outputs.append(o)
        self.unused_warnings()
        loops = [s for s in ir.walk_stmts(body) if isinstance(s, ir.Loop)]
        stacked = tuple(dict.fromkeys(n for s in loops for n in s.stacked))
        for name in stacked:  # each layer of the loop owns its slice, so nothing else may read it
            owners = [s for s in loops if name in s.stacked]
            if self.whole_reads.get(name):
                self.r.error("stacked-index", f"`{name}` is used both per layer (`{name}[{owners[0].var}]`) and "
                             f"otherwise", self.whole_reads[name][0],
                             related=(Related(owners[0].span, f"used per layer in the loop over `{owners[0].var}`"),),
                             hint="a stacked parameter lives in the layers of its loop: index it with the loop "
                                  "variable everywhere, or declare a separate parameter for this use")
            elif len(owners) > 1:
                self.r.error("stacked-index", f"`{name}` is used per layer in two loops; the layers of each loop "
                             f"own their parameters", owners[1].span,
                             related=(Related(owners[0].span, "the first loop"),),
                             hint="declare one stacked parameter for each loop")
        self.check_mappings(set(stacked))
        if self.r.has_errors:
            return None
        params = tuple(ir.replace(p, role=self.roles.get(p.name, "")) for p in self.params)
        buffers = tuple(ir.replace(p, role=self.roles.get(p.name, "")) for p in self.buffers)
        return ir.Model(
            name=self.spec.name, path=self.spec.path, sha256=self.spec.sha256,
            config=tuple(self.config), derived=tuple(self.derived), inputs=tuple(self.inputs),
            params=params, buffers=buffers, outputs=tuple(outputs), body=body,
            constraints=tuple(self.constraints),
            runtime_dims=tuple((d, inp, ax) for d, (inp, ax) in self.runtime.items() if inp),
            display=tuple(sorted(((k, v) for k, v in self.display.items()), key=lambda kv: kv[1])),
            mappings=self.spec.mappings, stacked=stacked,
            checks=tuple(ir.Check(lo, hi, span, op) for (lo, hi, op), span in self.runtime_checks.items()),
            input_groups=tuple(sorted({tuple(sorted(self.group(i.name), key=self.input_order))
                                       for i in self.inputs if i.optional and len(self.group(i.name)) > 1})))

    def input_order(self, name: str) -> int:
        return [i.name for i in self.inputs].index(name)

    def check_mappings(self, stacked: set) -> None:
        from .codegen_data import MappingError, encode_mapping
        tensors = {t.name for t in self.params + self.buffers}
        seen: dict[tuple, Span] = {}
        for e in self.spec.mappings:
            if e.name != "_" and e.name not in tensors:
                self.unknown(e.name, e.span, "bad-checkpoint",
                             hint="a checkpoint entry maps a parameter or buffer (or `_` for keys to ignore)")
                continue
            if (e.fmt, e.name) in seen and e.name != "_":
                self.r.error("bad-checkpoint", f"`{e.name}` is mapped twice in `checkpoint {e.fmt}`", e.span,
                             related=(Related(seen[(e.fmt, e.name)], "first mapped here"),))
                continue
            seen[(e.fmt, e.name)] = e.span
            if e.name != "_" and (e.name in stacked) != (e.layer_var is not None):
                want = f"`{e.name}[l] <- ...` with `{{l}}` in the key" if e.name in stacked else f"`{e.name} <- ...`"
                self.r.error("bad-checkpoint", f"`{e.name}` is {'per layer' if e.name in stacked else 'not per layer'}"
                             f"; write {want}", e.span)
                continue
            try:
                encode_mapping(e.source)
            except MappingError as err:
                self.r.error("bad-checkpoint", str(err), getattr(err, "span", None) or e.span,
                             hint='sources are "key" strings, `.T`, `a or b` and split("key", n, axis=i, index=j)')

    def output_dim(self, declared: Dim, got: Dim) -> bool:
        sym = declared.as_symbol()
        if sym in self.free_out:
            bound = self.free_bound.setdefault(sym, got)
            return equal(bound, got)[0]
        return equal(declared, got)[0]

    def unused_warnings(self) -> None:
        for name in RECOGNISED_CONFIG:
            b = self.scopes[0].names.get(name)
            if b is not None and b.kind == "config":
                b.uses += 1
                if b.ty != BOOL:
                    self.r.error("bad-type", f"`{name}` is a switch snfc reads: declare it `bool`", b.span)
        for name, b in self.scopes[0].names.items():
            if b.uses == 0 and b.kind in ("config", "param", "buffer", "input"):
                what = _KIND_NAMES[b.kind]
                self.r.warning("unused", f"{what} `{name}` is declared but never used", b.span)


# Config switches the code generator acts on (docs/language.md, "Recognised params").
RECOGNISED_CONFIG = ("gradient_checkpointing",)

_KIND_NAMES = {"config": "param", "param": "parameter", "buffer": "buffer", "input": "input", "dim": "dim",
               "loopvar": "loop variable", "output": "output", "local": "value"}
_FAIL = object()


@dataclass(frozen=True)
class _ShapeOf:
    """`x.shape` before it is indexed; never survives into the typed IR."""

    base: ir.TExpr
    ty: ShapeT
    span: Span


def _default_lit(p) -> ir.Lit:
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


def _value_of(lit: ir.Lit, kind: str):
    if kind == "int":
        return lit.ty.dim if isinstance(lit.ty, ScalarT) else None
    return lit.value


def _same_type(a: ir.Type, b: ir.Type) -> bool:
    if isinstance(a, TensorT) and isinstance(b, TensorT):
        return a.dtype == b.dtype and a.rank == b.rank and all(equal(x, y)[0] for x, y in zip(a.shape, b.shape))
    if isinstance(a, ScalarT) and isinstance(b, ScalarT):
        return a.kind == b.kind
    return type(a) is type(b)


def _show_t(c: Checker, t: ir.Type) -> str:
    if isinstance(t, TensorT):
        return f"{c.show(t.shape)} {t.dtype}"
    if isinstance(t, ScalarT):
        return t.kind
    return type(t).__name__


def _text(e) -> str:
    """A short spec-like rendering of a syntax expression, for messages."""
    if isinstance(e, ir.Name):
        return e.id
    if isinstance(e, ir.Num):
        return repr(e.value)
    if isinstance(e, ir.Str):
        return repr(e.value)
    if isinstance(e, ir.Const):
        return repr(e.value)
    if isinstance(e, ir.BinOp):
        return f"{_text(e.left)} {e.op} {_text(e.right)}"
    if isinstance(e, ir.Call):
        return f"{e.func}(...)"
    if isinstance(e, ir.Subscript):
        return f"{_text(e.value)}[" + ", ".join(_text(i) for i in e.index) + "]"
    if isinstance(e, ir.SliceExpr):
        return f"{_text(e.lo) if e.lo else ''}:{_text(e.hi) if e.hi else ''}"
    if isinstance(e, ir.Attribute):
        return f"{_text(e.value)}.{e.attr}"
    if isinstance(e, ir.ListExpr):
        return "[" + ", ".join(_text(i) for i in e.items) + "]"
    return "..."


def _text_t(t) -> str:
    return getattr(t, "name", "value")


def check(spec: ir.Spec, r: Reporter) -> ir.Model | None:
    """Check a parsed spec; report every error and return the typed model, or None."""
    return Checker(spec, r).run()
