"""Multi-head latent attention (snf/ops/latent.py) and DeepSeek-V3 (specs/deepseek_v3.snf): both plans
of the op against its NumPy reference in float64, gradients included; the spec against transformers
in the settings the family test's config leaves at their defaults (YaRN with its softmax scale, no
query bottleneck, unnormalised weights, one group); the cache holds the latent; `snfc stats` says
what it keeps and what expanded keys and values would cost."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from snf.ops.latent import _np_latent_attention
from snf.runtime.attention import _latent_attention

import snf
from conftest import REPO
from test_from_pretrained import _close, _round_trip, saved, tokens
from test_stats import _model_ir
from snf.compiler import planned

RANK, ROPE, NOPE, V, HEADS = 6, 4, 5, 3, 2


def _case(tq: int, tk: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, tq, HEADS, NOPE + ROPE, generator=g, dtype=torch.float64)
    latent = torch.randn(2, tk, RANK + ROPE, generator=g, dtype=torch.float64)
    w = torch.randn(HEADS * (NOPE + V), RANK, generator=g, dtype=torch.float64)
    return q, latent, w


@pytest.mark.parametrize("absorb", [False, True])
@pytest.mark.parametrize("tq, tk, causal", [(3, 3, True), (1, 6, True), (2, 7, True), (4, 5, False), (5, 3, True)])
def test_both_plans_match_the_numpy_reference(absorb, tq, tk, causal):
    q, latent, w = _case(tq, tk)
    want = _np_latent_attention(q.numpy(), latent.numpy(), w.numpy(), ROPE, V, causal=causal, scale=0.4)
    got = _latent_attention(q, latent, w, ROPE, V, causal, scale=0.4, absorb=absorb)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("absorb", [False, True])
def test_both_plans_have_the_reference_gradients(absorb):
    q, latent, w = (t.requires_grad_() for t in _case(3, 5, seed=1))
    assert torch.autograd.gradcheck(lambda *a: _latent_attention(*a, ROPE, V, True, absorb=absorb), (q, latent, w))
    # and the two plans' gradients agree with each other
    grads = [torch.autograd.grad(_latent_attention(q, latent, w, ROPE, V, True, absorb=a).square().sum(),
                                 (q, latent, w)) for a in (False, True)]
    for x, y in zip(*grads):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)


VARIANTS = {
    # YaRN: the rotary frequencies and the softmax scaled by mscale(factor, mscale_all_dim)^2
    "yarn": dict(rope_parameters={"rope_type": "yarn", "rope_theta": 5000.0, "factor": 4.0,
                                  "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0,
                                  "mscale": 0.9, "mscale_all_dim": 0.8}),
    # the routing weights neither renormalised nor grouped
    "one_group": dict(norm_topk_prob=False, n_group=1, topk_group=1, routed_scaling_factor=1.0),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_deepseek_v3_settings_match_transformers(tmp_path, variant):
    hf, folder = saved(tmp_path, "deepseek_v3", **VARIANTS[variant])
    model = snf.from_pretrained(folder)
    assert model.config.yarn == (variant == "yarn")
    idx = tokens(hf.config.vocab_size, t=20)  # past original_max_position_embeddings
    with torch.no_grad():
        assert _close(model(idx).logits, hf(idx).logits)
    idx = tokens(hf.config.vocab_size, t=7)
    want = hf.generate(idx, attention_mask=torch.ones_like(idx), max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(idx, 8, temperature=0), want)

    def agree(mine, theirs):  # transformers builds the same model from what snfc writes
        assert _close(mine(idx).logits, theirs(idx).logits)
    _round_trip(tmp_path / "again", "deepseek_v3", agree, **VARIANTS[variant])


def test_a_null_query_rank_is_refused(tmp_path):
    """q_lora=False (DeepSeek-V2-Lite's one query projection) is the spec's; from_pretrained refuses a
    null q_lora_rank by name, since a saved config could not say it (transformers reads an absent key as 1536)."""
    from snf.pretrained import PretrainedError
    _, folder = saved(tmp_path, "deepseek_v3", q_lora_rank=None)
    with pytest.raises(PretrainedError, match="q_lora_rank"):
        snf.from_pretrained(folder)


def test_the_cache_holds_the_latent_and_a_cached_step_equals_the_whole(tmp_path):
    hf, folder = saved(tmp_path, "deepseek_v3")
    model = snf.from_pretrained(folder)
    cfg = model.config
    idx = tokens(hf.config.vocab_size, t=9)
    with torch.no_grad():
        whole = model(idx).logits
        first = model(idx[:, :8], use_cache=True)
        step = model(idx[:, 8:], past_latent=first.new_latent)
    # kv_rank + rope_dim values per token and layer, not heads x (key + value)
    assert step.new_latent.shape == (cfg.n_layer, 2, 9, cfg.kv_rank + cfg.rope_dim)
    assert _close(step.logits[:, 0], whole[:, 8])


def test_stats_reports_the_latent_cache_and_what_expanded_would_cost():
    from snf.stats import stats
    plans = planned(_model_ir(REPO / "specs" / "deepseek_v3.snf"))
    s = {q.key: q.value for q in stats(plans, {"B": 1, "T": 1}).quantities}
    # DeepSeek-V3: 61 layers of 512 + 64 float32 values per token; expanded, 128 heads x (192 + 128)
    assert s["kv_cache_bytes"] == 61 * (512 + 64) * 4
    assert s["kv_cache_bytes_expanded"] == 61 * 128 * (192 + 128) * 4
    assert 71 < s["kv_cache_bytes_expanded"] / s["kv_cache_bytes"] < 72


# A small spec in the paper's form: the keys and values expanded from a cached latent by one weight.
PAPER = """\
param:
  vocab_size : int = 11
  n_embd : int = 8
  n_head : int = 2
  nope_dim : int = 3
  rope_dim : int = 2
  v_dim : int = 4
  kv_rank : int = 5
  H = n_head
  latent_dim = kv_rank + rope_dim
input:
  idx : Tensor([B, T], int64)
  past_latent : Tensor([B, T_past, latent_dim], float32)?
parameter:
  wte : Tensor([vocab_size, n_embd], float32)
  w_q : Tensor([H * (nope_dim + rope_dim), n_embd], float32)
  w_a : Tensor([latent_dim, n_embd], float32)
  w_kv : Tensor([H * (nope_dim + v_dim), kv_rank], float32)
output:
  y : Tensor([B, T, H, v_dim], float32)
  new_latent : Tensor([B, T_past + T, latent_dim], float32)
let x = gather(wte, idx)
let q = reshape(linear(x, weight=w_q), [B, T, H, nope_dim + rope_dim])
let latent = linear(x, weight=w_a)
let new_latent = concat([past_latent, latent], axis=1) if past_latent exists else latent
let kv = reshape(linear(new_latent[:, :, 0:kv_rank], weight=w_kv), [B, T_past + T, H, nope_dim + v_dim])
let k = concat([kv[:, :, :, 0:nope_dim],
                expand(reshape(new_latent[:, :, kv_rank:latent_dim], [B, T_past + T, 1, rope_dim]),
                       [B, T_past + T, H, rope_dim])], axis=3)
let y = flash_attention(q, k, kv[:, :, :, nope_dim:nope_dim + v_dim], causal=True, scale=0.5)
"""

NEAR_MISSES = {  # each computes other keys or values than latent_attention would: left as written
    "values from the key rows": ("kv[:, :, :, nope_dim:nope_dim + v_dim], causal", "kv[:, :, :, 0:v_dim], causal"),
    "the rope part first": ("let k = concat([kv[:, :, :, 0:nope_dim],\n                expand(",
                            "let k = concat([expand("),
    "a mask": ("causal=True, scale=0.5)", "causal=True, scale=0.5, window=2)"),
    # the expansion read after a change the latent form would not see
    "the latent rebound after the expansion": ("let y = flash_attention",
                                               "new_latent = new_latent * 2.0\nlet y = flash_attention"),
    "a write into the expansion": ("let k = concat(", "kv[:, :, :, 0:nope_dim] = full([B, T_past + T, H, nope_dim], "
                                   "0.0, float32)\nlet k = concat("),
}


def _paper(tmp_path, text: str, name: str):
    from conftest import fresh_module, snfc, write_spec
    spec = write_spec(tmp_path, text, f"{name}.snf")
    code, _, err = snfc("compile", str(spec), "-o", str(tmp_path / f"{name}.py"))
    assert code == 0, err
    return (tmp_path / f"{name}.py").read_text(encoding="utf-8"), fresh_module(tmp_path / f"{name}.py", name)


def _interpreted(text: str, model, idx) -> np.ndarray:
    """The NumPy interpreter on the spec as written (before any pass), with the model's weights."""
    from snf.compiler import analyze
    from snf.interpret import interpret
    from snf.source import Source
    result = analyze(Source.from_bytes("paper.snf", text.encode("utf-8")))
    assert result.ok, result.diagnostics
    params = {k: v.detach().double().numpy() for k, v in snf.interop.spec_state(model).items()}
    return interpret(result.model, params, {"idx": idx.numpy()})["y"]


def _paper_case(mod):
    torch.manual_seed(0)
    model = mod.Model().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p))
    return model, torch.randint(0, 11, (2, 5))


