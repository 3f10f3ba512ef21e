"""The signature plan: what each layer block's `forward` takes besides the values its loop carries
and reads, worked out from its body before any code is emitted.

A block binds the run-time dims its code writes out (`B`, `T`) from the shape of a tensor argument
that always has them, and takes the rest as ints (`T_past`); it takes the model's dtype when it
makes a tensor of it and holds none, a device when it makes a tensor and has none to take it
from, the caller's `use_cache` when it computes values only the caches need, and generate's
decode state when it writes preallocated caches. What code writes out is read off the IR: the
dims and dtypes of its expressions, and what each op's lowering adds (`OpDef.uses`). So the
Block class and the loop that calls it can be emitted in any order, from the same facts.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..ir import ScalarT, TensorT
from ..ops import all_ops
from .blocks import Block, BlockPlan
from .caches import CachePlan
from .layout import LayoutPlan
from .liveness import OutputPlan


@dataclass(frozen=True)
class Signature:
    args: tuple[str, ...]  # the values carried and read, in the order the block takes them
    present: frozenset  # those always given as a tensor (not None): shapes and a device come from them
    device_from: str | None  # the first of them, whose device the block's code uses
    device_held: str | None  # else the path of a tensor the block holds (`ln1.weight`)
    dtype_held: str | None  # the path of a tensor of the model's floating dtype the block holds,
    dtype_from: str | None  # else a parameter argument of it: the dtype the model holds now
    shapes: tuple[tuple[str, tuple[tuple[int, str], ...]], ...]  # (argument, ((axis, run-time dim), ...)) bound from its shape
    dims: tuple[str, ...]  # run-time dims no argument's shape gives: passed as ints
    dtype: bool  # the model's dtype is passed: the block makes a tensor of it and holds none
    device: bool  # a device is passed: the block makes a tensor and has no tensor to take it from
    use_cache: bool  # the caller's use_cache: the block computes values only the caches need
    decode: bool  # generate's decode state: the block writes preallocated caches

    @property
    def run_time(self) -> frozenset:
        """Every run-time dim the block's code writes out."""
        return frozenset(self.dims) | {d for _, axes in self.shapes for _, d in axes}


def local_types(model: ir.Model) -> dict:
    """The type of each name a function of the module may hold: inputs, parameters and buffers (a
    conditional one may be None), and the `let` values."""
    types = {i.name: TensorT(i.ty.shape, i.ty.dtype, i.optional) for i in model.inputs}
    for t in model.params + model.buffers:
        types[t.name] = TensorT(t.ty.shape, t.ty.dtype, t.ty.maybe_none or t.condition is not None)
    for s in ir.walk_stmts(model.body):
        if isinstance(s, ir.Bind) and s.let:
            types.setdefault(s.name, s.value.ty)
        elif isinstance(s, ir.FusedLinear):
            for n, t in zip(s.targets, s.tys):
                types.setdefault(n, t)
    return types


def block_types(block: Block, types: dict) -> dict:
    """`types` as a block sees them: one layer's slice of each stacked input."""
    types = dict(types)
    for n in block.loop.layer_inputs:
        t = types[n]
        types[n] = TensorT(t.shape[1:], t.dtype, t.maybe_none)
    return types


def plan_signatures(model: ir.Model, blocks: BlockPlan, caches: CachePlan, layout: LayoutPlan,
                    outputs: OutputPlan, decode_steps: bool, types: dict) -> tuple[Signature, ...]:
    return tuple(_signature(model, b, caches, layout, outputs, decode_steps, block_types(b, types))
                 for b in blocks.blocks)


