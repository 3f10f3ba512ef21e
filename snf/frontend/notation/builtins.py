"""The notation's operations (`Linear`, `Embed`, `LayerNorm`, `GELU`, `CrossEntropy`, ...): each is
one `BUILTINS` entry and one `f_<method>` that lowers it to registry ops, plus calls of the spec's
own `Operator`s (inlined) and the parameters the operations use."""

from __future__ import annotations

from dataclasses import dataclass

from ... import ir
from ...dims import show_dim
from ...source import Span
from .sizes import Origin, Var, dim_to_expr
from .syntax import Shifted
from .values import KIND_TEXT, RESERVED_NAMES, ROLE_TEXT, GroupRef, Param, ParamRef, SVal, TVal


@dataclass(frozen=True)
class Builtin:
    method: str
    arity: tuple
    kwargs: tuple = ()
    op: str = ""


BUILTINS: dict[str, Builtin] = {
    "Linear": Builtin("linear", (2, 3)),
    "Embed": Builtin("embed", (2, 2)),
    "PositionEmbed": Builtin("position", (1, 1)),
    "Norm": Builtin("norm", (2, 2)),
    "LayerNorm": Builtin("layer_norm", (2, 2)),
    "RMSNorm": Builtin("rms_norm", (2, 2)),
    "GELU": Builtin("activation", (1, 1), ("approximate",), "gelu"),
    "ReLU": Builtin("activation", (1, 1), (), "relu"),
    "SiLU": Builtin("activation", (1, 1), (), "silu"),
    "Tanh": Builtin("activation", (1, 1), (), "tanh"),
    "Softmax": Builtin("softmax", (1, 1)),
    "CausalSoftmax": Builtin("causal_softmax", (1, 1)),
    "SplitHeads": Builtin("split_heads", (2, 2)),
    "MergeHeads": Builtin("merge_heads", (1, 1)),
    "CrossEntropy": Builtin("cross_entropy", (2, 2)),
    "√": Builtin("sqrt", (1, 1)),
}


