"""`snf.parallelize`: a generated model sharded over a DeviceMesh by its tensor-parallel plan.

The plan is the generated `Model.tp_plan` (module path -> style, `*` for any layer; derived from the
spec, docs/training.md) and `Model.tp_requires` ((config, tp) -> whether it shards, the message
naming the dim and the spec line). Each style is one of PyTorch's own
`torch.distributed.tensor.parallel` styles (or, for a norm over a sharded width, one built on torch's
`distribute_module`): the communication is DTensor's, none is written here. Every sharded module
hands the body plain local tensors (`use_local_output=True`), so attention, RoPE and the caches run
unchanged on a rank's heads. With `sequence_parallel=True`, `Model.tp_sequence` also splits each
sequence's positions over the ranks between the row-wise outputs and the column-wise inputs.

A 1-D mesh is tensor parallel. A 2-D mesh named ("dp", "tp") shards by the plan over "tp", then
with FSDP2 (`fully_shard`) over "dp": each layer block, then the root (torchtitan's order).
"""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import Optional

import torch
from torch import nn


class ShardingError(ValueError):
    """A config and tp the plan cannot shard, or a plan this runtime cannot apply."""


def requirement_errors(model_class, config, tp: int) -> list[str]:
    """The messages of the model's `tp_requires` that `config` at `tp` ranks breaks, in order."""
    return [f"tensor parallel over {tp} ranks: {message}" for holds, message in getattr(model_class, "tp_requires", ())
            if not holds(config, tp)]


def tp_mesh(mesh):
    """The tensor-parallel axis of `mesh`: the mesh itself (1-D), or its "tp" (2-D, named ("dp", "tp"))."""
    names = tuple(mesh.mesh_dim_names or ())
    if mesh.ndim == 2 and names != ("dp", "tp"):
        raise ShardingError(f"a 2-D mesh must be named ('dp', 'tp'), not {names}")
    if mesh.ndim > 2:
        raise ShardingError(f"a mesh of 1 or 2 dims, not {mesh.ndim}")
    return mesh["tp"] if mesh.ndim == 2 else mesh


def check_shardable(model_class, config, mesh) -> None:
    """Raise ShardingError, naming each dim and spec line, where `config` cannot shard over `mesh`."""
    errors = requirement_errors(model_class, config, tp_mesh(mesh).size())
    if errors:
        raise ShardingError("; ".join(errors))


# the module styles a plan may name ("replicate": nothing to do; the rest: _styles); the experts' is EXPERTS
STYLES = ("colwise", "rowwise", "vocab_embedding", "vocab_head", "head_norm", "width_norm", "replicate")


def _styles() -> dict:
    """Each module style of STYLES but "replicate", as a maker of torch's ParallelStyle."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel
    return {
        "colwise": lambda: ColwiseParallel(),
        "rowwise": lambda: RowwiseParallel(),
        # the table's rows on each rank: a token's row is looked up where it lives, the rest add zeros
        "vocab_embedding": lambda: RowwiseParallel(input_layouts=Replicate()),
        # each rank's rows of the logits, gathered: every rank holds the whole logits
        "vocab_head": lambda: ColwiseParallel(output_layouts=Replicate()),
        # a weight applied to this rank's heads (axis 2 of [B, T, heads, head_dim]): a Replicate DTensor
        # meeting a Shard one, so its gradient is all-reduced by DTensor (torchtitan's qwen3 q_norm)
        "head_norm": lambda: SequenceParallel(sequence_dim=2, use_local_output=True),
        "width_norm": _width_norm,
    }


def _norm_over_shards(self, x):
    """The forward of a norm module (nn.RMSNorm, nn.LayerNorm) over a width sharded across the ranks: `x`
    a DTensor sharded along it, the weight (and bias) too. Each mean over the width is a Partial that
    DTensor all-reduces, forward and backward (F.rms_norm adds eps to it in place, which DTensor refuses).
    Unsharded it is the module's own forward, written out."""
    eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
    if isinstance(self, nn.LayerNorm):
        x = x - x.mean(-1, keepdim=True)
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    y = y * self.weight if self.weight is not None else y
    return y + self.bias if getattr(self, "bias", None) is not None else y


