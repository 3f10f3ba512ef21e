"""Stage 2: syntax IR -> typed IR (`ir.Model`), checking names, dtypes and symbolic shapes.

`check(spec, reporter)` is the entry point; `Checker` (checker.py) is composed of one mixin per
concern: declarations, expressions, statements, loops, op calls, optional presence, inits,
scopes and messages.
"""

from __future__ import annotations

from .. import ir
from ..diagnostics import Reporter
from .calls import ShapeCtx
from .checker import Checker


def check(spec: ir.Spec, r: Reporter) -> ir.Model | None:
    """Check a parsed spec; report every error and return the typed model, or None."""
    return Checker(spec, r).run()


__all__ = ["Checker", "ShapeCtx", "check"]
