"""Attention as generated modules run it, where one SDPA call cannot say it all: masks (bottom-right
causal, a sliding window, padding, chunks), an additive bias, Gemma 2's soft cap, gpt-oss's sinks,
and DeepSeek's latent attention with its absorbed plan. The op registry (snf/ops/attention.py,
snf/ops/latent.py) emits calls to these; they are tested as they are (tests/test_runtime.py,
tests/test_ops.py, tests/test_latent_attention.py).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from .writes import _DecodeState


def _attention(q, k, v, mask, causal: bool, dropout_p: float = 0.0, scale: Optional[float] = None,
               decode: Optional[_DecodeState] = None, window: Optional[int] = None,
               bias: Optional[torch.Tensor] = None):
    """SDPA over [B, H, T, hd] with a [B, T_keys] padding mask, a bottom-right causal mask, a sliding
    `window` (query i sees keys in (i - window, i]) and an additive `bias` [B, H, T, T_keys]. k and v
    may have fewer heads than q (grouped-query attention). A query that sees no key gives zeros.

    In a decode step (`decode`), the keys are a preallocated cache: key j is visible to query i when
    j <= decode.position + i (later slots are empty)."""
    tq, tk = q.size(-2), k.size(-2)
    # a Python branch, not the comparison itself: a head count may be symbolic in a compiled block (T5's),
    # and SDPA refuses a symbolic bool
    gqa = True if q.size(1) != k.size(1) else False
    if decode is None and mask is None and window is None and bias is None \
            and (not causal or tq == 1 or tq == tk):
        # no mask needed: one query (a decode step) sees every key; equal lengths is plain causal
        if causal and tq > 1:  # a Python branch, so compiled code never sees a symbolic bool
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale,
                                                  enable_gqa=gqa)
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale, enable_gqa=gqa)
    allowed = _visible_keys(q, k, mask, causal, decode, window)
    if decode is not None and tq == 1 and bias is None and dropout_p == 0.0 and q.device.type == "cpu" \
            and torch.compiler.is_compiling():
        # a compiled decode step on the CPU: one query over a buffer of mostly empty slots. Written
        # out, it fuses with its neighbours and beats an SDPA call there (benchmarks/README.md)
        return _written_attention(q, k, v, mask, causal, scale=scale, decode=decode, window=window)
    scores_mask = allowed
    if bias is not None:
        bias = bias.to(q.dtype)
        scores_mask = bias if allowed is None else bias.masked_fill(~allowed, float("-inf"))
    if gqa and scores_mask is not None and q.device.type == "cuda":
        # masked grouped-query SDPA falls back to the math kernel on CUDA: repeat the k/v heads instead
        k, v = (t.repeat_interleave(q.size(1) // t.size(1), dim=1) for t in (k, v))
        gqa = False
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=scores_mask, dropout_p=dropout_p, scale=scale,
                                         enable_gqa=gqa)
    if mask is not None or causal and tk < tq:
        # a query that sees no key (all padding, or before the first key) gets zeros on every backend
        out = out.masked_fill(~allowed.any(-1, keepdim=True), 0.0)
    return out


def _visible_keys(q, k, mask, causal: bool, decode: Optional[_DecodeState] = None,
                  window: Optional[int] = None, chunk: Optional[int] = None) -> Optional[torch.Tensor]:
    """Which keys each query sees, a bool [B or 1, 1, T, T_keys] (None: every key), for _attention;
    with `chunk` (causal), only those of the query's own chunk of positions."""
    tq, tk = q.size(-2), k.size(-2)
    allowed = None
    if causal:  # key j is visible to query i (at position first + i) when j <= first + i
        first = decode.position if decode is not None else tk - tq
        rows = first + torch.arange(tq, device=q.device)[:, None]
        cols = torch.arange(tk, device=q.device)[None, :]
        allowed = cols <= rows if window is None else (cols <= rows) & (cols > rows - window)
        if chunk is not None:
            allowed = allowed & (cols // chunk == rows // chunk)
    if mask is not None:
        keep = (mask != 0)[:, None, None, :]
        allowed = keep if allowed is None else allowed & keep
    return allowed


def _softcapped_attention(q, k, v, mask, causal: bool, dropout_p: float = 0.0, scale: Optional[float] = None,
                          decode: Optional[_DecodeState] = None, window: Optional[int] = None,
                          bias: Optional[torch.Tensor] = None, *, softcap: float) -> torch.Tensor:
    """_attention with Gemma 2's logit soft-capping: the scores q k^T * scale are capped (softcap *
    tanh(scores / softcap)) before the bias and the masks, as transformers computes it. SDPA has no
    place for the cap."""
    return _written_attention(q, k, v, mask, causal, dropout_p, scale, decode, window, bias, softcap=softcap)


def _chunked_attention(q, k, v, mask, chunk: int, dropout_p: float = 0.0, scale: Optional[float] = None,
                       decode: Optional[_DecodeState] = None, window: Optional[int] = None,
                       bias: Optional[torch.Tensor] = None, softcap: Optional[float] = None) -> torch.Tensor:
    """Causal attention in chunks of `chunk` positions (Llama 4's chunked local attention): query i,
    at position first + i, sees the keys j <= first + i of its own chunk, j // chunk == (first + i)
    // chunk, within the padding `mask` and `window`. The keys it sees go to _attention (or, with
    `softcap`, _softcapped_attention) as a -inf bias beside `bias`; a query that sees none (all
    padding, or before the first key) attends to every key there, so that nothing is nan, and gives
    zeros."""
    allowed = _visible_keys(q, k, mask, True, decode, window, chunk)
    seen = allowed.any(-1, keepdim=True)
    hidden = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device).masked_fill(~(allowed | ~seen), float("-inf"))
    bias = hidden if bias is None else bias.to(q.dtype) + hidden
    if softcap is not None:
        out = _softcapped_attention(q, k, v, None, False, dropout_p=dropout_p, scale=scale, bias=bias, softcap=softcap)
    else:
        out = _attention(q, k, v, None, False, dropout_p=dropout_p, scale=scale, bias=bias)
    return out.masked_fill(~seen, 0.0)