class Builtins:
    """Mixed into `Lowering`."""

    def e_Call(self, e: ir.Call):
        if e.func in self.operators:
            return self.call_operator(e)
        fn = BUILTINS.get(e.func)
        if fn is None:
            names = list(BUILTINS) + list(self.operators)
            import difflib  # for a hint only
            close = difflib.get_close_matches(e.func, names, n=1)
            self.fail("unknown-op", f"unknown operation `{e.func}`", e.func_span,
                      hint=f"did you mean `{close[0]}`?" if close else "docs/notation.md lists the operations")
        arity, kws = fn.arity, fn.kwargs
        if not arity[0] <= len(e.args) <= arity[1]:
            want = str(arity[0]) if arity[0] == arity[1] else f"{arity[0]} to {arity[1]}"
            self.fail("arity", f"`{e.func}` takes {want} argument{'s' * (arity[1] != 1)}, got {len(e.args)}",
                      e.span)
        for k in e.kwargs:
            if k.name not in kws:
                self.fail("unknown-arg", f"`{e.func}` has no argument `{k.name}`", k.span)
        return getattr(self, f"f_{fn.method}")(e)

    def call_operator(self, e: ir.Call):
        op = self.operators[e.func]
        self.used_ops.add(op.name)
        if e.kwargs or len(e.args) != len(op.params):
            self.fail("arity", f"`{op.name}` takes {len(op.params)} argument{'s' * (len(op.params) != 1)}, got "
                      f"{len(e.args) + len(e.kwargs)}", e.span)
        bindings = {}
        base = op.name[:-2] if op.name.endswith("_l") else op.name
        for (pname, _), arg in zip(op.params, e.args):
            v = self.expr(arg)
            if isinstance(v, TVal) and not isinstance(v.expr, ir.Name):
                # bind a computed argument once: the operator may use it several times
                s = ir.Assign(f"{base.lower()}_{pname}", None, arg, arg.span, arg.span)
                outer = self.frames[-1]
                v = self.bind(s.name, v, s)
                outer.names.pop(s.name, None)
            bindings[pname] = v
        result = self.inline(op.body, bindings, op.name, e.span)
        if result is None:
            self.fail("syntax", f"`{op.name}` returns nothing", op.name_span, hint="end it with `return ...`")
        if isinstance(result, TVal):
            result = TVal(result.expr, result.shape, result.dtype, e.span, result.heads)
        return result

    def param(self, ref, role: str, rank: int, span: Span, use: ir.Call, suffix: str | None = None):
        """The parameter `ref` used as a `role` tensor; returns (DSL expression, per-layer shape)."""
        if not isinstance(ref, ParamRef):
            if isinstance(ref, GroupRef):
                self.fail("stacked-index", f"`{ref.group}` has one entry per layer: write "
                          f"`{ref.group}[{self.loop_name()}]`", span)
            self.fail("arg-kind", f"`{self.text(span)}` must be a parameter (from `Parameters:`)", span)
        name = ref.group + (f"_{ref.fieldname}" if ref.fieldname else "") + (f"_{suffix}" if suffix else "")
        group = self.groups[ref.group]
        group.used = True
        group.used_fields.add(ref.fieldname or "")
        kind = "norm" if suffix else role
        seen = group.kinds.setdefault(ref.fieldname or "", (kind, ref.span))
        if seen[0] != kind and {seen[0], kind} != {"matrix", "table"}:
            # a table may also serve as a Linear weight: that is weight tying ([V, D] both ways)
            self.fail("arg-kind", f"`{self.text(span)}` is used as {KIND_TEXT[kind]} here but as "
                      f"{KIND_TEXT[seen[0]]} at line {seen[1].line}", span)
        p = self.params.get(name)
        if p is None:
            if name in self.taken or name in RESERVED_NAMES:
                self.fail("redefinition", f"parameter `{name}` clashes with another name", span)
            self.taken.add(name)
            declared = group.declared.get(ref.fieldname or "")
            if declared is not None:
                shape = declared[0]
                if len(shape) != rank:
                    self.fail("rank-mismatch", f"`{self.text(ref.span)}` is declared with {len(shape)} axes but "
                              f"used as {ROLE_TEXT[role]}", span)
            else:
                shape = tuple(self.sizes.var(Origin("free", span, self.text(use.span))) for _ in range(rank))
            p = Param(name, ref.group, ref.fieldname, role, shape, group.count, ref.span, self.text(ref.span),
                      declared is not None, suffix)
            self.params[name] = p

        expr = ir.Name(name, ref.span)
        if ref.layered:
            expr = ir.Subscript(expr, (ir.Name(self.loop["ir"], ref.span),), ref.span)
        return expr, p

    def f_linear(self, e: ir.Call):
        x = self.tensor(self.expr(e.args[0]), e.args[0].span, "the input of `Linear`")
        self.no_heads(x)
        if x.dtype != "float32" or not x.shape:
            self.fail("arg-kind", "`Linear` takes a float tensor", e.args[0].span)
        w_expr, w = self.param(self.expr(e.args[1]), "matrix", 2, e.args[1].span, e)
        if not self.sizes.unify(w.shape[1], x.shape[-1]):
            known = (f"declared {self.sizes.show_shape(w.shape)}" if w.declared else
                     f"[out, {self.sizes.show(w.shape[1])}] from its use at line {w.span.line}")
            self.fail("shape-mismatch", f"`{self.text(e.args[1].span)}` is {known}, but the input "
                      f"`{self.text(e.args[0].span)}` is {self.sizes.show_shape(x.shape)}: a Linear weight is "
                      "[out, in]", e.args[1].span)
        out = self.sizes.find(w.shape[0])
        if isinstance(out, Var) and out.origin.kind == "free":
            out.origin = Origin("linear-out", e.span, self.text(e.span), x.shape[-1])
        kwargs = [ir.Keyword("weight", w_expr, e.args[1].span)]
        if len(e.args) == 3:
            b_expr, b = self.param(self.expr(e.args[2]), "vector", 1, e.args[2].span, e)
            if not self.sizes.unify(b.shape[0], w.shape[0]):
                self.fail("shape-mismatch", f"the bias `{self.text(e.args[2].span)}` is "
                          f"{self.sizes.show_shape(b.shape)} but the output has {self.sizes.show(w.shape[0])} "
                          "features", e.args[2].span)
            kwargs.append(ir.Keyword("bias", b_expr, e.args[2].span))
        call = ir.Call("linear", (x.expr,), tuple(kwargs), e.span, e.func_span)
        return TVal(call, x.shape[:-1] + (w.shape[0],), x.dtype, e.span)

    def f_embed(self, e: ir.Call):
        idx = self.tensor(self.expr(e.args[0]), e.args[0].span, "the ids of `Embed`")
        if idx.dtype != "int64":
            self.fail("dtype-mismatch", f"`Embed` looks up integer ids, but `{self.text(e.args[0].span)}` is "
                      f"{idx.dtype}", e.args[0].span, hint="ids live in ℕ: `tok ∈ ℕ[B, T]`")
        t_expr, t = self.param(self.expr(e.args[1]), "table", 2, e.args[1].span, e)
        vocab = self.role_of("vocab")
        rows = self.sizes.find(t.shape[0])
        if isinstance(rows, Var) and rows.origin.kind == "free":
            rows.origin = Origin("table-rows", e.span, self.text(e.span))
        if vocab is not None and not self.sizes.unify(t.shape[0], vocab):
            self.fail("shape-mismatch", f"`{self.text(e.args[1].span)}` has {self.sizes.show(t.shape[0])} rows, "
                      f"but token ids range over the vocabulary {show_dim(vocab)}", e.span)
        width = self.sizes.find(t.shape[1])
        if isinstance(width, Var) and width.origin.kind == "free":
            width.origin = Origin("table-width", e.span, self.text(e.span))
        self.first_embed = self.first_embed or e.span
        call = ir.Call("gather", (t_expr, idx.expr), (), e.span, e.func_span)
        return TVal(call, idx.shape + (t.shape[1],), "float32", e.span)

    def f_position(self, e: ir.Call):
        """`PositionEmbed(θ_pos)`: the first T rows of a learned [context, D] table."""
        t_expr, t = self.param(self.expr(e.args[0]), "table", 2, e.args[0].span, e)
        context = self.role_of("context")
        seq = self.role_of("sequence")
        if context is None or seq is None:
            self.fail("unknown-dim", "`PositionEmbed` needs a `context_length` dim (the table's rows) and a "
                      "`sequence_position` dim in `Domain:`", e.span)
        if not self.sizes.unify(t.shape[0], context):
            self.fail("shape-mismatch", f"`{self.text(e.args[0].span)}` has {self.sizes.show(t.shape[0])} rows, "
                      f"not {show_dim(context)}", e.span)
        width = self.sizes.find(t.shape[1])
        if isinstance(width, Var) and width.origin.kind == "free":
            width.origin = Origin("table-width", e.span, self.text(e.span))
        self.has_positions = True
        index = ir.ListExpr((ir.SliceExpr(ir.Num(0, e.span), dim_to_expr(seq, e.span), e.span),
                             ir.SliceExpr(None, None, e.span)), e.span)
        call = ir.Call("slice", (t_expr, index), (), e.span, e.func_span)
        return TVal(call, (seq, t.shape[1]), "float32", e.span)

    def f_norm(self, e: ir.Call, kind: str = "Norm"):
        x = self.tensor(self.expr(e.args[0]), e.args[0].span, f"the input of `{e.func}`")
        self.no_heads(x)
        ref = self.expr(e.args[1])
        if kind == "Norm":
            self.r.warning("ambiguous", f"`{e.func}` does not say which normalisation: using LayerNorm with a "
                           "weight and a bias (GPT-2's), eps 1e-5", e.func_span,
                           hint="write `LayerNorm(...)` or `RMSNorm(...)` to choose")
        kwargs = []
        parts = ("weight",) if kind == "RMSNorm" else ("weight", "bias")
        for part in parts:
            expr, p = self.param(ref, "vector", 1, e.args[1].span, e, suffix=part)
            if not self.sizes.unify(p.shape[0], x.shape[-1]):
                self.fail("shape-mismatch", f"`{self.text(e.args[1].span)}` is {self.sizes.show_shape(p.shape)} "
                          f"but normalises {self.sizes.show_shape(x.shape)}", e.args[1].span)
            kwargs.append(ir.Keyword(part, expr, e.args[1].span))
        op = "rms_norm" if kind == "RMSNorm" else "layer_norm"
        return TVal(ir.Call(op, (x.expr,), tuple(kwargs), e.span, e.func_span), x.shape, x.dtype, e.span)

    def f_layer_norm(self, e):
        return self.f_norm(e, "LayerNorm")

    def f_rms_norm(self, e):
        return self.f_norm(e, "RMSNorm")

    def f_activation(self, e: ir.Call):
        x = self.tensor(self.expr(e.args[0]), e.args[0].span, f"the input of `{e.func}`")
        self.no_heads(x)
        last = self.sizes.find(x.shape[-1]) if x.shape else None
        if isinstance(last, Var):
            last.hidden = True
        kwargs = ()
        op = BUILTINS[e.func].op
        for k in e.kwargs:
            v = self.expr(k.value)
            if not isinstance(v, SVal) or v.kind != "str":
                self.fail("arg-kind", f"`{k.name}` takes a string", k.span)
            kwargs += (ir.Keyword(k.name, v.expr, k.span),)
        return TVal(ir.Call(op, (x.expr,), kwargs, e.span, e.func_span), x.shape, x.dtype, e.span)

    def f_cross_entropy(self, e: ir.Call):
        logits = self.tensor(self.expr(e.args[0]), e.args[0].span, "the logits")
        self.no_heads(logits)
        target_e, shift = e.args[1], False
        if isinstance(target_e, Shifted):
            by = self.expr(target_e.by)
            if not isinstance(by, SVal) or by.dim is None or by.dim.value != 1:
                self.fail("syntax", "targets can only be `shifted by 1` (next-token prediction)", target_e.by.span)
            target_e, shift = target_e.value, True
        targets = self.tensor(self.expr(target_e), target_e.span, "the targets")
        if targets.dtype != "int64":
            self.fail("dtype-mismatch", f"targets `{self.text(target_e.span)}` must be integer ids", target_e.span)
        if len(logits.shape) != len(targets.shape) + 1 or not all(
                self.sizes.unify(a, b) for a, b in zip(logits.shape[:-1], targets.shape)):
            self.fail("shape-mismatch", f"logits {self.sizes.show_shape(logits.shape)} and targets "
                      f"{self.sizes.show_shape(targets.shape)} do not line up", e.span)
        vocab = self.role_of("vocab")
        if vocab is not None and not self.sizes.unify(logits.shape[-1], vocab):
            self.fail("shape-mismatch", f"logits score {self.sizes.show(logits.shape[-1])} classes, but the targets "
                      f"are token ids in the vocabulary {show_dim(vocab)}", e.args[0].span)
        kwargs = (ir.Keyword("shift", ir.Const(True, e.args[1].span), e.args[1].span),) if shift else ()
        call = ir.Call("cross_entropy", (logits.expr, targets.expr), kwargs, e.span, e.func_span)
        return TVal(call, (), logits.dtype, e.span)

    def f_sqrt(self, e: ir.Call):
        v = self.expr(e.args[0])
        if isinstance(v, SVal) and v.kind in ("int", "float"):
            return SVal(ir.Call("sqrt", (v.expr,), (), e.span, e.func_span), "float", None, e.span)
        t = self.tensor(v, e.args[0].span, "the operand of `√`")
        self.no_heads(t)
        return TVal(ir.Call("sqrt", (t.expr,), (), e.span, e.func_span), t.shape, t.dtype, e.span)
