"""The recipes of docs/architecture.md ("Recipes: an op, a family of ops, a statement kind") are true.

Each recipe there ends in a diff. Here it is applied, as written, to a copy of the repository; the
files it changed are counted against the files the recipe names; then, in the copy (as subprocesses,
cwd and PYTHONPATH the copy), a spec using the new thing passes `snfc check` and the tests that
guard the recipe pass. For the activation, the registry entry alone must fail the tests that ask for
its case and its docs row, so neither file can be left out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from test_docs import blocks

DOC = "docs/architecture.md"
HERE = "tests/test_recipes.py"
# the folders a copy needs where git cannot list the checkout's files
FALLBACK = ("snf", "tests", "docs", "specs", "grammars", "templates", "generated", "pyproject.toml")


def recipe(test: str) -> str:
    """The diff block of DOC marked `<!-- tested: tests/test_recipes.py::TEST -->`."""
    found = [b.code for b in blocks(REPO / DOC) if b.marker == "tested" and b.arg == f"{HERE}::{test}"]
    assert len(found) == 1, f"{DOC}: {len(found)} blocks marked as tested by {test}"
    return found[0]


def parse_diff(diff: str) -> dict[str, tuple[bool, list[list[str]]]]:
    """path -> (whether the file is new, its hunks, each a list of lines)."""
    files: dict = {}
    lines, path, i = diff.splitlines(), None, 0
    while i < len(lines):
        if lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ b/"):
            path = lines[i + 1][len("+++ b/"):]
            assert path not in files, f"{path} twice in the diff: one section a file"
            files[path] = (lines[i] == "--- /dev/null", [[]])
            i += 2
            continue
        assert path is not None, f"a diff line before any `--- a/PATH`: {lines[i]!r}"
        if lines[i].startswith("@@"):
            files[path][1].append([])
        else:
            assert lines[i][:1] in ("", " ", "-", "+"), f"not a diff line: {lines[i]!r}"
            files[path][1][-1].append(lines[i])
        i += 1
    return files


def _side(hunk: list[str], signs: str) -> str:
    return "".join(line[1:] + "\n" for line in hunk if line[:1] in signs or line == "")


def apply(root: Path, files: dict) -> None:
    for path, (new, hunks) in files.items():
        target = root / path
        if new:
            assert not target.exists() and len(hunks) == 1 and all(line[:1] == "+" for line in hunks[0]), path
            target.write_text(_side(hunks[0], "+"), encoding="utf-8")
            continue
        text = "\n" + target.read_text(encoding="utf-8")  # so that a hunk starts at a line's start
        for hunk in hunks:
            old, new_text = "\n" + _side(hunk, " -"), "\n" + _side(hunk, " +")
            assert text.count(old) == 1, f"{path}: the hunk's old lines occur {text.count(old)} times:\n{old}"
            text = text.replace(old, new_text)
        target.write_text(text[1:], encoding="utf-8")


def copy_repo(dst: Path) -> None:
    """The checkout's files (tracked, and new ones git does not ignore) copied to `dst`."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                                capture_output=True, check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):  # no git, or not a clone: the folders imports need
        listed = [p.relative_to(REPO).as_posix() for top in FALLBACK for p in [REPO / top, *(REPO / top).rglob("*")]
                  if p.is_file() and "__pycache__" not in p.parts]
    for name in filter(None, listed):
        if (REPO / name).is_file():  # a tracked file deleted in the checkout is listed too
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dst / name)


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def changed(before: dict, after: dict) -> set[str]:
    return {n for n in before.keys() | after.keys() if before.get(n) != after.get(n)}


def run(root: Path, *args: str, ok: bool = True) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))}
    env.update(PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1", SNF_COMPILE="0",
               NO_COLOR="1", SNFC_CACHE_DIR=str(root.parent / "cache"))
    proc = subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert (proc.returncode == 0) == ok, f"{' '.join(args)}: exit {proc.returncode}\n{out[-6000:]}"
    return out


def pytest_in(root: Path, *tests: str, ok: bool = True) -> str:
    return run(root, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests, ok=ok)


def applied(tmp_path: Path, test: str, expected: set[str]) -> Path:
    """A copy of the repository with the recipe's diff applied; it changed exactly `expected`."""
    files = parse_diff(recipe(test))
    assert set(files) == expected, f"the recipe touches {sorted(files)}, not {sorted(expected)}"
    root = tmp_path / "repo"
    copy_repo(root)
    before = snapshot(root)
    apply(root, files)
    assert changed(before, snapshot(root)) == expected
    return root


def check_spec(root: Path, body: str) -> None:
    spec = root.parent / "uses.snf"  # outside the copy: not one of the files counted
    spec.write_text(f"input:\n  a : Tensor([B, N], float32)\n\noutput:\n  out : Tensor([B, N], float32)\n\n{body}\n")
    assert "Success" in run(root, "-m", "snf", "check", str(spec))


GUARDS = ("tests/test_ops.py::test_every_op_has_a_case", "tests/test_ops.py::test_every_op_has_a_docs_row",
          "tests/property/test_property.py::test_the_generator_covers_every_op_and_construct")


@pytest.mark.slow  # 6-9 s: a copy of the checkout's tests run
def test_adding_an_activation_touches_three_files(tmp_path):
    root = applied(tmp_path, "test_adding_an_activation_touches_three_files",
                   {"snf/ops/core.py", "tests/test_ops.py", "docs/language.md"})
    check_spec(root, "let out = softsign(a)")
    out = pytest_in(root, *GUARDS, "tests/test_ops.py::test_op_lowering_matches_numpy[softsign]")
    assert "4 passed" in out, out
    # the registry entry alone: the case and the docs row are asked for
    alone = tmp_path / "alone"
    alone.mkdir()
    files = parse_diff(recipe("test_adding_an_activation_touches_three_files"))
    copy_repo(alone / "repo")
    apply(alone / "repo", {"snf/ops/core.py": files["snf/ops/core.py"]})
    out = pytest_in(alone / "repo", *GUARDS, ok=False)
    assert "2 failed, 1 passed" in out and "softsign" in out, out


@pytest.mark.slow  # 6-9 s: a copy of the checkout's tests run
def test_adding_a_family_touches_four_files(tmp_path):
    root = applied(tmp_path, "test_adding_a_family_touches_four_files",
                   {"snf/ops/toy.py", "snf/ops/__init__.py", "tests/test_ops.py", "docs/language.md"})
    check_spec(root, "let out = mish(a)")
    out = pytest_in(root, *GUARDS, "tests/test_ops.py::test_op_lowering_matches_numpy[mish]",
                    "tests/test_architecture.py")
    assert " failed" not in out and "passed" in out, out


@pytest.mark.slow  # 6-9 s: a copy of the checkout's tests run
def test_adding_a_statement_kind_touches_six_files(tmp_path):
    root = applied(tmp_path, "test_adding_a_statement_kind_touches_six_files",
                   {"grammars/snf.lark", "snf/ir/syntax.py", "snf/frontend/dsl.py", "snf/check/statements.py",
                    "docs/language.md", "tests/test_add_to.py"})
    check_spec(root, "let out = a\nout += a * 2.0")
    out = pytest_in(root, "tests/test_add_to.py", "tests/test_syntax_errors.py", "tests/test_parser.py",
                    "tests/test_architecture.py")
    assert " failed" not in out and "passed" in out, out
