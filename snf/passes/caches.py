"""The cache plan: which inputs and outputs form a KV cache, from the spec's data flow.

A cache is an optional input `past` that is concatenated with new values along one axis,
`concat([past[l], k], axis=1)`, where the result (directly, or written into `new[l]` in a layer
loop) is an output `new`: the caller feeds `new` back as `past` on the next call. No names are
read: `past_keys` / `new_keys` are just what the specs here call them.

The plan also decides whether `generate` may keep the caches in *preallocated* buffers written
in place (fixed shapes for every decode step, so a compiled step compiles once per length
bucket). There the concatenated value is the buffer, longer than the checked type says
(`T_past + T`), and the cache length `T_past` is a 0-d tensor, not an int. So the fixed-shape
path is planned only where no code depends on either: every use of a concatenated value is
attention's `k`/`v` (which masks the empty slots) or the write into its output, and the cache
length is used only as a RoPE offset, the start of a slice of fixed length, or in the cache
outputs' own shapes. Otherwise `generate` concatenates, as `forward` does: slower, never wrong.
`reason` says why a spec gets no fixed-shape path (shown by `snfc check -v`).

A recurrent state is a cache that does not grow: an optional input `past` and an output `new` of
the same type, with no run-time size but the batch, where what is written into `new` (a layer's
slice, `new[l] = s`, or `new` itself) is computed from `past` (`ssd_state(..., state=past[l] if
past exists else None)`). The caller feeds `new` back as `past`; a step's state has the shape of
the last one, so it costs the same at every position. On the fixed-shape path `generate` keeps a
state in one buffer per layer, allocated once per call, and a decode step writes the layer's new
state over the old one in place (`new` is the buffer `past`). That is planned where it cannot be
seen: each layer writes its state once, into the `full` allocation, and reads its past state (or a
view of it) only up to that write (_states_in_place). A hybrid's states and KV caches go on that
path together or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..dims import Dim
from ..ops import all_ops
from .blocks import BlockPlan, plan_blocks
from .writes import fresh


@dataclass(frozen=True)
class Cache:
    input: str  # the optional input fed back (`past_keys`)
    output: str  # the output that holds the grown cache (`new_keys`)
    axis: int | None  # the growing axis of the input (and output): 2 in [n_layer, B, T_past, H, head_dim]
    dim: str | None  # the input's run-time dim along that axis (`T_past`); both None for a recurrent state
    loop: ir.Loop | None  # the layer loop whose layers each own a slice of the cache, if any
    init: ir.Bind | None  # `let new = full(...)`, the output's allocation (per-layer caches)
    grown: str | None = None  # the name the grown cache is bound to (`k_all`), what attention reads

    @property
    def state(self) -> bool:
        """A recurrent state: fed back whole, the same size at every step."""
        return self.axis is None


@dataclass(frozen=True)
class Preallocated:
    size: Dim | None  # slots per KV buffer along the growing axis: the bound the spec asserts (block_size)
    dim: str | None  # the cache length, a 0-d tensor (the decode position) on this path; both None: states only
    concats: frozenset  # the concat ops that write into a buffer in place
    narrows: frozenset  # slice ops that start at the cache length (`pos[T_past:T_past + T]`)


@dataclass(frozen=True)
class CachePlan:
    caches: tuple[Cache, ...]
    preallocated: Preallocated | None
    reason: str = ""  # why there is no fixed-shape path, when there are caches

    @property
    def together(self) -> tuple:
        """The cache inputs, given together or not at all where they are not one input group already:
        a state and a KV cache of the same tokens (a hybrid's), fed back as one."""
        return tuple(c.input for c in self.caches) if any(c.state for c in self.caches) and len(self.caches) > 1 \
            else ()

    def by_input(self, name: str) -> Cache | None:
        return next((c for c in self.caches if c.input == name), None)

    @property
    def outputs(self) -> frozenset:
        return frozenset(c.output for c in self.caches)


def plan_caches(model: ir.Model, blocks: BlockPlan | None = None) -> CachePlan:
    """`blocks`: the model's block plan (made here when not given)."""
    caches, concats, indirect = _find_caches(model)
    states = _find_states(model, {c.input for c in caches})
    found = tuple(caches + states)
    if not found:
        return CachePlan((), None)
    if indirect:
        return CachePlan(found, None, f"`{sorted(indirect)[0]}` holds a value computed from a grown cache, "
                                      f"not the cache itself")
    reason = _states_in_place(model, states)
    if reason:
        return CachePlan(found, None, reason)
    if not caches:  # states alone: buffers with no slots to count
        return CachePlan(found, Preallocated(None, None, frozenset(), frozenset()))
    pre, reason = _preallocation(model, caches, concats, blocks or plan_blocks(model), states)
    return CachePlan(found, pre, reason)


# ---------------------------------------------------------------------------- finding caches

def _optional_inputs(model: ir.Model) -> dict[str, ir.Tensor]:
    return {i.name: i for i in model.inputs if i.optional}


def _group(model: ir.Model, name: str) -> set:
    """The optional inputs given together with `name` (sharing the run-time dims they bring)."""
    return next((set(g) for g in model.input_groups if name in g), {name})


def _bound_name(stmt, op: ir.Op) -> tuple[str | None, bool]:
    """The name `stmt` binds `op`'s value into, and whether it binds the value itself (`let n = op`,
    or `let n = op if past exists else x`) rather than something computed from it."""
    if not isinstance(stmt, ir.Bind):
        return None, False
    v = stmt.value
    direct = v == op or isinstance(v, ir.TCond) and v.body == op and isinstance(v.test, ir.IsPresent)
    return stmt.name, direct


def _find_caches(model: ir.Model) -> tuple[list[Cache], dict, set]:
    optional = _optional_inputs(model)
    outputs = {o.name for o in model.outputs}
    owners = {d: (inp, axis) for d, inp, axis in model.dim_sources}
    found: list[Cache] = []
    concats: dict[str, tuple[ir.Op, str]] = {}  # input -> (concat op, bound name)
    indirect: set = set()  # names bound to a value computed from a concatenated cache
    for stmt, loop, _ in ir.sites(model.body):
        for op in _ops(stmt):
            if op.op != "concat":
                continue
            items = op.arg("tensors").items
            axis = op.arg("axis")
            if len(items) != 2 or not isinstance(items[0], ir.Ref) or items[0].name not in optional \
                    or items[0].kind not in ("input", "layer_input") or not isinstance(axis, ir.Lit):
                continue
            past = items[0]
            per_layer = past.kind == "layer_input"
            full_axis = axis.value % past.ty.rank + (1 if per_layer else 0)
            dim = optional[past.name].ty.shape[full_axis].as_symbol()
            owner = owners.get(dim, (None, None))[0]
            if dim is None or owner not in _group(model, past.name) or past.name in concats:
                continue  # the growing axis must be a run-time dim the cache inputs bring
            name, direct = _bound_name(stmt, op)
            if name is None:
                continue
            out, init = _output_of(model, loop, name, outputs) if per_layer else (name if name in outputs else None,
                                                                                  None)
            if out is None:
                continue
            concats[past.name] = (op, name)
            if not direct:
                indirect.add(name)
            found.append(Cache(past.name, out, full_axis, dim, loop if per_layer else None, init, name))
    return found, concats, indirect


def _find_states(model: ir.Model, taken: set) -> list[Cache]:
    # a state is the same size at every step: no run-time size in it but the batch (the first input's first axis)
    batch = {model.inputs[0].ty.shape[0].as_symbol()} if model.inputs and model.inputs[0].ty.rank else set()
    runtime = set(model.run_time_dims) - batch
    optional = {n: i for n, i in _optional_inputs(model).items() if n not in taken
                and not any(d.symbols() & runtime for d in i.ty.shape)}
    outputs = {o.name: o for o in model.outputs}
    same = {n for n, o in outputs.items() if any(_same_type(i, o) for i in optional.values())}
    if not same:
        return []
    found: list[Cache] = []
    reads: dict[str, set] = {}  # local -> the inputs its value is computed from
    for stmt, loop, _ in ir.sites(model.body):
        if not isinstance(stmt, (ir.Bind, ir.SetItem)):
            continue
        used = set()
        for e in ir.subexprs(ir.own_exprs(stmt)):
            if isinstance(e, ir.Ref):
                used |= reads.get(e.name, set()) if e.kind == "local" else {e.name}
        layer_write = isinstance(stmt, ir.SetItem) and loop is not None and _own_layer(stmt, loop)
        whole = isinstance(stmt, ir.Bind) and loop is None
        if stmt.name not in same or not (layer_write or whole):
            fresh = isinstance(stmt, ir.Bind) and stmt.let
            reads[stmt.name] = used if fresh else reads.get(stmt.name, set()) | used
            continue
        out = outputs[stmt.name]
        past = next((n for n in sorted(used & set(optional)) if _same_type(optional[n], out)), None)
        if past is None or any(c.input == past or c.output == out.name for c in found):
            continue
        init = next((t for t in model.body if isinstance(t, ir.Bind) and t.let and t.name == out.name
                     and isinstance(t.value, ir.Op) and t.value.op == "full"), None) if layer_write else None
        if layer_write and init is None:
            continue
        found.append(Cache(past, out.name, None, None, loop if layer_write else None, init))
    return found


def _same_type(a: ir.Tensor, b: ir.Tensor) -> bool:
    return a.ty.shape == b.ty.shape and a.ty.dtype == b.ty.dtype


def _output_of(model: ir.Model, loop: ir.Loop | None, name: str, outputs: set) -> tuple[str | None, ir.Bind | None]:
    """The output a per-layer value `name` is written into (`new[l] = name`), and its allocation."""
    if loop is None:
        return None, None
    for s in ir.walk_stmts(loop.body):
        if isinstance(s, ir.SetItem) and s.name in outputs and len(s.index) == 1 \
                and isinstance(s.index[0], ir.Ref) and s.index[0].kind == "loopvar" \
                and isinstance(s.value, ir.Ref) and s.value.name == name:
            init = next((t for t in model.body if isinstance(t, ir.Bind) and t.let and t.name == s.name
                         and isinstance(t.value, ir.Op) and t.value.op == "full"), None)
            return (s.name, init) if init is not None else (None, None)
    return None, None


def _ops(stmt) -> list:
    """The ops of a statement's own expressions."""
    return [e for e in ir.subexprs(ir.own_exprs(stmt)) if isinstance(e, ir.Op)]


# ---------------------------------------------------------------------------- the fixed-shape path

def _preallocation(model: ir.Model, caches: list[Cache], concats: dict, blocks: BlockPlan,
                   states: list[Cache] = ()) -> tuple[Preallocated | None, str]:
    loops = {id(c.loop) for c in caches + list(states)}
    if any(c.loop is None or c.init is None for c in caches) or len(loops) != 1:
        return None, "the caches are not all written per layer in one layer loop"
    hoisted = blocks.of(caches[0].loop).hoisted
    for c in caches:  # a buffer is written in place by the layer; its one write into the output is skipped
        sets = [s for s in ir.walk_stmts(c.loop.body) if isinstance(s, ir.SetItem) and s.name == c.output]
        if len(sets) != 1 or sets[0] not in hoisted and not _own_layer(sets[0], c.loop):
            return None, (f"line {sets[1].span.line} writes the cache output `{c.output}` a second time"
                          if len(sets) > 1 else f"the layer loop reads `{c.output}` besides writing its layer")
    dims = {c.dim for c in caches}
    if len(dims) != 1:
        return None, "the caches grow along different dims"
    dim = dims.pop()
    names = {c.input for c in caches}
    sized = [i.name for i in model.inputs if i.name not in names and any(dim in d.symbols() for d in i.ty.shape)]
    if sized:
        return None, f"input `{sized[0]}` is sized by the cache length `{dim}`"
    bound = next((c.rhs for c in model.checks if dim in c.lhs.symbols() and c.op in ("<=", "<") and not c.tested
                  and not (c.rhs.symbols() - {f.name for f in model.config})), None)
    if bound is None:
        return None, f"no `assert` bounds `{dim}` by a config value (e.g. `assert {dim} + T <= block_size`)"
    loop = caches[0].loop
    bound_names = {name for _, name in concats.values()}
    inits = {c.init for c in caches}
    writes = {(c.output, concats[c.input][1]) for c in caches}
    outputs = {c.output for c in caches}
    for s in ir.walk_stmts(model.body):
        if isinstance(s, ir.Bind) and not s.let and s.name in bound_names:
            return None, f"`{s.name}` (a grown cache) is re-assigned at line {s.span.line}"
        if s in inits or isinstance(s, ir.SetItem) and (s.name, getattr(s.value, "name", None)) in writes:
            continue
        if isinstance(s, (ir.Bind, ir.SetItem)) and s.name in outputs or not isinstance(s, (ir.Loop, ir.TIf)) \
                and any(isinstance(e, ir.Ref) and e.name in outputs for e in ir.walk_exprs((s,))):
            name = s.name if getattr(s, "name", None) in outputs else \
                next(e.name for e in ir.walk_exprs((s,)) if isinstance(e, ir.Ref) and e.name in outputs)
            return None, f"line {s.span.line} uses the cache output `{name}` other than to write a layer into it"
    for s in ir.walk_stmts(model.body):
        if s in inits or isinstance(s, (ir.Loop, ir.TIf)) and not _test_uses(s, dim):
            continue
        if isinstance(s, ir.SetItem) and (s.name, getattr(s.value, "name", None)) in writes:
            continue
        bad = _bad_use(s, bound_names, dim, names)
        if bad:
            return None, bad
    narrows = frozenset(e for e in ir.walk_exprs(loop.body) if _is_narrow(e, dim)) | \
        frozenset(e for e in ir.walk_exprs(model.body) if _is_narrow(e, dim))
    return Preallocated(bound, dim, frozenset(op for op, _ in concats.values()), narrows), ""


def _own_layer(s: ir.SetItem, loop: ir.Loop) -> bool:
    """`new[l] = v`: a write of the loop's own layer."""
    return len(s.index) == 1 and isinstance(s.index[0], ir.Ref) and s.index[0].kind == "loopvar" \
        and s.index[0].name == loop.var


def _states_in_place(model: ir.Model, states: list[Cache]) -> str:
    """Why a decode step cannot write each state over its buffer (the new state `new[l]` into the
    `past[l]` it was computed from), or ''. Each layer writes its state once, `past` is read only a
    layer at a time, and no statement after the write reads the layer's past state or a view of it
    (`let s = past[l] if past exists else None`), which would see the new one."""
    for c in states:
        if c.loop is None or c.init is None:
            return f"the state `{c.output}` is not written a layer at a time in a layer loop"
        order = ir.walk_stmts(c.loop.body)
        writes = [i for i, s in enumerate(order) if isinstance(s, ir.SetItem) and s.name == c.output]
        if len(writes) != 1 or not _own_layer(order[writes[0]], c.loop):
            return f"the layer loop writes the state `{c.output}` other than once, at its own layer"
        write = order[writes[0]]
        for s in ir.walk_stmts(model.body):
            refs = {(e.name, e.kind) for e in ir.subexprs(ir.own_exprs(s)) if isinstance(e, ir.Ref)}
            if (c.input, "input") in refs or any(n == c.output for n, _ in refs):
                return f"line {s.span.line} reads the state `{c.input}` or `{c.output}` besides a layer reading its own"
            if isinstance(s, (ir.Bind, ir.SetItem)) and s.name == c.output and s is not c.init and s is not write:
                return f"line {s.span.line} writes the state `{c.output}` besides its layer's write"
        views, last = {c.input}, None
        for s in order:
            if {e.name for e in ir.subexprs(ir.own_exprs(s)) if isinstance(e, ir.Ref)} & views:
                last = s
                if isinstance(s, ir.Bind) and _shares(s.value) & views:
                    views.add(s.name)
        if last is not None and order.index(last) > writes[0]:
            return (f"line {last.span.line} reads the past state `{c.input}` after line {write.span.line} writes "
                    f"the new one, which a decode step writes over it: write the state last")
    return ""


def _shares(e) -> set:
    """The names whose storage the value of `e` may share: a name, or a view of one (fresh() says
    which ops make a tensor of their own)."""
    if isinstance(e, ir.Ref):
        return {e.name}
    if isinstance(e, ir.TCond):
        return _shares(e.body) | _shares(e.orelse)
    if isinstance(e, ir.Op) and not fresh(e):
        return set().union(*(_shares(a) for _, a in e.args))
    return set()


def _test_uses(s, dim: str) -> bool:
    return isinstance(s, ir.TIf) and any(_mentions(e, dim) for e in ir.subexprs(ir.own_exprs(s)))


def _mentions(e, dim: str) -> bool:
    d = dim_of(e)
    return d is not None and dim in d.symbols()


def dim_of(e) -> Dim | None:
    """The symbolic value of an int-valued expression (`T_past + T`), if it has one."""
    if isinstance(e, ir.DimVal):
        return e.dim
    if isinstance(getattr(e, "ty", None), ir.ScalarT) and e.ty.kind == "int":
        return e.ty.dim
    return None


def _is_narrow(e, dim: str) -> bool:
    """`x[..., dim:dim + n, ...]`: one slice that starts at the cache length and has a length free of it."""
    if not (isinstance(e, ir.Op) and e.op in ("slice", "index")):
        return False
    starts = [i for i in e.arg("index").items if isinstance(i, ir.TSlice) and i.lo is not None and _mentions(i.lo, dim)]
    if len(starts) != 1 or any(not isinstance(i, ir.TSlice) for i in e.arg("index").items):
        return False
    lo, hi = dim_of(starts[0].lo), dim_of(starts[0].hi) if starts[0].hi is not None else None
    return lo is not None and hi is not None and dim not in (hi - lo).symbols()


def _bad_use(stmt, bound_names: set, dim: str, cache_inputs: set) -> str:
    """Why `stmt` depends on the length of a preallocated cache, or ''."""
    roots = [stmt.value] if isinstance(stmt, (ir.Bind, ir.SetItem)) else []
    if isinstance(stmt, ir.SetItem):
        roots += list(stmt.index)
    if isinstance(stmt, ir.FusedLinear):
        roots = [stmt.input]
    if isinstance(stmt, ir.TIf):
        roots = [stmt.test]
    line = stmt.span.line
    stack = [(r, None, None) for r in roots]
    while stack:
        e, parent, role = stack.pop()
        if isinstance(e, ir.Ref) and e.kind == "local" and e.name in bound_names:
            attention = isinstance(parent, ir.Op) and role in all_ops()[parent.op].keys
            if not attention and not (isinstance(parent, ir.TCond) and role != "test"):
                return f"line {line} uses the grown cache `{e.name}` other than as attention's keys or values"
        if isinstance(e, ir.Ref) and e.kind in ("input", "layer_input") and e.name in cache_inputs:
            concat = isinstance(parent, ir.TList)
            if not concat:
                return f"line {line} uses the cache input `{e.name}` other than to extend it"
        if _mentions(e, dim):
            if not _allowed_dim_use(parent, role, dim):
                return f"line {line} uses the cache length `{dim}` as a size"
            continue  # an int expression: its parts are no further uses
        if isinstance(e, ir.Op):
            stack += [(a, e, name) for name, a in e.args]
            if _is_narrow(e, dim):
                stack = [t for t in stack if not (t[1] is e and t[2] == "index")]
                stack += [(i, e, "narrowed") for i in e.arg("index").items if not isinstance(i, ir.TSlice)]
        elif isinstance(e, ir.TCond):
            stack += [(e.test, e, "test"), (e.body, e, "body"), (e.orelse, e, "orelse")]
        elif isinstance(e, (ir.TList, ir.TSlice)):
            stack += [(c, e, "item") for c in ir.children(e)]
    return ""


def _allowed_dim_use(parent, role, dim: str) -> bool:
    """The cache length may offset RoPE's positions, or be added to a tensor's values (positions,
    `arange(T) + T_past`: in a decode step it is the filled slots' 0-d tensor); everything else is a
    size."""
    if not isinstance(parent, ir.Op):
        return False
    return parent.op == "rope" and role == "offset" or parent.op in ("add", "sub") and isinstance(parent.ty, ir.TensorT)
