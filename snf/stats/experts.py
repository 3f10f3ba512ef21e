"""`snfc stats` for mixtures of experts (`moe_experts`): which parameters hold experts, the active
parameters (those one token uses: k of each E), and the forward FLOPs with every expert run on every
token (the dense form's), beside the package's totals (__init__.py), which count the top-k cost."""

from __future__ import annotations

from fractions import Fraction

from .. import ir
from ..dims import Dim


def note_experts(walk, e, types: dict, fwd: Dim) -> None:
    """A `moe_experts` call seen by stats' walk: the parameters passed as its experts, with their
    expert axis E and k, and what running every expert would add to `fwd`, its top-k FLOPs."""
    k, experts = types["indices"].shape[-1], types["up"].shape[0]
    for name, a in e.args:
        if name in ("up", "down", "gate", "gate_bias", "up_bias", "down_bias"):
            for x in ir.subexprs((a,)):
                if isinstance(x, ir.Ref) and x.kind in ("param", "layer_param"):
                    walk.experts[x.name] = (experts, k)
    if k.as_symbol():
        walk.dense_extra += fwd.subs({k.as_symbol(): experts}) - fwd
    elif k.value:
        walk.dense_extra += fwd * experts * Dim.const(Fraction(1, k.value)) - fwd


def _idle(model: ir.Model, walk) -> Dim | None:
    """The expert parameters a token does not use: each stacked expert tensor's E - k of its E
    experts (E its expert axis, a param); None without experts, or with an E that is no param."""
    if not walk.experts:
        return None
    idle = Dim()
    for t in model.params:
        if t.name in walk.experts:
            experts, k = walk.experts[t.name]
            if experts.as_symbol() is None:
                return None
            n = walk.param_numel(t)
            idle += n - n.subs({experts.as_symbol(): k})
    return idle


def expert_quantities(quantities: list, model: ir.Model, walk, params: Dim, env: dict, per_token, per: str, *,
                      simplify, quantity) -> None:
    """Insert the active parameters after the parameters and the every-expert FLOPs after the
    forward's, where the spec has a mixture of experts."""
    idle = _idle(model, walk)
    if idle is None:
        return
    active = params - idle
    quantities.insert(1, quantity("active_parameters", "active parameters (top-k experts)", simplify(active, model),
                                  Fraction(active.evaluate(env)), ""))
    quantities.insert(3, per_token("flops_forward_dense", f"FLOPs per {per}, forward, every expert (dense)",
                                   walk.forward + walk.dense_extra, "FLOPs"))
