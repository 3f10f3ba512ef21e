"""The checker's type rules of issue 10, from the accepting side: what they type exactly, and the
run-time checks they leave to the module, with the messages those checks give.

The rejecting side is the error corpus (tests/errors/*.snf); every finding's own spec is in
tests/property/soundness_findings.py, and the property test (tests/property) checks the rules at large.
"""

from __future__ import annotations

import pytest
import torch

import runner  # tests/property/runner.py: runs a spec against the interpreter
from snf.compiler import analyze
from snf.source import Source


def checked(text: str):
    result = analyze(Source.from_bytes("rules.snf", text.encode("utf-8")))
    assert result.ok, [d.message for d in result.diagnostics if d.severity == "error"]
    return result


def module(text: str):
    return runner.load_module(checked(text), "rules")


def output_type(text: str, name: str):
    o = next(o for o in checked(text).model.outputs if o.name == name)
    return str(list(map(str, o.ty.shape))), o.ty.dtype


def runs(text: str, **domains) -> runner.Outcome:
    """Accepted, and the module agrees with the interpreter in every run (runner.py)."""
    from specgen import Spec
    out = None
    for seed in range(3):
        out = runner.run(text, Spec(text, domains, {}, frozenset()), seed)
    assert out.accepted
    return out


SLICES = """
param:
  D : int = 4
input:
  x : Tensor([B, T, D], float32)
output:
  last2 : Tensor([B, 2, D], float32)
  head : Tensor([B, T - 1, D], float32)
  mid : Tensor([B, T - 2, D], float32)
let last2 = x[:, -2:, :]
let head = x[:, 0:-1, :]
let mid = x[:, 1:T - 1]
"""


def test_negative_and_symbolic_slice_bounds_type_as_they_run():
    assert output_type(SLICES, "last2")[0] == "['B', '2', 'D']"
    runs(SLICES, T=[2, 3, 5])


def test_a_slice_that_would_clamp_is_refused_with_the_spec_line():
    """x[:, -2:] on a 1-long axis would give 1 entry, not 2: the module refuses it."""
    model = module(SLICES.replace("  mid : Tensor([B, T - 2, D], float32)\n", "")
                   .replace("let mid = x[:, 1:T - 1]\n", "")).Model()
    with pytest.raises(ValueError, match=r"^slice start -2 must lie within axis 1, of size T, got T = 1 "
                                         r"\(prop\.snf:9\)$"):
        model(torch.zeros(2, 1, 4))


LOOP_SLICES = """
param:
  n_layer : int = 3
  P : int = 4
  D : int = 2
parameter:
  pos : Tensor([P, D], float32)
input:
  x : Tensor([1, D], float32)
output:
  y : Tensor([1, D], float32)
  first : Tensor([1, D], float32)
let y = x
let first = x
for l in 0..n_layer-1:
    y = y + pos[l:l + 1, :]
    first = first + reshape(pos[0:l + 1, :][l], [1, D])
"""


def test_a_slice_by_the_loop_variable_is_one_row():
    runs(LOOP_SLICES)


def test_the_loop_variable_bound_is_checked_for_the_last_layer():
    mod = module(LOOP_SLICES)
    with pytest.raises(ValueError, match=r"^slice end l \+ 1 must lie within axis 0, of size P \(prop\.snf:16\); "
                                         r"got P=2, n_layer=3$"):
        mod.Config(n_layer=3, P=2)
    mod.Config(n_layer=4, P=4)  # fine


def test_run_time_divisibility_is_a_clear_error():
    text = """
param:
  D : int = 2
input:
  x : Tensor([B, T, D], float32)
output:
  y : Tensor([B, T // 2, 2 * D], float32)
let y = reshape(x, [B, T // 2, 2 * D])
"""
    runs(text, T=[2, 3, 4])
    with pytest.raises(ValueError, match=r"^T must be divisible by 2, got T = 3 \(prop\.snf:8\)$"):
        module(text).Model()(torch.zeros(1, 3, 2))


def test_indices_past_a_run_time_axis_are_a_clear_error():
    text = """
param:
  D : int = 4
  n_layer : int = 3
input:
  x : Tensor([B, T, D], float32)
  past : Tensor([K, B, D], float32)
output:
  y : Tensor([B, D], float32)
let y = x[:, 5, :]
for l in 0..n_layer-1:
    y = y + past[l]
"""
    runs(text, T=[4, 6, 7], K=[2, 3, 4])
    model = module(text).Model()
    with pytest.raises(ValueError, match=r"index 5 must lie within axis 1, of size T, got T = 5"):
        model(torch.zeros(2, 5, 4), torch.zeros(3, 2, 4))
    with pytest.raises(ValueError, match=r"index l must lie within axis 0, of size K, got K = 2, n_layer = 3"):
        model(torch.zeros(2, 6, 4), torch.zeros(2, 2, 4))


def test_integer_arithmetic_keeps_its_dtype():
    text = """
input:
  idx : Tensor([B, T], int32)
output:
  y : Tensor([B, T], int32)
let y = -(idx * 3 + 1) ** 2 - idx
"""
    assert output_type(text, "y")[1] == "int32"
    runs(text)


def test_gather_takes_any_table():
    text = """
param:
  V : int = 5
  D : int = 2
parameter:
  cube : Tensor([V, 2, D], float32)
input:
  idx : Tensor([B, T], int64)
  ids : Tensor([V, D], int64)
output:
  y : Tensor([B, T, 2, D], float32)
  j : Tensor([B, T, D], int64)
let y = gather(cube, idx)
let j = gather(ids, idx)
"""
    runs(text)


def test_scalar_full_and_empty_sizes_run():
    text = """
param:
  D : int = 3
input:
  x : Tensor([B, T, D], float32)
output:
  y : Tensor([B, T, D], float32)
let y = softmax(x + full([], 2.5, float32), axis=1) * gelu(x)
"""
    runs(text, B=[0, 2], T=[0, 1, 3])


def test_constants_fold_within_limits():
    """Numbers in a spec are computed while checking, each step bounded before it is computed:
    a power tower is one error, not a number with 2**65536 digits (nor a hang: a timeout here)."""
    from conftest import python_subprocess
    code = ("from snf.compiler import analyze; from snf.source import Source\n"
            "r = analyze(Source.from_bytes('t.snf', b'input:\\n  x : Tensor([B], float32)\\noutput:\\n"
            "  y : Tensor([B], float32)\\nlet y = x * 2 ** 2 ** 2 ** 2 ** 2 ** 2 ** 2 ** 2\\n'))\n"
            "print([d.code for d in r.diagnostics if d.severity == 'error'])")
    done = python_subprocess(code, timeout=120)
    assert done.stdout.strip() == "['bad-arithmetic']", done.stderr
    ok = checked("param:\n  n : int = 3\n  s = 2.0 ** n / sqrt(4.0 * n)\ninput:\n  x : Tensor([B], float32)\n"
                 "output:\n  y : Tensor([n, 2 ** 3], float32)\nlet y = full([n, 2 ** 3], s, float32)\n")
    assert ok.model.outputs[0].ty.shape[1].value == 8
