"""`snfc stats` against the built modules: parameter counts exact, FLOPs as FlopCounterMode counts
them (forward, and forward + backward), activation bytes as the NumPy interpreter produces them,
the golden output for nanoGPT, and the CLI's errors."""

from __future__ import annotations

import json
import textwrap
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode, conv_flop_count, sdpa_backward_flop_count, sdpa_flop_count

import snf
import snf.stats
from conftest import REPO, assert_golden, python_subprocess, snfc, write_spec
from snf import ir
from snf.compiler import analyze, planned
from snf.interpret import Interpreter
from snf.runtime import experts, recurrent
from snf.ops import all_ops
from snf.passes.caches import plan_caches
from snf.passes.liveness import plan_outputs
from snf.source import Source
from snf.stats import StatsError, parse_overrides, stats
from snf.stats.caches import DTYPE_BYTES
from specs_table import ROWS

SPECS = sorted((REPO / "specs").glob("*.snf"))
B, T = 2, 6
aten = torch.ops.aten
# FlopCounterMode counts SDPA's CUDA kernels (flash, memory-efficient, cuDNN) but not the one CPU
# runs; count that one with torch's own SDPA formulas, as a CUDA run would
CPU_SDPA = {
    aten._scaled_dot_product_flash_attention_for_cpu:
        lambda q, k, v, *args, out_shape=None, **kw: sdpa_flop_count(q, k, v),
    aten._scaled_dot_product_flash_attention_for_cpu_backward:
        lambda grad_out, q, k, v, *args, out_shape=None, **kw: sdpa_backward_flop_count(grad_out, q, k, v),
    # torch's convolution backward formula leaves the groups out, counting a depthwise convolution's
    # (causal_conv1d's) C times over: each gradient asked for costs what the forward does
    aten.convolution_backward:
        lambda grad_out, x, w, bias, stride, padding, dilation, transposed, out_padding, groups, mask, out_shape=None,
        **kw: conv_flop_count(x, w, grad_out, transposed) * (int(mask[0]) + int(mask[1])),
}


def _model_ir(path: Path) -> ir.Model:
    result = analyze(Source.read(path))
    assert result.ok, result.diagnostics
    return result.model


def _small(model: ir.Model, **extra) -> dict:
    """A bundled spec's small config (tests/specs_table.py), another spec's defaults; with `extra`."""
    fields = {c.name for c in model.config}
    # gradient_checkpointing: see test_gradient_checkpointing_recomputes
    small = {**(ROWS[model.name].small if model.name in ROWS else {}), "gradient_checkpointing": False}
    return {**{k: v for k, v in small.items() if k in fields}, **extra}


def _sizes(model: ir.Model) -> dict:
    """The run-time sizes: B and T, and an encoder's length S (T5) equal to T, as _feeds makes it."""
    return {"B": B, "T": T, **({"S": T} if "S" in model.run_time_dims else {})}


def _feeds(model: ir.Model, cfg: dict) -> dict:
    """The required inputs: token ids [B, T], or floats (Whisper's features [B, num_mel_bins, n_frames])."""
    vocab = cfg.get("vocab_size", cfg.get("V", 8))
    gen = torch.Generator().manual_seed(0)
    sizes = {**_ints(model, cfg), **_sizes(model)}
    out = {}
    for i in model.inputs:
        if i.optional:
            continue
        shape = [d.evaluate(sizes) for d in i.ty.shape]
        out[i.name] = torch.randint(0, vocab, shape, generator=gen) if i.ty.dtype.startswith("int") \
            else torch.randn(shape, generator=gen)
    return out


def _counted(fn) -> int:
    with FlopCounterMode(display=False, custom_mapping=CPU_SDPA) as counter:
        fn()
    return counter.get_total_flops()


