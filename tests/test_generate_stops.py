"""A decoder's generate as a transformers user calls it (snf/runtime/generate.py): rows stop at end
tokens and are padded after them, a left-padded batch with its attention_mask gives each row what
its prompt alone gives, transformers' argument names work, and the end tokens come from the
checkpoint folder. Each bundled decoder against transformers' own generate, greedy, on tiny random
weights (eager; the compiled decode is the same loop)."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

import snf  # noqa: E402
from test_from_pretrained import CAUSAL, saved  # noqa: E402

PAD = 0
# transformers 5.23's Nemotron-H gives a left-padded row other tokens than the same prompt alone (its
# Mamba2 layers' states see the padding), as does its Llama 4 (its NoPE layers' temperature counts positions
# from the padding, past floor_scale = 4 in its row's config); there each row is compared with transformers
# on that prompt alone
PADDING_DIFFERS = {"nemotron_h", "llama4_text"}


def _padded_batch(vocab: int, lengths=(7, 4, 2)):
    """Prompts of these lengths (7, 4 and 2 tokens), left-padded with PAD, and their attention mask."""
    g = torch.Generator().manual_seed(3)
    rows = [torch.randint(1, vocab, (n,), generator=g) for n in lengths]
    ids = torch.full((len(rows), 7), PAD, dtype=torch.long)
    mask = torch.zeros(len(rows), 7, dtype=torch.long)
    for r, row in enumerate(rows):
        ids[r, 7 - len(row):] = row
        mask[r, 7 - len(row):] = 1
    return ids, mask, rows


@pytest.mark.parametrize("family", CAUSAL)
def test_padded_batches_stop_at_eos_as_transformers_does(tmp_path, family):
    hf, folder = saved(tmp_path, family)
    model = snf.from_pretrained(folder)
    ids, mask, rows = _padded_batch(hf.config.vocab_size)
    free = hf.generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=False, pad_token_id=PAD)
    eos = int(free[0, 7 + 2])  # the first row's third new token ends it: rows end at different steps
    want = hf.generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=False, eos_token_id=eos,
                       pad_token_id=PAD)
    if family in PADDING_DIFFERS:
        want, made = torch.cat([ids, torch.full((3, 10), PAD)], dim=1), 0
        for r, row in enumerate(rows):
            new = hf.generate(row[None], max_new_tokens=10, do_sample=False, eos_token_id=eos, pad_token_id=PAD)
            want[r, 7:7 + new.size(1) - len(row)] = new[0, len(row):]
            made = max(made, new.size(1) - len(row))  # the batch runs until its last row ends
        want = want[:, :7 + made]
    got = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=10, do_sample=False, eos_token_id=eos,
                         pad_token_id=PAD)
    assert torch.equal(got, want)
    # each row is what its prompt alone gives
    for r, row in enumerate(rows):
        alone = model.generate(row[None], 10, temperature=0, eos_token_id=eos, pad_token_id=PAD)
        assert torch.equal(got[r, 7 - len(row):7 - len(row) + alone.size(1)], alone[0])


def test_the_folder_gives_the_end_tokens(tmp_path):
    hf, folder = saved(tmp_path, "llama")
    idx = torch.randint(1, 97, (2, 5), generator=torch.Generator().manual_seed(0))
    free = snf.from_pretrained(folder).generate(idx, 8, temperature=0)
    eos = int(free[1, 5 + 1])
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [96, eos], "pad_token_id": 1}))
    model = snf.from_pretrained(folder)
    stops = model.loaded_from.generation_config
    assert stops.eos_token_id == (96, eos) and stops.pad_token_id == 1
    got = model.generate(idx, 8, temperature=0)
    want = hf.generate(idx, attention_mask=torch.ones_like(idx), max_new_tokens=8, do_sample=False,
                       eos_token_id=[96, eos], pad_token_id=1)  # (without a mask it reads token 1 as padding)
    assert torch.equal(got, want)
    assert got.size(1) <= free.size(1)


def _tiny():
    return snf.load("specs/llama3.snf").Model(vocab_size=31, block_size=32, n_layer=1, n_embd=16, n_head=2,
                                              n_kv_head=1, mlp_hidden=24).eval()


def test_transformers_names_mean_ours():
    torch.manual_seed(0)
    model, idx = _tiny(), torch.randint(0, 31, (2, 4))
    ours = model.generate(idx, 5, temperature=0)
    assert torch.equal(model.generate(input_ids=idx, max_length=9, do_sample=False), ours)
    assert model.generate(idx, max_length=3, do_sample=False).shape == (2, 4)  # no room: the prompt back
    with pytest.raises(TypeError, match="num_beam"):
        model.generate(idx, 5, num_beam=2)
    with pytest.raises(ValueError, match="num_beams=2"):
        model.generate(idx, 5, num_beams=2)
    with pytest.raises(TypeError, match="twice"):
        model.generate(idx, 5, input_ids=idx)
    with pytest.raises(TypeError, match="max_new_tokens"):
        model.generate(idx)


def test_a_mask_that_is_not_left_padding_is_refused():
    model, idx = _tiny(), torch.randint(0, 31, (2, 4))
    with pytest.raises(ValueError, match="on the left"):
        model.generate(idx, 3, attention_mask=torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]]))
    with pytest.raises(ValueError, match="no tokens"):
        model.generate(idx, 3, attention_mask=torch.tensor([[0, 0, 0, 0], [1, 1, 1, 1]]))
    with pytest.raises(ValueError, match="shape"):
        model.generate(idx, 3, attention_mask=torch.ones(2, 3, dtype=torch.long))
    full = model.generate(idx, 3, temperature=0, attention_mask=torch.ones(2, 4, dtype=torch.long))
    assert torch.equal(full, model.generate(idx, 3, temperature=0))


def test_every_row_ended_stops_early_and_ended_rows_are_padded():
    torch.manual_seed(1)
    model, idx = _tiny(), torch.randint(0, 31, (2, 4))
    free = model.generate(idx, 12, temperature=0)
    ends = {int(free[0, 5]), int(free[1, 6])}
    got = model.generate(idx, 12, temperature=0, eos_token_id=sorted(ends), pad_token_id=30)
    for row in range(2):
        new = got[row, 4:].tolist()
        first = next(i for i, t in enumerate(new) if t in ends)
        assert new[:first + 1] == free[row, 4:5 + first].tolist()
        assert all(t == 30 for t in new[first + 1:])
    assert got.size(1) < free.size(1)  # both rows ended before 12 new tokens


# ----------------------------------------------------------------------------- text in, text out

def _with_tokenizer(folder, vocab: int = 97):
    """A word-level tokenizer of `vocab` words (w0, w1, ...) saved beside the model, as a hub folder has one."""
    tokenizers = pytest.importorskip("tokenizers")
    words = {f"w{i}": i for i in range(vocab - 1)} | {"<unk>": vocab - 1}
    inner = tokenizers.Tokenizer(tokenizers.models.WordLevel(words, unk_token="<unk>"))
    inner.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=inner, unk_token="<unk>").save_pretrained(folder)


def test_snfc_generate_prints_the_continuation(tmp_path, capsys):
    from snf.cli import main

    hf, folder = saved(tmp_path, "llama")
    _with_tokenizer(folder)
    ids = torch.tensor([[5, 7, 9]])
    want = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False)
    text = "w5 w7 w9" + "".join(f" w{t}" for t in want[0, 3:].tolist())
    assert main(["generate", str(folder), "--prompt", "w5 w7 w9", "--max-new-tokens", "6"]) == 0
    assert capsys.readouterr().out == text + "\n"
    pieces = []
    assert snf.generate_text(folder, "w5 w7 w9", max_new_tokens=6, stream=pieces.append) == text
    assert "w5 w7 w9" + "".join(pieces) == text and len(pieces) == 6  # one piece a token, as they came


def test_snfc_generate_without_a_tokenizer_is_an_error(tmp_path, capsys):
    from snf.cli import main

    _, folder = saved(tmp_path, "llama")
    assert main(["generate", str(folder), "--prompt", "hello"]) == 1
    assert "snfc generate: error:" in capsys.readouterr().err
    assert main(["generate", str(tmp_path / "nowhere"), "--prompt", "hello"]) == 1


def test_an_encoder_decoders_loop_encodes_once_feeds_the_cache_and_stops():
    """snf/runtime/generate.py's _generate_from_encoder on a toy model: the encoder runs once, each
    step gets the last token and the caches the step before returned, a row that ended is padded, and
    the loop stops when every row has ended."""
    from types import SimpleNamespace

    from snf.runtime.generate import _generate_from_encoder, _Generation

    class Toy(torch.nn.Module):  # next token: (last + 1) % 5, per row offset by the encoder's first token
        config = SimpleNamespace(decoder_start_token_id=1, eos_token_id=4, pad_token_id=0)

        def __init__(self):
            super().__init__()
            self.encodes, self.steps = 0, []

        def _encode(self, ids, mask=None):
            self.encodes += 1
            return (ids[:, :1],)

        def forward(self, ids, dec=None, mask=None, past=None, use_cache=True, encoded=None):
            assert encoded is not None  # generate's encoder values, not computed again
            self.steps.append(None if past is None else past.tolist())
            nxt = (dec[:, -1:] + encoded[0]) % 5
            logits = torch.nn.functional.one_hot(nxt, 5).float()
            return SimpleNamespace(logits=logits, new=torch.cat([past, dec], 1) if past is not None else dec)

    model = Toy()
    how = _Generation(tokens="dec", logits="logits", caches=(("past", "new"),), encoder=("ids", "mask"), stops=True)
    ids = torch.tensor([[1, 9], [2, 9]])
    out = _generate_from_encoder(model, how, (ids, None), 8, 0.0, None, None, None, False)
    # row 0: 1 -> 2 -> 3 -> 4 (end); row 1: 1 -> 3 -> 0 -> 2 -> 4 (end): row 0 padded after its end
    assert out.tolist() == [[1, 2, 3, 4, 0], [1, 3, 0, 2, 4]]
    assert model.encodes == 1
    assert model.steps[0] is None and model.steps[1] == [[1], [1]]  # the first step's cache fed to the second
