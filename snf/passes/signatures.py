"""The signature plan: what each layer block's `forward` takes, from its body's IR: the values its
loop carries and reads, which of them are always tensors (a shape or a device can come from
them), where it finds the model's dtype and its device, the caller's `use_cache` when it computes
values only the caches need, and generate's decode state when it writes preallocated caches.

What the block's code names besides (the run-time dims it writes out, the model's dtype or a
device when it holds no tensor to take them from) is read off that code by codegen
(`codegen/blocks.py`, `Takes`): nothing here predicts what the emitter writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..ir import TensorT
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
    use_cache: bool  # the caller's use_cache: the block computes values only the caches need
    decode: bool  # generate's decode state: the block writes preallocated caches


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
    device_from = next((n for n in args if n in present), None)
    device_held = layout.held(model, block.attr) if device_from is None else None
    dtype_held = layout.held(model, block.attr, floating=True)
    dtype_from = None if dtype_held else next((n for n, kind in block.reads if kind in ("param", "buffer")
                                               and n in present and types[n].dtype == model.float_dtype), None)
    return Signature(args, present, device_from, device_held, dtype_held, dtype_from, use_cache, decode)
