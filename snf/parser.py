"""Stage 1: text -> syntax IR (`ir.Spec`), with Lark. Parse errors become diagnostics."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError
from lark.indenter import DedentError, Indenter

from . import ir
from .diagnostics import Reporter
from .resources import read_resource
from .source import Source, Span

MAX_DEPTH = 48  # bracket nesting; deeper specs are refused, not crashed on
MAX_NODE_DEPTH = 100  # syntax-tree depth (operator chains, blocks); later stages recurse over it
MAX_BYTES = 2_000_000


class SNFIndenter(Indenter):
    NL_type = "_NL"
    OPEN_PAREN_types = ["LPAR", "LSQB"]
    CLOSE_PAREN_types = ["RPAR", "RSQB"]
    INDENT_type = "_INDENT"
    DEDENT_type = "_DEDENT"
    tab_len = 8


@functools.lru_cache(maxsize=None)
def _lark(grammar: str) -> Lark:
    return Lark(read_resource("grammars", grammar), parser="lalr", postlex=SNFIndenter(),
                propagate_positions=True, maybe_placeholders=True, cache=False)


def _span(meta) -> Span:
    return Span(meta.line, meta.column, meta.end_line, meta.end_column)


def _tok_span(tok: Token) -> Span:
    return Span(tok.line, tok.column, tok.end_line or tok.line, tok.end_column or tok.column + len(tok))


@v_args(meta=True, inline=True)
class AtomTransformer(Transformer):
    """Names, numbers and calls, shared by both notations' transformers (snf/notation.py too)."""

    def __init__(self, reporter: Reporter):
        super().__init__()
        self.r = reporter

    def name(self, meta, tok):
        return ir.Name(str(tok), _tok_span(tok))

    def int_lit(self, meta, tok):
        if len(tok) > 18:
            self.r.error("too-large", f"integer literal {str(tok)[:20]}... is too large", _tok_span(tok))
            return ir.Num(0, _tok_span(tok))
        return ir.Num(int(tok), _tok_span(tok))

    def float_lit(self, meta, tok):
        value = float(tok)
        if value in (float("inf"), float("-inf")):
            self.r.error("too-large", f"float literal {str(tok)[:20]} overflows", _tok_span(tok))
            value = 0.0
        return ir.Num(value, _tok_span(tok))

    def call(self, meta, func, args=None):
        if not isinstance(func, ir.Name):
            self.r.error("syntax", "only a named operation can be called", _span(meta))
            func = ir.Name("?", _span(meta))
        pos, kws = [], []
        for a in args or ():
            if isinstance(a, ir.Keyword):
                kws.append(a)
            elif kws:
                self.r.error("syntax", "a positional argument follows a keyword argument", a.span)
            else:
                pos.append(a)
        return ir.Call(func.id, tuple(pos), tuple(kws), _span(meta), func.span)

    def args(self, meta, *items):
        return list(items)


