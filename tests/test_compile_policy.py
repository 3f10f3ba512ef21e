"""When the default path compiles (issue 35): SNF_COMPILE unset compiles a unit once the time it saves
beats what it costs, `SNF_COMPILE=1` / `generate(compile=True)` always, `0` / `compile=False` never; a
compile over 2 s says what it waits for, once; the eager path imports nothing of torch's compiler;
snf's record of compile times lives beside torch's inductor cache.

torch.compile is replaced by a stand-in here (it counts compiles and runs the function), so these
tests are fast; the real compiled path runs in tests/property/test_session.py and test_compile.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import pytest
import torch
from torch import nn

from conftest import REPO
from snf.runtime import compiling, policy
from snf.runtime.compiling import _compile_asked, _compile_mode, _DecodeLoop, _hot_path
from snf.runtime.policy import _signature
from snf.runtime.writes import _DecodeState


class Step(nn.Module):
    """A stand-in for a generated Model: its forward takes `cost` seconds eagerly."""

    def __init__(self, cost: float = 0.0):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3))
        self.cost = cost
        self.config = "config"

    def forward(self, x):
        if self.cost and not torch.compiler.is_compiling():
            time.sleep(self.cost)
        return x * self.weight


@pytest.fixture
def fake_compile(monkeypatch, tmp_path):
    """torch.compile stood in for: a compiled function counts its calls and runs the function, after
    `delay` seconds the first time (its 'compile'); torch's cache folder (where snf keeps its
    record) is tmp_path."""
    calls = {"compiled": 0, "delay": 0.0}

    def compile(fn, **options):
        first = [True]

        def compiled(*args, **kwargs):
            if first.pop() if first else False:
                time.sleep(calls["delay"])
            calls["compiled"] += 1
            return fn(*args, **kwargs)
        return compiled
    monkeypatch.setattr(torch, "compile", compile)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SNF_COMPILE", raising=False)
    return calls


def _unit(fn=None, **options):
    return _hot_path(fn or Step.forward, **options)


@pytest.mark.parametrize("value, mode", [(None, "auto"), ("", "auto"), ("auto", "auto"), ("0", "never"),
                                         ("off", "never"), ("1", "always"), ("true", "always")])
def test_snf_compile_picks_the_mode(monkeypatch, value, mode):
    if value is None:
        monkeypatch.delenv("SNF_COMPILE", raising=False)
    else:
        monkeypatch.setenv("SNF_COMPILE", value)
    assert _compile_mode() == mode
    with _compile_asked(True):
        assert _compile_mode() == "always"
    with _compile_asked(False):
        assert _compile_mode() == "never"
    with _compile_asked(None):
        assert _compile_mode() == mode
    assert _compile_mode() == mode


def test_a_shape_is_told_apart_as_torch_tells_its_graphs_apart():
    """Symbolic sizes (a block) count as 0, 1 or more; a decode step's batch likewise, its cache slots
    read (one graph per bucket) exactly; a whole forward's sizes exactly; a module's mode counts."""
    model = Step()
    block = [_signature((model, torch.ones(b, t, 3)), {}, "all") for b, t in ((2, 5), (3, 9), (1, 5), (2, 1))]
    assert block[0] == block[1] and len(set(block)) == 3
    steps = []
    for batch, slots in ((2, 128), (3, 128), (1, 128), (2, 256)):
        state = _DecodeState(torch.tensor(0), slots)
        steps.append(_signature((model, torch.ones(batch, 1)), {"past": [torch.ones(batch, 512, 2)], "decode": state},
                                "batch"))
    assert steps[0] == steps[1] and len(set(steps)) == 3
    assert _signature((model, torch.ones(2, 5)), {}, "none") != _signature((model, torch.ones(3, 5)), {}, "none")
    assert _signature((model.train(), torch.ones(2)), {}, "none") != _signature((model.eval(), torch.ones(2)), {}, "none")


def test_by_default_a_unit_that_never_pays_runs_eagerly(fake_compile, monkeypatch):
    """The CPU's units other than the decode step measured no faster compiled: they never compile."""
    forward = _unit(unit="block")
    model = Step(cost=0.001)
    x = torch.ones(2, 3)
    for _ in range(50):
        forward(model, x)
    assert fake_compile["compiled"] == 0
    monkeypatch.setenv("SNF_COMPILE", "1")  # asked: compiled, whatever it costs
    forward(model, x)
    assert fake_compile["compiled"] == 1


