"""snf.from_pretrained and snf.save_pretrained against transformers, on tiny random models each
family's transformers class builds and saves into tmp_path (no weights are downloaded).

For each family with a bundled spec: the logits agree (fp32, relative 1e-5), greedy `generate`
gives the same tokens as transformers' `generate(do_sample=False)`, and the round trip
snfc -> save_pretrained -> transformers -> save_pretrained -> from_pretrained is exact. A
config.json setting the spec cannot honour is a PretrainedError naming it.

These run eagerly. The same comparisons on the compiled path (the forward compiled per block, the
default generate with its decode steps compiled) run at the end of each family's spec session, on
the session's compiled model (tests/property/test_session.py, _against_transformers), so that a
spec compiles once per test worker.
"""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

import snf  # noqa: E402
from snf.interop import CheckpointError  # noqa: E402
from snf.pretrained import PretrainedError  # noqa: E402
from specs_table import GEMMA3_ROPE, ROWS, families, kind  # noqa: E402

FAMILIES = families()  # model_type -> the spec it loads with (tests/specs_table.py's rows with `hf`)
CAUSAL = [f for f, name in FAMILIES.items() if kind(name) == "causal"]  # BERT has no logits and no generate
NORMS = ("ln_1.weight", "ln_2.weight", "ln_f.weight", "norm.weight", "layernorm.weight", "LayerNorm.weight",
         "layer_norm.weight")


AUTO = {"causal": "AutoModelForCausalLM", "seq2seq": "AutoModelForSeq2SeqLM", "encoder": "AutoModel"}


def auto_class(family: str):
    from transformers.models.auto.modeling_auto import MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES as SPEECH
    if kind(FAMILIES[family]) == "seq2seq" and family in SPEECH:  # Whisper's: an encoder over audio features
        return transformers.AutoModelForSpeechSeq2Seq
    return getattr(transformers, AUTO[kind(FAMILIES[family])])


def hf_model(family: str, seed: int = 0, **overrides):
    """A transformers model of the family at its row's config (tests/specs_table.py), every parameter
    random (biases and norm weights too)."""
    config = transformers.AutoConfig.for_model(family, **{**ROWS[FAMILIES[family]].hf, **overrides})
    torch.manual_seed(seed)
    model = auto_class(family).from_config(config).eval()
    with torch.no_grad():
        for key, p in model.named_parameters():
            p.copy_((1.0 if key.endswith(NORMS) else 0.0) + torch.randn_like(p) * 0.2)
    return model


def saved(tmp_path, family: str, **overrides):
    model = hf_model(family, **overrides)
    folder = tmp_path / family
    model.save_pretrained(folder)
    return model, folder


def tokens(vocab: int, t: int = 13, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (2, t), generator=torch.Generator().manual_seed(seed))


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal to fp32's precision: the largest difference at most 1e-5 of the largest value."""
    return bool((got - want).abs().max() <= 1e-5 * want.abs().max())


def edit_config(folder, **changes):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    for key, value in changes.items():
        if value is ...:
            config.pop(key, None)
        else:
            config[key] = value
    path.write_text(json.dumps(config))


@pytest.mark.parametrize("family", CAUSAL)
def test_logits_match_transformers(tmp_path, family):
    hf, folder = saved(tmp_path, family)
    model = snf.from_pretrained(folder)
    assert not model.training and next(model.parameters()).dtype == torch.float32
    idx = tokens(hf.config.vocab_size)
    with torch.no_grad():
        want, got = hf(idx).logits, model(idx).logits
    assert got.shape == want.shape and _close(got, want)


@pytest.mark.parametrize("family", CAUSAL)
def test_greedy_generate_matches_transformers(tmp_path, family):
    hf, folder = saved(tmp_path, family)
    model = snf.from_pretrained(folder)
    idx = tokens(hf.config.vocab_size, t=7)
    want = hf.generate(idx, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(idx, 8, temperature=0), want)


