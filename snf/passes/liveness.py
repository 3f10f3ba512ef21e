"""Outputs on demand: dead-output elimination over the typed IR.

`live_statements(model, wanted)` is the set of statements an entry point needs to compute the
outputs in `wanted`: a statement is live when it binds or writes a name that a live statement
(or a wanted output) reads, found by a fixpoint over the whole body. It is flow-insensitive
(every binding of a live name is live), which keeps it simple and never drops a statement a
wanted output needs.

`plan_outputs` applies it to the entry points the generated module has: `forward` with and
without its caches (`use_cache`). A statement live only with the caches is emitted under
`if use_cache:`, so a training step builds no cache tensors. Nothing here is about caches as
such: any set of outputs can be asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import ir


@dataclass(frozen=True)
class OutputPlan:
    optional_outputs: frozenset  # outputs computed only when asked for (`use_cache`)
    only_when_asked: frozenset  # statements live only for those outputs

    def guarded(self, stmt) -> bool:
        return stmt in self.only_when_asked


def plan_outputs(model: ir.Model, on_demand: frozenset) -> OutputPlan:
    """`on_demand`: the outputs forward computes only when asked (the caches, from the cache plan)."""
    if not on_demand:
        return OutputPlan(frozenset(), frozenset())
    every = live_statements(model, {o.name for o in model.outputs})
    base = live_statements(model, {o.name for o in model.outputs} - set(on_demand))
    only = frozenset(s for s in every - base if not isinstance(s, (ir.Loop, ir.TIf)))
    return OutputPlan(frozenset(on_demand), only)


def live_statements(model: ir.Model, wanted: set) -> frozenset:
    stmts = list(_flatten(model.body, ()))
    needed = set(wanted)
    changed = True
    while changed:
        changed = False
        for s, tests in stmts:
            if _writes(s) & needed:
                new = (_reads(s) | _refs(tests)) - needed
                if new:
                    needed |= new
                    changed = True
    live = {s for s, _ in stmts if _writes(s) & needed}
    # a compound statement is live when anything in it is
    for s, _ in stmts:
        if isinstance(s, (ir.Loop, ir.TIf)) and any(t in live for t in ir.walk_stmts(_body(s))):
            live.add(s)
    return frozenset(live)


def _flatten(stmts, tests: tuple):
    """Every statement with the tests of the ifs around it (their reads are needed where it is)."""
    for s in stmts:
        yield s, tests
        if isinstance(s, ir.TIf):
            yield from _flatten(s.body + s.orelse, tests + (s.test,))
        elif isinstance(s, ir.Loop):
            yield from _flatten(s.body, tests)


def _body(s):
    return s.body + (s.orelse if isinstance(s, ir.TIf) else ())


def _writes(s) -> set:
    if isinstance(s, (ir.Bind, ir.SetItem)):
        return {s.name}
    if isinstance(s, ir.FusedLinear):
        return set(s.targets)
    return set()


def _refs(exprs) -> set:
    out, stack = set(), list(exprs)
    while stack:
        e = stack.pop()
        if isinstance(e, (ir.Ref, ir.IsPresent)):
            out.add(e.name)
        stack.extend(ir.children(e))
    return out


def _reads(s) -> set:
    """Names a simple statement reads; a write into a tensor also reads the tensor."""
    if isinstance(s, (ir.Loop, ir.TIf)):
        return set()
    out = {e.name for e in ir.walk_exprs((s,)) if isinstance(e, (ir.Ref, ir.IsPresent))}
    if isinstance(s, ir.SetItem):
        out.add(s.name)
    return out
