"""torch.compile of the generated hot path: one graph for all layers, no graph breaks, eager fallback.

Each test imports its own copy of generated/nanogpt.py, because the compile state of
`_hot_path` lives in the module (shared by every Block), and other tests run it eagerly.
"""

from __future__ import annotations

import pytest
import torch

from conftest import REPO, fresh_module

CONFIG = dict(vocab_size=31, block_size=8, n_layer=3, n_head=2, n_embd=16)
# eval compiled per layer block, a unit users may choose (both devices' defaults evaluate eagerly)
BLOCKS = {"cpu": {"train": "none", "eval": "block"}}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch internals, while compiling
def test_compiled_matches_eager_in_one_graph(monkeypatch):
    import torch._dynamo
    from torch._dynamo.utils import counters

    ng = fresh_module(REPO / "generated" / "nanogpt.py", "nanogpt_compile_test")
    torch.manual_seed(0)
    model = ng.Model(**CONFIG).eval()
    model.compile_units = BLOCKS
    idx = torch.randint(0, CONFIG["vocab_size"], (2, 8))
    monkeypatch.setenv("SNF_COMPILE", "0")
    with torch.no_grad():
        eager = model(idx).logits

    torch._dynamo.reset()
    counters.clear()
    monkeypatch.setenv("SNF_COMPILE", "1")
    with torch.no_grad():
        compiled = model(idx).logits
    assert dict(counters["graph_break"]) == {}
    assert counters["stats"]["unique_graphs"] == 1  # the three layers share one graph
    assert (compiled - eager).abs().max().item() <= 1e-5
    with torch.no_grad():
        again = model(idx).logits
    assert counters["stats"]["unique_graphs"] == 1  # no recompilation on the second call
    assert (again - eager).abs().max().item() <= 1e-5


def _broken_compile(calls: list, error: Exception):
    def compile_(fn, *args, **kwargs):
        calls.append(fn)

        def run(*a, **k):
            raise error
        return run
    return compile_


def test_compile_failure_falls_back_to_eager(monkeypatch):
    import torch._dynamo.exc
    ng = fresh_module(REPO / "generated" / "nanogpt.py", "nanogpt_fallback_test")
    torch.manual_seed(0)
    model = ng.Model(**CONFIG).eval()
    model.compile_units = BLOCKS
    idx = torch.randint(0, CONFIG["vocab_size"], (2, 8))
    with torch.no_grad():
        eager = model(idx).logits

    calls = []
    monkeypatch.setattr(torch, "compile", _broken_compile(calls, torch._dynamo.exc.Unsupported("no compiler here")))
    monkeypatch.setenv("SNF_COMPILE", "1")
    with pytest.warns(RuntimeWarning, match="running eager"):
        with torch.no_grad():
            out = model(idx).logits
    assert calls, "the generated module did not try torch.compile"
    assert torch.equal(out, eager)
    # once broken, later calls stay eager without warning again
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.no_grad():
            assert torch.equal(model(idx).logits, eager)
    assert len(calls) == 1


@pytest.mark.parametrize("error", [ValueError("the model's own error"), RuntimeError("a torch error"),
                                   torch.utils.checkpoint._StopRecomputationError()],
                         ids=["model-error", "runtime-error", "checkpoint-early-stop"])
def test_only_compile_failures_fall_back(monkeypatch, error):
    """An error that is not a failed compile passes through the compiled path untouched: running the
    function again eagerly would hide it, or (gradient checkpointing's early stop, torch's own control
    flow) break what raised it."""
    ng = fresh_module(REPO / "generated" / "nanogpt.py", f"nanogpt_passthrough_{type(error).__name__}")
    model = ng.Model(**CONFIG).eval()
    model.compile_units = BLOCKS
    idx = torch.randint(0, CONFIG["vocab_size"], (2, 8))
    calls = []
    monkeypatch.setattr(torch, "compile", _broken_compile(calls, error))
    monkeypatch.setenv("SNF_COMPILE", "1")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(type(error)):
            model(idx)
    assert calls


