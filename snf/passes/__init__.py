"""The middle end: IR -> IR passes, then planning passes.

Rewrites (`PASSES`) are pure functions `ir.Model -> ir.Model`, run in order, each followed by
the verifier. Planning passes are pure functions from the typed (lowered) IR to frozen plans:
what becomes a Block, which inputs and outputs form a cache, where each parameter lives,
which statements each entry point needs, whether there is a `generate`, which loss may run
fused with its head, how the parameters shard over tensor-parallel ranks. Code generation only
emits what the plans say; no stage works out a fact another one already computed.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from .absorb import absorb_latent
from .blocks import BlockPlan, plan_blocks
from .caches import CachePlan, plan_caches
from .decode import DecodePlan, plan_decode
from .fuse_linear import fuse_linear
from .fused_loss import FusedLoss, plan_fused_loss
from .layout import LayoutPlan, plan_layout
from .liveness import OutputPlan, plan_outputs
from .sequence_parallel import SequencePlan, plan_sequence
from .signatures import Signature, local_types, plan_signatures
from .tensor_parallel import TensorParallelPlan, plan_tensor_parallel
from .verify import verify
from .writes import plan_writes

# fuse_linear is not run: a fused [Wq; Wk; Wv] cannot be split column-wise into whole heads per rank
# (tensor parallelism, issue 50), and it measured no faster on a CPU (benchmarks/README.md).
PASSES = (absorb_latent,)


def run_passes(model: ir.Model) -> ir.Model:
    verify(model)
    for p in PASSES:
        model = p(model)
        verify(model)
    return model


@dataclass(frozen=True)
class Plans:
    model: ir.Model  # the lowered IR the plans describe
    blocks: BlockPlan
    caches: CachePlan
    layout: LayoutPlan
    outputs: OutputPlan
    decode: DecodePlan | None
    writes: frozenset  # the indexed writes done in place (the rest copy first)
    loss: FusedLoss | None = None
    signatures: tuple[Signature, ...] = ()  # each block's, in the order of blocks.blocks
    types: dict | None = None  # the type of each name a function may hold (signatures.local_types)
    tp: TensorParallelPlan | None = None  # how the model shards over tensor-parallel ranks
    sequence: SequencePlan | None = None  # where its sequences' positions may split over those ranks

    def signature(self, block) -> Signature:
        return self.signatures[self.blocks.blocks.index(block)]

    @property
    def decode_steps(self) -> bool:
        """Whether generate runs decode steps on preallocated cache buffers (forward then reads its
        decode state); caches a buffer could hold but no generate writes are never preallocated."""
        return _decode_steps(self.decode)


def _decode_steps(decode: DecodePlan | None) -> bool:
    return decode is not None and decode.preallocated


def plan(model: ir.Model) -> Plans:
    """Every plan for an already lowered model."""
    blocks = plan_blocks(model)
    caches = plan_caches(model, blocks)
    loss = plan_fused_loss(model)
    layout, outputs = plan_layout(model, blocks), plan_outputs(model, caches.outputs, loss)
    decode, types = plan_decode(model, caches), local_types(model)
    signatures = plan_signatures(model, blocks, caches, layout, outputs, _decode_steps(decode), types)
    tp = plan_tensor_parallel(model, layout, caches)
    return Plans(model, blocks, caches, layout, outputs, decode, plan_writes(model), loss, signatures, types,
                 tp, plan_sequence(model, layout, tp))
