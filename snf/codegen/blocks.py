"""A layer loop's `Block` class, and the loop over its layers in the caller, as the block plan says."""

from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..dims import Dim
from ..ir import TensorT
from ..names import Namespace
from ..passes.blocks import Block
from ..passes.signatures import block_types
from . import params
from .emit import Emitter, at, attributes_read, entry_attribute, reads


@dataclass(frozen=True)
class Takes:
    """What a Block's forward takes besides its plan's arguments, as read off its body's code: the
    run-time dims it writes out, bound from a tensor argument's shape where one has them and passed
    as ints otherwise; the model's dtype and a device, where it names the arguments for them."""

    shapes: tuple[tuple[str, tuple[tuple[int, str], ...]], ...]  # (argument, ((axis, run-time dim), ...))
    dims: tuple[str, ...]  # run-time dims passed as ints
    dtype: bool
    device: bool


def block_context(gen, block: Block) -> tuple[dict, Takes]:
    """The Block class of one layer loop, and what its forward takes besides its plan's arguments
    (`Plans.signature`): its body is lowered first, and the rest is read off that code."""
    m, sig = gen.model, gen.plans.signature(block)
    loop = block.loop
    names = Namespace()
    em = Emitter(gen, block, names)
    types = block_types(block, gen.plans.types)
    for n in sig.args:
        names.name(n)
    if block.uses_var:
        names.name(loop.var)
    em.device_src = names.name(sig.device_from) if sig.device_from else \
        f"self.{sig.device_held}" if sig.device_held else None
    if em.device_src is None:
        em.device_arg = names.fresh("device")
    held = f"self.{sig.dtype_held}" if sig.dtype_held else names.name(sig.dtype_from) if sig.dtype_from else None
    dtype_arg = None  # the model's dtype, from the caller, when the block holds no tensor of it
    if m.float_dtype is not None:
        if held is None:
            dtype_arg = names.fresh("dtype")
        em.dtype_src = f"{held}.dtype" if held else dtype_arg
    if sig.decode:
        em.decode = names.fresh("decode")
    if sig.use_cache:
        em.flags["use_cache"] = names.fresh("use_cache")
    body = em.stmts(block.body, 2)
    takes = _takes(m, block, sig, names, types, reads(body), dtype_arg, em.device_arg)
    prologue = []
    for n, axes in takes.shapes:
        axes = dict(axes)
        rank = types[n].rank
        targets = [names.name(axes[a]) if a in axes else "_" for a in range(rank)]
        while targets and targets[-1] == "_" and len(targets) > 1 and targets.count("_") > 1:
            targets.pop()
        if len(targets) == rank:
            prologue.append(f"{', '.join(targets)}{',' if rank == 1 else ''} = {names.name(n)}.shape")
        else:
            prologue += [f"{names.name(axes[a])} = {names.name(n)}.size({a})" for a in sorted(axes)]
    annotated = {"dtype": f"{dtype_arg}: torch.dtype", "device": f"{em.device_arg}: torch.device",
                 "use_cache": f"{em.use_cache}: bool = True", "decode": f"{em.decode}: Optional[_DecodeState] = None"}
    signature = [f"{names.name(n)}: {_annotation(types.get(n))}" if kind == "value" else
                 f"{names.name(n)}: int" if kind in ("dim", "layer") else annotated[kind]
                 for kind, n in parameters(block, sig, takes)]
    outs = block.returns
    ret_ann = ("tuple[" + ", ".join(_annotation(types.get(n)) for n in outs) + "]") if len(outs) > 1 \
        else (_annotation(types.get(outs[0])) if outs else "None")
    decl_em = Emitter(gen, block, Namespace())
    decls = params.declaration_lines(decl_em, gen, block.attr)
    # the items of list params the body or a condition reads at the block's layer: read once, here
    read = attributes_read(body) | attributes_read(["    " + line for line in decls])
    entries = {c.name: entry_attribute(gen.plans, block, c.name) for c in m.config if c.item_kind is not None}
    entries = {name: attr for name, attr in entries.items() if attr in read}
    # a Block that holds a tensor of some layers only, or reads such an item, is told its layer number
    # when it is made
    takes_layer = params.per_layer_conditions(gen, block.attr) or entries
    layer_arg = decl_em.names.name(loop.var) if takes_layer else None
    entries = [f"self.{attr} = cfg.{name}[{layer_arg}]  # {name}[{loop.var}], this layer's"
               for name, attr in entries.items()]
    return {
        "layer_arg": layer_arg,
        "cls": block.cls, "attr": block.attr, "line": loop.span.line, "var": loop.var,
        "count": decl_em.dim(loop.count),
        "decls": entries + decls,
        "init_lines": params.init_lines(decl_em, gen, block.attr),
        "signature": ", ".join(signature), "ret_ann": ret_ann,
        "prologue": prologue, "body": body,
        "ret": ", ".join(_if_asked(em, gen, n) for n in outs) if outs else None,
    }, takes