@pytest.mark.parametrize("unit, compiled", [("none", []), ("block", ["Block.forward"]), ("model", ["Model.forward"])])
def test_compile_units_choose_what_compiles(monkeypatch, unit, compiled):
    """`Model.compile_units` decides, per device and mode, whether forward compiles whole, layer
    block by layer block, or not at all (here torch.compile only records what it is given)."""
    ng = fresh_module(REPO / "generated" / "nanogpt.py", f"nanogpt_units_{unit}")
    torch.manual_seed(0)
    model = ng.Model(**CONFIG).train()
    idx, targets = torch.randint(0, CONFIG["vocab_size"], (2, 8)), torch.randint(0, CONFIG["vocab_size"], (2, 8))
    eager = model(idx, targets).loss
    calls = []

    def compile_(fn, **kwargs):
        calls.append((fn.__qualname__, kwargs["dynamic"]))

        def run(*a, **k):  # runs fn as if torch.compile were tracing it
            with monkeypatch.context() as patch:
                patch.setattr(torch.compiler, "is_compiling", lambda: True)
                return fn(*a, **k)
        return run
    monkeypatch.setattr(torch, "compile", compile_)
    monkeypatch.setenv("SNF_COMPILE", "1")
    model.compile_units = {"cpu": {"train": unit, "eval": "block"}}
    assert torch.equal(model(idx, targets).loss, eager)
    assert [name for name, _ in calls] == compiled
    assert all(dynamic is False for name, dynamic in calls if name == "Model.forward")  # fixed shapes
    assert ng.Model.compile_units["cpu"]["train"] == "none"  # the class's own table is untouched


ALTERNATING = """\
param:
  n_layer : int = 4
  D : int = 8
input:
  x : Tensor([B, T, D], float32)
parameter:
  w : Tensor([n_layer, D, D], float32)
output:
  y : Tensor([B, T, D], float32)
let y = x
for l in 0..n_layer-1:
    if l % 2 == 0:
        y = y + linear(y, weight=w[l])
    else:
        y = y * 0.5 + linear(y, weight=w[l])
    y = y * (l + 1)
"""


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_condition_on_the_layer_compiles_one_graph_per_branch(tmp_path, monkeypatch):
    """Gemma 2's alternating layers: the layer number reaches the block as a symbolic int, so an
    `if l % 2 == 0` gives two graphs (one per branch), not one per layer, and arithmetic on `l`
    none more; other batch sizes reuse them."""
    import warnings

    import snf
    from conftest import write_spec
    monkeypatch.setenv("SNF_COMPILE", "1")
    torch._dynamo.reset()
    mod = snf.load(write_spec(tmp_path, ALTERNATING, "alternating.snf"))
    torch.manual_seed(0)
    model = mod.Model().eval()
    model.compile_units = BLOCKS
    x = torch.randn(3, 5, 8)
    with monkeypatch.context() as patch:
        patch.setenv("SNF_COMPILE", "0")
        eager = model(x)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", RuntimeWarning)
        got = model(x)
        model(torch.randn(2, 4, 8))
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    assert len(_debug_get_cache_entry_list(mod.Block.forward.__wrapped__.__code__)) == 2
    assert (got - eager).abs().max().item() <= 1e-5


def test_a_recompile_limit_falls_back_for_that_call_only(monkeypatch):
    """Past the module's graph budget (dynamo raises FailOnRecompileLimitHit, which is not a
    TorchDynamoException in torch 2.13), the call runs eagerly with one warning, the result is
    unchanged, and shapes compiled before still run compiled."""
    import warnings

    import torch._dynamo.exc
    ng = fresh_module(REPO / "generated" / "nanogpt.py", "nanogpt_recompile_limit")
    torch.manual_seed(0)
    model = ng.Model(**CONFIG).eval()
    model.compile_units = BLOCKS
    calls = []

    def compile_(fn, **kwargs):
        def run(*a, **k):
            calls.append(a[1].shape)
            if a[1].size(0) > 2:  # a batch above 2: "over the limit"
                raise torch._dynamo.exc.FailOnRecompileLimitHit("Hard failure due to fullgraph=True")
            return fn(*a, **k)
        return run
    monkeypatch.setattr(torch, "compile", compile_)
    monkeypatch.setenv("SNF_COMPILE", "1")
    idx = torch.randint(0, CONFIG["vocab_size"], (3, 8))
    with monkeypatch.context() as patch:
        patch.setenv("SNF_COMPILE", "0")
        eager = model(idx).logits
    with pytest.warns(RuntimeWarning, match="graphs; calls with shapes not compiled for yet run eagerly"):
        assert torch.equal(model(idx).logits, eager)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: no second warning
        assert torch.equal(model(idx).logits, eager)
        model(idx[:2])
    assert not ng.Block.forward.unit.broken  # smaller batches still compile
    assert any(shape[0] == 2 for shape in calls[-CONFIG["n_layer"]:])
