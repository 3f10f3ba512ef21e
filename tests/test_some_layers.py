"""Tensors that exist on some layers only (`name[l] : Tensor([n_layer, ...]) if cond else None`,
docs/language.md 2.3 and 4.4): the Blocks hold them where the condition holds, and the module,
the NumPy interpreter, snf.interop and snfc stats agree on which layers those are."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import snf
from snf.compiler import analyze, planned
from snf.interop import CheckpointError, load_checkpoint, load_state_dict, save_checkpoint, spec_state
from snf.interpret import interpret
from snf.source import Source

SPEC = """\
parameter:
  w : Tensor([n_layer, D, D], float32)
  up[i] : Tensor([n_layer, F, D], float32) if i % step == step - 1 else None
  down[i] : Tensor([n_layer, D, F], float32) if i % step == step - 1 else None
  dense[i] : Tensor([n_layer, D, D], float32) if i % step != step - 1 else None
param:
  n_layer : int = 5
  step : int = 2
  F : int = 16
  D : int = 8
output:
  y : Tensor([B, T, D], float32)
input:
  x_in : Tensor([B, T, D], float32)

let y = x_in
for l in 0..n_layer-1:
    y = y + linear(y, weight=w[l])
    if l % step == step - 1:
        y = y + linear(relu(linear(y, weight=up[l])), weight=down[l])
    else:
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


@pytest.mark.parametrize("cfg", [{}, {"step": 1}, {"step": 3, "n_layer": 7}, {"n_layer": 1}, {"n_layer": 0}])
def test_the_layers_that_have_it(tmp_path, cfg):
    _, model, m = _model(tmp_path, **cfg)
    n_layer, step = cfg.get("n_layer", 5), cfg.get("step", 2)
    sparse = [i for i in range(n_layer) if i % step == step - 1]
    keys = model.state_dict()
    assert [i for i in range(n_layer) if f"layers.{i}.up.weight" in keys] == sparse  # an nn.Linear or None
    assert [i for i in range(n_layer) if f"layers.{i}.dense.weight" in keys] == [i for i in range(n_layer) if i not in sparse]
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
    tol = 1e-9 if n_layer else 1e-6  # no layers, no tensor: .double() leaves the model float32
    assert np.abs(got - want).max() <= tol
    y = x.numpy()  # written out layer by layer
    for l in range(n_layer):
        y = y + y @ params["w"][l].T
        if l in sparse:
            i = sparse.index(l)
            y = y + np.maximum(y @ params["up"][i].T, 0) @ params["down"][i].T
        else:
            y = y + y @ params["dense"][[j for j in range(n_layer) if j not in sparse].index(l)].T
    assert np.abs(got - y).max() <= tol
    # the spec's own names round trip, and a fresh model takes them
    other = type(model)(model.config).double()
    load_state_dict(other, {k: v.clone() for k, v in state.items()})
    assert all(torch.equal(a, b) for a, b in zip(other.state_dict().values(), model.state_dict().values()))


def test_no_layers_save_and_load(tmp_path):
    """With no layers, a tensor of every layer is [0, ...] (its shape from `spec_parameters`), and one
    of some layers is absent, as no layer has it: a checkpoint of that saves and loads."""
    _, model, _ = _model(tmp_path, n_layer=0)
    state = spec_state(model)
    assert {k: tuple(v.shape) for k, v in state.items()} == {"w": (0, 8, 8)}
    back = load_checkpoint(type(model)(model.config), save_checkpoint(model, tmp_path / "none.safetensors"))
    assert {k: tuple(v.shape) for k, v in spec_state(back).items()} == {"w": (0, 8, 8)}
    with pytest.raises(CheckpointError, match="unexpected keys: up"):  # no layer has it
        load_state_dict(back, {**state, "up": torch.zeros(0, 16, 8)})


def test_stats_count_the_layers_that_have_it(tmp_path):
    from snf.stats import stats
    path, _, m = _model(tmp_path)
    for step, layers in ((2, 2), (1, 5), (7, 0)):  # of 5 layers: 1 and 3; all; none
        got = {q.key: q for q in stats(planned(m), {"step": step, "T": 4, "B": 1}).quantities}["parameters"]
        assert got.value == 5 * 8 * 8 + layers * 2 * 16 * 8 + (5 - layers) * 8 * 8


@pytest.mark.parametrize("overrides", [{}, {"num_hidden_layers": 4, "decoder_sparse_step": 3},
                                       {"num_hidden_layers": 4, "decoder_sparse_step": 2, "mlp_only_layers": [0, 3]}],
                         ids=["step2", "step3", "step2-mlp-only"])
def test_qwen2_moe_layers_hold_their_kind_of_weights(tmp_path, overrides):
    """Qwen2-MoE's dense and sparse layers (decoder_sparse_step, and mlp_only_layers made dense): each
    layer holds its kind's weights only, as transformers' checkpoint does (its values against
    transformers: tests/test_moe.py, tests/test_from_pretrained_families.py)."""
    pytest.importorskip("transformers")
    from tests.test_from_pretrained import saved
    hf, folder = saved(tmp_path, "qwen2_moe", **overrides)
    model = snf.from_pretrained(folder)
    step, keys, theirs = model.config.sparse_step, model.state_dict(), hf.state_dict()
    for i in range(model.config.n_layer):
        sparse = (i + 1) % step == 0 and i not in overrides.get("mlp_only_layers", [])
        assert (f"layers.{i}.router.weight" in keys) == sparse == (f"model.layers.{i}.mlp.gate.weight" in theirs)
        assert (f"layers.{i}.gate.weight" in keys) != sparse
        assert (f"model.layers.{i}.mlp.gate_proj.weight" in theirs) != sparse


