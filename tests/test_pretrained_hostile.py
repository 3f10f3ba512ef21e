"""Bad inputs to from_pretrained, save_pretrained, load_checkpoint and generate (issues 36 and 49): each is
one exception of snfc's own kinds (PretrainedError, CheckpointError, ValueError, FileNotFoundError)
naming the file, the key or the argument, raised before the model is allocated where a size is
wrong (checked by making allocation fail); never a traceback from deep inside, a silent wrong
value or a lost file.
On tiny Llama-shaped transformers checkpoints with random weights, eagerly."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import sys
import threading

import numpy as np
import pytest
import torch

from test_from_pretrained import saved, tokens, transformers

import snf  # noqa: E402
from snf import interop  # noqa: E402
from snf.interop import CheckpointError  # noqa: E402
from snf.pretrained import PretrainedError  # noqa: E402

ERRORS = (PretrainedError, CheckpointError, ValueError, FileNotFoundError)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A saved transformers Llama (2 layers, 32 wide) and its config.json; copied per test."""
    _, folder = saved(tmp_path_factory.mktemp("hf"), "llama", bos_token_id=5, eos_token_id=6, pad_token_id=7)
    return folder


@pytest.fixture
def folder(llama, tmp_path):
    return shutil.copytree(llama, tmp_path / "model")


def _config(folder, **changes):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def _refused(call, match: str):
    """`call()` raises one of ERRORS matching `match`."""
    with pytest.raises(ERRORS, match=match) as err:
        call()
    return err.value


@pytest.fixture
def no_allocation(monkeypatch):
    """Allocating a model's weights (to_empty) or building the Llama spec's model fails the test: a
    size that does not fit must be refused before either."""
    def allocated(*args, **kwargs):
        raise AssertionError("the model was allocated before the misfit was found")

    monkeypatch.setattr(torch.nn.Module, "to_empty", allocated)
    return monkeypatch


# ----------------------------------------------------------------------------- folders

@pytest.mark.parametrize("text, match", [
    ("", r"config.json is not JSON"),
    ("{\"model_type\": ", r"config.json is not JSON"),
    ("[" * 100_000 + "]" * 100_000, r"config.json is not JSON \(RecursionError"),
    ("[1, 2]", r"holds a list, not a JSON object"),
    ('{"model_type": ["llama"]}', r"no bundled spec for model_type \['llama'\]"),
    ('{"model_type": 3}', r"no bundled spec for model_type 3"),
    ('{"model_type": "llamaX"}', r"no bundled spec for model_type 'llamaX'"),
    ('{"model_type": null}', r"no bundled spec for model_type None"),
])
def test_malformed_config_json(folder, text, match):
    (folder / "config.json").write_text(text)
    _refused(lambda: snf.from_pretrained(folder), match)


def test_missing_folders_and_files(folder, tmp_path):
    _refused(lambda: snf.from_pretrained(tmp_path / "nowhere"), r"nowhere does not exist")
    (tmp_path / "empty").mkdir()
    _refused(lambda: snf.from_pretrained(tmp_path / "empty"), r"has no config.json")
    (folder / "model.safetensors").unlink()
    _refused(lambda: snf.from_pretrained(folder), r"a folder without a checkpoint")


@pytest.mark.parametrize("changes, match", [
    (dict(vocab_size=10**12), r"model: checkpoint does not fit(.|\n)*model.embed_tokens.weight \(for token_embedding.weight\): expected shape "
                             r"\[1000000000000, 32\], got \[97, 32\]"),
    (dict(hidden_size=8192), r"head_dim = 8, head_dim = 2048 \(in the Config\): the spec requires"),
    (dict(hidden_size=8192, head_dim=2048), r"expected shape \[8192\], got \[32\]"),
    (dict(num_hidden_layers=20_000), r"gives `layers` 20000 layers, but the checkpoint has no `model.layers.19999"),
    (dict(num_hidden_layers=-1), r"`n_layer` is a size: it must not be negative"),
    (dict(hidden_size=0), r"head_dim = 8, head_dim = 0 \(in the Config\): the spec requires"),
    (dict(num_attention_heads=0), r"the divisor H must be at least 1"),
    (dict(num_key_value_heads=0), r"the divisor KVH must be at least 1"),
    (dict(num_key_value_heads=3), r"H must be divisible by KVH"),
    (dict(vocab_size="97"), r"Config the spec refuses"),
    (dict(rms_norm_eps=-1.0), r"`eps` of `rms_norm` must be >= 0, got -1.0 \(llama3.snf:\d+\); got norm_eps=-1.0"),
])
def test_zero_negative_and_absurd_dims(folder, changes, match, no_allocation, repo):
    _config(folder, **changes)
    if "num_hidden_layers" in changes:  # refused before a layer is built, on the meta device or not
        def built(*args, **kwargs):
            raise AssertionError("the model was built before the layer count was checked")
        no_allocation.setattr(snf.load(repo / "specs" / "llama3.snf").Model, "__init__", built)
    _refused(lambda: snf.from_pretrained(folder), match)


