"""Both notations report broken text through one reporter (snf/frontend/lark_common.py): the same
class of mistake gives the same located diagnostic, with the same message and hint, in the SNF DSL
and in the SNF_MODEL notation."""

from __future__ import annotations

import pytest

from snf.compiler import analyze
from snf.source import Source

DSL = """param:
  D : int = 4
input:
  x : Tensor([B, D], float32)
output:
  y : Tensor([B, D], float32)
let y = x + x
"""

NOTATION = """SNF_MODEL tiny

Domain:
    B : batch
    T : sequence_position
    D : embedding_dim
    V : vocab

State:
    h ∈ ℝ[B, T, D]
    tok ∈ ℕ[B, T]

Parameters:
    θ_e
    θ_u

Init:
    h = Embed(tok, θ_e)

logits = Linear(h, θ_u)
"""


def edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


BAD_BYTE = "\udcff"  # written out as the byte 0xff: not UTF-8

# class: (DSL text, notation text, (line, col) in each, code, text both messages hold, text both hints hold)
CASES = {
    "unclosed-bracket": (
        edit(DSL, "let y = x + x\n", "let z = f(x + x\nlet y = x + x\n"),
        edit(NOTATION, "Embed(tok, θ_e)", "Embed(tok, θ_e"),
        ((7, 10), (18, 14)), "syntax", "`(` is never closed", "add the matching `)`; the parser gave up at"),
    "unclosed-string": (
        edit(DSL, "x + x", 'x + "x'), edit(NOTATION, "Embed(tok, θ_e)", 'Embed(tok, "θ_e)'),
        ((7, 13), (18, 20)), "syntax", "the string it starts is not closed on this line", None),
    "bad-dedent": (
        edit(DSL, "  D : int = 4\n", "    D : int = 4\n  E : int = 4\n"),
        edit(NOTATION, "    B : batch\n", "        B : batch\n      Q : batch\n"),
        ((3, 1), (5, 1)), "indent", "unindent does not match any outer indentation level",
        "indent this line like the block it belongs to"),
    "unexpected-indent": (
        edit(DSL, "let y = x + x\n", "let z = x\n    let y = x + x\n"),
        edit(NOTATION, "logits = Linear(h, θ_u)\n", "z = h\n    logits = Linear(h, θ_u)\n"),
        ((7, 10), (20, 6)), "syntax", "unexpected a change of indentation",
        "this line is indented more than the block it belongs to"),
    "stray-token": (
        edit(DSL, "x + x", "x + x $"), edit(NOTATION, "Linear(h, θ_u)", "Linear(h, θ_u) $"),
        ((7, 15), (20, 25)), "syntax", "unexpected character '$'", None),
    "missing-colon": (
        edit(DSL, "input:", "input"), edit(NOTATION, "State:", "State"),
        ((3, 6), (9, 6)), "syntax", "unexpected end of line; expected ':'", None),
    "empty-block": (
        edit(DSL, "output:\n  y : Tensor([B, D], float32)\n", "output:\n"),
        edit(NOTATION, "Init:\n    h = Embed(tok, θ_e)\n", "Init:\n"),
        ((6, 1), (19, 1)), "syntax", "expected end of line",
        "a line ending in ':' must be followed by an indented block"),
    "line-ends-early": (  # reported just after the code, before the comment
        edit(DSL, "x + x", "x +   # comment"), edit(NOTATION, "Linear(h, θ_u)", "Linear(h, θ_u) +   # comment"),
        ((7, 12), (20, 26)), "syntax", "unexpected end of line; expected '(', '+' or '-'", None),
    "misplaced-else": (
        edit(DSL, "let y = x + x\n", "let y = x + x\nelse:\n  let z = x\n"),
        edit(NOTATION, "logits = Linear(h, θ_u)\n", "logits = Linear(h, θ_u)\nelse:\n    logits = h\n"),
        ((8, 1), (21, 1)), "syntax", "`else`", ""),  # each with a hint of its own
    "not-utf8": (
        edit(DSL, "x + x", "x + x " + BAD_BYTE), edit(NOTATION, "Linear(h, θ_u)", "Linear(h, θ_u) " + BAD_BYTE),
        ((7, 15), (20, 25)), "encoding", "unexpected character", "the file contains bytes that are not UTF-8 text"),
}


def errors(name: str, text: str):
    source = Source.from_bytes(name, text.encode("utf-8", "surrogateescape"))
    return [d for d in analyze(source).diagnostics if d.severity == "error"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_both_notations_report_the_same_class_of_syntax_error_alike(case):
    dsl_text, notation_text, places, code, message, hint = CASES[case]
    for (kind, text), (line, col) in zip((("dsl", dsl_text), ("notation", notation_text)), places):
        found = errors(f"{kind}.snf", text)
        assert len(found) == 1, (kind, [(d.span.line, d.span.col, d.message) for d in found])
        d = found[0]
        assert (d.span.line, d.span.col, d.code) == (line, col, code), (kind, d)
        assert message in d.message, (kind, d.message)
        if hint is None:
            assert d.hint is None, (kind, d.hint)
        else:
            assert d.hint and hint in d.hint, (kind, d.hint)


def test_misplaced_else_names_what_each_notation_offers():
    dsl_text, notation_text, *_ = CASES["misplaced-else"]
    (dsl,), (notation,) = errors("dsl.snf", dsl_text), errors("notation.snf", notation_text)
    assert dsl.message == "`else` without a matching `if` block"
    assert notation.message == "`else`: the notation has no conditionals"

