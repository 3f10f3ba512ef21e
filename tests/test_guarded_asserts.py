"""An `assert` (and any shape condition) is checked exactly where its statement runs: under the
ifs around it (an optional input given, a config flag, its `else`, a comparison of config values,
a test of a run-time size, nested ifs, a loop's body), and a default config that breaks one is a
located `check` error. Each spec runs as a generated module (eagerly) and through the NumPy
interpreter (`snf.interpret`, which runs the statements and checks the Config as the module does);
the table says, for each call, whether the statement's condition fails where it runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import snf
from snf.compiler import analyze
from snf.diagnostics import render_text
from snf.interpret import ConfigError, interpret
from snf.source import Source

HEAD = """\
param:
  D : int = 4
  short : bool = False
  n_extra : int = 0

input:
  x : Tensor([B, T, D], float32)
  past : Tensor([B, T_past, D], float32)?

parameter:
  W : Tensor([D, D], float32)

output:
  y : Tensor([B, T, D], float32)

let y = x @ W
"""

# each body: the calls it gets, as (config changes, T, T_past or None, whether it fails)
SPECS = {
    "optional input": ("""\
if past exists:
    assert 1 <= T_past
    assert T_past <= 3
    y = y + sum(past, axis=1, keepdim=True)
else:
    assert T <= 5
""", [({}, 3, None, False), ({}, 6, None, True), ({}, 6, 2, False), ({}, 3, 0, True), ({}, 3, 1, False),
      ({}, 3, 4, True)]),
    "config flag and its else": ("""\
if short:
    assert D <= 2
    y = y * 2.0
else:
    assert 2 <= D
""", [({}, 3, None, False), ({"short": True}, 3, None, True), ({"short": True, "D": 2}, 3, None, False),
      ({"D": 1}, 3, None, True), ({"short": True, "D": 1}, 3, None, False)]),
    "comparison of config values": ("""\
if n_extra > 0:
    assert n_extra <= D
    y = y + 1.0
""", [({}, 3, None, False), ({"n_extra": 3}, 3, None, False), ({"n_extra": 5}, 3, None, True),
      ({"n_extra": 5, "D": 6}, 3, None, False)]),
    "run-time size under a flag": ("""\
if short:
    assert T <= 2
    y = y * 3.0
""", [({}, 5, None, False), ({"short": True}, 5, None, True), ({"short": True}, 2, None, False)]),
    "test of a run-time size": ("""\
if T > 1:
    assert T <= 6
""", [({}, 1, None, False), ({}, 6, None, False), ({}, 7, None, True)]),
    "nested: a flag, then an optional input": ("""\
if short:
    if past exists:
        assert T_past <= 1
        y = y + sum(past, axis=1, keepdim=True)
""", [({}, 3, 4, False), ({"short": True}, 3, None, False), ({"short": True}, 3, 4, True),
      ({"short": True}, 3, 1, False)]),
    "a flag in a loop's body": ("""\
for l in 0..1:
    if short:
        assert T + l <= 3
    y = y * 1.5
