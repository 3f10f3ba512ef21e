"""What the caches hold per token (KV caches) and per sequence (recurrent states), and what a
latent cache's keys and values would hold expanded, for `snfc stats`, which reads the lowered IR:
a latent's expansion written out is `latent_attention` there (snf/passes/absorb.py), as it runs."""

from __future__ import annotations

from .. import ir
from ..dims import Dim
from ..ops.shapes import product
from ..passes.caches import CachePlan

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8, "bool": 1}


def cache_bytes(model: ir.Model, tokens_dims: list[str], caches: CachePlan) -> tuple[Dim, Dim, Dim]:
    """Bytes the caches (the cache plan says which inputs) hold per token, the states per sequence
    (each input's size without its growing axis and the batch axis), and, for a cache that
    `latent_attention` reads, what the keys and values it expands would hold per token instead."""
    batch = tokens_dims[0] if len(tokens_dims) > 1 else None
    inputs = {i.name: i for i in model.inputs}
    totals = {False: Dim(), True: Dim()}  # per token (KV caches), per sequence (states)
    expanded = Dim()
    readers = {e.arg("latent").name: e for e in ir.walk_exprs(model.body)
               if isinstance(e, ir.Op) and e.op == "latent_attention" and isinstance(e.arg("latent"), ir.Ref)}
    for c in caches.caches:
        ty = inputs[c.input].ty
        kept = [d for axis, d in enumerate(ty.shape) if axis != c.axis and d.as_symbol() != batch]
        totals[c.state] += Dim.const(DTYPE_BYTES[ty.dtype]) * product(kept)
        op = readers.get(c.grown)
        if op is not None:  # the latent's last axis becomes each head's key and value
            q = op.arg("q").ty.shape
            expanded += Dim.const(DTYPE_BYTES[ty.dtype]) * product(kept[:-1]) * q[2] * (q[3] + op.ty.shape[3])
    return totals[False], totals[True], expanded
