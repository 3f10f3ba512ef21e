"""Specs ported from transformers' architectures (docs/porting.md) against transformers on the same
random weights, and the porting guide's own example.

specs/llama3.snf (grouped-query attention), specs/mistral.snf (sliding window), specs/bert.snf
(token types, padding mask, post-norm, pooler) and specs/t5_encoder.snf (relative position bias
computed in the spec), each loaded through its `checkpoint hf:` mapping: outputs within 1e-5 in
float32, and greedy `generate` equal for the causal ones. The max |diff| each comparison reaches is
printed (`pytest -s tests/test_porting.py`).
"""

from __future__ import annotations

import pytest
import torch

from snf.interop import load_state_dict

transformers = pytest.importorskip("transformers")

TOL = 1e-5


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    monkeypatch.setenv("SNF_COMPILE", "0")


def _randomise(hf, scale: float = 0.1, norms: tuple = ()) -> None:
    """Random weights everywhere, norm weights around 1, so every parameter matters."""
    with torch.no_grad():
        for name, p in hf.named_parameters():
            centre = 1.0 if any(n in name for n in norms) else 0.0
            p.copy_(centre + scale * torch.randn_like(p))


def _close(name: str, got: torch.Tensor, want: torch.Tensor) -> float:
    assert got.shape == want.shape
    diff = (got - want).abs().max().item()
    print(f"{name}: max |diff| = {diff:.2e} (max |value| {want.abs().max().item():.2f})")
    assert want.abs().max() > 0.1  # a comparison of something non-trivial
    assert diff <= TOL
    return diff


def _generate_equal(model, hf, prompt: torch.Tensor, new: int) -> None:
    ours = model.generate(prompt, max_new_tokens=new, temperature=0)
    theirs = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new, do_sample=False,
                         pad_token_id=0, eos_token_id=None)
    assert ours.shape == (prompt.shape[0], prompt.shape[1] + new)
    assert torch.equal(ours, theirs)


# ------------------------------------------------------------------------------ Llama 3 (GQA)

def _llama3(n_head=4, n_kv_head=2, n_embd=32, seed=0):
    from generated.llama3 import Model
    torch.manual_seed(seed)
    # the spec's defaults for RoPE: Llama 3.2 1B's base and "llama3" frequency scaling
    rope = dict(rope_type="llama3", rope_theta=500000.0, factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                original_max_position_embeddings=8192)
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=n_embd, num_attention_heads=n_head, num_key_value_heads=n_kv_head,
        intermediate_size=40, vocab_size=97, tie_word_embeddings=False, rms_norm_eps=1e-5, rope_parameters=rope,
        max_position_embeddings=64)).eval()
    assert hf.config.rope_parameters["rope_theta"] == 500000.0
    _randomise(hf, norms=("norm",))
    model = Model(vocab_size=97, block_size=64, n_layer=2, n_head=n_head, n_kv_head=n_kv_head, n_embd=n_embd,
                  mlp_hidden=40).eval()
    load_state_dict(model, hf.state_dict(), "hf")
    return model, hf


