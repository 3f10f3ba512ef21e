"""The op registry: every op snfc knows, by name.

registry.py holds the types (`OpDef`, `Param`, `OpError`) and imports no op; each family module
in `FAMILIES` fills its own table with `register(OpDef(...))`; this module merges them, in that
order. A new family is one module with an `OPS` table, listed in `FAMILIES` (docs/architecture.md,
"Recipes"). An operator (`+`, `<=`, `not`) is the op whose `symbol` it is (`by_symbol`).
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


_BY_SYMBOL = {(op.symbol, len(op.params)): op for op in _ALL.values() if op.symbol is not None}


def by_symbol(symbol: str, operands: int = 2) -> OpDef:
    """The op an operator writes (`+`: add): `-` with two operands is `sub`, with one `neg`. A
    KeyError for a symbol no op has."""
    return _BY_SYMBOL[symbol, operands]


def compare(a, symbol: str, b) -> bool:
    """`a <symbol> b` on numbers (`<=`, `==`, ...), by the comparison op's `scalar`: the one
    evaluator of a comparison (an `assert`, a check on dims) for the checker, the interpreter and
    `snfc stats`. The generated runtime keeps a copy: a standalone module imports no snf."""
    return by_symbol(symbol).scalar(a, b)


def holds(check, env) -> bool:
    """Whether `check` (an `ir.Check` on dims) holds for the dims' values in `env`: the one evaluation
    of a check, for the interpreter and `snfc stats`. A function here, not a method of the check:
    snf.ir sits below the registry, which gives a comparison its meaning."""
    return compare(check.lhs.evaluate(env), check.op, check.rhs.evaluate(env))
