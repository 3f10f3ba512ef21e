"""Every registry op: its torch lowering (through generated code) against its NumPy reference.

Each case is a one-line spec body over random inputs; the generated module (eager) and the
NumPy interpreter (float64) must agree to 1e-5 for several random shapes. Adding an op to the
registry without a case here fails `test_every_op_has_a_case`, and without a row in docs/language.md
section 9 `test_every_op_has_a_docs_row`.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from snf.check import Checker
from snf.compiler import analyze, generate_source
from snf.diagnostics import Reporter
from snf.frontend import parse
from snf.interpret import interpret
from snf.ops import all_ops
from snf.ops.registry import ScalarError
from snf.source import Source

# The recurrent ops' inputs: H heads of M channels, B and C in G groups of a state of N; the delta rule's
# KH key heads of M and H value heads of N, its decay per value head (g) or per value head and key channel (gk)
SSD_INPUTS = ("x : Tensor([B, T, H, M], float32)\n  dt : Tensor([B, T, H], float32)\n  al : Tensor([H], float32)\n"
              "  bm : Tensor([B, T, G, N], float32)\n  cm : Tensor([B, T, G, N], float32)\n  d : Tensor([H], float32)\n"
              "  db : Tensor([H], float32)\n  s : Tensor([B, H, M, N], float32)")
SSD_PARAMS = "param:\n  H : int = 4\n  G : int = 2\n"
DELTA_INPUTS = ("q : Tensor([B, T, KH, M], float32)\n  k : Tensor([B, T, KH, M], float32)\n"
                "  v : Tensor([B, T, H, N], float32)\n  g : Tensor([B, T, H], float32)\n  bt : Tensor([B, T, H], float32)\n"
                "  s : Tensor([B, H, M, N], float32)\n  gk : Tensor([B, T, H, M], float32)")
DELTA_PARAMS = "param:\n  H : int = 4\n  KH : int = 2\n"
LISTS = 'param:\n  scales : list[float, 3] = [0.5, 2, 3.0]\n  tags : list[str, 2] = ["x", "y"]\n  n_tags = len(tags)\n\n'

# op -> (inputs section, body expression producing `out`, out type). Dims B, T, N, M are run-time.
CASES = {
    "add": ("a : Tensor([B, T, N], float32)\n  b : Tensor([T, N], float32)", "a + b"),
    "sub": ("a : Tensor([B, N], float32)\n  b : Tensor([B, N], float32)", "a - b"),
    "mul": ("a : Tensor([B, N], float32)\n  b : Tensor([N], float32)", "a * b"),
    "div": ("a : Tensor([B, N], float32)\n  b : Tensor([B, N], float32)", "a / (b * b + 1.0)"),
    "pow": ("a : Tensor([B, N], float32)", "a ** 2"),
    "neg": ("a : Tensor([B, N], float32)", "-a"),
    "matmul": ("a : Tensor([B, T, N], float32)\n  b : Tensor([N, M], float32)", "a @ b"),
    "sqrt": ("a : Tensor([B, N], float32)", "sqrt(a * a + 1.0)"),
    "exp": ("a : Tensor([B, N], float32)", "exp(a)"),
    "log": ("a : Tensor([B, N], float32)", "log(a * a + 1.0)"),
    "tanh": ("a : Tensor([B, N], float32)", "tanh(a)"),
    "sigmoid": ("a : Tensor([B, N], float32)", "sigmoid(a * 4.0) + sigmoid(-800.0) + sigmoid(N * 0.5)"),
    "sin": ("a : Tensor([B, N], float32)", "sin(a * 3.0) + sin(0.5)"),
    "cos": ("a : Tensor([B, N], float32)", "cos(a * 3.0) * cos(N * 0.5)"),
    "gelu": ("a : Tensor([B, N], float32)", "gelu(a) + gelu(a, approximate=\"tanh\")"),
    "relu": ("a : Tensor([B, N], float32)", "relu(a)"),
    "silu": ("a : Tensor([B, N], float32)", "silu(a)"),
    "softcap": ("a : Tensor([B, N], float32)", "softcap(a * 10.0, 5.0) + softcap(a, cap=N * 0.5)"),
    "swiglu": ("a : Tensor([B, N], float32)\n  b : Tensor([B, N], float32)", "swiglu(a, b)"),
    "softmax": ("a : Tensor([B, T, N], float32)", "softmax(a, axis=1)"),
    "dropout": ("a : Tensor([B, N], float32)", "dropout(a, rate=0.5)"),
    "layer_norm": ("a : Tensor([B, T, N], float32)\n  w : Tensor([N], float32)\n  b : Tensor([N], float32)",
                   "layer_norm(a, weight=w, bias=b, eps=1e-5)"),
    "rms_norm": ("a : Tensor([B, T, N], float32)\n  w : Tensor([N], float32)", "rms_norm(a, weight=w, eps=1e-6)"),
    "linear": ("a : Tensor([B, T, N], float32)\n  w : Tensor([M, N], float32)\n  b : Tensor([M], float32)",
               "linear(a, weight=w, bias=b)"),
    "gather": ("t : Tensor([N, M], float32)\n  i : Tensor([B, T], int64)", "gather(t, i)"),
    "slice": ("a : Tensor([B, T, N], float32)", "slice(a, [:, 1:T, 0:1])"),
    "index": ("a : Tensor([B, T, N], float32)", "a[0, 1:T]"),
    "size": ("a : Tensor([B, T, N], float32)", "a * a.shape[1]"),
    "reshape": ("a : Tensor([B, T, N], float32)", "reshape(a, [B, T * N])"),
    "transpose": ("a : Tensor([B, T, N], float32)", "transpose(a, 0, 2)"),
    "concat": ("a : Tensor([B, T, N], float32)\n  b : Tensor([B, M, N], float32)", "concat([a, b], axis=1)"),
    "full": ("a : Tensor([B, N], float32)", "a + full([B, N], 0.5, float32)"),
    "assign": ("a : Tensor([B, T, N], float32)\n  b : Tensor([B, 1, N], float32)", "assign(a, [:, 0:1, :], b)"),
    "argmax": ("a : Tensor([B, T, N], float32)", "argmax(a, axis=-1)"),
    "sum": ("a : Tensor([B, T, N], float32)",
            "sum(a, axis=1, keepdim=True) + sum(a, 0) + cast(sum(cast(a * 3.0, int32), axis=1), float32)[0]"),
    "mean": ("a : Tensor([B, T, N], float32)", "mean(a, axis=-1) + mean(a, dim=2, keepdims=True)[:, :, 0]"),
    "max": ("a : Tensor([B, T, N], float32)",
            "max(a, axis=1) + cast(max(cast(a * 3.0, int64), axis=-2), float32) + max(a)[:, 0:1]"),
    "min": ("a : Tensor([B, T, N], float32)", "min(a, axis=1, keepdim=True) + min(a, axis=0)"),
    "flash_attention": ("q : Tensor([B, T, N, M], float32)\n  k : Tensor([B, T, N, M], float32)\n"
                        "  v : Tensor([B, T, N, M], float32)",
                        "flash_attention(q, k, v, causal=True, scale=0.3)"),
    "rope": ("a : Tensor([B, T, N, M], float32)", "rope(a, offset=3, base=100.0)"),
    "cross_entropy": ("a : Tensor([B, T, N], float32)\n  t : Tensor([B, T], int64)",
                      "cross_entropy(a, t, shift=True)"),
    "linear_cross_entropy": ("a : Tensor([B, T, M], float32)\n  w : Tensor([N, M], float32)\n  b : Tensor([N], float32)"
                             "\n  t : Tensor([B, T], int64)", "linear_cross_entropy(a, w, t, bias=b, shift=True)"),
    "top_k": ("a : Tensor([B, T, N], float32)", "top_k(a, 2) + top_k(a, k=1, axis=-1) + top_k(a, 1, axis=0)[:, :, 0:1]"),
    "top_k_indices": ("a : Tensor([B, T, N], float32)", "cast(top_k_indices(a, 2) + top_k_indices(a, 1, axis=0)[:, :, 0:1], float32)"),
    "one_hot": ("a : Tensor([B, N], float32)", "one_hot(top_k_indices(a, 1), E, dtype=float32) + "
                "cast(one_hot(top_k_indices(a, 2), E), float32)[:, 1:2, :]", "param:\n  E : int = 7\n"),
    "moe_experts": ("a : Tensor([B, T, N], float32)\n  r : Tensor([N, E], float32)\n  u : Tensor([E, M, N], float32)\n"
                    "  d : Tensor([E, N, M], float32)\n  g : Tensor([E, M, N], float32)",
                    "moe_experts(a, top_k_indices(a @ r, K), top_k(softmax(a @ r), K), up=u, down=d, gate=g) + "
                    "moe_experts(a, top_k_indices(a @ r, 1), top_k(sigmoid(a @ r), 1), up=u, down=d, act=\"gelu\")",
                    "param:\n  E : int = 4\n  K : int = 2\n"),
    # latent attention: H heads of 4 dims without RoPE and 2 with, a latent of 3 + 2, values of 3
    "latent_attention": ("q : Tensor([B, T, H, 6], float32)\n  c : Tensor([B, N, 5], float32)\n"
                         "  w : Tensor([H * 7, 3], float32)",
                         "latent_attention(q, concat([c, c], axis=1), w, rope_dim=2, v_dim=3, causal=True) + "
                         "latent_attention(q, c, w, rope_dim=2, v_dim=3, scale=0.5)", "param:\n  H : int = 4\n"),
    "cumsum": ("a : Tensor([B, T, N], float32)", "cumsum(a, axis=1) + cumsum(a, dim=-1)"),
    "item": ("a : Tensor([B, N], float32)", "a * scales[0] + (a * scales[2] if tags[1] == \"y\" else a)", LISTS),
    "len": ("a : Tensor([B, N], float32)", "a * len(scales) + a * n_tags", LISTS),
    "causal_conv1d": ("a : Tensor([B, T, N], float32)\n  w : Tensor([N, 1, 3], float32)\n  b : Tensor([N], float32)\n"
                      "  s : Tensor([B, 2, N], float32)",
                      "causal_conv1d(a, weight=w, bias=b, state=s) + causal_conv1d(a, w)"),
    "causal_conv1d_state": ("a : Tensor([B, T, N], float32)\n  w : Tensor([N, 1, 3], float32)\n"
                            "  s : Tensor([B, 2, N], float32)",
                            "causal_conv1d_state(a, weight=w, state=s) + causal_conv1d_state(a, w)"),
    "ssd_scan": (SSD_INPUTS, "ssd_scan(x, dt, -exp(al), bm, cm, D=d, dt_bias=db, state=s) + "
                             "ssd_scan(x, dt, -exp(al), bm, cm, dt_softplus=False, dt_min=0.1, dt_max=0.5)", SSD_PARAMS),
    "ssd_state": (SSD_INPUTS, "ssd_state(x, dt, -exp(al), bm, cm, D=d, dt_bias=db, state=s) + "
                              "ssd_state(x, dt, -exp(al), bm, cm)", SSD_PARAMS),
    "gated_delta_rule": (DELTA_INPUTS, "gated_delta_rule(q, k, v, -exp(g), sigmoid(bt), state=s) + "
                                       "gated_delta_rule(q, k, v, -exp(g), sigmoid(bt), scale=0.5, l2norm=False) + "
                                       "gated_delta_rule(q, k, v, -exp(gk), sigmoid(bt), state=s)",
                         DELTA_PARAMS),
    "gated_delta_state": (DELTA_INPUTS, "gated_delta_state(q, k, v, -exp(g), sigmoid(bt), state=s) + "
                                        "gated_delta_state(q, k, v, -exp(g), sigmoid(bt), scale=0.5, l2norm=False) + "
                                        "gated_delta_state(q, k, v, -exp(gk), sigmoid(bt), state=s)",
                          DELTA_PARAMS),
    # config-level logic and scalar arithmetic, exercised through a guarded assignment
    "eq": ("a : Tensor([B, N], float32)", "a * 2.0 if 3 == 3 else a"),
    "ne": ("a : Tensor([B, N], float32)", "a * 2.0 if 3 != 3 else a"),
    "lt": ("a : Tensor([B, N], float32)", "a * 2.0 if 2 < 3 else a"),
    "le": ("a : Tensor([B, N], float32)", "a * 2.0 if 3 <= 2 else a"),
    "gt": ("a : Tensor([B, N], float32)", "a * 2.0 if 3 > 2 else a"),
    "ge": ("a : Tensor([B, N], float32)", "a * 2.0 if 2 >= 3 else a"),
    "and": ("a : Tensor([B, N], float32)", "a * 2.0 if 1 < 2 and 2 < 3 else a"),
    "or": ("a : Tensor([B, N], float32)", "a * 2.0 if 1 > 2 or 2 < 3 else a"),
    "not": ("a : Tensor([B, N], float32)", "a * 2.0 if not 1 > 2 else a"),
    "floordiv": ("a : Tensor([B, N], float32)", "reshape(a, [B, (N * 2) // 2])"),
    "mod": ("a : Tensor([B, N], float32)", "a * ((N * 3) % 2 + 1)"),
    "where": ("a : Tensor([B, N], float32)\n  b : Tensor([N], float32)",
              "where(a > b, a, b * 2.0) + where(a <= 0.0, 1.0, a)"),
    "abs": ("a : Tensor([B, N], float32)", "abs(a) + cast(abs(cast(a * 3.0, int64)), float32)"),
    "minimum": ("a : Tensor([B, N], float32)\n  b : Tensor([N], float32)",
                "minimum(a, b) + minimum(a, 0.25) + minimum(0.5, a) * minimum(2, 3)"),
    "maximum": ("a : Tensor([B, N], float32)\n  b : Tensor([N], float32)",
                "maximum(a, b) + maximum(a, 0.25) + maximum(0.5, a) * maximum(2.0, 3)"),
    "clamp": ("a : Tensor([B, N], float32)", "clamp(a, min=-0.5, max=0.5) + clamp(a, max=0.1) + clamp(a, min=0)"),
    "cast": ("a : Tensor([B, N], float32)\n  b : Tensor([B, N], float32)",
             "cast(a < b, float32) + cast(cast(a * 3.0, int64), float32)"),
    "arange": ("a : Tensor([B, N], float32)",
               "a * cast(arange(N), float32) + arange(1, N + 1, dtype=float32) + cast(arange(2, 2), float32).shape[0]"),
    "expand": ("a : Tensor([B, N], float32)", "expand(reshape(a, [B, 1, N]), [3, B, 5, N])"),
    "repeat_interleave": ("a : Tensor([B, T, N], float32)", "repeat_interleave(a, 3, axis=1)"),
    "int": ("a : Tensor([B, N], float32)", "a * int(N * 1.5) + int(-2.5)"),
    "floor": ("a : Tensor([B, N], float32)", "floor(a * 3.0) + floor(N / 2) + floor(-2.5)"),
    "ceil": ("a : Tensor([B, N], float32)", "ceil(a * 3.0) + ceil(N / 2)"),
    "round": ("a : Tensor([B, N], float32)", "round(a * 3.0) + round(N / 2) + round(2.5)"),
}

# More forms of some ops: comparisons between tensors, the attention variants. Heads are params
# (grouped-query attention needs config-sized heads).
HEADS = "param:\n  H : int = 4\n  KVH : int = 2\n  W : int = 2\n"
MORE_CASES = {
    "lt (tensors)": ("a : Tensor([B, N], float32)\n  b : Tensor([N], float32)",
                     "where(a < b, 1.0, 0.0) + where(a == maximum(a, b), 1.0, 0.0) + where(a != b, 2.0, 0.0)"),
    "ge (tensors)": ("a : Tensor([B, N], float32)\n  b : Tensor([B, N], float32)",
                     "where(a >= b, a, b) + where(a > 0.5, 1.0, 0.0) + where(a <= b, 1.0, 0.0)"),
    "and (masks)": ("a : Tensor([B, N], float32)\n  b : Tensor([N], float32)",
                    "where(a > b and a < 1.0, a, 0.0) + where(a < -0.5 or b > 0.5 and not a > b, 1.0, 2.0)"
                    " + where(not (a > 0.0 or a < -1.0), 3.0, 0.0)"),
    "flash_attention (gqa)": ("q : Tensor([B, T, H, M], float32)\n  k : Tensor([B, T, KVH, M], float32)\n"
                              "  v : Tensor([B, T, KVH, M], float32)", "flash_attention(q, k, v, causal=True)", HEADS),
    "flash_attention (mqa, longer keys)": (
        "q : Tensor([B, T, H, M], float32)\n  k : Tensor([B, N, 1, M], float32)\n"
        "  v : Tensor([B, N, 1, M], float32)", "flash_attention(q, concat([k, k], axis=1), concat([v, v], axis=1), "
                                                "causal=True)", HEADS),
    "flash_attention (window, mask)": (
        "q : Tensor([B, T, H, M], float32)\n  k : Tensor([B, T, KVH, M], float32)\n"
        "  v : Tensor([B, T, KVH, M], float32)\n  m : Tensor([B, T], int64)",
        "flash_attention(q, k, v, causal=True, window=W, mask=m)", HEADS),
    # Llama 4's chunks: with a cache (longer keys, the chunks counted from the first key), a window, a
    # mask, a bias and the cap too
    "flash_attention (chunk)": (
        "q : Tensor([B, T, H, M], float32)\n  k : Tensor([B, N, KVH, M], float32)\n"
        "  v : Tensor([B, N, KVH, M], float32)\n  b : Tensor([H, 1, N], float32)\n  m : Tensor([B, N], int64)",
        "flash_attention(q, k, v, causal=True, chunk=W) + flash_attention(q, concat([k, k], axis=1), "
        "concat([v, v], axis=1), causal=True, chunk=3) + flash_attention(q, k, v, causal=True, chunk=W, "
        "window=3, mask=m, bias=reshape(b, [1, H, 1, N]), softcap=1.5)", HEADS),
    "flash_attention (softcap)": ("q : Tensor([B, T, H, M], float32)\n  k : Tensor([B, T, KVH, M], float32)\n"
                                  "  v : Tensor([B, T, KVH, M], float32)",
                                  "flash_attention(q * 4.0, k, v, causal=True, softcap=2.0)", HEADS),
    "flash_attention (softcap, window, mask, bias)": (
        "q : Tensor([B, T, H, M], float32)\n  k : Tensor([B, N, KVH, M], float32)\n"
        "  v : Tensor([B, N, KVH, M], float32)\n  b : Tensor([H, 1, N], float32)\n  m : Tensor([B, N], int64)",
        "flash_attention(q, k, v, causal=True, window=W, mask=m, bias=reshape(b, [1, H, 1, N]), scale=0.7, "
        "softcap=1.5) + flash_attention(q, k, v, softcap=N * 0.5)", HEADS),
    # gpt-oss's sinks: a logit per query head joins each softmax; with every other argument, and longer keys (a cache)
    "flash_attention (sinks)": ("q : Tensor([B, T, H, M], float32)\n  k : Tensor([B, T, KVH, M], float32)\n"
                                "  v : Tensor([B, T, KVH, M], float32)\n  s : Tensor([H], float32)",
                                "flash_attention(q, k, v, causal=True, sinks=s) + flash_attention(q, k, v, sinks=s * 3.0)"
                                " + flash_attention(q, k, v, causal=True, window=W, sinks=s - 2.0)", HEADS),
    "flash_attention (sinks, window, mask, bias, softcap)": (
        "q : Tensor([B, T, H, M], float32)\n  k : Tensor([B, N, KVH, M], float32)\n"
        "  v : Tensor([B, N, KVH, M], float32)\n  b : Tensor([H, 1, N], float32)\n  m : Tensor([B, N], int64)\n"
        "  s : Tensor([H], float32)",
        "flash_attention(q, k, v, causal=True, window=W, mask=m, bias=reshape(b, [1, H, 1, N]), scale=0.7, sinks=s) + "
        "flash_attention(q, k, v, causal=True, softcap=1.5, sinks=s) + flash_attention(q, k, v, mask=m, sinks=s)", HEADS),
    # gpt-oss's experts: biases, and the clamped SwiGLU (a limit low enough to clamp); Nemotron-H's squared ReLU
    "moe_experts (biases, clamped_swiglu, relu2)": (
        "a : Tensor([B, T, N], float32)\n  r : Tensor([N, E], float32)\n  u : Tensor([E, M, N], float32)\n"
        "  d : Tensor([E, N, M], float32)\n  g : Tensor([E, M, N], float32)\n  bg : Tensor([E, M], float32)\n"
        "  bu : Tensor([E, M], float32)\n  bd : Tensor([E, N], float32)",
        "moe_experts(a, top_k_indices(a @ r, K), softmax(top_k(a @ r, K)), up=u, down=d, gate=g, gate_bias=bg, "
        "up_bias=bu, down_bias=bd, act=\"clamped_swiglu\", alpha=1.702, limit=0.5) + "
        "moe_experts(a, top_k_indices(a @ r, 1), top_k(sigmoid(a @ r), 1), up=u, down=d, up_bias=bu, down_bias=bd, "
        "act=\"relu\") + moe_experts(a, top_k_indices(a @ r, K), top_k(sigmoid(a @ r), K), up=u, down=d, act=\"relu2\")",
        "param:\n  E : int = 4\n  K : int = 2\n"),
    "rope (linear, partial, interleaved)": (
        "a : Tensor([B, T, N, 8], float32)",
        "rope(a, offset=3, scaling=\"linear\", factor=2.0, rotary_dim=4) + rope(a, interleaved=True, base=50.0)"
        " + rope(a, rotary_dim=6, interleaved=True, offset=T)"),
    "rope (dynamic)": ("a : Tensor([B, T, N, 8], float32)",
                       "rope(a, offset=3, base=100.0, scaling=\"dynamic\", factor=4.0, original_max_position=4)"),
    "rope (llama3)": ("a : Tensor([B, T, N, 16], float32)",
                      "rope(a, offset=5, scaling=\"llama3\", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, "
                      "original_max_position=64, rotary_dim=12)"),
    "rope (yarn)": ("a : Tensor([B, T, N, 16], float32)",
                    "rope(a, offset=2, base=500.0, scaling=\"yarn\", factor=4.0, original_max_position=32) + "
                    "rope(a, scaling=\"yarn\", factor=8.0, original_max_position=16, beta_fast=16.0, beta_slow=2.0, "
                    "mscale=0.707, mscale_all_dim=0.707, truncate=False, interleaved=True) + "
                    "rope(a, scaling=\"yarn\", factor=2.0, original_max_position=16, attention_factor=1.5)"),
    "flash_attention (bias)": (
        "q : Tensor([B, T, H, M], float32)\n  k : Tensor([B, N, H, M], float32)\n"
        "  v : Tensor([B, N, H, M], float32)\n  b : Tensor([H, 1, N], float32)\n  m : Tensor([B, N], int64)",
        "flash_attention(q, k, v, bias=reshape(b, [1, H, 1, N]), mask=m, scale=1.0)", HEADS),
}


def _spec(op: str) -> str:
    inputs, expr, params = ((CASES.get(op) or MORE_CASES[op]) + ("",))[:3]
    return f"{params}input:\n  {inputs}\n\nlet out = {expr}\n"


def _compile(op: str):
    text = _spec(op)
    # first pass: the type of `out`, read from the checker (the spec has no output section yet)
    source = Source.from_text(f"{op}.snf", text)
    reporter = Reporter(source)
    checker = Checker(parse(source, reporter), reporter)
    checker.run()
    out = checker.scopes[0].names["out"].ty
    decl = "Tensor([" + ", ".join(str(d) for d in out.shape) + f"], {out.dtype})"
    full = text.replace("\nlet out", f"\noutput:\n  out : {decl}\n\nlet out")
    res = analyze(Source.from_text(f"{op}.snf", full))
    assert res.ok, [d.message for d in res.diagnostics]
    ns: dict = {}
    exec(compile(generate_source(res), f"<{op}>", "exec"), ns)
    return res.model, ns["Model"]


def _inputs(model, rng, sizes):
    out = {}
    sizes = {**sizes, **{c.name: c.default for c in model.config}}
    for i in model.inputs:
        shape = tuple(d.evaluate(sizes) for d in i.ty.shape)
        if i.ty.dtype == "int64":
            out[i.name] = rng.integers(0, sizes["N"], size=shape)
        else:
            out[i.name] = rng.standard_normal(shape)
    return out


def test_every_op_has_a_case():
    assert set(CASES) == set(all_ops())


def test_every_op_has_a_docs_row():
    """docs/language.md section 9 names every op in the first cell of a table row: as a call
    (`silu(x)`: not `min` from `clamp(x, min=None)`) or alone (`add`, `eq ne lt`)."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "language.md").read_text(encoding="utf-8")
    section = text[text.index("## 9. Operations"):text.index("## 10. ")]
    cells = [line.split(" | ")[0] for line in section.splitlines() if line.startswith("| ")]
    codes = [code for cell in cells for code in re.findall(r"`([^`]*)`", cell)]
    named = {word for code in codes for word in (re.findall(r"^\w+(?=\()", code) if "(" in code
                                                  else re.findall(r"\w+", code))}
    assert not set(all_ops()) - named, f"ops with no row in docs/language.md 9: {sorted(set(all_ops()) - named)}"


