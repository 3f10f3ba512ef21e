"""The benchmark scripts still run (tiny models, one rep, eager), so they cannot rot unseen:
each checks that the contenders agree (same logits and losses, or the same greedy tokens) before
timing."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("transformers")
QUICK = ["--quick", "--no-compile", "--reps", "1", "--warmup", "0"]


@pytest.mark.slow  # 13-16 s a model: the fast tier keeps the cheaper benchmarks
@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_bench_generate_runs(model, capsys, monkeypatch):
    from benchmarks import bench_generate
    monkeypatch.setenv("SNF_COMPILE", "0")  # the script sets it; restored afterwards
    assert bench_generate.main([*QUICK, "--model", model]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^CPU: .+, \d+ logical CPUs, torch's kernels \w+, \d+ threads? used$", out, re.M)  # with its table
    rows = re.findall(r"^\| (\d+) +\| (\d+) +\| ([\w-]+) +\| (\d+) +\|.*\| ([\d.]+)x +\|", out, re.M)
    assert [(size, batch, who) for size, batch, who, *_ in rows] == \
        [("64", batch, who) for batch in ("1", "8") for who in ("hf", "hf-static", "snfc")]
    assert all(int(rate) > 0 and float(x) > 0 for *_, rate, x in rows)


def test_bench_generate_step_options_as_generated():
    """--step-options' `step:decompose+threshold` is what generated modules pass (its README table says so)."""
    from benchmarks import bench_generate
    from generated import gpt_decoder, nanogpt
    for module in (nanogpt, gpt_decoder):
        assert module.Model._decode_step.unit.cpu_options == bench_generate.STEP_OPTIONS["step:decompose+threshold"]


@pytest.mark.slow  # 10 s
def test_bench_gpt2_runs(capsys, monkeypatch):
    from benchmarks import bench_gpt2
    monkeypatch.setenv("SNF_COMPILE", "0")
    assert bench_gpt2.main(QUICK) == 0
    rows = re.findall(r"^\| quick +\| (\w+) +\| ([\w-]+) +\|", capsys.readouterr().out, re.M)
    assert rows == [(p, who) for p in ("forward", "train") for who in ("hf", "nanogpt", "snfc")]


def test_bench_tricks_runs(capsys, monkeypatch):
    from benchmarks import bench_tricks
    monkeypatch.setenv("SNF_COMPILE", "0")
    assert bench_tricks.main(QUICK) == 0
    assert re.search(r"^\| fused q/k/v +\| eager ", capsys.readouterr().out, re.M)


@pytest.mark.slow  # 5 s
def test_bench_gqa_runs(capsys):
    from benchmarks import bench_gqa
    assert bench_gqa.main(QUICK) == 0
    rows = re.findall(r"^\| ([^|]+?) +\| (enable_gqa|repeat_interleave|expand) +\|", capsys.readouterr().out, re.M)
    assert len(rows) == 4 * 3 and {c for _, c in rows} == {"enable_gqa", "repeat_interleave", "expand"}


@pytest.mark.slow  # 7 s
def test_bench_sinks_runs(capsys):
    from benchmarks import bench_sinks
    assert bench_sinks.main(QUICK) == 0
    rows = re.findall(r"^\| ([^|]+?) +\| (written out|SDPA, zero key|SDPA \+ lse|SDPA, no sinks) +\|",
                      capsys.readouterr().out, re.M)
    assert len(rows) == 5 * 4