# A model parallelize_module sharded does not pickle (torch's distribute_module registers lambdas as
# hooks): save it with snf.save_pretrained or its state dict.
class _RMSNormOverShards(nn.RMSNorm):
    forward = _norm_over_shards


class _LayerNormOverShards(nn.LayerNorm):
    forward = _norm_over_shards


def _width_norm():
    """"width_norm": a norm over the whole width of a column-wise linear's output (OLMo 2's q/k norm), each
    rank holding its slice of the width. Its weight (and bias) sharded as the width is; its input taken
    as this rank's slice of one DTensor; its statistics all-reduced (_norm_over_shards); its output this
    rank's slice again. torch's own distribute_module places it."""
    from torch.distributed.tensor import DTensor, Shard, distribute_module, distribute_tensor
    from torch.distributed.tensor.parallel import ParallelStyle

    def params(name, m, mesh):
        for attr, p in list(m.named_parameters(recurse=False)):
            m.register_parameter(attr, nn.Parameter(distribute_tensor(p.data, mesh, [Shard(0)]), p.requires_grad))

    def inputs(m, args, mesh):
        x = args[0]
        return (DTensor.from_local(x, mesh, [Shard(x.dim() - 1)], run_check=False),) + tuple(args[1:])

    def output(m, y, mesh):
        return y.redistribute(mesh, [Shard(y.dim() - 1)]).to_local()

    class WidthNorm(ParallelStyle):
        def _apply(self, module: nn.Module, mesh) -> nn.Module:  # an nn.RMSNorm or nn.LayerNorm (parallelize)
            module.__class__ = _RMSNormOverShards if isinstance(module, nn.RMSNorm) else _LayerNormOverShards
            return distribute_module(module, mesh, params, inputs, output)
    return WidthNorm()


# a projection the spec slices into pieces (Phi-3's fused q/k/v): its rows are reordered (_pieces_order)
# so that a contiguous block per rank (ColwiseParallel) is the rank's part of each piece; one with no
# `tp_pieces` entry is refused, as a contiguous block would mix the pieces (wrong results, no error).
# Pieces of pieces (Mamba2's z, x B C, dt, then x, B, C) are flattened by the plan: the leaf pieces.
# A shard:K parameter with a `tp_pieces` entry (Mamba2's conv weight over x, B and C) is reordered so
# along K; so is a cache of that name (`new_conv`), which its forward writes a rank's part of each into.
PIECES = "colwise_pieces"
# "experts": the stacked weights of a moe_experts call (parameters, not modules), sharded on the hidden
# width F on the axis the model's `tp_expert_axes` gives each path, by the weight's role in the call (gate
# and up [E, F, D] and their biases [E, F]: 1, down [E, D, F]: 2, the down bias [E, D]: None, whole: moe_experts
# adds it once, after the ranks' partial sums). moe_experts (snf.runtime.experts) runs them on this rank's
# slice and adds the partial outputs over the ranks.
EXPERTS = "experts"


