"""Symbolic dimensions in canonical form.

A `Dim` is a polynomial with integer coefficients over atoms; an atom is a symbol (a
parameter such as `n_embd`, or a runtime dim such as `B`) or a floor division that could not
be simplified (`n_embd // n_head`). Equal polynomials have equal representations, so shape
equality is `==` on the canonical form.

`equal(a, b)` also tries *exact division*: it reads every `p // q` as `p / q` and compares
again. If that makes the two sides agree, they agree exactly when each such `q` divides its
`p`, and those divisibility conditions are returned as constraints (for example `D % H == 0`
from reshaping `[B, T, D]` to `[B, T, H, D // H]`).

    >>> D, H = Dim.sym("D"), Dim.sym("H")
    >>> equal(H * (D // H), D)
    (True, (Divides(num=Dim(D), den=Dim(H)),))
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Callable, Iterable, Mapping, Union

# Caps that keep hostile specs from building enormous numbers or expressions.
MAX_INT = 2**62
MAX_TERMS = 64
_NO_NAMES: Mapping = MappingProxyType({})


class DimError(ValueError):
    """A dim expression is out of range (huge numbers, division by zero, too many terms)."""


@dataclass(frozen=True, order=True)
class FloorDiv:
    num: "Dim"
    den: "Dim"


Atom = Union[str, FloorDiv]
Monomial = tuple  # tuple[tuple[Atom, int], ...], sorted by _atom_key


def _atom_key(a: Atom) -> tuple:
    return (0, a, "") if isinstance(a, str) else (1, a.num.key(), a.den.key())


def _mono_key(m: Monomial) -> tuple:
    return tuple((_atom_key(a), e) for a, e in m)


@functools.lru_cache(maxsize=4096)
def _mono_order(m: Monomial) -> tuple:
    """Where a monomial goes in a Dim's terms: higher degree first, then by its atoms."""
    return -sum(e for _, e in m), _mono_key(m)


def _term_order(term: tuple) -> tuple:
    return _mono_order(term[0])


_set = object.__setattr__  # Dim's own __setattr__ refuses


def _mono_mul(m1: Monomial, m2: Monomial) -> Monomial:
    powers: dict = {}
    for a, e in m1 + m2:
        powers[a] = powers.get(a, 0) + e
    return tuple(sorted(((a, e) for a, e in powers.items() if e), key=lambda t: _atom_key(t[0])))


