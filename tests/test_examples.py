"""examples/train.py and sample.py as a user runs them: train on a tiny corpus, stop, resume, and the
result is what training straight through gives; then sample; mistakes are one-line errors."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from conftest import REPO

TINY = ["--set", "n_layer=1", "--set", "n_head=2", "--set", "n_embd=32", "--set", "block_size=32",
        "--eval-interval", "4", "--eval-iters", "2", "--log-interval", "2", "--warmup-iters", "2",
        "--batch-size", "4"]


def _run(script: str, *args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "examples" / script), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_train_resume_and_sample(tmp_path):
    corpus = tmp_path / "tiny.txt"
    corpus.write_text((REPO / "README.md").read_text(encoding="utf-8")[:4000], encoding="utf-8")
    spec = str(REPO / "specs" / "nanogpt.snf")
    common = ["--data", str(corpus), "--spec", spec, "--max-iters", "8", *TINY]
    straight = _run("train.py", *common, "--out", str(tmp_path / "straight"), cwd=tmp_path)
    assert straight.returncode == 0, straight.stderr
    assert "step 8: train loss" in straight.stdout and "tokens/s" in straight.stdout
    # the same run, stopped after step 4 (a job's time limit), then resumed
    first = _run("train.py", *common, "--stop-at", "4", "--out", str(tmp_path / "resumed"), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    resumed = _run("train.py", *common, "--out", str(tmp_path / "resumed"), "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming at step 4" in resumed.stdout
    a = torch.load(tmp_path / "straight" / "ckpt.pt", weights_only=False)
    b = torch.load(tmp_path / "resumed" / "ckpt.pt", weights_only=False)
    assert a["iter"] == b["iter"] == 8
    for key in a["model"]:  # resuming is exact: the same weights as training straight through
        torch.testing.assert_close(a["model"][key], b["model"][key], rtol=0, atol=0)
    out = _run("sample.py", "--out", str(tmp_path / "resumed"), "--prompt", "The ", "--max-new-tokens", "30",
               cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    sample, sep, _ = out.stdout.rpartition("\n" + "-" * 40 + "\n")
    assert sep and sample.startswith("The ") and len(sample) == 34  # the prompt and 30 characters (a newline among them)


def test_mistakes_are_one_line_errors(tmp_path):
    for args, message in ((["--data", str(tmp_path / "nope.txt")], "--data"),
                          (["--data", str(REPO / "README.md"), "--set", "n_layers=2"], "not FIELD=VALUE with a Config field"),
                          (["--data", str(REPO / "README.md"), "--spec", str(REPO / "specs" / "bert.snf")],
                           "is not a causal language model")):
        run = _run("train.py", *args, "--out", str(tmp_path / "o"), cwd=tmp_path)
        assert run.returncode == 1 and "train.py: error: " in run.stderr and message in run.stderr, run.stderr
        assert "Traceback" not in run.stderr
    run = _run("sample.py", "--out", str(tmp_path / "none"), cwd=tmp_path)
    assert run.returncode == 1 and "no checkpoint" in run.stderr


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["gpt_decoder", "llama3"])
def test_other_causal_specs_train_and_sample(spec, tmp_path):
    """The loss is the logits' next-token cross-entropy, so any causal spec trains the same way;
    byte tokens set the vocabulary to 256."""
    corpus = tmp_path / "tiny.txt"
    corpus.write_text((REPO / "README.md").read_text(encoding="utf-8")[:3000], encoding="utf-8")
    sizes = ["--set", "n_layer=1", "--set", "n_head=2", "--set", "n_embd=32", "--set", "block_size=32", "--set", "mlp_hidden=48"]
    if spec == "llama3":
        sizes += ["--set", "n_kv_head=1"]
    run = _run("train.py", "--data", str(corpus), "--spec", str(REPO / "specs" / f"{spec}.snf"), "--tokens", "byte",
               "--max-iters", "4", "--eval-interval", "2", "--eval-iters", "1", "--log-interval", "2",
               "--batch-size", "2", "--warmup-iters", "1", *sizes, "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "256 byte tokens" in run.stdout and "step 4: train loss" in run.stdout
    out = _run("sample.py", "--out", str(tmp_path / "o"), "--prompt", "ab", "--max-new-tokens", "8", cwd=tmp_path)
    assert out.returncode == 0, out.stderr


@pytest.mark.slow  # one torchrun launch of 2 processes and three plain runs: about 20 s on a 2-core CPU
def test_train_under_torchrun_with_tp_resumes_and_hands_back_a_plain_checkpoint(tmp_path):
    """A single-process run stops at step 3; `torchrun ... --tp 2 --resume` on 4 ranks (2 data-parallel
    x tp 2, each dp rank 2 of the step's 4 sequences) goes on from it to step 5 (the step losses printed
    are the straight run's, and its tokens/s counts every dp rank's); a plain run resumes from its
    gathered checkpoint to step 6, and ends where training straight through in one process does
    (weights and loss within 1e-5 fp32: the sharded matmuls sum in another order). The commands of
    docs/training.md's "examples/train.py under torchrun"."""
    import os

    corpus = tmp_path / "tiny.txt"
    corpus.write_text((REPO / "README.md").read_text(encoding="utf-8")[:6000], encoding="utf-8")
    common = ["--data", str(corpus), "--spec", str(REPO / "specs" / "llama3.snf"), "--tokens", "byte", "--max-iters", "6",
              "--set", "n_layer=1", "--set", "n_head=4", "--set", "n_kv_head=2", "--set", "n_embd=32",
              "--set", "block_size=32", "--set", "mlp_hidden=48", "--eval-interval", "3", "--eval-iters", "1",
              "--log-interval", "1", "--warmup-iters", "1"]
    whole = ["--batch-size", "4"]  # a step's sequences; 2 on each of the 2 data-parallel ranks below
    straight = _run("train.py", *common, *whole, "--out", str(tmp_path / "straight"), cwd=tmp_path)
    assert straight.returncode == 0, straight.stderr
    out = str(tmp_path / "split")
    assert _run("train.py", *common, *whole, "--stop-at", "3", "--out", out, cwd=tmp_path).returncode == 0
    env = dict(os.environ, OMP_NUM_THREADS="1")
    ranks = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
                            str(REPO / "examples" / "train.py"), "--tp", "2", *common, "--batch-size", "2", "--resume",
                            "--stop-at", "5",
                            "--out", out], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert ranks.returncode == 0, ranks.stderr[-3000:]
    assert "resuming at step 3" in ranks.stdout and "2 x tp 2 ranks" in ranks.stdout
    logged = [line for line in ranks.stdout.splitlines() if line.startswith("step ") and ", lr" in line]
    steps = [line.split(", lr")[0] for line in logged]
    assert steps == [line.split(", lr")[0] for line in straight.stdout.splitlines()
                     if line.startswith(("step 4: loss", "step 5: loss"))]
    for line in logged:  # a step's 4 sequences of 32 tokens over its ms/iter (printed to 0.1 ms), not one dp rank's
        ms, rate = (float(part.split()[0].replace(",", "")) for part in line.split(", ")[2:4])
        assert abs(rate * ms / 1000 - 4 * 32) <= 4 * 32 * 0.06 / ms + 0.5, line
    plain = _run("train.py", *common, *whole, "--resume", "--out", out, cwd=tmp_path)
    assert plain.returncode == 0 and "resuming at step 5" in plain.stdout, plain.stderr
    a = torch.load(tmp_path / "straight" / "ckpt.pt", weights_only=True)
    b = torch.load(tmp_path / "split" / "ckpt.pt", weights_only=True)
    assert a["iter"] == b["iter"] == 6
    for key in a["model"]:
        torch.testing.assert_close(b["model"][key], a["model"][key], rtol=0, atol=1e-5)
    import snf
    mod = snf.load(str(REPO / "specs" / "llama3.snf"))
    x = torch.randint(0, 256, (2, 33), generator=torch.Generator().manual_seed(0))
    losses = []
    for state in (a, b):
        model = mod.Model(mod.Config(**state["config"])).eval()
        model.load_state_dict(state["model"])
        logits = model(x[:, :-1]).logits
        losses.append(torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten()).item())
    assert abs(losses[0] - losses[1]) <= 1e-5, losses
