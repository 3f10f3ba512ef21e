"""The parser: SNF text -> syntax IR with spans, and syntax errors as located diagnostics."""

from __future__ import annotations

import textwrap

import pytest

from conftest import REPO, snfc, write_spec
from snf import ir
from snf.diagnostics import Reporter
from snf.frontend import first_code_line, lark_common, parse
from snf.resources import read_resource
from snf.source import Source, Span


def parse_ok(text: str) -> ir.Spec:
    src = Source.from_text("t.snf", textwrap.dedent(text))
    r = Reporter(src)
    spec = parse(src, r)
    assert spec is not None and not r.items, [d.message for d in r.items]
    return spec


def parse_errors(text: str) -> list:
    src = Source.from_text("t.snf", text)
    r = Reporter(src)
    spec = parse(src, r)
    assert spec is None or r.has_errors
    return r.sorted()


# ------------------------------------------------------------------------ valid syntax

def test_sections_declarations_and_defaults():
    spec = parse_ok("""
        param:
          n : int = 4          # a comment
          p : float = 0.5
          flag : bool = True
          D = 2 * n
        input:
          idx : Tensor([B, T], int64)
          past : Tensor([B, T_past, D], float32)?
        parameter:
          w : Tensor([D, D], float32) = normal(std=0.02)
          b : Tensor([D], float32) if flag else None
        output:
          y : Tensor([B, T_all, D], float32)
            where T_all = T_past + T
        """)
    by_name = {d.name: d for d in spec.decls}
    assert [d.section for d in spec.decls] == ["param"] * 4 + ["input"] * 2 + ["parameter"] * 2 + ["output"]
    assert by_name["n"].value == ir.Num(4, by_name["n"].value.span)
    assert by_name["D"].type is None and isinstance(by_name["D"].value, ir.BinOp)
    assert by_name["past"].optional and not by_name["idx"].optional
    assert isinstance(by_name["w"].value, ir.Call) and by_name["w"].value.func == "normal"
    b = by_name["b"]
    assert b.condition == ir.Name("flag", b.condition.span)
    assert isinstance(b.type, ir.Call) and b.type.func == "Tensor"
    (where,) = by_name["y"].where
    assert where.name == "T_all" and isinstance(where.value, ir.BinOp)


def test_spans_are_one_based_and_end_exclusive():
    spec = parse_ok("param:\n  n_layer : int = 4\n")
    (d,) = spec.decls
    assert d.name_span == Span(2, 3, 2, 10)


def test_statements():
    spec = parse_ok("""
        let x = f(a, k=1)
        x = g(x) if flag
        x[:, 0:T] = h(x)
        if past exists:
            x = x + 1
        else:
            x = x - 1
        for l in 0..n_layer-1:
            x = layer(x, w[l])
        """)
    let, guarded, setitem, if_, loop = spec.body
    assert isinstance(let, ir.Let) and let.name == "x"
    call = let.value
    assert call.func == "f" and len(call.args) == 1 and call.kwargs[0].name == "k"
    assert isinstance(guarded, ir.Assign) and isinstance(guarded.value, ir.Cond) and guarded.value.orelse is None
    assert isinstance(setitem, ir.Assign) and len(setitem.index) == 2
    assert isinstance(setitem.index[0], ir.SliceExpr) and setitem.index[0].lo is None
    assert isinstance(if_, ir.If) and isinstance(if_.test, ir.Exists) and len(if_.orelse) == 1
    assert isinstance(loop, ir.For) and loop.var == "l" and loop.lo == ir.Num(0, loop.lo.span)
    assert isinstance(loop.hi, ir.BinOp) and loop.hi.op == "-"


def test_indented_conditional_value():
    spec = parse_ok("""
        let k = if past exists:
            concat([past, x], axis=1)
        else: x
        """)
    (let,) = spec.body
    assert isinstance(let.value, ir.Cond)
    assert isinstance(let.value.test, ir.Exists) and let.value.test.name.id == "past"
    assert isinstance(let.value.body, ir.Call) and let.value.orelse == ir.Name("x", let.value.orelse.span)


def test_operator_precedence():
    (let,) = parse_ok("let y = a + b * c // 2 - -d @ e\n").body
    top = let.value
    assert top.op == "-" and top.right.op == "@" and isinstance(top.right.left, ir.Unary)
    plus = top.left
    assert plus.op == "+" and plus.right.op == "//"
    assert plus.right.left.op == "*"  # left-associative


