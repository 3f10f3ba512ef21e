"""The lowering's spine: it walks the program in execution order, inlining operators and
transitions, and emits DSL statements. States and the depth loop, expressions, calls of the
notation's operations, attention, and the sections and final declarations are mixins (one
module each)."""

from __future__ import annotations


from ... import ir
from ...diagnostics import Reporter
from ...dims import Dim, DimError
from ...source import Source, Span
from ..lark_common import model_name
from .attention import Attention
from .builtins import Builtins
from .declarations import Declarations
from .expressions import Expressions
from .sizes import Hole, Sizes, dim_to_expr
from .states import States
from .syntax import Apply, DomainEntry, ForBlock, LossDef, OperatorDef, OutputEntry, Return, Section, TransitionDef
from .values import POISON, RESERVED_NAMES, AttnWeights, Frame, Group, LoweringError, Param, StateInfo, SVal, TVal


class Lowering(Declarations, States, Expressions, Builtins, Attention):
    def __init__(self, src: Source, r: Reporter, items: list):
        self.src, self.r = src, r
        self.items = items
        self.sizes = Sizes(r)
        self.dims: dict[str, DomainEntry] = {}
        self.roles: dict[str, str] = {}  # dim name -> role
        self.states: dict[str, StateInfo] = {}
        self.groups: dict[str, Group] = {}
        self.params: dict[str, Param] = {}
        self.operators: dict[str, OperatorDef] = {}
        self.transitions: dict[str, TransitionDef] = {}
        self.used_ops: set[str] = set()
        self.taken: set[str] = set()
        self.block: list = []
        self.frames: list[Frame] = [Frame()]
        self.loop: dict | None = None
        self.outputs: dict[str, tuple] = {}  # name -> (TVal, span)
        self.declared_outputs: list[OutputEntry] | None = None
        self.has_attention = False
        self.has_positions = False
        self.first_embed: Span | None = None
        self.inline_depth = 0
        self.poisoned: set[str] = set()  # names whose declaration or first value failed: uses stay quiet

    # ------------------------------------------------------------------ helpers
    def text(self, span: Span) -> str:
        if span.line == span.end_line:
            return self.src.line(span.line)[span.col - 1:span.end_col - 1]
        return self.src.line(span.line)[span.col - 1:] + " ..."

    def fail(self, code: str, message: str, span: Span, hint: str | None = None):
        self.r.error(code, message, span, hint)
        raise LoweringError

    def fresh(self, base: str) -> str:
        name, n = base, 2
        while name in self.taken or name in RESERVED_NAMES:
            name = f"{base}_{n}"
            n += 1
        self.taken.add(name)
        return name

    def role_of(self, role: str) -> Dim | None:
        for name, rl in self.roles.items():
            if rl == role:
                return Dim.sym(name)
        return None

    def size_expr(self, d, span: Span) -> ir.Expr:
        d = self.sizes.find(d)
        return dim_to_expr(d, span) if isinstance(d, Dim) else Hole(d, span)

    def shape_expr(self, shape, span: Span) -> ir.ListExpr:
        return ir.ListExpr(tuple(self.size_expr(d, span) for d in shape), span)

    def unify_shapes(self, a: tuple, b: tuple, span: Span, what: str) -> None:
        if len(a) != len(b) or not all(self.sizes.unify(x, y) for x, y in zip(a, b)):
            self.fail("shape-mismatch", f"{what}: {self.sizes.show_shape(a)} vs {self.sizes.show_shape(b)}", span)

    def size(self, e: ir.Expr) -> Dim:
        """A size expression of the Domain's dims (`L+1`, `D/H`, `4*D`)."""
        try:
            v = self.expr(e)
        except DimError as err:
            self.fail("too-large", str(err), e.span)
        if not isinstance(v, SVal) or v.dim is None:
            self.fail("unknown-dim", f"`{self.text(e.span)}` is not a size built from the Domain's dims", e.span)
        return v.dim

    # ------------------------------------------------------------------ run
    def run(self) -> ir.Spec | None:
        header = next((i for i in self.items if isinstance(i, tuple)), None)
        self.name = header[1] if header and header[1] else model_name(self.src.path)
        self.header_span = header[2] if header else Span(1, 1, 1, 2)
        sections = [i for i in self.items if isinstance(i, Section)]
        for kind in ("Domain", "State", "Parameters", "Output"):
            found = [s for s in sections if s.kind == kind]
            for extra in found[1:]:
                self.r.error("redefinition", f"a second `{kind}:` section", extra.span,
                             hint=f"list every entry in the first `{kind}:` section")
            if found:
                getattr(self, f"sec_{kind.lower()}")(found[0])
        for item in self.items:
            if isinstance(item, OperatorDef):
                self.define(self.operators, item, "operator")
            elif isinstance(item, TransitionDef):
                self.define(self.transitions, item, "transition")
        if self.r.has_errors:
            return None
        self.note_inputs()
        for item in self.items:
            try:
                if isinstance(item, Section) and item.kind == "Init":
                    for s in item.items:
                        self.stmt_guarded(s)
                elif isinstance(item, ForBlock):
                    self.for_block(item)
                elif isinstance(item, ir.Assign):
                    self.top_assign(item)
                elif isinstance(item, LossDef):
                    self.loss(item)
            except LoweringError:
                pass
            except DimError as err:
                self.r.error("too-large", f"{err}", item.span)
        if self.r.has_errors:
            return None
        self.finish_sizes()
        if self.r.has_errors:
            return None
        self.warn_unused()
        decls = self.declarations()
        body = tuple(self.fill(s) for s in self.block)
        if self.r.has_errors:
            return None
        return ir.Spec(self.src.path, self.src.sha256, self.name, tuple(decls), body, (), notation="model")

    def define(self, table: dict, item, what: str) -> None:
        if item.name in table or item.name in self.dims or item.name in self.groups or item.name in self.states:
            self.r.error("redefinition", f"`{item.name}` is already defined", item.name_span)
            return
        table[item.name] = item
        if isinstance(item, OperatorDef):
            seen = set()
            for p, span in item.params:
                if p in seen:
                    self.r.error("redefinition", f"operator parameter `{p}` is listed twice", span)
                seen.add(p)

    # ------------------------------------------------------------------ statements
    def stmt_guarded(self, s) -> None:
        try:
            self.stmt(s)
        except LoweringError:
            pass
        except DimError as err:
            self.r.error("too-large", f"{err}", s.span)
            if isinstance(s, ir.Assign):
                self.poisoned.add(s.name)

    def stmt(self, s) -> None:
        if isinstance(s, ir.Assign):
            self.assign(s)
        elif isinstance(s, Apply):
            self.apply(s)
        else:  # pragma: no cover - the grammar allows nothing else here
            self.fail("syntax", "unexpected statement", s.span)

    def emit(self, s) -> None:
        self.block.append(s)

    def assign(self, s: ir.Assign) -> None:
        try:
            self.assign_(s)
        except LoweringError:
            if s.name in self.states:
                self.poisoned.add(s.name)
            else:
                self.frames[-1].names[s.name] = POISON  # later uses report nothing more
            raise

    def assign_(self, s: ir.Assign) -> None:
        if s.name in self.states:
            self.state_write(s)
            return
        if s.index is not None:
            self.fail("syntax", f"`{s.name}` is not a state sequence and cannot be indexed", s.span,
                      hint=f"declare it in `State:` as `{s.name}[N] ∈ ℝ[...]`")
        value = self.expr(s.value)
        if isinstance(value, AttnWeights):
            self.frames[-1].names[s.name] = value
            return
        value = self.tensor(value, s.value.span, f"the value of `{s.name}`")
        self.bind(s.name, value, s)

    def bind(self, name: str, value: TVal, s: ir.Assign, fixed: bool = False) -> TVal:
        frame = self.frames[-1]
        old = frame.names.get(name)
        if isinstance(old, TVal) and name in frame.ir_names and self.same(old, value):
            ir_name = frame.ir_names[name]
            self.emit(ir.Assign(ir_name, None, value.expr, s.span, s.name_span))
        else:
            if fixed:
                if name in self.taken or name in RESERVED_NAMES:
                    self.fail("redefinition", f"`{name}` is already declared", s.name_span)
                self.taken.add(name)
                ir_name = name
            else:
                ir_name = self.fresh(name)
            self.emit(ir.Let(ir_name, value.expr, s.span, s.name_span))
        frame.ir_names[name] = ir_name
        local = TVal(ir.Name(ir_name, s.name_span), value.shape, value.dtype, s.name_span, value.heads)
        frame.names[name] = local
        return local

    def same(self, a: TVal, b: TVal) -> bool:
        return a.dtype == b.dtype and a.heads == b.heads and len(a.shape) == len(b.shape) and all(
            self.sizes.find(x) is self.sizes.find(y) or (
                isinstance(self.sizes.find(x), Dim) and self.sizes.find(x) == self.sizes.find(y))
            for x, y in zip(a.shape, b.shape))

    def top_assign(self, s: ir.Assign) -> None:
        try:
            self.top_assign_(s)
        except LoweringError:
            self.frames[0].names.setdefault(s.name, POISON)
            raise

    def top_assign_(self, s: ir.Assign) -> None:
        if s.name in self.states:
            self.stmt_guarded(s)
            return
        if self.declared_outputs is not None and s.name not in {o.name for o in self.declared_outputs}:
            self.stmt_guarded(s)
            return
        if s.index is not None:
            self.fail("syntax", f"`{s.name}` is not a state sequence and cannot be indexed", s.span)
        value = self.tensor(self.expr(s.value), s.value.span, f"output `{s.name}`")
        if value.heads:
            self.fail("shape-mismatch", f"output `{s.name}` is split into heads; merge them first", s.value.span)
        if s.name in self.outputs:
            self.fail("redefinition", f"output `{s.name}` is computed twice", s.name_span)
        local = self.bind(s.name, value, s, fixed=True)
        self.outputs[s.name] = (local, s.name_span)

    def loss(self, item: LossDef) -> None:
        value = self.tensor(self.expr(item.value), item.value.span, "the loss")
        if value.shape:
            self.fail("shape-mismatch", f"the loss must be a scalar, got {self.sizes.show_shape(value.shape)}",
                      item.value.span, hint="use `CrossEntropy(logits, targets)`")
        if "loss" in self.outputs:
            self.fail("redefinition", "the loss is defined twice", item.span)
        s = ir.Assign("loss", None, item.value, item.span, item.span)
        local = self.bind("loss", value, s, fixed=True)
        self.outputs["loss"] = (local, item.span)

    def apply(self, s: Apply) -> None:
        if self.loop is None:  # pragma: no cover - `apply` is only parsed inside `For`
            self.fail("syntax", "`apply` belongs inside `For`", s.span)
        t = self.transitions.get(s.name)
        if t is None:
            import difflib  # for a hint only
            close = difflib.get_close_matches(s.name, list(self.transitions), n=1)
            self.fail("unknown-name", f"no transition `{s.name}`", s.span,
                      hint=f"did you mean `{close[0]}`?" if close else "define it with `Transition NAME:`")
        self.used_ops.add(t.name)
        self.inline(t.body, {}, t.name, s.span)

    def inline(self, body, bindings: dict, name: str, span: Span):
        if self.inline_depth > 16:
            self.fail("too-large", f"`{name}` expands recursively", span)
        self.inline_depth += 1
        frame = Frame(dict(bindings), {})
        self.frames.append(frame)
        result = None
        try:
            for s in body:
                if isinstance(s, Return):
                    v = self.expr(s.value)
                    result = v if isinstance(v, AttnWeights) else self.tensor(v, s.value.span, "the result")
                    break
                self.stmt(s)
        finally:
            self.frames.pop()
            self.inline_depth -= 1
        for local, v in frame.names.items():
            if isinstance(v, AttnWeights) and not v.used and v is not result:
                self.r.warning("unused", f"`{local}` is computed but never used", v.span)
        return result
