"""Long lines of a generated module, wrapped as a careful hand would: a trailing comment that
makes a line too long goes on its own line above it; a statement still too long breaks after the
commas of its widest bracket, continuation lines aligned with the bracket (or indented under the
statement when the bracket opens far right). A line of a statement that already spans lines is
wrapped the same way, inside the brackets it continues (a table's long row). A pure function of the
text, so the output stays deterministic; strings are left as they are."""

from __future__ import annotations

import io
import tokenize

LIMIT = 120  # what a line may take; the bound is 160, nanoGPT's own lines stay near 100
DATA_LIMIT = 160  # a line of a data table (CHECKPOINTS): one entry a line reads better than code's width
_OPEN, _CLOSE = "([{", ")]}"
_BINARY = {"+", "-", "*", "/", "//", "%", "@", "if", "else", "and", "or"}


def wrap(source: str, limit: int = LIMIT) -> str:
    for _ in range(8):  # a line one pass makes may still be long: the next wraps it (idempotent)
        lines = source.split("\n")
        if not any(len(line) > limit for line in lines):
            break
        out: dict[int, list[str]] = {}  # 0-based line -> its replacement
        for row, tokens in _lines(source):
            if len(lines[row]) > limit:
                out[row] = _wrap_statement(lines[row], tokens, limit)
        wrapped = "\n".join(x for i, line in enumerate(lines) for x in out.get(i, [line]))
        if wrapped == source:
            break
        source = wrapped
    return source


def _lines(source: str):
    """(row, tokens) of each physical line: a statement's one line, or one line of a statement over
    several (not a line a token, such as a triple-quoted string, continues onto)."""
    tokens: list = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER):
                if tokens and tokens[0].start[0] == tokens[-1].end[0] \
                        and all(t.start[0] == t.end[0] for t in tokens):
                    yield tokens[0].start[0] - 1, tokens
                tokens = []
            elif tok.type not in (tokenize.INDENT, tokenize.DEDENT):
                tokens.append(tok)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return


def _wrap_statement(line: str, tokens: list, limit: int) -> list[str]:
    indent = line[:len(line) - len(line.lstrip())]
    comment = tokens[-1].string if tokens[-1].type == tokenize.COMMENT else None
    code_tokens = tokens[:-1] if comment else tokens
    if not code_tokens:  # a comment on a line of its own stays as it is
        return [line]
    code = line[:code_tokens[-1].end[1]].rstrip() if code_tokens else line
    above = [indent + comment] if comment else []
    if len(code) <= limit:
        return above + [code]
    pair = _widest_bracket(code_tokens)
    if pair is None or not (pair[2] or pair[3]):
        return above + [code]
    opener, closer, commas, operators = pair
    pieces, start = [], opener + 1
    if commas:  # after each comma
        for c in commas:
            pieces.append(code[start:c + 1].strip())
            start = c + 1
    else:  # before each operator
        for c in operators:
            pieces.append(code[start:c].strip())
            start = c
    pieces.append(code[start:].strip())  # the last part, the closer and what follows it
    head = code[:opener + 1]
    if opener + 1 <= limit // 2:  # aligned with the bracket
        cont, current = " " * (opener + 1), head + pieces[0]
    else:  # the bracket opens far right: the arguments go under the statement
        above.append(head)
        cont = indent + " " * 8
        current = cont + pieces[0]
    out = []
    for piece in pieces[1:]:
        if len(current) + 1 + len(piece) > limit:
            out.append(current)
            current = cont + piece
        else:
            current += " " + piece
    return above + out + [current]


def _widest_bracket(tokens: list):
    """(opener column, closer column, its top-level commas' columns, its top-level binary operators'
    columns) of the widest of the outermost brackets that close on the line; where that one has
    nothing to break at (`nn.Parameter(torch.empty(a, b))`'s outer bracket), of its widest bracket
    inside, and so on."""
    stack: list[int] = []
    closed: dict[int, tuple] = {}  # opener -> (closer, parent opener or None)
    commas: dict[int, list[int]] = {}
    operators: dict[int, list[int]] = {}
    previous = None
    for tok in tokens:
        binary = previous is not None and (previous.type in (tokenize.NAME, tokenize.NUMBER, tokenize.STRING)
                                           or previous.string in _CLOSE)
        if tok.type == tokenize.OP and tok.string in _OPEN:
            stack.append(tok.start[1])
            commas[tok.start[1]], operators[tok.start[1]] = [], []
        elif tok.type == tokenize.OP and tok.string in _CLOSE and stack:
            start = stack.pop()
            closed[start] = (tok.start[1], stack[-1] if stack else None)
        elif tok.string == "," and stack:
            commas[stack[-1]].append(tok.start[1])
        elif stack and binary and tok.string in _BINARY:
            operators[stack[-1]].append(tok.start[1])
        previous = tok
    # on a line inside a bracket the statement continues (a table's row): its outermost are those
    # one level in, whose parent never closes here
    parent = None if any(p is None for _, p in closed.values()) else next(
        (p for _, p in closed.values() if p not in closed), None)
    while True:
        children = [o for o, (_, p) in closed.items() if p == parent]
        if not children:
            return None
        best = max(children, key=lambda o: (closed[o][0] - o, -o))
        if commas[best] or operators[best]:
            return best, closed[best][0], commas[best], operators[best]
        parent = best
