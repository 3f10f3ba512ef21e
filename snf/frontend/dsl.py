"""The SNF DSL (docs/language.md): text -> syntax IR (`ir.Spec`), with Lark (grammars/snf.lark)."""

from __future__ import annotations

import dataclasses

from lark import Token

from .. import ir
from ..diagnostics import Reporter
from ..source import Source, Span
from .lark_common import AtomTransformer, model_name, parse_items, span, tok_span

MAX_NODE_DEPTH = 100  # syntax-tree depth (operator chains, blocks); later stages recurse over it

# Keywords where they cannot start: `else` away from its `if` block, and `elif`.
MISPLACED = {
    "else": ("`else` without a matching `if` block",
             "`else:` goes at the indentation of its `if`, right after the `if` block"),
    "elif": ("`elif` without a matching `if` block", "SNF has no `elif`; nest an `if` inside `else:`"),
}


class ToSyntax(AtomTransformer):
    """Parse callbacks -> syntax nodes, named after grammar rules."""

    def true_lit(self, meta):
        return ir.Const(True, span(meta))

    def false_lit(self, meta):
        return ir.Const(False, span(meta))

    def none_lit(self, meta):
        return ir.Const(None, span(meta))

    def list_lit(self, meta, items=None):
        return ir.ListExpr(tuple(items or ()), span(meta))

    # --- operators
    def binop(self, meta, left, op, right):
        return ir.BinOp(str(op), left, right, span(meta))

    def unary(self, meta, op, operand):
        return ir.Unary(str(op), operand, span(meta))

    def not_op(self, meta, operand):
        return ir.Unary("not", operand, span(meta))

    def compare(self, meta, left, op, right):
        return ir.Compare(str(op), left, right, span(meta))

    def or_op(self, meta, left, right):
        return ir.BoolOp("or", left, right, span(meta))

    def and_op(self, meta, left, right):
        return ir.BoolOp("and", left, right, span(meta))

    def cond_expr(self, meta, body, test, orelse):
        return ir.Cond(body, test, orelse, span(meta))

    def guard_expr(self, meta, body, test):
        return ir.Cond(body, test, None, span(meta))

    def exists(self, meta, value):
        if not isinstance(value, ir.Name):
            self.r.error("syntax", "`exists` applies to the name of an optional input", span(meta))
            value = ir.Name("?", span(meta))
        return ir.Exists(value, span(meta))

    # --- postfix
    def subscripts(self, meta, *items):
        return list(items)

    def slice_item(self, meta, lo, hi):
        return ir.SliceExpr(lo, hi, span(meta))

    # --- statements
    def let_stmt(self, meta, name, value):
        return ir.Let(str(name), value, span(meta).to(value.span), tok_span(name))

    def assign_stmt(self, meta, name, index, value):
        return ir.Assign(str(name), tuple(index) if index is not None else None, value,
                         span(meta).to(value.span), tok_span(name))

    def block_cond(self, meta, test, body, orelse):
        return ir.Cond(body, test, orelse, span(meta))

    def if_stmt(self, meta, test, *rest):
        body = [s for s in rest if not isinstance(s, tuple)]
        orelse = next((s for s in rest if isinstance(s, tuple)), ())
        return ir.If(test, tuple(body), orelse, span(meta))

    def else_block(self, meta, *stmts):
        return tuple(stmts)

    def assert_stmt(self, meta, test):
        return ir.Assert(test, span(meta).to(test.span))

    def for_stmt(self, meta, var, lo, _range, hi, *body):
        return ir.For(str(var), lo, hi, tuple(body), span(meta))

    # --- sections
    def typed_decl(self, meta, name, layer_var, type_, *rest):
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
                       tok_span(name).to(end), tok_span(name),
                       None if layer_var is None else (str(layer_var), tok_span(layer_var)))

    def derived_decl(self, meta, name, value):
        return ir.Decl("", str(name), None, value, span=tok_span(name).to(value.span), name_span=tok_span(name))

    def where_block(self, meta, *items):
        return list(items)

    def where_item(self, meta, name, value):
        return ir.Decl("where", str(name), None, value, span=span(meta), name_span=tok_span(name))

    def section_kind(self, meta, tok):
        return str(tok)

    def section(self, meta, kind, *decls):
        return ("section", str(kind), [ir.replace(d, section=str(kind)) for d in decls])

    def map_entry(self, meta, name, layer_var, expert_var, source):
        return ir.MapEntry("", str(name), str(layer_var) if layer_var is not None else None, source,
                           tok_span(name).to(source.span), str(expert_var) if expert_var is not None else None)

    def checkpoint(self, meta, fmt, *entries):
        return ("checkpoint", str(fmt), [ir.replace(e, fmt=str(fmt)) for e in entries])

    def config_set(self, meta, *parts):
        *names, source = parts
        where = tok_span(names[0]).to(tok_span(names[-1]))
        kind = "read" if len(names) == 1 else "write"  # FMT.key <- value: the way back
        return ir.ConfigEntry("", kind, ".".join(map(str, names)), source, None, tok_span(names[0]).to(source.span),
                              where)

    def config_assert(self, meta, test, message=None):
        text = self.str_lit(meta, message).value if message is not None else None
        return ir.ConfigEntry("", "assert", None, test, text, span(meta), test.span)

    def config_map(self, meta, fmt, *entries):
        return ("config", str(fmt), [ir.replace(e, fmt=str(fmt)) for e in entries])

    def start(self, meta, *items):
        return list(items)


def parse_dsl(src: Source, r: Reporter) -> ir.Spec | None:
    """Parse a spec in the DSL; on failure report and return None."""
    items = parse_items(src, r, "snf.lark", MISPLACED, ToSyntax)
    if items is None:
        return None
    decls, body, maps, configs = [], [], [], []
    for item in items:
        if isinstance(item, tuple) and item[0] == "section":
            decls += item[2]
        elif isinstance(item, tuple) and item[0] == "checkpoint":
            maps += item[2]
        elif isinstance(item, tuple) and item[0] == "config":
            configs += item[2]
        else:
            body.append(item)
    return ir.Spec(src.path, src.sha256, model_name(src.path), tuple(decls), tuple(body), tuple(maps),
                   config_maps=tuple(configs))


def too_deep(roots: list):
    """The first node nested more than MAX_NODE_DEPTH deep (operators, calls, blocks), or None.
    Later stages recurse over the IR, so depth is bounded here, without recursion."""
    stack = [(node, 1) for node in reversed(roots)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NODE_DEPTH and getattr(node, "span", None) is not None and node.span.line:
            return node
        for name in _node_fields(type(node)) or ():
            value = getattr(node, name)
            for child in (value if isinstance(value, (tuple, list)) else (value,)):
                if _node_fields(type(child)) is not None:
                    stack.append((child, depth + 1))
    return None


_NODE_FIELDS: dict[type, tuple[str, ...] | None] = {}


def _node_fields(cls: type) -> tuple[str, ...] | None:
    """The field names of a syntax node class (a dataclass other than Span); None for anything else.
    Cached: dataclasses.fields per node was most of this walk's time."""
    try:
        return _NODE_FIELDS[cls]
    except KeyError:
        is_node = dataclasses.is_dataclass(cls) and not issubclass(cls, Span)
        names = _NODE_FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls)) if is_node else None
        return names