def _round_trip(tmp_path, family: str, agree, **overrides) -> None:
    """snfc -> save_pretrained -> transformers -> save_pretrained -> from_pretrained: the same
    Config and bit-identical weights; `agree(model, hf)` compares snfc's model with transformers'
    from snfc's folder."""
    _, folder = saved(tmp_path, family, **overrides)
    model = snf.from_pretrained(folder)
    snf.save_pretrained(model, tmp_path / "snf_out")
    hf = auto_class(family).from_pretrained(tmp_path / "snf_out").eval()
    assert type(hf).__name__ == json.loads((tmp_path / "snf_out" / "config.json").read_text())["architectures"][0]
    with torch.no_grad():
        agree(model, hf)
    hf.save_pretrained(tmp_path / "hf_out")
    back = snf.from_pretrained(tmp_path / "hf_out")
    assert back.config == model.config
    mine, theirs = model.state_dict(), back.state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


@pytest.mark.parametrize("family", CAUSAL)
def test_round_trip_through_transformers_is_exact(tmp_path, family):
    def agree(model, hf):
        idx = tokens(model.config.vocab_size)
        assert _close(model(idx).logits, hf(idx).logits)
    _round_trip(tmp_path, family, agree)


def _bert_inputs(vocab: int):
    ids = tokens(vocab, t=11)
    types = torch.randint(0, 3, ids.shape, generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0  # padding
    return ids, types, mask


def test_bert_hidden_states_and_pooler_match_transformers(tmp_path):
    hf, folder = saved(tmp_path, "bert")
    model = snf.from_pretrained(folder)
    assert not model.training
    ids, types, mask = _bert_inputs(hf.config.vocab_size)
    with torch.no_grad():
        want = hf(ids, attention_mask=mask, token_type_ids=types)
        got = model(ids, token_type_ids=types, attention_mask=mask)
        plain = hf(ids)  # no types (segment 0) and no mask
        assert _close(model(ids).last_hidden_state, plain.last_hidden_state)
    for name in ("last_hidden_state", "pooler_output"):
        assert _close(getattr(got, name), getattr(want, name)), name


def test_bert_round_trip_through_transformers_is_exact(tmp_path):
    def agree(model, hf):
        ids, types, mask = _bert_inputs(model.config.vocab_size)
        want = hf(ids, attention_mask=mask, token_type_ids=types).pooler_output
        assert _close(model(ids, types, mask).pooler_output, want)
    _round_trip(tmp_path, "bert", agree)


def test_base_and_pre_training_checkpoints_load_too(tmp_path):
    """A GPT2Model folder (keys without "transformer.", as OpenAI's gpt2 files) and a
    BertForPreTraining one (keys under "bert.", beside heads the encoder does not compute)."""
    base = hf_model("gpt2").transformer
    base.save_pretrained(tmp_path / "gpt2_base")
    model = snf.from_pretrained(tmp_path / "gpt2_base")
    idx = tokens(model.config.vocab_size)
    with torch.no_grad():
        assert _close(model(idx).logits, base(idx).last_hidden_state @ base.wte.weight.T)
    torch.manual_seed(0)
    pre = transformers.BertForPreTraining(transformers.BertConfig(**ROWS["bert"].hf)).eval()
    pre.save_pretrained(tmp_path / "bert_pre")
    model = snf.from_pretrained(tmp_path / "bert_pre")
    ids, types, mask = _bert_inputs(model.config.vocab_size)
    with torch.no_grad():
        want = pre.bert(ids, attention_mask=mask, token_type_ids=types).pooler_output
        assert _close(model(ids, types, mask).pooler_output, want)


def test_sharded_checkpoint_dtype_and_an_explicit_spec(tmp_path, repo):
    hf = hf_model("llama")
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    model = snf.from_pretrained(tmp_path / "sharded", spec=repo / "specs" / "llama3.snf", dtype=torch.float64)
    assert next(model.parameters()).dtype == torch.float64
    idx = tokens(hf.config.vocab_size)
    with torch.no_grad():
        want, got = hf.double()(idx).logits, model(idx).logits
    assert _close(got, want)  # not closer: transformers keeps RoPE's frequencies in fp32


def test_the_checkpoint_dtype_is_the_default(tmp_path):
    hf = hf_model("llama").to(torch.bfloat16)
    hf.save_pretrained(tmp_path / "bf16")  # config.json says "dtype": "bfloat16"
    model = snf.from_pretrained(tmp_path / "bf16")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert snf.from_pretrained(tmp_path / "bf16", dtype=torch.float32).token_embedding.weight.dtype == torch.float32
    edit_config(tmp_path / "bf16", dtype=..., torch_dtype="float16")  # transformers 4's key
    assert snf.from_pretrained(tmp_path / "bf16").token_embedding.weight.dtype == torch.float16
    edit_config(tmp_path / "bf16", torch_dtype="int8")  # no floating dtype: float32
    assert snf.from_pretrained(tmp_path / "bf16").token_embedding.weight.dtype == torch.float32
    assert torch.equal(model.token_embedding.weight, hf.model.embed_tokens.weight)  # read as saved, bit for bit


def test_phi3_longrope_matches_transformers_past_the_switch(tmp_path):
    """LongRoPE's short factors up to original_max_position_embeddings (16 here) tokens, its long ones
    past them: a forward on each side, and a greedy generate whose decode crosses it (the cached keys
    keep the factors they were rotated with, in both)."""
    g = torch.Generator().manual_seed(5)
    pairs = 6  # a 16-wide head, three quarters rotating: 12 dims, 6 pairs
    rope = {"rope_type": "longrope", "rope_theta": 5000.0, "partial_rotary_factor": 0.75,
            "short_factor": (1 + torch.rand(pairs, generator=g)).tolist(),
            "long_factor": (2 + 4 * torch.rand(pairs, generator=g)).tolist(),
            "original_max_position_embeddings": 16}
    hf, folder = saved(tmp_path, "phi3", rope_parameters=rope, original_max_position_embeddings=16)  # (transformers
    # copies the top-level one into rope_parameters)
    model = snf.from_pretrained(folder)
    assert model.config.longrope and model.config.original_max_position == 16
    for t in (10, 24):
        idx = tokens(hf.config.vocab_size, t=t)
        with torch.no_grad():
            assert _close(model(idx).logits, hf(idx).logits)
    idx = tokens(hf.config.vocab_size, t=12)
    want = hf.generate(idx, attention_mask=torch.ones_like(idx), max_new_tokens=10, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(idx, 10, temperature=0), want)
    snf.save_pretrained(model, tmp_path / "again")
    back = json.loads((tmp_path / "again" / "config.json").read_text())["rope_parameters"]
    assert back["rope_type"] == "longrope" and back["short_factor"] == rope["short_factor"]


def test_a_long_load_shows_its_progress(tmp_path, monkeypatch, capsys):
    _, folder = saved(tmp_path, "llama")
    snf.from_pretrained(folder)
    assert "loading" not in capsys.readouterr().err  # a quick one says nothing
    monkeypatch.setattr(snf.interop, "_PROGRESS_AFTER_S", 0.0)
    snf.from_pretrained(folder)
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1].startswith("loading llama: 100% of 0.00 GiB") and len(lines) <= 11


