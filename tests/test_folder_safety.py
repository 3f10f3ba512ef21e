"""What a folder must never make snfc do (issue 49): run code from it, lose a save over it, or reach
the network for it. Loading runs nothing from a folder, even where stdin answers transformers'
"run the custom code?" with yes; save_pretrained copies only the folder's own files and writes every
file beside its final name first, so a failed save leaves the old folder loadable; a path that is no
folder is said not to exist, with no network call.
On tiny Llama checkpoints with random weights and a word-level tokenizer, eagerly."""

from __future__ import annotations

import errno
import io
import json
import re
import shutil
import socket
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

import snf  # noqa: E402
from snf.pretrained import PretrainedError  # noqa: E402
from snf.text import TokenizerMissing, load_tokenizer  # noqa: E402
from test_pretrained_hostile import _generate, family, talking  # noqa: E402,F401 - (family, talking: fixtures)


@pytest.fixture
def folder(talking):  # noqa: F811
    """The saved Llama with a tokenizer beside it, copied per test."""
    return talking


def _edit(path: Path, changes: dict) -> None:
    settings = json.loads(path.read_text())
    settings.update(changes)
    path.write_text(json.dumps(settings))


# ----------------------------------------------------------------------------- code from the folder runs

MARKER_CODE = """import pathlib
pathlib.Path({marker!r}).write_text("ran")
from transformers import PreTrainedTokenizerFast
class {cls}(PreTrainedTokenizerFast):
    pass
"""


@pytest.mark.parametrize("module, cls, changes, refused", [
    ("tok", "MyTok", {"auto_map": {"AutoTokenizer": ["tok.MyTok", "tok.MyTok"]}, "tokenizer_class": "MyTok"}, True),
    ("tok", "MyTok", {"auto_map": {"AutoTokenizer": [None, "tok.MyTok"]}, "tokenizer_class": "MyTokFast"}, True),
    ("tok", "MyTok", {"auto_map": {"AutoTokenizer": ["tok.MyTok", None]}, "tokenizer_class": "MyTok"}, True),
    ("tok", "MyTok", {"auto_map": ["tok.MyTok", "tok.MyTok"], "tokenizer_class": "MyTok"}, True),  # the older form
    ("tokenization_x", "XTokenizer", {"auto_map": {"AutoTokenizer": ["tokenization_x.XTokenizer", None]},
                                      "tokenizer_class": "XTokenizer"}, True),
    # beside a class transformers has, which it then uses
    ("tok", "MyTok", {"auto_map": {"AutoTokenizer": ["tok.MyTok", "tok.MyTok"]}}, False),
])
def test_no_code_from_the_folder_runs(folder, tmp_path, monkeypatch, capsys, module, cls, changes, refused):
    marker = tmp_path / "ran"
    (folder / f"{module}.py").write_text(MARKER_CODE.format(marker=str(marker), cls=cls))
    _edit(folder / "tokenizer_config.json", changes)
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n" * 8))  # transformers' "run the custom code? [y/N]"
    rc, out, err = _generate(folder, capsys)
    if refused:
        assert rc == 1 and not out and re.search(r"tokenizer_config.json: its auto_map names Python code in the "
                                                 r"folder .*, which snfc never runs", err)
        with pytest.raises(TokenizerMissing, match=r"its auto_map names Python code"):
            snf.generate_text(folder, "w5 w7", max_new_tokens=2)
    else:
        assert rc == 0 and out.startswith("w5 w7")
    assert not marker.exists()


