"""The runtime of generated modules against odd settings and inputs (issue 49): each is a clear error
naming the value and what to do, or what a transformers user gets, never a raw traceback. By class:
SNF_COMPILE's values, damaged compile records, a compile cache folder that cannot be used, token ids
of other Python types, and forward while another thread generates. Eager (SNF_COMPILE=0), but where
the compile policy is under test, with torch.compile stood in for (test_compile_policy.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import snf
from conftest import REPO
from snf.runtime import policy
from snf.runtime.compiling import _compile_mode
from test_compile_policy import Step, _unit, fake_compile  # noqa: F401 (fake_compile: a fixture)
from test_generate_stops import _tiny


# ----------------------------------------------------------------------------- SNF_COMPILE's values
# A value snf does not know is refused where it is read, saying which values there are; empty is unset.

@pytest.mark.parametrize("value", ["ture", "yes?", "2", "always", "O", "1 0"])
def test_an_snf_compile_value_snf_does_not_know_is_refused_by_name(monkeypatch, value):
    monkeypatch.setenv("SNF_COMPILE", value)
    said = rf"SNF_COMPILE={re.escape(repr(value))} is not a setting snf knows: 1 \(or true, on, yes\) always"
    with pytest.raises(ValueError, match=said):
        _compile_mode()
    model, idx = _tiny(), torch.randint(0, 31, (1, 4))
    with pytest.raises(ValueError, match=said):
        model(idx)
    with pytest.raises(ValueError, match=said):
        model.generate(idx, 3, temperature=0)


@pytest.mark.parametrize("value, mode", [("", "auto"), ("  ", "auto"), ("AUTO", "auto"), (" On ", "always"),
                                         ("No", "never"), ("FALSE", "never")])
def test_snf_compile_ignores_case_and_spaces_and_empty_is_unset(monkeypatch, value, mode):
    monkeypatch.setenv("SNF_COMPILE", value)
    assert _compile_mode() == mode


def test_snfc_generate_with_an_unknown_snf_compile_is_an_error(tmp_path, monkeypatch, capsys):
    from snf.cli import main
    from test_from_pretrained import saved
    from test_generate_stops import _with_tokenizer

    _, folder = saved(tmp_path, "llama")
    _with_tokenizer(folder)
    monkeypatch.setenv("SNF_COMPILE", "ture")
    assert main(["generate", str(folder), "--prompt", "w5 w7", "--max-new-tokens", "2"]) == 1
    assert "snfc generate: error: SNF_COMPILE='ture' is not a setting snf knows" in capsys.readouterr().err


# ----------------------------------------------------------------------------- damaged compile records
# A record (torch's cache folder/snf/*.json) that is damaged reads as none: the policy runs on its
# figures, and the next compile writes a good record in its place.

DAMAGED = {"cut short": b'{"compile_s": [1.5, 2', "binary": b"\x00\xff\xfe\x80junk", "empty": b"",
           "not UTF-8": '{"compile_s": [1]}'.encode("utf-16"), "a list": b"[1, 2]", "null": b"null",
           "strings": b'{"compile_s": "12", "eager_s": "0.1", "compiled_s": "0.05"}',
           "nested": b'{"compile_s": [[1]], "eager_s": {"s": 1}, "compiled_s": [0.1]}',
           "bools": b'{"compile_s": [true], "eager_s": true, "compiled_s": false}',
           "not finite": b'{"compile_s": [NaN], "eager_s": Infinity, "compiled_s": -1}',
           "deep": b"[" * 100_000}


def _recorded(tmp_path, monkeypatch):
    """A decode unit's record, as a compile writes it, and a model and input that read it."""
    monkeypatch.setenv("SNF_COMPILE", "1")
    model, x = Step(), torch.ones(1, 3)
    _unit(dynamic=False, unit="decode")(model, x)
    monkeypatch.delenv("SNF_COMPILE")
    (record,) = (tmp_path / "snf").iterdir()
    return record, model, x