def test_gpt2_exact_gelu_is_selected_by_activation_function(tmp_path):
    hf, folder = saved(tmp_path, "gpt2", activation_function="gelu")
    model = snf.from_pretrained(folder)
    assert model.config.gelu_tanh is False
    idx = tokens(hf.config.vocab_size)
    with torch.no_grad():
        assert _close(model(idx).logits, hf(idx).logits)


@pytest.mark.parametrize("family", ["qwen2", "llama"])  # Qwen2-0.5B and 1.5B, Llama 3.2 1B and 3B
def test_a_tied_head(tmp_path, family):
    hf, folder = saved(tmp_path, family, tie_word_embeddings=True)
    model = snf.from_pretrained(folder)
    assert model.config.tie_embeddings is True and "lm_head_weight" not in snf.interop.spec_state(model)
    idx = tokens(hf.config.vocab_size)
    with torch.no_grad():
        assert _close(model(idx).logits, hf(idx).logits)
    snf.save_pretrained(model, tmp_path / "back")
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "back").eval()
    assert again.config.tie_word_embeddings and torch.equal(again.lm_head.weight, hf.lm_head.weight)


def test_mistral_without_a_window_attends_to_everything(tmp_path):
    hf, folder = saved(tmp_path, "mistral", sliding_window=None)
    model = snf.from_pretrained(folder)
    assert model.config.sliding_window == model.config.block_size
    idx = tokens(hf.config.vocab_size, t=20)
    with torch.no_grad():
        assert _close(model(idx).logits, hf(idx).logits)


