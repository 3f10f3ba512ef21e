"""Walking the typed IR: every statement, every expression, an expression's children."""

from __future__ import annotations

from .typed import Loop, Op, TCond, TIf, TList, TSlice

def walk_stmts(stmts) -> "list":
    """Every statement, nested ones included, in order."""
    out = []
    for s in stmts:
        out.append(s)
        if isinstance(s, TIf):
            out += walk_stmts(s.body) + walk_stmts(s.orelse)
        elif isinstance(s, Loop):
            out += walk_stmts(s.body)
    return out


def walk_exprs(stmts):
    """Every typed expression in a body, nested statements and sub-expressions included."""
    stack = []
    for s in walk_stmts(stmts):
        stack += [e for e in (getattr(s, "value", None), getattr(s, "test", None), getattr(s, "input", None))
                  if e is not None]
        stack += list(getattr(s, "index", None) or ())
    while stack:
        e = stack.pop()
        yield e
        stack.extend(children(e))


def children(e) -> list:
    """Direct sub-expressions of a typed expression."""
    if isinstance(e, Op):
        return [a for _, a in e.args]
    if isinstance(e, TCond):
        return [e.test, e.body, e.orelse]
    if isinstance(e, TList):
        return list(e.items)
    if isinstance(e, TSlice):
        return [x for x in (e.lo, e.hi) if x is not None]
    return []
