"""The decode plan: whether the module gets `Model.generate`, and how it feeds its caches.

A spec gets `generate` when it is a causal language model: its first input is token ids
`[B, T]` int64, an output is logits `[B, T, V]` over the rows of every table the ids index (a
sampled id is a valid one), every attention is causal and every other op that mixes positions a
recurrent one (so the logits at a position never see later tokens), and every other input is
optional (generate cannot make one up). Which output is
the logits is `choose_logits`'s rule: the only `[B, T, V]` float output; else the one named
`logits`; else the one that is not a softmax (probabilities or their log); else none, and no
`generate`. Its caches (from the cache plan) are fed back step by step when they come in complete
groups; a cache given together with an input generate cannot fill (a `[B, T_past + T]` mask)
means no cache: each step recomputes the whole sequence.

An encoder-decoder (T5, Whisper) gets `generate` too: its logits are over a later token input than
the first, the decoder's (`decoder_input_ids`), its other required inputs are the encoder's (the
first of them token ids or not: Whisper's are log-mel features), and every attention
of the decoder's side is causal or reads keys and values of the encoder's side only (cross-
attention). The encoder plan (`encoder.py`) says what runs once; the config gives the decoder's
first token (`decoder_start_token_id`) and, where declared, the token that ends a row
(`eos_token_id`, padded after with `pad_token_id`).

The context is the most tokens one forward may see, the bound the spec asserts on the tokens'
length (`assert T_past + T <= block_size`). Past it, `generate` goes on as nanoGPT does: each step
runs the last `context` tokens again, without a cache (exact: the same tokens as recomputing from
the cropped context, since positions restart with the window).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..dims import Dim, equal
from ..ops import all_ops
from ..ops.recurrent import CAUSAL
from .caches import Cache, CachePlan
from .encoder import EncoderPlan, cross_attention_ok, plan_encoder


@dataclass(frozen=True)
class DecodePlan:
    tokens: str  # the token input
    logits: str  # the logits output
    caches: tuple[Cache, ...]  # fed back at each step; () recomputes the sequence
    preallocated: bool  # the caches live in fixed-size buffers written in place (see the cache plan)
    context: Dim | None = None  # the most tokens a forward may see (None: no bound)
    encoder: EncoderPlan | None = None  # an encoder-decoder's: what runs once per generate
    # the sequence length past which a LongRoPE switches to its long factors (a config value): the
    # cached keys were rotated with the short ones, so generate runs the whole sequence once there
    recompute_past: ir.TExpr | None = None


NO_LOGITS = "no output is [B, T, V] floats"


def token_input(model: ir.Model) -> ir.Tensor | None:
    """The first input, when it is token ids `[B, T]` int64."""
    tokens = model.inputs[0] if model.inputs else None
    if tokens is None or tokens.optional or tokens.ty.dtype != "int64" or tokens.ty.rank != 2:
        return None
    return tokens


def decoder_tokens(model: ir.Model) -> ir.Tensor | None:
    """An encoder-decoder's decoder tokens: when no output is logits over the vocabulary of the
    first input (an encoder's hidden states are not; an encoder's first input may be other than
    token ids, Whisper's log-mel features), the first later required `[B, T]` int64 input some output
    is `[B, T, V]` floats over, V its vocabulary."""
    def over_vocabulary(tokens: ir.Tensor) -> bool:
        logits = choose_logits(model, tokens)[0]
        return logits is not None and _vocabulary(model, tokens, logits) is None
    first = token_input(model)
    if not model.inputs or model.inputs[0].optional or first is not None and over_vocabulary(first):
        return None
    return next((i for i in model.inputs[1:] if not i.optional and i.ty.dtype == "int64" and i.ty.rank == 2
                 and over_vocabulary(i)), None)


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
    return _refusal(model)[0]


def _refusal(model: ir.Model) -> tuple[str | None, EncoderPlan | None]:
    """Why the module gets no `generate` (or None), and an encoder-decoder's encoder plan (made once)."""
    decoder = decoder_tokens(model)
    if decoder is not None:
        return _no_encoder_decoder_generate(model, decoder)
    tokens = token_input(model)
    if tokens is None:
        return ("the first input is not token ids [B, T] int64, and no later input is a decoder's tokens "
                "the logits are over"), None
    logits, why = choose_logits(model, tokens)
    if logits is None:
        return why, None
    required = [i.name for i in model.inputs[1:] if not i.optional]
    if required:
        return f"the input `{required[0]}` is required, and generate gives only the tokens (make it optional: `?`)", \
            None
    return _vocabulary(model, tokens, logits) or _causal(model), None


def _vocabulary(model: ir.Model, tokens: ir.Tensor, logits: ir.Tensor) -> str | None:
    vocab = logits.ty.shape[-1]
    rows = next((r for r in model.rows_indexed_by(tokens.name) if not equal(r, vocab)[0]), None)
    if rows is not None:  # a sampled id (below vocab) must be a row of every table the tokens index
        return (f"`{logits.name}` is over `{vocab}`, not the `{rows}` rows of the table the tokens index: "
                f"it is not logits over the vocabulary")
    return None


def is_attention(op: ir.Op) -> bool:
    """An attention op (flash_attention, latent_attention): one that reads keys (OpDef.keys)."""
    return op.op in all_ops() and bool(all_ops()[op.op].keys)


def _causal(model: ir.Model) -> str | None:
    """Every op that mixes positions sees only earlier ones: an attention that is causal, or a recurrent op
    (a scan, a causal convolution), which is causal by what it computes."""
    mixing = [e for e in ir.walk_exprs(model.body) if isinstance(e, ir.Op) and (is_attention(e) or e.op in CAUSAL)]
    if not mixing:
        return ("no attention and no recurrent op, so nothing says the logits at a position see only the tokens "
                "before it")
    if not all(e.op in CAUSAL or e.arg("causal").value is True for e in mixing):
        return ("an attention is not causal (an encoder's), so the logits at a position would see later tokens "
                "(an encoder-decoder's logits are over a second token input, the decoder's)")
    return None


def _no_encoder_decoder_generate(model: ir.Model, tokens: ir.Tensor) -> tuple[str | None, EncoderPlan | None]:
    """Why an encoder-decoder gets no `generate` (or None), and its encoder plan."""
    logits, why = choose_logits(model, tokens)
    if logits is None:
        return why, None
    wrong = _vocabulary(model, tokens, logits)
    if wrong:
        return wrong, None
    encoder = plan_encoder(model, tokens)
    if isinstance(encoder, str):
        return encoder, None
    fields = set(model.config_names())
    if "decoder_start_token_id" not in fields:
        return ("an encoder-decoder's generate starts the decoder with the config's `decoder_start_token_id`: "
                "declare it (`decoder_start_token_id : int`)"), None
    if ("eos_token_id" in fields) != ("pad_token_id" in fields):
        return ("generate ends a row at `eos_token_id` and pads it after with `pad_token_id`: declare both, or "
                "neither"), None
    if not any(isinstance(e, ir.Op) and is_attention(e) for e in ir.walk_exprs(model.body)):
        return "no attention, so nothing says the logits at a position see only the tokens before it", None
    if not cross_attention_ok(model, encoder, tokens):
        return ("an attention of the decoder is not causal and its keys see the decoder's tokens (not only the "
                "encoder's), so the logits at a position would see later tokens"), None
    return None, encoder


def plan_decode(model: ir.Model, caches: CachePlan) -> DecodePlan | None:
    why, encoder = _refusal(model)
    if why is not None:
        return None
    tokens = decoder_tokens(model) or token_input(model)
    logits, _ = choose_logits(model, tokens)
    fed = caches.caches
    names = {c.input for c in fed}
    if any(set(group) & names and not set(group) <= names for group in model.input_groups):
        fed = ()  # the caches come with an input generate cannot fill
    if encoder is not None:  # an encoder-decoder's decode concatenates its self-attention cache
        return DecodePlan(tokens.name, logits.name, tuple(fed), False, None, encoder)
    preallocated = bool(fed) and caches.preallocated is not None
    context = _context(model, tokens, {c.dim for c in caches.caches if not c.state})
    if preallocated and context is None:  # the buffers hold that many tokens
        context = caches.preallocated.size
    # each LongRoPE's switch, as a config value or a number (its ropes of q and k read the same one)
    switches = {(getattr(x, "name", None), getattr(x, "value", None)): x
                for e in ir.walk_exprs(model.body) if isinstance(e, ir.Op) and e.op == "rope"
                and getattr(e.arg("scaling"), "value", None) == "longrope"
                for x in [e.arg("original_max_position")]}
    return DecodePlan(tokens.name, logits.name, tuple(fed), preallocated, context,
                      recompute_past=next(iter(switches.values())) if len(switches) == 1 and fed else None)


def _context(model: ir.Model, tokens: ir.Tensor, cache_dims: set) -> Dim | None:
    """The bound a check puts on the tokens' length, with or without the caches' (`T <= block_size`,
    `T_past + T <= block_size`), in config values; None when none does, or checks disagree."""
    length = tokens.ty.shape[1].as_symbol()
    bounds = []
    for c in model.checks:
        if c.op in ("<=", "<") and not c.tested and length in c.lhs.symbols() \
                and c.lhs.symbols() <= {length} | cache_dims and model.runs_in_config(ir.Check(c.rhs, c.rhs, c.span)):
            at_most = c.rhs - Dim.const(1) if c.op == "<" else c.rhs
            if c.lhs.subs({d: Dim.const(0) for d in cache_dims}) == Dim.sym(length):
                bounds.append(at_most)
    distinct = list(dict.fromkeys(bounds))
    return distinct[0] if len(distinct) == 1 else None