@pytest.mark.parametrize("heads", [(4, 2), (6, 3), (4, 1), (4, 4)], ids=["gqa-4-2", "gqa-6-3", "mqa-4-1", "mha-4-4"])
def test_llama3_logits_match(heads):
    model, hf = _llama3(*heads, n_embd=8 * heads[0])
    idx = torch.randint(0, 97, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        _close(f"llama3 {heads} logits", model(idx).logits, hf(idx).logits)


def test_llama3_cached_forward_equals_full():
    model, hf = _llama3()
    idx = torch.randint(0, 97, (2, 12))
    with torch.no_grad():
        want = hf(idx).logits
        first = model(idx[:, :7])
        rest = model(idx[:, 7:], past_keys=first.new_keys, past_values=first.new_values)
    _close("llama3 chunked logits", torch.cat([first.logits, rest.logits], dim=1), want)


@pytest.mark.parametrize("batch", [1, 3])
def test_llama3_greedy_generate_equals_transformers(batch):
    model, hf = _llama3()
    _generate_equal(model, hf, torch.randint(0, 97, (batch, 9)), 20)


def test_gqa_cache_holds_kv_heads_only():
    """The point of GQA: the cache is n_kv_head heads wide, in forward's outputs and in generate's
    preallocated buffers, n_head / n_kv_head times fewer bytes than one k/v head per query head."""
    model, _ = _llama3(n_head=8, n_kv_head=2, n_embd=64)
    n_layer, hd, bytes_per = 2, 8, 4
    with torch.no_grad():
        out = model(torch.randint(0, 97, (1, 10)))
    assert out.new_keys.shape == (n_layer, 1, 10, 2, hd)
    assert out.new_keys.nbytes + out.new_values.nbytes == 2 * n_layer * 10 * 2 * hd * bytes_per == 2560
    seen = []
    step = model._decode_step
    model._decode_step = lambda *a, **k: seen.append(k) or step(*a, **k)
    model.generate(torch.randint(0, 97, (1, 5)), max_new_tokens=3, temperature=0)
    buffers = seen[0]["past_keys"] + seen[0]["past_values"]  # per-layer buffers of block_size slots
    assert [tuple(b.shape) for b in buffers] == [(1, 64, 2, hd)] * (2 * n_layer)
    assert sum(b.nbytes for b in buffers) == 2 * n_layer * 64 * 2 * hd * bytes_per == 16384  # 4x less than 8 heads


def test_gqa_heads_must_divide_in_config():
    from generated.llama3 import Config
    with pytest.raises(ValueError, match=r"H must be divisible by KVH .*n_head=6, n_kv_head=4"):
        Config(n_head=6, n_kv_head=4, n_embd=48)


# ------------------------------------------------------------------------------ Mistral (sliding window)

def _mistral(window=4, seed=0):
    from generated.mistral import Model
    torch.manual_seed(seed)
    hf = transformers.MistralForCausalLM(transformers.MistralConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=48,
        vocab_size=97, rms_norm_eps=1e-5, sliding_window=window, max_position_embeddings=64)).eval()
    _randomise(hf, norms=("norm",))
    model = Model(vocab_size=97, block_size=64, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, mlp_hidden=48,
                  sliding_window=window).eval()
    load_state_dict(model, hf.state_dict(), "hf")
    return model, hf


def test_mistral_logits_match_with_a_window_shorter_than_the_sequence():
    model, hf = _mistral(window=4)
    idx = torch.randint(0, 97, (2, 13))
    unwindowed = type(model)(model.config, sliding_window=64).eval()  # the same weights, no window
    unwindowed.load_state_dict(model.state_dict())
    with torch.no_grad():
        want = hf(idx).logits
        _close("mistral logits (window 4, T 13)", model(idx).logits, want)
        assert (unwindowed(idx).logits - want).abs().max() > 1e-3


def test_mistral_cached_forward_equals_full():
    model, hf = _mistral(window=3)
    idx = torch.randint(0, 97, (2, 12))
    with torch.no_grad():
        want = hf(idx).logits
        keys = values = None
        pieces = []
        for start, end in ((0, 5), (5, 6), (6, 12)):
            out = model(idx[:, start:end], past_keys=keys, past_values=values)
            pieces.append(out.logits)
            keys, values = out.new_keys, out.new_values
    _close("mistral chunked logits (window 3)", torch.cat(pieces, dim=1), want)


@pytest.mark.parametrize("batch", [1, 2])
def test_mistral_greedy_generate_past_the_window(batch):
    model, hf = _mistral(window=4)
    _generate_equal(model, hf, torch.randint(0, 97, (batch, 6)), 24)  # 30 tokens, window 4


# ------------------------------------------------------------------------------ BERT

def _bert(seed=0):
    from generated.bert import Model
    torch.manual_seed(seed)
    hf = transformers.BertModel(transformers.BertConfig(
        vocab_size=97, hidden_size=24, num_hidden_layers=2, num_attention_heads=3, intermediate_size=40,
        max_position_embeddings=16, type_vocab_size=2, hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1)).eval()
    _randomise(hf, scale=0.2, norms=("LayerNorm.weight",))
    model = Model(vocab_size=97, max_positions=16, n_layer=2, n_head=3, n_embd=24, intermediate=40).eval()
    load_state_dict(model, hf.state_dict(), "hf")
    return model, hf


