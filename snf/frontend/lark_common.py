"""What both notations share on top of Lark: the indenter, spans, the parse callbacks that build
syntax nodes while Lark parses, the callbacks for atoms and calls, and one reporter that turns
Lark's parse errors into located `syntax` diagnostics."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Mapping

import lark
from lark import Lark, Token
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.indenter import DedentError, Indenter
from lark.parsers.lalr_analysis import Shift

from .. import ir
from ..diagnostics import Reporter
from ..resources import cache_file, read_resource
from ..source import Source, Span


class SNFIndenter(Indenter):
    NL_type = "_NL"
    OPEN_PAREN_types = ["LPAR", "LSQB"]
    CLOSE_PAREN_types = ["RPAR", "RSQB"]
    INDENT_type = "_INDENT"
    DEDENT_type = "_DEDENT"
    tab_len = 8


@functools.lru_cache(maxsize=None)
def lark_parser(grammar: str) -> Lark:
    """The LALR parser of `grammars/<grammar>`, built once per process, its tables kept between
    runs in the user's cache folder (building them was most of `snfc check`'s time)."""
    text = read_resource("grammars", grammar)
    options = dict(parser="lalr", maybe_placeholders=True)
    # Lark rebuilds a file made with other options: one file per set of them
    cache = cache_file(f"lark-{grammar}", f"{text}\0{lark.__version__}\0{sys.version}\0{sorted(options.items())}")
    return Lark(text, postlex=SNFIndenter(), cache=cache, **options)


# ============================================================================ building while parsing
#
# Lark's default callbacks build a parse tree (with propagate_positions, a position record per
# reduction) that a Transformer then walks: two thirds of parsing time. These callbacks build the
# syntax nodes during the LALR parse instead, and reproduce what the tree gave the transformer:
# the same children, and the same `meta` positions (propagate_positions' rule: a node covers its
# first to its last positioned child, the tokens Lark drops included, and a `?rule` inlined into
# its parent widens that child's extent to the inlined rule's: `(a + b)` covers its brackets).

_NOWHERE = object()  # the position of a rule that matched no token


class _Node:
    """A reduced rule on Lark's value stack: its value, and the text it covers, which is also the
    `meta` its callback gets."""

    __slots__ = ("value", "line", "column", "end_line", "end_column")


def _cover(node: _Node, children: list) -> bool:
    """Give `node` the extent of `children` (tokens and nodes); False when none has a position."""
    for first in children:
        if first is not None and first.line is not _NOWHERE:
            break
    else:
        node.line = _NOWHERE
        return False
    for last in reversed(children):
        if last is not None and last.line is not _NOWHERE:
            break
    node.line, node.column, node.end_line, node.end_column = first.line, first.column, last.end_line, last.end_column
    return True


def _kept(rule) -> tuple[list, int]:
    """Which children Lark passes on, as its ChildFilter does: [(index, splice, Nones before)] and
    the Nones after. A `_rule` child is spliced in; `[x]` left out gives a None (maybe_placeholders)."""
    empty = rule.options.empty_indices
    if empty:
        nones = [len(ones) for ones in "".join(str(int(b)) for b in empty).split("0")]
    else:
        nones = [0] * (len(rule.expansion) + 1)
    kept, pending = [], 0
    for i, sym in enumerate(rule.expansion):
        pending += nones[i]
        if rule.options.keep_all_tokens or not (sym.is_term and sym.filter_out):
            kept.append((i, not sym.is_term and sym.name.startswith("_"), pending))
            pending = 0
    return kept, pending + nones[-1]


@functools.lru_cache(maxsize=None)
def _tables(grammar: str) -> tuple[dict, int, int, tuple]:
    """Lark's LALR table of `grammar` as the driver reads it: state -> {symbol: the next state (a
    shift, or a goto after a reduction), or a reduction: the rule's origin (a `?a: b` rule, where
    b stands for a) or (rule length, rule origin, rule number)}; the start and end states; and
    per rule number (callback name, its length, kept children, Nones after, is `?rule`)."""
    lk = lark_parser(grammar)
    table = lk.parser.parser.parser.parse_table
    start = lk.options.start[0]
    plans = tuple((rule.alias or rule.origin.name, len(rule.expansion), *_kept(rule),
                   not rule.alias and rule.options.expand1) for rule in lk.rules)
    # str(): a freshly built grammar's names are Lark Tokens, and the loop tells a pass-through by its class
    reductions = {rule: str(rule.origin.name) if _passes_through(*plan) else (len(rule.expansion), rule.origin.name, i)
                  for i, (rule, plan) in enumerate(zip(lk.rules, plans))}
    states = {state: {symbol: arg if action is Shift else reductions[arg] for symbol, (action, arg) in row.items()}
              for state, row in table.states.items()}
    return states, table.start_states[start], table.end_states[start], plans


def _passes_through(name: str, length: int, kept: list, trailing: int, inline: bool) -> bool:
    """Whether a rule is `?a: b`: its value is b's, with b's extent."""
    return inline and length == 1 and not trailing and kept == [(0, False, 0)]


def _callback(name: str, length: int, kept: list, trailing: int, inline: bool, method):
    """The parse callback of one grammar rule (not one that passes through: the driver does those);
    `method(meta, *children)` builds its value."""

    def children(s: list) -> list:
        out = []
        for i, splice, nones in kept:
            if nones:
                out += [None] * nones
            if splice:  # the items of a `_rule`, in place (aliasing its list: it is used once)
                if out:
                    out += s[i].value
                else:
                    out = s[i].value
            else:
                out.append(s[i])
        if trailing:
            out += [None] * trailing
        return out

    if name.startswith("_"):  # a rule Lark splices into its parent (`x*`, `x+`): its children
        def splice(s: list):
            node = _Node()
            _cover(node, s)
            node.value = children(s)
            return node
        return splice

    def build(s: list):
        node = _Node()
        covered = _cover(node, s)
        items = children(s)
        if inline and len(items) == 1:
            child = items[0]
            if covered and child.__class__ is _Node:
                child.line, child.column = node.line, node.column
                child.end_line, child.end_column = node.end_line, node.end_column
            return child
        if method is None:
            raise AttributeError(f"no parse callback for the grammar rule {name!r}")
        node.value = method(node, *[c.value if c.__class__ is _Node else c for c in items])
        return node
    return build


class _ParserState:
    """What Lark's lexer reads of the parser: its state, which picks the contextual lexer."""

    __slots__ = ("stack",)

    def __init__(self, stack: list):
        self.stack = stack

    @property
    def position(self) -> int:
        return self.stack[-1]