@pytest.mark.parametrize("damage", DAMAGED)
def test_a_damaged_record_reads_as_none_and_the_next_compile_writes_it_again(fake_compile, monkeypatch, tmp_path,
                                                                             damage):
    record, model, x = _recorded(tmp_path, monkeypatch)
    record.write_bytes(DAMAGED[damage])
    again = _unit(dynamic=False, unit="decode")  # as a new process reads it
    for _ in range(3):  # by default: eager calls, each asking whether compiling pays
        assert torch.equal(again(model, x), x)
    (entry,) = again.unit.payoff.shapes.values()
    assert entry.record.saving() is None and entry.record.cost() is None
    monkeypatch.setenv("SNF_COMPILE", "1")
    again(model, x)
    assert len(json.loads(record.read_text())["compile_s"]) == 1  # written anew


def _record_file(monkeypatch, tmp_path) -> Path:
    """Where policy._Record("key") keeps its figures (in tmp_path)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    path = Path(policy._Record("key").path)
    path.parent.mkdir()
    return path


def test_a_record_with_some_good_figures_keeps_them(monkeypatch, tmp_path):
    _record_file(monkeypatch, tmp_path).write_text('{"compile_s": [2, "x"], "eager_s": 0.5, "compiled_s": 0.1, "o": 1}')
    assert policy._Record("key").data == {"eager_s": 0.5, "compiled_s": 0.1}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("kind", ["fifo", "huge"])
def test_a_record_that_is_a_fifo_or_huge_is_not_read(monkeypatch, tmp_path, kind):
    path = _record_file(monkeypatch, tmp_path)
    if kind == "fifo":
        os.mkfifo(path)  # opening it would wait for a writer
    else:
        path.write_text('{"eager_s": 0.5, "pad": "' + "x" * 100_000 + '"}')
    read: list = []
    reader = threading.Thread(target=lambda: read.append(policy._Record("key").data), daemon=True)
    reader.start()
    reader.join(30)
    assert read == [{}]


@pytest.mark.parametrize("blocked", ["record", "snf folder"])
def test_a_folder_or_file_in_the_records_place_only_loses_the_record(fake_compile, monkeypatch, tmp_path, blocked):
    record, model, x = _recorded(tmp_path, monkeypatch)
    record.unlink()
    if blocked == "record":
        record.mkdir()
    else:
        record.parent.rmdir()
        record.parent.write_text("a file where snf's folder goes")
    monkeypatch.setenv("SNF_COMPILE", "1")
    again = _unit(dynamic=False, unit="decode")
    for _ in range(3):
        assert torch.equal(again(model, x), x)
    (entry,) = again.unit.payoff.shapes.values()
    assert entry.record.data["compile_s"] and entry.record.data["compiled_s"] >= 0  # kept for this process
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert left == (["snf", f"snf/{record.name}"] if blocked == "record" else ["snf"])  # no temporary file


# ----------------------------------------------------------------------------- an unusable compile cache folder
# torch makes its cache folder as its compiler is imported, which the meta device's weight init does
# even with SNF_COMPILE=0: one it cannot make (under a regular file) is replaced for the process,
# silently while nothing compiles, with one warning at the first compile. snfc's own cache folders
# (SNFC_CACHE_DIR, XDG_CACHE_HOME) under a file are no trouble either.

META_INIT = """
import os, torch
import snf
L = snf.load("specs/llama3.snf")  # (the parser's cache is in snfc's cache folder)
if os.environ["SNF_COMPILE"] == "1":
    def compile(fn, **options):  # stands in for torch.compile, making torch's cache folder as it does
        import torch._dynamo
        return fn
    torch.compile = compile
with torch.device("meta"):  # as snf.from_pretrained builds a model (the init imports torch's compiler)
    model = L.Model(vocab_size=31, block_size=32, n_layer=1, n_embd=16, n_head=2, n_kv_head=1, mlp_hidden=24)
