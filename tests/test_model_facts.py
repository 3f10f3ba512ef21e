"""The checked model's facts (ir.Model: config names, run-time dims, where each check runs, the
tables an input indexes, a check's one printer), computed once and read by codegen, stats,
`snfc ir`, the interpreter and the planning passes."""

from __future__ import annotations

from conftest import snfc
from snf.compiler import analyze
from snf.source import Source

SPEC = """\
param:
  V : int = 11
  D : int = 8
  block_size : int = 16
  r : float = 0.5
  E = int(D * r)
input:
  idx : Tensor([B, T], int64)
parameter:
  emb : Tensor([V, D], float32)
  pos : Tensor([block_size, D], float32)
output:
  y : Tensor([B, T, D], float32)
assert T >= 2
assert T <= block_size
assert E <= D
let y = gather(emb, idx) + gather(emb, idx) * 2.0
"""


def _model(tmp_path=None):
    result = analyze(Source.from_bytes("facts.snf", SPEC.encode()))
    assert result.ok, result.diagnostics
    return result.model


def test_the_facts_of_a_checked_model():
    m = _model()
    assert m.config_names() == {"V", "D", "block_size", "r", "E"}
    assert m.run_time_dims == {"B", "T"}
    assert [c.text(m.display) for c in m.forward_checks] == ["T >= 2", "T <= block_size"]
    assert {"E <= D", "0 <= V"} <= {c.text(m.display) for c in m.checks if m.runs_in_config(c)}  # V sizes emb
    assert [str(r) for r in m.rows_indexed_by("idx")] == ["V"]  # once, though indexed twice
    assert m.rows_indexed_by("y") == ()
    assert m.forward_checks is m.forward_checks  # computed once


def test_every_printer_of_a_check_says_the_same(tmp_path):
    """`snfc ir`, the generated module and the interpreter print `assert T >= 2` as written (one
    printer, ir.Check.text)."""
    path = tmp_path / "facts.snf"
    path.write_text(SPEC)
    code, out, err = snfc("ir", str(path))
    assert code == 0 and "  T >= 2  # line 14" in out and "  T <= block_size  # line 15" in out
    code, out, err = snfc("compile", str(path), "-o", str(tmp_path / "facts.py"))
    assert code == 0
    text = (tmp_path / "facts.py").read_text()
    assert "_check_dims('T', T, '>=', '2', 2, 'facts.snf:14')" in text