# RoPE scaling of Llama (issue 20): transformers' rope_parameters for each type llama3.snf supports.
# A short original length (8) and a factor of 4 make the scaling change the logits of 13 tokens;
# "dynamic" scales only past max_position_embeddings (block_size), so it has a test of its own.
ROPE = {
    "llama3": dict(rope_type="llama3", factor=4.0, low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=8),
    "linear": dict(rope_type="linear", factor=4.0),
    "dynamic": dict(rope_type="dynamic", factor=4.0),
    "yarn": dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=8),
}


def _scaled(rope_type: str) -> dict:
    return dict(rope_parameters={**ROPE[rope_type], "rope_theta": 5000.0})


@pytest.mark.parametrize("rope_type", ROPE)
def test_llama_rope_scaling_matches_transformers(tmp_path, rope_type):
    hf, folder = saved(tmp_path, "llama", **_scaled(rope_type))
    model = snf.from_pretrained(folder)
    assert model.config.rope_scaling == ["default", "linear", "dynamic", "llama3", "yarn"].index(rope_type)
    idx = tokens(hf.config.vocab_size)
    plain, _ = saved(tmp_path / "plain", "llama")  # the same weights, unscaled RoPE
    with torch.no_grad():
        want, got = hf(idx).logits, model(idx).logits
        assert got.shape == want.shape and _close(got, want)
        if rope_type != "dynamic":  # the scaling matters
            assert not _close(plain(idx).logits, want)
    prompt = tokens(hf.config.vocab_size, t=7)
    want = hf.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(prompt, 8, temperature=0), want)


@pytest.mark.parametrize("rope_type", ROPE)
def test_llama_rope_scaling_round_trip_is_exact(tmp_path, rope_type):
    def agree(model, hf):
        idx = tokens(model.config.vocab_size)
        assert _close(model(idx).logits, hf(idx).logits)
    _round_trip(tmp_path, "llama", agree, **_scaled(rope_type))
    written = json.loads((tmp_path / "snf_out" / "config.json").read_text())["rope_parameters"]
    assert written == {**ROPE[rope_type], "rope_theta": 5000.0}  # no parameter of another type