def parse_tree(grammar: str, text: str, callbacks: object):
    """`text` parsed with `grammar`, each rule's value built by the method of `callbacks` named
    after it (its alias, else the rule). Raises Lark's UnexpectedInput or DedentError.

    The LALR loop is Lark's (ParserState.feed_token) without what costs most per step there: a
    Rule's hash and an assertion comparing it, per reduction."""
    states, start, end, plans = _tables(grammar)
    build = [None if _passes_through(*plan) else _callback(*plan, getattr(callbacks, plan[0], None)) for plan in plans]
    stack, values = [start], []
    parser_state = _ParserState(stack)
    token = None
    for token in lark_parser(grammar).parser._make_lexer_thread(text).lex(parser_state):
        while True:
            row = states[stack[-1]]
            act = row.get(token.type)
            if act is None:
                raise _unexpected(token, row, parser_state)
            if act.__class__ is int:
                stack.append(act)
                values.append(token)
                break
            if act.__class__ is str:  # most reductions: `?test: or_test` and the like
                stack[-1] = states[stack[-2]][act]
            else:
                _reduce(act, stack, values, states, build)
    token = Token.new_borrow_pos("$END", "", token) if token else Token("$END", "", 0, 1, 1)
    while stack[-1] != end:
        row = states[stack[-1]]
        act = row.get("$END")
        if act is None:
            raise _unexpected(token, row, parser_state)
        _reduce(act, stack, values, states, build)
    node = values[-1]
    return node.value if node.__class__ is _Node else node


def _reduce(act: tuple | str, stack: list, values: list, states: dict, build: list) -> None:
    if act.__class__ is str:
        stack[-1] = states[stack[-2]][act]
        return
    size, origin, rule = act
    if size:
        children = values[-size:]
        del stack[-size:]
        del values[-size:]
    else:
        children = []
    values.append(build[rule](children))
    stack.append(states[stack[-1]][origin])


def _unexpected(token: Token, row: dict, parser_state: _ParserState) -> UnexpectedToken:
    return UnexpectedToken(token, {s for s in row if s.isupper()}, state=parser_state, interactive_parser=None)