""", [({}, 9, None, False), ({"short": True}, 2, None, False), ({"short": True}, 3, None, True)]),
}


def _load(tmp_path, body: str):
    path = tmp_path / "guarded.snf"
    path.write_text(HEAD + body)
    result = analyze(Source.read(path))
    assert result.ok, result.diagnostics
    return snf.load(path), result.model


@pytest.mark.parametrize("name", SPECS)
def test_each_check_binds_where_its_statement_runs(name, tmp_path):
    body, calls = SPECS[name]
    module, checked = _load(tmp_path, body)
    g = torch.Generator().manual_seed(0)
    for changes, T, T_past, fails in calls:
        config = {"D": 4, "short": False, "n_extra": 0, **changes}
        x = torch.randn(2, T, config["D"], generator=g)
        past = None if T_past is None else torch.randn(2, T_past, config["D"], generator=g)
        what = f"{name}: config {changes}, T = {T}, T_past = {T_past}"
        try:
            model = module.Model(module.Config(**config)).eval()
            with torch.no_grad():
                got = model(x, past).numpy()  # (one output: the tensor itself)
        except ValueError:
            assert fails, f"{what}: the module refused a call whose conditions hold where they run"
            continue
        assert not fails, f"{what}: the module ran a call whose condition fails where it runs"
        params = {"W": model.W.detach().numpy()}
        inputs = {"x": x.numpy(), **({} if past is None else {"past": past.numpy()})}
        want = interpret(checked, params, inputs, config)["y"]
        assert np.allclose(got, want, rtol=1e-5, atol=1e-5), what


@pytest.mark.parametrize("changes, refused", [({}, False), ({"short": True}, True), ({"short": True, "D": 2}, False)])
def test_a_config_check_under_a_flag_binds_in_config_and_in_the_interpreter(changes, refused, tmp_path):
    """Config and the interpreter's Config checks agree: each refuses exactly when the flag's
    statement runs and its assertion fails."""
    module, checked = _load(tmp_path, SPECS["config flag and its else"][0])
    config = {"D": 4, "short": False, "n_extra": 0, **changes}
    outcomes = []
    for build in (lambda: module.Config(**config), lambda: interpret(checked, {"W": np.zeros((config["D"],) * 2)},
                                                                       {"x": np.zeros((1, 1, config["D"]))}, config)):
        try:
            build()
            outcomes.append(False)
        except (ValueError, ConfigError) as err:
            assert "D <= 2" in str(err) and "guarded.snf:18" in str(err)
            outcomes.append(True)
    assert outcomes == [refused, refused]


@pytest.mark.parametrize("body, error", [
    ("assert D <= 2\n", "guarded.snf:17:1: error: this assertion is false with the default config (D <= 2 with D = 4)"),
    ("assert n_extra + 1 <= D - 4\n", "this assertion is false with the default config (n_extra + 1 <= D - 4 with "
                                     "D = 4, n_extra = 0)"),
    ("if past exists:\n    assert D <= 3\n", "guarded.snf:18:5: error: this assertion is false with the default "
                                              "config (D <= 3 with D = 4)"),
    ("if not short:\n    assert D <= 3\n", "guarded.snf:18:5: error: this assertion is false"),
    ("assert D + 1 <= D\n", "this assertion is always false (D + 1 <= D)"),
    ("if not short:\n    let z = reshape(x, [B, T, 3, D // 3])\n", "D must be divisible by 3, but with the default config"),
])
def test_a_default_config_that_breaks_an_assertion_is_a_check_error(body, error, tmp_path):
    path = tmp_path / "guarded.snf"
    path.write_text(HEAD + body)
    source = Source.read(path)
    result = analyze(source)
    assert not result.ok
    assert error in render_text(result.diagnostics, {source.path: source})


@pytest.mark.parametrize("body", [
    "if short:\n    assert D <= 2\n",  # the flag is off by default: the assertion never runs there
    "if short:\n    assert T <= 2\n",
    "if n_extra > 0:\n    assert D <= n_extra\n",
    "if short:\n    let z = reshape(x, [B, T, 3, D // 3])\n    y = y + sum(z, axis=3)[:, :, 0:1]\n",
])
def test_an_assertion_whose_statement_does_not_run_at_the_defaults_passes(body, tmp_path):
    path = tmp_path / "guarded.snf"
    path.write_text(HEAD + body)
    result = analyze(Source.read(path))
    assert result.ok, result.diagnostics
    module = snf.load(path)
    module.Config()  # builds at its defaults


def test_a_config_value_that_sizes_nothing_keeps_its_assertion(tmp_path):
    """`assert 0 <= n_extra` is not proved by taking every dim to be >= 0: n_extra sizes nothing,
    so nothing else checks that."""
    module, checked = _load(tmp_path, "assert 0 <= n_extra\n")
    with pytest.raises(ValueError, match="0 <= n_extra"):
        module.Config(n_extra=-1)
    assert any(c.text() == "0 <= n_extra" for c in checked.checks)


def test_no_bundled_spec_checks_under_a_condition_its_statement_lacks():
    """The specs' checks under conditions are the ones their statements run under (a spot check of
    the generated code): BERT's token type row only without token_type_ids, Qwen3's window only
    with a sliding window."""
    from conftest import REPO
    bert = (REPO / "generated" / "bert.py").read_text()
    assert "        if token_type_ids is None:\n            _check_dims('1', 1, '<=', 'type_vocab_size'" in bert
    qwen3 = (REPO / "generated" / "qwen3.py").read_text()
    assert "(lambda c: 1 <= c.sliding_window if c.use_sliding_window else True," in qwen3