def test_llama_dynamic_rope_scaling_past_the_trained_length(tmp_path):
    """transformers' dynamic RoPE starts scaling past max_position_embeddings, which from_pretrained
    makes block_size: a Config with a longer block_size (and the same rope_original_max_position)
    runs past it, as transformers does."""
    hf, folder = saved(tmp_path, "llama", max_position_embeddings=8, **_scaled("dynamic"))
    loaded = snf.from_pretrained(folder)
    assert loaded.config.block_size == loaded.config.rope_original_max_position == 8
    model = type(loaded)(loaded.config, block_size=32).eval()
    model.load_state_dict(loaded.state_dict())
    idx = tokens(hf.config.vocab_size)  # 13 > 8 positions
    with torch.no_grad():
        assert _close(model(idx).logits, hf(idx).logits)
    prompt = tokens(hf.config.vocab_size, t=5)
    fresh, _ = saved(tmp_path / "again", "llama", max_position_embeddings=8, **_scaled("dynamic"))
    want = fresh.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(prompt, 8, temperature=0), want)
    with pytest.raises(PretrainedError, match="reads as"):  # transformers cannot say where scaling starts
        snf.save_pretrained(model, tmp_path / "out")


def test_llama_older_config_files_rope_scaling_and_rope_theta(tmp_path):
    """Llama 3.1's config.json as transformers 4 wrote it: rope_scaling beside rope_theta; and
    an older one's `"rope_scaling": null`."""
    hf, folder = saved(tmp_path, "llama", **_scaled("llama3"))
    scaling = {k: v for k, v in ROPE["llama3"].items()}
    edit_config(folder, rope_parameters=..., rope_scaling=scaling, rope_theta=5000.0)
    model = snf.from_pretrained(folder)
    idx = tokens(hf.config.vocab_size)
    with torch.no_grad():
        assert _close(model(idx).logits, hf(idx).logits)
    edit_config(folder, rope_scaling={"type": "linear", "factor": 4.0})  # `type`, the older name of rope_type
    assert snf.from_pretrained(folder).config.rope_scaling == 1
    plain, folder = saved(tmp_path / "plain", "llama")
    edit_config(folder, rope_parameters=..., rope_scaling=None, rope_theta=5000.0)
    model = snf.from_pretrained(folder)
    assert model.config.rope_scaling == 0
    with torch.no_grad():
        assert _close(model(idx).logits, plain(idx).logits)


