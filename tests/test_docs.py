"""Every code block of the README, examples/README.md and docs/*.md runs, in order, as a reader
would run it, or is checked another way that can fail.

Each document runs in a fresh temporary folder holding a copy of specs/, docs/, tests/errors/,
examples/ and README.md (the commands name them), `.venv/bin/python`, and the seed documents at
../shared/seeds where the checkout has them (elsewhere the commands that read one are left out). `python` blocks run in one interpreter per document, sharing their
names, as in one Python session; `bash` blocks run in bash, where `snfc`, `python` and `torchrun`
are this checkout's (`python -m snf`, with PYTHONPATH set to it). Generated modules run eagerly
(SNF_COMPILE=0, from conftest): the compiled path is tests/property/test_session.py's. `snf`
blocks are specs: each must pass `snfc check`.

An HTML comment on the line before a fenced block (invisible on GitHub) says what to do with it:

    <!-- no-test: WHY -->     not run (the setup commands, a synopsis); the test counts them
    <!-- file: PATH -->       written to PATH (a file the reader saves)
    <!-- append: PATH -->     appended to PATH
    <!-- edit: PATH -->       a diff: its context and `-` lines, found once in PATH, become its
                              context and `+` lines
    <!-- output -->           what the bash block before it prints, stdout then stderr, exactly;
    <!-- output: exit N -->   the same, with exit status N (a bash block exits 0 otherwise)
    <!-- fragment -->         part of a spec: it must parse as SNF
    <!-- quote: PATH -->      lines of PATH: each line, `...` aside, is one of PATH's, in order
    <!-- tested: FILE::TEST --> run by that test, which must exist and name this document

Every other block must be python, bash or snf, so no block goes untested by accident.
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

from conftest import REPO, SEEDS

MARKER = re.compile(r"<!--\s*(no-test|file|append|edit|output|fragment|quote|tested)\s*(?::\s*(.*?))?\s*-->\s*$")
FENCE = re.compile(r"^( *)(`{3,})\s*([\w+-]*)\s*$")  # indented too: a block in a list item
SEEDS_NAMED = "../shared/seeds/"  # how the documents name a seed document


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
        indent, fence, lang, start = len(m.group(1)), m.group(2), m.group(3), i
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence), None)
        assert end is not None, f"{path.name}:{start + 1}: code block never closed"
        before = lines[start - 1] if start else ""
        mark = MARKER.match(before.strip())
        code = "\n".join(line[indent:] for line in lines[start + 1:end]) + "\n"
        found.append(Block(start + 1, lang, code, *(mark.groups("") if mark else ())))
        i = end + 1
    return found


DOCS = ["README.md", "examples/README.md", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))]
# per document: the blocks marked no-test, so that one more is a decision
SKIPPED = {"README.md": 2, "examples/README.md": 0, "docs/architecture.md": 1, "docs/ci.md": 0,
           "docs/diagnostics.md": 1, "docs/graph.md": 1, "docs/language.md": 0, "docs/notation.md": 3,
           "docs/porting.md": 0, "docs/stats.md": 1, "docs/training.md": 0, "docs/tutorial.md": 0}
SLOW = {"docs/tutorial.md": "trains for 200 steps", "examples/README.md": "trains for 300 steps",
        "docs/training.md": "trains, twice on 2 processes"}
NOT_RUN = ("no-test", "output", "quote", "tested")  # the runner passes over these


def _quoted(code: str, path: Path, where: str) -> None:
    have = [line.rstrip() for line in path.read_text(encoding="utf-8").splitlines()]
    at = 0
    for line in code.splitlines():
        if line.strip() in ("", "..."):
            continue
        try:
            at = have.index(line.rstrip(), at) + 1
        except ValueError:
            raise AssertionError(f"{where}: not a line of {path.relative_to(REPO)} (after line {at}): {line!r}")


def _tested_by(arg: str, doc: str, where: str) -> None:
    file, _, test = arg.partition("::")
    text = (REPO / file).read_text(encoding="utf-8") if (REPO / file).is_file() else ""
    assert re.search(rf"^def {re.escape(test)}\(", text, re.M), f"{where}: no test {arg}"
    assert doc in text, f"{where}: {file} does not name {doc}, so it cannot be what runs this block"


def _plan(doc: str, path: Path | None = None) -> list[Block]:
    plan = blocks(path or REPO / doc)
    for b in plan:
        where = f"{doc}:{b.line}"
        if b.marker in ("", "output"):
            assert b.marker == "output" or b.lang in ("python", "bash", "snf"), \
                f"{where}: a {b.lang or 'plain'} block with no marker: run it (python, bash, snf) or mark it"
        if b.marker == "no-test":
            assert b.arg, f"{where}: say why the block is not run (<!-- no-test: WHY -->)"
        if b.marker == "edit":
            assert b.lang == "diff", f"{where}: an edit is a diff block"
        if b.marker == "fragment":
            assert b.lang == "snf", f"{where}: a fragment is an snf block"
        if b.marker == "quote":
            _quoted(b.code, REPO / b.arg, where)
        if b.marker == "tested":
            _tested_by(b.arg, doc, where)
        if b.marker == "output":
            i = plan.index(b)
            assert i and plan[i - 1].lang == "bash" and not plan[i - 1].marker, \
                f"{where}: an output block follows the bash block that prints it"
            assert re.fullmatch(r"(exit \d+)?", b.arg), f"{where}: <!-- output: exit N -->"
    assert sum(b.marker == "no-test" for b in plan) == SKIPPED.get(doc), f"{doc}: blocks not run changed"
    return plan


def _without_seeds(plan: list[Block]) -> list[Block]:
    """The plan less the commands that read a seed document, and their output, where the checkout
    has none beside it (a user's clone)."""
    keep = []
    for b in plan:
        if b.lang == "bash" and SEEDS_NAMED in b.code or b.marker == "output" and keep and keep[-1] is None:
            keep.append(None)
        else:
            keep.append(b)
    return [b for b in keep if b is not None]


def _workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(REPO / "specs", work / "specs")
    shutil.copytree(REPO / "docs", work / "docs")
    shutil.copytree(REPO / "tests" / "errors", work / "tests" / "errors")
    if SEEDS.is_dir():
        (tmp_path / "shared").mkdir()
        (tmp_path / "shared" / "seeds").symlink_to(SEEDS)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, command in (("snfc", f'"{sys.executable}" -m snf'), ("python", f'"{sys.executable}"'),
                          ("torchrun", f'"{sys.executable}" -m torch.distributed.run')):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        (bin_dir / name).chmod(0o755)
    # examples/README.md runs `.venv/bin/python examples/train.py --data README.md`, as after the
    # README's set-up
    shutil.copytree(REPO / "examples", work / "examples")
    shutil.copy(REPO / "README.md", work / "README.md")
    (work / ".venv" / "bin").mkdir(parents=True)
    (work / ".venv" / "bin" / "python").symlink_to(bin_dir / "python")
    return work


def run_document(doc: str, tmp_path: Path) -> None:
    plan = _plan(doc)
    if not SEEDS.is_dir():
        plan = _without_seeds(plan)
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
    assert ran == f"ran {sum(b.marker not in NOT_RUN for b in plan)} blocks", ran


def _param(doc: str):
    marks = [pytest.mark.slow] if doc in SLOW else []
    if doc == "README.md":
        marks.append(pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed "
                                        "(CI installs it); the README draws an SVG"))
    return pytest.param(doc, marks=marks, id=doc)