def _measure(path: Path, cfg: dict, cached: dict | None = None):
    """(parameter count, forward FLOPs, forward + backward FLOPs) of the built module in training
    mode; into `cached`, the outputs of an eval-mode forward by name, and under "trained" the names
    of those a training forward returns (the caches and states are the others)."""
    mod = snf.load(path)
    if hasattr(mod, "_MOE_DENSE_MACS"):
        mod._MOE_DENSE_MACS = -1  # the sparse form, whose top-k cost stats counts (not the dense one tiny sizes pick)
    torch.manual_seed(0)
    model = mod.Model(mod.Config(**cfg))
    feeds = _feeds(_model_ir(path), cfg)

    import inspect
    # the computation as the spec writes it: with a fused loss the head's gradient products run in
    # forward (snf/passes/fused_loss.py), the same products a step counts in backward otherwise
    plain = {"return_logits": True} if "return_logits" in inspect.signature(model.forward).parameters else {}

    def outputs():
        out = model(**feeds, **plain)
        named = out._asdict() if hasattr(out, "_asdict") else {"out": out}
        if cached is not None:
            cached["trained"] = {n for n, t in named.items() if t is not None}
        return [t for t in named.values() if isinstance(t, torch.Tensor) and t.requires_grad]

    if cached is not None:
        with torch.no_grad():
            out = model.eval()(**feeds)
        model.train()
        cached.update(out._asdict() if hasattr(out, "_asdict") else {})

    def step():
        sum(t.sum() for t in outputs()).backward()

    return sum(p.numel() for p in model.parameters()), _counted(outputs), _counted(step)


def _close(got: Fraction, want: int, rel: float = 0.02) -> bool:
    return abs(float(got) - want) <= rel * want


@pytest.mark.parametrize("spec", SPECS, ids=[p.stem for p in SPECS])
def test_counts_match_the_built_module(spec, monkeypatch):
    monkeypatch.setattr(experts, "_MOE_DENSE_MACS", -1)  # the sparse form, whose FLOPs stats counts
    # the scans as compiled graphs run them: opaque ops, counted by the formulas stats uses; their backward
    # (torch.func inside the op, which a FLOP counter's dispatch mode cannot run) gives zeros, counted the same
    monkeypatch.setattr(recurrent, "_RECURRENT_OPAQUE", True)
    monkeypatch.setattr(recurrent, "_recurrent_vjp", lambda kernel, grad, args, slots: [
        torch.zeros_like(args[i]) if args[i] is not None else grad.new_empty(0) for i in slots])
    model = _model_ir(spec)
    cfg = _small(model)
    plans = planned(model)
    s = {q.key: q.value for q in stats(plans, {**cfg, **_sizes(model)}).quantities}
    seen: dict = {}
    params, forward, training = _measure(spec, cfg, seen)
    assert s["parameters"] == params  # exact
    plan = plans.caches
    caches = [c.output for c in plan.caches if not c.state]  # the cache the module returns, grown by these B*T tokens
    states = [c.output for c in plan.caches if c.state]  # the recurrent states: per sequence
    assert s["kv_cache_bytes"] * B * T == sum(seen[n].nbytes for n in caches)
    assert s.get("state_bytes", 0) * B == sum(seen[n].nbytes for n in states)
    # the plan's caches and states are what the built module returns in eval mode and not in training
    trained = seen.pop("trained")
    assert set(caches + states) == {n for n, t in seen.items() if t is not None} - trained
    tokens = B * T
    assert _close(s["flops_forward"] * tokens, forward), (s["flops_forward"] * tokens, forward)
    assert _close(s["flops_training"] * tokens, training), (s["flops_training"] * tokens, training)


def test_switches_and_sequence_length_follow_the_config():
    spec = REPO / "specs" / "nanogpt.snf"
    model = _model_ir(spec)
    cfg = _small(model, bias=False)
    params, forward, _ = _measure(spec, cfg)  # at T = 6

    def predicted(t):
        s = {q.key: q.value for q in stats(planned(model), {**cfg, "B": B, "T": t}).quantities}
        return s["parameters"], s["flops_forward"] * B * T

    assert predicted(T) == (params, forward)  # without the conditional biases
    assert predicted(3)[1] < forward  # attention's share shrinks with T