@pytest.mark.parametrize("family, changes, named", [
    ("gpt2", dict(activation_function="relu"), "activation_function = \"relu\""),
    ("gpt2", dict(tie_word_embeddings=False), "tie_word_embeddings = false"),
    ("gpt2", dict(n_inner=100), "n_inner = 100"),
    ("gpt2", dict(scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx = true"),
    ("llama", dict(rope_parameters={"rope_type": "longrope", "rope_theta": 5e5, "short_factor": [1.0]}),
     "rope_parameters.rope_type = \"longrope\""),
    ("llama", dict(rope_parameters=..., rope_scaling={"type": "su", "factor": 2.0}), "rope_scaling.type = \"su\""),
    ("llama", dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "rope_scaling.rope_type = \"linear\""),
    ("llama", dict(rope_parameters={"rope_type": "yarn", "rope_theta": 5e5, "factor": 4.0, "beta_fast": 16.0}),
     "rope_parameters.beta_fast = 16.0"),
    ("llama", dict(rope_parameters={"rope_type": "yarn", "rope_theta": 5e5, "factor": 4.0, "truncate": False}),
     "rope_parameters.truncate = false"),
    ("llama", dict(rope_parameters={"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "rope_typo": 1}),
     "rope_parameters.rope_typo = 1: the spec does not map it"),
    ("llama", dict(rope_parameters={"rope_type": "linear", "type": "dynamic", "rope_theta": 5e5, "factor": 2.0}),
     "rope_parameters.type = \"dynamic\""),
    ("llama", dict(attention_bias=True), "attention_bias = true"),
    ("llama", dict(head_dim=16), "head_dim = 16"),
    ("llama", dict(hidden_act="gelu"), "hidden_act = \"gelu\""),
    ("llama", dict(some_new_setting=3), "some_new_setting = 3: the spec does not map it"),
    ("mistral", dict(use_sliding_window=True), "use_sliding_window = true: the spec does not map it"),
    ("bert", dict(hidden_act="gelu_new"), "hidden_act = \"gelu_new\""),
    ("bert", dict(position_embedding_type="relative_key"), "position_embedding_type = \"relative_key\""),
    ("bert", dict(is_decoder=True), "is_decoder = true"),
    ("qwen2", dict(use_sliding_window=True), "use_sliding_window = true: the spec requires"),
    ("qwen2", dict(layer_types=["full_attention", "sliding_attention"]), "layer_types = [\"full_attention\", \"sl"),
    ("qwen2_moe", dict(mlp_only_layers=[2]), "mlp_only_layers = [2]"),  # past the last layer (1)
    ("gemma2", dict(layer_types=["full_attention", "sliding_attention"]), "layer_types = [\"full_attention\", \"sl"),
    ("gemma2", dict(hidden_activation="gelu"), "hidden_activation = \"gelu\""),
    ("gemma2", dict(tie_word_embeddings=False), "tie_word_embeddings = false"),
    ("gemma2", dict(use_bidirectional_attention=True), "use_bidirectional_attention = true"),
    ("gemma4_text", dict(attention_k_eq_v=True), "attention_k_eq_v = true"),
    ("gemma4_text", dict(use_double_wide_mlp=True), "use_double_wide_mlp = true"),
    ("gemma4_text", dict(per_layer_config={str(i): {"head_dim": 16, "num_key_value_heads": 1} for i in (1, 4)}),
     "per_layer_config gives each full layer global_head_dim alone"),
    ("gemma3_text", dict(layer_types=["sliding_attention", "chunked_attention", "full_attention"]),
     "layer_types = ['sliding_attention', 'chunked_attention', 'full_attention']"),
    ("gemma3_text", dict(num_hidden_layers=2), "num_hidden_layers = 2"),
    ("gemma3_text", dict(rope_parameters={**GEMMA3_ROPE, "sliding_attention": {"rope_type": "linear", "factor": 2.0,
                                                                               "rope_theta": 100.0}}),
     "rope_parameters.sliding_attention.rope_type = \"linear\""),
    ("gemma3_text", dict(rope_parameters={**GEMMA3_ROPE, "full_attention": {"rope_type": "yarn", "factor": 2.0,
                                                                            "rope_theta": 5000.0}}),
     "rope_parameters.full_attention.rope_type = \"yarn\""),
    ("gemma3_text", dict(hidden_activation="gelu"), "hidden_activation = \"gelu\""),
    ("gemma3_text", dict(tie_word_embeddings=False), "tie_word_embeddings = false"),
    ("gemma3_text", dict(use_bidirectional_attention=True), "use_bidirectional_attention = true"),
    ("gptj", dict(activation_function="relu"), "activation_function = \"relu\""),
    ("gptj", dict(tie_word_embeddings=True), "tie_word_embeddings = true"),
    ("gptj", dict(attn_pdrop=0.1), "attn_pdrop = 0.1"),
    ("phi", dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4, "partial_rotary_factor": 0.5}),
     "rope_parameters.rope_type = \"linear\""),
    ("phi", dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), "rope_scaling = {\"rope_type\": \"dynamic\""),
    ("phi", dict(hidden_act="relu"), "hidden_act = \"relu\""),
    ("phi", dict(head_dim=16), "head_dim = 16"),
    ("gpt_neox", dict(hidden_act="relu"), "hidden_act = \"relu\""),
    ("gpt_neox", dict(tie_word_embeddings=True), "tie_word_embeddings = true"),
    ("gpt_neox", dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4,
                                       "partial_rotary_factor": 0.5}), "rope_parameters.rope_type = \"linear\""),
    ("gpt_oss", dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4}), "rope_parameters.rope_type = \"default\""),
    ("gpt_oss", dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 8.0, "mscale": 0.7,
                                      "original_max_position_embeddings": 8}), "rope_parameters.mscale = 0.7"),
    ("gpt_oss", dict(layer_types=["sliding_attention", "chunked_attention"]),
     "each item of `attention_types` must be 'sliding_attention' or 'full_attention'"),
    ("gpt_oss", dict(tie_word_embeddings=True), "tie_word_embeddings = true"),
])
def test_a_setting_the_spec_cannot_honour_is_named(tmp_path, family, changes, named):
    refused(tmp_path, family, changes, named)


