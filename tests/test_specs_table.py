"""The suite's table of specs (tests/specs_table.py) covers every spec, and its families are those
snf.from_pretrained loads."""

from __future__ import annotations

from conftest import REPO
from specs_table import ROWS, families, kind


def test_every_spec_and_generated_module_has_a_row():
    specs = {p.stem for p in (REPO / "specs").glob("*.snf")}
    generated = {p.stem for p in (REPO / "generated").glob("*.py") if p.stem != "__init__"}
    assert specs == generated == set(ROWS), "add the new spec's row to tests/specs_table.py"


def test_the_rows_with_a_transformers_config_are_the_bundled_families():
    """A row gives `hf` exactly when snf.from_pretrained loads a transformers family with its spec."""
    from snf.pretrained import bundled_specs
    assert {path.stem for path in bundled_specs().values()} == {name for name, row in ROWS.items() if row.hf}
    assert set(families()) == set(bundled_specs())


def test_kinds_come_from_the_decode_plan():
    assert {kind(name) for name in families().values()} == {"causal", "seq2seq", "encoder"}
    assert (kind("llama3"), kind("t5"), kind("bert")) == ("causal", "seq2seq", "encoder")