def test_the_papers_form_becomes_latent_attention_with_a_latent_cache(tmp_path):
    """snf/passes/absorb.py: the expansion written out is latent_attention in the generated code (the
    expansion's statements gone), forward equals the NumPy interpreter on the spec as written, and
    a decode step over the cached latent (the absorbed plan) equals the whole sequence."""
    source, mod = _paper(tmp_path, PAPER, "paper")
    assert "_latent_attention(" in source and " _attention(" not in source and " kv = " not in source
    model, idx = _paper_case(mod)
    want = _interpreted(PAPER, model, idx)
    with torch.no_grad():
        whole = model(idx)
        np.testing.assert_allclose(whole.y.double().numpy(), want, rtol=1e-5, atol=1e-6)
        head = model(idx[:, :4])
        step = model(idx[:, 4:], past_latent=head.new_latent)
    torch.testing.assert_close(step.y, whole.y[:, 4:], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("edit", ["the values bound by a let", "the keys an output"])
def test_the_expansion_bound_or_returned_otherwise_still_becomes_latent_attention(tmp_path, edit):
    """Values sliced into a `let` go with the rest of the expansion (nothing expands the cache
    unread); keys a spec also returns stay, with the expansion they read."""
    if edit == "the values bound by a let":
        text = PAPER.replace("let y = flash_attention(q, k, kv[:, :, :, nope_dim:nope_dim + v_dim], causal",
                             "let v = kv[:, :, :, nope_dim:nope_dim + v_dim]\nlet y = flash_attention(q, k, v, causal")
    else:
        text = PAPER.replace("  new_latent : Tensor([B, T_past + T, latent_dim], float32)\n",
                             "  new_latent : Tensor([B, T_past + T, latent_dim], float32)\n"
                             "  k : Tensor([B, T_past + T, n_head, nope_dim + rope_dim], float32)\n")
    assert text != PAPER
    source, mod = _paper(tmp_path, text, "bound")
    assert "_latent_attention(" in source and (" kv = " in source) == (edit == "the keys an output")
    model, idx = _paper_case(mod)
    with torch.no_grad():
        got = model(idx)
    np.testing.assert_allclose(got.y.double().numpy(), _interpreted(text, model, idx), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("miss", NEAR_MISSES)
def test_attention_that_is_not_the_expansion_is_left_as_written(tmp_path, miss):
    old, new = NEAR_MISSES[miss]
    assert old in PAPER
    text = PAPER.replace(old, new)
    if miss == "the rope part first":  # the same two parts, the other way round
        text = text.replace("[B, T_past + T, H, rope_dim])], axis=3)",
                            "[B, T_past + T, H, rope_dim]), kv[:, :, :, 0:nope_dim]], axis=3)")
    source, mod = _paper(tmp_path, text, "near")
    assert "_latent_attention(" not in source
    model, idx = _paper_case(mod)
    with torch.no_grad():
        got = model(idx).y.double().numpy()
    np.testing.assert_allclose(got, _interpreted(text, model, idx), rtol=1e-5, atol=1e-6)
