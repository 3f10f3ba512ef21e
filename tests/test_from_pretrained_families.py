"""snf.from_pretrained against transformers on settings of one family each, away from the tiny
configs of their rows in tests/specs_table.py (`hf`), at which tests/test_from_pretrained.py runs every
family (Gemma 2, 3 and 4, GPT-J, GPT-NeoX, Phi, Qwen3, OLMo 2, Command-R, Nemotron-H and the Qwen mixtures of
experts' dense layers; DeepSeek-V3's are in tests/test_latent_attention.py), and the settings the specs
refuse, each named."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

import snf  # noqa: E402
from snf.interop import CheckpointError  # noqa: E402
from snf.pretrained import PretrainedError  # noqa: E402
from test_from_pretrained import _close, _round_trip, edit_config, hf_model, refused, saved, tokens  # noqa: E402


def test_gemma2_odd_layers_slide_and_the_window_matters(tmp_path):
    """Three layers (transformers' default layer_types: sliding, full, sliding), a sequence four
    windows long: the logits agree, and those of the same weights with a wider window do not."""
    hf, folder = saved(tmp_path, "gemma2", num_hidden_layers=3)
    model = snf.from_pretrained(folder)
    assert model.config.sliding_window == 5 and model.config.n_layer == 3
    idx = tokens(hf.config.vocab_size, t=20)
    wide = type(model)(dataclasses.replace(model.config, sliding_window=64)).eval()
    wide.load_state_dict(model.state_dict())
    with torch.no_grad():
        want, got = hf(idx).logits, model(idx).logits
        assert _close(got, want)
        assert not _close(wide(idx).logits, want)
        assert got.abs().max() < hf.config.final_logit_softcapping  # the cap is in force


def test_gemma2_without_a_soft_cap_is_named(tmp_path):
    _, folder = saved(tmp_path, "gemma2")
    edit_config(folder, attn_logit_softcapping=None)
    with pytest.raises(PretrainedError, match=r"config.json has no `attn_logit_softcapping`"):
        snf.from_pretrained(folder)


def test_gemma3_layer_kinds_and_the_window_matter(tmp_path):
    """A sequence four windows long: the logits agree, and those of the same weights with a wider
    window, or with the layer kinds swapped, do not."""
    hf, folder = saved(tmp_path, "gemma3_text")
    model = snf.from_pretrained(folder)
    assert model.config.layer_types == ("sliding_attention", "full_attention", "sliding_attention")
    idx = tokens(hf.config.vocab_size, t=20)
    swapped = ("full_attention", "sliding_attention", "full_attention")
    with torch.no_grad():
        want = hf(idx).logits
        assert _close(model(idx).logits, want)
        for changes in (dict(sliding_window=64), dict(layer_types=swapped)):
            other = type(model)(dataclasses.replace(model.config, **changes)).eval()
            other.load_state_dict(model.state_dict())
            assert not _close(other(idx).logits, want)


def test_gemma3_reads_an_older_config_file(tmp_path):
    """Gemma 3's config.json as transformers 4 wrote it (the Hub's): no layer_types but
    sliding_window_pattern, and rope_theta, rope_local_base_freq and rope_scaling in place of
    rope_parameters."""
    hf, folder = saved(tmp_path, "gemma3_text")
    edit_config(folder, layer_types=..., _sliding_window_pattern=..., sliding_window_pattern=2, rope_parameters=...,
                rope_theta=5000.0, rope_local_base_freq=100.0, rope_scaling={"rope_type": "linear", "factor": 4.0},
                cache_implementation="hybrid")
    model = snf.from_pretrained(folder)
    assert model.config.layer_types == tuple(hf.config.layer_types) and model.config.rope_linear
    assert (model.config.rope_base, model.config.rope_local_base, model.config.rope_factor) == (5000.0, 100.0, 4.0)
    idx = tokens(hf.config.vocab_size)
    with torch.no_grad():
        assert _close(model(idx).logits, hf(idx).logits)


def test_gptj_with_n_inner_and_every_dim_rotated(tmp_path):
    hf, folder = saved(tmp_path, "gptj", n_inner=40, rotary_dim=8)
    model = snf.from_pretrained(folder)
    assert (model.config.mlp_hidden, model.config.rotary_dim) == (40, 8)
    idx = tokens(hf.config.vocab_size)
    with torch.no_grad():
        assert _close(model(idx).logits, hf(idx).logits)


def test_gptj_without_rotary_dim_is_named(tmp_path):
    _, folder = saved(tmp_path, "gptj")
    edit_config(folder, rotary_dim=None)
    with pytest.raises(PretrainedError, match=r"config.json has no `rotary_dim`"):
        snf.from_pretrained(folder)


@pytest.mark.parametrize("changes", [dict(use_parallel_residual=False), dict(attention_bias=False),
                                     dict(hidden_act="gelu_fast"), dict(hidden_act="gelu_new")])
def test_gpt_neox_variants_match_transformers(tmp_path, changes):
    hf, folder = saved(tmp_path, "gpt_neox", **changes)
    model = snf.from_pretrained(folder)
    idx = tokens(hf.config.vocab_size)
    with torch.no_grad():
        assert _close(model(idx).logits, hf(idx).logits)


def test_gpt_neox_reads_a_transformers_4_config(tmp_path):
    """Pythia's config.json (transformers 4) names RoPE's settings rotary_pct and rotary_emb_base."""
    hf, folder = saved(tmp_path, "gpt_neox")
    edit_config(folder, rope_parameters=..., rotary_pct=0.5, rotary_emb_base=10000, attention_bias=...,
                torch_dtype="float16", dtype=...)
    assert snf.from_pretrained(folder).token_embedding.weight.dtype == torch.float16  # torch_dtype, by default
    model = snf.from_pretrained(folder, dtype=torch.float32)
    assert (model.config.rotary_pct, model.config.rope_base, model.config.rot) == (0.5, 10000, 4)
    idx = tokens(hf.config.vocab_size)
    with torch.no_grad():
        assert _close(model(idx).logits, hf(idx).logits)


@pytest.mark.parametrize("changes", [dict(qk_layernorm=False), dict(tie_word_embeddings=True),
                                     dict(hidden_act="gelu", num_key_value_heads=4)])
def test_phi_variants_match_transformers(tmp_path, changes):
    """Phi-1, 1.5 and 2 as released (no qk_layernorm), a tied head (its bias its own), the exact GELU
    with a key/value head per query head."""
    hf, folder = saved(tmp_path, "phi", **changes)
    model = snf.from_pretrained(folder)
    idx = tokens(hf.config.vocab_size)
    with torch.no_grad():
        assert _close(model(idx).logits, hf(idx).logits)


def test_phi_reads_an_older_config_file(tmp_path):
    """Phi-2's config.json as transformers 4 wrote it: partial_rotary_factor and rope_theta at the top
    level, a null rope_scaling, torch_dtype."""
    hf, folder = saved(tmp_path, "phi")
    edit_config(folder, rope_parameters=..., partial_rotary_factor=0.75, rope_theta=5000.0, rope_scaling=None,
                torch_dtype="float32", dtype=...)
    model = snf.from_pretrained(folder)
    assert (model.config.rotary_pct, model.config.rope_base, model.config.rot) == (0.75, 5000.0, 6)
    idx = tokens(hf.config.vocab_size)
    with torch.no_grad():
        assert _close(model(idx).logits, hf(idx).logits)


def _agrees(tmp_path, family: str, t: int = 13, **overrides):
    """The family with `overrides` loaded by snf.from_pretrained: logits and greedy generate as transformers'."""
    hf, folder = saved(tmp_path, family, **overrides)
    model = snf.from_pretrained(folder)
    idx = tokens(hf.config.vocab_size, t=t)
    with torch.no_grad():
        assert _close(model(idx).logits, hf(idx).logits)
    prompt = tokens(hf.config.vocab_size, t=7)
    want = hf.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(prompt, 8, temperature=0), want)
    return hf, model


