"""Soundness findings as regression tests: each spec in soundness_findings.py must be rejected by
`snfc check` or run as it promises (runner.py). While a finding is open (known.OPEN) its test is
xfail(strict=True): fixing it makes the test pass, and strict xfail then fails until the
finding is taken out of known.OPEN."""

from __future__ import annotations

import pytest

import known
import runner
from conftest import seed_path
from soundness_findings import FINDINGS
from snf.compiler import analyze
from snf.source import Source


def _param(f):
    marks = []
    if f.id in known.OPEN:
        marks.append(pytest.mark.xfail(strict=True, raises=runner.Unsound, reason=f"open finding `{f.id}` (tests/property/known.py): {f.what}"))
    return pytest.param(f, id=f.id, marks=marks)


@pytest.mark.parametrize("finding", [_param(f) for f in FINDINGS])
def test_finding(finding):
    for seed in range(3):
        runner.run(finding.spec, finding, seed, configs=2)


def test_every_open_finding_has_a_test():
    ids = {f.id for f in FINDINGS} | {"branch-hides-error"}
    assert not set(known.OPEN) - ids, set(known.OPEN) - ids


@pytest.mark.xfail("branch-hides-error" in known.OPEN, strict=True,
                   reason="open finding `branch-hides-error` (tests/property/known.py): an error in one branch of an if-expression "
                          "hides an independent error in the other")
def test_an_error_in_one_branch_does_not_hide_one_in_the_other():
    """Seed 001 as written: line 107's concat is wrong (its branch is an error), and line 114,
    `new_keys[l] = k_full`, is wrong even without a cache: the else branch k_head is
    [B, T, H, head_dim], the slot [B, H, T_total, head_dim]. One run reports both."""
    path = seed_path("001_c5e4031d01631893.txt")
    result = analyze(Source.read(path))
    lines = {d.span.line for d in result.diagnostics if d.severity == "error"}
    assert {107, 114} <= lines, sorted(lines)
