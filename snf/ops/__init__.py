"""The op registry: every op snfc knows, by name.

registry.py holds the types (`OpDef`, `Param`, `OpError`) and imports no op; each family module
in `FAMILIES` fills its own table with `register(OpDef(...))`; this module merges them, in that
order. A new family is one module with an `OPS` table, listed in `FAMILIES` (docs/architecture.md,
"Recipes").
"""

from __future__ import annotations

from . import arithmetic, attention, construct, core, elementwise, latent, lists, moe, recurrent
from .registry import OpDef

FAMILIES = (arithmetic, core, elementwise, construct, attention, latent, moe, recurrent, lists)


def _merge() -> dict[str, OpDef]:
    table: dict[str, OpDef] = {}
    for family in FAMILIES:
        for name, op in family.OPS.items():
            assert name not in table, f"op {name} is defined in two modules"
            table[name] = op
    return table


_ALL = _merge()


def all_ops() -> dict[str, OpDef]:
    return _ALL
