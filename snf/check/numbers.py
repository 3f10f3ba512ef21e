"""Numbers the module computes from config values: an initialiser's `std`, a dropout rate, a
derived float. Folding checks them for the defaults (check/fold.py); for every other config they
become `ir.ValueCheck`s that `Config` makes when it is built: the number must compute, be finite,
and lie in the range its use allows (the op's `Param.within`, the initialiser's `INIT_RANGES`)."""

from __future__ import annotations

import contextlib

from .. import ir
from ..dims import Dim
from ..ir import BOOL, ErrorT, ScalarT
from ..ops import all_ops
from ..source import Span
from .conditions import expr_key, fewest
from .fold import FoldError


class Numbers:
    """Mixed into `Checker`; `self.value_checks` holds the `ir.ValueCheck`s, one per number, each
    with the parameter whose initialiser it is (or None); `self.guards` the conditions the
    statement being checked runs under."""

    @contextlib.contextmanager
    def guarded(self, test: ir.TExpr | None, negate: bool = False):
        """What is checked inside runs only when `test` holds (or, `negate`d, when it does not)."""
        if test is not None and negate:
            test = ir.Op("not", (("a", test),), BOOL, test.span)
        self.guards.append(test)
        try:
            yield
        finally:
            self.guards.pop()

    def layers_guard(self, count: Dim) -> ir.TExpr | None:
        """`count >= 1`: a layer loop's body runs only then."""
        if count.value is not None:
            return None
        one = ir.Lit(1, ScalarT("int", Dim.const(1)))
        return ir.Op("ge", (("a", ir.DimVal(count, ScalarT("int", count))), ("b", one)), BOOL)

    def numbers(self, stacked) -> tuple:
        """The checks, each initialiser's also under its parameter's layer count when the
        parameter is per layer (each layer's Block initialises its slice, none with no layers)."""
        checks = []
        for check, owner in self.value_checks:
            if owner in stacked:
                guard = self.layers_guard(next(t for t in self.params + self.buffers if t.name == owner).ty.shape[0])
                check = ir.replace(check, when=check.when + ((guard,) if guard is not None else ()))
            checks.append(check)
        return tuple(fewest(checks, lambda c: (expr_key(c.value), c.low, c.high, c.low_open)))

    def note_number(self, e: ir.TExpr, span: Span, what: str, within: tuple | None = None) -> bool:
        """`e`, a scalar argument or derived value, computed by the module. `within` is (low, high,
        low_open), either bound None. False after reporting a value out of range for the defaults."""
        if not isinstance(e.ty, ScalarT) or e.ty.kind not in ("int", "float") or isinstance(e.ty, ErrorT):
            return True
        if e.ty.dim is not None and within is None:
            return True  # a dim: it computes once its divisors are >= 1 (Facts.assumed)
        fields = self.config_sources(e)
        if fields is None:
            return True  # it reads a run-time value: not a number the config decides
        if within is None and not (fields and self.fallible(e)):
            return True  # nothing to check: no range, and a constant (folded) or arithmetic that cannot fail
        low, high, low_open = within or (None, None, False)
        try:
            value, used_config = self.number(e)
        except FoldError:
            return True  # reported where it was folded
        check = ir.ValueCheck(e, span, what, tuple(sorted(fields)), low, high, low_open)
        if value is not None and within is not None and not check.holds(value):
            where = " with the default config" if used_config else ""
            self.r.error("bad-value", f"{what} is {value}{where}; it must be {check.range_text()}", span,
                         hint="change the expression, or the defaults in `param:`" if where else None)
            return False
        if fields:
            text = self.spell(e)
            plain = isinstance(e, ir.Lit) or isinstance(e, ir.Ref) and e.kind == "config"  # the message shows it
            spelled = f"{what} = {text}" if text and f"`{text}`" != what and not plain else what
            # the config conditions it is computed under; a run-time one (`X exists`) is left out,
            # so the check is made whether or not the input comes
            when = tuple(g for g in self.guards if g is not None and self.config_sources(g) is not None)
            self.value_checks.append((ir.replace(check, what=spelled, when=when), self.initialising))
        return True

    def spell(self, e: ir.TExpr) -> str | None:
        """A number's expression in the spec's names (`0.02 / sqrt(2 * n_layer)`), from the IR:
        the notation's lowering leaves no source text of its own. None for anything else."""
        return self.printer.spell(e, number=True)

    def fallible(self, e: ir.TExpr) -> bool:
        """Whether computing `e` can fail for some config: arithmetic that can (a division by zero,
        a square root of a negative, an overflow, a rounding of inf: the op's `scalar` says so), in
        `e` or in a derived float it reads."""
        derived = {d.name: d for d in self.derived if d.dim is None}
        stack = [e]
        while stack:
            x = stack.pop()
            if isinstance(x, ir.Op) and _may_fail(x.op):
                return True
            if isinstance(x, ir.Ref) and x.name in derived:
                stack.append(derived[x.name].value)
            stack.extend(ir.children(x))
        return False

    def config_sources(self, e: ir.TExpr, on_entry: bool = False) -> set | None:
        """The config values `e` is computed from; None when it reads anything else (a run-time
        dim, a local, the loop variable). `on_entry`: also what forward knows on entry, the sizes
        its inputs give and whether an optional input is given (`X exists`)."""
        out: set = set()
        stack = [e]
        names = derived = None  # looked up on the first name: most numbers are literals
        while stack:
            x = stack.pop()
            if isinstance(x, ir.IsPresent) and on_entry:
                continue
            if isinstance(x, (ir.Ref, ir.DimVal)) and names is None:
                names, derived = self.config_names(), {d.name: d for d in self.derived}
                if on_entry:
                    names |= {d for d, (given_by, _) in self.runtime.items() if given_by}
            if isinstance(x, ir.Ref):
                if x.kind == "config" or x.kind == "dim" and x.name in names:
                    out.add(x.name)
                elif x.kind == "dim" and x.name in derived:
                    stack.append(derived[x.name].value)
                else:
                    return None
            elif isinstance(x, ir.DimVal):
                if not x.dim.symbols() <= names:
                    return None
                out |= x.dim.symbols()
            elif isinstance(x, (ir.Lit, ir.Op, ir.TCond)):  # (`X exists` is not a config value)
                stack.extend(ir.children(x))
            else:
                return None
        return out


def _may_fail(name: str) -> bool:
    """Whether the op's `scalar` fails for some numbers (registry.may_fail)."""
    op = all_ops().get(name)
    return op is not None and getattr(op.scalar, "may_fail", False)