def test_qwen3_as_its_checkpoints_are(tmp_path):
    """Qwen3-8B's settings: no biases, an untied head, no window (its row's config has all three)."""
    _, model = _agrees(tmp_path, "qwen3", attention_bias=False, tie_word_embeddings=False, use_sliding_window=False)
    c = model.config
    assert (c.attention_bias, c.tie_embeddings, c.use_sliding_window) == (False, False, False)
    assert "lm_head_weight" in snf.interop.spec_state(model) and not any("bias" in k for k in snf.interop.spec_state(model))


def test_qwen3_the_window_is_on_the_layers_from_max_window_layers(tmp_path):
    """Three layers, the last two sliding (max_window_layers 1), a sequence four windows long: the
    logits agree, and those of the same weights without the window do not."""
    hf, model = _agrees(tmp_path, "qwen3", t=20, num_hidden_layers=3)
    assert hf.config.layer_types == ["full_attention", "sliding_attention", "sliding_attention"]
    wide = type(model)(dataclasses.replace(model.config, use_sliding_window=False)).eval()
    wide.load_state_dict(model.state_dict())
    idx = tokens(hf.config.vocab_size, t=20)
    with torch.no_grad():
        assert not _close(wide(idx).logits, hf(idx).logits)


def test_olmo2_as_its_checkpoints_are(tmp_path):
    """OLMo 2's released settings: no biases, an untied head."""
    _, model = _agrees(tmp_path, "olmo2", attention_bias=False, tie_word_embeddings=False)
    assert (model.config.attention_bias, model.config.tie_embeddings) == (False, False)
    assert "lm_head_weight" in snf.interop.spec_state(model)