@v_args(meta=True, inline=True)
class _ToIR(AtomTransformer):
    """Lark tree -> syntax nodes. Callbacks are named after grammar rules."""

    def str_lit(self, meta, tok):
        raw = str(tok)[1:-1]
        return ir.Str(raw.encode("utf-8", "surrogatepass").decode("unicode_escape", "replace")
                      if "\\" in raw else raw, _tok_span(tok))

    def true_lit(self, meta):
        return ir.Const(True, _span(meta))

    def false_lit(self, meta):
        return ir.Const(False, _span(meta))

    def none_lit(self, meta):
        return ir.Const(None, _span(meta))

    def list_lit(self, meta, items=None):
        return ir.ListExpr(tuple(items or ()), _span(meta))

    # --- operators
    def binop(self, meta, left, op, right):
        return ir.BinOp(str(op), left, right, _span(meta))

    def unary(self, meta, op, operand):
        return ir.Unary(str(op), operand, _span(meta))

    def not_op(self, meta, operand):
        return ir.Unary("not", operand, _span(meta))

    def compare(self, meta, left, op, right):
        return ir.Compare(str(op), left, right, _span(meta))

    def or_op(self, meta, left, right):
        return ir.BoolOp("or", left, right, _span(meta))

    def and_op(self, meta, left, right):
        return ir.BoolOp("and", left, right, _span(meta))

    def cond_expr(self, meta, body, test, orelse):
        return ir.Cond(body, test, orelse, _span(meta))

    def guard_expr(self, meta, body, test):
        return ir.Cond(body, test, None, _span(meta))

    def exists(self, meta, value):
        if not isinstance(value, ir.Name):
            self.r.error("syntax", "`exists` applies to the name of an optional input", _span(meta))
            value = ir.Name("?", _span(meta))
        return ir.Exists(value, _span(meta))

    # --- postfix

    def kwarg(self, meta, name, value):
        return ir.Keyword(str(name), value, _tok_span(name).to(value.span))

    def subscript(self, meta, value, index):
        return ir.Subscript(value, tuple(index), _span(meta))

    def subscripts(self, meta, *items):
        return list(items)

    def slice_item(self, meta, lo, hi):
        return ir.SliceExpr(lo, hi, _span(meta))

    def attribute(self, meta, value, name):
        return ir.Attribute(value, str(name), _span(meta))

    # --- statements
    def let_stmt(self, meta, name, value):
        return ir.Let(str(name), value, _span(meta).to(value.span), _tok_span(name))

    def assign_stmt(self, meta, name, index, value):
        return ir.Assign(str(name), tuple(index) if index is not None else None, value,
                         _span(meta).to(value.span), _tok_span(name))

    def block_cond(self, meta, test, body, orelse):
        return ir.Cond(body, test, orelse, _span(meta))

    def if_stmt(self, meta, test, *rest):
        body = [s for s in rest if not isinstance(s, tuple)]
        orelse = next((s for s in rest if isinstance(s, tuple)), ())
        return ir.If(test, tuple(body), orelse, _span(meta))

    def else_block(self, meta, *stmts):
        return tuple(stmts)

    def assert_stmt(self, meta, test):
        return ir.Assert(test, _span(meta).to(test.span))

    def for_stmt(self, meta, var, lo, _range, hi, *body):
        return ir.For(str(var), lo, hi, tuple(body), _span(meta))

    # --- sections
    def typed_decl(self, meta, name, type_, *rest):
        optional = any(isinstance(t, Token) and t.type == "OPTIONAL" for t in rest)
        where = next((w for w in rest if isinstance(w, list)), [])
        rest = [x for x in rest if not isinstance(x, (Token, list))]
        value = rest[0] if rest else None
        condition = None
        end = value.span if value is not None else type_.span
        # `T if c else None` is a conditional declaration; a trailing `= v` arrives inside `test`.
        if isinstance(type_, ir.Cond) and isinstance(type_.orelse, ir.Const) and type_.orelse.value is None:
            condition, type_ = type_.test, type_.body
        return ir.Decl("", str(name), type_, value, optional, condition, tuple(where),
                       _tok_span(name).to(end), _tok_span(name))

    def derived_decl(self, meta, name, value):
        return ir.Decl("", str(name), None, value, span=_tok_span(name).to(value.span), name_span=_tok_span(name))

    def where_block(self, meta, *items):
        return list(items)

    def where_item(self, meta, name, value):
        return ir.Decl("where", str(name), None, value, span=_span(meta), name_span=_tok_span(name))

    def section_kind(self, meta, tok):
        return str(tok)

    def section(self, meta, kind, *decls):
        return ("section", str(kind), [ir.replace(d, section=str(kind)) for d in decls])

    def map_entry(self, meta, name, layer_var, source):
        return ir.MapEntry("", str(name), str(layer_var) if layer_var is not None else None, source,
                           _tok_span(name).to(source.span))

    def checkpoint(self, meta, fmt, *entries):
        return ("checkpoint", str(fmt), [ir.replace(e, fmt=str(fmt)) for e in entries])

    def start(self, meta, *items):
        return list(items)


_FRIENDLY = {
    "NAME": "a name", "INT": "an integer", "FLOAT": "a number", "STRING": "a string",
    "_NL": "end of line", "_INDENT": "an indented block", "_DEDENT": "end of the block",
    "LPAR": "'('", "RPAR": "')'", "LSQB": "'['", "RSQB": "']'", "COMMA": "','", "COLON": "':'",
    "EQUAL": "'='", "SECTION": "a section header", "OPTIONAL": "'?'", "RANGE": "'..'",
    "COMP_OP": "a comparison", "ADD_OP": "'+' or '-'", "MUL_OP": "an operator", "POW_OP": "'**'",
    "DOT": "'.'", "$END": "end of file", "LESSTHAN": "'<'", "MINUS": "'-'",
}


_KEYWORDS = {"TRUE": "'True'", "FALSE": "'False'", "NONE": "'None'"}


def _describe(expected) -> str:
    names = sorted({_FRIENDLY.get(e, _KEYWORDS.get(e, repr(e.lower())) if e.isalpha() else e) for e in expected})
    if not names:
        return ""
    if len(names) > 6:
        names = names[:6] + ["..."]
    return "; expected " + ", ".join(names)


