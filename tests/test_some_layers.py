"""Tensors that exist on some layers only (`name[l] : Tensor([n_layer, ...]) if cond else None`,
docs/language.md 2.3 and 4.4): the Blocks hold them where the condition holds, and the module,
the NumPy interpreter, snf.interop and snfc stats agree on which layers those are."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import snf
from snf.compiler import analyze
from snf.interop import load_state_dict, spec_state
from snf.interpret import interpret
from snf.source import Source

SPEC = """\
param:
  n_layer : int = 5
  step : int = 2
  D : int = 8
  F : int = 16

input:
  x_in : Tensor([B, T, D], float32)

parameter:
  w : Tensor([n_layer, D, D], float32)
  up[i] : Tensor([n_layer, F, D], float32) if i % step == step - 1 else None
  down[i] : Tensor([n_layer, D, F], float32) if i % step == step - 1 else None
  dense[i] : Tensor([n_layer, D, D], float32) if i % step != step - 1 else None

output:
  y : Tensor([B, T, D], float32)

let y = x_in
for l in 0..n_layer-1:
    y = y + linear(y, weight=w[l])
    if l % step == step - 1:
        y = y + linear(relu(linear(y, weight=up[l])), weight=down[l])
    if l % step != step - 1:
        y = y + linear(y, weight=dense[l])
"""


def _model(tmp_path, **cfg):
    path = tmp_path / "some_layers.snf"
    path.write_text(SPEC, encoding="utf-8")
    model = snf.load(path).Model(**cfg).double().eval()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.3)
    result = analyze(Source.read(path))
    assert result.ok, result.diagnostics
    return path, model, result.model


@pytest.mark.parametrize("cfg", [{}, {"step": 1}, {"step": 3, "n_layer": 7}, {"n_layer": 1}])
def test_the_layers_that_have_it(tmp_path, cfg):
    _, model, m = _model(tmp_path, **cfg)
    n_layer, step = cfg.get("n_layer", 5), cfg.get("step", 2)
    sparse = [i for i in range(n_layer) if i % step == step - 1]
    keys = model.state_dict()
    assert [i for i in range(n_layer) if f"layers.{i}.up" in keys] == sparse
    assert [i for i in range(n_layer) if f"layers.{i}.dense" in keys] == [i for i in range(n_layer) if i not in sparse]
    assert all((model.layers[i].up is None) == (i not in sparse) for i in range(n_layer))
    state = spec_state(model)
    if sparse:
        assert tuple(state["up"].shape) == (len(sparse), 16, 8)  # the layers that have it, stacked
    else:
        assert "up" not in state
    x = torch.randn(2, 3, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        got = model(x_in=x).numpy()
    params = {k: v.numpy() for k, v in state.items()}
    want = interpret(m, params, {"x_in": x.numpy()}, cfg)["y"]
    assert np.abs(got - want).max() <= 1e-9
    y = x.numpy()  # written out layer by layer
    for l in range(n_layer):
        y = y + y @ params["w"][l].T
        if l in sparse:
            i = sparse.index(l)
            y = y + np.maximum(y @ params["up"][i].T, 0) @ params["down"][i].T
        else:
            y = y + y @ params["dense"][[j for j in range(n_layer) if j not in sparse].index(l)].T
    assert np.abs(got - y).max() <= 1e-9
    # the spec's own names round trip, and a fresh model takes them
    other = type(model)(model.config).double()
    load_state_dict(other, {k: v.clone() for k, v in state.items()})
    assert all(torch.equal(a, b) for a, b in zip(other.state_dict().values(), model.state_dict().values()))
