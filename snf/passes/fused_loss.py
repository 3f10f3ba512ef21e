"""The fused loss: a language-model head and its cross-entropy, computed without the logits.

    let logits = linear(h, weight=W)                                  # an output
    let loss = cross_entropy(logits, targets) if targets exists else None

When `logits` is an output that nothing but this `cross_entropy` reads, an entry point that does
not ask for the logits (a training step with targets, by default: see `liveness`) computes the
loss as `linear_cross_entropy(h, W, targets)` instead. That op runs the head and the loss a
chunk of rows at a time, its gradients included (`_linear_cross_entropy` in
snf/runtime/loss.py), so the float32 [B*T, V] logits, the largest tensor of a training step,
never exist. The plan is the rewritten statement; liveness and code generation pick between
the two forms, so the module still returns the logits whenever they are asked for.

The head's input `h` is evaluated where the loss is, so the plan is made only when nothing
between the two statements re-assigns a name `h` reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import ir


@dataclass(frozen=True)
class FusedLoss:
    logits: str  # the output the head computes
    head: ir.Bind  # `let logits = linear(h, W, b)`
    loss: ir.Bind  # the statement whose cross_entropy reads the logits
    fused: ir.Bind  # that statement with `linear_cross_entropy(h, W, targets, b, ...)` in its place
    targets: tuple[str, ...]  # optional inputs the loss needs (`if targets exists`): training without them keeps the logits


def plan_fused_loss(model: ir.Model) -> FusedLoss | None:
    outputs = {o.name for o in model.outputs}
    body = model.body
    for i, head in enumerate(body):
        if not (isinstance(head, ir.Bind) and head.let and head.name in outputs and isinstance(head.value, ir.Op)
                and head.value.op == "linear"):
            continue
        uses = [e for e in ir.walk_exprs(body) if isinstance(e, ir.Ref) and e.kind == "local" and e.name == head.name]
        loss = next((s for s in body[i + 1:] if isinstance(s, ir.Bind) and _ce_of(s.value, head.name)), None)
        if loss is None or len(uses) != 1 or _rebound(body, head.name, head):
            continue
        between = body[i + 1:body.index(loss)]
        reads = {e.name for e in ir.walk_exprs((head,)) if isinstance(e, ir.Ref) and e.kind == "local"}
        if any(ir.writes(s) & reads for s in ir.walk_stmts(between)) or loss.name in reads:
            continue
        ce = _ce_of(loss.value, head.name)
        fused = _fused(head, ce)
        value = ir.rewrite(loss.value, lambda x: fused if x is ce else None)
        return FusedLoss(head.name, head, loss, ir.replace(loss, value=value), _presence_tests(loss.value, ce))
    return None


def _ce_of(e, logits: str) -> ir.Op | None:
    """The `cross_entropy(logits, ...)` inside `e`, if there is one."""
    return next((x for x in ir.subexprs((e,)) if isinstance(x, ir.Op) and x.op == "cross_entropy"
                 and isinstance(x.arg("logits"), ir.Ref) and x.arg("logits").kind == "local"
                 and x.arg("logits").name == logits), None)


def _fused(head: ir.Bind, ce: ir.Op) -> ir.Op:
    linear = head.value
    args = (("x", linear.arg("x")), ("weight", linear.arg("weight")), ("targets", ce.arg("targets")),
            ("bias", linear.arg("bias")), ("shift", ce.arg("shift")), ("ignore_index", ce.arg("ignore_index")))
    return ir.Op("linear_cross_entropy", args, ce.ty, ce.span)


def _presence_tests(e, ce: ir.Op) -> tuple[str, ...]:
    """The optional inputs whose presence guards `ce` in `e` (`ce if targets exists else None`)."""
    if e is ce:
        return ()
    if isinstance(e, ir.TCond):
        if ir.contains(e.body, ce) and isinstance(e.test, ir.IsPresent):
            return (e.test.name,) + _presence_tests(e.body, ce)
        return next((_presence_tests(c, ce) for c in (e.body, e.orelse) if ir.contains(c, ce)), ())
    return next((_presence_tests(c, ce) for c in ir.children(e) if ir.contains(c, ce)), ())


def _rebound(body, name: str, first) -> bool:
    return any(s is not first and name in ir.writes(s) for s in ir.walk_stmts(body))
