"""CI integration: the pre-commit hooks, this repository's workflow, docs/ci.md's examples, LICENSE."""

from __future__ import annotations

import re
import shlex
import tomllib

import pytest

from conftest import REPO, snfc

yaml = pytest.importorskip("yaml")  # PyYAML, a dependency of transformers (the test extra)
SPECS = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "specs").glob("*.snf"))
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def _yaml_blocks(md: str) -> list:
    return [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", md, re.S)]


def _run_entry(entry: str, files: list[str]) -> int:
    words = shlex.split(entry)
    assert words[0].endswith("snfc") and "snfc" in PYPROJECT["project"]["scripts"], entry
    return snfc(*words[1:], *files)[0]


def test_pre_commit_hooks_run_snfc_on_spec_files():
    hooks = {h["id"]: h for h in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) == {"snfc-check", "snfc-compile-check"}
    assert hooks["snfc-check"]["entry"] == "snfc check"
    assert hooks["snfc-compile-check"]["entry"] == "snfc compile --check"
    for h in hooks.values():
        assert h["language"] == "python" and h["name"]
        files = re.compile(h["files"])
        assert files.search("specs/nanogpt.snf") and not files.search("specs/nanogpt.snf.orig")
        assert _run_entry(h["entry"], SPECS) == 0, h["id"]  # pre-commit passes the staged files


def test_pre_commit_hook_fails_on_a_bad_spec(tmp_path):
    (tmp_path / "bad.snf").write_text("param:\n  D : int = 4\n\nlet y = x\n")
    rc, out, _ = snfc("check", "bad.snf", cwd=tmp_path)
    assert rc == 1 and "bad.snf:" in out


def test_workflow_runs_the_test_script_with_setup_sh_pin():
    wf = yaml.safe_load((REPO / ".github" / "workflows" / "ci.yml").read_text())
    triggers = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` as True
    assert "push" in triggers and "pull_request" in triggers
    (job,) = wf["jobs"].values()
    assert job["runs-on"].startswith("ubuntu")
    steps = job["steps"]
    assert any(s.get("uses", "").startswith("actions/setup-python") and str(s["with"]["python-version"]) == "3.11"
               for s in steps)
    runs = "\n".join(s.get("run", "") for s in steps)
    assert steps[-1]["run"] == "bash scripts/test.sh"
    setup_pin = re.findall(r"torch==([0-9.]+)", (REPO / "scripts" / "setup.sh").read_text())
    assert setup_pin and set(re.findall(r"torch==([0-9.]+)", runs)) == set(setup_pin)
    assert "graphviz" in runs  # snfc graph -o x.svg is tested, not skipped


def test_docs_ci_examples_are_valid_and_run():
    md = (REPO / "docs" / "ci.md").read_text()
    blocks = _yaml_blocks(md)
    assert len(blocks) == 3
    ids = {h["id"] for h in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())}
    remote, local, workflow = blocks
    assert {h["id"] for h in remote["repos"][0]["hooks"]} == ids
    for h in local["repos"][0]["hooks"]:
        assert h["id"] in ids and _run_entry(h["entry"].replace(".venv/bin/", ""), SPECS) == 0
    commands = [s["run"] for s in workflow["jobs"]["snfc"]["steps"] if s.get("run", "").startswith("snfc ")]
    assert len(commands) == 2
    for c in commands:
        assert _run_entry(c, []) == 0, c
    assert "docs/ci.md" in (REPO / "README.md").read_text()


def test_license_is_mit_as_pyproject_says():
    text = (REPO / "LICENSE").read_text()
    assert PYPROJECT["project"]["license"] == "MIT"
    assert text.startswith("MIT License") and "Copyright (c)" in text and "the snfc authors" in text
    assert "THE SOFTWARE IS PROVIDED \"AS IS\"" in text


def _chunk_log(first: int, last: int, failures: int, seconds: int) -> str:
    """The lines tests/property/test_session.py prints for a long-mode chunk of 100 sessions."""
    return (f"\n100 sessions, seeds {first}..{last}, {failures} failures, {seconds} s\n\n"
            f"seeds from {first}: 100 sessions of random specs, {failures} failures (1088 calls compared "
            f"compiled against eager, 24 sizes refused, 0 specs rejected, 688 graphs compiled) in {seconds} s\n")


def test_long_sessions_sum_adds_up_the_chunks(tmp_path):
    """scripts/long_sessions.sh sum: the chunks' summary lines, their total, and what to look at."""
    import subprocess
    (tmp_path / "logs").mkdir()
    (tmp_path / "commit").write_text("0123abc\n")
    for first, last, failures, seconds in ((23000, 23100, 0, 1797), (23200, 23450, 1, 1900), (25000, 25103, 0, 1800)):
        text = _chunk_log(first, last, failures, seconds)
        if failures:
            text = f"a session broke (seed {first + 7}): eval forward failed\n" + text
        (tmp_path / "logs" / f"chunk_{first}.log").write_text(text)
    (tmp_path / "logs" / "chunk_25200.log").write_text("")  # a chunk still running: no summary yet
    out = subprocess.run(["bash", "scripts/long_sessions.sh", "sum"], cwd=REPO, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path)}, check=True).stdout
    lines = out.splitlines()
    assert lines[0] == "commit 0123abc"
    assert [line.split(":")[0] for line in lines[1:4]] == ["seeds from 23000", "seeds from 23200", "seeds from 25000"]
    assert "3 chunks: 300 sessions, 1 failures, 5497 s of process time" in lines
    assert f"failure in {tmp_path}/logs/chunk_23200.log" in lines
    assert "seeds overlap: chunk 23200 ran to seed 23450" in lines
    assert len(lines) == 7, out