def test_bert_matches_with_token_types_and_padding():
    model, hf = _bert()
    g = torch.Generator().manual_seed(2)
    idx, types = torch.randint(0, 97, (3, 9), generator=g), torch.randint(0, 2, (3, 9), generator=g)
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 5:] = 0  # padding at the end of one sequence
    with torch.no_grad():
        ours = model(idx, token_type_ids=types, attention_mask=mask)
        theirs = hf(idx, token_type_ids=types, attention_mask=mask)
    _close("bert last_hidden_state", ours.last_hidden_state, theirs.last_hidden_state)
    _close("bert pooler_output", ours.pooler_output, theirs.pooler_output)


def test_bert_matches_without_the_optional_inputs():
    model, hf = _bert()
    idx = torch.randint(0, 97, (2, 16))  # max_positions long
    with torch.no_grad():
        ours, theirs = model(idx), hf(idx)
    _close("bert last_hidden_state (no mask, no types)", ours.last_hidden_state, theirs.last_hidden_state)
    _close("bert pooler_output (no mask, no types)", ours.pooler_output, theirs.pooler_output)


def test_bert_all_padding_row_matches_transformers():
    """A sequence that is all padding: every query sees no key, so attention gives zeros there, as
    transformers' default (SDPA) attention does."""
    model, hf = _bert()
    idx = torch.randint(0, 97, (2, 6))
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]])
    with torch.no_grad():
        ours, theirs = model(idx, attention_mask=mask), hf(idx, attention_mask=mask)
    assert hf.config._attn_implementation == "sdpa"
    _close("bert all-padding row", ours.last_hidden_state, theirs.last_hidden_state)


# ------------------------------------------------------------------------------ T5 encoder

def _t5(num_buckets=32, max_distance=128, seed=0):
    from generated.t5_encoder import Model
    torch.manual_seed(seed)
    hf = transformers.T5EncoderModel(transformers.T5Config(
        vocab_size=97, d_model=24, d_kv=10, num_heads=3, d_ff=40, num_layers=2, dropout_rate=0.1,
        relative_attention_num_buckets=num_buckets, relative_attention_max_distance=max_distance)).eval()
    _randomise(hf, scale=0.3, norms=("layer_norm",))
    model = Model(vocab_size=97, n_layer=2, n_head=3, d_model=24, d_kv=10, d_ff=40, num_buckets=num_buckets,
                  max_distance=max_distance).eval()
    load_state_dict(model, hf.state_dict(), "hf")
    return model, hf