def refused(tmp_path, family: str, changes: dict, named: str) -> None:
    """The family's config.json with `changes` is a PretrainedError naming the setting and the spec."""
    _, folder = saved(tmp_path, family)
    edit_config(folder, **changes)
    with pytest.raises(PretrainedError) as err:
        snf.from_pretrained(folder)
    assert named in str(err.value) and f"{FAMILIES[family]}.snf" in str(err.value)


def test_an_unknown_model_type_a_missing_key_and_misfitting_weights(tmp_path):
    _, folder = saved(tmp_path, "llama")
    edit_config(folder, model_type="falcon")
    with pytest.raises(PretrainedError, match=r"no bundled spec for model_type 'falcon'.*'llama' \(llama3.snf\)"):
        snf.from_pretrained(folder)
    edit_config(folder, model_type="llama", hidden_size=...)
    with pytest.raises(PretrainedError, match=r"config.json has no `hidden_size`"):
        snf.from_pretrained(folder)
    edit_config(folder, hidden_size=40, head_dim=10)  # what config.json says; the weights are 32 wide
    with pytest.raises(CheckpointError, match=r"model.embed_tokens.weight \(for token_embedding.weight\): expected shape \[97, 40\], "
                                               r"got \[97, 32\]"):
        snf.from_pretrained(folder)
    with pytest.raises(FileNotFoundError, match="no config.json"):
        snf.from_pretrained(tmp_path)


def test_a_spec_without_a_config_section_and_a_config_the_spec_refuses(tmp_path, repo):
    _, folder = saved(tmp_path, "gpt2")
    with pytest.raises(PretrainedError, match=r"gpt_decoder.snf.*no `config hf:` section"):
        snf.from_pretrained(folder, spec=repo / "specs" / "gpt_decoder.snf")
    edit_config(folder, n_layer="two")
    with pytest.raises(PretrainedError, match=r"config.json gives a Config the spec refuses.*n_layer='two'"):
        snf.from_pretrained(folder)


# the families' own settings, away from their rows' configs: tests/test_from_pretrained_families.py

