"""specs/whisper.snf (WhisperForConditionalGeneration) through snf.from_pretrained, against transformers
on a tiny random model (no downloads): the logits (fp32, relative 1e-5) with and without the decoder's
KV cache, the encoder's states and the loss; `generate` from log-mel features, greedy and sampled,
token for token with transformers' own decoding loop (GenerationMixin.generate: Whisper's generate
adds its task and timestamp rules on top), from the start token, from a decoder prompt, and with
rows ending at eos_token_id; the save_pretrained round trip; and what `snfc check -v` says.

Sampled tokens equal transformers' exactly: both draw one `torch.multinomial` per step from the same
CPU stream (transformers' the global one, seeded with torch.manual_seed; ours a torch.Generator of
the same seed), over the same top-k softmax of logits equal to fp32's precision.
"""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

import snf  # noqa: E402
from test_from_pretrained import _close, _round_trip, edit_config, saved  # noqa: E402


def _features(config, batch: int = 3, seed: int = 0) -> torch.Tensor:
    """Log-mel frames [B, num_mel_bins, 2 * max_source_positions] (the length Whisper requires)."""
    shape = (batch, config.num_mel_bins, 2 * config.max_source_positions)
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _hf_generate(hf, feats, **kwargs) -> torch.Tensor:
    """transformers' generate loop itself (Whisper's own adds language, task and timestamp rules)."""
    return transformers.GenerationMixin.generate(hf, input_features=feats, begin_suppress_tokens=None,
                                                 suppress_tokens=None, **kwargs)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    hf, folder = saved(tmp_path_factory.mktemp("whisper"), "whisper")
    return hf, folder, snf.from_pretrained(folder)


def test_logits_encoder_states_and_loss_match_transformers(pair):
    hf, _, model = pair
    feats = _features(hf.config)
    dec = torch.randint(0, 97, (3, 6), generator=torch.Generator().manual_seed(1))
    labels = dec.roll(-1, dims=1)
    labels[0, 3:] = -100
    with torch.no_grad():
        want = hf(input_features=feats, decoder_input_ids=dec, labels=labels)
        got = model(feats, decoder_input_ids=dec, labels=labels)
        assert _close(got.logits, want.logits)
        later = model(feats, decoder_input_ids=dec[:, 4:], past_keys=got.new_keys[:, :, :4],
                      past_values=got.new_values[:, :, :4])
        assert _close(later.logits, want.logits[:, 4:])
        assert _close(got.encoder_last_hidden_state, hf.get_encoder()(feats).last_hidden_state)
        assert torch.allclose(got.loss, want.loss, rtol=1e-5)


def test_generate_matches_transformers_greedy_sampled_prompted_and_ending(pair, tmp_path, monkeypatch):
    hf, folder, model = pair
    feats = _features(hf.config)
    calls = []
    encode = type(model)._encode
    monkeypatch.setattr(type(model), "_encode", lambda self, *a, **k: calls.append(1) or encode(self, *a, **k))
    want = _hf_generate(hf, feats, max_new_tokens=10, do_sample=False)
    got = model.generate(feats, 10, temperature=0)
    assert torch.equal(got, want), (got, want)
    assert got[:, 0].eq(model.config.decoder_start_token_id).all() and calls == [1]  # the encoder ran once
    for seed in (0, 1):
        torch.manual_seed(seed)
        want = _hf_generate(hf, feats, max_new_tokens=10, do_sample=True, temperature=0.9, top_k=20)
        got = model.generate(feats, 10, temperature=0.9, top_k=20, generator=torch.Generator().manual_seed(seed))
        assert torch.equal(got, want), (seed, got, want)
    prompt = torch.tensor([[90, 5, 7]] * 3)  # a decoder prompt (Whisper's start, language and task tokens)
    assert torch.equal(model.generate(feats, 6, temperature=0, decoder_input_ids=prompt),
                       _hf_generate(hf, feats, decoder_input_ids=prompt, max_new_tokens=6, do_sample=False))
    # rows that end at different steps: eos_token_id a token the greedy rows reach late and early
    greedy = model.generate(feats, 10, temperature=0)
    eos = int(greedy[0, 4])
    edit_config(folder, eos_token_id=eos)
    ending = snf.from_pretrained(folder)
    want = _hf_generate(hf, feats, max_new_tokens=10, do_sample=False, eos_token_id=eos, pad_token_id=91)
    assert torch.equal(ending.generate(feats, 10, temperature=0), want)
    with pytest.raises(ValueError, match="one decoder prompt per encoder input"):
        model.generate(feats, 2, decoder_input_ids=prompt[:2])
    with pytest.raises(ValueError, match="input_features"):
        model.generate(None, 2)


def test_round_trip_through_transformers_is_exact(tmp_path):
    def agree(model, hf):
        feats = _features(hf.config, batch=2)
        dec = torch.randint(0, 97, (2, 5), generator=torch.Generator().manual_seed(4))
        assert _close(model(feats, decoder_input_ids=dec).logits,
                      hf(input_features=feats, decoder_input_ids=dec).logits)
    _round_trip(tmp_path, "whisper", agree)
    assert json.loads((tmp_path / "snf_out" / "config.json").read_text())["architectures"] == \
        ["WhisperForConditionalGeneration"]


def test_check_notes_the_encoder_plan_or_why_there_is_no_generate(repo):
    """An encoder over features is an encoder-decoder's too; a spec with no generate gets one line
    saying why, and no note on how generate would decode."""
    from snf.compiler import analyze, plan_notes
    from snf.source import Source
    text = (repo / "specs/whisper.snf").read_text()
    notes = [d.message for d in plan_notes(analyze(Source.read(repo / "specs/whisper.snf")))]
    assert any("an encoder-decoder: generate runs what does not read `decoder_input_ids` once (from "
               "input_features;" in n for n in notes), notes
    edited = text.replace("  decoder_start_token_id <- hf.decoder_start_token_id or 50257\n", "").replace(
        "  decoder_start_token_id : int = 50257", "")
    result = analyze(Source.from_bytes("whisper_edited.snf", edited.encode()))
    assert result.ok, [d.message for d in result.diagnostics if d.severity == "error"]
    said = [d.message for d in plan_notes(result) if d.code == "generate-plan" or "generate" in d.message]
    assert len(said) == 1 and said[0].startswith("no generate: ") and "decoder_start_token_id" in said[0], said