def test_cohere_as_command_r_is(tmp_path):
    """c4ai-command-r-v01's settings: no norms on q and k, no biases, the head tied (its row's config has none
    of the three), its logit_scale; the scale matters."""
    hf, model = _agrees(tmp_path, "cohere", use_qk_norm=False, attention_bias=False, tie_word_embeddings=True,
                        logit_scale=0.0625)
    c = model.config
    assert (c.use_qk_norm, c.attention_bias, c.tie_embeddings, c.logit_scale) == (False, False, True, 0.0625)
    assert not any("norm_weight" in k and k.startswith(("q_", "k_")) for k in snf.interop.spec_state(model))
    unscaled = type(model)(dataclasses.replace(c, logit_scale=1.0)).eval()
    unscaled.load_state_dict(model.state_dict())
    idx = tokens(hf.config.vocab_size)
    with torch.no_grad():
        assert _close(unscaled(idx).logits * 0.0625, hf(idx).logits)


def test_nemotron_h_experts_in_a_latent_with_a_correction_bias(tmp_path):
    """Nemotron 3's experts in a latent (moe_latent_size) between two projections with biases, their weights
    renormalised (its row's are not), and a correction bias, a buffer hf_model leaves at zero, which changes
    the experts picked: logits and greedy generate as transformers', the round trip through it exact."""
    hf = hf_model("nemotron_h", moe_latent_size=12, norm_topk_prob=True)
    biases = [b for name, b in hf.named_buffers() if name.endswith("e_score_correction_bias")]
    with torch.no_grad():
        for b in biases:
            b.copy_(torch.randn(b.shape, generator=torch.Generator().manual_seed(3)) * 0.2)
    hf.save_pretrained(tmp_path / "hf")
    model = snf.from_pretrained(tmp_path / "hf")
    assert (model.config.moe_latent, model.config.norm_topk_prob) == (12, True)
    assert {"latent_up", "latent_in_bias", "router_bias"} <= set(snf.interop.spec_state(model))
    idx, prompt = tokens(hf.config.vocab_size), tokens(hf.config.vocab_size, t=7)
    with torch.no_grad():
        assert _close(model(idx).logits, hf(idx).logits)
        unbiased = type(model)(model.config).eval()
        unbiased.load_state_dict({k: v * 0 if k.endswith("router_bias") else v for k, v in model.state_dict().items()})
        assert not _close(unbiased(idx).logits, hf(idx).logits)  # the bias picks other experts
    want = hf.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(prompt, 8, temperature=0), want)
    snf.save_pretrained(model, tmp_path / "snf_out")
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "snf_out").eval()
    assert again.config.moe_latent_size == 12
    again.save_pretrained(tmp_path / "hf_out")
    back = snf.from_pretrained(tmp_path / "hf_out")
    assert back.config == model.config
    mine, theirs = model.state_dict(), back.state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


