"""Llama 4's text model (specs/llama4_text.snf) against transformers' Llama4ForCausalLM, beyond what
tests/test_from_pretrained.py checks for every family at its row's config (tests/specs_table.py): the settings that config
leaves at their defaults, each away from it; the hub's config.json format (an empty no_rope_layers, no
layer_types or moe_layers, rope_scaling beside rope_theta); the experts' fused, transposed weights
written back as read; the sparse experts against transformers; and the settings the spec refuses.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

import snf  # noqa: E402
from snf.pretrained import PretrainedError  # noqa: E402
from snf.runtime import experts  # noqa: E402
from specs_table import LLAMA4_ROPE  # noqa: E402
from test_from_pretrained import FAMILIES, _close, edit_config, saved, tokens  # noqa: E402

FAMILY = "llama4_text"


def _agrees(hf, model, t: int = 13) -> None:
    """The logits of t tokens, and a greedy generate of 7 + 8 tokens (its decode crossing chunks)."""
    idx = tokens(hf.config.vocab_size, t=t)
    with torch.no_grad():
        assert _close(model(idx).logits, hf(idx).logits)
    prompt = idx[:, :7]
    want = hf.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(prompt, 8, temperature=0), want)


@pytest.mark.parametrize("changes", [
    # Llama 4 Maverick's: no L2 norm of q and k, top-1 routing; a tied head
    dict(use_qk_norm=False, num_experts_per_tok=1, tie_word_embeddings=True),
    # chunks on a NoPE layer and full attention on RoPE ones (layer_types given apart from no_rope_layers), no
    # temperature, RoPE without scaling, no biases
    dict(layer_types=["full_attention", "chunked_attention", "full_attention", "chunked_attention"],
         attn_temperature_tuning=False, rope_parameters={"rope_type": "default", "rope_theta": 5000.0},
         attention_bias=False),
    # no_rope_layers made from no_rope_layer_interval (3), every layer sparse, 6 layers
    dict(no_rope_layers=None, no_rope_layer_interval=3, num_hidden_layers=6, interleave_moe_layer_step=1),
])
def test_llama4_settings_match_transformers(tmp_path, changes):
    hf, folder = saved(tmp_path, FAMILY, **changes)
    model = snf.from_pretrained(folder)
    assert list(model.config.no_rope_layers) == hf.config.no_rope_layers
    assert list(model.config.attn_types) == hf.config.layer_types
    _agrees(hf, model)


def test_llama4_each_setting_matters(tmp_path):
    """At its row's config, the logits of the same weights with the chunks, the temperature, Llama 3's
    RoPE scaling or the q and k norm taken away are not transformers' (so the tests above see each)."""
    hf, folder = saved(tmp_path, FAMILY)
    model = snf.from_pretrained(folder)
    idx = tokens(hf.config.vocab_size)
    with torch.no_grad():
        want = hf(idx).logits
        for change in (dict(chunk_size=64), dict(temperature_tuning=False), dict(rope_llama3=False),
                       dict(use_qk_norm=False), dict(attn_types=("chunked_attention",) * 4)):
            other = type(model)(dataclasses.replace(model.config, **change)).eval()
            other.load_state_dict(model.state_dict())
            assert not _close(other(idx).logits, want), change


def test_llama4_hub_config_files(tmp_path):
    """The hub's Llama 4 config.json (as transformers 4 wrote it): an empty no_rope_layers, no
    layer_types nor moe_layers (transformers makes them), rope_scaling beside rope_theta, and a
    quantisation tool's flag. snfc reads it as transformers does, and writes the lists back in full."""
    hf, folder = saved(tmp_path, FAMILY, no_rope_layers=None, num_hidden_layers=8, interleave_moe_layer_step=2)
    scaling = {k: v for k, v in LLAMA4_ROPE.items() if k != "rope_theta"}
    edit_config(folder, no_rope_layers=[], layer_types=..., moe_layers=..., rope_parameters=..., rope_scaling=scaling,
                rope_theta=5000.0, for_llm_compressor=False)
    model = snf.from_pretrained(folder)
    again = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    assert again.config.no_rope_layers == list(model.config.no_rope_layers) == [1, 1, 1, 0] * 2
    _agrees(again, model)
    snf.save_pretrained(model, tmp_path / "out")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["no_rope_layers"] == [1, 1, 1, 0] * 2 and written["for_llm_compressor"] is False
    assert snf.from_pretrained(tmp_path / "out").config == model.config


def test_llama4_experts_are_written_back_as_read(tmp_path):
    """gate_up_proj [E, D, 2 * I] and down_proj [E, I, D], read through `split` and `.T` into
    linear's layout, are written back bit for bit."""
    from safetensors.torch import load_file
    _, folder = saved(tmp_path, FAMILY)
    snf.save_pretrained(snf.from_pretrained(folder), tmp_path / "out")
    theirs, mine = load_file(folder / "model.safetensors"), load_file(tmp_path / "out" / "model.safetensors")
    assert theirs.keys() == mine.keys()
    assert all(torch.equal(theirs[k], mine[k]) for k in theirs)
    assert mine["model.layers.1.feed_forward.experts.gate_up_proj"].shape == (4, 32, 48)


def test_llama4_decodes_over_preallocated_caches():
    """The NoPE layers' positions, `arange(T) + T_past`, add the cache length to values: generate keeps
    its preallocated caches (the chunks and the temperature read the decode position)."""
    from conftest import snfc
    code, out, err = snfc("check", "-v", "specs/llama4_text.snf")
    assert code == 0 and "generate decodes with preallocated caches of block_size slots" in out + err


def test_llama4_sparse_experts_match_transformers(tmp_path, monkeypatch):
    """The experts op's sparse form (each expert on its own tokens), which these sizes would run dense."""
    monkeypatch.setattr(experts, "_MOE_DENSE_MACS", -1)
    hf, folder = saved(tmp_path, FAMILY)
    _agrees(hf, snf.from_pretrained(folder))


@pytest.mark.parametrize("changes, named", [
    (dict(moe_layers=[0, 1]), "moe_layers = [0, 1]"),
    (dict(layer_types=["sliding_attention"] * 4), "each item of `attn_types` must be 'chunked_attention' or 'full_attention'"),
    (dict(layer_types=..., no_rope_layers=[1, 1, 0, 0]), "layer_types = (absent)"),
    (dict(no_rope_layers=[1, 0, 2, 1]), "no_rope_layers: 1 (RoPE) or 0 (NoPE)"),
    (dict(no_rope_layers=[1, 0, 1]), "no_rope_layers"),
    (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 5e5, "factor": 4.0}),
     "rope_parameters.rope_type = \"yarn\""),
    (dict(hidden_act="gelu"), "hidden_act = \"gelu\""),
    (dict(attention_dropout=0.1), "attention_dropout = 0.1"),
    (dict(interleave_moe_layer_step=0, moe_layers=[]), "moe_step must be at least 1"),
])
def test_llama4_settings_the_spec_cannot_honour_are_named(tmp_path, changes, named):
    _, folder = saved(tmp_path, FAMILY)
    edit_config(folder, **changes)
    with pytest.raises(PretrainedError) as err:
        snf.from_pretrained(folder)
    assert named in str(err.value) and f"{FAMILIES[FAMILY]}.snf" in str(err.value)
