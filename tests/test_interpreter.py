"""The NumPy float64 interpreter (snf.interpret) against generated modules, run in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import snf
from conftest import REPO
from snf.compiler import analyze
from snf.interop import spec_state
from snf.interpret import interpret
from snf.source import Source


def checked_ir(path):
    result = analyze(Source.read(path))
    assert result.ok, result.diagnostics
    return result.model


def randomise(model: torch.nn.Module, seed: int) -> None:
    """Random values for every parameter, so zero-initialised ones (biases, zeros) matter too."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.3)


def params_of(model) -> dict:
    return {k: v.detach().numpy() for k, v in spec_state(model).items()}


def max_diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))))


@pytest.mark.parametrize("bias", [True, False])
def test_nanogpt_matches_the_interpreter(bias):
    import generated.nanogpt as ng
    config = dict(vocab_size=23, block_size=8, n_layer=2, n_head=3, n_embd=12, bias=bias)
    model = ng.Model(**config).double().eval()
    randomise(model, seed=int(bias))
    params = params_of(model)
    assert ("ln1_bias" in params) == bias and params["attn_q_weight"].shape == (2, 12, 12)
    idx = torch.randint(0, 23, (2, 7), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        got = model(idx).logits.numpy()
    want = interpret(checked_ir(REPO / "specs" / "nanogpt.snf"), params, {"idx": idx.numpy()}, config)["logits"]
    assert want.dtype == np.float64 and want.shape == (2, 7, 23)
    assert np.abs(want).max() > 0.1
    assert max_diff(got, want) <= 1e-5


def test_interpreter_detects_a_wrong_parameter():
    """The comparison above can fail: perturb one layer's value weight and it does."""
    import generated.nanogpt as ng
    config = dict(vocab_size=23, block_size=8, n_layer=2, n_head=3, n_embd=12)
    model = ng.Model(**config).double().eval()
    randomise(model, seed=7)
    params = params_of(model)
    params["attn_v_weight"] = params["attn_v_weight"].copy()
    params["attn_v_weight"][1, 0, 0] += 0.5
    idx = torch.randint(0, 23, (1, 5), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        got = model(idx).logits.numpy()
    want = interpret(checked_ir(REPO / "specs" / "nanogpt.snf"), params, {"idx": idx.numpy()}, config)["logits"]
    assert max_diff(got, want) > 1e-3


@pytest.mark.parametrize("use_bias", [True, False])
@pytest.mark.parametrize("with_extra", [True, False])
def test_tiny_mlp_spec(use_bias, with_extra):
    path = REPO / "tests" / "specs" / "tiny_mlp.snf"
    mod = snf.load(path)
    model = mod.Model(use_bias=use_bias).double().eval()
    randomise(model, seed=11)
    idx = torch.randint(0, 11, (3, 4), generator=torch.Generator().manual_seed(0))
    inputs = {"idx": idx}
    if with_extra:
        inputs["extra"] = torch.randn(3, 4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = model(**inputs).numpy()
    want = interpret(checked_ir(path), params_of(model), {k: v.numpy() for k, v in inputs.items()},
                     {"use_bias": use_bias})["logits"]
    assert max_diff(got, want) <= 1e-5


@pytest.mark.parametrize("with_past", [True, False])
def test_cached_attention_spec(with_past):
    path = REPO / "tests" / "specs" / "cached_attn.snf"
    mod = snf.load(path)
    model = mod.Model().double().eval()
    randomise(model, seed=2)
    g = torch.Generator().manual_seed(3)
    inputs = {"x": torch.randn(2, 5, 8, dtype=torch.float64, generator=g)}
    if with_past:
        inputs["past_k"] = torch.randn(2, 3, 2, 4, dtype=torch.float64, generator=g)
    with torch.no_grad():
        out = model(**inputs)
    want = interpret(checked_ir(path), params_of(model), {k: v.numpy() for k, v in inputs.items()})
    assert out.keys.shape == (2, 8 if with_past else 5, 2, 4)
    assert max_diff(out.y.numpy(), want["y"]) <= 1e-5
    assert max_diff(out.keys.numpy(), want["keys"]) <= 1e-5
    assert "pos_table" in params_of(model)  # buffers are passed by their spec names too


LAYER_CONDITIONS = """\
param:
  n_layer : int = 5
  n_dense : int = 2
  D : int = 8
input:
  x : Tensor([B, D], float32)
parameter:
  w : Tensor([n_layer, D, D], float32)
  pos : Tensor([n_layer + 1, D], float32)
output:
  y : Tensor([B, D], float32)
let y = x
for l in 0..n_layer-1:
    if l < n_dense:                      # the first layers dense, the rest residual
        y = linear(y, weight=w[l])
    else:
        y = y + linear(y, weight=w[l])
    if l % 2 == 0 and l > 0:             # every other layer (Gemma 2's alternation), not the first
        y = y * 0.5
    y = y + pos[l + 1, :] if l * l >= 4 else y
"""


@pytest.mark.parametrize("cfg", [{}, {"n_dense": 0}, {"n_layer": 1}], ids=["defaults", "no dense", "one layer"])
def test_conditions_on_the_layer_variable(tmp_path, cfg):
    """`if l < n_dense:`, `if l % 2 == 0:` and a conditional value on `l` (docs/language.md 6): each
    layer takes its own branch, in the generated module and in the interpreter alike."""
    path = tmp_path / "layers.snf"
    path.write_text(LAYER_CONDITIONS, encoding="utf-8")
    model = snf.load(path).Model(**cfg).double().eval()
    randomise(model, seed=5)
    x = torch.randn(3, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        got = model(x=x).numpy()
    params = params_of(model)
    want = interpret(checked_ir(path), params, {"x": x.numpy()}, cfg)["y"]
    assert max_diff(got, want) <= 1e-9
    y = x.numpy()  # the same, written out layer by layer
    n_layer, n_dense = cfg.get("n_layer", 5), cfg.get("n_dense", 2)
    for l in range(n_layer):
        h = y @ params["w"][l].T
        y = h if l < n_dense else y + h
        y = y * 0.5 if l % 2 == 0 and l > 0 else y
        y = y + params["pos"][l + 1] if l * l >= 4 else y
    assert max_diff(got, y) <= 1e-9
