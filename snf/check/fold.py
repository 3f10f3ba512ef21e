"""Constant folding with limits: arithmetic on numbers (literals, config values at their defaults)
is evaluated while checking, so that `1.0 / 0.0`, `10.0 ** 400`, `sqrt(-8 * d_ff)` or a power
tower are errors here, not exceptions (or hangs) in the generated module.

Every step is bounded before it is computed: an integer result may not pass 2**62 (the limit of
dims), a float must stay finite, and a power is estimated from its logarithm first, so folding
`2 ** 2 ** 2 ** 2 ** 2 ** 2` stops at the first step that is too large. Each op computes by its
registry entry's `scalar`, which raises ScalarError for numbers it has no value for.
"""

from __future__ import annotations

import math

from .. import ir
from ..dims import DimError
from ..ir import ErrorT, ScalarT
from ..ops import all_ops
from ..ops.registry import ScalarError

MAX_INT = 2**62


class FoldError(ArithmeticError):
    """Arithmetic that fails; `used_config`: whether the numbers it computed with read a config
    default (the message then says "with the default config")."""

    def __init__(self, message: str, used_config: bool = False):
        super().__init__(message)
        self.used_config = used_config


def _check(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and abs(v) > MAX_INT:
        raise FoldError("is too large (beyond 2**62)")
    if isinstance(v, float) and not math.isfinite(v):
        raise FoldError("overflows")
    return v


class Folding:
    """Mixed into `Checker`."""

    def fold(self, op: ir.Op) -> ir.Type:
        """`op`'s type, or ERR after reporting arithmetic that fails for the defaults (or always)."""
        if _scalar(op) is None or not isinstance(op.ty, ScalarT) or op.ty.kind not in ("int", "float"):
            return op.ty
        try:
            self.number(op)
        except FoldError as err:
            shown = self.source_text(op.span) or op.op
            where = " with the default config" if err.used_config else ""
            self.r.error("bad-arithmetic", f"`{shown}` {err}{where}", op.span,
                         hint="numbers in a spec are computed when the module is built; keep them finite")
            return ErrorT()
        return op.ty

    def number(self, e: ir.TExpr) -> tuple:
        """(The value of a scalar expression for the config's defaults, or None when unknown: a
        run-time dim, a field without a default; whether it read a config default.) Each node is
        folded once, as the checker meets it bottom up, and later folds of the trees that hold it
        read its value (`_numbers`): folding is linear in the spec's size. Raises FoldError for
        arithmetic that fails, every time it is asked."""
        memo = self._numbers.get(id(e))
        if memo is None:
            try:
                memo = (e, self._number(e), None)  # e kept: its id stays its own
            except FoldError as err:
                memo = (e, None, err)
            self._numbers[id(e)] = memo
        if memo[2] is not None:
            raise memo[2]
        return memo[1]

    def _number(self, e: ir.TExpr) -> tuple:
        if isinstance(e, ir.Lit):
            return (e.value if isinstance(e.value, (int, float)) else None), False
        if isinstance(e, ir.DimVal):
            return self.dim_number(e.dim)
        if isinstance(e, ir.Ref):
            if e.kind == "config":
                field = next((c for c in self.config if c.name == e.name), None)
                return (field.default if field is not None and isinstance(field.default, (int, float)) else None), True
            if e.kind == "dim":
                return self.folded.get(e.name, (None, False))  # absent: a run-time dim
            return None, False
        if isinstance(e, ir.Op) and e.op in ("len", "item"):  # of a list param's default
            listed = e.arg("x")
            field = next((c for c in self.config if c.name == getattr(listed, "name", None)), None)
            items = field.default if field is not None and isinstance(field.default, tuple) else None
            if items is None:
                return None, True
            if e.op == "len":
                return len(items), True
            i = self.number(e.arg("i"))[0]
            value = items[i] if isinstance(i, int) and 0 <= i < len(items) else None
            return (value if isinstance(value, (int, float)) else None), True
        scalar = _scalar(e) if isinstance(e, ir.Op) and isinstance(e.ty, ScalarT) else None
        if scalar is not None and e.ty.kind in ("int", "float", "bool"):
            folded = [self.number(a) for _, a in e.args]
            used = any(u for _, u in folded)
            args = [v for v, _ in folded]
            if any(a is None or isinstance(a, bool) and e.ty.kind != "bool" for a in args):
                return None, used  # (a condition, `n > 0 and flag`, folds for the checks it guards)
            try:
                return _check(scalar(*args)), used
            except (ScalarError, FoldError) as err:
                raise FoldError(str(err), used) from None
        return None, False

    def remember(self, derived: ir.Derived) -> None:
        """Fold a derived value once, as it is declared: a later use reads it (a chain of derived
        values folds in time linear in its length, not quadratic, and without recursion). A value
        that does not fold is reported where its expression is checked; here it is unknown."""
        try:
            folded = self.dim_number(derived.dim) if derived.dim is not None and not derived.opaque \
                else self.number(derived.value)
        except FoldError as err:
            folded = None, err.used_config
        self.folded[derived.name] = folded

    def dim_number(self, d) -> tuple:
        """(`d` for the config's defaults, or None; whether it reads a config value.)"""
        try:
            return d.evaluate(self.defaults()), bool(d.symbols())
        except (KeyError, DimError, ZeroDivisionError):
            return None, bool(d.symbols())


def _scalar(e: ir.Op):
    """The op's function on numbers, or None (an initialiser is no registry op)."""
    op = all_ops().get(e.op)
    return None if op is None else op.scalar