def test_power_operator_is_right_associative():
    (let,) = parse_ok("let y = b * c ** 2 ** 3\n").body
    power = let.value.right
    assert power.op == "**" and power.right.op == "**"


def test_conditions_and_comparisons():
    (let,) = parse_ok("let y = a if n > 0 and not flag or x exists else b\n").body
    cond = let.value
    assert isinstance(cond, ir.Cond)
    assert isinstance(cond.test, ir.BoolOp) and cond.test.op == "or"
    assert cond.test.left.op == "and" and isinstance(cond.test.left.right, ir.Unary)


def test_postfix_shape_transpose_and_slices():
    (let,) = parse_ok("let y = x.shape[1] + w.T[0:n, :]\n").body
    left, right = let.value.left, let.value.right
    assert isinstance(left, ir.Subscript) and isinstance(left.value, ir.Attribute) and left.value.attr == "shape"
    assert isinstance(right, ir.Subscript) and right.value.attr == "T"
    assert [type(i) for i in right.index] == [ir.SliceExpr, ir.SliceExpr]


def test_calls_span_lines_inside_brackets_and_allow_trailing_commas():
    (let,) = parse_ok("""
        let y = f(
            a,
            b=[1, 2,],
        )
        """).body
    assert let.value.func == "f" and len(let.value.kwargs[0].value.items) == 2


def test_literals():
    (let,) = parse_ok("let y = f(1, 2.5, 1e-5, \"s\", 'q', True, False, None)\n").body
    values = [a.value for a in let.value.args]
    assert values == [1, 2.5, 1e-5, "s", "q", True, False, None]


def test_unicode_names_tabs_and_windows_newlines():
    spec = parse_ok("param:\r\n\tbreite : int = 4\r\n\tπ_dim = breite\r\n")
    assert [d.name for d in spec.decls] == ["breite", "π_dim"]


def test_checkpoint_section():
    spec = parse_ok("""
        checkpoint hf:
          w[l] <- split("h.{l}.w", 3, axis=1, index=0).T
          e <- "wte" or "lm_head"
        """)
    m1, m2 = spec.mappings
    assert (m1.fmt, m1.name, m1.layer_var) == ("hf", "w", "l")
    assert isinstance(m1.source, ir.Attribute) and m1.source.attr == "T"
    assert (m2.name, m2.layer_var) == ("e", None) and isinstance(m2.source, ir.BoolOp)


def test_the_repo_specs_parse():
    for path in sorted((REPO / "specs").glob("*.snf")):
        src = Source.read(path)
        r = Reporter(src)
        assert parse(src, r) is not None, path
        assert not r.has_errors, (path, [d.message for d in r.items])


# ------------------------------------------------------------------------ syntax errors (exact text)

SYNTAX_ERRORS = [
    (  # missing ':' after a section name
        "param\n  n : int = 4\n",
        ["t.snf:1:6: error: unexpected end of line; expected ':'  [syntax]",
         "   1 | param",
         "     |      ^"]),
    (  # section body not indented
        "param:\nn : int = 4\n",
        ["t.snf:2:1: error: unexpected 'n'; expected end of line  [syntax]",
         "   2 | n : int = 4",
         "     | ^",
         "  hint: a line ending in ':' must be followed by an indented block"]),
    (  # loop body not indented
        "param:\n  n : int = 4\n\nfor l in 0..n-1:\nlet y = 1\n",
        ["t.snf:5:1: error: unexpected 'let'; expected end of line  [syntax]",
         "   5 | let y = 1",
         "     | ^~~",
         "  hint: a line ending in ':' must be followed by an indented block"]),
    (  # a stray character
        "param:\n  n : int = 4\nlet x = 3 $ 4\n",
        ["t.snf:3:11: error: unexpected character '$'  [syntax]",
         "   3 | let x = 3 $ 4",
         "     |           ^"]),
    (  # positional after keyword
        "let x = relu(a=1, 2)\n",
        ["t.snf:1:19: error: a positional argument follows a keyword argument  [syntax]",
         "   1 | let x = relu(a=1, 2)",
         "     |                   ^"]),
    (  # dedent to a level that was never opened
        "param:\n    n : int = 4\n  m : int = 3\n",
        ["t.snf:3:1: error: unindent does not match any outer indentation level  [indent]",
         "   3 |   m : int = 3",
         "     | ^",
         "  hint: indent this line like the block it belongs to"]),
]


