"""Diagnostics as a product: codes, collection, ordering and rendering.

Every user error is a `Diagnostic` with a code from `CODES`; passes collect them in a
`Reporter` and the CLI renders them as text (mypy style), JSON or GitHub annotations.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .source import NO_SPAN, Source, Span

# code -> one-line explanation (`snfc explain CODE`).
CODES: dict[str, str] = {
    "syntax": "The text does not follow the SNF grammar at this point.",
    "encoding": "The file is not valid UTF-8 text.",
    "indent": "Indentation does not line up with any enclosing block.",
    "unknown-name": "A name is used that no section, `let` or loop declares.",
    "unknown-op": "A call names an operation that the op registry does not have.",
    "unknown-dim": "A shape uses a dimension that is neither a parameter nor bound by an input.",
    "unknown-arg": "A call passes a keyword argument the operation does not take.",
    "missing-arg": "A call leaves out a required argument of the operation.",
    "arity": "A call passes more positional arguments than the operation takes.",
    "arg-kind": "An argument has the wrong kind (a tensor where a number is needed, or the reverse).",
    "shape-mismatch": "Two shapes that must agree do not, symbolically, for every value of the dims.",
    "rank-mismatch": "A tensor has a different number of axes than the operation requires.",
    "dtype-mismatch": "A tensor has a dtype the operation does not accept here.",
    "bad-axis": "An axis index is out of range for the tensor's rank.",
    "bad-type": "A declaration's type is not `int`, `float`, `bool`, `str`, `list[...]` of one, or "
                "`Tensor([dims], dtype)`.",
    "bad-default": "A default value does not fit the declared type.",
    "bad-constraint": "A dimension expression cannot hold (negative, zero or non-integral).",
    "redefinition": "A name is declared twice in the same scope.",
    "reassign-type": "A re-assignment changes a value's shape or dtype.",
    "assign-undeclared": "An assignment targets a name that was never declared with `let`.",
    "stacked-index": "A stacked `[n_layer, ...]` parameter is indexed wrongly or used unindexed in a loop.",
    "loop-range": "A loop's range does not cover the stacked parameters it indexes.",
    "optional-unguarded": "An optional input or conditional parameter is used where it may be absent.",
    "output-unbound": "A declared output is never computed.",
    "output-mismatch": "An output's computed type differs from its declared type.",
    "bad-condition": "A condition is not a boolean (or `X exists`) expression.",
    "bad-checkpoint": "A checkpoint mapping entry is malformed or names an unknown parameter, or a parameter has no source.",
    "bad-config-map": "A `config FMT:` entry is malformed, names no Config field, or a field without a default is unmapped.",
    "reserved-name": "A name is reserved by snfc and cannot be declared in a spec.",
    "too-large": "A number or nesting depth is beyond what snfc accepts.",
    "index-range": "An index or slice bound is outside its axis, for every config or for the default one.",
    "bad-arithmetic": "Arithmetic on constants or config values fails: division by zero, overflow, a "
                      "negative square root.",
    "bad-value": "A number is outside the range its use allows (a dropout rate outside [0, 1], a negative "
                 "standard deviation), always or with the default config.",
    "ambiguous": "The notation leaves a choice open; snfc made the documented one.",
    "unused": "A declared name is never used.",
    "fixed-length": "A sequence dimension is tied to a parameter, fixing every input's length.",
    "implicit-shape": "A parameter's shape was inferred from its uses.",
    "generate-plan": "What the compiler planned for `generate`: the output it samples from, or why it cannot "
                     "tell which output is the logits.",
    "tensor-parallel": "`snfc check --tp N`: the default config cannot shard over N ranks (N does not divide "
                       "a count of heads or a width the plan shards).",
    "cache-plan": "What the compiler planned for a KV cache: which input and output it pairs, and whether "
                  "generate decodes with preallocated buffers (and why not).",
    "internal": "snfc failed on its own; please report this with the spec that caused it.",
}


@dataclass(frozen=True)
class Related:
    """Another place a diagnostic refers to ("declared here")."""

    span: Span
    message: str


@dataclass(frozen=True)
class Diagnostic:
    severity: str  # "error" | "warning" | "note"
    code: str
    message: str
    span: Span = NO_SPAN
    hint: str | None = None
    related: tuple[Related, ...] = ()
    file: str = ""

    def sort_key(self) -> tuple:
        return (self.file, self.span.line, self.span.col, self.severity != "error", self.code, self.message)


class Reporter:
    """Collects diagnostics for one source; the checker never stops at the first."""

    def __init__(self, source: Source):
        self.source = source
        self.items: list[Diagnostic] = []

    def error(self, code: str, message: str, span: Span = NO_SPAN, hint: str | None = None,
              related: tuple[Related, ...] = ()) -> None:
        self._add("error", code, message, span, hint, related)

    def warning(self, code: str, message: str, span: Span = NO_SPAN, hint: str | None = None,
                related: tuple[Related, ...] = ()) -> None:
        self._add("warning", code, message, span, hint, related)

    def note(self, code: str, message: str, span: Span = NO_SPAN, hint: str | None = None,
             related: tuple[Related, ...] = ()) -> None:
        """Information (what snfc inferred); shown by `snfc check -v`, in every format."""
        self._add("note", code, message, span, hint, related)

    def _add(self, severity, code, message, span, hint, related) -> None:
        assert code in CODES, code
        self.items.append(Diagnostic(severity, code, message, span, hint, tuple(related), self.source.path))

    @property
    def has_errors(self) -> bool:
        return any(d.severity == "error" for d in self.items)

    def sorted(self) -> list[Diagnostic]:
        seen, out = set(), []
        for d in sorted(self.items, key=Diagnostic.sort_key):
            key = (d.file, d.span, d.code, d.message)
            if key not in seen:
                seen.add(key)
                out.append(d)
        return out


class SpecError(Exception):
    """Raised by the API when a spec has errors; carries every diagnostic and the source."""

    def __init__(self, diagnostics: list[Diagnostic], sources: dict[str, Source]):
        self.diagnostics = diagnostics
        self.sources = sources
        super().__init__(render_text(diagnostics, sources, color=False))


# --- rendering -------------------------------------------------------------------------------

def use_color(stream) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    return hasattr(stream, "isatty") and stream.isatty()


_COLORS = {"error": "\x1b[1;31m", "warning": "\x1b[1;35m", "note": "\x1b[1;36m", "hint": "\x1b[1;32m"}
_BOLD, _RESET = "\x1b[1m", "\x1b[0m"


def _control(ch: str) -> bool:
    """C0 and C1 control characters and DEL: a terminal may act on them (escape sequences)."""
    return ch < " " or "\x7f" <= ch <= "\x9f"


def printable(text: str) -> str:
    """Text shown back to a terminal (source lines, file names): control characters become `?`."""
    return "".join("?" if _control(ch) and ch != "\t" else ch for ch in text)


def _caret(src_line: str, span: Span) -> str:
    start = max(span.col - 1, 0)
    end = span.end_col - 1 if span.end_line == span.line else len(src_line)
    width = max(end - start, 1)
    pad = "".join("\t" if ch == "\t" else " " for ch in src_line[:start])
    return pad + "^" + "~" * (width - 1)


def render_one(d: Diagnostic, source: Source | None, color: bool = False) -> str:
    c = (lambda key, s: f"{_COLORS.get(key, _BOLD)}{s}{_RESET}") if color else (lambda key, s: s)
    loc = f"{printable(d.file)}:{d.span.line}:{d.span.col}" if d.span.line else printable(d.file)
    out = [f"{c('bold', loc)}: {c(d.severity, d.severity)}: {printable(d.message)}  [{d.code}]"]
    if source is not None and d.span.line:
        line = source.line(d.span.line)
        gutter = f"{d.span.line:>4} | "
        out.append(gutter + printable(line))
        out.append(" " * (len(gutter) - 2) + "| " + c(d.severity, _caret(line, d.span)))
    for r in d.related:
        out.append(f"{printable(d.file)}:{r.span.line}:{r.span.col}: note: {printable(r.message)}")
        if source is not None and r.span.line:
            out.append(f"{r.span.line:>4} | " + printable(source.line(r.span.line)))
    if d.hint:
        out.append(f"  {c('hint', 'hint')}: {printable(d.hint)}")
    return "\n".join(out)


def render_text(diags: list[Diagnostic], sources: dict[str, Source], color: bool = False) -> str:
    return "\n".join(render_one(d, sources.get(d.file), color) for d in diags)


def render_json(diags: list[Diagnostic]) -> str:
    rows = []
    for d in diags:
        row = {
            "file": d.file, "line": d.span.line, "column": d.span.col,
            "end": {"line": d.span.end_line, "column": d.span.end_col},
            "severity": d.severity, "code": d.code, "message": d.message, "hint": d.hint,
            "related": [{"line": r.span.line, "column": r.span.col, "message": r.message} for r in d.related],
        }
        rows.append(row)
    import json  # not at the top: `snfc check` prints text unless asked
    return json.dumps(rows, indent=2, ensure_ascii=False)


def _gh_escape(s: str, prop: bool = False) -> str:
    """GitHub's workflow-command escaping (%, CR, LF; in properties also `:` and `,`), and every
    other control character as %XX too, so no raw escape byte reaches the log."""
    s = s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    s = "".join(f"%{ord(ch):02X}" if _control(ch) else ch for ch in s)
    return s.replace(":", "%3A").replace(",", "%2C") if prop else s


def render_github(diags: list[Diagnostic]) -> str:
    out = []
    for d in diags:
        kind = "error" if d.severity == "error" else "warning" if d.severity == "warning" else "notice"
        msg = d.message + (f" (hint: {d.hint})" if d.hint else "") + f" [{d.code}]"
        out.append(f"::{kind} file={_gh_escape(d.file, True)},line={d.span.line},col={d.span.col},"
                   f"endLine={d.span.end_line},endColumn={d.span.end_col},title={_gh_escape(d.code, True)}::"
                   f"{_gh_escape(msg)}")
    return "\n".join(out)
