"""Outputs on demand: dead-output elimination over the typed IR.

`live_statements(model, wanted)` is the set of statements an entry point needs to compute the
outputs in `wanted`: a statement is live when it binds or writes a name that a live statement
(or a wanted output) reads, found by a fixpoint over the whole body. It is flow-insensitive
(every binding of a live name is live), which keeps it simple and never drops a statement a
wanted output needs.

`plan_outputs` applies it to the entry points the generated module has. Each `Demand` is a
group of outputs `forward` computes only when a keyword argument asks for them:

- `use_cache`: the caches (from the cache plan); by default on unless the model is training;
- `return_logits`: the logits, when the fused-loss plan can compute the loss without them; by
  default on unless the model is training with the loss's targets (as transformers does with
  Liger's fused loss), where the loss runs fused instead.

A statement live only for a demand's outputs is emitted under `if use_cache:` (or
`return_logits`); one with a replacement (the loss, fused) has it emitted under `else:`. So a
training step builds no cache tensors, and no logits when it computes its loss. Nothing here is
about caches or logits as such: any group of outputs can be asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import ir


@dataclass(frozen=True)
class Demand:
    """Outputs computed only when forward's keyword argument `flag` asks for them."""

    flag: str  # use_cache | return_logits
    outputs: frozenset
    statements: frozenset  # statements live only for these outputs
    names: frozenset  # the values only those statements compute: None when the flag is off
    instead: tuple = ()  # (statement, what runs in its place when they are not asked for)
    # by default the flag is on, except while training (with these inputs given, when there are any)
    off_in_training_with: tuple[str, ...] = ()

    def replacement(self, stmt):
        return next((new for old, new in self.instead if old is stmt), None)


@dataclass(frozen=True)
class OutputPlan:
    demands: tuple[Demand, ...] = ()

    def demand(self, stmt) -> Demand | None:
        """The demand whose flag guards `stmt`, if any."""
        return next((d for d in self.demands if stmt in d.statements), None)

    def guarded(self, stmt) -> bool:
        return self.demand(stmt) is not None

    def maybe_absent(self, name: str) -> bool:
        """Whether a value is computed only when some demand's flag asks for it."""
        return any(name in d.names for d in self.demands)

    @property
    def optional_outputs(self) -> frozenset:
        return frozenset().union(*(d.outputs for d in self.demands))

    def only_for(self, flag: str) -> frozenset:
        """The statements the demand of `flag` guards (none where there is no such demand)."""
        return frozenset().union(*(d.statements for d in self.demands if d.flag == flag))


def plan_outputs(model: ir.Model, caches: frozenset, loss=None) -> OutputPlan:
    """`caches`: the cache outputs (from the cache plan); `loss`: the fused-loss plan
    (`fused_loss.FusedLoss`), if any."""
    outputs = {o.name for o in model.outputs}
    every = live_statements(model, outputs)
    demands = []
    if caches:
        demands.append(Demand("use_cache", frozenset(caches),
                              *_only(model, every, live_statements(model, outputs - caches))))
    if loss is not None:
        fused = tuple(loss.fused if s is loss.loss else s for s in model.body)
        base = live_statements(model, outputs - {loss.logits}, fused)
        demands.append(Demand("return_logits", frozenset({loss.logits}), *_only(model, every, base),
                              ((loss.loss, loss.fused),), loss.targets))
    return OutputPlan(tuple(demands))


def _only(model: ir.Model, every: frozenset, base: frozenset) -> tuple[frozenset, frozenset]:
    """The statements live for a demand's outputs alone, and the dead ones (no output needs them)
    that read a value only those define (without the flag that value does not exist: a write
    into it, or a re-assignment, does not make it); and the values they alone define."""
    simple = [site.stmt for site in ir.sites(model.body) if not isinstance(site.stmt, (ir.Loop, ir.TIf))]
    only = {s for s in every - base if not isinstance(s, (ir.Loop, ir.TIf))}
    while True:
        absent = {n for s in only for n in _defines(s)} - {n for s in simple if s not in only for n in _defines(s)}
        dependent = {s for s in simple if s not in every and s not in only and ir.reads(s) & absent}
        if not dependent:
            return frozenset(only), frozenset(absent)
        only |= dependent


def live_statements(model: ir.Model, wanted: set, body: tuple | None = None) -> frozenset:
    """The statements of `body` (the model's, by default) that the outputs in `wanted` need."""
    stmts = [(site.stmt, site.tests) for site in ir.sites(model.body if body is None else body)]
    needed = set(wanted)
    changed = True
    while changed:
        changed = False
        for s, tests in stmts:
            if ir.writes(s) & needed:  # the tests of the ifs around it are needed where it is
                new = (ir.reads(s) | ir.names_read(tests)) - needed
                if new:
                    needed |= new
                    changed = True
    live = {s for s, _ in stmts if ir.writes(s) & needed}
    # a compound statement is live when anything in it is
    for s, _ in stmts:
        if isinstance(s, (ir.Loop, ir.TIf)) and any(t in live for t in ir.walk_stmts(_body(s))):
            live.add(s)
    return frozenset(live)


def _body(s):
    return s.body + (s.orelse if isinstance(s, ir.TIf) else ())


def _defines(s) -> set:
    """The names a statement brings into being (`let`, a fused projection's targets)."""
    if isinstance(s, ir.Bind) and s.let or isinstance(s, ir.FusedLinear):
        return ir.writes(s)
    return set()
