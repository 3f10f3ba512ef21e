"""Type rules for statements: `let`, re-assignment (whole or indexed), `if`, `assert`.

Layer loops (`for`) are in loops.py.
"""

from __future__ import annotations

from .. import ir
from ..diagnostics import Related
from ..dims import equal
from ..ir import ErrorT, ScalarT, TensorT
from ..ops import compare
from ..ops.shapes import slices_shape, stored
from ..ops.registry import OpError
from .calls import ShapeCtx, index_items
from .messages import KIND_NAMES, article, text
from .scopes import Binding


class Statements:
    """Mixed into `Checker`: each method `s_<SyntaxNode>` returns a typed statement, or None."""

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
        with self.guarded(guard):
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
            what = KIND_NAMES.get(b.kind, b.kind)
            self.r.error("assign-undeclared", f"`{s.name}` is {article(what)} {what}; only `let` "
                         f"values can be re-assigned", s.name_span, related=(Related(b.span, "declared here"),))
            return None
        self.note_write(s.name, b)
        if s.index is not None:
            idx = tuple(self.expr(i) for i in s.index)
            stmt = self.set_item(s, b, idx, value)
        elif not self.keeps_presence(b, value):
            return None
        else:
            if not isinstance(value.ty, ErrorT) and not isinstance(b.ty, ErrorT) and not same_type(b.ty, value.ty):
                self.r.error("reassign-type", f"`{s.name}` was {self.show_type(b.ty)} and is re-assigned "
                             f"{self.show_type(value.ty)}", s.span,
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

    def keeps_presence(self, b: Binding, value: ir.TExpr) -> bool:
        """A value that may be None goes only into a name that may be None: `let y = x` then
        `y = opt` would leave y None though every later use (an output) takes it as present."""
        if isinstance(b.ty, TensorT) and b.ty.maybe_none:
            return True
        return self.must_exist(value, value.span)

    def set_item(self, s: ir.Assign, b: Binding, idx: tuple, value: ir.TExpr):
        if isinstance(b.ty, ErrorT) or isinstance(value.ty, ErrorT) or any(isinstance(i.ty, ErrorT) for i in idx):
            return ir.SetItem(s.name, idx, value, s.span)
        if not self.must_exist(value, value.span):
            return None
        if not isinstance(b.ty, TensorT):
            self.r.error("arg-kind", f"`{s.name}` is not a tensor and cannot be indexed", s.name_span)
            return None
        items, bad = index_items(idx)
        if bad is not None:
            self.r.error("arg-kind", "indices must be dims (integers known from params, sizes and the loop "
                         "variable) or slices", bad.span)
            return None
        ctx = ShapeCtx(self, s.span)
        try:
            region = slices_shape(ctx, b.ty.shape, tuple(items), "index")
            stored(b.ty.dtype, value.ty)
        except OpError as err:
            self.r.error(err.code, err.message, s.span)
            return None
        if isinstance(value.ty, TensorT):
            if len(region) != value.ty.rank or not all(ctx.eq(x, y) for x, y in zip(region, value.ty.shape)):
                related = [Related(b.span, f"`{s.name}` is {self.show(b.ty.shape)}, declared here")]
                o = self.origin(value, "value")
                if o.span.line:
                    related.append(o)
                self.r.error("shape-mismatch", f"`{text(ir.Subscript(ir.Name(s.name), s.index))}` is "
                             f"{self.show(region)} but the value is {self.show(value.ty.shape)}", s.span,
                             related=tuple(related))
        return ir.SetItem(s.name, idx, value, s.span)

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
                self.r.error("bad-condition", f"`{text(part)}` is not a dim", part.span)
                return None
            dims.append(side.ty.dim)
        a, b = dims
        if a.value is not None and b.value is not None:
            if not compare(a.value, e.op, b.value):
                self.r.error("bad-constraint", f"this assertion is always false ({a.value} {e.op} {b.value})", s.span)
            return None
        # made where the statement runs (under its ifs), and it must hold for the defaults
        if not self.need(a, e.op, b, s.span, prove=False):
            shown = f"{self.show_dim(a)} {e.op} {self.show_dim(b)}"
            if (b - a).value is not None:
                self.r.error("bad-constraint", f"this assertion is always false ({shown})", s.span)
            else:
                values = ", ".join(f"{n} = {v}" for n, v in sorted(self.defaults().items())
                                   if n in a.symbols() | b.symbols())
                self.r.error("bad-constraint", f"this assertion is false with the default config ({shown} with "
                             f"{values})", s.span, hint="change the defaults in `param:`, or the assertion")
        return None

    def s_If(self, s: ir.If):
        test = self.condition(s.test)
        present = self.presence(test)
        self.push(present)
        with self.guarded(test):
            body = self.block(s.body)
        self.pop()
        self.push(self.else_presence(test))  # `else:` of a flag or a layer condition
        with self.guarded(test, negate=True):
            orelse = self.block(s.orelse)
        self.pop()
        return ir.TIf(test, body, orelse, s.span)


def same_type(a: ir.Type, b: ir.Type) -> bool:
    if isinstance(a, TensorT) and isinstance(b, TensorT):
        return a.dtype == b.dtype and a.rank == b.rank and all(equal(x, y)[0] for x, y in zip(a.shape, b.shape))
    if isinstance(a, ScalarT) and isinstance(b, ScalarT):
        return a.kind == b.kind
    return type(a) is type(b)
