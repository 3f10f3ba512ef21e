"""specs/t5.snf (T5ForConditionalGeneration) through snf.from_pretrained, against transformers on
tiny random models (no downloads): the logits (fp32, relative 1e-5) with ReLU and gated-GELU MLPs,
a scaled tied head and an unscaled one, with the decoder's KV cache; greedy `generate` token for
token with transformers' (a padded batch, rows ending at eos_token_id); sampling reproducible; the
compiled path; the save_pretrained round trip; and what `snfc check -v` says of the encoder plan.
"""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

import snf  # noqa: E402
from test_from_pretrained import _close, _round_trip, saved  # noqa: E402

VARIANTS = {  # transformers 5 always ties the head; tie_word_embeddings=False leaves it unscaled
    "relu-scaled": dict(feed_forward_proj="relu", tie_word_embeddings=True),
    "relu-unscaled": dict(feed_forward_proj="relu"),
    "gated-gelu-scaled": dict(tie_word_embeddings=True),
    "gated-gelu-unscaled": dict(),
}


def _batch(vocab: int, s: int = 9, seed: int = 5):
    ids = torch.randint(2, vocab, (3, s), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0  # padding
    return ids, mask


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_match_transformers_with_and_without_the_cache(tmp_path, variant):
    hf, folder = saved(tmp_path, "t5", **VARIANTS[variant])
    model = snf.from_pretrained(folder)
    ids, mask = _batch(97)
    dec = torch.randint(2, 97, (3, 6), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits
        got = model(ids, decoder_input_ids=dec, attention_mask=mask)
        assert _close(got.logits, want), variant
        later = model(ids, decoder_input_ids=dec[:, 4:], attention_mask=mask,
                      past_keys=model(ids, decoder_input_ids=dec[:, :4], attention_mask=mask).new_keys[:, :, :4],
                      past_values=got.new_values[:, :, :4])
        assert _close(later.logits, want[:, 4:]), variant
        assert _close(got.encoder_last_hidden_state,
                      hf.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state)


def test_the_loss_ignores_minus_100(tmp_path):
    hf, folder = saved(tmp_path, "t5")
    model = snf.from_pretrained(folder)
    ids, mask = _batch(97)
    labels = torch.randint(2, 97, (3, 5), generator=torch.Generator().manual_seed(8))
    labels[0, 3:] = -100
    dec = hf._shift_right(labels)
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask, labels=labels).loss
        got = model(ids, decoder_input_ids=dec, attention_mask=mask, labels=labels).loss
    assert torch.allclose(got, want, rtol=1e-5)


def test_an_older_untied_config_reads_its_own_head(tmp_path):
    """Flan-T5's config.json (transformers 4) says tie_word_embeddings = false and no
    scale_decoder_outputs: an unscaled head of its own (lm_head.weight, or shared.weight where a
    transformers 5 folder holds only that)."""
    hf, folder = saved(tmp_path, "t5")
    config = json.loads((folder / "config.json").read_text())
    config.pop("scale_decoder_outputs")
    config["tie_word_embeddings"] = False
    (folder / "config.json").write_text(json.dumps(config))
    model = snf.from_pretrained(folder)
    assert not model.config.tie_embeddings and not model.config.scale_head
    ids, mask = _batch(97)
    dec = torch.randint(2, 97, (3, 4), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        assert _close(model(ids, decoder_input_ids=dec, attention_mask=mask).logits,
                      hf(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits)


@pytest.mark.parametrize("eos", [1, 58, 20])  # 58, 20: every row ends early, at different steps
def test_greedy_generate_matches_transformers(tmp_path, eos):
    hf, folder = saved(tmp_path, "t5", eos_token_id=eos)
    model = snf.from_pretrained(folder)
    ids, mask = _batch(97)
    want = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
    got = model.generate(ids, 12, temperature=0, attention_mask=mask)
    assert torch.equal(got, want), (got, want)
    assert got[:, 0].eq(model.config.decoder_start_token_id).all()


def test_greedy_generate_matches_transformers_relu_scaled(tmp_path):
    hf, folder = saved(tmp_path, "t5", **VARIANTS["relu-scaled"])
    model = snf.from_pretrained(folder)
    ids, _ = _batch(97)
    assert torch.equal(model.generate(ids, 6, temperature=0),
                       hf.generate(input_ids=ids, max_new_tokens=6, do_sample=False))


def test_generate_encodes_once_and_samples_reproducibly(tmp_path, monkeypatch):
    _, folder = saved(tmp_path, "t5")
    model = snf.from_pretrained(folder)
    calls = []
    encode = type(model)._encode
    monkeypatch.setattr(type(model), "_encode", lambda self, *a, **k: calls.append(1) or encode(self, *a, **k))
    ids, mask = _batch(97)
    first = model.generate(ids, 8, temperature=0.9, top_k=20, generator=torch.Generator().manual_seed(3),
                           attention_mask=mask)
    assert len(calls) == 1
    again = model.generate(ids, 8, temperature=0.9, top_k=20, generator=torch.Generator().manual_seed(3),
                           attention_mask=mask)
    assert torch.equal(first, again)


def test_round_trip_through_transformers_is_exact(tmp_path):
    def agree(model, hf):
        ids, mask = _batch(97)
        dec = torch.randint(2, 97, (3, 5), generator=torch.Generator().manual_seed(4))
        assert _close(model(ids, decoder_input_ids=dec, attention_mask=mask).logits,
                      hf(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits)
    _round_trip(tmp_path, "t5", agree)


def test_check_notes_the_encoder_plan(repo):
    from snf.compiler import analyze, plan_notes
    from snf.source import Source
    notes = [d.message for d in plan_notes(analyze(Source.read(repo / "specs/t5.snf")))]
    assert any("an encoder-decoder: generate runs what does not read `decoder_input_ids` once" in n
               and "cross_keys, cross_values" in n for n in notes), notes
    encoder = [d.message for d in plan_notes(analyze(Source.read(repo / "specs/t5_encoder.snf")))]
    assert not any("encoder-decoder" in n for n in encoder)  # hidden states, not logits


def test_cross_keys_in_the_decoder_loop_are_noted(repo):
    """Written inside the decoder loop, the cross-attention keys and values are recomputed at
    every step: generate still works, and `check -v` says so."""
    from snf.compiler import analyze, plan_notes
    from snf.source import Source
    text = (repo / "specs/t5.snf").read_text()
    text = text.replace("cross_keys[l], cross_values[l]", "ck, cv").replace(
        "    let cross = flash_attention(", "    let ck = reshape(linear(encoder_last_hidden_state, weight=cross_k_weight[l]), "
        "[B, S, H, d_kv])\n    let cv = reshape(linear(encoder_last_hidden_state, weight=cross_v_weight[l]), "
        "[B, S, H, d_kv])\n    let cross = flash_attention(")
    start, end = text.index("let cross_keys = full"), text.index("# 3. the decoder")
    text = text[:start] + text[end:]
    result = analyze(Source.from_bytes("t5_inline.snf", text.encode()))
    assert result.ok, [d.message for d in result.diagnostics]
    notes = [d.message for d in plan_notes(result)]
    assert any("`ck` reads only the encoder's side but is computed in the decoder's loop" in n for n in notes), notes


@pytest.mark.slow  # torch.compile, in this process
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch internals, while compiling
def test_the_compiled_path_generates_what_transformers_does(tmp_path, monkeypatch):
    """On the default units (the decode step compiled; the encoder and the prompt's pass eager on a
    CPU), at T5's family config: the t5 session runs at its small config, with no transformers to
    compare."""
    import warnings
    monkeypatch.setenv("SNF_COMPILE", "1")
    torch._dynamo.reset()
    hf, folder = saved(tmp_path, "t5", eos_token_id=58)
    model = snf.from_pretrained(folder)
    ids, mask = _batch(97)
    want = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=10, do_sample=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a fallback to eager fails here
        got = model.generate(ids, 10, temperature=0, attention_mask=mask)
    assert torch.equal(got, want)


def test_an_encoder_folder_loads_t5_encoder_snf(tmp_path):
    """Both T5 specs claim model_type "t5": config.json's architectures choose (T5EncoderModel:
    specs/t5_encoder.snf, T5ForConditionalGeneration: specs/t5.snf)."""
    from specs_table import ROWS
    from test_from_pretrained import NORMS
    kwargs = dict(ROWS["t5"].hf, feed_forward_proj="relu")
    torch.manual_seed(0)
    hf = transformers.T5EncoderModel(transformers.T5Config(**kwargs)).eval()
    with torch.no_grad():
        for key, p in hf.named_parameters():
            p.copy_((1.0 if key.endswith(NORMS) else 0.0) + torch.randn_like(p) * 0.2)
    hf.save_pretrained(tmp_path / "encoder")
    model = snf.from_pretrained(tmp_path / "encoder")
    assert type(model).__module__.endswith("t5_encoder") or "t5_encoder" in model.__class__.__doc__
    ids, mask = _batch(97)
    with torch.no_grad():
        assert _close(model(ids, attention_mask=mask), hf(input_ids=ids, attention_mask=mask).last_hidden_state)
    snf.save_pretrained(model, tmp_path / "back")
    assert json.loads((tmp_path / "back" / "config.json").read_text())["architectures"] == ["T5EncoderModel"]
    _, folder = saved(tmp_path, "t5")
    assert "t5.snf" in snf.from_pretrained(folder).__class__.__doc__


@pytest.mark.parametrize("edit, why", [
    (lambda t: t.replace("  decoder_start_token_id : int = 0 # generate's first decoder token\n", "").replace(
        "  decoder_start_token_id <- hf.decoder_start_token_id or 0\n", ""), "declare it (`decoder_start_token_id : int`)"),
    (lambda t: t.replace("  pad_token_id : int = 0\n", "").replace("  pad_token_id <- hf.pad_token_id or 0\n", ""),
     "declare both, or neither"),
    (lambda t: t.replace("causal=True, scale=1.0, bias=dec_bias", "scale=1.0, bias=dec_bias"),
     "an attention of the decoder is not causal and its keys see the decoder's tokens"),
])
def test_check_says_why_an_encoder_decoder_gets_no_generate(repo, edit, why):
    from snf.compiler import analyze, plan_notes
    from snf.source import Source
    result = analyze(Source.from_bytes("t5_edited.snf", edit((repo / "specs/t5.snf").read_text()).encode()))
    assert result.ok, [d.message for d in result.diagnostics if d.severity == "error"]
    notes = [d.message for d in plan_notes(result)]
    assert any(n.startswith("no generate: ") and why in n for n in notes), notes
    assert not any(n.startswith("generate ") for n in notes), notes  # nothing of how it would decode
