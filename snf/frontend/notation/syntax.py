"""The notation's syntax: its own nodes (sections, operators, transitions, the depth loop) and the
parse callbacks that build them (grammars/snf_model.lark). Expressions are the DSL's syntax nodes
(`ir.Name`, `ir.Call`, ...) where the DSL has one."""

from __future__ import annotations

from dataclasses import dataclass

from ... import ir
from ...source import Span
from ..lark_common import AtomTransformer, span, tok_span


@dataclass(frozen=True)
class Transposed:
    """`k^T` or `kᵀ`: the last two axes swapped."""

    value: ir.Expr
    span: Span


@dataclass(frozen=True)
class Shifted:
    """`tok shifted by 1`: targets for next-token prediction."""

    value: ir.Expr
    by: ir.Expr
    span: Span


@dataclass(frozen=True)
class DomainEntry:
    name: str
    role_word: str
    default: int | None
    span: Span
    name_span: Span
    role_span: Span


@dataclass(frozen=True)
class StateEntry:
    name: str
    count: ir.Expr | None
    set_name: str
    dims: tuple
    span: Span
    name_span: Span
    set_span: Span


@dataclass(frozen=True)
class FieldEntry:
    name: str
    set_name: str
    dims: tuple
    span: Span


@dataclass(frozen=True)
class ParamEntry:
    name: str
    count: ir.Expr | None
    whole: FieldEntry | None  # `θ_pos ∈ ℝ[P, D]`: a declared shape
    fields: tuple  # FieldEntry per declared field of a group
    span: Span
    name_span: Span


@dataclass(frozen=True)
class OperatorDef:
    name: str
    params: tuple
    body: tuple
    span: Span
    name_span: Span


@dataclass(frozen=True)
class TransitionDef:
    name: str
    body: tuple
    span: Span
    name_span: Span


@dataclass(frozen=True)
class Return:
    value: ir.Expr
    span: Span


@dataclass(frozen=True)
class Apply:
    name: str
    span: Span


@dataclass(frozen=True)
class ForBlock:
    var: str
    lo: ir.Expr
    hi: ir.Expr
    body: tuple
    span: Span
    var_span: Span


@dataclass(frozen=True)
class LossDef:
    value: ir.Expr
    span: Span


@dataclass(frozen=True)
class OutputEntry:
    name: str
    span: Span


@dataclass(frozen=True)
class Section:
    kind: str  # Domain | State | Parameters | Output | Init
    items: tuple
    span: Span


def block_span(meta, items) -> Span:
    """A block from its header to the end of its last item (not the newlines that follow)."""
    start = Span(meta.line, meta.column, meta.line, meta.column + 1)
    last = items[-1] if items else None
    return start.to(last.span if last is not None else None)


OPERATORS = {"−": "-", "·": "*", "×": "*"}


class ToNotation(AtomTransformer):
    """Parse callbacks -> notation nodes (DSL syntax nodes where the DSL has one), named after
    grammar rules."""

    def binop(self, meta, left, op, right):
        return ir.BinOp(OPERATORS.get(str(op), str(op)), left, right, span(meta))

    def neg(self, meta, op, operand):
        return ir.Unary(OPERATORS.get(str(op), str(op)), operand, span(meta))

    def sqrt(self, meta, op, operand):
        return ir.Call("√", (operand,), (), span(meta), tok_span(op))

    def power(self, meta, base, caret, exponent):
        if isinstance(exponent, ir.Name) and exponent.id == "T":
            return Transposed(base, span(meta))
        return ir.BinOp("**", base, exponent, span(meta))

    def transpose(self, meta, base, mark):
        return Transposed(base, span(meta))

    def shifted(self, meta, value, by):
        return Shifted(value, by, span(meta))

    def exprs(self, meta, *items):
        return tuple(items)

    def line_span(self, meta) -> Span:
        """A one-line entry, up to the end of its text (not its comment or the newline)."""
        text = self.r.source.line(meta.line)
        end = len(text.split("#", 1)[0].rstrip()) + 1
        return Span(meta.line, meta.column, meta.line, max(end, meta.column + 1))

    # --- statements
    def assign_stmt(self, meta, name, index, value):
        return ir.Assign(str(name), (index,) if index is not None else None, value,
                         tok_span(name).to(value.span), tok_span(name))

    def return_stmt(self, meta, value):
        return Return(value, block_span(meta, [value]))

    def apply_stmt(self, meta, name):
        return Apply(str(name), tok_span(name))

    def names(self, meta, *toks):
        return tuple((str(t), tok_span(t)) for t in toks)

    # --- sections
    def header(self, meta, name=None):
        return ("header", str(name) if name is not None else None, self.line_span(meta))

    def domain_entry(self, meta, name, role, default):
        value = int(default) if default is not None and len(default) <= 18 else None
        if default is not None and value is None:
            self.r.error("too-large", f"size {str(default)[:20]}... is too large", tok_span(default))
        return DomainEntry(str(name), str(role), value, tok_span(name).to(tok_span(default if default else role)),
                           tok_span(name), tok_span(role))

    def domain(self, meta, *entries):
        return Section("Domain", entries, block_span(meta, entries))

    def state_entry(self, meta, name, count, set_name, dims):
        return StateEntry(str(name), count, str(set_name), tuple(dims or ()), self.line_span(meta), tok_span(name),
                          tok_span(set_name))

    def state(self, meta, *entries):
        return Section("State", entries, block_span(meta, entries))

    def param_entry(self, meta, name, count, set_name, dims):
        whole = None
        if set_name is not None:
            whole = FieldEntry(str(name), str(set_name), tuple(dims or ()), self.line_span(meta))
        return ParamEntry(str(name), count, whole, (), tok_span(name).to(count.span if count else None),
                          tok_span(name))

    def param_group(self, meta, name, count, *fields):
        return ParamEntry(str(name), count, None, fields, tok_span(name).to(count.span if count else None),
                          tok_span(name))

    def field_entry(self, meta, name, set_name, dims):
        return FieldEntry(str(name), str(set_name), tuple(dims or ()), self.line_span(meta))

    def parameters(self, meta, *entries):
        return Section("Parameters", entries, block_span(meta, entries))

    def output_entry(self, meta, name):
        return OutputEntry(str(name), tok_span(name))

    def outputs(self, meta, *entries):
        return Section("Output", entries, block_span(meta, entries))

    def init(self, meta, *stmts):
        return Section("Init", stmts, block_span(meta, stmts))

    def operator(self, meta, name, params, *body):
        return OperatorDef(str(name), tuple(params or ()), body, block_span(meta, body), tok_span(name))

    def transition(self, meta, name, *body):
        return TransitionDef(str(name), body, block_span(meta, body), tok_span(name))

    def for_block(self, meta, var, lo, _range, hi, *body):
        return ForBlock(str(var), lo, hi, body, block_span(meta, body), tok_span(var))

    def loss(self, meta, value):
        return LossDef(value, block_span(meta, [value]))

    def start(self, meta, *items):
        return list(items)
