"""`snf.parallelize`: a generated model sharded over a DeviceMesh by its tensor-parallel plan.

The plan is the generated `Model.tp_plan` (module path -> style, `*` for any layer; derived from the
spec, docs/training.md) and `Model.tp_requires` ((config, tp) -> whether it shards, the message
naming the dim and the spec line). Each style is one of PyTorch's own
`torch.distributed.tensor.parallel` styles: the communication is DTensor's, none is written here.
Every sharded module hands the body plain local tensors (`use_local_output=True`), so attention,
RoPE and the caches run unchanged on a rank's heads.

A 1-D mesh is tensor parallel. A 2-D mesh named ("dp", "tp") shards by the plan over "tp", then
with FSDP2 (`fully_shard`) over "dp": each layer block, then the root (torchtitan's order).
"""

from __future__ import annotations

import dataclasses
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
STYLES = ("colwise", "rowwise", "vocab_embedding", "vocab_head", "head_norm", "replicate")


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
    }


# styles a plan may name that this runtime refuses for now, and why
_NOT_YET = {
    "width_norm": "a norm over the whole sharded width needs its statistics all-reduced",
    "sequence_norm": "sequence parallelism is not applied yet",
}
# a projection the spec slices into pieces (Phi-3's fused q/k/v): its rows are reordered (_pieces_order)
# so that a contiguous block per rank (ColwiseParallel) is the rank's part of each piece; one with no
# `tp_pieces` entry is refused, as a contiguous block would mix the pieces (wrong results, no error).
# Pieces of pieces (Mamba2's z, x B C, dt, then x, B, C) are flattened by the plan: the leaf pieces.
# A shard:K parameter with a `tp_pieces` entry (Mamba2's conv weight over x, B and C) is reordered so
# along K; so is a cache of that name (`new_conv`), which its forward writes a rank's part of each into.
PIECES = "colwise_pieces"
# "experts": the stacked weights of a moe_experts call (parameters, not modules), sharded on the hidden
# width F: gate and up [E, F, D] (and their biases [E, F]) on axis 1, down [E, D, F] on axis 2, told
# apart by the spec's names (`down` in the name, as every bundled spec has it). moe_experts
# (snf.runtime.experts) runs them on this rank's slice and adds the partial outputs over the ranks.
EXPERTS = "experts"


def _expert_axis(name: str, p) -> Optional[int]:
    """The axis an expert weight is sharded on; None for a down bias [E, D], kept whole (moe_experts adds
    it once, after the ranks' partial sums)."""
    down = "down" in name.rpartition(".")[2]
    if down and p.dim() == 2:
        return None
    return 2 if down else 1


