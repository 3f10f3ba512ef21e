"""IR -> IR passes, each a pure function in its own module, run in the order of `PASSES`."""

from __future__ import annotations

from .. import ir
from .fuse_linear import fuse_linear
from .verify import verify

PASSES = (fuse_linear,)


def run_passes(model: ir.Model) -> ir.Model:
    verify(model)
    for p in PASSES:
        model = p(model)
        verify(model)
    return model