def test_gradient_checkpointing_recomputes():
    """The recognised switch runs each layer's forward again in the backward, up to the last
    tensor the backward needs: between the model FLOPs and the model FLOPs plus the layers'."""
    spec = REPO / "specs" / "gpt_decoder.snf"
    model = _model_ir(spec)
    cfg = _small(model, gradient_checkpointing=True)
    s = {q.key: q.value * B * T for q in stats(planned(model), {**cfg, "B": B, "T": T}).quantities}
    _, _, training = _measure(spec, cfg)
    assert s["flops_training"] < training <= s["flops_training"] + s["flops_recompute"]
    assert "flops_recompute" not in {q.key for q in stats(planned(model), {**_small(model), "T": T}).quantities}


LAYERS_ON_A_RAW_INPUT = textwrap.dedent("""\
    param:
      D : int = 8
      n_layer : int = 3

    input:
      x : Tensor([B, T, D], float32)

    parameter:
      w : Tensor([n_layer, D, D], float32)
      u : Tensor([D, D], float32)

    output:
      y : Tensor([B, T, D], float32)

    let h = x @ u
    let y = x
    for l in 0..n_layer-1:
        y = linear(y, weight=w[l])
    """)


def test_backward_skips_gradients_nothing_needs(tmp_path):
    """The first layer's input is a plain input: it gets no gradient, so layer 0 costs one product
    less in the backward than the others; `h = x @ u` is unused, computed, and has a weight."""
    spec = write_spec(tmp_path, LAYERS_ON_A_RAW_INPUT)
    model = _model_ir(spec)
    s = {q.key: q for q in stats(planned(model), {"B": B, "T": T}).quantities}
    params, forward, training = _measure(spec, {})
    assert (s["parameters"].value, s["flops_forward"].value * B * T) == (params, forward)
    assert s["flops_training"].value * B * T == training
    # per layer 3 products of 2 D^2 (forward, and two gradients), one less in layer 0; the unused
    # `h = x @ u` counts in the forward only, as nothing takes its gradient: 2 D^2 + 2 D^2 + 6 (n - 1) D^2
    text = snf.stats.formula(stats(planned(model), {"T": T}), s["flops_training"])
    assert text == "6*n_layer*D^2"


LAYER_BRANCHES = textwrap.dedent("""\
    param:
      D : int = 8
      n_layer : int = 5
      n_dense : int = 2
    input:
      x : Tensor([B, T, D], float32)
    parameter:
      W : Tensor([n_layer, D, D], float32)
      V : Tensor([n_layer, 4 * D, D], float32)
      U : Tensor([n_layer, D, 4 * D], float32)
    output:
      y : Tensor([B, T, D], float32)
    let y = x
    for l in 0..n_layer-1:
        if l < n_dense:
            y = linear(y, weight=W[l])
        else:
            y = y + linear(gelu(linear(y, weight=V[l])), weight=U[l])
        if l % 2 == 0:
            y = layer_norm(y)
        y = linear(y, weight=W[l]) if l == 0 else y
    """)

COMPUTED_INT = textwrap.dedent("""\
    param:
      D : int = 8
      frac : float = 0.75
      E = int(D * frac)
    input:
      x : Tensor([B, T, D], float32)
    parameter:
      W : Tensor([E, D], float32)
      U : Tensor([D, E], float32)
    output:
      y : Tensor([B, T, D], float32)
    let y = x + linear(relu(linear(x, weight=W)), weight=U)
    """)


@pytest.mark.parametrize("text, cfg", [(LAYER_BRANCHES, {}), (LAYER_BRANCHES, {"n_dense": 4}),
                                       (LAYER_BRANCHES, {"n_layer": 1}), (COMPUTED_INT, {}),
                                       (COMPUTED_INT, {"frac": 0.5})])