def test_by_default_a_unit_compiles_once_its_eager_time_would_have_paid_for_it(fake_compile, monkeypatch):
    """Work that recurs: the eager calls of a shape, times what compiling saves per call, past the
    compile's expected seconds. With a saving of 75% and a cost of 0.05 s, calls of 0.01 s compile
    after 7 of them, and a shape of its own starts counting again."""
    monkeypatch.setitem(policy._FIGURES, ("cpu", "decode", "eval"), policy._Figures(0.05, 0.0, (1.0, 1.0), 0.25))
    forward = _unit(dynamic=False, unit="decode")
    model = Step(cost=0.01).eval()
    eager_calls = 0
    while fake_compile["compiled"] == 0:
        forward(model, torch.ones(1, 3))
        eager_calls += 1
    assert 5 <= eager_calls <= 9, eager_calls
    forward(model, torch.ones(1, 3))
    assert fake_compile["compiled"] == 2  # compiled from then on
    forward(model, torch.ones(1, 4, 3))  # another shape: eager until it pays
    assert fake_compile["compiled"] == 2


def test_a_decode_loop_compiles_at_its_second_step_when_the_steps_ahead_repay_it(fake_compile, monkeypatch):
    """The steps left in the loop (in the same cache bucket) count before they run; a loop too short
    to repay the compile stays eager to its end. A shape's first step runs eagerly: it is measured."""
    monkeypatch.setitem(policy._FIGURES, ("cpu", "decode", "eval"), policy._Figures(0.05, 0.0, (1.0, 1.0), 0.25))
    forward = _unit(dynamic=False, unit="decode")
    model = Step(cost=0.002).eval()
    with _DecodeLoop(100) as loop:
        for ahead in (3, 2, 1):  # 3 steps of 2 ms: 4.5 ms saved, against 50 ms
            loop.ahead = ahead
            forward(model, torch.ones(1, 3))
        assert fake_compile["compiled"] == 0
        loop.ahead = 100  # a longer loop: 150 ms saved
        forward(model, torch.ones(1, 1, 3))
        assert fake_compile["compiled"] == 0
        loop.ahead = 99
        forward(model, torch.ones(1, 1, 3))
        assert fake_compile["compiled"] == 1
    assert _DecodeLoop.current() is None


def test_a_compile_records_its_cost_beside_torchs_cache_and_the_next_process_expects_a_warm_one(fake_compile,
                                                                                                 monkeypatch, tmp_path):
    monkeypatch.setenv("SNF_COMPILE", "1")
    model, x = Step(), torch.ones(1, 3)
    fake_compile["delay"] = 0.2
    first = _unit(dynamic=False, unit="decode")
    first(model, x)
    first(model, x)
    (record,) = (tmp_path / "snf").iterdir()
    data = json.loads(record.read_text())
    assert data["compile_s"][0] >= 0.2 and data["compiled_s"] < 0.1
    monkeypatch.delenv("SNF_COMPILE")
    again = _unit(dynamic=False, unit="decode")  # as a new process would build it
    again(model, x)
    (entry,) = again.unit.payoff.shapes.values()
    assert entry.record.cost() == pytest.approx(data["compile_s"][0] * policy._WARM)


