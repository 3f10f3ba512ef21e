"""Golden files: `snfc ir`, generated code and `snfc check` text, compared byte for byte.

Regenerate after an intended change with `SNF_ACCEPT=1 python -m pytest tests/test_golden.py`,
then review `git diff tests/golden`. Commands run with the repo root as working folder and
relative paths, so the output does not depend on where the repo is checked out.
"""

from __future__ import annotations

import os

import pytest

from conftest import SEEDS_REL, assert_golden, seed_path, snfc

SMALL_SPECS = ["tiny_mlp", "cached_attn"]


def test_ir_nanogpt():
    rc, out, err = snfc("ir", "specs/nanogpt.snf")
    assert rc == 0, err
    assert_golden("nanogpt.ir.txt", out)


def test_ir_lowered_nanogpt():
    rc, out, err = snfc("ir", "--lowered", "specs/nanogpt.snf")
    assert rc == 0, err
    assert_golden("nanogpt.ir-lowered.txt", out)


@pytest.mark.parametrize("name", SMALL_SPECS)
def test_ir_small_specs(name):
    rc, out, err = snfc("ir", f"tests/specs/{name}.snf")
    assert rc == 0, err
    assert_golden(f"{name}.ir.txt", out)


@pytest.mark.parametrize("name", SMALL_SPECS)
def test_generated_code_of_small_specs(name, tmp_path):
    out_file = tmp_path / f"{name}.py"
    rc, out, err = snfc("compile", "-q", f"tests/specs/{name}.snf", "-o", str(out_file))
    assert (rc, out) == (0, ""), out + err
    assert_golden(f"{name}.py.txt", out_file.read_text(encoding="utf-8"))


def test_check_text_of_seed_001():
    seed_path("001_c5e4031d01631893.txt")
    rc, out, err = snfc("check", f"{SEEDS_REL}/001_c5e4031d01631893.txt")
    assert rc == 1
    assert_golden("seed_001.check.txt", out + "--- stderr ---\n" + err)


# ------------------------------------------------------------------------ the helper itself

def test_assert_golden_detects_a_difference(tmp_path, monkeypatch):
    monkeypatch.delenv("SNF_ACCEPT", raising=False)
    (tmp_path / "g.txt").write_text("line 1\nline 2\n")
    assert_golden("g.txt", "line 1\nline 2\n", golden_dir=tmp_path)
    with pytest.raises(pytest.fail.Exception, match=r"(?s)differs from golden/g\.txt.*-line 2.*\+line two"):
        assert_golden("g.txt", "line 1\nline two\n", golden_dir=tmp_path)
    with pytest.raises(pytest.fail.Exception, match="missing"):
        assert_golden("absent.txt", "x", golden_dir=tmp_path)


def test_assert_golden_accept_rewrites(tmp_path, monkeypatch):
    monkeypatch.setenv("SNF_ACCEPT", "1")
    assert_golden("new.txt", "fresh\n", golden_dir=tmp_path)
    assert (tmp_path / "new.txt").read_bytes() == b"fresh\n"
    monkeypatch.delenv("SNF_ACCEPT")
    assert_golden("new.txt", "fresh\n", golden_dir=tmp_path)
    assert os.environ.get("SNF_ACCEPT") is None
