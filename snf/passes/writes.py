"""The write plan: which indexed writes (`y[i] = v`) the generated code may do in place.

In the spec a write makes a new value: `let v = y[0]` read before `y[0] = x` keeps the old
row, and `let a = x; a[0] = ...` leaves the input `x` alone. torch indexing gives views and
writes in place, so generated code may write in place only where no other value can see the
change: the written tensor is one the spec made fresh (`full`, or any op that is not a view of
an argument, never returns one unchanged, as dropout does outside training, and whose result
autograd does not keep for the backward, as softmax's), it is never re-bound, and nothing reads it
before the write (a read could be a view that the write would change). Every other write copies the tensor first (`_assign`).
"""

from __future__ import annotations

from .. import ir
from ..ops import all_ops


def plan_writes(model: ir.Model) -> frozenset:
    """The SetItem statements that may write in place."""
    order = list(ir.sites(model.body))  # a loop body once: a read in any layer counts as before a later write
    at = {id(site.stmt): i for i, site in enumerate(order)}
    loop_of = {id(site.stmt): site.loop for site in order}
    by_name: dict[str, list] = {}
    for site in order:
        if isinstance(site.stmt, ir.SetItem):
            by_name.setdefault(site.stmt.name, []).append(site.stmt)
    safe = set()
    for name, writes in by_name.items():
        binds = [x.stmt for x in order if isinstance(x.stmt, ir.Bind) and x.stmt.name == name]
        if len(binds) != 1 or not binds[0].let or not fresh(binds[0].value):
            continue
        if any(name in ir.names_read(ir.own_exprs(w)) for w in writes):
            continue  # `y[1:] = y[:-1]` reads the old y: torch would overlap the two
        start, last = at[id(binds[0])], max(at[id(w)] for w in writes)
        if any(at[id(w)] < start for w in writes):
            continue
        others = [x.stmt for x in order if not (isinstance(x.stmt, ir.SetItem) and x.stmt.name == name)
                  and name in _reads(x.stmt)]
        # a read before the last write could be a view the write changes; in a loop, a read
        # anywhere in the body could be one carried to the next layer's write
        if any(start < at[id(s)] < last for s in others):
            continue
        in_loops = {id(loop_of[id(w)]) for w in writes if loop_of[id(w)] is not None}
        if any(id(loop_of[id(s)]) in in_loops for s in others if loop_of[id(s)] is not None):
            continue
        safe.update(writes)
    return frozenset(safe)


def _reads(stmt) -> set:
    """What a statement reads where it is: its own expressions (an if its test, a loop nothing)."""
    return ir.names_read(ir.own_exprs(stmt))


def fresh(e) -> bool:
    """Whether the value of `e` is a tensor of its own, not an alias or a view of another."""
    if isinstance(e, ir.TCond):
        return fresh(e.body) and fresh(e.orelse)
    if isinstance(e, ir.Op):
        op = all_ops().get(e.op)
        return op is not None and not op.view and not op.passthrough and not op.keeps_result
    return False
