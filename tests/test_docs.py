"""The README's and docs/tutorial.md's code blocks run, in order, as a reader would run them.

Each document runs in a fresh temporary folder holding a copy of specs/ and docs/ (the README's
commands name `specs/...`; the tutorial starts empty but for those). `python` blocks run in one
interpreter per document, sharing their names, as in one Python session; `bash` blocks run in
bash, where `snfc` and `python` are this checkout's (`python -m snf`, with PYTHONPATH set to it).
Generated modules run eagerly (SNF_COMPILE=0, from conftest): the compiled path is
tests/property/test_session.py's.

An HTML comment on the line before a fenced block (invisible on GitHub) says what to do with it:

    <!-- no-test: WHY -->     not run (the setup commands, which make a venv); the test counts them
    <!-- file: PATH -->       written to PATH (a file the reader saves)
    <!-- append: PATH -->     appended to PATH
    <!-- edit: PATH -->       a diff: its context and `-` lines, found once in PATH, become its
                              context and `+` lines
    <!-- output -->           what the bash block before it prints, stdout then stderr, exactly;
    <!-- output: exit N -->   the same, with exit status N (a bash block exits 0 otherwise)

Every other block must be python or bash, so no block of these documents goes untested by
accident.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from conftest import REPO

MARKER = re.compile(r"<!--\s*(no-test|file|append|edit|output)\s*(?::\s*(.*?))?\s*-->\s*$")
FENCE = re.compile(r"^(`{3,})\s*([\w+-]*)\s*$")


@dataclass
class Block:
    line: int          # of the opening fence, 1-based
    lang: str
    code: str
    marker: str = ""   # one of MARKER's words, or "" for none
    arg: str = ""      # what follows the marker's colon


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file, each with the marker on the line before it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(1), m.group(2), i
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence), None)
        assert end is not None, f"{path.name}:{start + 1}: code block never closed"
        before = lines[start - 1] if start else ""
        mark = MARKER.match(before.strip())
        code = "\n".join(lines[start + 1:end]) + "\n"
        found.append(Block(start + 1, lang, code, *(mark.groups("") if mark else ())))
        i = end + 1
    return found


# per document: the blocks marked no-test (the setup commands), so that one more is a decision
SKIPPED = {"README.md": 2, "docs/tutorial.md": 0}


def _plan(doc: str) -> list[Block]:
    plan = blocks(REPO / doc)
    for b in plan:
        where = f"{doc}:{b.line}"
        if b.marker in ("", "output"):
            assert b.marker == "output" or b.lang in ("python", "bash"), \
                f"{where}: a {b.lang or 'plain'} block with no marker: run it (python, bash) or mark it"
        if b.marker == "no-test":
            assert b.arg, f"{where}: say why the block is not run (<!-- no-test: WHY -->)"
        if b.marker == "edit":
            assert b.lang == "diff", f"{where}: an edit is a diff block"
        if b.marker == "output":
            i = plan.index(b)
            assert i and plan[i - 1].lang == "bash" and not plan[i - 1].marker, \
                f"{where}: an output block follows the bash block that prints it"
            assert re.fullmatch(r"(exit \d+)?", b.arg), f"{where}: <!-- output: exit N -->"
    assert sum(b.marker == "no-test" for b in plan) == SKIPPED[doc], f"{doc}: blocks not run changed"
    return plan


def _workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(REPO / "specs", work / "specs")
    shutil.copytree(REPO / "docs", work / "docs")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, command in (("snfc", f'"{sys.executable}" -m snf'), ("python", f'"{sys.executable}"')):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        (bin_dir / name).chmod(0o755)
    return work


def run_document(doc: str, tmp_path: Path) -> None:
    plan = _plan(doc)
    work = _workdir(tmp_path)
    # one thread: the documents' models are tiny, and a second thread costs more than it saves on a
    # busy machine (the tutorial's training runs about 3x faster so on a shared 2-core one)
    env = dict(os.environ, PYTHONPATH=str(REPO), PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
               SNFC_CACHE_DIR=str(tmp_path / "cache"), HF_HUB_OFFLINE="1", NO_COLOR="1", OMP_NUM_THREADS="1")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"doc": doc, "blocks": [asdict(b) for b in plan]}))
    proc = subprocess.run([sys.executable, __file__, str(plan_file)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{doc}: a block failed\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    ran = proc.stdout.splitlines()[-1]
    assert ran == f"ran {sum(b.marker not in ('no-test', 'output') for b in plan)} blocks", ran


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed (CI installs it); "
                    "the README draws an SVG")
def test_readme_blocks_run(tmp_path):
    run_document("README.md", tmp_path)


@pytest.mark.slow  # trains for 200 steps
def test_tutorial_blocks_run(tmp_path):
    run_document("docs/tutorial.md", tmp_path)


def test_markers_are_read(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("text\n<!-- no-test: setup -->\n```bash\nexit 1\n```\n\n```python\nx = 1\n```\n"
                   "<!-- output: exit 1 -->\n```text\nboom\n```\n<!-- edit: a.snf -->\n````diff\n-a\n+b\n````\n")
    got = [(b.line, b.lang, b.marker, b.arg, b.code) for b in blocks(doc)]
    assert got == [(3, "bash", "no-test", "setup", "exit 1\n"), (7, "python", "", "", "x = 1\n"),
                   (11, "text", "output", "exit 1", "boom\n"), (15, "diff", "edit", "a.snf", "-a\n+b\n")]


# ------------------------------------------------------------------------------ the runner
# `python tests/test_docs.py PLAN.json` runs one document's blocks in the working folder; the
# test above starts it, so that the blocks' imports (torch, generated.*) stay out of pytest's process.

def _edit(path: Path, diff: str, where: str) -> None:
    old, new = [], []
    for line in diff.splitlines():
        sign, text = line[:1], line[1:]
        if sign in (" ", "-"):
            old.append(text)
        if sign in (" ", "+"):
            new.append(text)
    old_text, new_text = "\n".join(old) + "\n", "\n".join(new) + "\n"
    content = path.read_text(encoding="utf-8")
    if content.count(old_text) != 1:
        raise SystemExit(f"{where}: the diff's old lines occur {content.count(old_text)} times in {path}")
    path.write_text(content.replace(old_text, new_text), encoding="utf-8")


def _bash(code: str, expected: dict | None, where: str) -> None:
    proc = subprocess.run(["bash", "-e", "-c", code], capture_output=True, text=True)
    want_rc = int((expected["arg"] or "exit 0").removeprefix("exit")) if expected else 0
    if proc.returncode != want_rc:
        raise SystemExit(f"{where}: exit {proc.returncode}, expected {want_rc}\n{proc.stdout}{proc.stderr}")
    if expected is not None and proc.stdout + proc.stderr != expected["code"]:
        raise SystemExit(f"{where}: the output differs from the document's\n--- document\n{expected['code']}"
                         f"--- actual\n{proc.stdout}{proc.stderr}")


def _run_plan(plan_file: str) -> None:
    plan = json.loads(Path(plan_file).read_text())
    doc, todo = plan["doc"], plan["blocks"]
    sys.path.insert(0, os.getcwd())  # `from generated.x import ...`, as in a Python session started here
    namespace: dict = {"__name__": "__main__"}
    ran, start = 0, time.perf_counter()
    for i, b in enumerate(todo):
        where = f"{doc}:{b['line']}"
        marker, arg = b["marker"], b["arg"]
        if marker in ("no-test", "output"):
            continue
        ran += 1
        print(f"-- {where} ({marker or b['lang']}), at {time.perf_counter() - start:.1f} s", flush=True)
        if marker == "file":
            Path(arg).write_text(b["code"], encoding="utf-8")
        elif marker == "append":
            with open(arg, "a", encoding="utf-8") as f:
                f.write(b["code"])
        elif marker == "edit":
            _edit(Path(arg), b["code"], where)
        elif b["lang"] == "bash":
            following = todo[i + 1] if i + 1 < len(todo) else None
            _bash(b["code"], following if following and following["marker"] == "output" else None, where)
        else:
            exec(compile(b["code"], where, "exec"), namespace)
    print(f"ran {ran} blocks")


if __name__ == "__main__":
    _run_plan(sys.argv[1])