def test_branches_on_the_layer_and_computed_ints_count_as_the_module_runs(tmp_path, text, cfg):
    """A loop whose body branches on the layer (`if l < n_dense`, `l % 2 == 0`, `l == 0`) counts
    each layer's branch; a computed int (`E = int(D * frac)`) sizes what it sizes. Both were
    internal errors (KeyError) before."""
    spec = write_spec(tmp_path, text)
    model = _model_ir(spec)
    s = {q.key: q.value for q in stats(planned(model), {**cfg, "B": B, "T": T}).quantities}
    params, forward, training = _measure(spec, cfg)
    assert s["parameters"] == params
    assert s["flops_forward"] * B * T == forward
    assert s["flops_training"] * B * T == training
    rc, out, err = snfc("stats", str(spec), "--set", "T=4", *[f"--set={k}={v}" for k, v in cfg.items()])
    assert rc == 0, err


def test_a_loop_counted_by_layer_has_a_limit(tmp_path):
    spec = write_spec(tmp_path, LAYER_BRANCHES)
    rc, out, err = snfc("stats", str(spec), "--set", "T=4", "--set", "n_layer=200000")
    assert rc == 1 and "count its layers one by one, up to 100,000" in err, err


@pytest.mark.parametrize("spec", SPECS + ["branches", "computed"], ids=[p.stem for p in SPECS] + ["branches", "computed"])
def test_activation_bytes_are_what_the_interpreter_produces(spec, tmp_path):
    """Every tensor an op returns in a run of the NumPy reference interpreter, views excepted, and
    without what only the cache outputs need (a training forward does not build them)."""
    if spec in ("branches", "computed"):
        spec = write_spec(tmp_path, LAYER_BRANCHES if spec == "branches" else COMPUTED_INT)
    model = _model_ir(spec)
    cfg = _small(model)
    predicted = {q.key: q.value for q in stats(planned(model), {**cfg, **_sizes(model)}).quantities}["activation_bytes"]
    views = {name for name, op in all_ops().items() if op.view}
    # the interpreter runs the spec as written, before the passes: its statements, planned for it
    cache_only = plan_outputs(model, plan_caches(model).outputs).only_for("use_cache")

    class Counting(Interpreter):
        produced = 0

        def block(self, stmts, env):
            super().block([s for s in stmts if s not in cache_only], env)

        def eval(self, e, env):
            value = super().eval(e, env)
            if isinstance(e, ir.Op) and isinstance(e.ty, ir.TensorT) and e.op not in views:
                Counting.produced += np.size(value) * DTYPE_BYTES[e.ty.dtype]
            return value

    rng = np.random.default_rng(0)
    params = {t.name: rng.normal(size=[d.evaluate(_ints(model, cfg)) for d in t.ty.shape]) * 0.1
              for t in model.params + model.buffers}
    feeds = {k: v.numpy() for k, v in _feeds(model, cfg).items()}
    Counting(model, cfg).run(params, feeds)
    assert predicted * B * T == Counting.produced


def _ints(model: ir.Model, cfg: dict) -> dict:
    return Interpreter(model, cfg).ints  # the fields' and the computed ints


# ------------------------------------------------------------------------------ the command

def test_golden_nanogpt():
    rc, out, err = snfc("stats", "specs/nanogpt.snf")
    assert rc == 0, err
    assert_golden("stats_nanogpt.txt", out)
    shown = (REPO / "docs" / "stats.md").read_text().split("<!-- output -->\n```text\n")[1].split("```")[0]
    assert shown == out  # docs/stats.md shows it


def test_golden_mixtral():
    """A mixture of experts: active parameters and the every-expert (dense) FLOPs beside the totals."""
    rc, out, err = snfc("stats", "specs/mixtral.snf")
    assert rc == 0, err
    assert_golden("stats_mixtral.txt", out)
    assert "active parameters (top-k experts)               12,879,925,248" in out  # Mixtral 8x7B: 12.9 G of 46.7 G