@pytest.mark.parametrize("name, link", [
    ("tokenizer.model", "absolute"),  # a link to a private file, by its path
    ("tokenizer.json", "relative"),  # ../secret
    ("tokenizer_config.json", "chain"),  # a link in the folder to one out of it
    ("generation_config.json", "absolute"),
    ("chat_template.jinja", "relative"),
    ("special_tokens_map.json", "hub"),  # in a hub-like snapshot, out of the repo's blobs
])
def test_a_companion_linked_out_of_the_folder_is_refused(folder, tmp_path, name, link):
    secret = tmp_path / "secret"
    secret.write_bytes(b"not the model's")
    if link == "hub":
        (tmp_path / "models--x--y" / "snapshots").mkdir(parents=True)
        folder = Path(shutil.move(folder, tmp_path / "models--x--y" / "snapshots" / "abc"))
    model = snf.from_pretrained(folder)
    out = snf.save_pretrained(model, tmp_path / "out")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (folder / name).unlink(missing_ok=True)
    if link == "chain":
        (folder / "inner").symlink_to(secret)
        (folder / name).symlink_to("inner")
    else:
        up = Path("../" * (3 if link == "hub" else 1))  # from the folder, or from models--x--y/snapshots/abc
        (folder / name).symlink_to(secret if link == "absolute" else up / "secret")
    with pytest.raises(PretrainedError, match=rf"{re.escape(name)} is a link to .*secret, outside the folder .*"
                                              r"nothing was written"):
        snf.save_pretrained(model, out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    with pytest.raises(PretrainedError, match=re.escape(name)):
        snf.save_pretrained(model, tmp_path / "new")
    assert not (tmp_path / "new").exists()


def test_companions_linked_inside_the_folder_or_the_hub_blobs_are_copied(folder, tmp_path):
    """The hub's cache: snapshots/<revision>/<file> are links to ../../blobs/<hash>; a link to a file of
    the folder itself is its own too."""
    snapshot = tmp_path / "models--x--y" / "snapshots" / "abc"
    (tmp_path / "models--x--y" / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for i, path in enumerate(sorted(folder.iterdir())):
        shutil.copy(path, tmp_path / "models--x--y" / "blobs" / f"blob{i}")
        (snapshot / path.name).symlink_to(f"../../blobs/blob{i}")
    (snapshot / "vocab").mkdir()
    (snapshot / "vocab" / "tokenizer.model").write_bytes(b"the model's own")
    (snapshot / "tokenizer.model").symlink_to("vocab/tokenizer.model")
    out = snf.save_pretrained(snf.from_pretrained(snapshot), tmp_path / "out")
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "tokenizer.model"):
        assert not (out / name).is_symlink() and (out / name).read_bytes() == (snapshot / name).read_bytes()
    assert load_tokenizer(out).encode("w5 w7") == [5, 7]


# ----------------------------------------------------------------------------- data lost

@pytest.mark.parametrize("failing, failure", [
    ("tokenizer.json", OSError(errno.ENOSPC, "No space left on device")),  # the disk fills
    ("tokenizer.json", KeyboardInterrupt()),
    ("tokenizer_config.json", OSError(errno.EIO, "Input/output error")),
    ("generation_config.json", OSError(errno.EDQUOT, "Disk quota exceeded")),
    ("generation_config.json", MemoryError()),
])
def test_a_save_that_fails_copying_a_companion_leaves_the_old_save(folder, tmp_path, monkeypatch, failing, failure):
    model = snf.from_pretrained(folder)
    out = snf.save_pretrained(model, tmp_path / "out")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    saved = model.token_embedding.weight.clone()
    with torch.no_grad():
        model.token_embedding.weight.add_(1.0)
    copy = shutil.copyfile

    def failing_copy(src, dst, **kwargs):
        if Path(src).name != failing:
            return copy(src, dst, **kwargs)
        Path(dst).write_bytes(Path(src).read_bytes()[:10])  # a part written, then the failure
        raise failure

    monkeypatch.setattr(shutil, "copyfile", failing_copy)
    with pytest.raises(PretrainedError if isinstance(failure, OSError) else type(failure),
                       match=rf"{failure.strerror}; the folder is as it was" if isinstance(failure, OSError) else None):
        snf.save_pretrained(model, out)
    monkeypatch.setattr(shutil, "copyfile", copy)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing half written, nothing left over
    assert torch.equal(snf.from_pretrained(out).token_embedding.weight, saved)
    assert load_tokenizer(out).encode("w5 w7") == [5, 7]


# ----------------------------------------------------------------------------- the network

@pytest.fixture
def no_network(monkeypatch):
    """Every way out fails the test: a socket's lookup or connection, and huggingface_hub's downloads
    (however transformers imported them). Offline too, as the tests are."""
    import huggingface_hub
    import huggingface_hub.file_download
    import transformers.utils.hub

    calls = []

    def called(*args, **kwargs):
        calls.append(args)
        raise OSError("a network call in a test")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(socket.socket, "connect", called)
    monkeypatch.setattr(socket, "create_connection", called)
    monkeypatch.setattr(socket, "getaddrinfo", called)
    for module in (huggingface_hub, huggingface_hub.file_download, transformers.utils.hub):
        for name in ("hf_hub_download", "snapshot_download"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, called)
    yield
    assert not calls, f"network calls: {calls}"


@pytest.mark.parametrize("name, match", [
    ("./no_such_folder", "does not exist"),
    ("no_such_folder", "does not exist"),
    ("no-org/no_such_model", r"does not exist here \(snfc reads local folders only: .*`hf download no-org/no_such"),
    ("../no_such/folder", "does not exist"),
    ("~/no_such_folder", "does not exist"),
    ("talking/no_such_folder", "does not exist"),  # the folder above exists
    ("talking/no_such/deeper/still", "does not exist"),
    ("talking/config.json", "is a file, not a save_pretrained folder"),
])
def test_a_path_that_is_no_folder_never_reaches_the_network(folder, tmp_path, monkeypatch, capsys, no_network,
                                                            name, match):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    said = rf"{re.escape(name)} {match}"
    for call in (lambda: snf.from_pretrained(name), lambda: load_tokenizer(name),
                 lambda: snf.generate_text(name, "w5 w7", max_new_tokens=2)):
        with pytest.raises(FileNotFoundError, match=said):
            call()
    rc, out, err = _generate(name, capsys)
    assert rc == 1 and not out and re.search(said, err) and "internet" not in err
