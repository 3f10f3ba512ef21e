"""The decode plan: whether the module gets `Model.generate`, and how it feeds its caches.

A spec gets `generate` when it is a causal language model: its first input is token ids
`[B, T]` int64, an output is logits `[B, T, V]` over the rows of every table the ids index (a
sampled id is a valid one), every attention is causal (so the logits at a position never see
later tokens), and every other input is optional (generate cannot make one up). Its caches (from the cache plan) are fed back step by step when they come in complete
groups; a cache given together with an input generate cannot fill (a `[B, T_past + T]` mask)
means no cache: each step recomputes the whole sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..dims import equal
from .caches import Cache, CachePlan


@dataclass(frozen=True)
class DecodePlan:
    tokens: str  # the token input
    logits: str  # the logits output
    caches: tuple[Cache, ...]  # fed back at each step; () recomputes the sequence
    preallocated: bool  # the caches live in fixed-size buffers written in place (see the cache plan)


def plan_decode(model: ir.Model, caches: CachePlan) -> DecodePlan | None:
    if not model.inputs or not model.outputs:
        return None
    tokens = model.inputs[0]
    if tokens.optional or tokens.ty.dtype != "int64" or tokens.ty.rank != 2:
        return None
    logits = next((o for o in model.outputs if o.ty.rank == 3 and o.ty.dtype.startswith(("float", "bfloat"))
                   and o.ty.shape[:2] == tokens.ty.shape), None)
    if logits is None or any(not i.optional for i in model.inputs[1:]):
        return None
    vocab = logits.ty.shape[-1]
    tables = [e.arg("table").ty for e in ir.walk_exprs(model.body) if isinstance(e, ir.Op) and e.op == "gather"
              and isinstance(e.arg("index"), ir.Ref) and e.arg("index").name == tokens.name]
    if any(not equal(t.shape[0], vocab)[0] for t in tables if isinstance(t, ir.TensorT)):
        return None  # a sampled id (< V) must be a row of every table the tokens index
    attention = [e for e in ir.walk_exprs(model.body) if isinstance(e, ir.Op) and e.op == "flash_attention"]
    if not attention or not all(e.arg("causal").value is True for e in attention):
        return None
    fed = caches.caches
    names = {c.input for c in fed}
    if any(set(group) & names and not set(group) <= names for group in model.input_groups):
        fed = ()  # the caches come with an input generate cannot fill
    return DecodePlan(tokens.name, logits.name, tuple(fed), bool(fed) and caches.preallocated is not None)
