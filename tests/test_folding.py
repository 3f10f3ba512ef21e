"""Folding derived values once, as they are declared (snf/check/fold.py `remember`): a chain of derived
params (`a{i} = a{i-1} * 1.001 + 0.5`) is accepted at any length, with its value, in work linear in
its length. It was refused as "the spec nests too deeply" at 400 links, and folded quadratically."""

from __future__ import annotations

import pytest

from snf.check.fold import Folding
from snf.compiler import analyze
from snf.source import Source


def chain(n: int) -> str:
    derived = "\n".join(f"  a{i} = a{i - 1} * 1.001 + 0.5" for i in range(1, n + 1))
    return (f"param:\n  D : int = 4\n  a0 : float = 1.0\n{derived}\ninput:\n  x : Tensor([B, D], float32)\n"
            f"output:\n  y : Tensor([B, D], float32)\nlet y = x * a{n}\n")


def _value(n: int) -> float:
    v = 1.0
    for _ in range(n):
        v = v * 1.001 + 0.5
    return v


@pytest.mark.parametrize("n", [400, 4000])
def test_a_long_chain_of_derived_values_is_accepted_with_its_value(n, monkeypatch):
    calls = []
    real = Folding.number
    monkeypatch.setattr(Folding, "number", lambda self, e: calls.append(1) or real(self, e))
    result = analyze(Source.from_bytes("chain.snf", chain(n).encode()))
    assert result.ok, [d.message for d in result.diagnostics]
    from snf.interpret import Interpreter
    assert Interpreter(result.model).derived[f"a{n}"] == pytest.approx(_value(n), rel=1e-12)
    assert len(calls) <= 16 * n  # a bounded number of folding steps per link (13): linear, not quadratic


def test_a_derived_value_that_cannot_be_folded_is_reported_once_where_it_is():
    text = chain(3).replace("  a2 = a1 * 1.001 + 0.5", "  a2 = a1 / 0.0")
    result = analyze(Source.from_bytes("chain.snf", text.encode()))
    errors = [d for d in result.diagnostics if d.severity == "error"]
    assert [(d.code, d.span.line) for d in errors] == [("bad-arithmetic", 5)]


@pytest.mark.parametrize("n", [50, 90])
def test_a_nested_expression_folds_each_node_once(n, monkeypatch):
    """`1.0 + 1.0 + ... + 1.0` (a tree n deep) in one statement: each op is folded as the checker
    meets it, and the folds of the ops above it read its value (Folding._numbers), so the work is
    linear in the expression's size (re-folding each op's whole tree took 8,293 steps at n = 90)."""
    calls = []
    real = Folding._number
    monkeypatch.setattr(Folding, "_number", lambda self, e: calls.append(1) or real(self, e))
    text = chain(1).replace("let y = x * a1", "let y = x * (" + " + ".join(["1.0"] * (n + 1)) + ")")
    result = analyze(Source.from_bytes("nest.snf", text.encode()))
    assert result.ok, [d.message for d in result.diagnostics]
    assert len(calls) <= 2 * n + 20  # n ops and their n + 1 literals, once each
