"""Type rules for expressions: literals, names, operators, conditionals, lists, slices, subscripts,
attributes and calls, each a method `e_<SyntaxNode>` that returns a typed expression.

A value whose check failed gets `ErrorT`, and nothing that uses it reports again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import ir
from ..diagnostics import Related
from ..dims import Dim
from ..ir import BOOL, FLOAT, INT, STR, ErrorT, ListT, NoneT, ScalarT, SeqT, ShapeT, SliceT, TensorT
from ..language import DTYPES
from ..ops import by_symbol
from ..source import Span
from .calls import ERR
from .messages import text


@dataclass(frozen=True)
class ShapeOf:
    """`x.shape` before it is indexed; never survives into the typed IR."""

    base: ir.TExpr
    ty: ShapeT
    span: Span


class Expressions:
    """Mixed into `Checker`."""

    def condition(self, e: ir.Expr) -> ir.TExpr:
        t = self.expr(e)
        if not isinstance(t.ty, ErrorT) and not (isinstance(t.ty, ScalarT) and t.ty.kind in ("bool", "int", "float")):
            self.r.error("bad-condition", f"`{text(e)}` is not a condition", e.span,
                         hint="conditions use config values and `X exists`")
            return ir.Lit(False, ERR, e.span)
        return t

    def expr(self, e: ir.Expr) -> ir.TExpr:
        typed = getattr(self, f"e_{type(e).__name__}")(e)
        if isinstance(typed, ShapeOf):  # only `x.shape[i]` is a value
            self.r.error("arg-kind", f"`{text(e)}` is a list of dims, not a value", e.span,
                         hint=f"index it: `{text(e)}[0]` is the size of axis 0")
            return ir.Lit(None, ERR, e.span)
        return typed

    def e_Num(self, e: ir.Num):
        if isinstance(e.value, int):
            return ir.Lit(e.value, ScalarT("int", Dim.const(e.value)), e.span)
        if not math.isfinite(e.value):  # 1e400 reads as infinity
            self.r.error("bad-arithmetic", f"`{self.source_text(e.span) or e.value}` is too large for a float",
                         e.span)
            return ir.Lit(0.0, ERR, e.span)
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
        if b.kind == "loopvar" and self.loops:  # used as a value (an index, a bound, a dim), not only to pick `w[l]`
            self.loops[-1]["uses_var"] = True
        return ir.Ref(e.id, b.kind, ty, e.span)


    def e_BinOp(self, e: ir.BinOp):
        return self.call_op(by_symbol(e.op).name, e, [self.expr(e.left), self.expr(e.right)], {},
                            [e.left.span, e.right.span])

    def e_Compare(self, e: ir.Compare):
        return self.call_op(by_symbol(e.op).name, e, [self.expr(e.left), self.expr(e.right)], {},
                            [e.left.span, e.right.span])

    def e_BoolOp(self, e: ir.BoolOp):
        left = self.expr(e.left)
        extra = self.presence(left) if e.op == "and" else frozenset()
        self.push(extra)
        right = self.expr(e.right)
        self.pop()
        return self.call_op(by_symbol(e.op).name, e, [left, right], {}, [e.left.span, e.right.span])

    def e_Unary(self, e: ir.Unary):
        operand = self.expr(e.operand)
        if e.op == "+":
            return operand
        if e.op == "-" and isinstance(operand, ir.Lit) and isinstance(operand.value, (int, float)) \
                and not isinstance(operand.value, bool):
            return self.e_Num(ir.Num(-operand.value, e.span))
        return self.call_op(by_symbol(e.op, 1).name, e, [operand], {}, [e.operand.span])

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
        with self.guarded(test):
            body = self.expr(e.body)
        self.pop()
        if e.orelse is None:
            self.r.error("syntax", "a conditional value needs an `else`", e.span,
                         hint="only a re-assignment may end in a bare `if`: `x = f(x) if cond`")
            return ir.TCond(test, body, body, ERR, e.span)
        self.push(self.else_presence(test))  # the `else` of a flag or a layer condition
        with self.guarded(test, negate=True):
            orelse = self.expr(e.orelse)
        self.pop()
        return ir.TCond(test, body, orelse, self.join(test, body.ty, orelse.ty, e), e.span)

    def join(self, test, a: ir.Type, b: ir.Type, e) -> ir.Type:
        if isinstance(a, ErrorT) and isinstance(b, ErrorT):
            return ERR
        if isinstance(a, ErrorT) or isinstance(b, ErrorT):
            # one branch is wrong (and reported): go on with the other, so that an independent
            # mistake further on is reported in this run too, not only once this one is fixed
            good = b if isinstance(a, ErrorT) else a
            return good if isinstance(good, (TensorT, ScalarT)) else ERR
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
            elif isinstance(part.ty, ScalarT) and part.ty.kind == "int" and part.ty.dim is not None:
                dims.append(part.ty.dim)
            else:
                if not isinstance(part.ty, ErrorT):
                    self.r.error("arg-kind", "slice bounds must be dims: integers known from params, sizes "
                                 "and the loop variable", part.span, **self.not_an_int(part))
                return ir.TSlice(lo, hi, ERR, e.span)
        return ir.TSlice(lo, hi, SliceT(*dims), e.span)

    def e_Attribute(self, e: ir.Attribute):
        base = self.expr(e.value)
        if e.attr == "shape" and isinstance(base.ty, TensorT):
            self.must_exist(base, e.value.span)
            return ShapeOf(base, ShapeT(base.ty.shape), e.span)
        if isinstance(base.ty, ErrorT):
            return ir.Lit(None, ERR, e.span)
        self.r.error("syntax", f"unknown attribute `.{e.attr}`", e.span, hint="tensors have `.shape`")
        return ir.Lit(None, ERR, e.span)

    def e_Subscript(self, e: ir.Subscript):
        base = self.e_Attribute(e.value) if isinstance(e.value, ir.Attribute) else self.expr(e.value)
        if isinstance(base, ShapeOf):
            if len(e.index) != 1:
                self.r.error("syntax", "`.shape[i]` takes one index", e.span)
                return ir.Lit(0, ERR, e.span)
            axis = self.expr(e.index[0])
            return self.call_op("size", e, [base.base, axis], {}, [e.value.span, e.index[0].span])
        if isinstance(base.ty, ErrorT):
            return ir.Lit(None, ERR, e.span)
        if isinstance(base.ty, SeqT):
            return self.list_item(base, e)
        if not isinstance(base.ty, TensorT):
            self.r.error("arg-kind", f"`{text(e.value)}` is not a tensor and cannot be indexed", e.value.span)
            return ir.Lit(None, ERR, e.span)
        sliced = self.layer_slice(base, e)
        if sliced is not None:
            return sliced
        index = tuple(self.expr(i) for i in e.index)
        items = ir.TList(index, ListT(tuple(i.ty for i in index)), e.span)
        return self.call_op("index", e, [base, items], {}, [e.value.span, e.span])

    def list_item(self, base: ir.TExpr, e: ir.Subscript) -> ir.TExpr:
        """`xs[i]` of a list-valued param, `i` a layer's number (a loop's variable, or a per-layer
        declaration's) or a constant: in range for every config, as Config checks where it cannot be
        proved (`n_layer <= N` for `list[str, N]`)."""
        name = text(e.value)
        if len(e.index) != 1 or isinstance(e.index[0], ir.SliceExpr):
            self.r.error("syntax", f"`{name}[i]` takes one index", e.span)
            return ir.Lit(None, ERR, e.span)
        i = self.expr(e.index[0])
        if isinstance(i.ty, ErrorT):
            return ir.Lit(None, ERR, e.span)
        count = None
        if isinstance(i, ir.Lit) and isinstance(i.value, int) and not isinstance(i.value, bool) and i.value >= 0:
            count, reads = Dim.const(i.value + 1), f"item {i.value}"
        elif isinstance(i, ir.Ref) and i.kind == "loopvar":
            count = self.layer_count(i.name)
            reads = f"an item per layer ({self.show_dim(count)} layers)" if count is not None else ""
        if count is None:
            self.r.error("arg-kind", f"`{name}` is indexed by a layer's number or a constant >= 0, not "
                         f"`{text(e.index[0])}`", e.index[0].span,
                         hint="its items are read when the module is built, one per layer")
            return ir.Lit(None, ERR, e.span)
        length = base.ty.length
        if length is None:
            self.r.error("index-range", f"the length of `{name}` is not known, so `{text(e)}` may be out of range",
                         e.span, hint=f"declare it `{name} : list[{base.ty.kind}, N]`, or derive the layer count "
                                      f"from it: `n_layer = len({name})`")
            return ir.Lit(None, ERR, e.span)
        if not self.need(count, "<=", length, e.span, f"`{name}` has {self.show_dim(length)} items, and "
                                                      f"{reads} is read"):
            self.r.error("index-range", f"`{text(e)}` reads {reads}, and `{name}` has {self.show_dim(length)}",
                         e.span)
            return ir.Lit(None, ERR, e.span)
        return self.call_op("item", e, [base, i], {}, [e.value.span, e.index[0].span])

    def layer_count(self, var: str) -> Dim | None:
        """How many values the layer variable `var` takes: its loop's count, or the layer axis of the
        per-layer declaration whose condition reads it."""
        loop = next((lp for lp in reversed(self.loops) if lp["var"] == var), None)
        return loop["count"] if loop is not None else self.layer_counts.get(var)

    def e_Call(self, e: ir.Call):
        if e.func == "Tensor":
            self.r.error("bad-type", "`Tensor(...)` is a type; it belongs in a declaration", e.span)
            return ir.Lit(None, ERR, e.span)
        args = [self.expr(a) for a in e.args]
        kwargs = {k.name: (self.expr(k.value), k.span) for k in e.kwargs}
        return self.call_op(e.func, e, args, kwargs, [a.span for a in e.args], func_span=e.func_span)
