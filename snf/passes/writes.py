"""The write plan: which indexed writes (`y[i] = v`) the generated code may do in place.

In the spec a write makes a new value: `let v = y[0]` read before `y[0] = x` keeps the old
row, and `let a = x; a[0] = ...` leaves the input `x` alone. torch indexing gives views and
writes in place, so generated code may write in place only where no other value can see the
change: the written tensor is one the spec made fresh (`full`, or any op that is not a view of
an argument and never returns one unchanged, as dropout does outside training), it is never re-bound, and nothing reads it before the write (a read could be a
view that the write would change). Every other write copies the tensor first (`_assign`).
"""

from __future__ import annotations

from .. import ir
from ..ops import all_ops


def plan_writes(model: ir.Model) -> frozenset:
    """The SetItem statements that may write in place."""
    order = list(_in_order(model.body))
    loops = {id(t): s for s in ir.walk_stmts(model.body) if isinstance(s, ir.Loop) for t in ir.walk_stmts(s.body)}
    safe = set()
    for name in {s.name for s in order if isinstance(s, ir.SetItem)}:
        binds = [s for s in order if isinstance(s, ir.Bind) and s.name == name]
        if len(binds) != 1 or not binds[0].let or not _fresh(binds[0].value):
            continue
        writes = [s for s in order if isinstance(s, ir.SetItem) and s.name == name]
        if any(isinstance(e, ir.Ref) and e.name == name for w in writes for e in _walk((w.value, *w.index))):
            continue  # `y[1:] = y[:-1]` reads the old y: torch would overlap the two
        start, last = order.index(binds[0]), max(order.index(w) for w in writes)
        if any(order.index(w) < start for w in writes):
            continue
        others = [s for s in order if not (isinstance(s, ir.SetItem) and s.name == name) and _reads(s, name)]
        # a read before the last write could be a view the write changes; in a loop, a read
        # anywhere in the body could be one carried to the next layer's write
        if any(start < order.index(s) < last for s in others):
            continue
        in_loops = {id(loops[id(w)]) for w in writes if id(w) in loops}
        if any(id(loops.get(id(s))) in in_loops for s in others if id(s) in loops):
            continue
        safe.update(writes)
    return frozenset(safe)


def _in_order(stmts):
    """Statements in program order, nested ones included (a loop body once: a read in any layer
    counts as before a write in a later one)."""
    for s in stmts:
        yield s
        if isinstance(s, ir.Loop):
            yield from _in_order(s.body)
        elif isinstance(s, ir.TIf):
            yield from _in_order(s.body + s.orelse)


def _reads(stmt, name: str) -> bool:
    if isinstance(stmt, (ir.Loop, ir.TIf)):
        exprs = [stmt.test] if isinstance(stmt, ir.TIf) else []
    else:
        exprs = None
    found = ir.walk_exprs((stmt,)) if exprs is None else _walk(exprs)
    return any(isinstance(e, ir.Ref) and e.name == name for e in found)


def _walk(exprs):
    stack = list(exprs)
    while stack:
        e = stack.pop()
        yield e
        stack.extend(ir.children(e))


def _fresh(e) -> bool:
    """Whether the value of `e` is a tensor of its own, not an alias or a view of another."""
    if isinstance(e, ir.TCond):
        return _fresh(e.body) and _fresh(e.orelse)
    if isinstance(e, ir.Op):
        op = all_ops().get(e.op)
        return op is not None and not op.view and not op.passthrough
    return False