def _token_text(tok: Token) -> str:
    if tok.type == "_NL":
        return "end of line"
    if tok.type in ("_INDENT", "_DEDENT"):
        return "a change of indentation"
    if tok.type == "$END":
        return "end of file"
    text = str(tok)
    return repr(text if len(text) <= 20 else text[:20] + "...")


def _parse_error(e: UnexpectedInput, src: Source, r: Reporter) -> None:
    if isinstance(e, UnexpectedToken):
        tok = e.token
        line = tok.line if tok.line and tok.line > 0 else len(src.lines)
        col = tok.column if tok.column and tok.column > 0 else 1
        if tok.type == "_NL":
            # report just after the code of the line that ended too early (before any comment)
            line = max(line, 1)
            col = len(src.line(line)[:col - 1].rstrip()) + 1
            if col == 1 and line > 1:
                line -= 1
                col = len(src.line(line)) + 1
        unclosed = _unclosed_bracket(src.text, tok) if tok.type not in ("_NL", "$END") else None
        if unclosed is not None:
            (bline, bcol, ch), closer = unclosed, {"(": ")", "[": "]"}[unclosed[2]]
            r.error("syntax", f"`{ch}` is never closed", Span(bline, bcol, bline, bcol + 1),
                    f"add the matching `{closer}`; the parser gave up at {_token_text(tok)} (line {line})")
            return
        width = len(str(tok)) if tok.type not in ("_NL", "_INDENT", "_DEDENT", "$END") else 1
        span = Span(line, col, line, col + max(width, 1))
        hint = None
        if tok.type == "_INDENT":
            hint = "this line is indented more than the block it belongs to"
        elif "_INDENT" in e.expected or _after_colon_line(src, line, col):
            hint = "a line ending in ':' must be followed by an indented block"
        keyword = src.line(line)[:col - 1].strip()
        if keyword in ("else", "elif") and tok.type != "_NL":
            r.error("syntax", f"`{keyword}` without a matching `if` block", Span(line, col - len(keyword) - (
                    len(src.line(line)[:col - 1]) - len(src.line(line)[:col - 1].rstrip())), line, col),
                    "`else:` goes at the indentation of its `if`, right after the `if` block"
                    if keyword == "else" else "SNF has no `elif`; nest an `if` inside `else:`")
            return
        r.error("syntax", f"unexpected {_token_text(tok)}{_describe(e.expected)}", span, hint)
    elif isinstance(e, UnexpectedCharacters):
        ch = src.line(e.line)[e.column - 1:e.column] or "?"
        what = f"character {ch!r}" if ch.isprintable() else f"character U+{ord(ch):04X}"
        hint = "the file contains bytes that are not UTF-8 text" if ch == "\ufffd" else None
        code = "encoding" if hint else "syntax"
        message = f"unexpected {what}"
        if ch in "\"'":
            message = f"unexpected {what}: the string it starts is not closed on this line"
        r.error(code, message, Span(e.line, e.column, e.line, e.column + 1), hint)
    elif isinstance(e, UnexpectedEOF):
        n = max(len(src.lines), 1)
        r.error("syntax", f"unexpected end of file{_describe(e.expected)}", Span(n, 1, n, 2))
    else:  # pragma: no cover - lark's other input errors
        r.error("syntax", str(e).splitlines()[0], Span(getattr(e, "line", 1), getattr(e, "column", 1),
                                                        getattr(e, "line", 1), getattr(e, "column", 1) + 1))


def _brackets(text: str):
    """(line, col, char) of every bracket outside comments and string literals."""
    line, col, quote, comment = 1, 0, None, False
    chars = iter(text)
    for ch in chars:
        col += 1
        if ch == "\n":
            line, col, quote, comment = line + 1, 0, None, False
        elif comment:
            continue
        elif quote:
            if ch == "\\":
                nxt = next(chars, "")
                col += 1
                if nxt == "\n":
                    line, col, quote = line + 1, 0, None
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            comment = True
        elif ch in "()[]":
            yield line, col, ch


def _after_colon_line(src: Source, line: int, col: int) -> bool:
    """Whether the error is at the first token of a line that follows a line ending in ':'."""
    if src.line(line)[:col - 1].strip():
        return False
    for n in range(line - 1, 0, -1):
        code = src.line(n).split("#", 1)[0].rstrip()
        if code:
            return code.endswith(":")
    return False


def _nesting_too_deep(text: str) -> tuple[int, int] | None:
    depth = 0
    for line, col, ch in _brackets(text):
        if ch in "([":
            depth += 1
            if depth > MAX_DEPTH:
                return line, col
        else:
            depth = max(depth - 1, 0)
    return None