# in a fresh process, as a user runs it, on the default path (SNF_COMPILE unset: at this size nothing
# compiles); every family with its decode steps compiled: tests/property/test_session.py
@pytest.mark.parametrize("family", ["llama"])
def test_the_default_path_generates_what_transformers_does(tmp_path, family):
    from conftest import python_subprocess
    hf, folder = saved(tmp_path, family)
    idx = tokens(hf.config.vocab_size, t=5)
    want = hf.generate(idx, max_new_tokens=6, do_sample=False, pad_token_id=0)
    code = (f"import snf, torch; m = snf.from_pretrained({str(folder)!r}); "
            f"print(m.generate(torch.tensor({idx.tolist()}), 6, temperature=0).tolist())")
    run = python_subprocess(code, env={"SNF_COMPILE": ""}, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == str(want.tolist())


@pytest.mark.parametrize("family", list(FAMILIES))
def test_config_json_round_trips_key_for_key(tmp_path, family):
    """from_pretrained -> save_pretrained writes back the config.json it read, key for key: the keys
    the spec lists as harmless (`_ <-`) keep their values, token ids included (bos/eos/pad 5/6/7,
    not transformers' defaults), and a key the file left null or absent stays so. transformers
    saving snfc's folder again gives the same file."""
    _, folder = saved(tmp_path, family, bos_token_id=5, eos_token_id=6, pad_token_id=7)
    original = json.loads((folder / "config.json").read_text())
    snf.save_pretrained(snf.from_pretrained(folder), tmp_path / "snf_out")
    assert json.loads((tmp_path / "snf_out" / "config.json").read_text()) == original
    auto_class(family).from_pretrained(tmp_path / "snf_out").save_pretrained(tmp_path / "hf_out")
    assert json.loads((tmp_path / "hf_out" / "config.json").read_text()) == original


def test_save_pretrained_keeps_the_tokenizer_and_generation_config(tmp_path):
    """The folder a model came from holds its tokenizer and generation settings beside the weights:
    save_pretrained copies them, so the saved folder works as the original did (transformers reads
    generation_config.json's eos id; a pipeline reads the tokenizer)."""
    _, folder = saved(tmp_path, "llama", bos_token_id=5, eos_token_id=6, pad_token_id=7)
    files = {"tokenizer.json": '{"version": "1.0", "model": {"type": "BPE"}}', "tokenizer_config.json": '{"x": 1}',
             "special_tokens_map.json": '{"eos_token": "</s>"}', "chat_template.jinja": "{{ messages }}"}
    for name, text in files.items():
        (folder / name).write_text(text)
    (folder / "README.md").write_text("not the model's")
    model = snf.from_pretrained(folder)
    snf.save_pretrained(model, tmp_path / "out")
    for name in [*files, "generation_config.json"]:
        assert (tmp_path / "out" / name).read_bytes() == (folder / name).read_bytes(), name
    assert not (tmp_path / "out" / "README.md").exists()
    assert transformers.GenerationConfig.from_pretrained(tmp_path / "out").eos_token_id == 6
    snf.save_pretrained(model, folder)  # into its own folder: the files stay as they are
    assert all((folder / name).read_text() == text for name, text in files.items())
    fresh = type(model)(model.config)  # a model built, not loaded: nothing to copy
    snf.save_pretrained(fresh, tmp_path / "fresh")
    assert sorted(p.name for p in (tmp_path / "fresh").iterdir()) == ["config.json", "model.safetensors"]


@pytest.mark.parametrize("changes", [dict(attention_bias=False), dict(num_hidden_layers=3, layer_types=None)],
                         ids=["no attention biases", "transformers' default layer_types"])
def test_gpt_oss_variants_match_transformers(tmp_path, changes):
    """gpt-oss without the attention biases, and with three layers of the default pattern (sliding, full,
    sliding) over a sequence longer than the window."""
    hf, folder = saved(tmp_path, "gpt_oss", **changes)
    model = snf.from_pretrained(folder)
    assert model.config.attention_types == tuple(hf.config.layer_types)
    idx = tokens(hf.config.vocab_size, t=20)
    with torch.no_grad():
        assert _close(model(idx).logits, hf(idx).logits)


def test_gpt_oss_reads_the_released_config_layout(tmp_path):
    """openai/gpt-oss-20b's config.json (transformers 4.55): rope_scaling beside rope_theta, YaRN's ramp
    not truncated, and the original config's experts_per_token and initial_context_length; written back
    as it was read."""
    rope = {"rope_type": "yarn", "factor": 8.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
            "original_max_position_embeddings": 8}
    hf, folder = saved(tmp_path, "gpt_oss", rope_parameters={**rope, "rope_theta": 5000.0})
    edit_config(folder, rope_parameters=..., rope_scaling=rope, rope_theta=5000.0, experts_per_token=2,
                initial_context_length=8)
    model = snf.from_pretrained(folder)
    assert (model.config.rope_truncate, model.config.rope_base, model.config.rope_factor) == (False, 5000.0, 8.0)
    idx = tokens(hf.config.vocab_size)
    with torch.no_grad():
        assert _close(model(idx).logits, hf(idx).logits)
    snf.save_pretrained(model, tmp_path / "back")
    assert json.loads((tmp_path / "back" / "config.json").read_text()) == json.loads((folder / "config.json").read_text())