model.to_empty(device="cpu")
model.reset_parameters()
print(model.eval().generate(torch.tensor([[1, 2, 3]]), 4, temperature=0).shape)
print(os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
"""


def _run_meta_init(tmp_path, compile: str, **env) -> subprocess.CompletedProcess:
    """META_INIT in a fresh process (where snf's runtime is first imported) with SNF_COMPILE=`compile` and
    `env`, where {file} is a regular file and {tmp} tmp_path."""
    file = tmp_path / "file"
    file.write_text("a regular file")
    given = {name: value.format(file=file, tmp=tmp_path) for name, value in env.items()}
    outer = {name: value for name, value in os.environ.items() if name != "TORCHINDUCTOR_CACHE_DIR"}
    done = subprocess.run([sys.executable, "-c", META_INIT], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**outer, "PYTHONPATH": str(REPO), "SNF_COMPILE": compile, **given})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "torch.Size([1, 7])"
    return done


UNUSABLE = {"torch's under a file": {"TORCHINDUCTOR_CACHE_DIR": "{file}/cache"},
            "torch's a file": {"TORCHINDUCTOR_CACHE_DIR": "{file}"},
            "torch's default a file": {"TMPDIR": "{tmp}"},  # (a regular file made there)
            "snfc's under a file": {"SNFC_CACHE_DIR": "{file}/snfc", "XDG_CACHE_HOME": "{file}/cache"}}


@pytest.mark.parametrize("unusable", UNUSABLE)
def test_a_cache_folder_under_a_file_fails_nothing_with_snf_compile_0(tmp_path, unusable):
    (tmp_path / f"torchinductor_{policy._user()}").write_text("a regular file")
    done = _run_meta_init(tmp_path, "0", **UNUSABLE[unusable])
    assert done.stderr == ""


def test_a_compile_cache_folder_under_a_file_is_replaced_with_one_warning(tmp_path):
    done = _run_meta_init(tmp_path, "1", TORCHINDUCTOR_CACHE_DIR="{file}/cache", TMPDIR="{tmp}")
    instead = done.stdout.splitlines()[1]
    said = [line for line in done.stderr.splitlines() if "cannot be used" in line]
    assert len(said) == 1 and f"torch's compile cache folder {tmp_path}/file/cache cannot be used ({tmp_path}/file " \
        f"is not a folder); this process caches compiles in {instead} instead" in said[0], done.stderr
    assert instead == str(tmp_path / f"torchinductor_{policy._user()}")  # torch's default folder
    assert list(Path(instead, "snf").glob("*.json"))  # the decode step's records, kept there


# ----------------------------------------------------------------------------- token ids of other types
# An end or pad token given as a numpy integer, a 0-d tensor or a whole float (6.0) is that token, as in
# transformers (a list or tensor of them too); one that is no token id is refused by name.

SCALARS = {"numpy int": np.int64, "0-d tensor": torch.tensor, "float": float, "numpy float": np.float64,
           "0-d float tensor": lambda e: torch.tensor(float(e))}
LISTS = {"list of numpy ints": lambda e: [np.int32(e)], "1-d tensor": lambda e: torch.tensor([e]),
         "numpy array": lambda e: np.array([e]), "tuple with a float": lambda e: (e, 30.0)}
NO_TOKEN_IDS = [6.5, -1, np.int64(-1), torch.tensor(6.5), torch.tensor([-2]), "6", True, [6, 2.5], [[6]],
                torch.tensor([[6]]), float("nan"), float("inf"), {6}]


@pytest.mark.parametrize("kind", [*SCALARS, *LISTS])
def test_an_end_token_of_another_integral_type_stops_as_the_int_does(kind):
    torch.manual_seed(1)
    model, idx = _tiny(), torch.randint(0, 31, (2, 4))
    end = int(model.generate(idx, 12, temperature=0)[0, 6])
    want = model.generate(idx, 12, temperature=0, eos_token_id=[end, 30] if kind == "tuple with a float" else end)
    assert torch.equal(model.generate(idx, 12, temperature=0, eos_token_id={**SCALARS, **LISTS}[kind](end)), want)
    if kind in SCALARS:  # the pad token, as the end token is by default
        assert torch.equal(model.generate(idx, 12, temperature=0, eos_token_id=end, pad_token_id=SCALARS[kind](end)),
                           want)


@pytest.mark.parametrize("bad", NO_TOKEN_IDS, ids=repr)
def test_an_end_or_pad_token_that_is_no_token_id_is_refused_by_name(bad):
    model, idx = _tiny(), torch.randint(0, 31, (1, 4))
    with pytest.raises(ValueError, match=rf"^eos_token_id must be a token id \(a whole number >= 0\) or a list of "
                                         rf"them, got {re.escape(repr(bad))}$"):
        model.generate(idx, 3, eos_token_id=bad)
    if not isinstance(bad, (list, set)) and getattr(bad, "ndim", 0) == 0:
        with pytest.raises(ValueError, match=rf"^pad_token_id must be a token id \(a whole number >= 0\), got "
                                             rf"{re.escape(repr(bad))}$"):
            model.generate(idx, 3, pad_token_id=bad)


# ----------------------------------------------------------------------------- threads on one model
# generate keeps nothing on the model (a decode step's state and an encoder's values are arguments of
# each step) and leaves its mode as it is: a forward, or a generate, of another thread runs beside it,
# with no lock, and each gives what it gives alone.

def _t5():
    torch.manual_seed(0)
    return snf.load("specs/t5.snf").Model(vocab_size=31, n_layer=1, n_dec_layer=1, n_head=2, d_model=16, d_kv=8,
                                          d_ff=32).eval()


CALLS = {  # a model, and its forward of inputs other than generate's
    "decoder": (_tiny, lambda m, x: m(x)), "decoder training": (lambda: _tiny().train(), lambda m, x: m(x)),
    "encoder-decoder": (_t5, lambda m, x: m(x, x[:, :3]))}


@pytest.mark.parametrize("kind", CALLS)
def test_a_forward_while_another_thread_generates_gives_what_it_gives_alone(kind):
    make, forward = CALLS[kind]
    model = make()
    prompt, other = torch.randint(0, 31, (2, 4)), torch.randint(0, 31, (1, 6))

    def generate():
        return model.generate(prompt, 24, temperature=0)
    want_tokens, want_out = generate(), forward(model, other)
    made, failed, done = [], [], threading.Event()

    def generating():
        try:
            for _ in range(4):
                made.append(generate())
        except Exception as err:  # noqa: BLE001 (reported below)
            failed.append(err)
        finally:
            done.set()
    thread = threading.Thread(target=generating)
    thread.start()
    try:
        forwards = 0
        while not done.is_set() or not forwards:
            out = forward(model, other)
            assert all(torch.equal(a, b) if isinstance(a, torch.Tensor) else a is b for a, b in zip(out, want_out))
            forwards += 1
    finally:
        thread.join()
    assert not failed and len(made) == 4 and all(torch.equal(m, want_tokens) for m in made)
    assert model.training == (kind == "decoder training")


@pytest.mark.parametrize("kind", ["decoder", "encoder-decoder"])
def test_two_threads_generating_on_one_model_each_get_what_they_get_alone(kind):
    """Both generates are midway at once (each waits at its third step for the other to get there,
    which a lock around generate would never let happen), on prompts of other lengths and batches."""
    model = CALLS[kind][0]()
    prompts = (torch.randint(0, 31, (2, 4)), torch.randint(0, 31, (1, 7)))
    want = [model.generate(p, 24, temperature=0) for p in prompts]
    midway, calls, made, failed = threading.Barrier(2, timeout=60), {}, [[], []], []

    def meet(module, args, kwargs):
        me = threading.get_ident()
        calls[me] = calls.get(me, 0) + 1
        if calls[me] == 3:
            midway.wait()

    def generating(i):
        try:
            for _ in range(3):
                made[i].append(model.generate(prompts[i], 24, temperature=0))
        except Exception as err:  # noqa: BLE001 (reported below)
            failed.append(err)
    handle = model.register_forward_pre_hook(meet, with_kwargs=True)
    threads = [threading.Thread(target=generating, args=(i,)) for i in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        handle.remove()
    assert not failed, failed
    assert all(len(m) == 3 and all(torch.equal(t, w) for t in m) for m, w in zip(made, want))