def test_a_long_compile_says_what_it_waits_for_once(fake_compile, monkeypatch, caplog):
    monkeypatch.setattr(policy, "_ANNOUNCE_S", 0.05)
    monkeypatch.setenv("SNF_COMPILE", "1")
    fake_compile["delay"] = 0.3
    forward = _unit(unit="block")
    forward(Step(), torch.ones(2, 3))
    forward(Step(), torch.ones(2, 3))
    said = [r.getMessage() for r in caplog.records if r.name == "snf"]
    assert len(said) == 1 and said[0].startswith("snf: torch.compile is compiling each layer block of"), said
    assert "SNF_COMPILE=0 never compiles" in said[0]


def test_a_short_compile_says_nothing(fake_compile, monkeypatch, caplog):
    monkeypatch.setenv("SNF_COMPILE", "1")
    _unit(unit="block")(Step(), torch.ones(2, 3))
    assert not [r for r in caplog.records if r.name == "snf"]


def test_without_logging_set_up_the_wait_is_said_on_stderr():
    """Python's last-resort handler prints a warning of a logger nobody configured to stderr."""
    code = "from snf.runtime.policy import _say; _say('snf: waiting')"
    done = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(REPO)),
                          capture_output=True, text=True, timeout=60)
    assert done.stderr == "snf: waiting\n"


def test_the_record_lives_in_torchs_own_cache_folder(monkeypatch):
    """snf finds torch's default inductor cache folder without importing inductor (which the eager
    path must not): the same folder torch's own function names."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    assert os.path.join(tempfile.gettempdir(), f"torchinductor_{policy._user()}") == default_cache_dir()


EAGER_SESSION = """
import sys, torch
import generated.nanogpt as ng
m = ng.Model(vocab_size=64, block_size=32, n_layer=2, n_head=2, n_embd=32)
x = torch.randint(0, 64, (2, 8))
m(x, targets=x).loss.backward()
m.eval()
m(x)
m.generate(x[:, :4], 8, temperature=0)
m.generate(x[:, :4], 8, temperature=0.8, top_k=5)
print(sorted(n for n in sys.modules if n.startswith(("torch._dynamo", "torch._inductor"))))
"""


@pytest.mark.parametrize("value", ["", "0"])
def test_the_eager_path_imports_nothing_of_torchs_compiler(value):
    """A training step, an eval forward and generate at a size where compiling does not pay (and with
    SNF_COMPILE=0): torch._dynamo and inductor stay unimported (they take seconds to import)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), SNF_COMPILE=value)
    done = subprocess.run([sys.executable, "-c", EAGER_SESSION], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.slow  # torch.compile
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_decode_loop_that_starts_eagerly_switches_to_the_compiled_step_midway(monkeypatch, tmp_path):
    """By default, with figures that make compiling pay at once: the first step of each shape runs
    eagerly (it is measured), the next compile (the batch axis made symbolic there, the compile
    settings entered mid-loop), and greedy tokens equal eager generate's, at batch 1 and 2."""
    import warnings

    from conftest import fresh_module
    monkeypatch.delenv("SNF_COMPILE")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(policy._FIGURES, ("cpu", "decode", "eval"), policy._Figures(0.0, 0.0, (1.0, 1.0), 0.3))
    torch._dynamo.reset()
    ng = fresh_module(REPO / "generated" / "nanogpt.py", "nanogpt_switch")
    torch.manual_seed(0)
    model = ng.Model(vocab_size=64, block_size=32, n_layer=2, n_head=2, n_embd=32).eval()
    for batch in (1, 2):
        prompt = torch.randint(0, 64, (batch, 3))
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # a fallback to eager fails here
            got = model.generate(prompt, 8, temperature=0)
        assert torch.equal(got, model.generate(prompt, 8, temperature=0, compile=False))
    seen = list(ng.Model._decode_step.unit.payoff.shapes.values())
    assert len(seen) == 2 and all(s.compiled == 2 and s.eager_calls == 1 for s in seen), seen
    assert compiling._CompileSettings.inside == 0  # the loop left them as it found them
