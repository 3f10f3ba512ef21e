"""Layer loops: their dataflow (what a body reads and carries), stacked parameters (`w[l]`, one
slice per layer) and per-layer inputs, and who owns each stacked parameter."""

from __future__ import annotations

from .. import ir
from ..diagnostics import Related
from ..dims import Dim, equal
from ..ir import ErrorT, ScalarT, TensorT
from ..source import NO_SPAN
from .calls import ERR
from .messages import text
from .scopes import Binding


class Loops:
    """Mixed into `Checker`. `self.loops` holds the open loop (at most one: loops do not nest) as a
    dict: var, count, depth, and the names it carries, reads, indexes per layer."""

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
                         hint=f"write `for {s.var} in 0..{text(s.hi)}:`")
            return None
        count = hi.ty.dim + 1
        if any(sym in self.runtime for sym in count.symbols()):
            self.r.error("loop-range", "the number of layers must come from params, not run-time dims", s.hi.span)
            return None
        loop = {"var": s.var, "count": count, "depth": len(self.loops) + 1, "carried": {}, "reads": {},
                "stacked": {}, "uses_var": False, "layer_inputs": {}}
        self.loops.append(loop)
        self.push()
        # the loop variable is a dim, 0 <= l <= count - 1 (facts.py): `pos[l:l + 1]` is 1 long
        self.declare(s.var, Binding("loopvar", ScalarT("int", Dim.sym(s.var)), s.span), s.span)
        with self.guarded(self.layers_guard(count)):
            body = self.block(s.body)
        self.pop()
        self.loops.pop()
        reads = tuple(n for n in loop["reads"] if n not in loop["carried"])
        return ir.Loop(s.var, count, body, tuple(loop["carried"]), reads, tuple(loop["stacked"]), s.span,
                       loop["uses_var"], tuple(loop["layer_inputs"]))

    def is_stacked(self, ty: TensorT) -> bool:
        return bool(self.loops) and ty.rank > 0 and ty.shape[0] == self.loops[-1]["count"]

    def note_read(self, name: str, b: Binding) -> None:
        for loop in self.loops:
            if b.kind != "local" or b.loop_depth < loop["depth"]:
                loop["reads"].setdefault(name, None)

    def note_write(self, name: str, b: Binding) -> None:
        for loop in self.loops:
            if b.loop_depth < loop["depth"]:
                loop["carried"].setdefault(name, None)

    def layer_slice(self, base: ir.TExpr, e: ir.Subscript) -> ir.TExpr | None:
        """`w[l]` in the loop over `l`: one layer's slice of a stacked parameter or of a per-layer
        input (a cache). None when `e` is an ordinary subscript."""
        if not (isinstance(base, ir.Ref) and self.loops):
            return None
        loop = self.loops[-1]
        by_var = len(e.index) == 1 and isinstance(e.index[0], ir.Name) and e.index[0].id == loop["var"]
        if base.kind in ("param", "buffer") and not by_var:
            if not self.is_stacked(base.ty):
                return None
            self.whole_reads[base.name].pop()  # reported here, not again as a read outside `p[l]`
            self.r.error("stacked-index", f"`{base.name}` is stacked per layer {self.show(base.ty.shape)}; inside the "
                         f"loop it is indexed by the loop variable alone", e.span,
                         hint=f"write `{base.name}[{loop['var']}]` (and index that value further if needed)")
            return ir.Lit(None, ERR, e.span)
        if base.kind in ("param", "buffer"):
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
        if base.kind == "input" and by_var and base.ty.rank > 0 and equal(base.ty.shape[0], loop["count"])[0]:
            loop["layer_inputs"].setdefault(base.name, None)
            ty = TensorT(base.ty.shape[1:], base.ty.dtype, base.ty.maybe_none)
            return ir.Ref(base.name, "layer_input", ty, e.span)
        return None

    def stacked_owners(self, body: tuple) -> tuple:
        """Parameters that live per layer; each is read only as `p[l]`, in one loop."""
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
        for t in self.params + self.buffers:  # one that exists on some layers is never whole
            if t.layer_var is not None and t.name not in stacked and self.whole_reads.get(t.name):
                self.r.error("stacked-index", f"`{t.name}` exists on some layers only (`{t.name}[{t.layer_var}]`), "
                             f"so it is read as `{t.name}[{t.layer_var}]` in a layer loop, never whole",
                             self.whole_reads[t.name][0],
                             related=(Related(self.decl_spans.get(t.name, NO_SPAN), f"`{t.name}` declared here"),))
        return stacked