def test_one_layer_too_few_in_the_config(folder):
    _config(folder, num_hidden_layers=1)  # the checkpoint's layer 1 is left over
    _refused(lambda: snf.from_pretrained(folder), r"unexpected keys: model.layers.1")


# ----------------------------------------------------------------------------- weights

def _weights(folder) -> dict:
    from safetensors.torch import load_file
    return load_file(str(folder / "model.safetensors"))


def _write(folder, tensors: dict) -> None:
    interop.write_safetensors(tensors, folder / "model.safetensors", {"format": "pt"})


def test_missing_extra_misshapen_and_mistyped_weights(folder):
    good = _weights(folder)
    key = "model.layers.0.mlp.up_proj.weight"
    _write(folder, {k: v for k, v in good.items() if k != key})
    _refused(lambda: snf.from_pretrained(folder), rf"missing keys: {key}")
    _write(folder, {**good, "model.layers.0.extra.weight": torch.zeros(2)})
    _refused(lambda: snf.from_pretrained(folder), r"unexpected keys: model.layers.0.extra.weight")
    _write(folder, {**good, key: good[key][:-1]})
    _refused(lambda: snf.from_pretrained(folder), rf"{key} \(for layers.0.up.weight\): expected shape \[48, 32\], "
                                                  r"got \[47, 32\]")
    for dtype in (torch.bool, torch.int64):  # a bool tensor once loaded silently as a float weight
        _write(folder, {**good, key: good[key] > 0 if dtype == torch.bool else good[key].long()})
        _refused(lambda: snf.from_pretrained(folder), rf"a {str(dtype)[6:]} tensor, not floating point")
    _write(folder, {**good, key: good[key].half()})  # another float dtype is a cast, as transformers does
    assert snf.from_pretrained(folder).state_dict()["layers.0.up.weight"].dtype == torch.float32