def _unclosed_bracket(text: str, tok) -> tuple[int, int, str] | None:
    """The innermost bracket open where the parser failed at `tok`, the first token of a line (a new
    statement swallowed by the open bracket), when that bracket is never closed in the whole file."""
    lines = text.split("\n")
    if not tok.line or not tok.column or tok.line > len(lines) or lines[tok.line - 1][:tok.column - 1].strip():
        return None
    stack, open_at_error = [], None
    for line, col, ch in _brackets(text):
        if open_at_error is None and (line, col) >= (tok.line, tok.column):
            open_at_error = list(stack)
        if ch in "([":
            stack.append((line, col, ch))
        elif stack:
            stack.pop()
    if open_at_error is None:
        open_at_error = list(stack)
    never_closed = set(stack)
    candidates = [b for b in open_at_error if b in never_closed]
    return candidates[-1] if candidates else None


def parse(src: Source, r: Reporter) -> ir.Spec | None:
    """Parse one spec; on failure report and return None."""
    text = src.text
    if len(text) > MAX_BYTES:
        r.error("too-large", f"the spec is larger than {MAX_BYTES} bytes", Span(1, 1, 1, 2))
        return None
    deep = _nesting_too_deep(text)
    if deep:
        r.error("too-large", f"brackets nest more than {MAX_DEPTH} deep", Span(deep[0], deep[1], deep[0], deep[1] + 1))
        return None
    if _first_code_line(text).startswith("SNF_MODEL"):
        from .notation import parse_model_notation
        return parse_model_notation(src, r)
    try:
        tree = _lark("snf.lark").parse(text + "\n")
    except UnexpectedInput as e:
        _parse_error(e, src, r)
        return None
    except DedentError:
        line = _dedent_line(text)
        r.error("indent", "unindent does not match any outer indentation level", Span(line, 1, line, 2),
                "indent this line like the block it belongs to")
        return None
    try:
        items = _ToIR(r).transform(tree)
    except (RecursionError, VisitError) as e:
        if isinstance(e, VisitError) and not isinstance(e.orig_exc, RecursionError):
            raise
        r.error("too-large", "the spec nests too deeply", Span(1, 1, 1, 2))
        return None
    decls, body, maps = [], [], []
    for item in items:
        if isinstance(item, tuple) and item[0] == "section":
            decls += item[2]
        elif isinstance(item, tuple) and item[0] == "checkpoint":
            maps += item[2]
        else:
            body.append(item)
    deep = _too_deep(decls + body + maps)
    if deep is not None:
        r.error("too-large", f"expressions and blocks nest more than {MAX_NODE_DEPTH} deep here", deep.span,
                "split the expression with `let` values")
        return None
    return ir.Spec(src.path, src.sha256, _model_name(src.path), tuple(decls), tuple(body), tuple(maps))


def _too_deep(roots: list):
    """The first node nested more than MAX_NODE_DEPTH deep (operators, calls, blocks), or None.
    Later stages recurse over the IR, so depth is bounded here, without recursion."""
    stack = [(node, 1) for node in reversed(roots)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NODE_DEPTH and getattr(node, "span", None) is not None and node.span.line:
            return node
        if not dataclasses.is_dataclass(node) or isinstance(node, Span):
            continue
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            for child in (value if isinstance(value, (tuple, list)) else (value,)):
                if dataclasses.is_dataclass(child) and not isinstance(child, Span):
                    stack.append((child, depth + 1))
    return None


def _dedent_line(text: str) -> int:
    """The first line whose indentation matches no enclosing level (for DedentError)."""
    stack = [0]
    depth = 0
    for n, raw in enumerate(text.split("\n"), 1):
        stripped = raw.lstrip(" \t")
        if depth == 0 and stripped and not stripped.startswith("#"):
            width = len(raw.expandtabs(8)) - len(stripped.expandtabs(8)) if "\t" in raw else len(raw) - len(stripped)
            if width > stack[-1]:
                stack.append(width)
            elif width < stack[-1]:
                while stack and width < stack[-1]:
                    stack.pop()
                if not stack or stack[-1] != width:
                    return n
        depth += raw.count("(") + raw.count("[") - raw.count(")") - raw.count("]")
        depth = max(depth, 0)
    return 1


def _first_code_line(text: str) -> str:
    """The first line that is neither blank nor a comment (which notation a file is in)."""
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return stripped
    return ""


def _model_name(path: str) -> str:
    stem = Path(path).name.split(".")[0] or "model"
    return stem
