"""Sequence parallelism over the tensor-parallel plan: where each sequence may be split over the tp ranks.

A pure function of the lowered IR, its layout and its tensor-parallel plan (the styles of its
parameters). Between a row-wise linear's output and the next
column-wise linear's input, tensor parallelism leaves every rank the same whole activations: the
residual stream, and the norms on it, computed tp times over. Sequence parallelism (Megatron's, as
torchtitan's llama3 `apply_tp` writes it) holds there only this rank's positions (axis 1 of
[B, T, D]): the token embedding and each row-wise linear reduce-scatter their output over the
positions (instead of an all-reduce), each column-wise linear (and the LM head) all-gathers its
input, and each norm on the stream runs on the rank's positions, its weight whole with its gradient
all-reduced (torch's SequenceParallel). That is right only where everything between those points
works per position: elementwise ops of stream values and constants, a norm over the features whose
weight is a module's. Anything else on the stream (a parameter applied outside a norm module, a
whole tensor added, positions read across, a linear kept whole, experts, an output) refuses it for
the whole model, with that op and its line.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..ops import all_ops
from ..ops.sharding import KEPT
from ..source import NO_SPAN, Span
from .layout import LayoutPlan
from .tensor_parallel import NORMS, TensorParallelPlan, _Flow, _is_param, _is_token

# how a module takes part (the generated Model's `tp_sequence`, read by snf.parallelize):
NORM = "sequence_norm"  # a norm on the stream: SequenceParallel over the positions
NORM_HEAD = "sequence_norm_head"  # that, and the LM head reads it: gathered where the head is the embedding
GATHER = "gather"  # a column-wise linear or the LM head: its input all-gathered over the positions
SCATTER = "scatter"  # the token embedding or a row-wise linear: its output reduce-scattered over them
# ops refused on the stream though their rules keep the positions: RoPE would count them from the rank's
# first, and a reshape's code may name the whole length T
_POSITIONAL = ("rope", "reshape")


@dataclass(frozen=True)
class Stream:
    """A value of the residual stream, sharded over its positions (axis 1); `norm`: the module key of
    the norm whose output it is."""

    norm: str | None = None


@dataclass(frozen=True)
class SequencePlan:
    roles: tuple[tuple[str, str, Span], ...]  # (module key, its part, the op that decided it), in first-use order
    refused: tuple[str, Span] | None = None  # why the model cannot split its sequences, and where


class _Refused(Exception):
    def __init__(self, reason: str, span: Span):
        super().__init__(reason)
        self.reason, self.span = reason, span


def plan_sequence(model: ir.Model, layout: LayoutPlan, tp: TensorParallelPlan) -> SequencePlan:
    styles = {name: p.style for p in tp.placements for name in p.params}
    flow = _Sequence(model, layout, styles)
    try:
        flow.block(model.body)
    except _Refused as r:
        return SequencePlan((), (r.reason, r.span))
    roles = tuple((key, role, span) for key, (role, span) in flow.roles.items() if role is not None)
    if not any(role in (NORM, NORM_HEAD) for _, role, _ in roles):
        return SequencePlan((), ("no norm works on whole activations between row-wise and column-wise linears",
                                 NO_SPAN))
    return SequencePlan(roles)


class _Sequence(_Flow):
    """One pass over the body (_Flow's walk of the statements): each value a Stream or None (whole,
    sharded by features, not a tensor); raises _Refused at the first op the stream split by positions
    cannot pass."""

    def __init__(self, model: ir.Model, layout: LayoutPlan, styles: dict[str, str]):  # not _Flow's state
        self.model, self.styles = model, styles
        self.keys = {p.name: (f"{p.owner}.*." if p.owner else "") + p.module for p in layout.places if p.module}
        self.env: dict[str, Stream | None] = {}
        self.roles: dict[str, tuple[str | None, Span]] = {}  # module key -> (role; None: used on whole values)
        self.outs = {o.name for o in model.outputs}
        self.tables: set[str] = set()  # the token embeddings' tables (a tied head's weight)

    def assign(self, name: str, v: Stream | None, span: Span) -> None:
        """A name bound or written into (`new_keys[l] = ...`: a cache, never the stream)."""
        if v is not None and name in self.outs:
            raise _Refused(f"the output `{name}` would be split by positions", span)
        if name in self.env and (self.env[name] is None) != (v is None):
            raise _Refused(f"`{name}` is assigned both the stream split by positions and whole values", span)
        self.env[name] = v

    def role(self, param: str, role: str | None, span: Span, what: str) -> None:
        """`param`'s module takes `role` (None: it is used on whole values); a module used both ways refuses."""
        key = self.keys.get(param)
        if key is None:
            if role is not None:
                raise _Refused(f"{what} `{param}` is a bare parameter, no module torch can place", span)
            return
        old = self.roles.setdefault(key, (role, span))[0]
        if (old is None) != (role is None):
            raise _Refused(f"`{key}` is used on the stream split by positions and on whole values", span)

    def expr(self, e) -> Stream | None:
        if isinstance(e, ir.Ref):
            return self.env.get(e.name) if e.kind == "local" else None
        if isinstance(e, ir.TCond):
            self.expr(e.test)
            a, b = self.expr(e.body), self.expr(e.orelse)
            if (a is None) != (b is None) and not any(isinstance(x, ir.Lit) and x.value is None
                                                      for x in (e.body, e.orelse)):
                raise _Refused("a conditional expression gives the stream split by positions or whole values",
                               e.span)
            return a if b is None or a == b else b if a is None else Stream()
        if isinstance(e, ir.TList):
            if any(self.expr(i) is not None for i in e.items):
                raise _Refused("a list holds the stream split by positions", e.span)
            return None
        return self.op(e) if isinstance(e, ir.Op) else None

    def op(self, e: ir.Op) -> Stream | None:
        args = dict(e.args)
        if e.op == "linear" and _is_param(args["weight"]):
            return self.linear(args["weight"].name, None, self.expr(args["x"]), e.ty, e.span)
        if e.op == "gather" and _is_param(args["table"]) and _is_token(self.model, args["index"]):
            self.role(args["table"].name, SCATTER, e.span, "the token embedding")
            self.tables.add(args["table"].name)
            return Stream()
        states = {n: self.expr(a) for n, a in e.args}
        weight = args.get("weight") if e.op in NORMS else None
        stream = [n for n, v in states.items() if v is not None]
        if not stream:
            if weight is not None and _is_param(weight):
                self.role(weight.name, None, e.span, "")
            return None
        rule = all_ops()[e.op].shard
        for n in stream:
            p = rule(e, n, 1) if rule is not None else None
            if e.op in _POSITIONAL or p is None or p.kind != KEPT or p.axis != 1 or p.piece or p.units is not None:
                raise _Refused(f"`{e.op}` does not work per position", e.span)
            alike = {name for name, _ in p.with_}
            for other, a in e.args:
                if states[other] is not None or not isinstance(getattr(a, "ty", None), ir.TensorT):
                    continue
                if weight is not None and other in ("weight", "bias") and _is_param(a):
                    self.role(a.name, NORM, e.span, "the norm's weight")
                elif weight is not None and other in ("weight", "bias"):
                    raise _Refused(f"`{e.op}`'s {other} is computed, not a module's", e.span)
                elif _is_param(a) or other in alike or _has_params(a):
                    shown = f"`{a.name}`" if isinstance(a, ir.Ref) else f"its `{other}`"
                    raise _Refused(f"`{e.op}` combines the stream split by positions with {shown}, which is whole",
                                   e.span)
        return Stream(self.keys[weight.name] if weight is not None and _is_param(weight) else None)

    def linear(self, w: str, bias, x: Stream | None, ty, span: Span) -> Stream | None:  # the bias is w's module's
        style = self.styles.get(w, "replicate")
        if style == "rowwise":
            self.role(w, SCATTER, span, "the row-wise linear")
            return Stream()
        if style in ("colwise", "colwise_pieces", "vocab_head"):
            self.role(w, GATHER if x is not None else None, span, "the column-wise linear")
        elif x is None:
            return None
        elif (style == "vocab_embedding" or w in self.tables) and x.norm is not None:  # a head tied to the table
            self.roles[x.norm] = (NORM_HEAD, self.roles[x.norm][1])
        else:
            raise _Refused(f"`linear` of `{w}` ({style}) reads the stream split by positions", span)
        return None


def _has_params(e) -> bool:
    return any(isinstance(r, ir.Ref) and r.kind in ("param", "layer_param", "buffer") for r in ir.subexprs([e]))


__all__ = ["GATHER", "NORM", "NORM_HEAD", "SCATTER", "SequencePlan", "plan_sequence"]
