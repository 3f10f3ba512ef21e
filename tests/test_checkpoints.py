"""Checkpoints on disk (snf.interop.load_checkpoint / save_checkpoint), and the library fixes
around them: spec_state with no layers, pickling models from snf.load, non-tensor values."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

import generated.gpt_decoder as gd
import generated.nanogpt as ng
import snf
from conftest import REPO, python_subprocess
from snf import interop
from snf.checkpoint_files import SafetensorsFile
from snf.interop import CheckpointError, load_checkpoint, load_state_dict, save_checkpoint, spec_state

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

GPT2 = dict(n_layer=2, n_head=3, n_embd=48, vocab_size=97, block_size=16, gelu_tanh=True)  # GPT-2's GELU
LLAMA = dict(n_layer=2, n_head=3, n_embd=48, mlp_hidden=64, vocab_size=97, block_size=32)


def _randomise(model: torch.nn.Module, seed: int) -> None:
    """Random weights everywhere (norm weights around 1), so every parameter matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            centre = 1.0 if "norm" in name or "ln_" in name else 0.0
            p.copy_(centre + torch.randn(p.shape, generator=g) * 0.2)


def hf_gpt2(seed: int = 0):
    cfg = transformers.GPT2Config(vocab_size=GPT2["vocab_size"], n_positions=GPT2["block_size"],
                                  n_embd=GPT2["n_embd"], n_layer=GPT2["n_layer"], n_head=GPT2["n_head"],
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None,
                                  eos_token_id=None)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    _randomise(model, seed)
    return model


