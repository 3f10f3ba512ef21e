"""The op registry: every op snfc knows, by name.

registry.py holds the types (`OpDef`, `Param`, `OpError`) and imports no op; each family
module (arithmetic.py, core.py, elementwise.py, construct.py, attention.py, moe.py, recurrent.py, lists.py) fills its own table with
`register(OpDef(...))`; this module merges them. A new family is one module with an `OPS` table, listed in `FAMILIES`.
"""

from __future__ import annotations

from . import arithmetic, attention, construct, core, elementwise, lists, moe, recurrent
from .registry import OpDef

FAMILIES = (arithmetic, core, elementwise, construct, attention, moe, recurrent, lists)


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
