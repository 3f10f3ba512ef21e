"""examples/train.py and sample.py given bad arguments, bad checkpoints and Ctrl-C: each is one line
on stderr and exit 1 (130 for Ctrl-C), never a traceback, and a checkpoint is never left half
written or rewritten as an earlier step. Run in this process (main(argv)) on a 1-layer, 32-wide
nanogpt that trains in a second."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from conftest import REPO

TINY = ["--set", "n_layer=1", "--set", "n_head=2", "--set", "n_embd=32", "--set", "block_size=16",
        "--eval-interval", "2", "--eval-iters", "1", "--log-interval", "2", "--warmup-iters", "1", "--batch-size", "2"]


def _script(name: str):
    sys.path.insert(0, str(REPO / "examples"))
    try:
        spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
        module = sys.modules[name] = importlib.util.module_from_spec(spec)  # sample.py imports train
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(REPO / "examples"))


train, sample = _script("train"), _script("sample")


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text((REPO / "README.md").read_text(encoding="utf-8")[:2000], encoding="utf-8")
    return path


def _fails(script, argv, capsys, message: str, status: int = 1) -> str:
    assert script.main(argv) == status
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("flag, value, message", [
    ("--eval-interval", "0", "--eval-interval must be an int >= 1, got 0"),
    ("--eval-iters", "0", "--eval-iters must be an int >= 1"),
    ("--grad-accum", "0", "--grad-accum must be an int >= 1"),
    ("--batch-size", "0", "--batch-size must be an int >= 1"),
    ("--max-iters", "-5", "--max-iters must be an int >= 0, got -5"),
    ("--stop-at", "-1", "--stop-at must be an int >= 0"),
    ("--lr", "nan", "--lr must be a finite number >= 0"),
    ("--seed", "-3", "invalid seed value"),
    ("--device", "cuda:7" if torch.cuda.is_available() else "cuda", "this torch sees"),
    ("--device", "quantum", "is not a device name"),
    ("--max-iters", "many", "invalid int value"),
    ("--tp", "0", "--tp must be an int >= 1"),
    ("--tp", "2", "--tp 2 runs under torchrun: torchrun --nproc-per-node 2 examples/train.py --tp 2"),
])
def test_bad_arguments(flag, value, message, corpus, tmp_path, capsys):
    _fails(train, ["--data", str(corpus), "--out", str(tmp_path / "o"), flag, value], capsys, message)
    assert not (tmp_path / "o").exists()


def test_config_file_mistakes(corpus, tmp_path, capsys):
    config = tmp_path / "c.json"
    for text, message in (("[1]", "holds a JSON list"), ("{", "is not JSON"), ('{"n_layers": 2}', "is not a Config field"),
                          ('{"n_layer": "two"}', "`n_layer` is int"), ("[" * 100_000, "is not JSON")):
        config.write_text(text)
        _fails(train, ["--data", str(corpus), "--config", str(config), "--out", str(tmp_path / "o")], capsys, message)


def test_stop_resume_and_ctrl_c_keep_a_good_checkpoint(corpus, tmp_path, capsys, monkeypatch):
    out = tmp_path / "o"
    common = ["--data", str(corpus), "--out", str(out), *TINY]
    ckpt = out / "ckpt.pt"
    # --stop-at 0 saves the untrained model at step 0
    assert train.main([*common, "--max-iters", "6", "--stop-at", "0"]) == 0
    assert torch.load(ckpt, weights_only=True)["iter"] == 0
    assert train.main([*common, "--max-iters", "6", "--stop-at", "2", "--resume"]) == 0
    assert torch.load(ckpt, weights_only=True)["iter"] == 2
    capsys.readouterr()
    # a --stop-at (or --max-iters) below the saved step would write an earlier step with later weights
    _fails(train, [*common, "--max-iters", "6", "--stop-at", "1", "--resume"], capsys, "--stop-at 1 is below step 2")
    _fails(train, [*common, "--max-iters", "1", "--resume"], capsys, "--max-iters 1 is below step 2")
    # resuming with another config than the checkpoint's
    _fails(train, [*common, "--resume", "--set", "n_embd=64"], capsys, "has n_embd=32, not 64")
    good = ckpt.read_bytes()

    # Ctrl-C in the middle of the next save (step 4): the file is partly written when it comes
    real_save = torch.save

    def interrupted(state, f, *a, **k):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(train.torch, "save", interrupted)
    assert train.main([*common, "--max-iters", "6", "--resume"]) == 130
    err = capsys.readouterr().err
    assert "stopped by Ctrl-C after step 4" in err and "holds step 2" in err and "Traceback" not in err, err
    monkeypatch.setattr(train.torch, "save", real_save)
    assert ckpt.read_bytes() == good and sorted(p.name for p in out.iterdir()) == ["ckpt.pt"]
    assert train.main([*common, "--max-iters", "6", "--resume"]) == 0  # and --resume goes on from it
    assert "resuming at step 2" in capsys.readouterr().out
    assert torch.load(ckpt, weights_only=True)["iter"] == 6

    # a save that fails (disk full) leaves the last checkpoint too
    def full(state, f, *a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(train.torch, "save", full)
    before = ckpt.read_bytes()
    _fails(train, [*common, "--max-iters", "8", "--resume"], capsys, "No space left on device")
    assert ckpt.read_bytes() == before and sorted(p.name for p in out.iterdir()) == ["ckpt.pt"]


def _saved(corpus, tmp_path) -> dict:
    out = tmp_path / "good"
    assert train.main(["--data", str(corpus), "--out", str(out), *TINY, "--max-iters", "2"]) == 0
    return torch.load(out / "ckpt.pt", weights_only=True)


def test_bad_checkpoints_are_one_line_errors(corpus, tmp_path, capsys):
    saved = _saved(corpus, tmp_path)
    good = (tmp_path / "good" / "ckpt.pt").read_bytes()
    out = tmp_path / "o"
    out.mkdir()
    ckpt = out / "ckpt.pt"
    other = dict(saved, model={k: v[..., :1] if v.dim() else v for k, v in saved["model"].items()})
    cases = {
        "truncated": (lambda: ckpt.write_bytes(good[: len(good) // 2]), "is truncated or corrupt"),
        "empty": (lambda: ckpt.write_bytes(b""), "is empty"),
        "foreign": (lambda: torch.save({"model": {"w": torch.zeros(2)}, "iter": 3}, ckpt), "is not a checkpoint train.py wrote"),
        "pickle": (lambda: ckpt.write_bytes(b"\x80\x04\x95" + b"junk" * 10), "is not a checkpoint train.py wrote"),
        "code": (lambda: torch.save({"model": torch.nn.Linear(2, 2)}, ckpt), "refuses it"),
        "misshapen": (lambda: torch.save(other, ckpt), "its weights do not fit"),
        "no spec": (lambda: torch.save(dict(saved, spec=str(tmp_path / "gone.snf")), ckpt), "was trained from"),
        "bad config": (lambda: torch.save(dict(saved, config={"n_layers": 1}), ckpt), "its config does not fit"),
        "bad vocab": (lambda: torch.save(dict(saved, vocab=["ab", 3]), ckpt), "its vocabulary is not char tokens"),
    }
    for name, (write, message) in cases.items():
        write()
        _fails(train, ["--data", str(corpus), "--out", str(out), "--resume", *TINY], capsys, message)
        _fails(sample, ["--out", str(out), "--max-new-tokens", "2"], capsys, message)


def test_sample_mistakes(corpus, tmp_path, capsys):
    _saved(corpus, tmp_path)
    out = str(tmp_path / "good")
    capsys.readouterr()
    for argv, message in ((["--max-new-tokens", "-1"], "--max-new-tokens must be an int >= 0"),
                          (["--top-k", "0"], "--top-k must be an int >= 1"),
                          (["--temperature", "-1"], "--temperature must be a finite number >= 0"),
                          (["--num-samples", "0"], "--num-samples must be an int >= 1"),
                          (["--prompt", ""], "--prompt is empty"),
                          (["--prompt", "\u2603"], "--prompt has characters the training text did not"),
                          (["--device", "cuda:9"], "this torch sees")):
        _fails(sample, ["--out", out, *argv], capsys, message)
    assert sample.main(["--out", out, "--prompt", "The", "--max-new-tokens", "3", "--temperature", "0"]) == 0
    assert capsys.readouterr().out.startswith("The")
