"""Attention as the notation writes it: `CausalSoftmax(q @ k^T / √d) @ v`, with queries and keys
split into heads or not, lowered to one `flash_attention`; `SplitHeads` and `MergeHeads`."""

from __future__ import annotations

from ... import ir
from ...dims import Dim, show_dim
from .sizes import Origin, Rel
from .syntax import Transposed
from .values import AttnWeights, SVal, TVal


class Attention:
    """Mixed into `Lowering`."""

    def f_softmax(self, e: ir.Call, causal: bool = False):
        arg = e.args[0]
        scale = None
        inner = arg
        if isinstance(arg, ir.BinOp) and arg.op in ("/", "*"):
            left, right = arg.left, arg.right
            if arg.op == "*" and is_scores(right) and not is_scores(left):
                left, right = right, left
            if is_scores(left):
                inner, scale = left, (arg.op, right)
        if is_scores(inner):
            return self.attention_weights(e, inner, scale, causal)
        if causal:
            self.fail("syntax", "`CausalSoftmax` takes attention scores `q @ k^T` (optionally scaled)", arg.span,
                      hint="write `CausalSoftmax(q @ k^T / √D)`")
        x = self.tensor(self.expr(arg), arg.span, "the input of `Softmax`")
        self.no_heads(x)
        return TVal(ir.Call("softmax", (x.expr,), (), e.span, e.func_span), x.shape, x.dtype, e.span)

    def f_causal_softmax(self, e: ir.Call):
        return self.f_softmax(e, causal=True)

    def attention_weights(self, e: ir.Call, scores: ir.BinOp, scale, causal: bool) -> AttnWeights:
        q = self.tensor(self.expr(scores.left), scores.left.span, "the queries")
        k = self.tensor(self.expr(scores.right.value), scores.right.value.span, "the keys")
        if q.heads != k.heads:
            self.fail("shape-mismatch", "queries and keys must both be split into heads, or neither", scores.span)
        for t in (q, k):
            if len(t.shape) != (4 if t.heads else 3) or t.dtype != "float32":
                self.fail("rank-mismatch", f"attention takes [B, T, d] (or heads [B, H, T, d]) float tensors; "
                          f"`{self.text(t.span)}` is {self.sizes.show_shape(t.shape)}", t.span)
        batch_axes = 2 if q.heads else 1
        if not all(self.sizes.unify(a, b) for a, b in zip(q.shape[:batch_axes], k.shape[:batch_axes])):
            self.fail("shape-mismatch", f"queries {self.sizes.show_shape(q.shape)} and keys "
                      f"{self.sizes.show_shape(k.shape)} differ in batch or heads", scores.span)
        if not self.sizes.unify(q.shape[-1], k.shape[-1]):
            self.fail("shape-mismatch", f"`{self.text(scores.span)}`: queries are {self.sizes.show_shape(q.shape)}"
                      f" but keys are {self.sizes.show_shape(k.shape)}", scores.span)
        scaled = "unscaled"
        if scale is None:
            scale_expr = ir.Num(1.0, scores.span)
        else:
            scaled = f"scores {'divided by' if scale[0] == '/' else 'times'} {self.text(scale[1].span)}"
            op, s = scale
            if isinstance(s, ir.Call) and s.func == "√" and len(s.args) == 1:
                # `/ √d` names the key width d (scaled dot-product attention): unify it
                d = self.expr(s.args[0])
                if isinstance(d, SVal) and d.dim is not None and d.kind == "int":
                    if not self.sizes.unify(q.shape[-1], d.dim):
                        self.fail("shape-mismatch", f"`{self.text(s.span)}` scales keys of width "
                                  f"{self.sizes.show(q.shape[-1])}, not {show_dim(d.dim)}", s.span)
            sv = self.expr(s)
            if not isinstance(sv, SVal) or sv.kind not in ("int", "float"):
                self.fail("arg-kind", f"`{self.text(s.span)}` must be a number", s.span)
            scale_expr = ir.BinOp("/", ir.Num(1, s.span), sv.expr, s.span) if op == "/" else sv.expr
        self.has_attention = True
        if not q.heads:
            heads = self.role_of("heads")
            if heads is not None:
                self.r.warning("ambiguous", f"attention is single-headed as written (one head of width "
                               f"{self.sizes.show(q.shape[-1])}, {scaled}), although "
                               f"`{show_dim(heads)}` attention heads are declared; `{show_dim(heads)}` is not used",
                               e.func_span, hint="split into heads with `SplitHeads(q, H)` and `MergeHeads(...)` "
                               "for multi-head attention")
        return AttnWeights(q, k, scale_expr, causal, e.span)

    def attention(self, w: AttnWeights, v: TVal, e: ir.BinOp) -> TVal:
        q, k = w.q, w.k
        if v.heads != q.heads or len(v.shape) != len(q.shape):
            self.fail("shape-mismatch", f"values {self.sizes.show_shape(v.shape)} do not match the queries "
                      f"{self.sizes.show_shape(q.shape)}", e.right.span)
        seq_axis = 2 if q.heads else 1
        if not all(self.sizes.unify(a, b) for a, b in zip(k.shape[:seq_axis + 1], v.shape[:seq_axis + 1])):
            self.fail("shape-mismatch", f"values {self.sizes.show_shape(v.shape)} do not match the keys "
                      f"{self.sizes.show_shape(k.shape)}", e.right.span)
        span = e.span

        def four(t: TVal) -> ir.Expr:
            if t.heads:
                return t.expr
            b, tt, d = t.shape
            return ir.Call("reshape", (t.expr, self.shape_expr((b, tt, Dim.const(1), d), span)), (), span, span)

        kwargs = (ir.Keyword("q", four(q), span), ir.Keyword("k", four(k), span), ir.Keyword("v", four(v), span),
                  ir.Keyword("causal", ir.Const(w.causal, span), span), ir.Keyword("scale", w.scale, span))
        call = ir.Call("flash_attention", (), kwargs, span, span)
        if q.heads:
            return TVal(call, q.shape[:-1] + (v.shape[-1],), q.dtype, span, heads=True)
        b, tt, _ = q.shape
        out = ir.Call("reshape", (call, self.shape_expr((b, tt, v.shape[-1]), span)), (), span, span)
        return TVal(out, (b, tt, v.shape[-1]), q.dtype, span)

    def f_split_heads(self, e: ir.Call):
        x = self.tensor(self.expr(e.args[0]), e.args[0].span, "the input of `SplitHeads`")
        h = self.expr(e.args[1])
        if not isinstance(h, SVal) or h.dim is None or h.kind != "int" or h.dim.value is not None and h.dim.value < 1:
            self.fail("arg-kind", "`SplitHeads(x, H)` takes a head count from the Domain", e.args[1].span)
        if x.heads or len(x.shape) != 3:
            self.fail("rank-mismatch", f"`SplitHeads` takes [B, T, C], got {self.sizes.show_shape(x.shape)}",
                      e.args[0].span)
        b, t, c = x.shape
        part = self.sizes.var(Origin("free", e.span, self.text(e.span)))
        self.sizes.rels.append(Rel(c, h.dim, part, e.span))
        self.sizes.propagate()
        shape = (b, t, h.dim, part)
        call = ir.Call("reshape", (x.expr, self.shape_expr(shape, e.span)), (), e.span, e.func_span)
        return TVal(call, (b, h.dim, t, part), x.dtype, e.span, heads=True)

    def f_merge_heads(self, e: ir.Call):
        x = self.tensor(self.expr(e.args[0]), e.args[0].span, "the input of `MergeHeads`")
        if not x.heads:
            self.fail("arg-kind", f"`{self.text(e.args[0].span)}` is not split into heads", e.args[0].span)
        b, h, t, part = x.shape
        h = self.sizes.find(h)
        whole = self.sizes.var(Origin("free", e.span, self.text(e.span)))
        self.sizes.rels.append(Rel(whole, h, part, e.span))
        self.sizes.propagate()
        call = ir.Call("reshape", (x.expr, self.shape_expr((b, t, whole), e.span)), (), e.span, e.func_span)
        return TVal(call, (b, t, whole), x.dtype, e.span)


def is_scores(e) -> bool:
    """`q @ k^T`."""
    return isinstance(e, ir.BinOp) and e.op == "@" and isinstance(e.right, Transposed)