def _signature(model, block: Block, caches: CachePlan, layout: LayoutPlan, outputs: OutputPlan,
               decode_steps: bool, types: dict) -> Signature:
    loop = block.loop
    args = block.carried + tuple(n for n, _ in block.reads)
    present = frozenset(n for n in args if isinstance(types.get(n), TensorT) and not types[n].maybe_none
                        and not outputs.maybe_absent(n))
    use_cache = any(outputs.guarded(s) for s in ir.walk_stmts(block.body))
    decode = decode_steps and any(c.loop is loop and not c.state for c in caches.caches)  # a KV cache's
    written = _Written(model, layout, block.attr, caches.preallocated if decode else None)
    for s in ir.walk_stmts(block.body):
        written.stmt(s)
        demand = outputs.demand(s) if use_cache else None
        if demand is not None and demand.replacement(s) is not None:  # what runs instead, without the flag
            written.stmt(demand.replacement(s))
    sources: dict[str, dict[int, str]] = {}
    dims = []
    for dim in sorted(written.dims & set(model.run_time_dims) - {loop.var}):
        src = next(((n, axis) for n in args if n in present
                    for axis, d in enumerate(types[n].shape) if d.as_symbol() == dim), None)
        if src:  # from a tensor argument's shape where one has it
            sources.setdefault(src[0], {})[src[1]] = dim
        else:
            dims.append(dim)
    device_from = next((n for n in args if n in present), None)
    device_held = layout.held(model, block.attr) if device_from is None else None
    dtype_held = layout.held(model, block.attr, floating=True)
    dtype_from = None if dtype_held else next((n for n, kind in block.reads if kind in ("param", "buffer")
                                               and n in present and types[n].dtype == model.float_dtype), None)
    dtype = model.float_dtype is not None and not (dtype_held or dtype_from) and model.float_dtype in written.dtypes
    device = not (device_from or device_held) and written.device
    return Signature(args, present, device_from, device_held, dtype_held, dtype_from,
                     tuple((n, tuple(sorted(axes.items()))) for n, axes in sources.items()), tuple(dims), dtype, device,
                     use_cache, decode)


class _Written:
    """What the code of a block's statements writes out, as the emitter writes it: the dims of its
    expressions, the dtypes it names and whether it makes a tensor on the block's device."""

    def __init__(self, model: ir.Model, layout: LayoutPlan, owner: str, preallocated):
        self.model, self.layout, self.owner, self.pre = model, layout, owner, preallocated
        self.dims: set = set()
        self.dtypes: set = set()
        self.device = False

    def stmt(self, s) -> None:
        if isinstance(s, ir.FusedLinear):  # the module call, split at the outputs' sizes
            self.dims.update(*(d.symbols() for d in s.sizes))
        for e in ir.own_exprs(s):
            self.expr(e)

    def expr(self, e) -> None:
        if isinstance(e, ir.DimVal):
            self.dims |= e.dim.symbols()
        elif isinstance(e, ir.Ref) and e.kind == "dim":
            self.dims |= {e.name} if e.name in self.model.run_time_dims or e.ty.dim is None else e.ty.dim.symbols()
        elif isinstance(e, ir.Lit) and isinstance(e.ty, ScalarT) and e.ty.kind == "dtype":
            self.dtypes.add(e.value)
        elif isinstance(e, ir.Op):
            self.op(e)
            return
        for c in ir.children(e):
            self.expr(c)

    def op(self, e: ir.Op) -> None:
        call = self.layout.module_call(e)
        if call is not None and call[0].owner == self.owner:  # self.module(input)
            self.expr(e.arg(call[1]))
            return
        if self.pre is not None and e in self.pre.narrows:  # _narrow(x, axis, start, length)
            item = next(i for i in e.arg("index").items if isinstance(i, ir.TSlice) and i.lo is not None)
            self.expr(e.arg("x"))
            self.expr(item.lo)
            self.dims |= (item.hi.ty.dim - item.lo.ty.dim).symbols()
            return
        uses = all_ops()[e.op].uses
        if uses is not None:
            u = uses(e)
            self.dims.update(*(d.symbols() for d in u.dims))
            self.dtypes.update(u.dtypes)
            self.device |= u.device
        for c in ir.children(e):
            self.expr(c)