def _local_config(config, names: tuple[str, ...], tp: int):
    """`config` as one rank's body reads it: the names `names` (head counts, widths a rank holds 1/tp
    of: fields or derived dims) divided by tp, every other derived dim kept at its whole-model value
    (head_dim = n_embd // n_head stays what it is). Forward reads these sizes to allocate the caches
    and to check the caches it is given."""
    cls = type(config)
    kept = {n: getattr(config, n) // tp if n in names else getattr(config, n)
            for n, v in vars(cls).items() if isinstance(v, property)}
    shard_cls = type(f"{cls.__name__}Shard", (cls,), {n: property(lambda self, v=v: v) for n, v in kept.items()})
    local = object.__new__(shard_cls)
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        object.__setattr__(local, f.name, value // tp if f.name in names else value)
    return local


def parallelize(model: nn.Module, mesh, *, plan: Optional[dict] = None, local: Optional[tuple] = None) -> nn.Module:
    """Shard `model` (a generated Model, built or loaded, identical on every rank) over `mesh` by its
    tensor-parallel plan and return it. `plan` / `local`, where given, are used instead of the
    Model's `tp_plan` / `tp_local`. A config the plan cannot shard at this tp is refused before
    anything is sharded (ShardingError naming the dim and the spec line)."""
    import fnmatch

    cls = type(model)
    plan = dict(plan if plan is not None else getattr(cls, "tp_plan", None) or {})
    local = tuple(local if local is not None else getattr(cls, "tp_local", None) or ())
    if not plan:
        raise ShardingError(f"{cls.__module__}.Model has no tp_plan: pass plan=")
    check_shardable(cls, model.config, mesh)
    tp_axis = tp_mesh(mesh)
    tp = tp_axis.size()
    layout = {}
    tied = any(s == "vocab_head" and not _exists(model, p) for p, s in plan.items())
    pieces = getattr(cls, "tp_pieces", {})
    norms = []  # head_norm weights that are plain parameters
    for path, style in plan.items():
        if style.startswith("shard:"):
            if not style[6:].isdigit() or not (_exists(model, path, parameter=True) or _left_out(model, path)):
                raise ShardingError(f"{path} ({style}): no parameter of {cls.__module__}.Model has this path, "
                                    "or the axis is not a number")
            if path in pieces and any(n % tp for n in pieces[path](model.config)):
                raise ShardingError(f"{path}: its pieces of sizes {tuple(pieces[path](model.config))} do not "
                                    f"divide by tp = {tp}")
            continue
        if style == PIECES:
            if path not in pieces:
                raise ShardingError(f"{path}: style {style!r} is not supported here: the model has no tp_pieces "
                                    "entry for it (its pieces' sizes), and a contiguous block of rows per rank "
                                    "would mix the pieces")
            sizes = pieces[path](model.config)
            if any(n % tp for n in sizes):  # before anything is sharded
                raise ShardingError(f"{path}: its pieces of sizes {tuple(sizes)} do not divide by tp = {tp}")
            style = "colwise"
        if style in _NOT_YET:
            raise ShardingError(f"{path}: style {style!r} is not supported yet: {_NOT_YET[style]}")
        if style not in STYLES and style != EXPERTS:
            raise ShardingError(f"{path}: unknown tensor-parallel style {style!r}")
        if not _exists(model, path, parameter=style == EXPERTS) and not _left_out(model, path):
            raise ShardingError(f"{path} ({style}): no module or parameter of {cls.__module__}.Model has this path")
        if style == EXPERTS:  # a weight this runtime cannot shard is refused here, before any is
            for name, p in model.named_parameters():
                if fnmatch.fnmatchcase(name, path):
                    _expert_axis(name, p)
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
            sizes = pieces[path](model.config)
            for name, m in model.named_modules():
                if fnmatch.fnmatchcase(name, path):
                    for p in (m.weight, m.bias):
                        if p is not None:
                            p.data = p.data[_pieces_order(sizes, tp)]
        parallelize_module(model, tp_axis, {path: styles[style]() for path, style in layout.items()})
        _shard_experts(model, tp_axis, [p for p, s in plan.items() if s == EXPERTS])
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
        from torch.distributed.fsdp import fully_shard
        dp_mesh = mesh["dp"]
        for m in model.modules():
            if isinstance(m, nn.ModuleList):
                for block in m:
                    fully_shard(block, mesh=dp_mesh)
        fully_shard(model, mesh=dp_mesh)
    return model


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
    import fnmatch
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
    its module reads as this rank's part: a property of the module's class (a subclass made here, as
    torch's parametrize does) returns `to_local()`, whose backward gives the DTensor its part of the
    gradient. One a path of `orders` names has its axis K reordered first (pieces: _pieces_order).
    K None: a weight applied whole to a rank's heads (head_norm), a Replicate DTensor whose local
    gradient is a partial sum over the heads: DTensor all-reduces it. The state dict keeps its keys."""
    import fnmatch

    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
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
        if not hasattr(type(m), "_snf_local"):
            m.__class__ = type(type(m).__name__, (type(m),), {"_snf_local": ()})
        if attr not in type(m)._snf_local:
            type(m)._snf_local += (attr,)
            setattr(type(m), attr, property(lambda self, a=attr: _local(self._parameters[a])))


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
    from torch.distributed.tensor import Partial
    if p.placements[0].is_shard():
        return p.to_local()
    return _AllReduced.apply(p).to_local(grad_placements=(Partial(),))


def _shard_experts(model: nn.Module, mesh, paths: list) -> None:
    """Each parameter a path of `paths` names (`layers.*.gate_weight`) a DTensor sharded on its hidden width."""
    import fnmatch

    from torch.distributed.tensor import Shard, distribute_tensor
    for name, p in list(model.named_parameters()):
        if any(fnmatch.fnmatchcase(name, path) for path in paths):
            axis = _expert_axis(name, p)
            if axis is None:
                continue
            owner, _, attr = name.rpartition(".")
            model.get_submodule(owner).register_parameter(
                    attr, nn.Parameter(distribute_tensor(p.data, mesh, [Shard(axis)]), p.requires_grad))


def _exists(model: nn.Module, path: str, parameter: bool = False) -> bool:
    """Whether some module (or parameter) matches `path` (`*` for any one name)."""
    import fnmatch
    named = model.named_parameters() if parameter else model.named_modules()
    return any(fnmatch.fnmatchcase(name, path) for name, _ in named)


def _left_out(model: nn.Module, path: str) -> bool:
    """Whether `path` names a module or parameter attribute the config set to None (an untied head)."""
    import fnmatch
    for name, m in model.named_modules():
        for attr, value in (*vars(m).items(), *m._modules.items(), *m._parameters.items()):
            if value is None and fnmatch.fnmatchcase(f"{name}.{attr}" if name else attr, path):
                return True
    return False


def clip_grad_norm_(parameters, max_norm: float) -> torch.Tensor:
    """torch.nn.utils.clip_grad_norm_ for a parallelized model, whose gradients are DTensors on two
    meshes (("dp", "tp") for the tensor-parallel ones, "dp" for the rest) that torch's foreach norm
    cannot take together: each gradient's norm is made whole by DTensor (`full_tensor`), then
    combined. Returns the total norm, as torch's does."""
    from torch.distributed.tensor import DTensor
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    norms = []
    for g in grads:
        n = torch.linalg.vector_norm(g)
        norms.append(n.full_tensor() if isinstance(n, DTensor) else n)
    total = torch.linalg.vector_norm(torch.stack(norms))
    scale = min(max_norm / (total.item() + 1e-6), 1.0)
    for g in grads:
        g.mul_(scale)
    return total
