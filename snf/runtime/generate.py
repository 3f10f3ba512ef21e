"""`generate`, as plain Python: a generated module's `generate` method calls `_generate` (a decoder's)
or `_generate_from_encoder` (an encoder-decoder's) with what its plan says of the model
(`_Generation`: the token input, the logits, the caches fed back), so one loop, tested here, serves
every spec.

What a transformers user expects of it: each row stops at an end token (the given ones, else the
generation config `snf.from_pretrained` read from the checkpoint folder) and is padded after it,
decoding stops when every row has ended, a left-padded batch with its `attention_mask` gives each
row what that prompt alone gives, and the common transformers argument names are accepted
(`input_ids=`, `max_length=`, `do_sample=`, `streamer=`). As transformers' does, it runs the model
in the mode it is in (call `model.eval()` first; from_pretrained's models are) and keeps nothing on
the model: the decode state is an argument of each step, so threads may generate on one model at
once, each getting what it gets alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from .compiling import _compile_asked, _DecodeLoop
from .checks import _described
from .writes import _cache_buffers, _DecodeState


@dataclass(frozen=True)
class _Generation:
    """What generate needs to know of a model, from its plan: the token input's name, the output it
    samples from (None: forward returns the logits alone), the caches it feeds back (input, output),
    and where generate keeps them in buffers written in place, per cache the axis a KV cache's
    buffer grows along (None for a recurrent state, held whole); None: fed back as returned."""

    tokens: str
    logits: Optional[str]
    caches: tuple = ()
    buffer_axes: Optional[tuple] = None
    encoder: tuple = ()  # an encoder-decoder's: the encoder's inputs, in forward's order (its first: the batch)
    stops: bool = False  # an encoder-decoder's: its config has eos_token_id and pad_token_id


@dataclass
class GenerationConfig:
    """The end and padding tokens generate uses when its call gives none: `snf.from_pretrained` reads
    them from the folder's generation_config.json (else config.json) into the model's `loaded_from`."""

    eos_token_id: tuple = ()
    pad_token_id: Optional[int] = None


# transformers' generate arguments that mean what one of ours does (others are refused by name)
_ALIASES = ("input_ids", "max_length", "do_sample", "num_beams", "num_return_sequences", "use_cache",
            "generation_config", "return_dict_in_generate", "output_scores", "streamer")


def _generate(model: nn.Module, how: _Generation, tokens, max_new_tokens, temperature: float, top_k, top_p,
              generator, compile, attention_mask, eos_token_id, pad_token_id, more: dict,
              context: Optional[int] = None, recompute_past: Optional[int] = None) -> torch.Tensor:
    """`model.generate(...)`: `tokens` [B, T] and up to `max_new_tokens` tokens after them, [B, T + n]
    (n < max_new_tokens only where every row ended). `context`: the most tokens the model sees;
    `recompute_past`: a length past which the cached keys are stale (LongRoPE's switch), where the
    whole sequence runs once again."""
    tokens, max_new_tokens, temperature = _transformers_names(tokens, max_new_tokens, temperature, more)
    _check_sampling(tokens, max_new_tokens, temperature, top_k, top_p)
    stop = _stop_tokens(model, eos_token_id)
    pad = _pad_token(model, pad_token_id, stop)
    streamer = more.get("streamer")
    mask = None if attention_mask is None else torch.as_tensor(attention_mask, device=tokens.device)
    if mask is not None and tuple(mask.shape) != tuple(tokens.shape):
        raise ValueError(f"attention_mask must have the prompt's shape {list(tokens.shape)}, got {list(mask.shape)}")
    padded = mask is not None and not bool(mask.bool().all())
    if padded and streamer is not None:
        raise ValueError("a streamer takes one prompt at a time, not a padded batch")

    def run(prompt: torch.Tensor) -> torch.Tensor:
        return _decode_loop(model, how, prompt, max_new_tokens, temperature, top_k, top_p, generator, compile,
                            stop, pad, context, streamer, recompute_past)
    with torch.no_grad():
        return _generate_padded(tokens, mask, pad, run) if padded else run(tokens)


def _generate_from_encoder(model: nn.Module, how: _Generation, inputs: tuple, max_new_tokens: int, temperature: float,
                           top_k, top_p, generator, compile, prompt=None) -> torch.Tensor:
    """An encoder-decoder's `model.generate(...)`: the encoder's values once (`model._encode`, handed
    to each step's forward as `encoded=`, which then computes none), then the decoder from `prompt`
    (the decoder's first tokens [B, T0], as transformers' `decoder_input_ids`; None: the config's
    decoder_start_token_id), one token a step fed with its self-attention cache. Returns the decoder's
    tokens [B, T0 + n], as transformers' generate does. With `how.stops` a row ends at eos_token_id
    and is padded with pad_token_id after it, and decoding stops when every row has ended.
    `inputs`: the encoder's inputs, in `how.encoder`'s order; the first, which gives the batch, may be
    token ids (T5's) or features (Whisper's log-mel frames)."""
    first, given = inputs[0], dict(zip(how.encoder[1:], inputs[1:]))
    if not isinstance(first, torch.Tensor) or first.dim() == 0:
        raise ValueError(f"generate needs `{how.encoder[0]}`, the encoder's input, as a tensor whose first axis is "
                         f"the batch, got {_described(first)}")
    cfg = model.config
    if prompt is None:
        prompt = torch.full((first.size(0), 1), cfg.decoder_start_token_id, dtype=torch.long, device=first.device)
    _check_sampling(prompt, max_new_tokens, temperature, top_k, top_p)
    if prompt.size(0) != first.size(0):
        raise ValueError(f"{how.tokens} holds {prompt.size(0)} rows and {how.encoder[0]} {first.size(0)}: one decoder "
                         "prompt per encoder input")
    with torch.no_grad():
        token = prompt
        made = [token]
        done = torch.zeros(first.size(0), 1, dtype=torch.bool, device=first.device)
        ends = torch.tensor([cfg.eos_token_id], device=first.device) if how.stops else None
        encoded = model._encode(first, **given)
        out = model(first, **{how.tokens: token}, **given, use_cache=True, encoded=encoded)
        for step in _decoding(max_new_tokens, compile):
            logits = out if how.logits is None else getattr(out, how.logits)
            token = _sample(logits[:, -1, :], temperature, top_k, top_p, generator)
            if how.stops:
                token, done = _ended(token, done, ends, cfg.pad_token_id)
            made.append(token)
            if step + 1 == max_new_tokens or how.stops and bool(done.all()):
                break  # the last token needs no step
            caches = {past: getattr(out, new) for past, new in how.caches}
            out = model(first, **{how.tokens: token}, **given, **caches, use_cache=True, encoded=encoded)
        return torch.cat(made, dim=1)


def _transformers_names(tokens, max_new_tokens, temperature, more: dict):
    """Our arguments from transformers' names for them: `input_ids` for the prompt, `max_length`
    (prompt included) for `max_new_tokens`, `do_sample=False` for greedy (temperature 0)."""
    unknown = sorted(set(more) - set(_ALIASES))
    if unknown:
        raise TypeError(f"generate() got unexpected keyword arguments {', '.join(unknown)}; it takes the prompt, "
                        "max_new_tokens (or max_length), temperature, top_k, top_p, generator, compile, "
                        "attention_mask, eos_token_id, pad_token_id, and transformers' input_ids and do_sample")
    if "input_ids" in more:
        if tokens is not None:
            raise TypeError("generate() got the prompt twice: positionally and as input_ids")
        tokens = more["input_ids"]
    if tokens is None:
        raise TypeError("generate() needs a prompt: generate(tokens, max_new_tokens) or generate(input_ids=...)")
    if more.get("max_length") is not None:
        if max_new_tokens is not None:
            raise TypeError("generate() takes max_new_tokens or max_length, not both")
        if isinstance(more["max_length"], bool) or not isinstance(more["max_length"], int):
            raise ValueError(f"max_length must be an int, got {more['max_length']!r}")
        length = tokens.size(-1) if isinstance(tokens, torch.Tensor) else 0
        max_new_tokens = max(more["max_length"] - length, 0)
    if max_new_tokens is None:
        raise TypeError("generate() needs max_new_tokens (or transformers' max_length)")
    if more.get("do_sample") is False:
        temperature = 0.0
    for name, default in (("num_beams", 1), ("num_return_sequences", 1)):
        if more.get(name, default) != default:
            raise ValueError(f"generate() samples one sequence per row: {name}={more[name]!r} is not supported")
    for name in ("generation_config", "return_dict_in_generate", "output_scores"):
        if more.get(name):
            raise ValueError(f"generate() returns the tokens alone: {name}= is not supported")
    return tokens, max_new_tokens, temperature


def _generation_config(model: nn.Module) -> Optional[GenerationConfig]:
    """The end and padding tokens of the folder a model was loaded from (snf.from_pretrained's record
    of it, `loaded_from`); None for a model that was not."""
    return getattr(getattr(model, "loaded_from", None), "generation_config", None)


def _stop_tokens(model: nn.Module, given) -> tuple:
    """The end tokens: the given ones (a token id, or a list or 1-d tensor of them), else the
    generation config's of the folder the model was loaded from."""
    if given is None:
        given = getattr(_generation_config(model), "eos_token_id", None)
    items = given.tolist() if hasattr(given, "tolist") else given  # a tensor's or numpy array's ids, as numbers
    items = () if items is None else items if isinstance(items, (list, tuple)) else (items,)
    ids = tuple(_token_id(i) for i in items)
    if None in ids:
        raise ValueError(f"eos_token_id must be a token id (a whole number >= 0) or a list of them, got {given!r}")
    return ids


def _pad_token(model: nn.Module, given, stop: tuple) -> int:
    """What follows a row's end, and fills a left-padded row's new slots: the given pad token, else
    the loaded folder's generation config's, else the first end token (as transformers does), else 0."""
    if given is None:
        given = getattr(_generation_config(model), "pad_token_id", None)
    if given is None:
        return stop[0] if stop else 0
    pad = _token_id(given)
    if pad is None:
        raise ValueError(f"pad_token_id must be a token id (a whole number >= 0), got {given!r}")
    return pad


def _token_id(value) -> Optional[int]:
    """A token id as an int, from an int, a numpy integer, a 0-d tensor or a whole float (6.0, which
    transformers reads as 6); None for anything else (a bool, 6.5, -1, a string, a list)."""
    number = value.tolist() if hasattr(value, "tolist") else value
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    return None if isinstance(number, bool) or not isinstance(number, int) or number < 0 else number


def _decode_loop(model, how: _Generation, tokens, max_new_tokens, temperature, top_k, top_p, generator, compile,
                 stop: tuple, pad: int, context: Optional[int], streamer=None,
                 recompute_past: Optional[int] = None) -> torch.Tensor:
    """The prompt once, then one token a step, feeding the caches back. Past `context` tokens (as
    nanoGPT does) each step runs the last `context` tokens again. A `streamer` (transformers'
    protocol: `put` the prompt, then each new token [B], then `end`) sees each token as it comes."""
    if streamer is not None:
        streamer.put(tokens.cpu())
    size = context if context is not None else math.inf
    prompt = tokens[:, -context:] if context is not None else tokens
    out = model(prompt, use_cache=True) if how.caches else model(prompt)
    position = prompt.size(1)  # the tokens the cache holds
    def buffered(out) -> dict:  # the caches in buffers (of `context` slots), written in place (see _decode)
        return {past: _cache_buffers(getattr(out, new), axis, context, model, past)
                for (past, new), axis in zip(how.caches, how.buffer_axes)} if how.buffer_axes is not None else {}
    buffers = buffered(out)
    ends = torch.tensor(stop, device=tokens.device) if stop and tokens.size(0) else None  # (an empty batch runs on)
    done = torch.zeros(tokens.size(0), 1, dtype=torch.bool, device=tokens.device)
    made = [tokens]
    for step in _decoding(max_new_tokens, compile):
        logits = out if how.logits is None else getattr(out, how.logits)
        token = _sample(logits[:, -1, :], temperature, top_k, top_p, generator)
        if ends is not None:
            token, done = _ended(token, done, ends, pad)
        made.append(token)
        if streamer is not None:
            streamer.put(token[:, 0].cpu())
        if step + 1 == max_new_tokens or ends is not None and bool(done.all()):
            break  # the last token needs no step
        if not how.caches:
            seen = torch.cat(made, dim=1)
            out = model(seen[:, -context:] if context is not None else seen)
        elif position == size:  # the context is full: run its last tokens again
            out = model(torch.cat(made, dim=1)[:, -context:], use_cache=False)
        elif position == recompute_past:  # the cache's keys are stale from here: the sequence again, once
            out = model(torch.cat(made, dim=1), use_cache=True)
            position += 1
            buffers = buffered(out)
        elif buffers:
            out = _decode(model, token, position, context, **buffers)
            position += 1
        else:
            out = model(token, **{past: getattr(out, new) for past, new in how.caches}, use_cache=True)
            position += 1
    if streamer is not None:
        streamer.end()
    return torch.cat(made, dim=1)


def _ended(token: torch.Tensor, done: torch.Tensor, ends: torch.Tensor, pad: int) -> tuple:
    """A step's tokens [B, 1] with `pad` in the rows that ended before, and which rows have ended now
    (`ends`: the end tokens, on the tokens' device)."""
    token = token.masked_fill(done, pad)
    return token, done | torch.isin(token, ends)


def _generate_padded(tokens, mask, pad: int, run) -> torch.Tensor:
    """A left-padded batch: the rows of each prompt length run together (`run`, the decode loop),
    unpadded, so each row gets what its prompt alone gets; the result keeps the padding, as
    transformers' does, and rows that made fewer tokens are padded after them."""
    mask = mask.bool()
    lengths = mask.sum(dim=1)
    width = tokens.size(1)
    if not torch.equal(mask, torch.arange(width, device=mask.device) >= (width - lengths)[:, None]):
        raise ValueError("attention_mask must pad on the left (each row's zeros, then its ones), as a decoder's "
                         "batch is padded for generate; pass the tokenizer padding_side='left'")
    if bool((lengths == 0).any()):
        raise ValueError("a row of attention_mask has no tokens: each prompt needs at least one")
    pieces = []
    for length in sorted(set(lengths.tolist())):
        rows = (lengths == length).nonzero().flatten()
        pieces.append((rows, run(tokens[rows, width - length:])[:, length:]))
    new = max(p.size(1) for _, p in pieces)
    out = torch.full((tokens.size(0), width + new), pad, dtype=tokens.dtype, device=tokens.device)
    out[:, :width] = tokens
    for rows, made in pieces:
        out[rows, width:width + made.size(1)] = made
    return out


def _bucket(filled: int, size: int) -> int:
    """How many cache slots a decode step reads: the next power of two from 128 up, at most
    `size`. Attending over the filled prefix, not every slot, keeps a step's cost independent of
    the cache's size; a power of two keeps the compiled graphs few."""
    return min(size, max(128, 1 << (filled - 1).bit_length()))


def _decoding(count: int, asked: Optional[bool] = None):
    """range(count) for generate's decode loop: each step's decode (_decode) reads how many steps
    are left from here, to know whether compiling pays; `asked` is generate's `compile=`."""
    with _DecodeLoop(count) as loop, _compile_asked(asked):
        for step in range(count):
            loop.left = count - step - 1  # decode steps after this token: the last token needs none
            yield step


_MOST_TOKENS = 2**31  # what one generate call may return, B * (T + max_new_tokens): 16 GiB of int64


def _check_sampling(tokens, max_new_tokens, temperature, top_k, top_p) -> None:
    """generate's arguments, before any work: a bad one is a clear error, not a strange sample."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.size(1) == 0:
        raise ValueError(f"generate needs a prompt of at least one token, [B, T] with T >= 1, got {_described(tokens)}")
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise ValueError(f"generate needs a prompt of token ids (an integer tensor, int64), got {_described(tokens)}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if tokens.size(0) * (tokens.size(1) + max_new_tokens) > _MOST_TOKENS:
        raise ValueError(f"max_new_tokens={max_new_tokens} makes an output of {tokens.size(0)} x "
                         f"{tokens.size(1) + max_new_tokens} tokens, over the {_MOST_TOKENS:,} one call returns; "
                         "generate in pieces, feeding the output back")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature < math.inf:
        raise ValueError(f"temperature must be a finite number >= 0 (0 is greedy), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be None or an int >= 1, got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1):
        raise ValueError(f"top_p must be None or a number in (0, 1], got {top_p!r}")


def _sample(logits: torch.Tensor, temperature: float, top_k: Optional[int], top_p: Optional[float],
            generator: Optional[torch.Generator]) -> torch.Tensor:
    """One token per row of logits [B, V], as [B, 1]: greedy at temperature 0, else sampled. The
    logits less their row's largest are divided by the temperature, taken within float32's
    normal range: <= 0, with a 0, so the softmax is finite for any temperature > 0 (a tiny one
    leaves all the mass on the largest logits: greedy, a tie sampled), where dividing the logits
    themselves overflows to inf and gives NaN."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float()
    finfo = torch.finfo(logits.dtype)
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / min(max(temperature, finfo.tiny), finfo.max)
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        outside = probs.cumsum(dim=-1) - probs > top_p  # keep the smallest prefix whose mass reaches top_p
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(outside, float("-inf")))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)


def _decode(model: nn.Module, token: torch.Tensor, position: int, size: int, **caches):
    """One decode step of generate: model(token, **caches) over caches in preallocated buffers of
    `size` slots, `position` of them filled, attending over the first _bucket(...) slots (`size`
    None: the caches are recurrent states, with no slots). Given `decode=`, forward runs as
    Model._decode_step (see _by_compile_unit), compiled per bucket where that pays: this tells the
    step how many steps of the loop (_decoding) read the same slots. Through model(...), so that the
    model's forward hooks see each step."""
    length = _bucket(position + 1, size) if size is not None else None
    loop = _DecodeLoop.current()
    if loop is not None:
        loop.ahead = loop.left if length is None else min(loop.left, length - position)
    return model(token, **caches, use_cache=True, decode=_DecodeState(torch.tensor(position, device=token.device),
                                                                       length))
