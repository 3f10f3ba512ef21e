"""The tensor-parallel plan: which parameters shard over tp ranks, how, and what keeps the rest whole.

A pure function of the lowered IR, its layout (where each parameter lives: the plan's keys are the
layout's module paths, never names of its own) and its caches. Every linear whose input is whole
starts column-wise: its output features are sharded. That sharding flows through the ops by their
registry rules (`OpDef.shard`, snf/ops/sharding.py): kept by elementwise ops, by a reshape that splits
the features into (heads, head_dim) (the heads then count its units), by attention over heads; a
linear that contracts it back is row-wise (its partial sums all-reduced), and its output is whole
again. Where an op needs the sharded axis whole (a softmax over it, a slice across it, an add with a
whole residual), the column-wise linears it came from are replicated, with that op and its line as
the reason, and the flow starts again; it ends when nothing is refused. Besides the flow: the token
embedding is vocab-parallel, the LM head vocab-parallel with its logits gathered, a mixture of
experts shards its experts by their hidden width (its router replicated), a norm over heads keeps its
weight whole ("head_norm"), a norm over the whole sharded width all-reduces its statistics
("width_norm"), a per-head parameter (attention sinks, Mamba's A) shards with the heads it meets, and
a cache follows the keys, values or state written into it. Each sharded axis's units (heads,
features) must divide by tp: `requires`, each with the op and line that names them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..dims import Dim, equal, show_dim
from ..ops import all_ops
from ..ops.shapes import FLOATS
from ..ops.sharding import KEPT, REDUCED
from ..source import NO_SPAN, Span
from .caches import CachePlan
from .decode import token_input
from .layout import LayoutPlan
from .tp_plan import Placement, Requirement, TensorParallelPlan, refusals
from .tp_sizes import _sizes_read, _fields_read, _slice_bounds, _dims_read, degree, _tiling

NORMS = ("rms_norm", "layer_norm")
# moe_experts' weights by role: the axis of their hidden width F (gate, up [E, F, D] and their biases [E, F];
# down [E, D, F]); the down bias [E, D] has none
_EXPERT_AXES = {"up": 1, "gate": 1, "down": 2, "gate_bias": 1, "up_bias": 1, "down_bias": None}
WHOLE, FLEX = "whole", "flex"  # replicated; follows what it meets (a cache fed back, a tensor `full` makes)


@dataclass(frozen=True)
class Params:
    """A tensor computed from parameters alone (`-exp(A_log[l])`): sharded with what it meets, its
    parameters shard along."""

    names: frozenset


@dataclass(frozen=True)
class Sharded:
    """A value sharded along `axis`, whose units (features, then heads once a reshape splits them) are
    `units`, named at `units_at` (`what` says how)."""

    axis: int
    units: Dim
    units_at: Span
    what: str
    origins: frozenset  # the column-wise linears (their weights' names) it comes from
    width: bool = False  # normalised over the whole sharded width: a linear contracting it is low-rank
    # where its features lie in a tensor whose rows a rank's layout controls (a column-wise linear's
    # output, a concat of sharded pieces): (root, (start, size) of each nested slice); None: elsewhere
    frame: tuple | None = None


class _Refused(Exception):
    def __init__(self, origins, reason: str, span: Span, low_rank: bool = False):
        super().__init__(reason)
        self.origins, self.reason, self.span, self.low_rank = frozenset(origins), reason, span, low_rank


def _refuse(v: Sharded, reason: str, span: Span):
    """Refuses the column-wise linears `v` comes from. One whose output was normalised over its whole width
    is a low-rank projection (DeepSeek-V3's q_a, kv_a), which a plan keeps whole by design."""
    if v.width:
        reason = f"a low-rank projection (normalised over its whole width, then {reason})"
    return _Refused(v.origins, reason, span, v.width)


def plan_tensor_parallel(model: ir.Model, layout: LayoutPlan, caches: CachePlan) -> TensorParallelPlan:
    fixed = _fixed(model)
    refused: dict[str, tuple[str, Span, bool]] = {}
    while True:
        flow = _Flow(model, caches, fixed, refused)
        try:
            flow.block(model.body)
            flow.finish()
            flow.local_sizes()
        except _Refused as r:
            new = r.origins - refused.keys()
            assert new, r.reason  # a refusal always names a column-wise linear not refused yet
            for o in sorted(new):
                refused[o] = (r.reason, r.span, r.low_rank)
            continue
        return _plan(model, layout, flow, refused)


def _fixed(model: ir.Model) -> dict[str, tuple[str, str, Span]]:
    """The linears placed before the flow: the LM head (vocab-parallel), the routers of a mixture of
    experts and linears of a constant width (replicated)."""
    vocab = {t.ty.shape[0] for e in ir.walk_exprs(model.body) if isinstance(e, ir.Op) and e.op == "gather"
             for t in [e.arg("table")] if _is_param(t) and _is_token(model, e.arg("index"))}
    experts = [(e.arg("up").ty.shape[0], e.span) for e in ir.walk_exprs(model.body)
               if isinstance(e, ir.Op) and e.op == "moe_experts"]
    fixed = {}
    for w, rows, span in _linears(model):
        if rows in vocab:
            fixed[w] = ("vocab_head", "the LM head: sharded over the vocabulary, its logits gathered", span)
        elif rows.value is not None:
            fixed[w] = ("replicate", f"{rows.value} output feature{'s do' if rows.value != 1 else ' does'} not split",
                        span)
        elif any(rows == e for e, _ in experts):
            line = next(s.line for e, s in experts if e == rows)
            fixed[w] = ("replicate", f"the router of the experts at line {line} (the experts shard by their width)",
                        span)
    return fixed


def _linears(model: ir.Model):
    """(weight, output features, span) of every linear of a parameter weight."""
    for s in ir.walk_stmts(model.body):
        if isinstance(s, ir.FusedLinear):
            yield from ((w, size, s.span) for w, size in zip(s.weights, s.sizes))
    for e in ir.walk_exprs(model.body):
        if isinstance(e, ir.Op) and e.op == "linear" and _is_param(e.arg("weight")):
            yield e.arg("weight").name, e.arg("weight").ty.shape[0], e.span


def _is_param(e) -> bool:
    return isinstance(e, ir.Ref) and e.kind in ("param", "layer_param", "buffer")


def _is_token(model: ir.Model, e) -> bool:
    tokens = token_input(model)
    return isinstance(e, ir.Ref) and e.kind == "input" and tokens is not None and e.name == tokens.name


class _Flow:
    """One pass over the body with the refused linears whole: raises _Refused at the first op that needs
    a sharded axis whole."""

    def __init__(self, model: ir.Model, caches: CachePlan, fixed: dict, refused: dict):
        self.model, self.cache_plan, self.fixed, self.refused = model, caches, fixed, refused
        self.env: dict[str, object] = {}
        self.styles: dict[str, tuple[str, str, Span]] = {}  # param -> (style, how, span)
        self.requires: dict[Dim, Requirement] = {}
        self.caches: dict[str, int] = {}
        self.pieces: dict[str, set[int]] = {}  # a column-wise linear -> the lines that slice its output into pieces
        # a frame (Sharded.frame) -> (start, stop, size, span) of each slice of it, in source order
        self.children: dict[tuple, list[tuple[Dim, Dim | None, Dim, Span]]] = {}
        self.roots: dict[tuple, Dim] = {}  # a frame's root -> its width
        self.untabled: set[str] = set()  # linears whose pieces lie where no layout reaches (no one table)
        self.framed: dict[str, set] = {}  # a parameter or cache output sharded with pieces -> their frames
        self.origins: dict[tuple, frozenset] = {}  # a frame's root -> the linears its features come from
        self.reads: dict[tuple, set] = {}  # a frame -> the dims its slices' bounds read (the forward's code)
        self.bounds: set[Dim] = set()
        self.meets: list[tuple[list, frozenset, ir.Op]] = []  # the frames of sharded values one op combines
        self.widths: dict[str, Dim] = {}  # a column-wise linear -> its output features
        self.bias_of: dict[str, str] = {}  # a column-wise linear's bias -> its weight
        self.tied: int | None = None  # the line of an LM head tied to the token embedding
        self.tied_table: str | None = None  # that embedding's parameter
        self.whole: dict[str, Span] = {}  # a parameter used with whole activations -> where
        self.follows: dict[str, frozenset] = {}  # a parameter sharded with activations -> their linears
        self.expert_axes: dict[str, int | None] = {}  # an expert weight -> its hidden width's axis (None: whole)
        self.units_origins: dict[Dim, frozenset] = {}  # a required units -> the column-wise linears it comes from
        self.whole_sizes: list[tuple[Dim, ir.Op]] = []  # a size an op reads for a value that is not sharded
        self.derived = frozenset(d.dim for d in model.derived if d.dim is not None and d.alias_of is None
                                 and not d.dim.is_const and not d.opaque)
        self.outs = {o.name for o in model.outputs}
        self.cache_outs = {c.output for c in caches.caches}

    # ---------------------------------------------------------------- statements
    def block(self, stmts) -> None:
        for s in stmts:
            if isinstance(s, ir.Bind):
                self.assign(s.name, self.expr(s.value), s.span)
            elif isinstance(s, ir.SetItem):
                for i in s.index:
                    self.expr(i)
                v = self.expr(s.value)
                if isinstance(v, Sharded):  # `new_keys[l] = k_all`: the integer indices come first
                    v = Sharded(v.axis + sum(1 for i in s.index if not isinstance(i, ir.TSlice)), v.units,
                                v.units_at, v.what, v.origins, frame=v.frame)
                self.assign(s.name, v, s.span)
            elif isinstance(s, ir.TIf):
                self.expr(s.test)
                self.block(s.body)
                self.block(s.orelse)
            elif isinstance(s, ir.Loop):
                self.block(s.body)
            elif isinstance(s, ir.FusedLinear):
                x = self.expr(s.input)
                for target, w, b, ty in zip(s.targets, s.weights, s.biases, s.tys):
                    self.assign(target, self.linear(w, b, x, ty, s.span), s.span)

    def assign(self, name: str, v, span: Span) -> None:
        if isinstance(v, Sharded):
            if name in self.outs and name not in self.cache_outs:
                raise _refuse(v, f"the output `{name}` is whole", span)
            if name in self.cache_outs:
                self.require(v)
                self.caches[name] = v.axis
                self.framed.setdefault(name, set()).add((v.frame, v.origins, span))
        self.env[name] = self.join(self.env.get(name, FLEX), v, span, f"`{name}` is assigned")

    def join(self, a, b, span: Span, what: str):
        if a == FLEX:
            return b
        if b == FLEX or a == b:
            return a
        if isinstance(a, Params) and isinstance(b, Params):
            return Params(a.names | b.names)
        if isinstance(a, Params) or isinstance(b, Params):
            return b if isinstance(a, Params) else a
        if isinstance(a, Sharded) and isinstance(b, Sharded) and a.axis == b.axis:
            return Sharded(a.axis, a.units, a.units_at, a.what, a.origins | b.origins, a.width or b.width,
                           a.frame if a.frame == b.frame else None)
        origins = (a.origins if isinstance(a, Sharded) else frozenset()) | (
            b.origins if isinstance(b, Sharded) else frozenset())
        raise _Refused(origins, f"{what} both sharded and whole values", span)

    def require(self, v: Sharded) -> None:
        self.requires.setdefault(v.units, Requirement(v.units, v.what, v.units_at))
        self.units_origins[v.units] = self.units_origins.get(v.units, frozenset()) | v.origins

    def local_sizes(self) -> None:
        """A size a rank's config divides (`tp_local`: a requirement's units that are one name, or a derived
        dim) that the forward also reads for a value that is not sharded would be divided there too (wrong
        sizes, or a shape error): the linears it comes from are refused, with that op as the reason."""
        for units, origins in self.units_origins.items():
            name = units.as_symbol()
            for d, e in self.whole_sizes:
                if name is not None and name in _fields_read(d, self.derived) or units in self.derived and d == units:
                    shown = name or show_dim(units, dict(self.model.display))
                    raise _Refused(origins, f"`{shown}`, which a rank holds 1/tp of, also sizes a whole value "
                                            f"(`{e.op}` at line {e.span.line})", e.span)

    def style(self, param: str | None, style: str, how: str, span: Span) -> None:
        if param is not None:
            self.styles.setdefault(param, (style, how, span))

    # ---------------------------------------------------------------- expressions
    def expr(self, e):
        if isinstance(e, ir.Lit) and e.value is None:
            return FLEX
        if isinstance(e, ir.Ref):
            if _is_param(e) and isinstance(e.ty, ir.TensorT):
                return Params(frozenset({e.name}))
            if e.kind == "local":
                return self.env.get(e.name, FLEX)
            if e.kind in ("input", "layer_input") and self.cache_plan.by_input(e.name) is not None:
                return FLEX
            return WHOLE
        if isinstance(e, ir.TCond):
            self.expr(e.test)
            return self.join(self.expr(e.body), self.expr(e.orelse), e.span, "a conditional expression has")
        if isinstance(e, ir.TList):
            for i in e.items:
                self.expr(i)
            return WHOLE
        if isinstance(e, ir.Op):
            return self.op(e)
        return WHOLE

    def op(self, e: ir.Op):
        if e.op == "linear" and _is_param(e.arg("weight")):
            bias = e.arg("bias")
            return self.linear(e.arg("weight").name, bias.name if _is_param(bias) else None, self.expr(e.arg("x")),
                               e.ty, e.span)
        states = {n: ([self.expr(i) for i in a.items] if isinstance(a, ir.TList) else self.expr(a)) for n, a in e.args}
        sharded = [(n, s) for n, v in states.items() for s in (v if isinstance(v, list) else [v])
                   if isinstance(s, Sharded)]
        if e.op == "gather" and _is_param(e.arg("table")) and _is_token(self.model, e.arg("index")):
            self.style(e.arg("table").name, "vocab_embedding", "the token embedding: sharded over the vocabulary, "
                                                              "its lookups all-reduced", e.span)
            return WHOLE
        if e.op == "moe_experts" and not sharded:
            self.experts(e)
            return WHOLE
        if not sharded:
            if e.op == "full":
                return FLEX
            # of parameters and whole indices alone (T5's bias by head: a table's rows at buckets)
            tensors = [(a, states[n]) for n, a in e.args if isinstance(getattr(a, "ty", None), ir.TensorT)]
            if e.op != "expand" and any(st == WHOLE for _, st in tensors):  # (expand: sized as what it meets)
                self.whole_sizes += [(d, e) for d in _sizes_read(self.model, e)]  # a whole value split, sliced
            params = frozenset().union(*(st.names for _, st in tensors if isinstance(st, Params)))
            if params and isinstance(e.ty, ir.TensorT) and all(
                    isinstance(st, Params) or a.ty.dtype not in FLOATS for a, st in tensors):
                return Params(params)
            self.used_whole(params, e.span)
            return WHOLE
        rule = all_ops()[e.op].shard
        if len({v.frame for _, v in sharded}) > 1:
            self.meets.append(([v.frame for _, v in sharded], frozenset().union(
                *(v.origins for _, v in sharded)), e))
        out = FLEX
        for n, v in sharded:
            if rule is None:
                raise _refuse(v, f"`{e.op}` has no sharding rule", e.span)
            p = rule(e, n, v.axis)
            if e.op != "reshape" and not p.piece:  # a piece's size is what divides
                self.require(v)
            width = v.width
            if p.kind == REDUCED and e.op in NORMS and isinstance(states["weight"], Params):
                width = True  # OLMo 2's q/k norm over all heads: its statistics all-reduced
                self.norm(e, "width_norm", "a norm over the whole sharded width: its statistics all-reduced")
            elif p.kind != KEPT:
                raise _refuse(v, f"`{e.op}` {p.why or 'contracts it'}", e.span)
            elif e.op in NORMS:
                self.norm(e, "head_norm", "a norm within each head: its weight whole, its gradient all-reduced")
            for other, axis in p.with_:
                self.alike(e, other, axis, states[other], v)
            followers = {o for o, _ in p.with_} | {n}
            for other, st in states.items():
                if isinstance(st, Params) and other not in followers and e.op not in NORMS:
                    # a whole parameter on this rank's part only: its gradient would be a part too
                    raise _refuse(v, f"`{e.op}` applies `{min(st.names)}` whole to it", e.span)
            units, at, what = v.units, v.units_at, v.what
            # the same features in the same places (an elementwise op, a convolution over channels)
            axis = p.axis if p.kind == KEPT else v.axis
            arg = e.arg(n)
            frame = v.frame if p.units is None and not isinstance(arg, ir.TList) and \
                equal(e.ty.shape[axis], arg.ty.shape[v.axis])[0] else None
            if p.piece:  # a piece of a fused projection, or pieces concatenated
                if p.units.symbols() & self.model.run_time_dims:
                    raise _refuse(v, f"`{e.op}` slices it at a run-time bound", e.span)
                for o in v.origins:
                    self.pieces.setdefault(o, set()).add(e.span.line)
                frame = self.piece(e, v, p)
                units, at, what = p.units, e.span, f"a piece of sharded features (`{e.op}`)"
            elif p.units is not None:  # split into heads: a norm over the width came before, not a low rank
                units, at, what, width = p.units, e.span, f"the heads `{e.op}` makes of sharded features", False
            out = self.join(out, Sharded(axis, units, at, what, v.origins, width, frame), e.span, f"`{e.op}` gives")
        return out

    def piece(self, e: ir.Op, v: Sharded, p) -> tuple | None:
        """The frame of the piece `e` makes of `v`: a slice of it within `v`'s frame, or the start of a
        frame whose pieces are the sharded items `e` concatenates; the linears `v` comes from get no
        table where neither is known (a piece of features whose layout no rank controls)."""
        if e.op == "concat":
            root = ("concat", e.span.line, e.span.col)
            self.origins[root] = self.origins.get(root, frozenset()) | v.origins
            if root not in self.roots:
                self.roots[root] = e.ty.shape[p.axis]
                at = Dim.const(0)
                for item in e.arg("tensors").items:
                    size = item.ty.shape[p.axis]
                    self.child((root,), at, at + size, size, e.span)
                    at = at + size
            return (root,)
        lo, hi, size = _slice_bounds(e, v.axis, p.units) if e.op in ("index", "slice") else (None, None, p.units)
        if v.frame is None or lo is None:
            self.untabled |= v.origins
            return None
        self.child(v.frame, lo, hi, size, e.span)
        it = e.arg("index").items[v.axis]
        self.reads.setdefault(v.frame, set()).update(d for b in (it.lo, it.hi) if b is not None for d in _dims_read(b))
        return v.frame + ((lo, size),)

    def child(self, frame: tuple, lo: Dim, hi: Dim | None, size: Dim, span: Span) -> None:
        kids = self.children.setdefault(frame, [])
        if not any(lo == k[0] and size == k[2] for k in kids):
            kids.append((lo, hi, size, span))

    def width(self, frame: tuple) -> Dim:
        return frame[-1][1] if len(frame) > 1 else self.roots[frame[0]]

    def leaves(self, frame: tuple) -> list[tuple[Dim, Span | None]] | None:
        """The leaf pieces of `frame`, flattened in order (each with the slice that makes it), where its
        slices tile it at every level; None where they do not."""
        kids = self.children.get(frame)
        if not kids:
            return [(self.width(frame), None)]
        kids = _tiling(kids, self.width(frame))
        if kids is None:
            return None
        out = []
        for lo, _, size, span in kids:
            sub = self.leaves(frame + ((lo, size),))
            if sub is None:
                return None
            out += [(d, s or span) for d, s in sub]
        return out

    def finish(self) -> None:
        """After the flow: a parameter or cache that meets sharded pieces in two layouts, or in pieces
        that do not tile it, is refused; every leaf piece of a layout must divide by tp, and the bounds
        the forward slices them at must read a rank's sizes."""
        for name, uses in self.framed.items():
            frames = {f for f, _, _ in uses if f is not None and f in self.children}
            if frames and (len({f for f, _, _ in uses}) > 1 or self.leaves(next(iter(frames))) is None):
                origins = frozenset().union(*(o for _, o, _ in uses))
                span = min((s for _, _, s in uses), key=lambda s: (s.line, s.col))
                raise _Refused(origins, f"`{name}` meets sharded features in pieces no one layout gives it", span)
        for values, origins, e in self.meets:  # each rank's elements must be the same features
            layouts = {tuple(d for d, _ in self.leaves(f) or [(None, None)]) if f in self.children else None
                       for f in values}
            if len(layouts) > 1:
                raise _Refused(origins, f"`{e.op}` combines it with sharded features laid out in other pieces",
                               e.span)
        fields = {r.units.as_symbol() for r in self.requires.values()} - {None}
        for frame, kids in self.children.items():
            leaves = self.leaves(frame)
            reads = self.reads.get(frame, set())
            if leaves is not None and (frame[0][0] != "linear" or len(frame) > 1):  # a linear's own: as phi3's
                for size, span in leaves:  # (a piece of heads: the heads divide already)
                    if span is not None and not any(degree(size, {f}) == 1 for f in fields):
                        self.require(Sharded(0, size, span, "a piece of sharded features", self.origins[frame[0]]))
                # a rank's forward slices its part with the same code: each bound must read a rank's part
                # (n_head, d_inner = H * head_dim: divided by tp) times whole sizes (state_size)
                bad = [d for d in reads if degree(d, fields) is None] + \
                      [d for d, _ in leaves if degree(d, fields) != 1]
                if bad:
                    raise _Refused(self.origins[frame[0]], f"the bound `{show_dim(bad[0])}` of its pieces is "
                                   "not a rank's part of the whole", kids[0][3])
            self.bounds |= {d for d in reads if degree(d, fields) == 1}

    def used_whole(self, params, span: Span) -> None:
        """Parameters used with whole activations stay whole: the linears whose activations they were to
        shard with are refused."""
        for n in sorted(params):
            self.whole.setdefault(n, span)
            if n in self.follows:
                raise _Refused(self.follows[n], f"`{n}` is also used with whole activations",
                               span)

    def alike(self, e: ir.Op, name: str, axis: int, state, v: Sharded) -> None:
        """Argument `name` of `e` must be sharded along `axis` as `v` is: a parameter is (it shards with
        it), a cache follows, a whole value refuses."""
        a = e.arg(name)
        items = list(zip(a.items, state)) if isinstance(a, ir.TList) else [(a, state)]
        for item, st in items:
            if isinstance(st, Params):  # each parameter shards along its axis of that size (H: the heads)
                for n in sorted(st.names):
                    t = self.model.param(n)
                    shape = t.ty.shape[1:] if n in self.model.stacked else t.ty.shape
                    axes = [k for k, d in enumerate(shape) if equal(d, item.ty.shape[axis])[0]]
                    if len(axes) != 1 or n in self.whole:
                        raise _refuse(v, f"`{e.op}` combines it with `{n}`, which is whole", e.span)
                    self.follows[n] = self.follows.get(n, frozenset()) | v.origins
                    self.framed.setdefault(n, set()).add((v.frame, v.origins, e.span))
                    self.style(n, f"shard:{axes[0]}", f"sharded with the activations `{e.op}` meets it with", e.span)
            elif isinstance(item, ir.Ref) and item.kind in ("input", "layer_input") and st == FLEX:
                self.caches.setdefault(item.name, axis + (1 if item.kind == "layer_input" else 0))
            elif st == WHOLE and isinstance(getattr(item, "ty", None), ir.TensorT):
                shown = f"`{item.name}`" if isinstance(item, ir.Ref) else f"its `{name}`"
                raise _refuse(v, f"`{e.op}` combines it with {shown}, which is whole", e.span)

    def norm(self, e: ir.Op, style: str, how: str) -> None:
        for role in ("weight", "bias"):
            a = self.expr(e.arg(role)) if role in dict(e.args) else None
            for n in sorted(a.names) if isinstance(a, Params) else ():
                self.style(n, style, how, e.span)

    def experts(self, e: ir.Op) -> None:
        given = {role: a for role in _EXPERT_AXES if not (isinstance(a := e.arg(role), ir.Lit) and a.value is None)}
        up = given["up"]
        if not all(_is_param(a) for a in given.values()) or up.name in self.refused:
            # whole: a weight computed in the body (no parameter the runtime could shard), or refused with
            # a reason (its hidden width also sizes a whole value)
            return
        for role, a in given.items():
            axis = _EXPERT_AXES[role]
            how = f"sharded by its hidden width on axis {axis}" if axis is not None else \
                "whole, added once after the ranks' partial sums"
            self.style(a.name, "experts", f"an expert's weights ({role}): {how} (the router whole)", e.span)
            self.expert_axes.setdefault(a.name, axis)
        self.require(Sharded(1, up.ty.shape[1], e.span, "the experts' hidden width", frozenset({up.name})))

    def linear(self, w: str, bias: str | None, x, ty, span: Span):
        if isinstance(x, Params):
            self.used_whole(x.names, span)
        if isinstance(x, Sharded):
            if x.axis != ty.rank - 1:
                raise _refuse(x, "`linear` meets an input sharded along another axis than its features",
                               span)
            if x.width:
                raise _refuse(x, "projected again", span)
            self.require(x)
            for p in (w, bias):
                self.style(p, "rowwise", "row-wise: contracts the sharded features, its output all-reduced", span)
            return WHOLE
        if self.styles.get(w, ("",))[0] == "vocab_embedding":  # a head tied to the token embedding
            self.tied, self.tied_table = span.line, w
        if w in self.fixed or w in self.refused:
            style, why, at = self.fixed.get(w) or ("replicate",) + self.refused[w][:2]
            for p in (w, bias):
                self.style(p, style, why, at)
            return WHOLE
        for p in (w, bias):
            self.style(p, "colwise", "column-wise: its output features sharded", span)
        if bias is not None:
            self.bias_of[bias] = w
        self.widths[w] = self.roots[("linear", w)] = ty.shape[-1]
        self.origins[("linear", w)] = frozenset({w})
        return Sharded(ty.rank - 1, ty.shape[-1], span, _LINEAR_OUT, frozenset({w}), frame=(("linear", w),))


_LINEAR_OUT = "the features of a column-wise `linear`"


def _plan(model: ir.Model, layout: LayoutPlan, flow: _Flow, refused: dict) -> TensorParallelPlan:
    groups: dict[str, list[str]] = {}
    for p in layout.places:
        key = (f"{p.owner}.*." if p.owner else "") + (p.module or p.path)
        groups.setdefault(key, []).append(p.name)
    uses = _first_uses(model)
    placements = []
    pieces: dict[str, tuple[Dim, ...]] = {}
    expert_axes: dict[str, int | None] = {}
    for key, names in groups.items():
        named = [n for n in names if n in flow.styles]
        if named and len(named) == len(names) and len({flow.styles[n][0] for n in named}) == 1:
            style, how, span = flow.styles[named[0]]
            # (a bias placed apart from its weight, both plain parameters, has the weight's pieces)
            names_w = [flow.bias_of.get(n, n) for n in names]
            lines = sorted({line for n in names_w for line in flow.pieces.get(n, ())})
            if style == "vocab_embedding" and flow.tied is not None and flow.tied_table in names:
                # the head reads the table as a plain weight (`linear(x, weight=table)`): sharded rows would
                # hand it a part of its weight, so a tied table stays whole (snf.parallelize keeps it so)
                if any(s == "vocab_head" for s, _, _ in flow.styles.values()):
                    how += f"; where the config ties them, the LM head at line {flow.tied} reads it, and it stays whole"
                else:
                    style, how = "replicate", (f"the token embedding, which the LM head at line {flow.tied} reads "
                                               "as its weight: a table the head reads stays whole")
            # a linear's output rows, or a parameter's or cache's sharded axis, laid out in pieces
            frames = {(("linear", n),) if n in flow.widths else next(iter(flow.framed[n]))[0]
                      for n in names_w if n in flow.widths or len({f for f, _, _ in flow.framed.get(n, ())}) == 1}
            frames = {f for f in frames if f in flow.children}
            if lines and (frames or set(names_w) & flow.untabled):
                tiled = {tuple(d for d, _ in flow.leaves(f) or [(None, None)]) for f in frames}
                if len(tiled) == 1 and not set(names_w) & flow.untabled and None not in next(iter(tiled)):
                    pieces[key] = tiled.pop()
                how += (f"; sliced into pieces at line{'s' * (len(lines) > 1)} {', '.join(map(str, lines))}, "
                        "each rank holding its part of each")
                if style == "colwise":  # not a contiguous block of rows per rank: a style of its own
                    style = "colwise_pieces"
            elif frames and style.startswith("shard:"):
                leaves = flow.leaves(next(iter(frames)))
                pieces[key] = tuple(d for d, _ in leaves)
                how += f", in pieces: each rank holding its part of each of {len(leaves)}"
            if style == "experts":
                (expert_axes[key],) = {flow.expert_axes[n] for n in names}  # a key per weight
            placements.append(Placement(key, style, tuple(names), how, span))
        elif named:
            parts = ", ".join(f"`{n}` {flow.styles[n][0] if n in flow.styles else 'replicate'}" for n in names)
            placements.append(Placement(key, "replicate", tuple(names), f"its parts are placed differently: {parts}",
                                        flow.styles[named[0]][2]))
        else:
            op, span = uses.get(names[0], (None, NO_SPAN))
            why = f"used with whole activations only (first by `{op}`)" if op else "no op shards it"
            placements.append(Placement(key, "replicate", tuple(names), why, span))
    reqs = tuple(sorted(flow.requires.values(), key=lambda r: (r.span.line, r.span.col)))
    cache_axes = tuple((c.input, c.output, flow.caches.get(c.output, flow.caches.get(c.input)))
                       for c in flow.cache_plan.caches)
    for c in flow.cache_plan.caches:
        framed = {f for f, _, _ in flow.framed.get(c.output, ())}
        if len(framed) == 1 and next(iter(framed)) in flow.children:
            pieces[c.output] = tuple(d for d, _ in flow.leaves(next(iter(framed))))
    return TensorParallelPlan(tuple(placements), reqs, cache_axes,
                              tuple((w,) + r for w, r in sorted(refused.items(), key=lambda kv: kv[1][1].line)),
                              tuple(pieces.items()), tuple(expert_axes.items()), frozenset(flow.bounds))


def _first_uses(model: ir.Model) -> dict[str, tuple[str, Span]]:
    out: dict[str, tuple[str, Span]] = {}
    for e in ir.walk_exprs(model.body):
        if isinstance(e, ir.Op):
            for _, a in e.args:
                for item in (a.items if isinstance(a, ir.TList) else (a,)):  # concat's list of tensors too
                    if _is_param(item):
                        out.setdefault(item.name, (e.op, e.span))
    return out


__all__ = ["Placement", "Requirement", "TensorParallelPlan", "plan_tensor_parallel", "refusals"]
