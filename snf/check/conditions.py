"""The conditions a check is made under (`ir.Check.when`, `ir.ValueCheck.when`,
`ir.Constraint.when`): an expression compared without its spans, and each check kept once,
under the fewest conditions, where it arose in several places."""

from __future__ import annotations

from .. import ir
from ..dims import Dim
from ..ir import BOOL


def expr_key(e, rename: dict | None = None):
    """`e` without its spans: one check for a number written twice (`std=0.02 / sqrt(2 * L)`).
    `rename` maps names to others (a per-layer declaration's `l` to the loop's variable)."""
    if isinstance(e, ir.Op):
        return (e.op,) + tuple((n, expr_key(a, rename)) for n, a in e.args)
    if isinstance(e, ir.TCond):
        return ("if", expr_key(e.test, rename), expr_key(e.body, rename), expr_key(e.orelse, rename))
    if isinstance(e, ir.Ref):
        return ("ref", (rename or {}).get(e.name, e.name))
    if isinstance(e, ir.DimVal):
        return ("dim", e.dim.subs({k: Dim.sym(v) for k, v in rename.items()}) if rename else e.dim)
    if isinstance(e, ir.Lit):
        return ("lit", type(e.value).__name__, e.value)
    if isinstance(e, ir.IsPresent):
        return ("exists", e.name)
    return ("?", id(e))


def conjuncts(test: ir.TExpr) -> list:
    """`a and b and c` as [a, b, c]."""
    if isinstance(test, ir.Op) and test.op == "and":
        return conjuncts(test.arg("a")) + conjuncts(test.arg("b"))
    return [test]


def fewest(checks, key) -> list:
    """One check per `key(check)`, under the fewest conditions: one made wherever another is
    (its conditions a subset of the other's) replaces it, and those left are one check under
    the conditions they share and the `or` of the rest (`merged`). In the order they arose."""
    out: dict = {}
    for check in checks:
        when = {expr_key(w) for w in check.when}
        kept = out.setdefault(key(check), [])
        if any({expr_key(w) for w in k.when} <= when for k in kept):
            continue  # made already, under conditions this one implies
        kept[:] = [k for k in kept if not when <= {expr_key(w) for w in k.when}] + [check]
    return [merged(kept) for kept in out.values()]


def merged(checks: list):
    """One check made under several sets of conditions (`base` of each `rope` in a chain of
    `if rope_scaling == k`): under the conditions they share, and the `or` of the rest."""
    first = checks[0]
    if len(checks) == 1:
        return first
    shared = [w for w in first.when if all(expr_key(w) in {expr_key(v) for v in c.when} for c in checks[1:])]
    common = {expr_key(w) for w in shared}

    def joined(op: str, parts: list) -> ir.TExpr:
        out = parts[0]
        for part in parts[1:]:
            out = ir.Op(op, (("a", out), ("b", part)), BOOL)
        return out
    rest = [[w for w in c.when if expr_key(w) not in common] for c in checks]
    alternatives = [joined("and", r) for r in rest if r]
    keys = {expr_key(a) for a in alternatives}
    if len(alternatives) < len(rest) or any(("not", ("a", k)) in keys for k in keys):
        return ir.replace(first, when=tuple(shared))  # one alternative always holds: `c or not c`
    return ir.replace(first, when=tuple(shared) + (joined("or", alternatives),))
