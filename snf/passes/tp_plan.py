"""The tensor-parallel plan's types (snf/passes/tensor_parallel.py makes one): each module's placement,
what tp must divide, the caches' and pieces' layouts; and what a plan says of a config (its
requirements at the defaults, the ones a tp breaks)."""

from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..dims import Dim, DimError, show_dim
from ..source import NO_SPAN, Span


@dataclass(frozen=True)
class Placement:
    """How one module (or plain parameter) of the generated Model is placed."""

    key: str  # its path in the Model: `layers.*.qkv`, `token_embedding`, `lm_head_weight`
    style: str  # see docs/training.md: colwise, rowwise, vocab_embedding, ..., shard:K, replicate
    params: tuple[str, ...]  # the spec parameters it holds
    reason: str = ""  # replicated: what keeps it whole; else how it is used
    span: Span = NO_SPAN  # the op that decided it

    @property
    def sharded(self) -> bool:
        return self.style != "replicate"


@dataclass(frozen=True)
class Requirement:
    """tp must divide `units` (a dim of config values), which `what` names at `span`."""

    units: Dim
    what: str
    span: Span

    def dim(self, display) -> str:
        """The units in the spec's names, and the config field where that is another name for one (`KVH =
        n_kv_head`)."""
        dim, fields = show_dim(self.units, display), show_dim(self.units)
        return f"{dim} = {fields}" if dim != fields and self.units.as_symbol() is not None else dim

    def message(self, display, path: str) -> str:
        return f"tp must divide {self.dim(display)}, {self.what} ({path}:{self.span.line})"


@dataclass(frozen=True)
class TensorParallelPlan:
    placements: tuple[Placement, ...]  # one per module or plain parameter, in declaration order
    requires: tuple[Requirement, ...]
    # (cache input, output, the axis sharded as what is written into it; None: whole)
    caches: tuple[tuple[str, str, int | None], ...]
    # (linear weight, why it stays whole, where, whether by design: a low-rank projection)
    refused: tuple[tuple[str, str, Span, bool], ...]
    # `tp_pieces`: a colwise_pieces key, or a shard:K parameter's or a cache output's that meets sharded
    # pieces -> the leaf pieces' sizes along its sharded axis, in order (where the spec's slices tile it,
    # pieces of pieces flattened); the runtime lays out each rank's part of each leaf piece
    pieces: tuple[tuple[str, tuple[Dim, ...]], ...] = ()
    # `tp_expert_axes`: an experts key -> the axis of its hidden width, by its role in moe_experts (gate and
    # up [E, F, D] and their biases [E, F]: 1, down [E, D, F]: 2); None for the down bias [E, D], kept whole
    expert_axes: tuple[tuple[str, int | None], ...] = ()
    # the dims the forward's slices of those pieces read (their bounds): a rank must read its part of each
    bounds: frozenset = frozenset()

    @property
    def full(self) -> bool:
        """Every linear sharded but those kept whole by design."""
        return all(low_rank for _, _, _, low_rank in self.refused)

    def styles(self) -> dict[str, str]:
        """`tp_plan`: each sharded module's style, and `replicate` for a linear kept whole by a reason."""
        refused = {w for w, *_ in self.refused}
        return {p.key: p.style for p in self.placements if p.sharded or set(p.params) & refused}

    def local(self) -> tuple[str, ...]:
        """`tp_local`: the config values (fields or derived dims) a rank holds 1/tp of, the units of the
        requirements that are one name (`n_head`, `n_kv_head`): a rank's forward reads them to size and
        check its caches."""
        return tuple(sorted({r.units.as_symbol() for r in self.requires if r.units.as_symbol() is not None}))


def defaults(model: ir.Model) -> dict[str, int]:
    """The int config fields' defaults, and the computed ints' values for them (`rot = int(...)`, as the
    checker folded them): every requirement's units evaluate."""
    fields = {c.name: c.default for c in model.config if isinstance(c.default, int) and not isinstance(c.default, bool)}
    return {**fields, **dict(model.computed)}


def refusals(plan: TensorParallelPlan, model: ir.Model, tp: int) -> list[Requirement]:
    """The requirements the default config breaks at `tp` (a units count tp does not divide)."""
    env = defaults(model)
    out = []
    for r in plan.requires:
        try:
            n = r.units.evaluate(env)
        except (KeyError, DimError, ZeroDivisionError):
            continue
        if n % tp:
            out.append(r)
    return out


__all__ = ["Placement", "Requirement", "TensorParallelPlan", "defaults", "refusals"]