KEYS = """\
parameter:
  experts : Tensor([n_layer, n_expert, D, D], float32)
  w : Tensor([n_layer, D, D], float32)
  u : Tensor([n_layer, D, D], float32)
output:
  y : Tensor([B, D], float32)
input:
  x : Tensor([B, D], float32)
param:
  n_expert : int = 2
  n_layer : int = 3
  n_dense : int = 1
  D : int = 4

let h = x
for l in 0..n_layer-1:
    h = h + linear(h, weight=w[l]) + linear(h, weight=u[l]) + linear(h, weight=experts[l][0])
    h = h + linear(h, weight=experts[l][1])
let y = h

checkpoint hf:
  w[l] <- "h.{2*l}.w"
  u[l] <- "h.{l + n_dense}.u".T
  experts[l, e] <- "h.{2*l + 1}.experts.{n_expert - 1 - e}.w"
"""


@pytest.mark.parametrize("cfg", [{}, {"n_dense": 3, "n_layer": 2}])
def test_checkpoint_keys_compute_the_layer_number(tmp_path, cfg):
    """`{2*l}`, `{l + n_dense}` (a config int) and `{n_expert - 1 - e}` in keys (docs/language.md 7):
    loaded, and written back by save_pretrained's inverse, for the config's values."""
    from snf.pretrained import hf_state_dict
    path = tmp_path / "keys.snf"
    path.write_text(KEYS, encoding="utf-8")
    model = snf.load(path).Model(**cfg)
    n_layer, n_dense = cfg.get("n_layer", 3), cfg.get("n_dense", 1)
    g = torch.Generator().manual_seed(1)
    sd = {}
    for l in range(n_layer):
        sd[f"h.{2 * l}.w"] = torch.randn(4, 4, generator=g)
        sd[f"h.{l + n_dense}.u"] = torch.randn(4, 4, generator=g)
        for e in range(2):
            sd[f"h.{2 * l + 1}.experts.{1 - e}.w"] = torch.randn(4, 4, generator=g)
    load_state_dict(model, sd, "hf")
    state = spec_state(model)
    for l in range(n_layer):
        assert torch.equal(state["w"][l], sd[f"h.{2 * l}.w"])
        assert torch.equal(state["u"][l], sd[f"h.{l + n_dense}.u"].T)
        assert torch.equal(state["experts"][l, 0], sd[f"h.{2 * l + 1}.experts.1.w"])
    back = hf_state_dict(model)
    assert sorted(back) == sorted(sd) and all(torch.equal(back[k], sd[k]) for k in sd)


NONE_ACCEPTING = """\
param:
  n_layer : int = 4
  D : int = 8
input:
  x_in : Tensor([B, T, D], float32)
parameter:
  w : Tensor([n_layer, D, D], float32)
  b[i] : Tensor([n_layer, D], float32) if i % 2 == 1 else None
  g[i] : Tensor([n_layer, D], float32) if i > 0 else None
output:
  y : Tensor([B, T, D], float32)
let y = x_in
for l in 0..n_layer-1:
    y = y + linear(y, weight=w[l], bias=b[l])
    y = layer_norm(y, weight=g[l])
"""


def test_arguments_that_take_none_need_no_guard(tmp_path):
    """`bias=b[l]` and a norm's `weight=g[l]` take None on the layers without the tensor (docs/language.md
    5.6); a bias of some layers lives in the layer's nn.Linear there only."""
    path = tmp_path / "none.snf"
    path.write_text(NONE_ACCEPTING, encoding="utf-8")
    model = snf.load(path).Model().double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(p.numel())))
    keys = model.state_dict()
    assert [i for i in range(4) if f"layers.{i}.w.bias" in keys] == [1, 3]
    assert [i for i in range(4) if f"layers.{i}.g" in keys] == [1, 2, 3]
    x = torch.randn(2, 3, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        got = model(x_in=x).numpy()
    m = analyze(Source.read(path)).model
    want = interpret(m, {k: v.numpy() for k, v in spec_state(model).items()}, {"x_in": x.numpy()})["y"]
    assert np.abs(got - want).max() <= 1e-9


def test_a_divisor_in_the_layer_condition_is_checked_by_config(tmp_path):
    """`b[i] : ... if i % step == 1`: Block.__init__ computes it, so Config refuses step = 0 (a
    ValueError naming the line, as for a divisor in the body), never a ZeroDivisionError."""
    path = tmp_path / "divisor.snf"
    path.write_text(NONE_ACCEPTING.replace("  D : int = 8\n", "  D : int = 8\n  step : int = 2\n")
                    .replace("i % 2 == 1", "i % step == 1"), encoding="utf-8")
    mod = snf.load(path)
    with pytest.raises(ValueError, match="the divisor step must be at least 1"):
        mod.Config(step=0)
    assert [i for i in range(4) if f"layers.{i}.w.bias" in mod.Model(step=3).state_dict()] == [1]