def _local_config(config, names: tuple[str, ...], tp: int):
    """`config` as one rank's body reads it: the names `names` (head counts, widths a rank holds 1/tp
    of: fields or derived dims) divided by tp, every other derived dim kept at its whole-model value
    (head_dim = n_embd // n_head stays what it is). Forward reads these sizes to allocate the caches
    and to check the caches it is given."""
    cls = type(config)
    kept = {n: getattr(config, n) // tp if n in names else getattr(config, n)
            for n, v in vars(cls).items() if isinstance(v, property)}
    shard_cls = type(f"{cls.__name__}Shard", (cls,), {n: property(lambda self, v=v: v) for n, v in kept.items()}
                     | {"_whole": config})  # whole_config
    local = object.__new__(shard_cls)
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        object.__setattr__(local, f.name, value // tp if f.name in names else value)
    return local


def is_parallelized(model: nn.Module) -> bool:
    """Whether `model` holds DTensors (snf.parallelize sharded it, or FSDP2)."""
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        return False
    from torch.distributed.tensor import DTensor
    return any(isinstance(p, DTensor) for p in model.parameters())


def whole_config(config):
    """The whole model's config of a rank's view of it (a parallelized model's `model.config`);
    `config` itself where it is no view."""
    return getattr(type(config), "_whole", config)


def parallelize(model: nn.Module, mesh, *, plan: Optional[dict] = None, local: Optional[tuple] = None,
                sequence_parallel: bool = False) -> nn.Module:
    """Shard `model` (a generated Model, built or loaded, identical on every rank) over `mesh` by its
    tensor-parallel plan and return it. `plan` / `local`, where given, are used instead of the
    Model's `tp_plan` / `tp_local`. A config the plan cannot shard at this tp is refused before
    anything is sharded (ShardingError naming the dim and the spec line). `sequence_parallel`: also
    split each sequence's positions over the ranks between the row-wise outputs and the column-wise
    inputs, by the Model's `tp_sequence` (its norms there run on a rank's positions); every forward's
    length must then divide by tp, so such a model does not generate (a decode step has one position)."""
    cls = type(model)
    plan = dict(plan if plan is not None else getattr(cls, "tp_plan", None) or {})
    local = tuple(local if local is not None else getattr(cls, "tp_local", None) or ())
    if not plan:
        raise ShardingError(f"{cls.__module__}.Model has no tp_plan: pass plan=")
    sequence = {}
    if sequence_parallel:
        sequence = getattr(cls, "tp_sequence", None)
        if sequence is None:
            raise ShardingError(f"{cls.__module__}.Model cannot split its sequences over the tp ranks: "
                                f"{getattr(cls, 'tp_no_sequence', 'its module has no tp_sequence: regenerate it')}")
    check_shardable(cls, model.config, mesh)
    tp_axis = tp_mesh(mesh)
    tp = tp_axis.size()
    layout = {}
    # the LM head reads the token embedding as its weight: the config ties them (its lm_head is None), or
    # the spec's head is always the table (the plan keeps it whole; the head reads the final norm's output)
    tied = any(s == "vocab_head" and not _exists(model, p) for p, s in plan.items()) or (
        "vocab_head" not in plan.values() and "sequence_norm_head" in getattr(cls, "tp_sequence", {}).values())
    pieces = getattr(cls, "tp_pieces", {})
    expert_axes = getattr(cls, "tp_expert_axes", {})
    norms = []  # head_norm weights that are plain parameters
    for path, style in plan.items():
        if style.startswith("shard:"):
            if not style[6:].isdigit() or not (_exists(model, path, parameter=True) or _left_out(model, path)):
                raise ShardingError(f"{path} ({style}): no parameter of {cls.__module__}.Model has this path, "
                                    "or the axis is not a number")
            if path in pieces:
                _pieces_divide(path, pieces[path](model.config), tp)
            continue
        if style == PIECES:
            if path not in pieces:
                raise ShardingError(f"{path}: style {style!r} is not supported here: the model has no tp_pieces "
                                    "entry for it (its pieces' sizes), and a contiguous block of rows per rank "
                                    "would mix the pieces")
            _pieces_divide(path, pieces[path](model.config), tp)  # before anything is sharded
            style = "colwise"
        if style not in STYLES and style != EXPERTS:
            raise ShardingError(f"{path}: unknown tensor-parallel style {style!r}")
        if not _exists(model, path, parameter=style == EXPERTS) and not _left_out(model, path):
            raise ShardingError(f"{path} ({style}): no module or parameter of {cls.__module__}.Model has this path")
        if style == "width_norm":
            for _, m in _modules(model, path):
                if type(m) not in (nn.RMSNorm, nn.LayerNorm):
                    raise ShardingError(f"{path} ({style}): a norm over a sharded width must be an nn.RMSNorm "
                                        f"or nn.LayerNorm, not {type(m).__name__}")
        if style == EXPERTS and path not in expert_axes:  # refused before anything is sharded
            raise ShardingError(f"{path} ({style}): the model has no tp_expert_axes entry for it (the axis of its "
                                "hidden width, by its role in moe_experts)")
        if style == "head_norm" and not _exists(model, path) and _exists(model, path, parameter=True):
            norms.append(path)  # a plain parameter (Qwen3-Next's `1.0 + q_norm_weight`): below
            continue
        if style in STYLES and style != "replicate" and not _exists(model, path) and \
                _exists(model, path, parameter=True):  # a linear of plain parameters (Nemotron-H's in_proj)
            raise ShardingError(f"{path} ({style}): a plain parameter, not a module: torch's styles shard a "
                                "module (an nn.Linear's input and output), which this runtime cannot do for it yet")
        if style in (EXPERTS, "replicate") or not _exists(model, path):
            continue  # experts: below; a module the config leaves out (a tied head's lm_head is None)
        if style == "vocab_embedding" and tied:
            continue  # the tied head reads the table as a plain tensor: it stays whole
        layout[path] = style
    if tp > 1:
        from torch.distributed.tensor.parallel import parallelize_module
        styles = _styles()
        for path in (p for p, s in plan.items() if s == PIECES):
            order = _pieces_order(pieces[path](model.config), tp)
            for _, m in _modules(model, path):
                for p in (m.weight, m.bias):
                    if p is not None:
                        p.data = p.data[order]
        if sequence:
            _sequence_parallel(model, tp_axis, layout, sequence, tied)
        else:
            parallelize_module(model, tp_axis, {path: styles[style]() for path, style in layout.items()})
        _shard_experts(model, tp_axis, {p: expert_axes[p] for p, s in plan.items() if s == EXPERTS})
        _shard_along(model, tp_axis, {**{p: int(s[6:]) for p, s in plan.items() if s.startswith("shard:")},
                                      **{p: None for p in norms}},
                     {p: _pieces_order(pieces[p](model.config), tp) for p, s in plan.items()
                      if s.startswith("shard:") and p in pieces})
        shard = _local_config(model.config, local, tp)
        for m in model.modules():
            if getattr(m, "config", None) is model.config and m is not model:
                m.config = shard
        model.config = shard
    if mesh.ndim == 2:
        data_parallel(model, mesh)
    return model


def data_parallel(model: nn.Module, mesh) -> None:
    """FSDP2 over the "dp" axis of a ("dp", "tp") `mesh`, after tensor parallelism over "tp": each
    layer block, then the root (torchtitan's order)."""
    from torch.distributed.fsdp import fully_shard
    dp_mesh = mesh["dp"]
    for m in model.modules():
        if isinstance(m, nn.ModuleList):
            for block in m:
                fully_shard(block, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)


def local_runs(model: nn.Module, name: str, p):
    """What this rank holds of the parameter `name` of a model `parallelize` sharded over "tp" (its
    tensor `p`), as the whole model's tensor: (its local tensor, runs), each run (axis, start, stop,
    at): the local entries from `at` on along `axis` are the whole tensor's `start:stop` there (axis
    None: all of it, a Replicate one). A projection of pieces holds a run per piece (_pieces_order).
    None for a plain tensor (held whole). snf.from_pretrained reads only these entries."""
    from torch.distributed.tensor import DTensor
    if not isinstance(p, DTensor):
        return None
    local = p.to_local()
    shards = [(i, placement.dim) for i, placement in enumerate(p.placements) if placement.is_shard()]
    if not shards:
        return local, [(None, 0, 0, 0)]
    if len(shards) > 1:
        raise ShardingError(f"{name}: sharded on {len(shards)} mesh axes; a load reads a slice of one")
    mesh_dim, axis = shards[0]
    n, tp = p.shape[axis], p.device_mesh.size(mesh_dim)
    chunk = -(-n // tp)  # torch.chunk's split, as DTensor's Shard makes it
    start = min(p.device_mesh.get_local_rank(mesh_dim) * chunk, n)
    stop = min(start + chunk, n)
    if local.shape[axis] != stop - start:
        raise ShardingError(f"{name}: {local.shape[axis]} entries on this rank, not the {stop - start} of "
                            f"torch.chunk's split of {n}")
    rows, along = _pieces_rows(model, name, p.device_mesh)
    if rows is None or along != axis:
        return local, [(axis, start, stop, 0)]
    order = rows[start:stop].tolist()  # the whole tensor's entries along `axis` this rank holds, in its order
    runs, at = [], 0
    for i in range(1, len(order) + 1):
        if i == len(order) or order[i] != order[i - 1] + 1:
            runs.append((axis, order[at], order[i - 1] + 1, at))
            at = i
    return local, runs


def _sequence_parallel(model: nn.Module, mesh, layout: dict, sequence: dict, tied: bool) -> None:
    """The plan `layout` (path -> style) applied with each sequence's positions split over the ranks
    between the row-wise outputs and the column-wise inputs (torchtitan's llama3 `apply_tp` with
    sequence parallelism): `sequence` (the Model's `tp_sequence`) names the modules that reduce-scatter
    their output over the positions ("scatter"), all-gather their input ("gather"), or are norms run on
    a rank's positions ("sequence_norm"; "sequence_norm_head": the LM head reads it, all-gathered first
    where that head is the token embedding, a plain tensor here). A forward whose length tp does not
    divide is refused at the token embedding: its positions would split unevenly."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleOutput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    styles, positions = _styles(), Shard(1)
    made = {
        ("colwise", "gather"): lambda: ColwiseParallel(input_layouts=positions),
        ("rowwise", "scatter"): lambda: RowwiseParallel(output_layouts=positions),
        ("vocab_embedding", "scatter"): lambda: RowwiseParallel(input_layouts=Replicate(), output_layouts=positions),
        ("vocab_head", "gather"): lambda: ColwiseParallel(input_layouts=positions, output_layouts=Replicate()),
    }
    tp, first, after = mesh.size(), {}, {}
    for path, role in sequence.items():
        if not _exists(model, path):
            continue  # a module the config leaves out (a tied head's lm_head)
        if role in ("sequence_norm", "sequence_norm_head"):
            first[path] = SequenceParallel(use_local_output=True)
            if role == "sequence_norm_head" and tied:
                after[path] = PrepareModuleOutput(output_layouts=positions, desired_output_layouts=Replicate())
        elif role == "scatter" and path not in layout:  # a tied head's embedding, whole: its output split
            first[path] = PrepareModuleOutput(output_layouts=Replicate(), desired_output_layouts=positions)
        if role == "scatter" and layout.get(path, "vocab_embedding") == "vocab_embedding":
            for _, m in _modules(model, path):
                m.register_forward_pre_hook(lambda m, args: _divides(args[0].shape[-1], tp))
    for path, style in layout.items():
        first[path] = made[style, sequence[path]]() if (style, sequence.get(path)) in made else styles[style]()
    parallelize_module(model, mesh, first)
    parallelize_module(model, mesh, after)


def _pieces_divide(path: str, sizes, tp: int) -> None:
    """Refuse pieces a rank cannot hold an equal part of each of."""
    if any(n % tp for n in sizes):
        raise ShardingError(f"{path}: its pieces of sizes {tuple(sizes)} do not divide by tp = {tp}")


def _divides(length: int, tp: int) -> None:
    if length % tp:
        raise ShardingError(f"sequence parallel over {tp} ranks splits each sequence's positions: a length of "
                            f"{length} does not divide by {tp} (generate's decode steps have 1: generate with a "
                            "model parallelized without sequence_parallel)")


def _modules(model: nn.Module, path: str):
    return [(name, m) for name, m in model.named_modules() if fnmatch.fnmatchcase(name, path)]


def _pieces_order(sizes, tp: int) -> torch.Tensor:
    """The rows of a projection of pieces `sizes` (whole), reordered rank by rank: rank 0's part of each
    piece, then rank 1's, ... (a contiguous Shard(0) then gives each rank its part of each)."""
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return torch.cat([torch.arange(start + r * (n // tp), start + (r + 1) * (n // tp))
                      for r in range(tp) for start, n in zip(starts, sizes)])


def _pieces_rows(model: nn.Module, name: str, mesh) -> tuple[Optional[torch.Tensor], int]:
    """For the parameter `name` of a projection of pieces (or a shard:K parameter in pieces), the order
    its rows (its axis K) were laid out in by parallelize (_pieces_order, over the "tp" axis of
    `mesh`), and that axis; None for any other parameter."""
    plan = getattr(type(model), "tp_plan", {})
    for path, sizes in getattr(type(model), "tp_pieces", {}).items():
        style = plan.get(path, "")
        if fnmatch.fnmatchcase(name.rpartition(".")[0] if style == PIECES else name, path):
            tp = mesh["tp"].size() if mesh.ndim == 2 else mesh.size()  # ("dp", "tp") under FSDP2
            axis = int(style[6:]) if style.startswith("shard:") else 0
            return _pieces_order([n * tp for n in sizes(model.config)], tp), axis  # the config is a rank's
    return None, 0


def whole_tensor(model: nn.Module, name: str, t) -> torch.Tensor:
    """The parameter (or gradient, or an optimizer moment of it) `t` of `name` of a parallelized `model`
    as the whole model holds it: gathered (a DTensor), and a projection of pieces' rows put back in the
    spec's order. A collective: every rank calls it."""
    from torch.distributed.tensor import DTensor
    if not isinstance(t, DTensor):
        return t
    rows, axis = _pieces_rows(model, name, t.device_mesh)
    full = t.full_tensor()
    return full if rows is None else full.index_select(axis, torch.argsort(rows))


def sharded_like(model: nn.Module, name: str, whole: torch.Tensor, p) -> torch.Tensor:
    """`whole_tensor`'s inverse: `whole` (a tensor of the parameter `name`'s shape, as the whole model
    holds it: a checkpoint's weight or optimizer moment) laid out as the parallelized parameter `p` is."""
    from torch.distributed.tensor import DTensor, distribute_tensor
    if not isinstance(p, DTensor):
        return whole
    rows, axis = _pieces_rows(model, name, p.device_mesh)
    return distribute_tensor((whole if rows is None else whole.index_select(axis, rows)).to(p.device),
                             p.device_mesh, p.placements)


def _shard_along(model: nn.Module, mesh, axes: dict, orders: dict) -> None:
    """Each parameter a path of `axes` names (`layers.*.sinks`: K), a DTensor sharded on its axis K, which
    its module's forward reads as this rank's part: a forward pre-hook puts its local view (_local) in the
    module's instance dict (found before nn.Module's parameter lookup), whose backward gives the DTensor
    its part of the gradient, and a forward hook takes it out again. The module keeps its class (type,
    isinstance and pickling unchanged) and its state dict its keys. One a path of `orders` names has its
    axis K reordered first (pieces: _pieces_order). K None: a weight applied whole to a rank's heads
    (head_norm), a Replicate DTensor whose local gradient is a partial sum over the heads: DTensor
    all-reduces it."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    owners: dict = {}
    for name, p in list(model.named_parameters()):
        path = next((path for path in axes if fnmatch.fnmatchcase(name, path)), None)
        if path is None:
            continue
        axis = axes[path]
        order = next((o for key, o in orders.items() if fnmatch.fnmatchcase(name, key)), None)
        data = p.data if order is None else p.data.index_select(axis, order)
        owner, _, attr = name.rpartition(".")
        m = model.get_submodule(owner)
        placement = Replicate() if axis is None else Shard(axis)
        m._parameters[attr] = nn.Parameter(distribute_tensor(data, mesh, [placement]), p.requires_grad)
        owners.setdefault(m, []).append(attr)
    for m, attrs in owners.items():
        views = _LocalViews(tuple(attrs))
        m.register_forward_pre_hook(views.put)
        m.register_forward_hook(views.drop, always_call=True)


class _AllReduced(torch.autograd.Function):
    """The identity on a Replicate DTensor, whose backward makes a Partial gradient Replicate (all-reduced)."""

    @staticmethod
    def forward(ctx, p):
        return p.view_as(p)

    @staticmethod
    def backward(ctx, grad):
        from torch.distributed.tensor import Replicate
        return grad.redistribute(grad.device_mesh, [Replicate()])


def _local(p):
    """A rank's part of the DTensor parameter `p`; of a Replicate one (a head_norm weight), the whole, whose
    gradient, a partial sum over this rank's heads, is all-reduced into a Replicate one."""
    if p.placements[0].is_shard():
        return p.to_local()
    from torch.distributed.tensor import Partial
    return _AllReduced.apply(p).to_local(grad_placements=(Partial(),))


class _LocalViews:
    """The hooks of _shard_along for a module's sharded parameters `attrs` (a class, not a closure: a model
    only _shard_along and _shard_experts sharded, as on one rank, still pickles)."""

    def __init__(self, attrs: tuple):
        self.attrs = attrs

    def put(self, module, args):
        for a in self.attrs:
            module.__dict__[a] = _local(module._parameters[a])

    def drop(self, module, args, output):
        for a in self.attrs:
            module.__dict__.pop(a, None)


def _shard_experts(model: nn.Module, mesh, axes: dict) -> None:
    """Each parameter a path of `axes` names (`layers.*.gate_weight`: 1) a DTensor sharded on that axis, its
    hidden width's; one whose axis is None stays whole."""
    from torch.distributed.tensor import Shard, distribute_tensor
    for name, p in list(model.named_parameters()):
        axis = next((k for path, k in axes.items() if fnmatch.fnmatchcase(name, path)), None)
        if axis is not None:
            owner, _, attr = name.rpartition(".")
            model.get_submodule(owner).register_parameter(
                attr, nn.Parameter(distribute_tensor(p.data, mesh, [Shard(axis)]), p.requires_grad))


def _exists(model: nn.Module, path: str, parameter: bool = False) -> bool:
    """Whether some module (or parameter) matches `path` (`*` for any one name)."""
    named = model.named_parameters() if parameter else model.named_modules()
    return any(fnmatch.fnmatchcase(name, path) for name, _ in named)


def _left_out(model: nn.Module, path: str) -> bool:
    """Whether `path` names a module or parameter attribute the config set to None (an untied head)."""
    for name, m in model.named_modules():
        for attr, value in (*vars(m).items(), *m._modules.items(), *m._parameters.items()):
            if value is None and fnmatch.fnmatchcase(f"{name}.{attr}" if name else attr, path):
                return True
    return False


def clip_grad_norm_(parameters, max_norm: float) -> torch.Tensor:
    """torch.nn.utils.clip_grad_norm_ for a parallelized model, whose gradients are DTensors on two
    meshes (("dp", "tp") for the tensor-parallel ones, "dp" for the rest) that torch's foreach norm
    cannot take together: each DTensor gradient's norm is made whole by DTensor (`full_tensor`, a
    collective), the plain ones' by one foreach norm, then combined and applied as torch's are: on the
    device, with no host sync (the scale a tensor, 1 where the norm is within `max_norm`). Returns the
    total norm, as torch's does."""
    from torch.distributed.tensor import DTensor
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    plain = [g for g in grads if not isinstance(g, DTensor)]
    plain_norms = iter(torch._foreach_norm(plain) if plain else ())  # (no empty list: where all are DTensors)
    norms = [torch.linalg.vector_norm(g).full_tensor() if isinstance(g, DTensor) else next(plain_norms)
             for g in grads]
    total = torch.linalg.vector_norm(torch.stack([n.to(grads[0].device) for n in norms]))
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    # a DTensor's local part is its storage (a view): scaling it scales the DTensor
    torch._foreach_mul_([g.to_local() if isinstance(g, DTensor) else g for g in grads], scale)
    return total
