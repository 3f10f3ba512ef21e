"""snf/runtime: the helpers generated modules call, imported and tested as Python, and the copy of
them code generation puts into each module (only what it calls, byte for byte the package's)."""

from __future__ import annotations

import ast

import pytest
import torch
import torch.nn.functional as F

from conftest import REPO
from snf import runtime
from snf.runtime import compiling, helpers


def test_what_a_call_needs_comes_with_it():
    need = runtime.needed("_check_input('x', x, 2, '[B, T]', 'int64')")
    assert {"_check_input", "_fits", "_described"} <= need and "_attention" not in need
    assert "_CompileSettings" in runtime.needed("for step in _decoding(4): pass")  # across the two files
    assert runtime.needed("x = y + 1  # no helper") == frozenset()


def test_every_generated_module_holds_exactly_the_runtime_it_calls():
    """Each definition in a generated module's runtime part is the package's text, and each one the
    module's own code calls is there; nothing else is."""
    by_name = {d.name: d for d in runtime.definitions()}
    for path in sorted((REPO / "generated").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        defined = {n for node in ast.parse(text).body for n in runtime._defined(node) if n in by_name}
        for name in defined:
            assert by_name[name].source in text, (path.name, name)
        rest = text
        for name in defined:
            rest = rest.replace(by_name[name].source, "")
        assert defined == runtime.needed(rest), path.name


def test_check_dims_says_why_with_the_sizes():
    helpers._check_dims("T", 3, "<=", "block_size", 4, "m.snf:9")
    with pytest.raises(ValueError, match=r"expected T <= block_size, got T = 5 and block_size = 4 \(m.snf:9\)"):
        helpers._check_dims("T", 5, "<=", "block_size", 4, "m.snf:9")
    with pytest.raises(ValueError, match=r"the cache is full, got T = 5 \(m.snf:9\)"):
        helpers._check_dims("T", 5, "<=", "block_size", 4, "m.snf:9", "the cache is full", {"T": 5})


def test_check_number_refuses_what_cannot_be_computed_or_is_out_of_range():
    helpers._check_number(lambda: 0.5, 0.0, 1.0, False, "rate", "m.snf:3", "p=0.5")
    with pytest.raises(ValueError, match="cannot be computed"):
        helpers._check_number(lambda: 1.0 / 0, 0.0, None, False, "std", "m.snf:3", "D=3")
    with pytest.raises(ValueError, match=r"rate must be in \[0, 1\], got 1.5"):
        helpers._check_number(lambda: 1.5, 0.0, 1.0, False, "rate", "m.snf:3", "p=1.5")


def test_bucket_is_a_power_of_two_from_128_up_to_the_size():
    assert [helpers._bucket(n, 1024) for n in (1, 128, 129, 600, 1024)] == [128, 128, 256, 1024, 1024]
    assert helpers._bucket(300, 200) == 200


def test_cross_entropy_matches_torch_and_ignores_the_ignore_index():
    torch.manual_seed(0)
    logits, targets = torch.randn(2, 5, 11), torch.randint(0, 11, (2, 5))
    targets[0, 1] = -100
    got = helpers._cross_entropy(logits, targets, -100, torch.float32, "targets", "V")
    want = F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="targets"):
        helpers._cross_entropy(logits, torch.full((2, 5), 11), -100, torch.float32, "targets", "V")


def test_linear_cross_entropy_matches_the_unfused_loss_and_its_gradients():
    torch.manual_seed(0)
    x = torch.randn(3, 4, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(13, 8, dtype=torch.float64, requires_grad=True)
    b = torch.randn(13, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 13, (3, 4))
    fused = helpers._linear_cross_entropy(x, w, b, targets, -100, torch.float64, "targets", "V")
    plain = F.cross_entropy(F.linear(x, w, b).reshape(-1, 13), targets.reshape(-1))
    torch.testing.assert_close(fused, plain, rtol=1e-12, atol=1e-12)
    got = torch.autograd.grad(fused, (x, w, b))
    want = torch.autograd.grad(plain, (x, w, b))
    for g, h in zip(got, want):
        torch.testing.assert_close(g, h, rtol=1e-10, atol=1e-12)


def test_next_tokens_shifts_left_and_ignores_the_last():
    t = torch.tensor([[1, 2, 3], [4, 5, 6]])
    assert helpers._next_tokens(t, -100).tolist() == [[2, 3, -100], [5, 6, -100]]


def test_a_compile_error_is_told_from_the_models_own():
    assert not compiling._is_compile_error(ValueError("input x must be [B, T] int64"))
    assert compiling._is_compile_error(torch._dynamo.exc.Unsupported("a construct dynamo cannot trace"))


def test_eagerly_turns_compiling_off_inside_and_back_on(monkeypatch):
    monkeypatch.setenv("SNF_COMPILE", "1")
    assert compiling._compile_enabled()
    with compiling._eagerly():
        assert not compiling._compile_enabled()
    assert compiling._compile_enabled()
