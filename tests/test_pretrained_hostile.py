"""Bad inputs to from_pretrained, save_pretrained, load_checkpoint and generate (issue 36): each is
one exception of snfc's own kinds (PretrainedError, CheckpointError, ValueError, FileNotFoundError)
naming the file, the key or the argument, raised before the model is allocated where a size is
wrong (checked by making allocation fail); never a traceback from deep inside, a silent wrong
value or a lost file.
On tiny Llama-shaped transformers checkpoints with random weights, eagerly."""

from __future__ import annotations

import json
import os
import shutil
import threading

import pytest
import torch

from test_from_pretrained import saved, tokens

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
    _refused(lambda: snf.from_pretrained(tmp_path / "nowhere"), r"has no config.json")
    (folder / "model.safetensors").unlink()
    _refused(lambda: snf.from_pretrained(folder), r"a folder without a checkpoint")


@pytest.mark.parametrize("changes, match", [
    (dict(vocab_size=10**12), r"model: checkpoint does not fit(.|\n)*model.embed_tokens.weight \(for token_embedding.weight\): expected shape "
                             r"\[1000000000000, 32\], got \[97, 32\]"),
    (dict(hidden_size=8192), r"head_dim = 8, head_dim = 2048 \(in the Config\): the spec requires"),
    (dict(hidden_size=8192, head_dim=2048), r"expected shape \[8192\], got \[32\]"),
    (dict(num_hidden_layers=20_000), r"gives `layers` 20000 layers, but the checkpoint has no `model.layers.19999"),
    (dict(num_hidden_layers=-1), r"`n_layer` is a size: it must not be negative"),
    (dict(hidden_size=0), r"Config the spec refuses"),
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
        _refused(lambda: snf.from_pretrained(folder, dtype=dtype), r"dtype= must be a floating-point torch.dtype")
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
