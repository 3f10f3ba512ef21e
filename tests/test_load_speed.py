"""Loading at the disk's speed. The cache of compiled specs (snf/spec_cache.py): a second process's
from_pretrained compiles no spec, a damaged entry is made again rather than failing a load, and an
entry is only ever read whole (each written beside its name, then renamed). The weights kept on
the file's pages (mmap): nothing copied, and what the model writes never reaches the file."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from conftest import python_subprocess  # noqa: E402
from test_from_pretrained import saved  # noqa: E402

# a load that fails if any spec is compiled: the checker is what compiling runs first
NO_COMPILE = ("import snf.compiler\n"
              "def refuse(*args, **kwargs):\n"
              "    raise SystemExit('a spec was compiled')\n"
              "snf.compiler.analyze = refuse\n")
LOAD = "import snf, torch\nm = snf.from_pretrained({folder!r})\nprint(float(m(torch.tensor([[1, 2, 3]])).logits.sum()))\n"


def _load(folder, cache, compiling: bool = True):
    run = python_subprocess(("" if compiling else NO_COMPILE) + LOAD.format(folder=str(folder)),
                            env={"SNFC_CACHE_DIR": str(cache)}, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout.strip()


def _entries(cache):
    return sorted(p for p in cache.glob("*.json") if p.name.startswith(("module.", "claims.")))


def test_a_second_process_compiles_no_spec(tmp_path):
    _, folder = saved(tmp_path, "llama")
    cache = tmp_path / "cache"
    first = _load(folder, cache)
    assert [p.name.split(".")[0] for p in _entries(cache)] == ["claims", "module"]
    assert _load(folder, cache, compiling=False) == first
    assert not list(cache.glob("*.tmp"))


def _compiles(monkeypatch) -> list:
    """The specs analyze() checks from here on (what compiling runs first)."""
    import snf.compiler
    checked, analyze = [], snf.compiler.analyze
    monkeypatch.setattr(snf.compiler, "analyze", lambda source: checked.append(source.path) or analyze(source))
    return checked


def _both(repo):
    """A module's code and the bundled specs' claims, each through the cache, as a new process gets them."""
    from snf import api, hf_config
    from snf.source import Source
    return api._compiled(Source.read(repo / "specs" / "llama3.snf"), "llama3.snf"), hf_config._claims.__wrapped__()


@pytest.mark.parametrize("damage", [
    lambda text: text[:len(text) // 2],                       # cut short
    lambda text: "\x00\xff not json",
    lambda text: "",
    lambda text: json.dumps({**json.loads(text), "data": {"name": "x", "code": "raise SystemExit(3)"}}),  # edited
    lambda text: json.dumps({**json.loads(text), "key": "another"}),
    lambda text: "[1, 2]",
], ids=["cut short", "binary", "empty", "edited", "another key", "not an object"])
def test_a_damaged_entry_is_made_again(tmp_path, monkeypatch, repo, damage):
    cache = tmp_path / "cache"
    monkeypatch.setenv("SNFC_CACHE_DIR", str(cache))
    first = _both(repo)
    entries = _entries(cache)
    assert [p.name.split(".")[0] for p in entries] == ["claims", "module"]
    for path in entries:
        path.write_text(damage(path.read_text()), encoding="utf-8", errors="surrogateescape")
    checked = _compiles(monkeypatch)
    assert _both(repo) == first and str(repo / "specs" / "llama3.snf") in checked and len(checked) > 1  # compiled again,
    assert _entries(cache) == entries and all(json.loads(p.read_text())["data"] for p in entries)  # kept again
    checked.clear()
    assert _both(repo) == first and checked == []


def test_a_cache_folder_others_can_write_in_is_not_used(tmp_path, monkeypatch, repo):
    """Its entries are code that runs."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("SNFC_CACHE_DIR", str(cache))
    _both(repo)
    cache.chmod(0o777)
    checked = _compiles(monkeypatch)
    _both(repo)
    assert str(repo / "specs" / "llama3.snf") in checked


def test_least_recently_used_entries_go(tmp_path, monkeypatch):
    from snf import spec_cache
    monkeypatch.setenv("SNFC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(spec_cache, "KEPT", 3)
    for i in range(5):
        spec_cache.put("module", (str(i),), {"n": i})
        assert spec_cache.get("module", ("0",)) == {"n": 0}  # used each time: kept
    assert len(list(tmp_path.glob("module.*.json"))) == 3
    assert spec_cache.get("module", ("1",)) is None and spec_cache.get("module", ("4",)) == {"n": 4}


def _file_backed(tensor) -> bool:
    """Whether a tensor is over a buffer (the file's mapping), not memory torch allocated."""
    return not tensor.untyped_storage().resizable()


def test_weights_stay_on_the_file_s_pages_and_writes_stay_private(tmp_path):
    import hashlib

    import torch

    import snf
    hf, folder = saved(tmp_path, "llama")
    digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    model = snf.from_pretrained(folder)
    kept = dict(model.named_parameters())
    assert _file_backed(kept["layers.0.o.weight"]) and _file_backed(kept["layers.0.q.weight"])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    assert hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest() == digest
    again = snf.from_pretrained(folder)
    assert all(torch.equal(v, before[k]) for k, v in again.state_dict().items())
    copied = snf.from_pretrained(folder, mmap=False)
    assert not any(_file_backed(p) for p in copied.parameters())
    assert all(torch.equal(v, before[k]) for k, v in copied.state_dict().items())
    idx = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        assert torch.equal(again(idx).logits, copied(idx).logits)