@pytest.mark.parametrize("doc", [_param(d) for d in DOCS])
def test_blocks_run(doc, tmp_path):
    run_document(doc, tmp_path)


def test_every_document_is_planned():
    assert set(SKIPPED) == set(DOCS), "a new document: say how many of its blocks are not run"
    for doc in DOCS:
        _plan(doc)  # the markers are right, quotes are the files' lines, named tests exist


def test_markers_are_read(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("text\n<!-- no-test: setup -->\n```bash\nexit 1\n```\n\n```python\nx = 1\n```\n"
                   "<!-- output: exit 1 -->\n```text\nboom\n```\n<!-- edit: a.snf -->\n````diff\n-a\n+b\n````\n")
    got = [(b.line, b.lang, b.marker, b.arg, b.code) for b in blocks(doc)]
    assert got == [(3, "bash", "no-test", "setup", "exit 1\n"), (7, "python", "", "", "x = 1\n"),
                   (11, "text", "output", "exit 1", "boom\n"), (15, "diff", "edit", "a.snf", "-a\n+b\n")]


@pytest.mark.parametrize("text, message", [
    ("```\nsnfc check x\n```\n", "a plain block with no marker"),
    ("```yaml\na: 1\n```\n", "a yaml block with no marker"),
    ("<!-- no-test: -->\n```bash\nx\n```\n", "say why"),
    ("<!-- quote: specs/nanogpt.snf -->\n```snf\nparam:\n  no_such_line : int = 1\n```\n", "not a line of"),
    ("<!-- tested: tests/test_docs.py::test_nothing -->\n```yaml\na: 1\n```\n", "no test"),
    ("<!-- fragment -->\n```python\nx\n```\n", "a fragment is an snf block"),
])
def test_a_block_nothing_checks_fails(tmp_path, text, message):
    (tmp_path / "doc.md").write_text(text)
    with pytest.raises(AssertionError, match=message):
        _plan("doc.md", tmp_path / "doc.md")


def test_snf_blocks_are_checked(tmp_path):
    """A spec block with an error, and a fragment that does not parse, fail the document."""
    (tmp_path / "plan.json").write_text(json.dumps({"doc": "d.md", "blocks": [
        asdict(Block(1, "snf", "param:\n  D : int = 4\noutput:\n  y : Tensor([D], float32)\nlet y = x\n"))]}))
    proc = subprocess.run([sys.executable, __file__, str(tmp_path / "plan.json")], cwd=tmp_path,
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode != 0 and "d.md:1" in proc.stderr and "`x` is not defined" in proc.stderr
    (tmp_path / "plan.json").write_text(json.dumps({"doc": "d.md", "blocks": [
        asdict(Block(3, "snf", "let x = (\n", "fragment"))]}))
    proc = subprocess.run([sys.executable, __file__, str(tmp_path / "plan.json")], cwd=tmp_path,
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode != 0 and "d.md:3" in proc.stderr


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


def _snf(code: str, fragment: bool, where: str) -> None:
    """A whole spec passes `snfc check` (warnings allowed); a fragment parses."""
    from snf.compiler import analyze
    from snf.diagnostics import Reporter, render_text
    from snf.frontend import parse
    from snf.source import Source

    source = Source.from_text(where, code)
    if fragment:
        r = Reporter(source)
        parse(source, r)
        found = r.sorted()
    else:
        found = analyze(source).diagnostics
    errors = [d for d in found if d.severity == "error"]
    if errors:
        raise SystemExit(f"{where}: the spec {'does not parse' if fragment else 'has errors'}\n"
                         + render_text(errors, {where: source}))


def _run_plan(plan_file: str) -> None:
    plan = json.loads(Path(plan_file).read_text())
    doc, todo = plan["doc"], plan["blocks"]
    sys.path.insert(0, os.getcwd())  # `from generated.x import ...`, as in a Python session started here
    namespace: dict = {"__name__": "__main__"}
    ran, start = 0, time.perf_counter()
    for i, b in enumerate(todo):
        where = f"{doc}:{b['line']}"
        marker, arg = b["marker"], b["arg"]
        if marker in NOT_RUN:
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
        elif b["lang"] == "snf":
            _snf(b["code"], marker == "fragment", where)
        elif b["lang"] == "bash":
            following = todo[i + 1] if i + 1 < len(todo) else None
            _bash(b["code"], following if following and following["marker"] == "output" else None, where)
        else:
            exec(compile(b["code"], where, "exec"), namespace)
    print(f"ran {ran} blocks")


if __name__ == "__main__":
    _run_plan(sys.argv[1])
