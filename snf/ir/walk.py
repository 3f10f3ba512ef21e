"""Walking the typed IR, the one traversal every pass uses: statements (with the loop and the if
tests around them), a statement's own expressions, every sub-expression, what a statement reads
and writes, and rewriting an expression."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterable, Iterator, NamedTuple

from ..dims import Dim
from .typed import (Bind, FusedLinear, IsPresent, Loop, Op, Ref, ScalarT, SetItem, TCond, TensorT, TIf, TList,
                    TSlice)


class Site(NamedTuple):
    """A statement where it is: the innermost loop around it and the tests of the ifs around it
    (outermost first)."""
    stmt: object
    loop: Loop | None
    tests: tuple


def sites(stmts, loop: Loop | None = None, tests: tuple = ()) -> Iterator[Site]:
    """Every statement, nested ones included, in program order (a loop's body once)."""
    for s in stmts:
        yield Site(s, loop, tests)
        if isinstance(s, Loop):
            yield from sites(s.body, s, tests)
        elif isinstance(s, TIf):
            yield from sites(s.body + s.orelse, loop, tests + (s.test,))


def walk_stmts(stmts) -> list:
    """Every statement, nested ones included, in order."""
    return [site.stmt for site in sites(stmts)]


def own_exprs(stmt) -> list:
    """The top expressions of the statement itself, not of the statements nested in it: an if's
    test; a loop has none."""
    if isinstance(stmt, TIf):
        return [stmt.test]
    if isinstance(stmt, Loop):
        return []
    tops = [e for e in (getattr(stmt, "value", None), getattr(stmt, "test", None), getattr(stmt, "input", None))
            if e is not None]
    return tops + list(getattr(stmt, "index", None) or ())


def subexprs(roots: Iterable) -> Iterator:
    """Every expression under `roots`, the roots included (each node once per occurrence)."""
    stack = list(roots)
    while stack:
        e = stack.pop()
        yield e
        stack.extend(children(e))


def walk_exprs(stmts) -> Iterator:
    """Every typed expression in a body, nested statements and sub-expressions included."""
    return subexprs(e for s in walk_stmts(stmts) for e in own_exprs(s))


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


def contains(e, node) -> bool:
    """Whether the node `node` (by identity) is `e` or under it."""
    return any(x is node for x in subexprs((e,)))


def names_read(exprs: Iterable) -> set:
    """The names the expressions read (a presence test reads its input)."""
    return {e.name for e in subexprs(exprs) if isinstance(e, (Ref, IsPresent))}


def reads(stmt) -> set:
    """The names a statement's own expressions read; a write into a tensor also reads the tensor.
    A loop or an if reads nothing itself here: its test and body are sites of their own."""
    if isinstance(stmt, (Loop, TIf)):
        return set()
    out = names_read(own_exprs(stmt))
    if isinstance(stmt, SetItem):
        out.add(stmt.name)
    return out


def writes(stmt) -> set:
    """The names a statement binds or writes into."""
    if isinstance(stmt, (Bind, SetItem)):
        return {stmt.name}
    if isinstance(stmt, FusedLinear):
        return set(stmt.targets)
    return set()


def rewrite(e, fn: Callable):
    """`e` rebuilt bottom-up: each node's children first, then `fn(node)` (the node itself where
    `fn` gives None). Nodes whose children did not change are kept, so identity survives."""
    if isinstance(e, Op):
        args = tuple((n, rewrite(a, fn)) for n, a in e.args)
        if any(a is not b for (_, a), (_, b) in zip(args, e.args)):
            e = replace(e, args=args)
    elif isinstance(e, TCond):
        parts = {k: rewrite(getattr(e, k), fn) for k in ("test", "body", "orelse")}
        if any(parts[k] is not getattr(e, k) for k in parts):
            e = replace(e, **parts)
    elif isinstance(e, TList):
        items = tuple(rewrite(i, fn) for i in e.items)
        if any(a is not b for a, b in zip(items, e.items)):
            e = replace(e, items=items)
    out = fn(e)
    return e if out is None else out


def rename_var(e, old: str, new: str):
    """`e` with the int variable `old` called `new` (a per-layer declaration's `l` as the loop's
    variable): in names, and in the dims of its values and types."""
    def ren(node):
        changes = {}
        if isinstance(node, Ref) and node.name == old:
            changes["name"] = new
        if isinstance(getattr(node, "dim", None), Dim):
            changes["dim"] = node.dim.subs({old: Dim.sym(new)})
        ty = getattr(node, "ty", None)
        if isinstance(ty, ScalarT) and ty.dim is not None and old in ty.dim.symbols():
            changes["ty"] = replace(ty, dim=ty.dim.subs({old: Dim.sym(new)}))
        return replace(node, **changes) if changes else None
    return rewrite(e, ren)


def index_rows(body) -> tuple:
    """(input, the distinct row counts of the tables it indexes directly) for each integer input a
    `gather(table, input)` reads: an embedding's ids must be rows of each (ir.Model.index_rows)."""
    out: dict = {}
    for e in walk_exprs(body):
        if isinstance(e, Op) and e.op == "gather":
            index, table = e.arg("index"), e.arg("table")
            if isinstance(index, Ref) and index.kind == "input" and isinstance(table.ty, TensorT):
                rows = out.setdefault(index.name, [])
                if all(table.ty.shape[0] != r for r in rows):
                    rows.append(table.ty.shape[0])
    return tuple((k, tuple(v)) for k, v in out.items())
