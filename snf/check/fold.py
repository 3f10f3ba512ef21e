"""Constant folding with limits: arithmetic on numbers (literals, config values at their defaults)
is evaluated while checking, so that `1.0 / 0.0`, `10.0 ** 400`, `sqrt(-8 * d_ff)` or a power
tower are errors here, not exceptions (or hangs) in the generated module.

Every step is bounded before it is computed: an integer result may not pass 2**62 (the limit of
dims), a float must stay finite, and a power is estimated from its logarithm first, so folding
`2 ** 2 ** 2 ** 2 ** 2 ** 2` stops at the first step that is too large.
"""

from __future__ import annotations

import math

from .. import ir
from ..dims import DimError
from ..ir import ErrorT, ScalarT

MAX_INT = 2**62
_ARITH = {"add", "sub", "mul", "div", "floordiv", "mod", "pow", "neg", "sqrt", "exp", "log", "tanh"}


class FoldError(ArithmeticError):
    pass


def _check(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and abs(v) > MAX_INT:
        raise FoldError("is too large (beyond 2**62)")
    if isinstance(v, float) and not math.isfinite(v):
        raise FoldError("overflows")
    return v


def _div(a, b):
    if b == 0:
        raise FoldError("divides by zero")
    return a / b


def _floordiv(a, b):
    if b == 0:
        raise FoldError("divides by zero")
    return a // b


def _mod(a, b):
    if b == 0:
        raise FoldError("divides by zero")
    return a % b


def _pow(a, b):
    """a ** b, estimated first: its size is |b| * log2|a| bits, checked before it is computed."""
    if a == 0 and b < 0:
        raise FoldError("divides by zero (0 to a negative power)")
    exact = isinstance(a, int) and isinstance(b, int) and b >= 0
    if a not in (0, 1, -1):
        try:
            bits = b * math.log2(abs(a))
        except OverflowError:
            bits = math.inf
        if bits > (62 if exact else 1023):
            raise FoldError("is too large" if exact else "overflows")
    if a < 0 and isinstance(b, float) and b != int(b):
        raise FoldError("is not a real number (a negative base to a fractional power)")
    try:
        return a ** b
    except OverflowError:
        raise FoldError("overflows") from None


def _sqrt(x):
    if x < 0:
        raise FoldError("takes the square root of a negative number")
    return math.sqrt(x)


def _log(x):
    if x <= 0:
        raise FoldError("takes the logarithm of a number <= 0")
    return math.log(x)


def _exp(x):
    if x > 709:
        raise FoldError("overflows")
    return math.exp(x)


_MATH = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": _div,
         "floordiv": _floordiv, "mod": _mod, "pow": _pow, "neg": lambda a: -a, "sqrt": _sqrt, "exp": _exp,
         "log": _log, "tanh": math.tanh, "int": lambda a: _rounded(int, a), "floor": lambda a: _rounded(math.floor, a),
         "ceil": lambda a: _rounded(math.ceil, a), "round": lambda a: _rounded(round, a)}


def _rounded(fn, x):
    if not math.isfinite(x):
        raise FoldError(f"rounds {x}")
    return fn(x)


class Folding:
    """Mixed into `Checker`."""

    def fold(self, op: ir.Op) -> ir.Type:
        """`op`'s type, or ERR after reporting arithmetic that fails for the defaults (or always)."""
        if op.op not in _ARITH or not isinstance(op.ty, ScalarT) or op.ty.kind not in ("int", "float"):
            return op.ty
        self.folded_config = False
        try:
            self.number(op)
        except FoldError as err:
            shown = self.source_text(op.span) or op.op
            where = " with the default config" if self.folded_config else ""
            self.r.error("bad-arithmetic", f"`{shown}` {err}{where}", op.span,
                         hint="numbers in a spec are computed when the module is built; keep them finite")
            return ErrorT()
        return op.ty

    def number(self, e: ir.TExpr):
        """The value of a scalar expression for the config's defaults; None when unknown (a
        run-time dim, a field without a default). Raises FoldError for arithmetic that fails."""
        if isinstance(e, ir.Lit):
            return e.value if isinstance(e.value, (int, float)) else None
        if isinstance(e, ir.DimVal):
            return self.dim_number(e.dim)
        if isinstance(e, ir.Ref):
            if e.kind == "config":
                field = next((c for c in self.config if c.name == e.name), None)
                self.folded_config = True
                return field.default if field is not None and isinstance(field.default, (int, float)) else None
            if e.kind == "dim":
                if e.name not in self.folded:
                    return None  # a run-time dim
                value, used_config = self.folded[e.name]
                self.folded_config = self.folded_config or used_config
                return value
            return None
        if isinstance(e, ir.Op) and e.op in _MATH and isinstance(e.ty, ScalarT):
            args = [self.number(a) for _, a in e.args]
            if any(a is None or isinstance(a, bool) for a in args):
                return None
            return _check(_MATH[e.op](*args))
        return None

    def remember(self, derived: ir.Derived) -> None:
        """Fold a derived value once, as it is declared: a later use reads it (a chain of derived
        values folds in time linear in its length, not quadratic, and without recursion). A value
        that does not fold is reported where its expression is checked; here it is unknown."""
        saved, self.folded_config = self.folded_config, False
        try:
            value = self.dim_number(derived.dim) if derived.dim is not None else self.number(derived.value)
        except FoldError:
            value = None
        self.folded[derived.name] = (value, self.folded_config)
        self.folded_config = saved

    def dim_number(self, d):
        if d.symbols():
            self.folded_config = True
        try:
            return d.evaluate(self.defaults())
        except (KeyError, DimError, ZeroDivisionError):
            return None
