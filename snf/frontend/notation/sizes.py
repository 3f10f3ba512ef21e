"""Sizes the text leaves open: unification variables, `whole == heads * part` relations, and how a
solved size becomes a DSL expression again."""

from __future__ import annotations

from dataclasses import dataclass

from ... import ir
from ...diagnostics import Reporter
from ...dims import Dim, FloorDiv, equal, show_dim
from ...source import Span


class Var:
    """An unknown size. `origin` says where it came from, for defaults and messages."""

    def __init__(self, n: int, origin: "Origin"):
        self.n = n
        self.parent: Var | None = None
        self.value: Dim | None = None
        self.origin = origin
        self.hidden = False  # flows into an activation: an MLP's hidden width

    def __repr__(self) -> str:
        return f"?{self.n}"


@dataclass
class Origin:
    kind: str  # linear-out | table-rows | table-width | free
    span: Span
    text: str  # the notation text of the call, for messages
    in_dim: "Dim | Var | None" = None


@dataclass
class Rel:
    """`whole == heads * part`, from splitting into heads."""

    whole: object
    heads: Dim
    part: object
    span: Span


class Sizes:
    def __init__(self, r: Reporter):
        self.r = r
        self.vars: list[Var] = []
        self.rels: list[Rel] = []

    def var(self, origin: Origin) -> Var:
        v = Var(len(self.vars), origin)
        self.vars.append(v)
        return v

    def find(self, d):
        while isinstance(d, Var):
            if d.value is not None:
                return d.value
            if d.parent is None:
                return d
            d = d.parent
        return d

    def unify(self, a, b) -> bool:
        a, b = self.find(a), self.find(b)
        if a is b:
            return True
        if isinstance(a, Var) and isinstance(b, Var):
            first, second = (a, b) if a.n < b.n else (b, a)
            second.parent = first
            first.hidden = first.hidden or second.hidden
            return True
        if isinstance(a, Var):
            a.value = b
            return True
        if isinstance(b, Var):
            b.value = a
            return True
        return equal(a, b)[0]

    def propagate(self) -> bool:
        """Solve `whole == heads * part` where one side is known; False on a contradiction."""
        ok, changed = True, True
        while changed:
            changed = False
            for rel in self.rels:
                whole, part = self.find(rel.whole), self.find(rel.part)
                if isinstance(whole, Dim) and isinstance(part, Var):
                    self.unify(part, whole // rel.heads)
                    changed = True
                elif isinstance(part, Dim) and isinstance(whole, Var):
                    self.unify(whole, times(rel.heads, part))
                    changed = True
                elif isinstance(whole, Dim) and isinstance(part, Dim) and not equal(whole, times(rel.heads, part))[0]:
                    self.r.error("shape-mismatch", f"{show_dim(whole)} cannot be split into {show_dim(rel.heads)} "
                                 f"heads of {show_dim(part)}", rel.span)
                    self.rels.remove(rel)
                    ok = False
                    break
        return ok

    def show(self, d) -> str:
        d = self.find(d)
        return "?" if isinstance(d, Var) else show_dim(d)

    def show_shape(self, shape) -> str:
        return "[" + ", ".join(self.show(d) for d in shape) + "]"


def times(heads: Dim, part: Dim) -> Dim:
    """heads * part, reading `heads * (X // heads)` as X (split into heads, then merged)."""
    if len(part.terms) == 1:
        mono, coeff = part.terms[0]
        if coeff == 1 and len(mono) == 1 and mono[0][1] == 1 and isinstance(mono[0][0], FloorDiv) \
                and mono[0][0].den == heads:
            return mono[0][0].num
    return heads * part


def dim_to_expr(d: Dim, span: Span) -> ir.Expr:
    """A symbolic size as a DSL expression, every node at `span`."""
    def atom(a) -> ir.Expr:
        if isinstance(a, str):
            return ir.Name(a, span)
        return ir.BinOp("//", dim_to_expr(a.num, span), dim_to_expr(a.den, span), span)

    out = None
    for mono, coeff in d.terms:
        factors = [atom(a) for a, e in mono for _ in range(e)]
        mag = abs(coeff)
        term = None
        if mag != 1 or not factors:
            term = ir.Num(int(mag), span)
        for f in factors:
            term = f if term is None else ir.BinOp("*", term, f, span)
        if out is None:
            out = ir.Unary("-", term, span) if coeff < 0 else term
        else:
            out = ir.BinOp("-" if coeff < 0 else "+", out, term, span)
    return out if out is not None else ir.Num(0, span)


@dataclass(frozen=True)
class Hole:
    """A size in an emitted expression that is known only after unification."""

    size: object
    span: Span
