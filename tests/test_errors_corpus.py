"""The diagnostics corpus: every `tests/errors/*.snf` is an invalid spec that states, inline, the
exact diagnostics `snfc check` must give for it (mypy's test-data convention, adapted).

Convention
----------
An expectation is a marker inside a `#` comment of the spec itself:

    let y = linear(x, weight=w)     # E:9 [shape-mismatch] takes [out, in]

    E:COL [code] text      an error on THIS line, at 1-based column COL, with diagnostic code
                           `code`; `text` (optional, up to the next marker or the end of the
                           comment) must occur in the message.
    W:COL [code] text      the same for a warning.
    E@LINE:COL [code] text an error at an absolute line LINE, for places a trailing comment cannot
                           go (end of file, a blank line) or would change what is tested.
    E+N:COL / E-N:COL      an error N lines below / above the marker's line.

One comment may hold several markers (`# E:5 [a] one E:9 [b] two`). Message text is compared
case-sensitively as a substring, after collapsing runs of spaces.

The check is exact for errors: the set of (line, col, code) of the errors `analyze` reports
must equal the set the file declares, so a missing error, an extra error and a cascade (one
root cause reported twice) all fail. Warnings are checked only in files that declare at least
one `W:` marker, where they too must match exactly (most corpus files are about errors, and
incidental `unused` warnings there are not the point).

Every diagnostic must also render as `file:line:col: severity: message  [code]`, followed by the
source line and a caret line under the reported column.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from snf.compiler import analyze
from snf.diagnostics import CODES, render_text
from snf.source import Source

CORPUS = Path(__file__).parent / "errors"
FILES = sorted(CORPUS.glob("*.snf"))

_MARK = re.compile(r"(?<![\w@])([EW])(?:@(\d+)|([+-]\d+))?:(\d+) \[([a-z-]+)\]")


def expectations(text: str) -> list[tuple[str, int, int, str, str]]:
    """(severity, line, col, code, message substring) for every marker in the file."""
    out = []
    for lineno, line in enumerate(text.split("\n"), 1):
        hash_at = _comment_start(line)
        if hash_at is None:
            continue
        comment = line[hash_at + 1:]
        marks = list(_MARK.finditer(comment))
        for i, m in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(comment)
            sev, absolute, rel, col, code = m.groups()
            target = int(absolute) if absolute else lineno + int(rel) if rel else lineno
            msg = " ".join(comment[m.end():end].split())
            out.append(("error" if sev == "E" else "warning", target, int(col), code, msg))
    return out


def _comment_start(line: str) -> int | None:
    """Index of the `#` that starts a comment (not one inside a string literal)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == "\\":
                continue
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            return i
    return None


def test_corpus_is_large_enough():
    assert len(FILES) >= 40
    for f in FILES:
        assert any(e[0] == "error" for e in expectations(f.read_bytes().decode("utf-8", "replace"))), f"{f.name} expects no error"


def test_every_expected_code_is_known():
    for f in FILES:
        for _, _, _, code, _ in expectations(f.read_bytes().decode("utf-8", "replace")):
            assert code in CODES, f"{f.name}: unknown code {code}"


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_corpus_file(path: Path):
    source = Source.read(path)
    source = Source(path.name, source.text, source.sha256, source.lines)
    result = analyze(source)
    expected = expectations(source.text)
    assert not result.ok

    got = [d for d in result.diagnostics if d.severity == "error"]
    want = [e for e in expected if e[0] == "error"]
    check_warnings = any(e[0] == "warning" for e in expected)
    if check_warnings:
        got += [d for d in result.diagnostics if d.severity == "warning"]
        want += [e for e in expected if e[0] == "warning"]

    got_keys = {(d.severity, d.span.line, d.span.col, d.code) for d in got}
    want_keys = {(s, line, col, code) for s, line, col, code, _ in want}
    shown = "\n".join(f"  {d.severity} {d.span.line}:{d.span.col} [{d.code}] {d.message}" for d in got)
    assert got_keys == want_keys, (
        f"{path.name}\n missing: {sorted(want_keys - got_keys)}\n extra: {sorted(got_keys - want_keys)}\n"
        f" reported:\n{shown}")
    assert len(got) == len(got_keys), f"{path.name}: two diagnostics at one place with one code:\n{shown}"

    for sev, line, col, code, msg in want:
        d = next(d for d in got if (d.severity, d.span.line, d.span.col, d.code) == (sev, line, col, code))
        assert msg in " ".join(d.message.split()), f"{path.name}:{line}:{col}: {msg!r} not in {d.message!r}"

    _assert_rendered(result.diagnostics, source)


def _assert_rendered(diags, source: Source) -> None:
    text = render_text(diags, {source.path: source}, color=False)
    lines = text.split("\n")
    for d in diags:
        assert d.span.line >= 1 and d.span.col >= 1, d
        head = f"{source.path}:{d.span.line}:{d.span.col}: {d.severity}: "
        idx = next((i for i, ln in enumerate(lines) if ln.startswith(head) and ln.endswith(f"  [{d.code}]")), None)
        assert idx is not None, f"no header {head!r}...[{d.code}] in\n{text}"
        src_line, caret_line = lines[idx + 1], lines[idx + 2]
        assert src_line.startswith(f"{d.span.line:>4} | ")
        assert caret_line.lstrip().startswith("| ")
        caret = caret_line.split("| ", 1)[1]
        col = caret.index("^") + 1
        # the caret sits under the reported column (tabs are echoed as tabs, so columns agree)
        assert col == d.span.col, f"caret at {col}, diagnostic at {d.span.col}:\n{text}"
        assert "\x1b" not in text


def test_hints_suggest_close_names():
    """Unknown names, ops and arguments come with a did-you-mean hint."""
    hinted = {}
    for f in FILES:
        src = Source.read(f)
        for d in analyze(src).diagnostics:
            if d.code in ("unknown-name", "unknown-op", "unknown-arg", "unknown-dim") and d.hint:
                hinted.setdefault(d.code, []).append(d.hint)
    for code in ("unknown-name", "unknown-op", "unknown-arg"):
        assert any("did you mean" in h for h in hinted.get(code, ())), code


def test_docs_list_every_code():
    """docs/diagnostics.md carries the table of CODES; it must name every code, with its meaning."""
    doc = (Path(__file__).parent.parent / "docs" / "diagnostics.md").read_text(encoding="utf-8")
    for code, meaning in CODES.items():
        assert f"| `{code}` | {meaning.replace('|', chr(92) + '|')} |" in doc, code


def test_every_doc_a_message_names_exists():
    """Hints point at docs (`docs/language.md`); each one named anywhere in snf/ or in the corpus's
    diagnostics must exist."""
    repo = Path(__file__).parent.parent
    docs = re.compile(r"docs/[\w./-]+\.md")
    named = {m for f in (repo / "snf").rglob("*.py") for m in docs.findall(f.read_text(encoding="utf-8"))}
    for f in FILES:
        for d in analyze(Source.read(f)).diagnostics:
            named |= set(docs.findall(f"{d.message} {d.hint or ''}"))
    assert "docs/language.md" in named
    assert [n for n in sorted(named) if not (repo / n).is_file()] == []