def hf_llama(seed: int = 0):
    cfg = transformers.LlamaConfig(num_hidden_layers=LLAMA["n_layer"], hidden_size=LLAMA["n_embd"],
                                   num_attention_heads=LLAMA["n_head"], num_key_value_heads=LLAMA["n_head"],
                                   intermediate_size=LLAMA["mlp_hidden"], vocab_size=LLAMA["vocab_size"],
                                   tie_word_embeddings=True, rms_norm_eps=1e-5, rope_theta=10000.0,
                                   max_position_embeddings=LLAMA["block_size"], attention_bias=False,
                                   mlp_bias=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = transformers.LlamaForCausalLM(cfg).eval()
    _randomise(model, seed)
    return model


def nanogpt(**changes):
    return ng.Model(**{**GPT2, **changes}).eval()


def decoder():
    return gd.Model(**LLAMA, gradient_checkpointing=False).eval()


def assert_same_logits(ours, hf, vocab: int) -> None:
    idx = torch.randint(0, vocab, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got, want = ours(idx).logits, hf(idx).logits
    assert want.abs().max() > 0.5  # a comparison that can fail
    assert (got - want).abs().max().item() <= 1e-5


def snapshot(model) -> dict:
    return {k: v.clone() for k, v in model.state_dict().items()}


def unchanged(model, before: dict) -> bool:
    after = model.state_dict()
    return after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)


# ------------------------------------------------------------- folders transformers writes


@pytest.mark.parametrize("shard", ["200KB", None], ids=["sharded", "single"])
def test_gpt2_save_pretrained_folder(tmp_path, shard):
    hf = hf_gpt2()
    hf.save_pretrained(tmp_path, **({"max_shard_size": shard} if shard else {}))
    files = sorted(p.name for p in tmp_path.iterdir())
    if shard:
        assert "model.safetensors.index.json" in files and sum(f.endswith(".safetensors") for f in files) > 1
    else:
        assert "model.safetensors" in files and "model.safetensors.index.json" not in files
    model = load_checkpoint(nanogpt(), tmp_path, "hf")
    assert_same_logits(model, hf, GPT2["vocab_size"])


def test_llama_save_pretrained_folder(tmp_path):
    hf = hf_llama()
    hf.save_pretrained(tmp_path, max_shard_size="100KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    model = load_checkpoint(decoder(), tmp_path, "hf")
    assert_same_logits(model, hf, LLAMA["vocab_size"])


def test_a_file_without_some_tensors_loads_with_strict_false(tmp_path):
    sd = hf_gpt2().state_dict()
    kept = sd.pop("transformer.ln_f.weight")
    torch.save(sd, tmp_path / "partial.bin")
    with pytest.raises(CheckpointError, match="missing keys: transformer.ln_f.weight"):
        load_checkpoint(nanogpt(), tmp_path / "partial.bin", "hf")
    with pytest.warns(interop.CheckpointWarning, match="left as they were: ln_f.weight"):
        model = load_checkpoint(nanogpt(), tmp_path / "partial.bin", "hf", strict=False)
    assert torch.equal(model.state_dict()["ln_f.weight"], torch.ones_like(kept))  # as initialised


def test_torch_save_state_dicts(tmp_path):
    hf = hf_gpt2()
    torch.save(hf.state_dict(), tmp_path / "gpt2.bin")
    assert_same_logits(load_checkpoint(nanogpt(), tmp_path / "gpt2.bin", "hf"), hf, GPT2["vocab_size"])
    # an older save_pretrained folder: pytorch_model.bin shards and their index
    sd = hf.state_dict()
    keys = sorted(sd)
    shards = {"pytorch_model-00001-of-00002.bin": keys[::2], "pytorch_model-00002-of-00002.bin": keys[1::2]}
    folder = tmp_path / "old"
    folder.mkdir()
    for file, part in shards.items():
        torch.save({k: sd[k] for k in part}, folder / file)
    weight_map = {k: file for file, part in shards.items() for k in part}
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    assert_same_logits(load_checkpoint(nanogpt(), folder, "hf"), hf, GPT2["vocab_size"])
    # the model's own state dict, saved with torch.save, is format "spec"
    ours = load_checkpoint(nanogpt(), folder, "hf")
    torch.save(ours.state_dict(), tmp_path / "ours.pt")
    assert_same_logits(load_checkpoint(nanogpt(), tmp_path / "ours.pt"), hf, GPT2["vocab_size"])


def test_only_the_keys_the_mapping_needs_are_read(tmp_path, monkeypatch):
    sd = dict(hf_gpt2().state_dict())
    sd["transformer.h.0.attn.bias"] = torch.ones(1, 1, 16, 16)  # an old mask buffer the spec ignores
    safetensors_torch.save_file({k: v.clone() for k, v in sd.items()}, str(tmp_path / "gpt2.safetensors"))
    read = []
    real, into = SafetensorsFile.__getitem__, SafetensorsFile.read_into
    monkeypatch.setattr(SafetensorsFile, "__getitem__", lambda self, key: read.append(key) or real(self, key))
    monkeypatch.setattr(SafetensorsFile, "read_into",  # a tensor read straight into its parameter
                        lambda self, key, out: into(self, key, out) and not read.append(key))
    load_checkpoint(nanogpt(), tmp_path / "gpt2.safetensors", "hf")
    assert "transformer.h.0.attn.bias" not in read
    assert sorted(read) == sorted(set(read))  # c_attn is split three ways but read once
    assert set(read) == set(sd) - {"transformer.h.0.attn.bias", "lm_head.weight"}  # the head is wte (tied)


# ------------------------------------------------------------------ the spec's own files


def test_save_checkpoint_writes_spec_names_and_loads_back(tmp_path):
    hf = hf_gpt2()
    model = load_state_dict(nanogpt(), hf.state_dict(), "hf")
    path = save_checkpoint(model, tmp_path / "nanogpt.safetensors")
    state = spec_state(model)
    with safetensors_torch.safe_open(str(path), "pt") as f:
        assert sorted(f.keys()) == sorted(state)
        assert all(torch.equal(f.get_tensor(k), state[k]) for k in state)
        assert f.get_tensor("attn_q_weight").shape == (2, 48, 48)  # stacked over the layers
        meta = f.metadata()
    header = (REPO / "generated" / "nanogpt.py").read_text().splitlines()[1]
    assert header == f"# spec sha256: {meta['snfc.spec_sha256']}"
    assert meta["snfc.spec_file"] == "specs/nanogpt.snf" and json.loads(meta["snfc.config"])["n_embd"] == 48
    back = load_checkpoint(nanogpt(), path)
    assert unchanged(back, model.state_dict())
    assert_same_logits(back, hf, GPT2["vocab_size"])


def test_save_checkpoint_of_a_decoder_and_a_loaded_spec(tmp_path):
    model = load_state_dict(decoder(), hf_llama().state_dict(), "hf")
    back = load_checkpoint(decoder(), save_checkpoint(model, tmp_path / "d.safetensors"))
    assert unchanged(back, model.state_dict())
    mod = snf.load(REPO / "specs" / "nanogpt.snf")
    loaded = mod.Model(mod.Config(**GPT2, bias=False))
    _randomise(loaded, 3)
    again = load_checkpoint(mod.Model(mod.Config(**GPT2, bias=False)), save_checkpoint(loaded, tmp_path / "n.st"))
    assert unchanged(again, loaded.state_dict())


def test_spec_file_errors_name_the_spec_names(tmp_path):
    state = {k: v.contiguous() for k, v in spec_state(nanogpt()).items()}
    del state["ln_f_bias"]
    state["attn_q_weight"] = state["attn_q_weight"][:1].contiguous()  # one layer of two
    state["surplus"] = torch.zeros(2)
    safetensors_torch.save_file(state, str(tmp_path / "bad.safetensors"))
    model = nanogpt()
    before = snapshot(model)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(model, tmp_path / "bad.safetensors")
    e = info.value
    assert e.missing == ["ln_f_bias"] and e.unexpected == ["surplus"]
    assert e.mismatched == [("attn_q_weight", (2, 48, 48), (1, 48, 48))]
    assert "attn_q_weight: expected shape [2, 48, 48], got [1, 48, 48]" in str(e)
    assert unchanged(model, before)


# ---------------------------------------------------------------------------- file errors


@pytest.fixture
def gpt2_file(tmp_path):
    """A transformers GPT-2 state dict as a safetensors file, edited by `write(sd)`."""
    sd = {k: v.clone() for k, v in hf_gpt2().state_dict().items()}  # lm_head.weight is tied: unshare it

    def write(edit) -> object:
        edit(sd)
        safetensors_torch.save_file(sd, str(tmp_path / "gpt2.safetensors"))
        return tmp_path / "gpt2.safetensors"
    return write


@pytest.mark.parametrize("edit, attribute, expected", [
    (lambda sd: sd.pop("transformer.h.1.ln_2.bias"), "missing", ["transformer.h.1.ln_2.bias"]),
    (lambda sd: sd.update({"transformer.h.0.extra": torch.zeros(3)}), "unexpected", ["transformer.h.0.extra"]),
    (lambda sd: sd.update({"transformer.wpe.weight": torch.zeros(8, 48)}), "mismatched",
     [("transformer.wpe.weight (for position_embedding)", (16, 48), (8, 48))]),
], ids=["missing", "extra", "shape"])
def test_a_file_that_does_not_fit_is_refused_before_loading(gpt2_file, edit, attribute, expected):
    path = gpt2_file(edit)
    model = nanogpt()
    before = snapshot(model)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(model, path, "hf")
    assert getattr(info.value, attribute) == expected
    assert str(expected[0] if attribute != "mismatched" else expected[0][0]) in str(info.value)
    assert unchanged(model, before)


def test_files_that_are_not_checkpoints(tmp_path):
    model = nanogpt()
    with pytest.raises(FileNotFoundError, match="no checkpoint at .*absent"):
        load_checkpoint(model, tmp_path / "absent.safetensors")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="folder without a checkpoint: expected model.safetensors.index.json"):
        load_checkpoint(model, tmp_path / "empty", "hf")
    (tmp_path / "notes.txt").write_text("not a checkpoint at all, just some words")
    with pytest.raises(ValueError, match="notes.txt is not a checkpoint: expected a safetensors file or a torch.save"):
        load_checkpoint(model, tmp_path / "notes.txt")
    (tmp_path / "broken.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": ")
    with pytest.raises(ValueError, match="broken.safetensors is not a readable safetensors file"):
        load_checkpoint(model, tmp_path / "broken.safetensors")
    torch.save([torch.zeros(2)], tmp_path / "list.pt")
    with pytest.raises(ValueError, match="list.pt holds a list, not a state dict"):
        load_checkpoint(model, tmp_path / "list.pt")
    torch.save({"weights": nanogpt()}, tmp_path / "module.pt")  # a whole module: weights_only refuses it
    with pytest.raises(ValueError, match=r"module.pt is not a state dict that torch.load\(weights_only=True\) reads"):
        load_checkpoint(model, tmp_path / "module.pt")
    (tmp_path / "model.safetensors.index.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="is not a shard index"):
        load_checkpoint(model, tmp_path, "hf")


# ------------------------------------------------------------ issue 10, "Library" section


def test_spec_state_with_no_layers(tmp_path):
    model = nanogpt(n_layer=0)
    state = spec_state(model)
    assert state["attn_q_weight"].shape == (0, 48, 48) and state["ln1_bias"].shape == (0, 48)
    assert state["token_embedding"].shape == (97, 48)
    assert "ln1_bias" not in spec_state(nanogpt(n_layer=0, bias=False))
    back = load_checkpoint(nanogpt(n_layer=0), save_checkpoint(model, tmp_path / "none.safetensors"))
    assert unchanged(back, model.state_dict())


SPECS = sorted((REPO / "specs").glob("*.snf"))


@pytest.mark.parametrize("spec", SPECS, ids=[p.stem for p in SPECS])
def test_spec_parameters_give_each_pieces_shape_and_dtype(spec):
    """What a model with no layers holds nowhere, `spec_state` reads from `spec_parameters`: each
    piece's shape and dtype, None where a switch leaves it out. They are the built module's, with
    the spec's bool switches as they are and all flipped."""
    from test_stats import _model_ir, _small
    m, mod = _model_ir(spec), snf.load(spec)
    flipped = {c.name: not c.default for c in m.config if c.kind == "bool" and c.name != "gradient_checkpointing"}
    for switches in ({}, flipped):
        model = mod.Model(mod.Config(**{**_small(m), **switches}))
        own, table = model.state_dict(), mod.spec_parameters(model.config)
        for name, _, key, rows in interop._pieces(model):
            shape, dtype = table[name].shape, table[name].dtype
            if key not in own:
                assert shape is None, (name, switches)
                continue
            piece = interop._piece(own, key, rows)
            assert (tuple(piece.shape), piece.dtype) == (shape, dtype), (name, switches)


def test_non_tensor_values_are_named():
    sd = dict(nanogpt().state_dict())
    sd["ln_f.weight"], sd["layers.0.ln1.bias"] = [1.0, 2.0], None
    with pytest.raises(CheckpointError) as info:
        load_state_dict(nanogpt(), sd)
    assert sorted(info.value.invalid) == [("layers.0.ln1.bias", "None"), ("ln_f.weight", "list")]
    assert "ln_f.weight: expected a tensor, got list" in str(info.value)
    spec = spec_state(nanogpt())
    spec["ln_f_weight"] = None  # in the spec's names too
    with pytest.raises(CheckpointError, match=r"ln_f_weight: expected a tensor, got None"):
        load_state_dict(nanogpt(), spec)
    hf = dict(hf_gpt2().state_dict())
    hf["transformer.h.1.attn.c_attn.weight"] = None
    with pytest.raises(CheckpointError, match=r"transformer.h.1.attn.c_attn.weight: expected a tensor, got None"):
        load_state_dict(nanogpt(), hf, "hf")


def _loaded_model():
    mod = snf.load(REPO / "specs" / "nanogpt.snf")
    model = mod.Model(mod.Config(**GPT2)).eval()
    _randomise(model, 5)
    return model


def test_a_model_from_snf_load_pickles():
    model = _loaded_model()
    idx = torch.randint(0, GPT2["vocab_size"], (2, 7))
    again = pickle.loads(pickle.dumps(model))
    assert type(again) is type(model) and type(again.config) is type(model.config)
    with torch.no_grad():
        assert torch.equal(again(idx).logits, model(idx).logits)
        out = model(idx)
    assert torch.equal(pickle.loads(pickle.dumps(out)).logits, out.logits)


def test_a_model_from_snf_load_survives_torch_save_in_a_new_process(tmp_path):
    model = _loaded_model()
    idx = torch.randint(0, GPT2["vocab_size"], (2, 7))
    with torch.no_grad():
        logits = model(idx).logits
    torch.save({"model": model, "idx": idx, "logits": logits}, tmp_path / "whole.pt")
    again = torch.load(tmp_path / "whole.pt", weights_only=False)
    assert type(again["model"]) is type(model)  # the same process: the same classes
    code = (f"import torch\nd = torch.load({str(tmp_path / 'whole.pt')!r}, weights_only=False)\n"
            "m = d['model']\nwith torch.no_grad():\n    same = torch.equal(m(d['idx']).logits, d['logits'])\n"
            "print(type(m).__module__, same)")
    done = python_subprocess(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [type(model).__module__, "True"]


@pytest.mark.parametrize("bad, key, want", [
    (torch.zeros(48), "transformer.h.0.attn.c_attn.weight", (48, 144)),  # one axis behind split(..., axis=1)
    (torch.zeros(48, 2), "transformer.h.0.attn.c_attn.weight", (48, 144)),  # fewer columns than parts
    (torch.zeros(48, 3 * 40), "transformer.h.0.attn.c_attn.weight", (48, 144)),  # parts of the wrong size
], ids=["rank", "too-few", "part-size"])
def test_a_misshapen_source_behind_a_transform_names_its_key(bad, key, want):
    """Issue 18: a source that `.T` or `split(...)` cannot transform was an IndexError; now it is
    a CheckpointError naming the key, the shape it must have and the one it has, before any copy."""
    sd = {k: v.clone() for k, v in hf_gpt2().state_dict().items()}
    sd["transformer.h.0.attn.c_attn.weight"] = bad
    model = nanogpt()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError) as info:
        load_state_dict(model, sd, "hf")
    (shown, expected, got), = info.value.mismatched  # once, though three parts read it
    assert shown.startswith(f"{key} (for layers.0.attn_q.weight)") and (expected, got) == (want, tuple(bad.shape))
    assert f"{key} (for layers.0.attn_q.weight): expected shape {list(want)}, got {list(bad.shape)}" \
        in str(info.value)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_a_saved_checkpoint_has_an_ordinary_files_mode(tmp_path):
    """safetensors writes 0600; save_checkpoint gives the file the mode the umask gives any file."""
    import os
    path = save_checkpoint(nanogpt(), tmp_path / "m.safetensors")
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask


def test_an_interleaved_split_reads_every_nth_entry_and_writes_them_back():
    """split(..., interleaved=True) (gpt-oss's gate and up columns, alternating in gate_up_proj):
    part j is entries j, j + n, ... of the axis, read through `.T` too; unmap_tensor and join_parts
    interleave the parts back into the stored tensor, bit for bit."""
    from snf.weight_mapping import Reading, join_parts, read_tensor, unmap_tensor
    stored = torch.arange(2 * 3 * 8, dtype=torch.float32).reshape(2, 3, 8)  # [E, D, 2F], F = 4
    parts, out = {}, {}
    for j in range(2):
        src = ("T", ("interleave", ("key", "gate_up"), 2, 2, j))
        got = read_tensor(src, (2, 4, 3), None, Reading({"gate_up": stored}), "w")  # [E, F, D]
        assert torch.equal(got, stored[..., j::2].transpose(-1, -2))
        unmap_tensor(src, got, None, out, parts)
    ((inner, layer, n, axis, interleaved), pieces), = parts.items()
    assert interleaved and (n, axis) == (2, 2)
    assert torch.equal(join_parts([pieces[0], pieces[1]], axis, interleaved), stored)


def test_a_slice_read_through_each_transform_is_that_slice_of_the_whole(tmp_path, monkeypatch):
    """read_tensor(index=...) (a rank's slice in a sharded load, snf.from_pretrained(device_mesh=))
    carries the slice through `.T`, split, interleave, join, `or` and experts' keys down to each key,
    which reads only its entries from a safetensors file (`part`; reading a tensor whole fails here):
    the result is the whole read's slice, stepped slices across a join's parts included."""
    from safetensors.torch import save_file

    from snf.checkpoint_files import open_checkpoint
    from snf.weight_mapping import Reading, read_tensor
    g = torch.Generator().manual_seed(0)
    stored = {k: torch.randn(shape, generator=g) for k, shape in
              {"a": (6, 8), "b": (4, 8), "e.0": (3, 8), "e.1": (3, 8)}.items()}
    save_file(stored, tmp_path / "m.safetensors")
    cases = [  # (source, the shape it gives)
        (("key", "a"), (6, 8)),
        (("T", ("key", "a")), (8, 6)),
        (("split", ("key", "a"), 2, 0, 1), (3, 8)),
        (("T", ("interleave", ("key", "a"), 2, 1, 1)), (4, 6)),
        (("join", (("key", "a"), ("key", "b")), 0, (("const", 6), ("const", 4))), (10, 8)),
        (("or", ("key", "absent"), ("key", "b")), (4, 8)),
        (("experts", ("key", "e.{e}")), (2, 3, 8)),
    ]
    indexes = [(slice(1, 3),), (slice(None), slice(2, 7)), (slice(0, 5, 2),), (slice(3, 9, 2),), (slice(5, 5),)]
    with open_checkpoint(tmp_path / "m.safetensors") as sd:
        wholes = [read_tensor(src, want, None, Reading(sd), "w") for src, want in cases]
        monkeypatch.setattr(SafetensorsFile, "__getitem__", lambda self, key: pytest.fail(f"{key} read whole"))
        for (src, want), whole in zip(cases, wholes):
            for index in indexes:
                got = read_tensor(src, want, None, Reading(sd), "w", index=index)
                assert torch.equal(got, whole[index]), (src, index)


def test_what_a_rank_holds_is_filled_from_the_pieces_it_overlaps():
    """A sharded load fills a rank's part of a tensor (runs of its rows, or of its columns, or all of
    it) from the spec's parameters that are rows of that tensor, each reading only the entries held."""
    from snf.interop import _copy_held
    whole = torch.arange(40.0).reshape(10, 4)
    pieces = [((0, 6), whole[0:6]), ((6, 10), whole[6:10])]  # two parameters: rows of one tensor
    for runs, want in [([(0, 3, 5, 0), (0, 8, 10, 2)], torch.cat([whole[3:5], whole[8:10]])),  # pieces' rows
                       ([(1, 1, 3, 0)], whole[:, 1:3]), ([(None, 0, 0, 0)], whole)]:
        local = torch.full_like(want, -1.0)
        for rows, t in pieces:
            _copy_held(local, runs, rows, lambda sd, index=None, t=t: t if index is None else t[index], None)
        assert torch.equal(local, want), runs
