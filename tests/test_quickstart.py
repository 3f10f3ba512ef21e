"""snf.quickstart, the last step of scripts/demo.sh: every spec in specs/ gets a section and a
summary line, and its numbers are what the lines say they are."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, python_subprocess

import snf.quickstart as quickstart

SPECS = sorted(p.stem for p in (REPO / "specs").glob("*.snf"))


def test_every_demo_config_is_a_spec():
    """DEMO is the demo's, not the suite's: a spec without an entry gets its line from the meta device
    (test_spec_without_demo_config_runs_forward_on_the_meta_device), so a new family needs none."""
    stale = set(quickstart.DEMO) - set(SPECS)
    assert not stale, f"DEMO in snf/quickstart.py names specs that are not in specs/: {sorted(stale)}"


# A line that reports a failure: a spec's FAILED line, an exception's name or a traceback, or a
# "cannot" (the demo's own word for what it could not do).
ERROR_LINE = re.compile(r"cannot|error|traceback|failed|exception", re.I)
# Lines that quote text a model wrote (a sample), which may spell any word
SAMPLE_LINE = re.compile(r"^  (sample \(generate|'let x=y;' sorted \(greedy generate\))")


def _error_lines(*outputs: str) -> list[str]:
    return [line for out in outputs for line in out.splitlines()
            if ERROR_LINE.search(line) and not SAMPLE_LINE.match(line)]


def _quickstart(*args: str) -> tuple[str, str]:
    proc = python_subprocess(f"import sys, snf.quickstart as q; sys.exit(q.main({list(args)!r}))", timeout=600,
                             env={"SNF_COMPILE": ""})  # the default path, as scripts/demo.sh runs it
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert not _error_lines(proc.stdout, proc.stderr), "\n".join(_error_lines(proc.stdout, proc.stderr))
    return proc.stdout, proc.stderr


@pytest.mark.slow
def test_the_demo_prints_no_error_line_and_shows_every_spec():
    """scripts/demo.sh's last step as it runs it (`python -m snf.quickstart`, its default arguments,
    on the committed generated/ modules, the default path): it exits 0, no line of its output reports
    a failure (it once exited 0 with 23 specs' "cannot run" lines in it), nanoGPT, an encoder and a
    mixture of experts train (which compiles nothing at these sizes), and every other spec, imported
    and run on the meta device, gets a section and a summary line."""
    proc = subprocess.run([sys.executable, "-m", "snf.quickstart"], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "SNF_COMPILE": ""})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    out, err = proc.stdout, proc.stderr
    assert not _error_lines(out, err), "\n".join(_error_lines(out, err))
    assert "mode: the default path: a unit compiles where the time it saves beats what compiling costs" in out
    assert "snf: torch.compile is compiling" not in err  # nothing waited for a compile
    summary = out[out.index("\nsummary"):]
    for name in SPECS:
        # what it is doing is said before it does it: the import and the build take seconds
        assert f"\n== {name} (specs/{name}.snf): importing generated/{name}.py and building" in out, name
        if name in quickstart.SHOWN:
            _trained_as_said(name, out, err)
        else:  # a spec DEMO has no config for (a new family, say) is never trained
            why = "see --all" if name in quickstart.DEMO else "no demo config"
            assert re.search(rf"^  {name} +not trained: {why} \(", summary, re.M), name


def _trained_as_said(name: str, out: str, err: str) -> None:
    summary = out[out.index("\nsummary"):]
    assert re.search(rf"^  {name} +\S.*right \(baseline", summary, re.M), name
    # the loss line's first number is the first step's loss, as the progress lines print it
    step1, steps = re.search(rf"^  {name} step 1/(\d+) loss (\S+) \(\d+ s\)$", err, re.M).group(2, 1)
    section = out[out.index(f"\n== {name} "):]
    last = min(int(steps), 10)
    assert re.search(rf"training loss (\S+) at step 1 -> \S+ \(mean of the last {last} steps\); {steps} steps in",
                     section).group(1) == step1, name


@pytest.mark.slow  # 15 s: every spec trained
def test_quickstart_all_trains_every_spec_and_says_what_its_numbers_are():
    out, err = _quickstart("--steps", "3", "--all")
    summary = out[out.index("\nsummary"):]
    for name in SPECS:
        if name in quickstart.DEMO:
            _trained_as_said(name, out, err)
        else:  # a spec DEMO has no config for: its meta-device line
            assert re.search(rf"^  {name} +not trained: no demo config \(", summary, re.M), name


def test_spec_without_demo_config_runs_forward_on_the_meta_device(monkeypatch, capsys):
    monkeypatch.setattr(quickstart, "DEMO", {})
    monkeypatch.setattr(quickstart, "ROOT", REPO)
    line = quickstart.run_spec(Path("specs/nanogpt.snf"))
    out = capsys.readouterr().out
    assert "== nanogpt (specs/nanogpt.snf): importing" in out
    assert "\n  124.4M parameters at its defaults\n" in out  # GPT-2 small as nanoGPT builds it (tied head)
    assert "no demo config in snf/quickstart.py's DEMO" in out
    assert "logits [2, 8, 50257], new_keys [12, 2, 8, 12, 64], new_values [12, 2, 8, 12, 64]" in out
    assert line == "not trained: no demo config (124.4M parameters at its defaults)"


def test_a_spec_without_defaults_or_token_inputs_still_gets_a_line(tmp_path):
    import snf
    import torch
    spec = tmp_path / "float_in.snf"
    spec.write_text("param:\n  D : int\n\ninput:\n  x : Tensor([B, D], float32)\n\nparameter:\n"
                    "  w : Tensor([D, D], float32)\n\noutput:\n  y : Tensor([B, D], float32)\n\n"
                    "let y = linear(x, weight=w)\n", encoding="utf-8")
    mod = snf.load(spec)
    assert quickstart._at_defaults(mod) is None  # Config(D) has no default
    with torch.device("meta"):
        model = mod.Model(D=4)
    inputs = quickstart._meta_inputs(spec, model)  # x: float32 [B, D], at the model's D
    assert [(k, list(v.shape), v.dtype) for k, v in inputs.items()] == [("x", [2, 4], torch.float32)]
    assert quickstart._on_meta(model, inputs) == "output [2, 4]"


@pytest.mark.parametrize("name", SPECS)
def test_every_spec_runs_forward_at_its_defaults_on_the_meta_device(name, monkeypatch):
    """What the demo prints for a spec it does not train: its forward at its defaults on the meta
    device, on the inputs its spec requires, at a length its checks allow."""
    import torch
    monkeypatch.setattr(quickstart, "ROOT", REPO)
    model = quickstart._at_defaults(quickstart._module(name))
    inputs = quickstart._meta_inputs(REPO / "specs" / f"{name}.snf", model)
    assert all(v.device.type == "meta" for v in inputs.values())
    shapes = quickstart._on_meta(model, inputs)  # raises where it fails
    assert shapes and "[2, " in shapes, shapes
    if name == "tiny_transformer":  # T <= block_size = 5
        assert quickstart._shapes(inputs) == "x [2, 5]"
    if name == "t5":  # an encoder-decoder gets its decoder's input
        assert quickstart._shapes(inputs) == "input_ids [2, 8], decoder_input_ids [2, 8]"


def test_a_training_forward_with_its_fused_loss_runs_on_the_meta_device():
    """The fused head-and-loss (snf.runtime.loss) asks autocast for the meta device's dtype too: a
    device without autocast has it off (torch.is_autocast_enabled("meta") raises)."""
    import torch
    from generated.gpt_decoder import Model
    with torch.device("meta"):
        model = Model(**quickstart.DEMO["gpt_decoder"].config).train()
        idx = torch.zeros(2, 8, dtype=torch.long)
        out = model(idx, labels=idx)
        out.loss.backward()
    assert out.loss.shape == () and out.loss.device.type == "meta"


def test_snowflake_first_loss_is_its_head_copying_the_input():
    """The quickstart's note on snowflake_core: its tied N(0, 1) head makes each position's largest
    logit its own input token's, so at a hidden position (input: the mask token) the first loss is
    that margin, about n_embd / sqrt(1.5), not ln(vocab)."""
    import torch
    import torch.nn.functional as F
    from generated.snowflake_core import Model
    torch.manual_seed(0)
    model = Model(**quickstart.DEMO["snowflake_core"].config).eval()
    target = torch.randint(0, quickstart.MASK, (64, 16))
    hidden = torch.rand(target.shape) < 0.3
    inp = target.masked_fill(hidden, quickstart.MASK)
    with torch.no_grad():
        logits = model(inp)
    assert (logits.argmax(-1) == inp).all()  # every position predicts its own input
    loss = F.cross_entropy(logits[hidden], target[hidden]).item()
    margin = (logits[hidden][:, quickstart.MASK] - logits[hidden].gather(1, target[hidden][:, None])[:, 0]).mean().item()
    assert loss > 8 * math.log(quickstart.VOCAB) and abs(loss - margin) < 2.0, (loss, margin)
    assert "by design of the seed" in quickstart.DEMO["snowflake_core"].note


def test_an_snf_compile_value_it_does_not_know_is_one_error_line():
    proc = python_subprocess("import sys, snf.quickstart as q; sys.exit(q.main(['--steps', '1']))", timeout=120,
                             env={"SNF_COMPILE": "ture"})
    assert proc.returncode == 1
    assert "snfc quickstart: error: SNF_COMPILE='ture' is not a setting snf knows" in proc.stderr
    assert "Traceback" not in proc.stderr
