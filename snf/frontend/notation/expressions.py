"""Lowering expressions: names (states, groups, locals), subscripts and fields, arithmetic with
broadcasting, and matrix products, each giving a tensor or scalar value with its shape."""

from __future__ import annotations


from ... import ir
from ...dims import Dim, equal, show_dim
from ...ops import by_symbol
from ...source import Span
from .syntax import Shifted, Transposed
from .values import LOOP, POISON, AttnWeights, GroupRef, LoweringError, ParamRef, SVal, TVal


class Expressions:
    """Mixed into `Lowering`: each method `e_<SyntaxNode>` returns a value (values.py)."""

    def tensor(self, v, span: Span, what: str) -> TVal:
        if isinstance(v, TVal):
            return v
        if isinstance(v, AttnWeights):
            self.fail("arg-kind", f"{what} is attention weights `{self.text(v.span)}`, which snfc can only use as "
                      "`p @ v`", span, hint="multiply the weights by the values: `p @ v`")
        if isinstance(v, (ParamRef, GroupRef)):
            self.fail("arg-kind", f"{what} is a parameter; parameters are passed to operations such as "
                      "`Linear(x, θ)`", span)
        self.fail("arg-kind", f"{what} must be a tensor, got `{self.text(span)}`", span)

    def expr(self, e):
        method = getattr(self, f"e_{type(e).__name__}", None)
        if method is None:
            self.fail("syntax", f"`{self.text(e.span)}` is not supported here", e.span)
        return method(e)

    def e_Num(self, e: ir.Num):
        if isinstance(e.value, int):
            return SVal(e, "int", Dim.const(e.value), e.span)
        return SVal(e, "float", None, e.span)

    def e_Str(self, e: ir.Str):
        return SVal(e, "str", None, e.span)

    def e_Name(self, e: ir.Name):
        if e.id in self.poisoned and not any(e.id in f.names for f in self.frames):
            raise LoweringError
        for frame in reversed(self.frames):
            if e.id in frame.names:
                v = frame.names[e.id]
                if v is POISON:
                    raise LoweringError
                if isinstance(v, TVal):
                    return TVal(ir.Name(v.expr.id, e.span) if isinstance(v.expr, ir.Name) else v.expr, v.shape,
                                v.dtype, e.span, v.heads)
                if isinstance(v, AttnWeights):
                    v.used = True
                return v
        if self.loop is not None and e.id == self.loop["var"]:
            return SVal(ir.Name(self.loop["ir"], e.span), "loopvar", Dim.sym(LOOP), e.span)
        if e.id in self.dims:
            return SVal(ir.Name(e.id, e.span), "int", Dim.sym(e.id), e.span)
        if e.id in self.states:
            return self.state_read(self.states[e.id], None, e.span)
        if e.id in self.groups:
            group = self.groups[e.id]
            group.used = True
            if group.count is not None:
                return GroupRef(e.id, False, e.span)
            return ParamRef(e.id, None, False, e.span)
        if e.id in self.operators or e.id in self.transitions:
            self.fail("arg-kind", f"`{e.id}` is an operator; call it: `{e.id}(...)`", e.span)
        if e.id in self.outputs:
            local = self.outputs[e.id][0]
            return TVal(ir.Name(local.expr.id, e.span), local.shape, local.dtype, e.span)
        names = list(self.dims) + list(self.states) + list(self.groups) + [n for f in self.frames for n in f.names]
        import difflib  # for a hint only
        close = difflib.get_close_matches(e.id, names, n=1)
        self.fail("unknown-name", f"`{e.id}` is not defined", e.span,
                  hint=f"did you mean `{close[0]}`?" if close else None)

    def e_Subscript(self, e: ir.Subscript):
        if isinstance(e.value, ir.Name) and e.value.id in self.poisoned:
            raise LoweringError
        if isinstance(e.value, ir.Name) and e.value.id in self.states and not any(
                e.value.id in f.names for f in self.frames):
            return self.state_read(self.states[e.value.id], e.index, e.span)
        base = self.expr(e.value)
        if isinstance(base, GroupRef) and not base.layered:
            group = self.groups[base.group]
            if len(e.index) != 1 or self.loop is None or not (
                    isinstance(e.index[0], ir.Name) and e.index[0].id == self.loop["var"]):
                self.fail("stacked-index", f"`{base.group}` has one entry per layer; index it with the loop "
                          f"variable inside `For`: `{base.group}[{self.loop_name()}]`", e.span)
            if not equal(group.count, self.loop["count"])[0]:
                self.fail("stacked-index", f"`{base.group}` has {show_dim(group.count)} entries but the loop runs "
                          f"{show_dim(self.loop['count'])} times", e.span)
            return GroupRef(base.group, True, e.span)
        self.fail("syntax", f"`{self.text(e.span)}`: only state sequences and per-layer parameter groups are "
                  "indexed", e.span)

    def e_Attribute(self, e: ir.Attribute):
        base = self.expr(e.value)
        if isinstance(base, GroupRef):
            if not base.layered:
                self.fail("stacked-index", f"`{base.group}` has one entry per layer: write "
                          f"`{base.group}[{self.loop_name()}].{e.attr}`", e.value.span)
            return ParamRef(base.group, e.attr, True, e.span)
        if isinstance(base, ParamRef) and base.fieldname is None:
            return ParamRef(base.group, e.attr, base.layered, e.span)
        self.fail("syntax", f"`.{e.attr}`: only parameter groups have fields", e.span)

    def e_Unary(self, e: ir.Unary):
        v = self.expr(e.operand)
        if isinstance(v, SVal) and v.kind in ("int", "float"):
            return SVal(ir.Unary("-", v.expr, e.span), v.kind, -v.dim if v.dim is not None else None, e.span)
        t = self.tensor(v, e.operand.span, "the operand of `-`")
        self.no_heads(t)
        return TVal(ir.Unary("-", t.expr, e.span), t.shape, t.dtype, e.span)

    def e_Transposed(self, e: Transposed):
        t = self.tensor(self.expr(e.value), e.value.span, "a transposed value")
        self.no_heads(t, "only `q @ k^T` inside a softmax")
        if len(t.shape) < 2:
            self.fail("rank-mismatch", f"`{self.text(e.span)}` transposes a tensor of rank {len(t.shape)}", e.span)
        return TVal(ir.Call("transpose", (t.expr,), (), e.span, e.span), t.shape[:-2] + (t.shape[-1], t.shape[-2]),
                    t.dtype, e.span)

    def e_Shifted(self, e: Shifted):
        self.fail("syntax", "`shifted by` marks the targets of `CrossEntropy(logits, tok shifted by 1)`", e.span)

    def no_heads(self, t: TVal, where: str = "") -> None:
        if t.heads:
            self.fail("arg-kind", f"`{self.text(t.span)}` is split into heads; it can only be used in attention "
                      "(`CausalSoftmax(q @ k^T / √d) @ v`) and `MergeHeads`", t.span)

    def e_BinOp(self, e: ir.BinOp):
        if e.op == "@":
            return self.matmul(e)
        a, b = self.expr(e.left), self.expr(e.right)
        if isinstance(a, SVal) and isinstance(b, SVal):
            return self.scalar_op(e, a, b)
        if e.op not in ("+", "-", "*", "/", "**"):
            self.fail("syntax", f"`{e.op}` does not apply to tensors", e.span)
        if isinstance(a, SVal) or isinstance(b, SVal):
            t, s = (b, a) if isinstance(a, SVal) else (a, b)
            t = self.tensor(t, e.span, "an operand")
            self.no_heads(t)
            if s.kind not in ("int", "float"):
                self.fail("arg-kind", f"`{self.text(s.span)}` is not a number", s.span)
            return TVal(ir.BinOp(e.op, a.expr, b.expr, e.span), t.shape, t.dtype, e.span)
        ta = self.tensor(a, e.left.span, f"the left operand of `{e.op}`")
        tb = self.tensor(b, e.right.span, f"the right operand of `{e.op}`")
        self.no_heads(ta)
        self.no_heads(tb)
        if ta.dtype != tb.dtype:
            self.fail("dtype-mismatch", f"`{e.op}` of {ta.dtype} and {tb.dtype}", e.span)
        return TVal(ir.BinOp(e.op, ta.expr, tb.expr, e.span), self.broadcast(ta.shape, tb.shape, e), ta.dtype, e.span)

    def broadcast(self, a: tuple, b: tuple, e) -> tuple:
        out = []
        for i in range(1, max(len(a), len(b)) + 1):
            x = self.sizes.find(a[-i]) if i <= len(a) else None
            y = self.sizes.find(b[-i]) if i <= len(b) else None
            if x is None or (isinstance(x, Dim) and x.value == 1):
                out.append(y)
            elif y is None or (isinstance(y, Dim) and y.value == 1):
                out.append(x)
            elif self.sizes.unify(x, y):
                out.append(x)
            else:
                self.fail("shape-mismatch", f"`{self.text(e.span)}`: cannot combine {self.sizes.show_shape(a)} "
                          f"with {self.sizes.show_shape(b)}", e.span)
        return tuple(reversed(out))

    def scalar_op(self, e: ir.BinOp, a: SVal, b: SVal) -> SVal:
        if "str" in (a.kind, b.kind):
            self.fail("arg-kind", f"`{e.op}` of a string", e.span)
        if a.dim is not None and b.dim is not None and e.op in ("+", "-", "*", "/"):
            if e.op == "/" and b.dim.value == 0:
                self.fail("bad-constraint", f"`{self.text(e.span)}` divides by zero", e.span)
            if e.op == "/":
                dim = a.dim // b.dim
                return SVal(ir.BinOp("//", a.expr, b.expr, e.span), "int", dim, e.span)
            dim = by_symbol(e.op).scalar(a.dim, b.dim)  # + - * of the dims' polynomials
            return SVal(ir.BinOp(e.op, a.expr, b.expr, e.span), "int", dim, e.span)
        return SVal(ir.BinOp(e.op, a.expr, b.expr, e.span), "float", None, e.span)

    def matmul(self, e: ir.BinOp):
        a = self.expr(e.left)
        if isinstance(a, AttnWeights):
            v = self.tensor(self.expr(e.right), e.right.span, "the values of attention")
            return self.attention(a, v, e)
        b = self.expr(e.right)
        ta = self.tensor(a, e.left.span, "the left operand of `@`")
        tb = self.tensor(b, e.right.span, "the right operand of `@`")
        self.no_heads(ta)
        self.no_heads(tb)
        if len(ta.shape) < 2 or len(tb.shape) < 2:
            self.fail("rank-mismatch", "`@` multiplies tensors of rank 2 or more", e.span)
        if not self.sizes.unify(ta.shape[-1], tb.shape[-2]):
            self.fail("shape-mismatch", f"`{self.text(e.span)}`: inner sizes differ, "
                      f"{self.sizes.show_shape(ta.shape)} @ {self.sizes.show_shape(tb.shape)}", e.span)
        batch = self.broadcast(ta.shape[:-2], tb.shape[:-2], e)
        return TVal(ir.BinOp("@", ta.expr, tb.expr, e.span), batch + (ta.shape[-2], tb.shape[-1]), ta.dtype, e.span)