def span(meta) -> Span:
    return Span(meta.line, meta.column, meta.end_line, meta.end_column)


def tok_span(tok: Token) -> Span:
    return Span(tok.line, tok.column, tok.end_line or tok.line, tok.end_column or tok.column + len(tok))


def model_name(path: str) -> str:
    """A spec's model name: its file name up to the first dot."""
    return Path(path).name.split(".")[0] or "model"


# ============================================================================ parsing and its errors

# Keywords that cannot start where they stand -> (message, hint); per grammar.
Misplaced = Mapping[str, tuple[str, str]]


def parse_items(src: Source, r: Reporter, grammar: str, misplaced: Misplaced, builder: type) -> list | None:
    """`src` parsed with `grammar`, its top items built by a `builder(r)` (callbacks named after the
    grammar's rules); None after reporting a syntax error."""
    reported = len(r.items)
    try:
        return parse_tree(grammar, src.text + "\n", builder(r))
    except UnexpectedInput as e:
        del r.items[reported:]  # what the callbacks reported before the parse failed
        report_parse_error(e, src, r, grammar, misplaced)
        return None
    except DedentError:
        del r.items[reported:]
        line = dedent_line(src.text)
        r.error("indent", "unindent does not match any outer indentation level", Span(line, 1, line, 2),
                "indent this line like the block it belongs to")
        return None


FRIENDLY = {
    "NAME": "a name", "INT": "an integer", "FLOAT": "a number", "STRING": "a string",
    "_NL": "end of line", "_INDENT": "an indented block", "_DEDENT": "end of the block",
    "LPAR": "'('", "RPAR": "')'", "LSQB": "'['", "RSQB": "']'", "COMMA": "','", "COLON": "':'",
    "EQUAL": "'='", "SECTION": "a section header", "OPTIONAL": "'?'", "RANGE": "'..'",
    "COMP_OP": "a comparison", "ADD_OP": "'+' or '-'", "MUL_OP": "an operator", "POW_OP": "'**'",
    "DOT": "'.'", "$END": "end of file", "LESSTHAN": "'<'", "MINUS": "'-'",
    "SQRT": "'√'", "CARET": "'^'", "SUP_T": "'ᵀ'", "_IN": "'∈'",
}


def describe(expected, grammar: str) -> str:
    """`; expected a, b, c` for the terminals Lark expected: friendly names, else a keyword's text."""
    terminals = {t.name: t for t in lark_parser(grammar).terminals}
    names = set()
    for e in expected:
        if e in FRIENDLY:
            names.add(FRIENDLY[e])
        elif e in terminals and terminals[e].pattern.type == "str":
            names.add(repr(terminals[e].pattern.value))
        else:
            names.add(e)
    names = sorted(names)
    if not names:
        return ""
    if len(names) > 6:
        names = names[:6] + ["..."]
    return "; expected " + ", ".join(names)


def token_text(tok: Token) -> str:
    if tok.type == "_NL":
        return "end of line"
    if tok.type in ("_INDENT", "_DEDENT"):
        return "a change of indentation"
    if tok.type == "$END":
        return "end of file"
    text = str(tok)
    return repr(text if len(text) <= 20 else text[:20] + "...")


def report_parse_error(e: UnexpectedInput, src: Source, r: Reporter, grammar: str, misplaced: Misplaced) -> None:
    if isinstance(e, UnexpectedToken):
        unexpected_token(e, src, r, grammar, misplaced)
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
        r.error("syntax", f"unexpected end of file{describe(e.expected, grammar)}", Span(n, 1, n, 2))
    else:  # pragma: no cover - lark's other input errors
        r.error("syntax", str(e).splitlines()[0], Span(getattr(e, "line", 1), getattr(e, "column", 1),
                                                        getattr(e, "line", 1), getattr(e, "column", 1) + 1))