@pytest.mark.parametrize("op", sorted(CASES) + sorted(MORE_CASES))
def test_op_lowering_matches_numpy(op, monkeypatch):
    monkeypatch.setenv("SNF_COMPILE", "0")
    model, Model = _compile(op)
    module = Model().eval()
    rng = np.random.default_rng(sum(map(ord, op)))
    for sizes in ({"B": 2, "T": 3, "N": 4, "M": 6}, {"B": 1, "T": 5, "N": 2, "M": 8}, {"B": 3, "T": 1, "N": 6, "M": 2}):
        if op in ("slice", "cross_entropy", "linear_cross_entropy") and sizes["T"] < 2:
            continue
        feeds = _inputs(model, rng, sizes)
        ref = interpret(model, {}, feeds)["out"]
        got = module(**{k: torch.from_numpy(v) for k, v in feeds.items()}).detach().numpy()
        assert got.shape == np.shape(ref), (op, sizes)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5, err_msg=f"{op} {sizes}")


def test_a_query_that_sees_no_key_gives_zeros(monkeypatch):
    """Every key padding, or (causal, bottom-right) a query before the first key: zeros, in torch and
    in the NumPy reference alike (transformers' default SDPA attention gives zeros too)."""
    monkeypatch.setenv("SNF_COMPILE", "0")
    text = ("input:\n  q : Tensor([B, T, 2, 4], float32)\n  k : Tensor([B, N, 2, 4], float32)\n"
            "  m : Tensor([B, N], int64)\noutput:\n  y : Tensor([B, T, 2, 4], float32)\n"
            "  z : Tensor([B, T, 2, 4], float32)\n"
            "let y = flash_attention(q, k, k, mask=m)\nlet z = flash_attention(q, k, k, causal=True)\n")
    res = analyze(Source.from_text("empty_rows.snf", text))
    assert res.ok, [d.message for d in res.diagnostics]
    ns: dict = {}
    exec(compile(generate_source(res), "<empty_rows>", "exec"), ns)
    rng = np.random.default_rng(0)
    feeds = {"q": rng.standard_normal((2, 5, 2, 4)), "k": rng.standard_normal((2, 3, 2, 4)),
             "m": np.array([[1, 0, 1], [0, 0, 0]])}  # the second sequence is all padding
    ref = interpret(res.model, {}, feeds)
    got = ns["Model"]()(**{n: torch.from_numpy(v) for n, v in feeds.items()})
    for name in ("y", "z"):
        np.testing.assert_allclose(getattr(got, name).numpy(), ref[name], atol=1e-6, err_msg=name)
    assert not np.isnan(ref["y"]).any() and (ref["y"][1] == 0).all() and (ref["y"][0] != 0).all()
    assert (ref["z"][:, :2] == 0).all() and (ref["z"][:, 2:] != 0).all()  # 5 queries, 3 keys


