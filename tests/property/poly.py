"""Integer polynomials over dim names: the spec generator's own model of symbolic shapes.

Deliberately separate from snf/dims.py (the code under test): the generator decides what is
well typed with this, the checker with its own, and the run-time oracle settles disagreements.
"""

from __future__ import annotations

from itertools import product


class Poly:
    """sum of coef * (product of names); a monomial is a sorted tuple of names (with repeats)."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict | None = None):
        self.terms = {m: c for m, c in (terms or {}).items() if c}

    @staticmethod
    def of(x) -> "Poly":
        if isinstance(x, Poly):
            return x
        if isinstance(x, int):
            return Poly({(): x})
        return Poly({(x,): 1})

    def __add__(self, other) -> "Poly":
        other = Poly.of(other)
        out = dict(self.terms)
        for m, c in other.terms.items():
            out[m] = out.get(m, 0) + c
        return Poly(out)

    __radd__ = __add__

    def __neg__(self) -> "Poly":
        return Poly({m: -c for m, c in self.terms.items()})

    def __sub__(self, other) -> "Poly":
        return self + (-Poly.of(other))

    def __mul__(self, other) -> "Poly":
        other = Poly.of(other)
        out: dict = {}
        for (m1, c1), (m2, c2) in product(self.terms.items(), other.terms.items()):
            m = tuple(sorted(m1 + m2))
            out[m] = out.get(m, 0) + c1 * c2
        return Poly(out)

    __rmul__ = __mul__

    def __eq__(self, other) -> bool:
        return isinstance(other, (Poly, int, str)) and self.terms == Poly.of(other).terms

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.terms.items())))

    @property
    def const(self) -> int | None:
        if not self.terms:
            return 0
        if set(self.terms) == {()}:
            return self.terms[()]
        return None

    def names(self) -> set[str]:
        return {a for m in self.terms for a in m}

    def evaluate(self, env: dict) -> int:
        total = 0
        for m, c in self.terms.items():
            term = c
            for a in m:
                term *= env[a]
            total += term
        return total

    def minimum(self, lows: dict) -> int:
        """A lower bound, when every coefficient but the constant is positive (else -inf-ish)."""
        if any(c < 0 for m, c in self.terms.items() if m):
            return -10**9
        return self.evaluate(lows)

    def render(self) -> str:
        if not self.terms:
            return "0"
        order = sorted(self.terms.items(), key=lambda mc: (-len(mc[0]), mc[0]))
        parts = []
        for m, c in order:
            body = "*".join(m)
            if not m:
                text = str(abs(c))
            elif abs(c) == 1:
                text = body
            else:
                text = f"{abs(c)}*{body}"
            parts.append((c < 0, text))
        out = ("-" if parts[0][0] else "") + parts[0][1]
        for neg, text in parts[1:]:
            out += (" - " if neg else " + ") + text
        return out

    @property
    def is_sum(self) -> bool:
        return len(self.terms) > 1 or any(c < 0 for c in self.terms.values())

    def __repr__(self) -> str:
        return f"Poly({self.render()})"