def _takes(m: ir.Model, block: Block, sig, names: Namespace, types: dict, read: frozenset,
           dtype_arg: str | None, device_arg: str | None) -> Takes:
    """What the block's code reads beyond its plan's arguments: each run-time dim it names, from the
    first argument whose shape always has it, else as an int; the dtype and device arguments."""
    sources: dict[str, dict[int, str]] = {}
    dims = []
    for dim in sorted(m.run_time_dims - {block.loop.var}):
        if names.map.get(dim) not in read:
            continue
        src = next(((n, axis) for n in sig.args if n in sig.present
                    for axis, d in enumerate(types[n].shape) if d.as_symbol() == dim), None)
        if src:
            sources.setdefault(src[0], {})[src[1]] = dim
        else:
            dims.append(dim)
    return Takes(tuple((n, tuple(sorted(axes.items()))) for n, axes in sources.items()), tuple(dims),
                 dtype_arg is not None and dtype_arg in read, device_arg is not None and device_arg in read)


def parameters(block: Block, sig, takes: Takes) -> list[tuple[str, str | None]]:
    """A Block forward's parameters in order, each (kind, the spec name it stands for): the values it
    carries and reads, the run-time dims passed as ints, its layer number, the model's dtype, a device,
    `use_cache`, generate's decode state. Its signature and the loop that calls it both read them."""
    return ([("value", n) for n in sig.args] + [("dim", d) for d in takes.dims]
            + [("layer", block.loop.var)] * block.uses_var + [("dtype", None)] * takes.dtype
            + [("device", None)] * takes.device + [("use_cache", None)] * sig.use_cache
            + [("decode", None)] * sig.decode)


def loop_call(gen, em: Emitter, loop: ir.Loop, indent: int) -> list[str]:
    """The caller's loop over a block's layers: each layer gets the carried values, what it reads
    (its slice of per-layer inputs), and gives back the carried values and the hoisted writes."""
    block = gen.plans.blocks.of(loop)
    sig, takes = gen.plans.signature(block), gen.takes[block.attr]
    var = em.names.name(loop.var)
    reads = dict(block.reads)

    def passed(kind: str, name: str | None) -> str:
        if kind == "value" and reads.get(name) in ("param", "buffer"):
            return f"self.{gen.plans.layout.place(name).path}"
        if kind == "value":
            code = _if_asked(em, gen, name)
            if name not in loop.layer_inputs:
                return code
            # this layer's slice of a stacked input
            return f"{code}[{var}] if {code} is not None else None" if gen.input_optional(name) else f"{code}[{var}]"
        if kind == "dim":
            return em.dim(Dim.sym(name))
        if kind == "dtype":
            return em.dtype_code(gen.model.float_dtype)
        if kind == "device":
            return em.device_code()
        return {"layer": var, "use_cache": em.use_cache, "decode": em.decode}[kind]
    call_args = ", ".join(passed(kind, n) for kind, n in parameters(block, sig, takes))
    carried = [em.names.name(n) for n in block.carried]
    written = [em.names.fresh(f"{h.name}_layer") for h in block.hoisted]
    outs = carried + written
    layer = "layer" if "layer" not in em.names.used else em.names.fresh("layer")
    if block.uses_var or loop.layer_inputs or written:
        lines = [at(indent, f"for {var}, {layer} in enumerate(self.{block.attr}):")]
    else:
        lines = [at(indent, f"for {layer} in self.{block.attr}:")]
    assign = f"{', '.join(outs)} = " if outs else ""
    where = f"  # {gen.spec_file}:{loop.span.line}"
    if "gradient_checkpointing" in gen.config_fields:
        # recompute each layer in backward instead of keeping its activations
        lines += [at(indent + 1, f"if {em.cfg}.gradient_checkpointing and self.training and torch.is_grad_enabled():"),
                  at(indent + 2, f"{assign}torch.utils.checkpoint.checkpoint({layer}, {call_args}, use_reentrant=False, "
                                 "**_checkpoint_options())"),
                  at(indent + 1, "else:"),
                  at(indent + 2, f"{assign}{layer}({call_args}){where}")]
    else:
        lines.append(at(indent + 1, f"{assign}{layer}({call_args}){where}"))
    outputs = {c.output for c in gen.plans.caches.caches}
    last = None
    for h, tmp in zip(block.hoisted, written):  # writes under one condition share one `if`
        conds = []
        if em.use_cache and gen.plans.outputs.guarded(h):
            conds.append(em.use_cache)
        if em.decode and h.name in outputs:  # a preallocated cache was written in place already
            conds.append(f"{em.decode} is None")
        if conds and conds != last:
            lines.append(at(indent + 1, f"if {' and '.join(conds)}:"))
        last = conds
        lines.append(at(indent + (2 if conds else 1), f"{em.write(h.name, h.index, tmp, h)}  # {gen.spec_file}:{h.span.line}"))
    return lines


def _if_asked(em: Emitter, gen, name: str) -> str:
    """A value passed to or returned by a block: one computed only when a flag asks for it (never
    bound otherwise) is None without the flag."""
    demand = next((d for d in gen.plans.outputs.demands if name in d.names and d.flag in em.flags), None)
    code = em.names.name(name)
    return code if demand is None else f"({code} if {em.flags[demand.flag]} else None)"


def _annotation(t, optional: bool = False) -> str:
    if isinstance(t, TensorT):
        return "Optional[torch.Tensor]" if optional or t.maybe_none else "torch.Tensor"
    return "object"