# four layers: decoder_sparse_step 2 makes 1 and 3 sparse, mlp_only_layers makes 3 dense again (and 0, dense
# already): layer 1 alone is sparse
MLP_ONLY = dict(num_hidden_layers=4, decoder_sparse_step=2, mlp_only_layers=[0, 3])


@pytest.mark.parametrize("family, extra", [
    ("qwen2_moe", {}), ("qwen3_moe", {}),
    ("qwen3_next", dict(layer_types=["linear_attention", "full_attention"] * 2)),
])
def test_mlp_only_layers_with_a_sparse_step_match_transformers(tmp_path, family, extra):
    """mlp_only_layers and decoder_sparse_step together: each layer holds its kind's weights, as
    transformers' checkpoint does; logits, the load-balancing loss (over the one sparse layer) and
    greedy generate as transformers'; config.json written back key for key (mlp_only_layers as it
    was) and the round trip through transformers exact."""
    from safetensors import safe_open
    hf, model = _agrees(tmp_path / "agree", family, **MLP_ONLY, **extra)
    assert (model.config.dense_layers, model.config.sparse_step) == ((1, 0, 0, 1), 2)
    idx = tokens(hf.config.vocab_size)
    with torch.no_grad():
        want, got = hf(idx, output_router_logits=True), model(idx)
    torch.testing.assert_close(got.aux_loss, want.aux_loss, rtol=1e-5, atol=1e-6)
    folder = tmp_path / "agree" / family
    snf.save_pretrained(model, tmp_path / "snf_out")
    written = json.loads((tmp_path / "snf_out" / "config.json").read_text())
    assert written == json.loads((folder / "config.json").read_text()) and written["mlp_only_layers"] == [0, 3]
    keys = []
    for where in (folder, tmp_path / "snf_out"):
        with safe_open(where / "model.safetensors", "pt") as f:
            keys.append(set(f.keys()))
    assert keys[0] == keys[1]  # the same weights on each layer: the router on layer 1 only, dense MLPs elsewhere
    assert [f"model.layers.{i}.mlp.gate.weight" in keys[1] for i in range(4)] == [False, True, False, False]
    assert [f"model.layers.{i}.mlp.gate_proj.weight" in keys[1] for i in range(4)] == [True, False, True, True]

    def agree(model, hf):
        assert _close(model(idx).logits, hf(idx).logits)
    _round_trip(tmp_path / "round_trip", family, agree, **MLP_ONLY, **extra)


