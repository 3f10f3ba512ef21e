"""The encoder of an encoder-decoder: what `generate` runs once before it decodes.

A spec is an encoder-decoder when the logits are over a token input other than the first (the
decoder's, `decoder_input_ids`) and the rest of its required inputs are the encoder's. The
statements that do not depend on the decoder's side (its tokens, its caches, the inputs sized by
their lengths, and what those feed) are the encoder entry: top-level statements, a layer loop as a
whole, kept in program order. They run once per `generate`; each decode step runs the rest with
their values (`values`) handed over. So the cross-attention keys and values run once only when the
spec computes them in a loop of their own, from the encoder's states: computed inside the decoder
loop they are recomputed at every step (`recomputed` names them, for `snfc check -v`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..ops import all_ops
from ..source import Span


@dataclass(frozen=True)
class EncoderPlan:
    inputs: tuple[str, ...]  # the encoder's inputs: generate's arguments besides the decoder's tokens
    stmts: tuple[int, ...]  # the top-level statements run once (indices into the body, in order)
    values: tuple[str, ...]  # what they hand the decoder: the names the rest reads, or outputs
    recomputed: tuple[tuple[str, Span], ...] = ()  # decoder-loop values of the encoder's side alone


def _dims(e) -> set:
    ty = getattr(e, "ty", None)
    if isinstance(ty, ir.TensorT):
        return set().union(*(d.symbols() for d in ty.shape))
    if isinstance(ty, ir.ScalarT) and ty.dim is not None:
        return ty.dim.symbols()
    return set()


def _exprs(stmts) -> list:
    return [e for s in ir.walk_stmts(stmts) for e in ir.subexprs(ir.own_exprs(s))]


def _decoder_side(stmts, tainted: set, dims: set) -> bool:
    """Whether the statements read a value of the decoder's side or a size of it, besides the
    locals they declare themselves."""
    own = {s.name for s in ir.walk_stmts(stmts) if isinstance(s, ir.Bind) and s.let}
    read = set().union(*(ir.reads(s) for s in ir.walk_stmts(stmts))) - own
    return bool(read & tainted) or any(_dims(e) & dims for e in _exprs(stmts))


def decoder_dims(model: ir.Model, tokens: ir.Tensor) -> set:
    """The run-time sizes of the decoder's side (`T`, `T_past`): those no required input of the
    encoder's (a required input besides the decoder's tokens) has."""
    encoder = [i for i in model.inputs if not i.optional and i is not tokens]
    return set(model.run_time_dims) - set().union(set(), *(d.symbols() for i in encoder for d in i.ty.shape))


def plan_encoder(model: ir.Model, tokens: ir.Tensor) -> EncoderPlan | str:
    """The encoder entry, or why there is none. The decoder's side: its tokens, the inputs sized by
    its lengths (its caches, labels: generate leaves them but the caches None), what reads them."""
    dims = decoder_dims(model, tokens)
    inputs, tainted = [], {tokens.name} | dims  # a size read as a value is a Ref too
    for i in model.inputs:
        if i is tokens:
            continue
        if not set().union(*(d.symbols() for d in i.ty.shape)) & dims:
            inputs.append(i.name)
        elif not i.optional:
            return f"the input `{i.name}` is required, and generate gives only the tokens (make it optional: `?`)"
        else:
            tainted.add(i.name)
    order = sorted(inputs, key=lambda n: model.inputs[[i.name for i in model.inputs].index(n)].optional)
    encoder, touched = [], set()  # touched: what a decoder-side statement before reads or writes
    for index, s in enumerate(model.body):
        nested = ir.walk_stmts([s])
        writes = set().union(*(ir.writes(x) for x in nested))
        if _decoder_side([s], tainted, dims) or writes & touched:
            tainted |= writes
            touched |= writes | set().union(*(ir.reads(x) for x in nested))
        else:
            encoder.append(index)
    if not encoder:
        return "nothing runs without the decoder's tokens: there is no encoder to run once"
    top = {s.name for s in model.body if isinstance(s, ir.Bind) and s.let}
    later = [s for i, s in enumerate(model.body) if i not in encoder]
    wanted = set().union(*(ir.reads(x) for x in ir.walk_stmts(later))) | {o.name for o in model.outputs}
    values = []
    for i in encoder:
        for x in ir.walk_stmts([model.body[i]]):
            values += [n for n in sorted(ir.writes(x)) if n in top and n in wanted and n not in values]
    return EncoderPlan(tuple(order), tuple(encoder), tuple(values), _recomputed(later, tainted, dims))


def _recomputed(later, tainted: set, dims: set) -> tuple:
    """The values a decoder loop hands on from a matrix product of the encoder's side alone (the
    cross-attention keys and values, computed there): each decode step computes them again."""
    inner = {s.name for loop in later if isinstance(loop, ir.Loop) for s in ir.walk_stmts(loop.body)
             if isinstance(s, ir.Bind) and s.let}
    out, local = [], set(tainted) - inner  # a loop's own locals: tainted statement by statement
    for _ in range(2):  # twice: a loop carries values to its next layer
        for s in ir.walk_stmts(later):
            if isinstance(s, (ir.Bind, ir.SetItem, ir.FusedLinear)) and _decoder_side([s], local, dims):
                local |= ir.writes(s)
    for loop in (s for s in later if isinstance(s, ir.Loop)):
        body = ir.walk_stmts(loop.body)
        products = any(isinstance(s, ir.FusedLinear) or isinstance(s, ir.Bind) and any(
            isinstance(e, ir.Op) and e.op in ("linear", "matmul") for e in ir.subexprs([s.value]))
            for s in body if not ir.writes(s) & local)
        read = set().union(set(), *(ir.reads(s) for s in body if ir.writes(s) & local))
        if products:
            out += [(s.name, s.span) for s in body if isinstance(s, ir.Bind) and s.name not in local and s.name in read]
    return tuple(out)


def cross_attention_ok(model: ir.Model, plan: EncoderPlan, tokens: ir.Tensor) -> bool:
    """Whether every attention of the decoder's side that is not causal reads keys and values of
    the encoder's side only (cross-attention), so the logits at a position see no later token."""
    dims = decoder_dims(model, tokens)
    later = [s for i, s in enumerate(model.body) if i not in plan.stmts]
    local = {i.name for i in model.inputs if i.name not in plan.inputs} | dims
    for _ in range(2):
        for s in ir.walk_stmts(later):
            if isinstance(s, (ir.Bind, ir.SetItem, ir.FusedLinear)) and _decoder_side([s], local, dims):
                local |= ir.writes(s)
    for e in _exprs(later):
        keys = all_ops()[e.op].keys if isinstance(e, ir.Op) else ()
        if keys and e.arg("causal").value is not True:
            kv = [e.arg(n) for n in keys]
            if ir.names_read(kv) & local or any(_dims(x) & dims for x in ir.subexprs(kv)):
                return False
    return True