@pytest.mark.parametrize("text,expected", SYNTAX_ERRORS, ids=[
    "section-colon", "section-indent", "loop-indent", "bad-char", "positional-after-kw", "dedent"])
def test_syntax_error_text(tmp_path, text, expected):
    write_spec(tmp_path, text, "t.snf")
    rc, out, err = snfc("check", "t.snf", cwd=tmp_path)
    assert rc == 1
    assert out.splitlines() == expected
    assert err.strip() == "Found 1 error in 1 file"
    assert "Traceback" not in out + err and "internal error" not in err


def test_unexpected_end_of_file(tmp_path):
    write_spec(tmp_path, "param:\n  n : int = 4\n\nlet x = foo(\n", "t.snf")
    rc, out, _ = snfc("check", "t.snf", cwd=tmp_path)
    assert rc == 1
    first, line, caret = out.splitlines()
    assert first.startswith("t.snf:4:12: error: unexpected end of file; expected ")
    assert first.endswith("[syntax]") and "')'" in first
    assert line == "   4 | let x = foo("
    assert caret == "     |            ^"


def test_invalid_utf8_is_an_encoding_error(tmp_path):
    (tmp_path / "t.snf").write_bytes(b"param:\n  n : int = 4\n  m : int = \xff\n")
    rc, out, _ = snfc("check", "t.snf", cwd=tmp_path)
    assert rc == 1
    assert out.splitlines()[0] == "t.snf:3:13: error: unexpected character '\ufffd'  [encoding]"
    assert "hint: the file contains bytes that are not UTF-8 text" in out


def test_deep_nesting_is_refused_not_crashed():
    errors = parse_errors("let x = " + "(" * 200 + "1" + ")" * 200 + "\n")
    assert [d.code for d in errors] == ["too-large"]


def test_only_one_error_per_parse_failure():
    errors = parse_errors("param:\n  n : int = 4\nlet x = 3 $ 4\nlet y = $\n")
    assert len(errors) == 1 and errors[0].span.line == 3


# ------------------------------------------------------------------------ building while parsing

class _Recorder:
    """Parse callbacks that record each rule's name, `meta` positions and children."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def record(meta, *children):
            line = getattr(meta, "line", None)
            where = None if line is lark_common._NOWHERE else (
                line, getattr(meta, "column", None), getattr(meta, "end_line", None), getattr(meta, "end_column", None))
            self.calls.append((name, where, [repr(c) for c in children]))
            return f"{name}#{len(self.calls)}"
        return record


@pytest.fixture(params=["cached", "built"])
def tables(request, monkeypatch):
    """The parser as read from the cache, or as Lark builds it when there is none (its rule names
    are then Tokens, not str)."""
    def fresh():
        lark_common.lark_parser.cache_clear()
        lark_common._tables.cache_clear()
    if request.param == "built":
        monkeypatch.setenv("SNFC_CACHE_DIR", "not-absolute")  # no cache file
        fresh()
        request.addfinalizer(fresh)
    return request.param


@pytest.mark.parametrize("grammar", ["snf.lark", "snf_model.lark"])
def test_callbacks_see_what_a_transformer_of_lark_s_tree_sees(grammar, tables):
    """parse_tree builds while Lark parses; its callbacks get the children and `meta` positions a
    Transformer of Lark's own tree (propagate_positions) gets, rule by rule, in the same order."""
    import lark
    import lark.indenter
    reference = lark.Lark(read_resource("grammars", grammar), parser="lalr", postlex=lark_common.SNFIndenter(),
                          propagate_positions=True, maybe_placeholders=True)

    class Transformer(lark.Transformer):
        def __init__(self, recorder):
            super().__init__()
            self.recorder = recorder

        def __default__(self, data, children, meta):
            return getattr(self.recorder, str(data))(meta if not meta.empty else None, *children)

    notation = grammar == "snf_model.lark"
    texts = [Source.read(p).text + "\n" for p in sorted((REPO / "specs").glob("*.snf"))
             + sorted((REPO / "tests" / "errors").glob("*.snf"))]
    texts = [t for t in texts if first_code_line(t).startswith("SNF_MODEL") == notation]
    assert texts
    for text in texts:
        try:
            tree = reference.parse(text)
        except (lark.exceptions.UnexpectedInput, lark.indenter.DedentError):
            continue
        expected, built = _Recorder(), _Recorder()
        Transformer(expected).transform(tree)
        lark_common.parse_tree(grammar, text, built)
        assert built.calls == expected.calls, text