def test_json_has_formulas_and_numbers():
    rc, out, _ = snfc("stats", "specs/nanogpt.snf", "--set", "n_layer=2", "--set", "T=64", "--format", "json")
    assert rc == 0
    doc = json.loads(out)
    assert doc["config"]["n_layer"] == 2 and doc["dims"]["T"] == {"value": 64, "why": "--set"}
    assert doc["per_token"] == ["B", "T"]
    p = doc["stats"]["parameters"]
    assert p["formula"] == "n_layer*(12*D^2 + 13*D) + block_size*D + D*vocab_size + 2*D"
    assert p["value"] == 2 * (12 * 768**2 + 13 * 768) + 1024 * 768 + 768 * 50257 + 2 * 768  # the head is wte (tied)
    f = doc["stats"]["flops_forward"]
    assert f["formula"] == "n_layer*(4*T*D + 24*D^2) + 2*D*vocab_size"
    assert f["value"] == 2 * (4 * 64 * 768 + 24 * 768**2) + 2 * 768 * 50257


@pytest.mark.parametrize("args, message", [
    (["--set", "n_embd=10", "--set", "n_head=3"], "D must be divisible by H"),
    (["--set", "n_layr=2"], "has no config field or run-time dim `n_layr`"),
    (["--set", "n_layer=two"], "`n_layer` is an int"),
    (["--set", "bias=yes"], "`bias` is a bool"),
    (["--set", "n_layer"], "--set takes name=value"),
    (["--set", "T=2048"], "requires T_total <= block_size (line 66); got T=2048, T_past=0, block_size=1024"),
    (["--set", "T=1024"], None),
    (["--set", "n_embd=-8", "--set", "n_head=1"], "`n_embd` is a size: it must not be negative"),
])
def test_bad_settings_exit_1_with_a_message(args, message):
    rc, out, err = snfc("stats", "specs/nanogpt.snf", *args)
    if message is None:
        assert rc == 0 and "T = 1024 (--set)" in out
    else:
        assert rc == 1 and message in err and "bug in snfc" not in err, err


def test_a_bad_or_missing_spec_exits_1(tmp_path):
    bad = write_spec(tmp_path, "param:\n  D : int = 4\n\nlet y = x\n")
    assert snfc("stats", str(bad))[0] == 1
    assert snfc("stats", str(tmp_path / "missing.snf"))[0] == 1


def test_an_unbounded_sequence_needs_set(tmp_path):
    spec = write_spec(tmp_path, LAYERS_ON_A_RAW_INPUT)
    rc, _, err = snfc("stats", str(spec))
    assert rc == 1 and "does not bound the run-time dim `T`: give its value with --set T=N" in err
    assert snfc("stats", str(spec), "--set", "T=4")[0] == 0


def test_stats_never_imports_torch():
    p = python_subprocess("import sys, snf.cli\n"
                          "assert snf.cli.main(['stats', 'specs/nanogpt.snf']) == 0\n"
                          "assert 'torch' not in sys.modules\n")
    assert p.returncode == 0, p.stderr


def test_every_dtype_has_a_size():
    from snf.language import DTYPES
    assert set(DTYPE_BYTES) == set(DTYPES)


def test_parse_overrides_types():
    model = _model_ir(REPO / "specs" / "nanogpt.snf")
    assert parse_overrides(model, ["bias=False", "dropout=0.5", "T=7"]) == {"bias": False, "dropout": 0.5, "T": 7}
    with pytest.raises(StatsError):
        parse_overrides(model, ["dropout=lots"])


NO_DEFAULT = textwrap.dedent("""\
    param:
      D : int
      V : int = 10

    input:
      x : Tensor([D], float32)

    parameter:
      w : Tensor([V, D], float32)

    output:
      y : Tensor([V], float32)

    let y = linear(x, weight=w)
    """)


def test_a_field_without_default_needs_set_and_no_run_time_axes_is_per_call(tmp_path):
    spec = str(write_spec(tmp_path, NO_DEFAULT))
    rc, _, err = snfc("stats", spec)
    assert rc == 1 and "config field `D` has no default: give it with --set D=..." in err
    rc, out, _ = snfc("stats", spec, "--set", "D=4")
    assert rc == 0 and "per call: the first input has no run-time axes" in out
    assert "FLOPs per call, forward             80 FLOPs" in out  # one x @ W.T, [10, 4]
