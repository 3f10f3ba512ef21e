"""State sequences (`h[0]`, `h[l+1]`) and the depth recurrence `For l in [0 .. L-1]`: which step of
each state a DSL name holds, checked on every read and write, and the loop that advances them."""

from __future__ import annotations

from ... import ir
from ...dims import Dim, equal, show_dim
from ...source import Span
from .syntax import ForBlock
from .values import LOOP, StateInfo, TVal


class States:
    """Mixed into `Lowering`."""

    def state_index(self, st: StateInfo, index, span: Span) -> Dim | None:
        if st.count is None:
            if index is not None:
                self.fail("syntax", f"state `{st.entry.name}` is one tensor, not a sequence: write "
                          f"`{st.entry.name}`", span)
            return None
        if index is None:
            self.fail("syntax", f"state `{st.entry.name}` is a sequence: write `{st.entry.name}[i]`", span)
        if len(index) != 1:
            self.fail("syntax", f"`{st.entry.name}[...]` takes one index", span)
        return self.size(index[0])

    def state_write(self, s: ir.Assign) -> None:
        st = self.states[s.name]
        if st.is_input:  # pragma: no cover - an assigned state is never an input
            self.fail("assign-undeclared", f"`{s.name}` is an input", s.span)
        idx = self.state_index(st, s.index, s.span)
        value = self.tensor(self.expr(s.value), s.value.span, f"the value of `{s.name}`")
        if value.heads:
            self.fail("shape-mismatch", f"`{s.name}` holds a value split into heads; merge them first",
                      s.value.span, hint="write `MergeHeads(...)`")
        if value.dtype != st.dtype:
            self.fail("dtype-mismatch", f"`{s.name}` is {st.dtype} but the value is {value.dtype}", s.value.span)
        self.unify_shapes(st.shape, value.shape, s.value.span,
                          f"`{s.name}` is declared {self.sizes.show_shape(st.shape)} but the value is")
        if st.step is None:  # the first write
            if idx is not None and not equal(idx, Dim.const(0))[0]:
                self.fail("syntax", f"the first value of `{s.name}` must be `{s.name}[0]`", s.span)
            if self.loop is not None:
                self.fail("syntax", f"`{s.name}` must get its first value before the loop", s.span,
                          hint=f"write `{s.name}[0] = ...` in `Init:`")
            self.emit(ir.Let(s.name, value.expr, s.span, s.name_span))
            st.step = Dim.const(0)
            return
        if idx is not None:
            want = st.step + 1
            if self.loop is not None and st.written:
                self.fail("syntax", f"`{s.name}` is assigned twice in one step", s.span)
            if not equal(idx, want)[0]:
                self.fail("syntax", f"this writes `{s.name}[{self.text(s.index[0].span)}]`, but the next state is "
                          f"`{s.name}[{show_dim(want).replace(LOOP, self.loop_name())}]`", s.index[0].span)
            if self.loop is not None:
                st.written = True
            else:
                st.step = want
        self.emit(ir.Assign(s.name, None, value.expr, s.span, s.name_span))

    def loop_name(self) -> str:
        return self.loop["var"] if self.loop else "l"

    def state_read(self, st: StateInfo, index, span: Span) -> TVal:
        name = st.entry.name
        if st.is_input:
            if index is not None:
                self.fail("syntax", f"input `{name}` is one tensor: write `{name}`", span)
            return TVal(ir.Name(name, span), st.shape, st.dtype, span)
        idx = self.state_index(st, index, span)
        if st.step is None:
            self.poisoned.add(name)  # one report per state
            self.fail("unknown-name", f"`{name}` is read before it is assigned", span,
                      hint=f"give it a first value: `{name}[0] = ...`" if st.count is not None else None)
        if idx is not None:
            now = st.step + 1 if (self.loop is not None and st.written) else st.step
            if not equal(idx, now)[0]:
                shown = show_dim(now).replace(LOOP, self.loop_name())
                self.fail("syntax", f"`{name}[{self.text(index[0].span)}]` is not the current state here; "
                          f"the current one is `{name}[{shown}]`", span)
        return TVal(ir.Name(name, span), st.shape, st.dtype, span)


    def for_block(self, f: ForBlock) -> None:
        if self.loop is not None:  # pragma: no cover - the grammar nests no loops
            self.fail("syntax", "depth loops cannot nest", f.span)
        lo, hi = self.size(f.lo), self.size(f.hi)
        if not equal(lo, Dim.const(0))[0]:
            self.r.error("loop-range", f"the depth recurrence starts at 0, not {show_dim(lo)}", f.lo.span,
                         hint=f"write `For {f.var} in [0 .. {self.text(f.hi.span)}]:`")
        count = hi + 1
        var = self.fresh(f.var)
        self.loop = {"var": f.var, "ir": var, "count": count, "span": f.var_span}
        outer, self.block = self.block, []
        errors_before = len(self.r.items)
        base = {n: st.step for n, st in self.states.items()}
        for st in self.states.values():
            st.written = False
            if st.step is not None and st.count is not None:
                st.step = st.step + Dim.sym(LOOP)
        try:
            for s in f.body:
                self.stmt_guarded(s)
        finally:
            body, self.block = self.block, outer
            self.loop = None
            failed = any(d.severity == "error" for d in self.r.items[errors_before:])
            for n, st in self.states.items():
                if st.step is not None and st.count is not None:
                    st.step = base[n] + count if st.written else base[n]
                    if failed:
                        self.poisoned.add(n)  # its step is unknown after a failed body
                st.written = False
        self.emit(ir.For(var, ir.Num(0, f.lo.span), f.hi, tuple(body), f.span))