def test_kimi_linear_over_several_chunks_and_the_released_dense_keys(tmp_path):
    """A prompt of 40 tokens (three of snfc's KDA chunks): the logits agree, and
    greedy generate after it gives transformers' tokens; a checkpoint whose dense MLP is under `mlp.`
    (the released files' layout, not save_pretrained's `block_sparse_moe.`) reads the same weights."""
    from safetensors.torch import load_file, save_file
    hf, folder = saved(tmp_path, "kimi_linear", max_position_embeddings=128)
    model = snf.from_pretrained(folder)
    idx = tokens(hf.config.vocab_size, t=40)
    with torch.no_grad():
        assert _close(model(idx).logits, hf(idx).logits)
    want = hf.generate(idx, max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(idx, 4, temperature=0), want)
    weights = load_file(folder / "model.safetensors")
    moved = {k.replace("layers.0.block_sparse_moe.", "layers.0.mlp."): v for k, v in weights.items()}
    assert moved.keys() != weights.keys()
    save_file(moved, folder / "model.safetensors", metadata={"format": "pt"})
    released = snf.from_pretrained(folder)
    assert all(torch.equal(a, b) for a, b in zip(released.state_dict().values(), model.state_dict().values()))


@pytest.mark.parametrize("family, changes, named", [
    ("qwen3", dict(layer_types=["sliding_attention", "full_attention"]), "layer_types = [\"sliding_attention\", \"fu"),
    ("qwen3", dict(rope_parameters={"rope_type": "yarn", "rope_theta": 5e5, "factor": 4.0,
                                    "original_max_position_embeddings": 32}), "rope_parameters.rope_type = \"yarn\""),
    ("qwen3", dict(hidden_act="gelu"), "hidden_act = \"gelu\""),
    ("olmo2", dict(head_dim=16), "head_dim = 16"),
    ("olmo2", dict(rope_parameters={"rope_type": "linear", "rope_theta": 5e5, "factor": 2.0}),
     "rope_parameters.rope_type = \"linear\""),
    ("cohere", dict(head_dim=16), "head_dim = 16"),
    ("cohere", dict(hidden_act="gelu"), "hidden_act = \"gelu\""),
    ("cohere", dict(rope_parameters={"rope_type": "dynamic", "rope_theta": 5e5, "factor": 2.0}),
     "rope_parameters.rope_type = \"dynamic\""),
    ("nemotron_h", dict(mlp_hidden_act="silu"), "mlp_hidden_act = \"silu\""),
    ("nemotron_h", dict(num_nextn_predict_layers=1), "num_nextn_predict_layers = 1"),
    ("nemotron_h", dict(layers_block_type=["linear_attention", "attention", "moe", "mlp", "linear_attention"]),
     "each item of `layer_types` must be 'linear_attention', 'moe', 'full_attention' or 'mlp'"),
    ("kimi_linear", dict(q_lora_rank=8), "q_lora_rank = 8"),
    ("kimi_linear", dict(mlp_layer_types=["sparse", "dense", "sparse"]), "dense layers first, then sparse ones"),
    ("kimi_linear", dict(layer_types=["linear_attention", "sliding_attention", "linear_attention"]),
     "each item of `layer_types` must be 'linear_attention' or 'full_attention'"),
    ("kimi_linear", dict(layer_types=...), "layer_types"),
])
def test_a_setting_the_spec_cannot_honour_is_named(tmp_path, family, changes, named):
    refused(tmp_path, family, changes, named)


def test_gemma4_reads_the_full_layers_head_size_from_per_layer_config(tmp_path):
    """Gemma 4 keeps its full layers' head size in per_layer_config, an object keyed by layer number:
    `{}` where the two sizes are equal (as transformers writes it), and where the key is absent
    transformers builds it from global_head_dim's default, 512, as the spec does."""
    hf, folder = saved(tmp_path, "gemma4_text", global_head_dim=8)
    assert json.loads((folder / "config.json").read_text())["per_layer_config"] == {}
    model = snf.from_pretrained(folder)
    assert model.config.global_head_dim == model.config.head_dim == 8
    idx = tokens(hf.config.vocab_size)
    with torch.no_grad():
        assert _close(model(idx).logits, hf(idx).logits)
    edit_config(folder, per_layer_config=...)
    with pytest.raises(CheckpointError, match=r"layers.1.self_attn.o_proj.weight \(for layers.1.fo_weight\): "
                                              r"expected shape \[32, 2048\], got \[32, 32\]"):
        snf.from_pretrained(folder)
