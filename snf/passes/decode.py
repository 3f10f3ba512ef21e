"""The decode plan: whether the module gets `Model.generate`, and how it feeds its caches.

A spec gets `generate` when it is a causal language model: its first input is token ids
`[B, T]` int64, an output is logits `[B, T, V]` over the rows of every table the ids index (a
sampled id is a valid one), every attention is causal (so the logits at a position never see
later tokens), and every other input is optional (generate cannot make one up). Which output is
the logits is `choose_logits`'s rule: the only `[B, T, V]` float output; else the one named
`logits`; else the one that is not a softmax (probabilities or their log); else none, and no
`generate`. Its caches (from the cache plan) are fed back step by step when they come in complete
groups; a cache given together with an input generate cannot fill (a `[B, T_past + T]` mask)
means no cache: each step recomputes the whole sequence.

The context is the most tokens one forward may see, the bound the spec asserts on the tokens'
length (`assert T_past + T <= block_size`). Past it, `generate` goes on as nanoGPT does: each step
runs the last `context` tokens again, without a cache (exact: the same tokens as recomputing from
the cropped context, since positions restart with the window).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..dims import Dim, equal
from .caches import Cache, CachePlan


@dataclass(frozen=True)
class DecodePlan:
    tokens: str  # the token input
    logits: str  # the logits output
    caches: tuple[Cache, ...]  # fed back at each step; () recomputes the sequence
    preallocated: bool  # the caches live in fixed-size buffers written in place (see the cache plan)
    context: Dim | None = None  # the most tokens a forward may see (None: no bound)


NO_LOGITS = "no output is [B, T, V] floats"


def token_input(model: ir.Model) -> ir.Tensor | None:
    """The first input, when it is token ids `[B, T]` int64."""
    tokens = model.inputs[0] if model.inputs else None
    if tokens is None or tokens.optional or tokens.ty.dtype != "int64" or tokens.ty.rank != 2:
        return None
    return tokens


def choose_logits(model: ir.Model, tokens: ir.Tensor) -> tuple[ir.Tensor | None, str]:
    """The output `generate` samples from, with why; or None, with why none. The candidates are
    the `[B, T, V]` float outputs over the tokens' axes: the only one; else the one named `logits`;
    else the only one that is not a softmax (probabilities, or their log: sampling from
    softmax(probs) would be wrong); else there is no telling, and no `generate`."""
    candidates = [o for o in model.outputs if o.ty.rank == 3 and o.ty.dtype.startswith(("float", "bfloat"))
                  and o.ty.shape[:2] == tokens.ty.shape]
    names = ", ".join(f"`{o.name}`" for o in candidates)
    if len(candidates) <= 1:
        return (candidates[0], "the only [B, T, V] output") if candidates else (None, NO_LOGITS)
    named = [o for o in candidates if o.name == "logits"]
    if named:
        return named[0], f"it is named `logits` (of {names})"
    raw = [o for o in candidates if not _softmaxed(model, o.name)]
    if len(raw) == 1:
        rest = ", ".join(f"`{o.name}`" for o in candidates if o is not raw[0])
        return raw[0], f"{rest} {'is a softmax' if len(candidates) == 2 else 'are softmaxes'} of the scores"
    return None, (f"{names} could each be the logits; name the one to sample from `logits` (a softmax of the "
                  f"scores is not one)")


def _softmaxed(model: ir.Model, name: str) -> bool:
    """Whether every top-level value bound to `name` is a softmax, or the log of one."""
    values = [s.value for s in ir.walk_stmts(model.body) if isinstance(s, ir.Bind) and s.name == name]

    def probabilities(e) -> bool:
        if isinstance(e, ir.Op) and e.op == "log":
            e = e.args[0][1]
        return isinstance(e, ir.Op) and e.op == "softmax"
    return bool(values) and all(probabilities(v) for v in values)


def no_generate(model: ir.Model) -> str | None:
    """Why the module gets no `generate` (`snfc check -v` says it), or None when it gets one."""
    tokens = token_input(model)
    if tokens is None:
        return "the first input is not token ids [B, T] int64"
    logits, why = choose_logits(model, tokens)
    if logits is None:
        return why
    required = [i.name for i in model.inputs[1:] if not i.optional]
    if required:
        return f"the input `{required[0]}` is required, and generate gives only the tokens (make it optional: `?`)"
    vocab = logits.ty.shape[-1]
    rows = next((r for r in model.rows_indexed_by(tokens.name) if not equal(r, vocab)[0]), None)
    if rows is not None:  # a sampled id (below vocab) must be a row of every table the tokens index
        return (f"`{logits.name}` is over `{vocab}`, not the `{rows}` rows of the table the tokens index: "
                f"it is not logits over the vocabulary")
    attention = [e for e in ir.walk_exprs(model.body) if isinstance(e, ir.Op) and e.op == "flash_attention"]
    if not attention:
        return "no attention, so nothing says the logits at a position see only the tokens before it"
    if not all(e.arg("causal").value is True for e in attention):
        return ("an attention is not causal (an encoder's, or an encoder-decoder's: not supported yet), so the "
                "logits at a position would see later tokens")
    return None


def plan_decode(model: ir.Model, caches: CachePlan) -> DecodePlan | None:
    if no_generate(model) is not None:
        return None
    tokens = token_input(model)
    logits, _ = choose_logits(model, tokens)
    fed = caches.caches
    names = {c.input for c in fed}
    if any(set(group) & names and not set(group) <= names for group in model.input_groups):
        fed = ()  # the caches come with an input generate cannot fill
    preallocated = bool(fed) and caches.preallocated is not None
    context = _context(model, tokens, {c.dim for c in caches.caches})
    if preallocated and context is None:  # the buffers hold that many tokens
        context = caches.preallocated.size
    return DecodePlan(tokens.name, logits.name, tuple(fed), preallocated, context)


def _context(model: ir.Model, tokens: ir.Tensor, cache_dims: set) -> Dim | None:
    """The bound a check puts on the tokens' length, with or without the caches' (`T <= block_size`,
    `T_past + T <= block_size`), in config values; None when none does, or checks disagree."""
    length = tokens.ty.shape[1].as_symbol()
    bounds = []
    for c in model.checks:
        if c.op in ("<=", "<") and length in c.lhs.symbols() and c.lhs.symbols() <= {length} | cache_dims \
                and model.runs_in_config(ir.Check(c.rhs, c.rhs, c.span)):
            at_most = c.rhs - Dim.const(1) if c.op == "<" else c.rhs
            if c.lhs.subs({d: Dim.const(0) for d in cache_dims}) == Dim.sym(length):
                bounds.append(at_most)
    distinct = list(dict.fromkeys(bounds))
    return distinct[0] if len(distinct) == 1 else None
