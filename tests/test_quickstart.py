"""snf.quickstart, the last step of scripts/demo.sh: every spec in specs/ gets a section and a
summary line, and its numbers are what the lines say they are."""

from __future__ import annotations

import math
import re
from pathlib import Path

from conftest import REPO, python_subprocess

import snf.quickstart as quickstart

SPECS = sorted(p.stem for p in (REPO / "specs").glob("*.snf"))


def test_every_spec_has_a_demo_config():
    missing = set(SPECS) - set(quickstart.DEMO)
    assert not missing, f"add a small config for {sorted(missing)} to DEMO in snf/quickstart.py"


def _quickstart(*args: str) -> tuple[str, str]:
    proc = python_subprocess(f"import sys, snf.quickstart as q; sys.exit(q.main({list(args)!r}))", timeout=600,
                             env={"SNF_COMPILE": ""})  # the default path, as scripts/demo.sh runs it
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout, proc.stderr


def _trained_as_said(name: str, out: str, err: str) -> None:
    summary = out[out.index("\nsummary"):]
    assert re.search(rf"^  {name} +\S.*right \(baseline", summary, re.M), name
    # the loss line's first number is the first step's loss, as the progress lines print it
    step1 = re.search(rf"^  {name} step 1/3 loss (\S+) \(\d+ s\)$", err, re.M).group(1)
    section = out[out.index(f"\n== {name} "):]
    assert re.search(r"training loss (\S+) at step 1 -> \S+ \(mean of the last 3 steps\); 3 steps in",
                     section).group(1) == step1, name


def test_quickstart_trains_a_few_specs_and_shows_every_one():
    """scripts/demo.sh's last step: nanoGPT, an encoder and a mixture of experts trained on the
    default path (which compiles nothing at these sizes), every other spec imported and run on the
    meta device; each gets a section and a summary line."""
    out, err = _quickstart("--steps", "3")
    assert "mode: the default path: a unit compiles where the time it saves beats what compiling costs" in out
    assert "snf: torch.compile is compiling" not in err  # nothing waited for a compile
    summary = out[out.index("\nsummary"):]
    for name in SPECS:
        # what it is doing is said before it does it: the import and the build take seconds
        assert f"\n== {name} (specs/{name}.snf): importing generated/{name}.py and building" in out, name
        if name in quickstart.SHOWN:
            _trained_as_said(name, out, err)
        else:
            assert re.search(rf"^  {name} +not trained: see --all \(", summary, re.M), name


def test_quickstart_all_trains_every_spec_and_says_what_its_numbers_are():
    out, err = _quickstart("--steps", "3", "--all")
    for name in SPECS:
        _trained_as_said(name, out, err)


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
    assert quickstart._on_meta(model).startswith("cannot run on token ids alone (ValueError: input x must be")


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