@pytest.mark.parametrize("window", [None, 2])
def test_attention_sinks_gradients(window):
    """flash_attention(sinks=) in float64: the lowering (_sink_attention) against the NumPy reference,
    and its gradients (q, k, v and the sinks) against finite differences, with grouped heads, keys
    longer than the queries (a cache), a window, and a padding mask that hides every key of a query;
    and a decode step over a preallocated cache against the reference."""
    from snf.ops.attention import np_attention
    from snf.runtime.attention import _sink_attention
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(shape, generator=g, dtype=torch.float64, requires_grad=True)
               for shape in ((2, 4, 3, 5), (2, 2, 6, 5), (2, 2, 6, 5)))  # [B, H, T, hd]: 4 query heads, 2 kv heads
    sinks = torch.randn(4, generator=g, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 1, 1]])  # row 1: its first query sees no key (window 2)

    def run(q, k, v, sinks):
        return _sink_attention(q, k, v, mask, causal=True, window=window, sinks=sinks)
    got = run(q, k, v, sinks)
    ref = np_attention(*(t.detach().transpose(1, 2).numpy() for t in (q, k, v)), causal=True,
                        mask=mask.numpy(), window=window, sinks=sinks.detach().numpy())
    np.testing.assert_allclose(got.detach().transpose(1, 2).numpy(), ref, rtol=1e-12, atol=1e-12)
    if window is not None:
        assert (got[1, :, 0] == 0).all()  # a query that sees no key gives zeros
    assert torch.autograd.gradcheck(run, (q, k, v, sinks))
    # a decode step of generate: one query, the keys in a preallocated cache of 8 slots, 5 filled (the
    # helper folds the query heads onto their key/value head there, rather than repeat the cache)
    from snf.runtime.writes import _DecodeState
    cache = [torch.cat([t.detach()[:, :, :5], torch.randn(2, 2, 3, 5, generator=g, dtype=torch.float64)], dim=2)
             for t in (k, v)]
    step = _sink_attention(q.detach()[:, :, -1:], *cache, None, causal=True, window=window, sinks=sinks.detach(),
                           decode=_DecodeState(torch.tensor(4), 8))
    ref = np_attention(*(t.transpose(1, 2).numpy() for t in (q.detach()[:, :, -1:], k.detach()[:, :, :5],
                                                               v.detach()[:, :, :5])),
                        causal=True, window=window, sinks=sinks.detach().numpy())
    np.testing.assert_allclose(step.transpose(1, 2).numpy(), ref, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- an op on numbers

NUMBERS = (7, -7, 2, 0, 3.5, -0.5, 0.0, 1e300)
FAILED = object()  # Python has no real number for it: the op's `scalar` must raise ScalarError


def _on_numbers(compute, finite: bool):
    """What Python (or NumPy) computes: FAILED for a division by zero, an overflow, a complex number
    (and, `finite`, an inf or nan, from finite numbers)."""
    try:
        with np.errstate(all="ignore"):
            out = compute()
    except (ZeroDivisionError, OverflowError, ValueError, TypeError):
        return FAILED
    if isinstance(out, complex) or finite and isinstance(out, (float, np.floating)) and not np.isfinite(out):
        return FAILED
    return out


def _scalar(op, *args):
    try:
        return op.scalar(*args)
    except ScalarError:
        return FAILED


@pytest.mark.parametrize("name", sorted(n for n, op in all_ops().items() if op.symbol is not None))
def test_an_operators_scalar_is_pythons(name):
    """An operator computes on numbers what Python writes with its symbol (`-7 // 2`, `not 0`), or
    fails where Python does: folding, the mapping language and checkpoint keys compute with `scalar`,
    the module with Python. (`1e300 * 1e300` is inf to both: folding reports that, fold._check.)"""
    op = all_ops()[name]
    arity = len(op.params)
    for args in itertools.product(NUMBERS, repeat=arity):
        text = f"{op.symbol} a" if arity == 1 else f"a {op.symbol} b"
        want = _on_numbers(lambda: eval(text, {}, dict(zip("ab", args))), finite=False)  # noqa: S307
        if op.scalar is None:  # Python has no such number either (`@` of numbers)
            assert want is FAILED, f"{name} has no scalar, but Python computes `{text}` of {args}"
            continue
        got = _scalar(op, *args)
        assert got is want or got == want and type(got) is type(want), (text, args, got, want)


@pytest.mark.parametrize("name", sorted(n for n, op in all_ops().items() if op.symbol is None and op.scalar))
def test_a_functions_scalar_is_its_numpy_reference(name):
    """A function of numbers (`sqrt`, `round`) computes what its NumPy reference does, and fails where
    that has no finite number."""
    op = all_ops()[name]
    for args in itertools.product(NUMBERS, repeat=len(op.params)):
        want = _on_numbers(lambda: op.numpy(*map(np.float64, args)), finite=True)
        got = _scalar(op, *args)
        if want is FAILED:
            assert got is FAILED, (name, args, got)
        else:
            assert got == pytest.approx(float(want), rel=1e-12), (name, args, got, want)