def unexpected_token(e: UnexpectedToken, src: Source, r: Reporter, grammar: str, misplaced: Misplaced) -> None:
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
    unclosed = unclosed_bracket(src.text, tok) if tok.type not in ("_NL", "$END") else None
    if unclosed is not None:
        (bline, bcol, ch), closer = unclosed, {"(": ")", "[": "]"}[unclosed[2]]
        r.error("syntax", f"`{ch}` is never closed", Span(bline, bcol, bline, bcol + 1),
                f"add the matching `{closer}`; the parser gave up at {token_text(tok)} (line {line})")
        return
    width = len(str(tok)) if tok.type not in ("_NL", "_INDENT", "_DEDENT", "$END") else 1
    span = Span(line, col, line, col + max(width, 1))
    hint = None
    if tok.type == "_INDENT":
        hint = "this line is indented more than the block it belongs to"
    elif "_INDENT" in e.expected or after_colon_line(src, line, col):
        hint = "a line ending in ':' must be followed by an indented block"
    before = src.line(line)[:col - 1]
    keyword = before.strip()
    if keyword in misplaced and tok.type != "_NL":
        message, keyword_hint = misplaced[keyword]
        start = col - len(keyword) - (len(before) - len(before.rstrip()))
        r.error("syntax", message, Span(line, start, line, col), keyword_hint)
        return
    r.error("syntax", f"unexpected {token_text(tok)}{describe(e.expected, grammar)}", span, hint)


def brackets(text: str):
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


def after_colon_line(src: Source, line: int, col: int) -> bool:
    """Whether the error is at the first token of a line that follows a line ending in ':'."""
    if src.line(line)[:col - 1].strip():
        return False
    for n in range(line - 1, 0, -1):
        code = src.line(n).split("#", 1)[0].rstrip()
        if code:
            return code.endswith(":")
    return False


def nesting_too_deep(text: str, limit: int) -> tuple[int, int] | None:
    """Where brackets first nest deeper than `limit`, or None."""
    depth = 0
    for line, col, ch in brackets(text):
        if ch in "([":
            depth += 1
            if depth > limit:
                return line, col
        else:
            depth = max(depth - 1, 0)
    return None


def unclosed_bracket(text: str, tok) -> tuple[int, int, str] | None:
    """The innermost bracket open where the parser failed at `tok`, the first token of a line (a new
    statement swallowed by the open bracket), when that bracket is never closed in the whole file."""
    lines = text.split("\n")
    if not tok.line or not tok.column or tok.line > len(lines) or lines[tok.line - 1][:tok.column - 1].strip():
        return None
    stack, open_at_error = [], None
    for line, col, ch in brackets(text):
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


def dedent_line(text: str) -> int:
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


# ============================================================================ the shared callbacks


class AtomTransformer:
    """Names, literals, calls, keyword arguments, subscripts and attributes: the callbacks both
    notations share (named after grammar rules; `parse_tree` calls them with the rule's `meta`
    positions and its children)."""

    def __init__(self, reporter: Reporter):
        self.r = reporter

    def name(self, meta, tok):
        return ir.Name(str(tok), tok_span(tok))

    def int_lit(self, meta, tok):
        if len(tok) > 18:
            self.r.error("too-large", f"integer literal {str(tok)[:20]}... is too large", tok_span(tok))
            return ir.Num(0, tok_span(tok))
        return ir.Num(int(tok), tok_span(tok))

    def float_lit(self, meta, tok):
        value = float(tok)
        if value in (float("inf"), float("-inf")):
            self.r.error("too-large", f"float literal {str(tok)[:20]} overflows", tok_span(tok))
            value = 0.0
        return ir.Num(value, tok_span(tok))

    def str_lit(self, meta, tok):
        raw = str(tok)[1:-1]
        return ir.Str(raw.encode("utf-8", "surrogatepass").decode("unicode_escape", "replace")
                      if "\\" in raw else raw, tok_span(tok))

    def call(self, meta, func, args=None):
        if not isinstance(func, ir.Name):
            self.r.error("syntax", "only a named operation can be called", span(meta))
            func = ir.Name("?", span(meta))
        pos, kws = [], []
        for a in args or ():
            if isinstance(a, ir.Keyword):
                kws.append(a)
            elif kws:
                self.r.error("syntax", "a positional argument follows a keyword argument", a.span)
            else:
                pos.append(a)
        return ir.Call(func.id, tuple(pos), tuple(kws), span(meta), func.span)

    def args(self, meta, *items):
        return list(items)

    def kwarg(self, meta, name, value):
        return ir.Keyword(str(name), value, tok_span(name).to(value.span))

    def subscript(self, meta, value, index):
        return ir.Subscript(value, tuple(index), span(meta))

    def attribute(self, meta, value, name):
        return ir.Attribute(value, str(name), span(meta))
