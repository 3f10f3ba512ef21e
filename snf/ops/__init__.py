"""The op registry: every op snfc knows, by name (types in registry.py, the ops in core.py)."""

from __future__ import annotations

from .core import OPS
from .registry import OpDef


def all_ops() -> dict[str, OpDef]:
    return OPS