@pytest.mark.parametrize("buckets,distance,length", [(32, 128, 150), (8, 12, 30)], ids=["t5-default-T150", "small"])
def test_t5_encoder_matches_with_relative_position_bias(buckets, distance, length):
    model, hf = _t5(buckets, distance)
    idx = torch.randint(0, 97, (2, length))
    mask = torch.ones(2, length, dtype=torch.long)
    mask[1, length // 2:] = 0
    with torch.no_grad():
        _close(f"t5 encoder, {buckets} buckets, T {length}", model(idx, attention_mask=mask),
               hf(idx, attention_mask=mask).last_hidden_state)
        _close(f"t5 encoder, {buckets} buckets, T {length}, no mask", model(idx), hf(idx).last_hidden_state)


# ------------------------------------------------------------------------------ ALiBi

ALIBI = """\
param:
  H : int = 8
input:
  x : Tensor([B, T, H, 4], float32)
output:
  alibi : Tensor([1, H, 1, T], float32)
  y : Tensor([B, T, H, 4], float32)
# head h (from 1) has slope 2^(-8 h / H); its bias grows with the key's position (softmax ignores
# a shift per query, so this equals slope * (j - i))
let slopes = 2.0 ** (cast(arange(1, H + 1), float32) * (-8.0 / H))
let alibi = reshape(slopes, [1, H, 1, 1]) * reshape(cast(arange(T), float32), [1, 1, 1, T])
let y = flash_attention(x, x, x, causal=True, bias=alibi)
"""


@pytest.mark.parametrize("heads", [8, 4, 16])
def test_alibi_bias_computed_in_a_spec_matches_bloom(heads, tmp_path):
    import snf
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    spec = tmp_path / "alibi.snf"
    spec.write_text(ALIBI, encoding="utf-8")
    model = snf.load(spec).Model(H=heads)
    x = torch.randn(2, 7, heads, 4)
    with torch.no_grad():
        out = model(x)
    want = build_alibi_tensor(torch.ones(1, 7), heads, torch.float32).reshape(1, heads, 1, 7)
    _close(f"alibi, {heads} heads", out.alibi, want)
    q = x.transpose(1, 2)
    scores = q @ q.transpose(-1, -2) / 2.0 + want + torch.full((7, 7), float("-inf")).triu(1)
    _close(f"attention with alibi, {heads} heads", out.y, (scores.softmax(-1) @ q).transpose(1, 2))


# ------------------------------------------------------------------------------ integer dims

PARTIAL_ROTARY = """\
param:
  n_head : int = 4
  n_embd : int = 64
  rotary_pct : float = 0.25
  head_dim = n_embd // n_head
  rot = int(head_dim * rotary_pct)     # GPT-NeoX's rotary_ndims: a dim Config computes
input:
  x : Tensor([B, T, n_head, head_dim], float32)
output:
  y : Tensor([B, T, n_head, head_dim], float32)
let y = concat([rope(x[:, :, :, 0:rot], base=10000.0), x[:, :, :, rot:head_dim]], axis=3)
"""


@pytest.mark.parametrize("pct", [0.2, 0.5, 1.0, 0.4])
def test_partial_rotary_dim_from_a_float_matches_gpt_neox(pct, tmp_path):
    import numpy as np
    import snf
    from snf.compiler import analyze
    from snf.interpret import interpret
    from snf.source import Source
    from transformers.models.gpt_neox import modeling_gpt_neox as neox
    spec = tmp_path / "partial_rotary.snf"
    spec.write_text(PARTIAL_ROTARY, encoding="utf-8")
    model = snf.load(spec).Model(n_head=4, n_embd=80, rotary_pct=pct)
    assert model.config.rot == int(20 * pct)
    hc = transformers.GPTNeoXConfig(hidden_size=80, num_attention_heads=4, rotary_pct=pct)
    x = torch.randn(2, 6, 4, 20)
    cos, sin = neox.GPTNeoXRotaryEmbedding(hc)(x, torch.arange(6)[None])
    want, _ = neox.apply_rotary_pos_emb(x.transpose(1, 2), x.transpose(1, 2), cos, sin)
    with torch.no_grad():
        _close(f"partial rotary, pct {pct}", model(x), want.transpose(1, 2))
    ref = interpret(analyze(Source.read(spec)).model, {}, {"x": x.double().numpy()},
                    {"n_head": 4, "n_embd": 80, "rotary_pct": pct})["y"]
    np.testing.assert_allclose(model(x).numpy(), ref, atol=1e-5)


def test_an_integer_dim_from_a_float_is_checked_by_config(tmp_path):
    import snf
    spec = tmp_path / "partial_rotary.snf"
    spec.write_text(PARTIAL_ROTARY, encoding="utf-8")
    mod = snf.load(spec)
    with pytest.raises(ValueError, match=r"rot must be divisible by 2 \(partial_rotary.snf:11\); got rot=3"):
        mod.Config(n_embd=64, rotary_pct=0.2)  # int(16 * 0.2) = 3: RoPE needs an even size
    with pytest.raises(ValueError, match=r"slice end rot must lie within axis 3, of size head_dim .*rot=24"):
        mod.Config(n_embd=64, rotary_pct=1.5)


def test_the_porting_guide_runs(capsys):
    """docs/porting.md's comparison script, as printed there."""
    import re
    from pathlib import Path
    page = (Path(__file__).resolve().parents[1] / "docs" / "porting.md").read_text(encoding="utf-8")
    script = re.findall(r"```python\n(.*?)```", page, re.S)[0]  # section 8 (section 10 shows from_pretrained)
    exec(compile(script, "docs/porting.md", "exec"), {})
    logits, chunked, generated = capsys.readouterr().out.split("\n")[:3]
    assert float(re.sub(r"tensor\((.*)\)", r"\1", logits)) <= TOL
    assert float(re.sub(r"tensor\((.*)\)", r"\1", chunked)) <= TOL
    assert generated == "True"