@pytest.mark.slow
def test_bench_load_runs():
    import subprocess
    import sys

    from conftest import REPO
    out = subprocess.run([sys.executable, "benchmarks/bench_load.py", "--quick"], cwd=REPO, capture_output=True,
                         text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = re.findall(r"^(load_state_dict|load_checkpoint)\S* .*? ([\d.]+) +([\d.]+)$", out.stdout, re.M)
    assert len(rows) == 3 and all(float(seconds) > 0 for *_, seconds in rows), out.stdout


@pytest.mark.slow  # about 12 s of CPU: a folder written, then read three ways, each in a process of its own
def test_bench_pretrained_runs():
    import subprocess
    import sys

    from conftest import REPO
    # one folder, the MXFP4 one (each folder costs three processes' imports; the three loaders' values
    # against transformers for every quantization: tests/test_quantized.py)
    out = subprocess.run([sys.executable, "benchmarks/bench_pretrained.py", "--quick", "--reps", "1", "--only",
                          "gpt_oss"], cwd=REPO, capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    # the folder by snfc without and with its compiled spec kept, and by transformers
    rows = re.findall(r"^\| (\w+) \| (snf|AutoModel)[^|]* \| bfloat16 \| [\d.]+ GiB \| ([\d.]+) \| ([\d.]+) \| "
                      r"[\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ GiB \| [\d.]+ \|$", out.stdout, re.M)
    assert [(name, who) for name, who, *_ in rows] == [("gpt_oss", who) for who in ("snf", "snf", "AutoModel")], \
        out.stdout
    assert all(0 < float(load) <= float(first) for *_, load, first in rows), out.stdout


def test_bench_train_example_runs(capsys):
    from benchmarks import bench_train_example
    assert bench_train_example.main(QUICK) == 0
    out = capsys.readouterr().out
    ours, theirs = map(float, re.search(r"^steps 1-2 agree: loss ([\d.]+) \(snfc\) vs ([\d.]+) \(nanogpt\)$",
                                        out, re.M).groups())
    assert abs(ours - theirs) <= 1e-4
    rows = re.findall(r"^\| (snfc|nanogpt) +\| ([\d.]+) +\|", out, re.M)
    assert [who for who, _ in rows] == ["snfc", "nanogpt"] and all(float(ms) > 0 for _, ms in rows)


def test_bench_check_runs(capsys):
    from benchmarks import bench_check
    assert bench_check.main(["--runs", "1", "--warmup", "0"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^snfc check specs/: \d+ specs, \d+ lines; budget ", out, re.M), out
    rows = re.findall(r"^\| this \(.+\) \| (.+) \| [\d.]+ \| [\d.]+ \| [\d.]+ \| ([\d.]+) \| (?:yes|no) \|$", out, re.M)
    assert rows[0][0] == "specs/" and rows[1:] == [("qwen3_moe at 1000 x 1024", "0.300"),
                                                   ("qwen3_moe at 2 x 4", "0.300")], out


def test_bench_moe_runs(capsys):
    from benchmarks import bench_moe
    assert bench_moe.main(["--quick", "--reps", "1", "--warmup", "0"]) == 0
    rows = re.findall(r"^\| (prefill|decode)[^|]*\| (sparse|dense|hf) +\| ([\d.]+) +\|", capsys.readouterr().out, re.M)
    assert [(case, who) for case, who, _ in rows] == [(c, w) for c in ("prefill", "decode") for w in ("sparse", "dense", "hf")]
    assert all(float(ms) > 0 for *_, ms in rows)


def test_bench_mla_runs(capsys):
    from benchmarks import bench_mla
    assert bench_mla.main(["--quick", "--reps", "1"]) == 0
    assert "decode 1 token after 64" in capsys.readouterr().out


def test_bench_recurrent_runs(capsys):
    from benchmarks import bench_recurrent
    assert bench_recurrent.main(["--quick", "--reps", "1"]) == 0
    out = capsys.readouterr().out
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in out.splitlines() if re.match(r"\| (prefill|decode)", line)]
    assert [r[0].split()[0] for r in rows] == ["prefill", "decode", "decode"]
    assert all(float(v) > 0 for r in rows for v in r[1:] if v != "-") and all(r[2] != "-" for r in rows[1:])
    assert "peak memory" in out and "decode after" in out


def test_bench_kda_runs(capsys):
    from benchmarks import bench_kda
    assert bench_kda.main(["--quick", "--reps", "1"]) == 0
    out = capsys.readouterr().out
    assert re.findall(r"^\| decode 1 token after (\d+) +\| [\d.]+ +\|", out, re.M) == ["8", "64"]
    assert "snfc decode after 64 / after 8" in out


@pytest.mark.slow  # 13 s: two processes
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not __import__("torch").cuda.is_available(), reason="the GPU rows: needs a CUDA device"))])
def test_bench_first_runs(capsys, device):
    """Each contender in a process of its own; the default path with an empty cache compiles nothing
    at this size, so the row is as quick as eager's."""
    from benchmarks import bench_first
    assert bench_first.main(["--configs", "nanogpt-2x64", "--contenders", "default-cold", "hf",
                             "--tokens", "3", "--steps", "2", "--device", device]) == 0
    rows = re.findall(r"^\| nanogpt-2x64 \| ([\w-]+) \| (.+) \|$", capsys.readouterr().out, re.M)
    assert [who for who, _ in rows] == ["default-cold", "hf"]
    for who, cells in rows:
        first, some, all_, vs_eager, step1, steps, steps_vs, compiled = cells.split(" | ")
        assert 0 < float(first) <= float(some) <= float(all_) and 0 < float(step1) <= float(steps)
        assert compiled == ("-" if who == "hf" else "0 + 0")  # nothing pays at this size


@pytest.mark.slow
def test_bench_tiering_runs(capsys):
    from benchmarks import bench_tiering
    assert bench_tiering.main(["--model", "2x64", "--steps", "8"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^\| compile behind \(bucket 128\) \| [\d.]+ s \(\d+ eager tokens meanwhile\) \|$", out, re.M), out
    assert len(re.findall(r"^\| (32|128|512|2048) \| [\d.]+ \| [\d.]+ \| [\d.]+ \|$", out, re.M)) == 4, out


def test_bench_tensor_parallel_table():
    """Its table without a launch (a torchrun launch a tp costs about 15 s: the script's --quick is run
    by hand): ratios against tp = 1, the processor named under it, tp above the cores said to oversubscribe."""
    import os

    from benchmarks import bench_tensor_parallel as bench
    rows = [{"tp": 1, "step_ms": 100.0, "peak_mb": 400.0, "params_mb": 200.0},
            {"tp": 2, "step_ms": 60.0, "peak_mb": 220.0, "params_mb": 101.0},
            {"tp": (os.cpu_count() or 1) + 1, "step_ms": 80.0, "peak_mb": 120.0, "params_mb": 51.0}]
    text = bench.table(rows, "header", "cpu")
    assert "| 2 | 60.0 | 0.60 | 220.0 | 0.55 | 101.0 | 0.51 |" in text, text
    assert f"{os.cpu_count()} cores" in text and "oversubscribes" in text, text
    args = bench.arguments(["--device", "cuda", "--backend", "nccl", "--tp", "1", "2"])
    assert (args.device, args.backend, args.tp) == ("cuda", "nccl", [1, 2])