def test_truncated_and_garbage_safetensors(folder):
    data = (folder / "model.safetensors").read_bytes()
    for broken in (data[: len(data) // 2], data[:20], b"\x10\x00\x00\x00\x00\x00\x00\x00{garbage}!!!!!!!", os.urandom(4096)):
        (folder / "model.safetensors").write_bytes(broken)
        _refused(lambda: snf.from_pretrained(folder), r"model.safetensors")


def _shard(folder) -> dict:
    """The checkpoint as two shards and an index, as transformers writes a large one."""
    good = _weights(folder)
    (folder / "model.safetensors").unlink()
    keys = sorted(good)
    names = {}
    for i, part in enumerate((keys[: len(keys) // 2], keys[len(keys) // 2:])):
        name = f"model-0000{i + 1}-of-00002.safetensors"
        interop.write_safetensors({k: good[k] for k in part}, folder / name, {"format": "pt"})
        names.update(dict.fromkeys(part, name))
    index = {"metadata": {}, "weight_map": names}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return index


def test_a_shard_index_that_lies(folder):
    index = _shard(folder)
    assert snf.from_pretrained(folder) is not None  # the honest index loads
    key = next(iter(index["weight_map"]))
    for lie, match in (({key: "model-00009-of-00009.safetensors"}, r"no checkpoint file .*model-00009"),
                       ({key: "model-00002-of-00002.safetensors" if index["weight_map"][key].startswith("model-00001")
                         else "model-00001-of-00002.safetensors"}, rf"the shard index lists `{key}` in"),
                       ({key: "../../etc/passwd"}, r"a shard must be a file name inside the folder"),
                       ({key: 7}, r"a shard must be a file name inside the folder")):
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {**index["weight_map"], **lie}}))
        _refused(lambda: snf.from_pretrained(folder), match)
    (folder / "model.safetensors.index.json").write_text('{"weight_map": [1]}')
    _refused(lambda: snf.from_pretrained(folder), r"is not a shard index")


def test_pytorch_model_bin_only(folder):
    good = _weights(folder)
    (folder / "model.safetensors").unlink()
    torch.save(good, folder / "pytorch_model.bin")
    model = snf.from_pretrained(folder)
    assert torch.equal(model.state_dict()["token_embedding.weight"], good["model.embed_tokens.weight"])
    torch.save({"w": torch.nn.Linear(2, 2)}, folder / "pytorch_model.bin")  # unpickling it would run code
    _refused(lambda: snf.from_pretrained(folder), r"torch.load\(weights_only=True\)")


def test_hub_cache_symlinks(folder, tmp_path):
    """The hub's cache: snapshots/<revision>/<file> are symlinks to ../../blobs/<hash>."""
    cache = tmp_path / "models--x--y"
    (cache / "blobs").mkdir(parents=True)
    snapshot = cache / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    for i, path in enumerate(sorted(folder.iterdir())):
        shutil.copy(path, cache / "blobs" / f"blob{i}")
        (snapshot / path.name).symlink_to(f"../../blobs/blob{i}")
    model = snf.from_pretrained(snapshot)
    assert model.config.n_layer == 2


def test_dtype_and_device_values(folder):
    assert snf.from_pretrained(folder, dtype=torch.bfloat16).token_embedding.weight.dtype == torch.bfloat16
    assert snf.from_pretrained(folder, dtype="float64").token_embedding.weight.dtype == torch.float64
    for dtype in (torch.int8, "int64", "float31", 3, torch.bool):
        _refused(lambda: snf.from_pretrained(folder, dtype=dtype), r"dtype= must be a dtype snfc runs")
    for device in ("gpu", 3.5, "cuda:99"):
        _refused(lambda: snf.from_pretrained(folder, device=device), r"device=")


# ----------------------------------------------------------------------------- saves

def test_saving_over_a_sharded_save_loads_the_new_weights(folder, tmp_path):
    old = snf.from_pretrained(folder)
    _shard(folder)
    model = snf.from_pretrained(folder)
    with torch.no_grad():
        model.token_embedding.weight.add_(1.0)
    snf.save_pretrained(model, folder)  # once, the old index shadowed the new model.safetensors
    assert not list(folder.glob("model.safetensors.index.json")) and not list(folder.glob("model-*"))
    back = snf.from_pretrained(folder)
    assert torch.equal(back.token_embedding.weight, old.token_embedding.weight + 1.0)


def test_a_save_that_fails_midway_leaves_the_folder(folder, monkeypatch):
    model = snf.from_pretrained(folder)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    real = interop.write_safetensors
    for failure in (KeyboardInterrupt, OSError(28, "No space left on device")):
        def failing(tensors, path, metadata, failure=failure):
            real(dict(list(tensors.items())[:2]), path, metadata)  # a part written, then the failure
            raise failure

        monkeypatch.setattr(interop, "write_safetensors", failing)
        with pytest.raises(KeyboardInterrupt if failure is KeyboardInterrupt else PretrainedError,
                           match=None if failure is KeyboardInterrupt else r"No space left on device; the folder is as it was"):
            snf.save_pretrained(model, folder)
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    monkeypatch.setattr(interop, "write_safetensors", real)
    assert snf.from_pretrained(folder).config == model.config


def test_saving_onto_a_file_or_a_read_only_folder(folder, tmp_path):
    model = snf.from_pretrained(folder)
    (tmp_path / "file").write_text("x")
    _refused(lambda: snf.save_pretrained(model, tmp_path / "file"), r"is a file; it must name a folder")
    _refused(lambda: snf.save_pretrained(model, tmp_path / "file" / "below"), r"cannot write")
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        try:
            _refused(lambda: snf.save_pretrained(model, locked), r"cannot write .*Permission denied")
        finally:
            locked.chmod(0o700)


# ----------------------------------------------------------------------------- generate

@pytest.fixture(scope="module")
def model(llama):
    return snf.from_pretrained(llama)


@pytest.mark.parametrize("args, kwargs, match", [
    ((tokens(97), -1), {}, r"max_new_tokens must be an int >= 0, got -1"),
    ((tokens(97), 2.5), {}, r"max_new_tokens must be an int >= 0"),
    ((tokens(97), 10**15), {}, r"max_new_tokens=10{15} makes an output of 2 x"),
    ((tokens(97), 3), dict(temperature=-0.5), r"temperature must be a finite number >= 0"),
    ((tokens(97), 3), dict(temperature=float("nan")), r"temperature must be a finite number >= 0"),
    ((tokens(97), 3), dict(top_k=0), r"top_k must be None or an int >= 1"),
    ((tokens(97), 3), dict(top_p=1.5), r"top_p must be None or a number in \(0, 1\]"),
    ((torch.zeros(2, 0, dtype=torch.long), 3), {}, r"a prompt of at least one token"),
    ((torch.tensor([[1, 2, 97]]), 3), {}, r"97"),
    ((torch.tensor([[1, -1, 2]]), 3), {}, r"-1"),
    ((torch.tensor([[1.0, 2.0]]), 3), {}, r"int64|integer|dtype"),
    (([[1, 2]], 3), {}, r"a prompt of at least one token"),
])
def test_generate_refuses_bad_arguments(model, args, kwargs, match):
    _refused(lambda: model.generate(*args, **kwargs), match)


def test_generate_zero_tokens_and_two_threads(model):
    idx = tokens(97, t=5)
    assert torch.equal(model.generate(idx, 0), idx)
    assert model.generate(idx[:0], 3).shape == (0, 8)  # an empty batch gives an empty batch
    want = model.generate(idx, 24, temperature=0)
    results, errors = [None] * 4, []

    def run(i):
        try:  # once, one thread's decode step read another's decode state ("the decode position ...")
            results[i] = model.generate(idx, 24, temperature=0)
        except Exception as err:  # noqa: BLE001 - the test reports it
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and all(torch.equal(r, want) for r in results)
    assert not model.training  # the mode it had before


# ----------------------------------------------------------------------------- issue 49: hostile folders
# Folders of other families, with a word-level tokenizer (test_generate_stops), made once per module.

@pytest.fixture(scope="module")
def family(tmp_path_factory):
    """family -> a folder of test_from_pretrained's tiny model of it with a tokenizer, made once;
    "t5_encoder" is T5's encoder alone (T5EncoderModel, which t5_encoder.snf reads)."""
    from specs_table import ROWS
    from test_generate_stops import _with_tokenizer

    made = {}

    def get(name: str):
        if name not in made:
            root = tmp_path_factory.mktemp("family")
            if name == "t5_encoder":
                config = transformers.T5Config(**dict(ROWS["t5"].hf, feed_forward_proj="relu"))
                transformers.T5EncoderModel(config).save_pretrained(root / name)
                made[name] = root / name
            else:
                made[name] = saved(root, name)[1]
            _with_tokenizer(made[name])
        return made[name]
    return get


@pytest.fixture
def talking(family, tmp_path):
    """The Llama folder with its tokenizer, copied per test."""
    return shutil.copytree(family("llama"), tmp_path / "talking")


def _generate(folder, capsys, *args: str) -> tuple[int, str, str]:
    from snf.cli import main
    rc = main(["generate", str(folder), "--prompt", "w5 w7", "--max-new-tokens", "2", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _refused_by_the_cli(folder, capsys, match: str, *args: str) -> str:
    """`snfc generate` exits 1 with an error matching `match`, before the prompt is shown; its stderr."""
    rc, out, err = _generate(folder, capsys, *args)
    assert rc == 1 and not out and "internal error" not in err and re.search(match, err), err
    return err


# ----------------------------------------------------------------------------- wrong without a word

@pytest.mark.parametrize("beside", ["shards", "a broken index", "an index of missing shards", "pytorch_model.bin",
                                    "a bin index beside its bin"])
def test_the_checkpoint_file_transformers_loads_is_the_one_loaded(folder, beside):
    """transformers 5.23 (modeling_utils) takes model.safetensors, else its shard index, else
    pytorch_model.bin, else its shard index: where a folder holds several, snfc loads the same one."""
    good = _weights(folder)
    other = {k: v + 1.0 for k, v in good.items()}
    if beside in ("shards", "a bin index beside its bin"):
        _write(folder, other)
        _shard(folder)
    if beside == "a bin index beside its bin":
        (folder / "model.safetensors.index.json").rename(folder / "pytorch_model.bin.index.json")
        torch.save(good, folder / "pytorch_model.bin")
    else:
        _write(folder, good)
    if beside == "a broken index":
        (folder / "model.safetensors.index.json").write_text("{")
    if beside == "an index of missing shards":
        (folder / "model.safetensors.index.json").write_text(json.dumps(
            {"weight_map": dict.fromkeys(good, "model-00001-of-00009.safetensors")}))
    if beside == "pytorch_model.bin":
        torch.save(other, folder / "pytorch_model.bin")
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder)
    ours = snf.from_pretrained(folder).token_embedding.weight
    assert torch.equal(ours, good["model.embed_tokens.weight"]) and torch.equal(ours, hf.model.embed_tokens.weight)


LLAMA = dict(vocab_size=31, block_size=32, n_layer=1, n_embd=16, n_head=2, n_kv_head=1, mlp_hidden=24)


@pytest.mark.parametrize("changes, match", [
    (dict(n_head=4, n_kv_head=2), r"config: n_head = 2 in the checkpoint \(its snfc.config metadata\), 4 in the "
                                  r"model\n  config: n_kv_head = 1 in the checkpoint"),
    (dict(norm_eps=1e-3), r"config: norm_eps = 1e-05 in the checkpoint .*, 0.001 in the model"),
    (dict(rope_base=500.0), r"config: rope_base = 500000.0 in the checkpoint .*, 500.0 in the model"),
    (dict(block_size=64), r"config: block_size = 32 in the checkpoint .*, 64 in the model"),
])
def test_a_checkpoint_saved_with_another_config_is_refused(tmp_path, repo, changes, match):
    """Weights of the same shapes, saved with another config (save_checkpoint's `snfc.config`
    metadata): refused by name, or with strict=False taken with a warning."""
    spec = snf.load(repo / "specs" / "llama3.snf")
    path = interop.save_checkpoint(spec.Model(**LLAMA), tmp_path / "m.safetensors")
    other = spec.Model(**{**LLAMA, **changes})
    with pytest.raises(CheckpointError, match=rf"m.safetensors: checkpoint does not fit the model(.|\n)*{match}"):
        interop.load_checkpoint(other, path)
    with pytest.warns(interop.CheckpointWarning, match=match.replace(r"\n  config: ", "; ").removeprefix("config: ")):
        interop.load_checkpoint(other, path, strict=False)
    interop.load_checkpoint(spec.Model(**LLAMA), path)  # its own config loads


@pytest.mark.parametrize("saved_config", ["not json", "[1, 2]", '"n_head"'])
def test_a_checkpoint_s_unreadable_config_metadata_is_refused(tmp_path, repo, saved_config):
    model = snf.load(repo / "specs" / "llama3.snf").Model(**LLAMA)
    path = interop.write_safetensors(interop.spec_state(model), tmp_path / "m.safetensors",
                                     {"format": "pt", "snfc.config": saved_config})
    with pytest.raises(CheckpointError, match=r"config: its snfc.config metadata is not a JSON object"):
        interop.load_checkpoint(model, path)


# ----------------------------------------------------------------------------- raw tracebacks

@pytest.mark.parametrize("name, text", [
    ("tokenizer.json", "{}"),
    ("tokenizer.json", "[]"),
    ("tokenizer.json", "null"),
    ("tokenizer.json", '{"added_tokens": []}'),
    ("tokenizer_config.json", "[1]"),
    ("tokenizer_config.json", '{"tokenizer_class": 3}'),
    ("tokenizer_config.json", '{"model_max_length": "x"}'),  # breaks only when a text is encoded
])
def test_unreadable_tokenizer_files_are_named(talking, capsys, name, text):
    from snf.text import TokenizerMissing, load_tokenizer
    (talking / name).write_text(text)
    with pytest.raises(TokenizerMissing, match=rf"talking: cannot read its tokenizer \(tokenizer.json, "
                                               r"tokenizer_config.json: .*\): save the model's tokenizer beside it"):
        load_tokenizer(talking)
    _refused_by_the_cli(talking, capsys, r"snfc generate: error: .*talking: cannot read its tokenizer")


@pytest.mark.parametrize("text", ["{}", "[]", "null", '{"added_tokens": []}'])
def test_an_unreadable_tokenizer_json_is_named_without_transformers(talking, monkeypatch, text):
    from snf.text import TokenizerMissing, load_tokenizer
    (talking / "tokenizer.json").write_text(text)
    monkeypatch.setitem(sys.modules, "transformers", None)  # the `tokenizers` library alone reads it
    with pytest.raises(TokenizerMissing, match=r"talking: cannot read its tokenizer \(tokenizer.json, "):
        load_tokenizer(talking)


@pytest.mark.parametrize("prompt, match", [
    ("w5 \udcff", r"the byte 0xff at character 3"),  # what Python makes of a command line's byte 0xff
    ("\udc80w5", r"the byte 0x80 at character 0"),
    ("w5\ud800 w7", r"the lone surrogate U\+D800 at character 2"),
])
def test_a_prompt_that_is_not_utf8_is_refused(talking, capsys, prompt, match):
    from snf.cli import main
    assert main(["generate", str(talking), "--prompt", prompt]) == 1
    out = capsys.readouterr()
    assert not out.out and re.search(rf"the prompt is not UTF-8 text: {match}; give it as UTF-8", out.err)
    with pytest.raises(ValueError, match=match):
        snf.generate_text(talking, prompt)


@pytest.mark.parametrize("prompt", [b"w5 w7", None, ["w5"]])
def test_a_prompt_that_is_no_text_is_refused(talking, prompt):
    with pytest.raises(TypeError, match=rf"the prompt must be a str, got {type(prompt).__name__}"):
        snf.generate_text(talking, prompt)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, "float8_e5m2", "torch.float8_e4m3fnuz", torch.complex64])
def test_a_dtype_snfc_cannot_run_is_refused_at_load(folder, dtype):
    _refused(lambda: snf.from_pretrained(folder, dtype=dtype),
             r"dtype= must be a dtype snfc runs \(float32, bfloat16, float16, float64\)")


@pytest.mark.parametrize("key, value", [("dtype", "float8_e4m3fn"), ("dtype", "float8_e5m2"),
                                        ("torch_dtype", "float8_e4m3fn"), ("torch_dtype", "float8_e5m2")])
def test_a_checkpoint_dtype_snfc_cannot_run_is_refused_at_load(talking, capsys, key, value):
    _config(talking, **{"dtype": None, key: value})
    said = rf'config.json: {key} = "{value}": snfc cannot run a model in {value}; load it in float32, bfloat16'
    _refused(lambda: snf.from_pretrained(talking), said)
    _refused_by_the_cli(talking, capsys, said)
    _refused_by_the_cli(talking, capsys, r"dtype= must be a dtype snfc runs", "--dtype", value)
    assert snf.from_pretrained(talking, dtype="bfloat16").token_embedding.weight.dtype == torch.bfloat16


@pytest.mark.parametrize("name, match", [
    ("t5", r"t5.snf's model is an encoder-decoder: its generate writes a new text from the encoded prompt"),
    ("bert", r"bert.snf's model has no generate, so it cannot continue a prompt: .*last_hidden_state, "
             r"pooler_output, no next-token logits: an encoder"),
    ("t5_encoder", r"t5_encoder.snf's model has no generate, so it cannot continue a prompt"),
])
def test_generate_on_a_model_that_continues_no_prompt(family, capsys, name, match):
    _refused_by_the_cli(family(name), capsys, match)
    with pytest.raises(ValueError, match=match):
        snf.generate_text(family(name), "w5 w7", max_new_tokens=2)


class _Stderr(io.StringIO):
    """A stderr whose writes (and, for `tty`, whose isatty) fail with `error`."""

    def __init__(self, error, tty=False):
        super().__init__()
        self.error, self.tty = error, tty

    def write(self, text):
        raise self.error

    def isatty(self):
        if self.tty:
            raise self.error
        return False


def _closed():
    stream = io.StringIO()
    stream.close()
    return stream


@pytest.mark.parametrize("stderr", [lambda: None, _closed, lambda: _Stderr(BrokenPipeError(32, "Broken pipe")),
                                    lambda: _Stderr(OSError(5, "Input/output error")),
                                    lambda: _Stderr(ValueError("I/O operation on closed file"), tty=True)],
                         ids=["none", "closed", "broken pipe", "EIO", "closed tty"])
def test_load_progress_never_fails_a_load(folder, monkeypatch, stderr):
    want = snf.from_pretrained(folder).state_dict()
    monkeypatch.setattr(interop, "_PROGRESS_AFTER_S", -1.0)  # progress from the first tensor on
    shown = io.StringIO()
    monkeypatch.setattr("sys.stderr", shown)
    snf.from_pretrained(folder)
    assert "loading model: 100%" in shown.getvalue()  # (the progress path runs)
    monkeypatch.setattr("sys.stderr", stderr())
    got = snf.from_pretrained(folder).state_dict()
    assert all(torch.equal(got[k], want[k]) for k in want)


@pytest.mark.parametrize("failure, match", [
    ("a folder in the way", r"cannot write .*\.model\.safetensors\.partial: Is a directory; the folder is as it was"),
    ("Error while serializing: I/O error: No space left on device (os error 28)",
     r"cannot write .*\.model\.safetensors\.partial: No space left on device; the folder is as it was"),
    ("Error while serializing: something else", r"safetensors: Error while serializing: something else; the folder"),
])
def test_saving_where_safetensors_cannot_write(folder, tmp_path, monkeypatch, failure, match):
    from safetensors import SafetensorError
    model = snf.from_pretrained(folder)
    out = snf.save_pretrained(model, tmp_path / "out")
    if failure == "a folder in the way":
        (out / ".model.safetensors.partial").mkdir()
    else:
        def failing(*args, **kwargs):
            raise SafetensorError(failure)
        monkeypatch.setattr("safetensors.torch.save_file", failing)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    _refused(lambda: snf.save_pretrained(model, out), match)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    with pytest.raises(OSError, match=re.escape(str(out))):  # save_checkpoint's too: an OSError naming the file
        interop.save_checkpoint(model, out)


@pytest.mark.parametrize("files, eos, pad", [
    ({"generation_config.json": {"eos_token_id": 6.0, "pad_token_id": 7.0}}, (6,), 7),  # as transformers reads them
    ({"generation_config.json": {"eos_token_id": [6.0, 8], "pad_token_id": -1}}, (6, 8), None),  # -1: old Llama's
    ({"generation_config.json": None, "config.json": {"eos_token_id": [-1, 9]}}, (9,), 7),
])
def test_end_tokens_a_folder_gives_as_numbers(folder, files, eos, pad):
    for name, settings in files.items():
        path = folder / name
        if settings is None:
            path.unlink()
        else:
            path.write_text(json.dumps({**json.loads(path.read_text()), **settings}))
    config = snf.from_pretrained(folder).loaded_from.generation_config
    assert (config.eos_token_id, config.pad_token_id) == (eos, pad)


@pytest.mark.parametrize("name, key, value", [
    ("generation_config.json", "eos_token_id", 6.5),
    ("generation_config.json", "eos_token_id", "six"),
    ("generation_config.json", "pad_token_id", True),
    ("generation_config.json", "eos_token_id", [6, {"id": 7}]),
    ("config.json", "eos_token_id", 6.5),
])
def test_end_tokens_a_folder_gives_as_no_number_are_refused(folder, name, key, value):
    (folder / "generation_config.json").unlink()
    path = folder / name
    path.write_text(json.dumps({**(json.loads(path.read_text()) if path.exists() else {}), key: value}))
    _refused(lambda: snf.from_pretrained(folder), rf"{name}: {key} = {re.escape(json.dumps(value))} is not a token id")


@pytest.mark.parametrize("given", [np.int64(6), torch.tensor(6), 6.0, torch.tensor([6]), [np.int32(6)]],
                         ids=["numpy", "0-d tensor", "float", "1-d tensor", "numpy in a list"])
def test_end_tokens_given_as_numbers_transformers_takes(model, given):
    idx = tokens(97, t=3)
    assert torch.equal(model.generate(idx, 6, temperature=0, eos_token_id=given, pad_token_id=np.int64(7)),
                       model.generate(idx, 6, temperature=0, eos_token_id=6, pad_token_id=7))
    for bad in (6.5, torch.tensor(6.5), "6", True):
        _refused(lambda: model.generate(idx, 6, temperature=0, eos_token_id=bad), r"eos_token_id must be a token id")


# ----------------------------------------------------------------------------- errors that name the wrong thing

@pytest.mark.parametrize("name, keep, match", [
    ("llama", (), r" holds no tokenizer \(none of tokenizer.json, tokenizer_config.json, "),
    ("gpt2", (), r" holds no tokenizer"),  # transformers makes an empty GPT-2 tokenizer of it
    ("gpt2", ("tokenizer_config.json",), r"'s tokenizer has an empty vocabulary \(tokenizer_config.json\)"),
    ("llama", ("special_tokens_map.json",), r" holds no tokenizer"),
    ("llama", ("tokenizer.json/",), r" holds no tokenizer"),  # a folder of that name
])
def test_a_folder_without_a_tokenizer_says_so(family, tmp_path, capsys, name, keep, match):
    from snf.text import TokenizerMissing, load_tokenizer
    folder = shutil.copytree(family(name), tmp_path / "bare", ignore=shutil.ignore_patterns("tokenizer*"))
    for kept in keep:
        (folder / kept).mkdir() if kept.endswith("/") else (folder / kept).write_text("{}")
    said = rf"bare{match}.*: save the model's tokenizer beside it"
    with pytest.raises(TokenizerMissing, match=said):
        load_tokenizer(folder)
    assert "encodes to no tokens" not in _refused_by_the_cli(folder, capsys, said)


@pytest.mark.parametrize("name, changes, key", [
    ("gpt_oss", dict(layer_types=["full_attention", 3]), "layer_types"),
    ("gpt_oss", dict(layer_types=["full_attention", "bogus"]), "layer_types"),
    ("gpt_oss", dict(layer_types=["full_attention"]), "layer_types"),
    ("gemma3_text", dict(layer_types=["bogus", "full_attention", "sliding_attention"]), "layer_types"),
    ("llama", dict(rms_norm_eps=-1.0), "rms_norm_eps"),
    ("llama", dict(num_key_value_heads=3), "num_key_value_heads"),
])
def test_a_bad_setting_is_named_by_its_config_json_key(family, tmp_path, name, changes, key):
    folder = shutil.copytree(family(name), tmp_path / "bad")
    _config(folder, **changes)
    _refused(lambda: snf.from_pretrained(folder), rf"config.json's {key}\b")


@pytest.mark.parametrize("name, spec, changes, match", [
    ("gpt2", "llama3.snf", {}, r"holds a gpt2 model; llama3.snf reads llama folders \(model_type "
                              r"\"llama\"\). For gpt2, use nanogpt.snf \(or leave spec= out\)"),
    ("llama", "nanogpt.snf", {}, r"holds a llama model; nanogpt.snf reads gpt2 folders .* use llama3.snf"),
    ("bert", "llama3.snf", {}, r"holds a bert model; llama3.snf reads llama folders .* use bert.snf"),
    ("t5", "gpt_neox.snf", {}, r"holds a t5 model; gpt_neox.snf reads gpt_neox folders .* use t5.snf or "
                               r"t5_encoder.snf"),
    ("llama", "llama3.snf", dict(model_type=None), r"holds no model_type; llama3.snf reads llama folders"),
    ("llama", "t5_encoder.snf", dict(model_type="llamaX"), r"holds a llamaX model; t5_encoder.snf reads t5 "
                                                           r"folders .* snfc bundles no spec for it"),
])
def test_a_folder_of_another_family_is_named_as_such(family, tmp_path, repo, name, spec, changes, match):
    folder = shutil.copytree(family(name), tmp_path / "other")
    _config(folder, **changes)
    _refused(lambda: snf.from_pretrained(folder, spec=repo / "specs" / spec),
             rf"other/config.json: this folder {match}")