class Dim:
    """An immutable, hashable, canonical polynomial over atoms."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms: dict | Iterable = ()):
        clean: dict = {}
        for mono, coeff in terms.items() if isinstance(terms, dict) else terms:
            if coeff:
                clean[mono] = clean.get(mono, 0) + coeff
        items = [(m, c) for m, c in clean.items() if c]
        if len(items) > MAX_TERMS:
            raise DimError("dimension expression is too large")
        for _, c in items:
            if abs(c) > MAX_INT:
                raise DimError("dimension value is too large")
        if len(items) > 1:
            items.sort(key=_term_order)
        terms = tuple((m, c if isinstance(c, int) or c.denominator != 1 else int(c)) for m, c in items)
        _set(self, "terms", terms)
        _set(self, "_hash", hash(terms))

    def __setattr__(self, *_):
        raise AttributeError("Dim is immutable")

    # --- construction ---
    @staticmethod
    def const(n: int | Fraction) -> "Dim":
        return Dim({(): n})

    @staticmethod
    def sym(name: str) -> "Dim":
        return Dim({((name, 1),): 1})

    @staticmethod
    def _atom(a: Atom) -> "Dim":
        return Dim({((a, 1),): 1})

    # --- inspection ---
    def key(self) -> tuple:
        return tuple((_mono_key(m), (c.numerator, c.denominator) if isinstance(c, Fraction) else (c, 1))
                     for m, c in self.terms)

    def __eq__(self, other) -> bool:
        return isinstance(other, Dim) and self.terms == other.terms

    def __lt__(self, other: "Dim") -> bool:
        return self.key() < other.key()

    def __hash__(self) -> int:
        return self._hash

    @property
    def is_const(self) -> bool:
        return all(m == () for m, _ in self.terms)

    @property
    def value(self) -> int | None:
        """The integer value of a constant dim, else None."""
        if not self.terms:
            return 0
        if self.is_const:
            c = self.terms[0][1]
            return int(c) if not isinstance(c, Fraction) or c.denominator == 1 else None
        return None

    def atoms(self) -> set:
        return {a for m, _ in self.terms for a, _ in m}

    def symbols(self) -> set[str]:
        out: set[str] = set()
        for a in self.atoms():
            if isinstance(a, str):
                out.add(a)
            else:
                out |= a.num.symbols() | a.den.symbols()
        return out

    def as_symbol(self) -> str | None:
        """The name, when this dim is exactly one symbol."""
        if len(self.terms) == 1:
            m, c = self.terms[0]
            if c == 1 and len(m) == 1 and m[0][1] == 1 and isinstance(m[0][0], str):
                return m[0][0]
        return None

    # --- arithmetic ---
    def __add__(self, other) -> "Dim":
        other = _lift(other)
        if not other.terms:
            return self
        return Dim(self.terms + other.terms)

    __radd__ = __add__

    def __neg__(self) -> "Dim":
        return Dim([(m, -c) for m, c in self.terms])

    def __sub__(self, other) -> "Dim":
        other = _lift(other)
        if not other.terms:
            return self
        return Dim(self.terms + tuple((m, -c) for m, c in other.terms))

    def __rsub__(self, other) -> "Dim":
        return _lift(other) - self

    def __mul__(self, other) -> "Dim":
        other = _lift(other)
        out: dict = {}
        for m1, c1 in self.terms:
            for m2, c2 in other.terms:
                m = _mono_mul(m1, m2)
                out[m] = out.get(m, 0) + c1 * c2
        return Dim(out)

    __rmul__ = __mul__

    def __floordiv__(self, other) -> "Dim":
        other = _lift(other)
        if other.value == 0:
            raise DimError("division by zero in a dimension")
        if self.value is not None and other.value is not None:
            return Dim.const(self.value // other.value)
        if other.value == 1:
            return self
        if self == other:
            return Dim.const(1)
        # (4*D) // 2 -> 2*D when every coefficient divides.
        if other.value is not None and all(isinstance(c, int) and c % other.value == 0 for _, c in self.terms):
            return Dim([(m, c // other.value) for m, c in self.terms])
        return Dim._atom(FloorDiv(self, other))

    def __mod__(self, other) -> "Dim":
        other = _lift(other)
        return self - other * (self // other)

    # --- exact-division form and substitution ---
    def exact(self) -> tuple["Dim", tuple["Divides", ...]]:
        """Read each `p // q` (q a single term) as `p * q**-1`; return the divisibility assumed."""
        conds: list[Divides] = []

        def atom(a: Atom) -> Dim:
            if isinstance(a, str):
                return Dim._atom(a)
            num, c1 = a.num.exact()
            den, c2 = a.den.exact()
            conds.extend(c1 + c2)
            if len(den.terms) != 1:
                return Dim._atom(FloorDiv(num, den))
            conds.append(Divides(a.num, a.den))
            (m, c), = den.terms
            inverse = Dim({tuple((x, -e) for x, e in m): Fraction(1, 1) / c})
            return num * inverse

        return self._map_atoms(atom), tuple(dict.fromkeys(conds))

    def subs(self, env: dict[str, "Dim"]) -> "Dim":
        def atom(a: Atom) -> Dim:
            if isinstance(a, str):
                return env.get(a, Dim._atom(a))
            return a.num.subs(env) // a.den.subs(env)
        return self._map_atoms(atom)

    def _map_atoms(self, fn: Callable[[Atom], "Dim"]) -> "Dim":
        total = Dim()
        for mono, coeff in self.terms:
            term = Dim.const(coeff)
            for a, e in mono:
                base = fn(a)
                if e < 0:
                    # only produced by exact(); keep the power as is.
                    term = term * Dim({((a, e),): 1}) if base == Dim._atom(a) else term * _inverse_pow(base, -e)
                else:
                    for _ in range(e):
                        term = term * base
            total = total + term
        return total

    def evaluate(self, env: dict[str, int]) -> int:
        total = Fraction(0)
        for mono, coeff in self.terms:
            term = Fraction(coeff)
            for a, e in mono:
                v = env[a] if isinstance(a, str) else _floordiv_eval(a, env)
                term *= Fraction(v) ** e
            total += term
        if total.denominator != 1:
            raise DimError("dimension is not an integer")
        return int(total)

    # --- printing ---
    def render(self, atom_str: Callable[[Atom], str] | None = None, mul: str = "*") -> str:
        """Text form; `atom_str` maps atoms to text (spec names, or code)."""
        atom_str = atom_str or default_atom_str
        if not self.terms:
            return "0"
        parts: list[tuple[int, str]] = []
        for mono, coeff in self.terms:
            factors = []
            for a, e in mono:
                s = atom_str(a)
                factors.extend([s] * abs(e) if e > 0 else [f"1/{s}"] * abs(e))
            sign = -1 if coeff < 0 else 1
            mag = abs(coeff)
            if not factors:
                text = str(mag)
            elif mag == 1:
                text = mul.join(factors)
            else:
                text = f"{mag}{mul}" + mul.join(factors)
            parts.append((sign, text))
        out = ("-" if parts[0][0] < 0 else "") + parts[0][1]
        for sign, text in parts[1:]:
            out += (" - " if sign < 0 else " + ") + text
        return out

    def __str__(self) -> str:
        return self.render()

    def __repr__(self) -> str:
        return f"Dim({self})"


@dataclass(frozen=True)
class Divides:
    """The constraint `num % den == 0`."""

    num: Dim
    den: Dim

    def __str__(self) -> str:
        return f"{_paren(self.num.render())} % {_paren(self.den.render())} == 0"


def show_dim(d: Dim, display: Mapping = _NO_NAMES) -> str:
    """`d` as a message or comment shows it: a dim or atom the spec names (`display`, e.g.
    `head_dim` for `n_embd // n_head`) by that name, the rest as a polynomial."""
    if isinstance(d, Dim) and d in display:
        return display[d]

    def atom(a: Atom) -> str:
        if a in display:
            return display[a]
        return a if isinstance(a, str) else f"({show_dim(a.num, display)} // {show_dim(a.den, display)})"
    return d.render(atom)


def show_shape(shape: Iterable[Dim], display: Mapping = _NO_NAMES) -> str:
    """A shape as `[B, T, 4*n_embd]`."""
    return "[" + ", ".join(show_dim(d, display) for d in shape) + "]"


def default_atom_str(a: Atom) -> str:
    if isinstance(a, str):
        return a
    return f"({_paren(a.num.render())} // {_paren(a.den.render())})"


def _paren(s: str) -> str:
    return s if s.replace("_", "").isalnum() else f"({s})"


def _lift(x) -> Dim:
    if isinstance(x, Dim):
        return x
    if isinstance(x, int):
        return Dim.const(x)
    raise TypeError(f"not a dim: {x!r}")


def _inverse_pow(base: Dim, e: int) -> Dim:
    if len(base.terms) != 1:
        raise DimError("cannot invert a sum")
    (m, c), = base.terms
    return Dim({tuple((a, -p * e) for a, p in m): Fraction(1, 1) / (Fraction(c) ** e)})


def _floordiv_eval(a: FloorDiv, env: dict[str, int]) -> int:
    den = a.den.evaluate(env)
    if den == 0:
        raise DimError("division by zero in a dimension")
    return a.num.evaluate(env) // den


def equal(a: Dim, b: Dim) -> tuple[bool, tuple[Divides, ...]]:
    """Whether a == b for all values of the symbols, and the divisibility that needs."""
    if a == b:
        return True, ()
    ea, ca = a.exact()
    eb, cb = b.exact()
    if ea == eb:
        return True, tuple(dict.fromkeys(ca + cb))
    return False, ()