def _sink_attention(q, k, v, mask, causal: bool, dropout_p: float = 0.0, scale: Optional[float] = None,
                    decode: Optional[_DecodeState] = None, window: Optional[int] = None,
                    bias: Optional[torch.Tensor] = None, softcap: Optional[float] = None, *,
                    sinks: torch.Tensor) -> torch.Tensor:
    """_attention with gpt-oss's attention sinks: a learned logit per query head (`sinks`, [H]) joins
    each query's softmax as one more column, whose share is then dropped, so the keys' weights sum to
    less than 1. SDPA has no place for the sink."""
    return _written_attention(q, k, v, mask, causal, dropout_p, scale, decode, window, bias, softcap, sinks)


def _written_attention(q, k, v, mask, causal: bool, dropout_p: float = 0.0, scale: Optional[float] = None,
                       decode: Optional[_DecodeState] = None, window: Optional[int] = None,
                       bias: Optional[torch.Tensor] = None, softcap: Optional[float] = None,
                       sinks: Optional[torch.Tensor] = None) -> torch.Tensor:
    """_attention written out, as transformers' eager attention computes it: the scores, a `softcap`, the
    bias, the masks of _attention, a float32 softmax (with each head's sink logit as one more column,
    its share dropped, where `sinks` [H] is given). A query that sees no key gives zeros."""
    b, h, tq, hd = q.shape
    kvh, tk = k.size(1), k.size(2)
    every_key = decode is None and mask is None and window is None and (not causal or tq == 1)
    allowed = None if every_key else _visible_keys(q, k, mask, causal, decode, window)
    if decode is None and tq != 1:  # grouped-query attention: each key/value head repeated for its group
        k, v = (t.repeat_interleave(h // kvh, dim=1) for t in (k, v))
        kvh = h
    # one query, or a decode step: each group of query heads folds onto its key/value head instead,
    # reading the cache once rather than copying it per query head (10x faster for a token over 4096
    # keys); elsewhere these reshapes change nothing (folding there, torch.export cannot keep the
    # length dynamic)
    scores = (q.reshape(b, kvh, h // kvh * tq, hd) @ k.transpose(-1, -2)).reshape(b, h, tq, tk)
    scores = scores * (hd ** -0.5 if scale is None else scale)
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    if bias is not None:
        scores = scores + bias.to(scores.dtype)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    wide = torch.promote_types(scores.dtype, torch.float32)
    if sinks is None:
        probs = scores.to(wide).softmax(-1)
        if allowed is not None:  # a row with no key is all -inf: its softmax is nan
            probs = probs.masked_fill(~allowed.any(-1, keepdim=True), 0.0)
    else:  # a row with no key: all the share goes to the sink
        sink = sinks.to(wide).reshape(1, h, 1, 1).expand(b, h, tq, 1)
        probs = torch.cat((scores.to(wide), sink), dim=-1).softmax(-1)[..., :tk]
    if dropout_p > 0.0:
        probs = F.dropout(probs, p=dropout_p)
    return (probs.to(v.dtype).reshape(b, kvh, h // kvh * tq, tk) @ v).reshape(b, h, tq, v.size(-1))


def _latent_attention(q, latent, kv_weight, rope_dim: int, v_dim: int, causal: bool, scale: Optional[float] = None,
                      decode: Optional[_DecodeState] = None, absorb: Optional[bool] = None) -> torch.Tensor:
    """Multi-head latent attention (snf/ops/latent.py) over q [B, T, H, nope + rope_dim] and a latent
    [B, T_keys, rank + rope_dim]; [B, T, H, v_dim]. Two plans, one result. Expanded: each key position's
    latent through kv_weight into every head's key and value, then attention (prefill, training). Absorbed:
    the key rows of kv_weight folded into the queries and the value rows applied after, so attention runs
    over the latent itself as one key/value head shared by every query head; it skips expanding each
    key for every head, and is taken where that costs more than the queries' longer dot products (a
    decode step). The choice (`absorb` None): absorbed for one query, where its FLOPs per key position
    are the fewer; it reads no cache length, so a compiled decode step meets no new guard as its cache
    grows, and a prompt's dynamic length only `T == 1` (torch.export keeps it dynamic)."""
    b, tq, heads, width = q.shape
    rank = latent.size(-1) - rope_dim
    nope = width - rope_dim
    scale = width ** -0.5 if scale is None else scale
    w = kv_weight.view(heads, nope + v_dim, rank)
    if absorb is None:  # the FLOPs per key position of each plan, less what they share, for one query
        absorb = tq == 1 and 2 * rank - nope - v_dim < rank * (nope + v_dim)
    if absorb:
        q_latent = torch.matmul(q[..., :nope].transpose(1, 2), w[:, :nope])  # [B, H, T, rank]; the weight unmoved
        queries = torch.cat([q_latent, q[..., nope:].transpose(1, 2)], dim=-1)  # [B, H, T, rank + rope_dim]
        # every head against the latent as one shared key/value head, the cache read as it lies (SDPA
        # takes its math path here and copies the cache once per head)
        keys = latent.unsqueeze(1)
        out = _written_attention(queries, keys, keys[..., :rank], None, causal, scale=scale, decode=decode)
        return torch.matmul(out, w[:, nope:].transpose(1, 2)).transpose(1, 2)
    s = latent.size(1)
    kv = (latent[..., :rank] @ kv_weight.t()).view(b, s, heads, nope + v_dim)
    k = torch.cat([kv[..., :nope], latent[..., rank:].unsqueeze(2).expand(b, s, heads, rope_dim)], dim=-1)
    out = _attention(q.transpose(1, 2), k.transpose(1, 2), kv[..., nope:].transpose(1, 2), None, causal, scale=scale,
                     decode=decode)
    return out.transpose(1, 2)
