"""Stage 1 for the SNF_MODEL notation: text -> the DSL's syntax IR (`ir.Spec`).

The notation (docs/notation.md) describes a model as a dynamical system: `Domain:` names the
sizes, `State:` the tensors that evolve (`h[L+1] ∈ ℝ[B,T,D]`), `Parameters:` groups of weights
whose shapes are left implicit, `Operator`s and `Transition`s that are inlined where they are
used, a depth recurrence `For l in [0 .. L-1]: apply Layer_l`, and a `Loss:`.

Lowering happens in three steps:

1. Lark parses the text (grammars/snf_model.lark) and `_ToNotation` builds small notation
   nodes; expressions reuse the DSL's syntax nodes (`ir.Name`, `ir.Call`, ...).
2. `Lowering` walks the program in execution order, inlining operators and transitions, and
   emits DSL statements (`ir.Let`, `ir.Assign`, `ir.For`) that call registry ops. While it
   walks, it gives every tensor a shape whose unknown sizes are unification variables
   (`Sizes`): a parameter's shape is whatever its uses force.
3. Sizes nothing forces get a documented default with an `ambiguous` warning; every
   parameter's inferred shape is reported once (`implicit-shape`), and the declarations are
   emitted. The checker then types the result exactly like a DSL spec.

Every syntax node carries a span into the notation text, so the checker's diagnostics point at
the notation.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, field

from lark import Lark, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.indenter import DedentError

from . import ir
from .diagnostics import Reporter
from .dims import Dim, DimError, FloorDiv, equal
from .parser import AtomTransformer, SNFIndenter, _dedent_line, _span, _tok_span, _token_text
from .resources import read_resource
from .source import Source, Span

# ============================================================================ defaults

# Domain descriptions -> the role of the dim. Run-time dims are bound by the inputs' shapes;
# the others become config params with these defaults (nanoGPT's shakespeare-char config).
ROLE_WORDS = {
    "batch": ("batch", "batch_size"),
    "sequence": ("sequence_position", "sequence", "sequence_length", "seq", "seq_len", "position", "positions",
                 "time", "tokens", "context_position"),
    "embedding": ("embedding_dim", "embedding", "model_dim", "d_model", "hidden", "hidden_dim", "width", "embd",
                  "n_embd", "channels"),
    "heads": ("attention_heads", "heads", "n_head", "num_heads", "head_count"),
    "layers": ("layer_depth", "layers", "depth", "n_layer", "num_layers"),
    "vocab": ("vocab", "vocabulary", "vocab_size", "tokens_vocab"),
    "context": ("context_length", "block_size", "max_sequence", "max_positions", "context"),
}
DEFAULTS = {"embedding": 384, "heads": 6, "layers": 6, "vocab": 65, "context": 256}
RUNTIME_ROLES = ("batch", "sequence")
SETS = {"ℝ": "float32", "R": "float32", "ℕ": "int64", "N": "int64", "ℤ": "int64", "Z": "int64"}
MLP_EXPANSION = 4

# ============================================================================ notation nodes


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


def _block_span(meta, items) -> Span:
    """A block from its header to the end of its last item (not the newlines that follow)."""
    start = Span(meta.line, meta.column, meta.line, meta.column + 1)
    last = items[-1] if items else None
    return start.to(last.span if last is not None else None)


_OPS = {"−": "-", "·": "*", "×": "*"}


@v_args(meta=True, inline=True)
class _ToNotation(AtomTransformer):
    """Lark tree -> notation nodes (DSL syntax nodes where the DSL has one); callbacks are named
    after grammar rules."""

    def str_lit(self, meta, tok):
        return ir.Str(str(tok)[1:-1], _tok_span(tok))

    def binop(self, meta, left, op, right):
        return ir.BinOp(_OPS.get(str(op), str(op)), left, right, _span(meta))

    def neg(self, meta, op, operand):
        return ir.Unary(_OPS.get(str(op), str(op)), operand, _span(meta))

    def sqrt(self, meta, op, operand):
        return ir.Call("√", (operand,), (), _span(meta), _tok_span(op))

    def power(self, meta, base, caret, exponent):
        if isinstance(exponent, ir.Name) and exponent.id == "T":
            return Transposed(base, _span(meta))
        return ir.BinOp("**", base, exponent, _span(meta))

    def transpose(self, meta, base, mark):
        return Transposed(base, _span(meta))

    def shifted(self, meta, value, by):
        return Shifted(value, by, _span(meta))


    def exprs(self, meta, *items):
        return tuple(items)

    def kwarg(self, meta, name, value):
        return ir.Keyword(str(name), value, _tok_span(name).to(value.span))

    def subscript(self, meta, value, index):
        return ir.Subscript(value, tuple(index), _span(meta))

    def attribute(self, meta, value, name):
        return ir.Attribute(value, str(name), _span(meta))

    def line_span(self, meta) -> Span:
        """A one-line entry, up to the end of its text (not its comment or the newline)."""
        text = self.r.source.line(meta.line)
        end = len(text.split("#", 1)[0].rstrip()) + 1
        return Span(meta.line, meta.column, meta.line, max(end, meta.column + 1))

    # --- statements
    def assign_stmt(self, meta, name, index, value):
        return ir.Assign(str(name), (index,) if index is not None else None, value,
                         _tok_span(name).to(value.span), _tok_span(name))

    def return_stmt(self, meta, value):
        return Return(value, _block_span(meta, [value]))

    def apply_stmt(self, meta, name):
        return Apply(str(name), _tok_span(name))

    def names(self, meta, *toks):
        return tuple((str(t), _tok_span(t)) for t in toks)

    # --- sections
    def header(self, meta, name=None):
        return ("header", str(name) if name is not None else None, self.line_span(meta))

    def domain_entry(self, meta, name, role, default):
        value = int(default) if default is not None and len(default) <= 18 else None
        if default is not None and value is None:
            self.r.error("too-large", f"size {str(default)[:20]}... is too large", _tok_span(default))
        return DomainEntry(str(name), str(role), value, _tok_span(name).to(_tok_span(default if default else role)),
                           _tok_span(name), _tok_span(role))

    def domain(self, meta, *entries):
        return Section("Domain", entries, _block_span(meta, entries))

    def state_entry(self, meta, name, count, set_name, dims):
        return StateEntry(str(name), count, str(set_name), tuple(dims or ()), self.line_span(meta), _tok_span(name),
                          _tok_span(set_name))

    def state(self, meta, *entries):
        return Section("State", entries, _block_span(meta, entries))

    def param_entry(self, meta, name, count, set_name, dims):
        whole = None
        if set_name is not None:
            whole = FieldEntry(str(name), str(set_name), tuple(dims or ()), self.line_span(meta))
        return ParamEntry(str(name), count, whole, (), _tok_span(name).to(count.span if count else None),
                          _tok_span(name))

    def param_group(self, meta, name, count, *fields):
        return ParamEntry(str(name), count, None, fields, _tok_span(name).to(count.span if count else None),
                          _tok_span(name))

    def field_entry(self, meta, name, set_name, dims):
        return FieldEntry(str(name), str(set_name), tuple(dims or ()), self.line_span(meta))

    def parameters(self, meta, *entries):
        return Section("Parameters", entries, _block_span(meta, entries))

    def output_entry(self, meta, name):
        return OutputEntry(str(name), _tok_span(name))

    def outputs(self, meta, *entries):
        return Section("Output", entries, _block_span(meta, entries))

    def init(self, meta, *stmts):
        return Section("Init", stmts, _block_span(meta, stmts))

    def operator(self, meta, name, params, *body):
        return OperatorDef(str(name), tuple(params or ()), body, _block_span(meta, body), _tok_span(name))

    def transition(self, meta, name, *body):
        return TransitionDef(str(name), body, _block_span(meta, body), _tok_span(name))

    def for_block(self, meta, var, lo, _range, hi, *body):
        return ForBlock(str(var), lo, hi, body, _block_span(meta, body), _tok_span(var))

    def loss(self, meta, value):
        return LossDef(value, _block_span(meta, [value]))

    def start(self, meta, *items):
        return list(items)


# ============================================================================ parsing


@functools.lru_cache(maxsize=None)
def _lark() -> Lark:
    return Lark(read_resource("grammars", "snf_model.lark"), parser="lalr", postlex=SNFIndenter(),
                propagate_positions=True, maybe_placeholders=True, cache=False)


_FRIENDLY = {
    "NAME": "a name", "INT": "an integer", "FLOAT": "a number", "STRING": "a string", "_NL": "end of line",
    "_INDENT": "an indented block", "_DEDENT": "end of the block", "$END": "end of file", "ADD_OP": "'+' or '-'",
    "MUL_OP": "an operator", "SQRT": "'√'", "CARET": "'^'", "SUP_T": "'ᵀ'", "RANGE": "'..'", "_IN": "'∈'",
}


def _describe(expected, terminals: dict) -> str:
    names = set()
    for e in expected:
        if e in _FRIENDLY:
            names.add(_FRIENDLY[e])
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


def _parse_error(e: UnexpectedInput, src: Source, r: Reporter) -> None:
    terminals = {t.name: t for t in _lark().terminals}
    if isinstance(e, UnexpectedToken):
        tok = e.token
        line = tok.line if tok.line and tok.line > 0 else len(src.lines)
        col = tok.column if tok.column and tok.column > 0 else 1
        if tok.type == "_NL":  # report at the end of the line that ended too early
            line, col = max(line, 1), len(src.line(line)) + 1
            if col == 1 and line > 1:
                line -= 1
                col = len(src.line(line)) + 1
        width = len(str(tok)) if tok.type not in ("_NL", "_INDENT", "_DEDENT", "$END") else 1
        hint = None
        unclosed = _unclosed(src, tok.line or line, tok.column or col)
        if unclosed:
            hint = f"the {unclosed[0]!r} at line {unclosed[1]}, column {unclosed[2]} is never closed"
        elif tok.type == "_INDENT":
            hint = "this line is indented more than the block it belongs to"
        elif "_INDENT" in e.expected:
            hint = "a line ending in ':' must be followed by an indented block"
        r.error("syntax", f"unexpected {_token_text(tok)}{_describe(e.expected, terminals)}",
                Span(line, col, line, col + max(width, 1)), hint)
    elif isinstance(e, UnexpectedCharacters):
        ch = src.line(e.line)[e.column - 1:e.column] or "?"
        what = f"character {ch!r}" if ch.isprintable() else f"character U+{ord(ch):04X}"
        hint = "the file contains bytes that are not UTF-8 text" if ch == "\ufffd" else None
        r.error("encoding" if hint else "syntax", f"unexpected {what}", Span(e.line, e.column, e.line, e.column + 1),
                hint)
    elif isinstance(e, UnexpectedEOF):
        n = max(len(src.lines), 1)
        r.error("syntax", f"unexpected end of file{_describe(e.expected, terminals)}", Span(n, 1, n, 2))
    else:  # pragma: no cover - lark's other input errors
        line, col = getattr(e, "line", 1) or 1, getattr(e, "column", 1) or 1
        r.error("syntax", str(e).splitlines()[0], Span(line, col, line, col + 1))


def _unclosed(src: Source, line: int, col: int) -> tuple | None:
    """The innermost bracket still open before line:col, as (char, line, col), if any."""
    stack = []
    for n, text in enumerate(src.lines[:line], 1):
        text = text.split("#", 1)[0]
        for c, ch in enumerate(text[:col - 1] if n == line else text, 1):
            if ch in "([":
                stack.append((ch, n, c))
            elif ch in ")]" and stack:
                stack.pop()
    return stack[-1] if stack else None


def parse_model_notation(src: Source, r: Reporter) -> ir.Spec | None:
    """Parse and lower an SNF_MODEL text; on failure report and return None."""
    try:
        tree = _lark().parse(src.text + "\n")
    except UnexpectedInput as e:
        _parse_error(e, src, r)
        return None
    except DedentError:
        line = _dedent_line(src.text)
        r.error("indent", "unindent does not match any outer indentation level", Span(line, 1, line, 2),
                "indent this line like the block it belongs to")
        return None
    try:
        items = _ToNotation(r).transform(tree)
        if r.has_errors:
            return None
        spec = Lowering(src, r, items).run()
    except RecursionError:
        r.error("too-large", "the model nests too deeply", Span(1, 1, 1, 2))
        return None
    except DimError as e:
        r.error("too-large", str(e), Span(1, 1, 1, 2))
        return None
    return None if r.has_errors else spec


# ============================================================================ sizes (unification)


class Var:
    """An unknown size. `origin` says where it came from, for defaults and messages."""

    def __init__(self, n: int, origin: "Origin"):
        self.n = n
        self.parent: Var | None = None
        self.value: Dim | None = None
        self.origin = origin
        self.hidden = False  # flows into an activation: an MLP's hidden width

    def __repr__(self) -> str:
        return f"?{self.n}"


@dataclass
class Origin:
    kind: str  # linear-out | table-rows | table-width | free
    span: Span
    text: str  # the notation text of the call, for messages
    in_dim: "Dim | Var | None" = None


@dataclass
class Rel:
    """`whole == heads * part`, from splitting into heads."""

    whole: object
    heads: Dim
    part: object
    span: Span


class Sizes:
    def __init__(self, r: Reporter):
        self.r = r
        self.vars: list[Var] = []
        self.rels: list[Rel] = []

    def var(self, origin: Origin) -> Var:
        v = Var(len(self.vars), origin)
        self.vars.append(v)
        return v

    def find(self, d):
        while isinstance(d, Var):
            if d.value is not None:
                return d.value
            if d.parent is None:
                return d
            d = d.parent
        return d

    def unify(self, a, b) -> bool:
        a, b = self.find(a), self.find(b)
        if a is b:
            return True
        if isinstance(a, Var) and isinstance(b, Var):
            first, second = (a, b) if a.n < b.n else (b, a)
            second.parent = first
            first.hidden = first.hidden or second.hidden
            return True
        if isinstance(a, Var):
            a.value = b
            return True
        if isinstance(b, Var):
            b.value = a
            return True
        return equal(a, b)[0]

    def propagate(self) -> bool:
        """Solve `whole == heads * part` where one side is known; False on a contradiction."""
        ok, changed = True, True
        while changed:
            changed = False
            for rel in self.rels:
                whole, part = self.find(rel.whole), self.find(rel.part)
                if isinstance(whole, Dim) and isinstance(part, Var):
                    self.unify(part, whole // rel.heads)
                    changed = True
                elif isinstance(part, Dim) and isinstance(whole, Var):
                    self.unify(whole, _times(rel.heads, part))
                    changed = True
                elif isinstance(whole, Dim) and isinstance(part, Dim) and not equal(whole, _times(rel.heads, part))[0]:
                    self.r.error("shape-mismatch", f"{show(whole)} cannot be split into {show(rel.heads)} heads of "
                                 f"{show(part)}", rel.span)
                    self.rels.remove(rel)
                    ok = False
                    break
        return ok

    def show(self, d) -> str:
        d = self.find(d)
        return "?" if isinstance(d, Var) else show(d)

    def show_shape(self, shape) -> str:
        return "[" + ", ".join(self.show(d) for d in shape) + "]"


def _times(heads: Dim, part: Dim) -> Dim:
    """heads * part, reading `heads * (X // heads)` as X (split into heads, then merged)."""
    if len(part.terms) == 1:
        mono, coeff = part.terms[0]
        if coeff == 1 and len(mono) == 1 and mono[0][1] == 1 and isinstance(mono[0][0], FloorDiv) \
                and mono[0][0].den == heads:
            return mono[0][0].num
    return heads * part


def show(d: Dim) -> str:
    return d.render()


def dim_to_expr(d: Dim, span: Span) -> ir.Expr:
    """A symbolic size as a DSL expression, every node at `span`."""
    def atom(a) -> ir.Expr:
        if isinstance(a, str):
            return ir.Name(a, span)
        return ir.BinOp("//", dim_to_expr(a.num, span), dim_to_expr(a.den, span), span)

    out = None
    for mono, coeff in d.terms:
        factors = [atom(a) for a, e in mono for _ in range(e)]
        mag = abs(coeff)
        term = None
        if mag != 1 or not factors:
            term = ir.Num(int(mag), span)
        for f in factors:
            term = f if term is None else ir.BinOp("*", term, f, span)
        if out is None:
            out = ir.Unary("-", term, span) if coeff < 0 else term
        else:
            out = ir.BinOp("-" if coeff < 0 else "+", out, term, span)
    return out if out is not None else ir.Num(0, span)


@dataclass(frozen=True)
class _Hole:
    """A size in an emitted expression that is known only after unification."""

    size: object
    span: Span


# ============================================================================ values


@dataclass
class TVal:
    """A tensor: its DSL expression and its shape (Dims and Vars).

    `heads` marks a value split into attention heads: its notional shape is [B, H, T, hd], as
    in the notation's `q @ k^T`, while its DSL value is [B, T, H, hd], flash_attention's layout.
    """

    expr: ir.Expr
    shape: tuple
    dtype: str
    span: Span
    heads: bool = False


@dataclass
class SVal:
    """A scalar: a size (`dim` set) or a number."""

    expr: ir.Expr
    kind: str  # int | float | str | loopvar
    dim: Dim | None
    span: Span


@dataclass
class GroupRef:
    group: str
    layered: bool
    span: Span


@dataclass
class ParamRef:
    group: str
    fieldname: str | None
    layered: bool
    span: Span


@dataclass
class AttnWeights:
    """`CausalSoftmax(q @ k^T / √d)`: kept symbolic until `p @ v` makes it flash_attention."""

    q: TVal
    k: TVal
    scale: ir.Expr
    causal: bool
    span: Span
    used: bool = False


@dataclass
class Param:
    """One parameter tensor of the lowered spec."""

    name: str
    group: str
    fieldname: str | None
    role: str  # matrix | table | vector
    shape: tuple  # per layer
    count: Dim | None  # stacked over layers
    span: Span  # first use
    use_text: str
    declared: bool = False
    suffix: str | None = None  # weight | bias, for a norm's pair


@dataclass
class Group:
    entry: ParamEntry
    count: Dim | None
    declared: dict = field(default_factory=dict)  # field name ('' for the whole) -> (shape, FieldEntry)
    used: bool = False
    used_fields: set = field(default_factory=set)
    kinds: dict = field(default_factory=dict)  # field name -> (matrix | table | vector | norm, first use)


@dataclass
class StateInfo:
    entry: StateEntry
    dtype: str
    shape: tuple
    count: Dim | None
    is_input: bool
    step: Dim | None = None  # index of the value the DSL name holds now
    written: bool = False  # in the current loop iteration
    ir_name: str = ""


@dataclass
class Frame:
    """Locals of one operator or transition body (or the program itself)."""

    names: dict = field(default_factory=dict)  # notation name -> value
    ir_names: dict = field(default_factory=dict)  # notation name -> DSL local name


class LoweringError(Exception):
    """Stop lowering the current statement (already reported)."""


_LOOP = "⟨l⟩"
_POISON = object()  # a name whose definition failed  # the loop variable as a symbol in state indices


# ============================================================================ lowering


class Lowering:
    def __init__(self, src: Source, r: Reporter, items: list):
        self.src, self.r = src, r
        self.items = items
        self.sizes = Sizes(r)
        self.dims: dict[str, DomainEntry] = {}
        self.roles: dict[str, str] = {}  # dim name -> role
        self.states: dict[str, StateInfo] = {}
        self.groups: dict[str, Group] = {}
        self.params: dict[str, Param] = {}
        self.operators: dict[str, OperatorDef] = {}
        self.transitions: dict[str, TransitionDef] = {}
        self.used_ops: set[str] = set()
        self.taken: set[str] = set()
        self.block: list = []
        self.frames: list[Frame] = [Frame()]
        self.loop: dict | None = None
        self.outputs: dict[str, tuple] = {}  # name -> (TVal, span)
        self.declared_outputs: list[OutputEntry] | None = None
        self.has_attention = False
        self.has_positions = False
        self.first_embed: Span | None = None
        self.inline_depth = 0
        self.poisoned: set[str] = set()  # names whose declaration or first value failed: uses stay quiet

    # ------------------------------------------------------------------ helpers
    def text(self, span: Span) -> str:
        if span.line == span.end_line:
            return self.src.line(span.line)[span.col - 1:span.end_col - 1]
        return self.src.line(span.line)[span.col - 1:] + " ..."

    def fail(self, code: str, message: str, span: Span, hint: str | None = None):
        self.r.error(code, message, span, hint)
        raise LoweringError

    def fresh(self, base: str) -> str:
        name, n = base, 2
        while name in self.taken or name in _RESERVED:
            name = f"{base}_{n}"
            n += 1
        self.taken.add(name)
        return name

    def role_of(self, role: str) -> Dim | None:
        for name, rl in self.roles.items():
            if rl == role:
                return Dim.sym(name)
        return None

    def size_expr(self, d, span: Span) -> ir.Expr:
        d = self.sizes.find(d)
        return dim_to_expr(d, span) if isinstance(d, Dim) else _Hole(d, span)

    def shape_expr(self, shape, span: Span) -> ir.ListExpr:
        return ir.ListExpr(tuple(self.size_expr(d, span) for d in shape), span)

    def unify_shapes(self, a: tuple, b: tuple, span: Span, what: str) -> None:
        if len(a) != len(b) or not all(self.sizes.unify(x, y) for x, y in zip(a, b)):
            self.fail("shape-mismatch", f"{what}: {self.sizes.show_shape(a)} vs {self.sizes.show_shape(b)}", span)

    def size(self, e: ir.Expr) -> Dim:
        """A size expression of the Domain's dims (`L+1`, `D/H`, `4*D`)."""
        try:
            v = self.expr(e)
        except DimError as err:
            self.fail("too-large", str(err), e.span)
        if not isinstance(v, SVal) or v.dim is None:
            self.fail("unknown-dim", f"`{self.text(e.span)}` is not a size built from the Domain's dims", e.span)
        return v.dim

    # ------------------------------------------------------------------ run
    def run(self) -> ir.Spec | None:
        header = next((i for i in self.items if isinstance(i, tuple)), None)
        self.name = header[1] if header and header[1] else _model_name(self.src.path)
        self.header_span = header[2] if header else Span(1, 1, 1, 2)
        sections = [i for i in self.items if isinstance(i, Section)]
        for kind in ("Domain", "State", "Parameters", "Output"):
            found = [s for s in sections if s.kind == kind]
            for extra in found[1:]:
                self.r.error("redefinition", f"a second `{kind}:` section", extra.span,
                             hint=f"list every entry in the first `{kind}:` section")
            if found:
                getattr(self, f"sec_{kind.lower()}")(found[0])
        for item in self.items:
            if isinstance(item, OperatorDef):
                self.define(self.operators, item, "operator")
            elif isinstance(item, TransitionDef):
                self.define(self.transitions, item, "transition")
        if self.r.has_errors:
            return None
        self.note_inputs()
        for item in self.items:
            try:
                if isinstance(item, Section) and item.kind == "Init":
                    for s in item.items:
                        self.stmt_guarded(s)
                elif isinstance(item, ForBlock):
                    self.for_block(item)
                elif isinstance(item, ir.Assign):
                    self.top_assign(item)
                elif isinstance(item, LossDef):
                    self.loss(item)
            except LoweringError:
                pass
            except DimError as err:
                self.r.error("too-large", f"{err}", item.span)
        if self.r.has_errors:
            return None
        self.finish_sizes()
        if self.r.has_errors:
            return None
        self.warn_unused()
        decls = self.declarations()
        body = tuple(self.fill(s) for s in self.block)
        if self.r.has_errors:
            return None
        return ir.Spec(self.src.path, self.src.sha256, self.name, tuple(decls), body, (), notation="model")

    def define(self, table: dict, item, what: str) -> None:
        if item.name in table or item.name in self.dims or item.name in self.groups or item.name in self.states:
            self.r.error("redefinition", f"`{item.name}` is already defined", item.name_span)
            return
        table[item.name] = item
        if isinstance(item, OperatorDef):
            seen = set()
            for p, span in item.params:
                if p in seen:
                    self.r.error("redefinition", f"operator parameter `{p}` is listed twice", span)
                seen.add(p)

    # ------------------------------------------------------------------ sections
    def sec_domain(self, sec: Section) -> None:
        for e in sec.items:
            if e.name in self.dims:
                self.r.error("redefinition", f"dim `{e.name}` is already declared", e.name_span)
                continue
            if e.name in _RESERVED:
                self.r.error("reserved-name", f"`{e.name}` is reserved and cannot name a dim", e.name_span)
                continue
            role = next((rl for rl, words in ROLE_WORDS.items() if e.role_word.lower() in words), None)
            if role is None and e.default is None:
                self.poisoned.add(e.name)
                self.r.error("bad-default", f"`{e.name} : {e.role_word}` is not a size snfc knows a default for",
                             e.role_span, hint=f"give one: `{e.name} : {e.role_word} = 64`, or use a known role "
                             "(batch, sequence_position, embedding_dim, attention_heads, layer_depth, vocab, "
                             "context_length)")
                continue
            if role in self.roles.values() and role is not None:
                other = next(n for n, rl in self.roles.items() if rl == role)
                self.r.error("redefinition", f"`{e.name}` and `{other}` are both the {role} dim", e.role_span)
                continue
            if role in RUNTIME_ROLES and e.default is not None:
                self.r.error("bad-default", f"`{e.name}` is a run-time size (from the inputs' shapes) and takes no "
                             "default", e.span)
                self.poisoned.add(e.name)
                continue
            self.dims[e.name] = e
            self.roles[e.name] = role or "size"
            self.taken.add(e.name)

    def sec_state(self, sec: Section) -> None:
        for e in sec.items:
            if e.name in self.states or e.name in self.dims:
                self.r.error("redefinition", f"`{e.name}` is already declared", e.name_span)
                continue
            dtype = SETS.get(e.set_name)
            if dtype is None:
                self.poisoned.add(e.name)
                self.r.error("bad-type", f"unknown set `{e.set_name}`", e.set_span,
                             hint="state lives in ℝ (float32) or ℕ / ℤ (int64): `h ∈ ℝ[B, T, D]`")
                continue
            try:
                shape = tuple(self.size(d) for d in e.dims)
                count = self.size(e.count) if e.count is not None else None
            except LoweringError:
                self.poisoned.add(e.name)
                continue
            self.states[e.name] = StateInfo(e, dtype, shape, count, is_input=False)
            self.taken.add(e.name)

    def sec_parameters(self, sec: Section) -> None:
        for e in sec.items:
            if e.name in self.groups or e.name in self.states or e.name in self.dims:
                self.r.error("redefinition", f"`{e.name}` is already declared", e.name_span)
                continue
            try:
                count = self.size(e.count) if e.count is not None else None
            except LoweringError:
                self.poisoned.add(e.name)
                continue
            g = self.groups[e.name] = Group(e, count)
            for f in ((e.whole,) if e.whole else ()) + e.fields:
                key = "" if f is e.whole else f.name
                if key in g.declared:
                    self.r.error("redefinition", f"field `{f.name}` of `{e.name}` is declared twice", f.span)
                    continue
                if SETS.get(f.set_name) != "float32":
                    self.r.error("bad-type", f"parameters live in ℝ, not `{f.set_name}`", f.span)
                    continue
                try:
                    g.declared[key] = (tuple(self.size(d) for d in f.dims), f)
                except LoweringError:
                    continue

    def sec_output(self, sec: Section) -> None:
        self.declared_outputs = list(sec.items)

    def note_inputs(self) -> None:
        """A state never assigned is an input; the run-time dims must come from inputs."""
        assigned = set()

        def scan(stmts):
            for s in stmts:
                if isinstance(s, ir.Assign):
                    assigned.add(s.name)

        for item in self.items:
            if isinstance(item, (Section, OperatorDef, TransitionDef, ForBlock)):
                scan(getattr(item, "items", None) or getattr(item, "body", ()))
            elif isinstance(item, ir.Assign):
                assigned.add(item.name)
        bound = set()
        for name, st in self.states.items():
            if name not in assigned:
                st.is_input = True
                if st.count is not None:
                    self.r.error("syntax", f"input `{name}` is never assigned, so it cannot be a sequence "
                                 f"`{name}[...]`", st.entry.span)
                for d in st.shape:
                    bound |= d.symbols()
            st.ir_name = name
        for name, role in self.roles.items():
            if role in RUNTIME_ROLES and name not in bound:
                self.r.error("unknown-dim", f"`{name}` is a run-time size, but no input state has it in its shape",
                             self.dims[name].span, hint="run-time sizes (batch, sequence) come from the inputs")

    # ------------------------------------------------------------------ statements
    def stmt_guarded(self, s) -> None:
        try:
            self.stmt(s)
        except LoweringError:
            pass
        except DimError as err:
            self.r.error("too-large", f"{err}", s.span)
            if isinstance(s, ir.Assign):
                self.poisoned.add(s.name)

    def stmt(self, s) -> None:
        if isinstance(s, ir.Assign):
            self.assign(s)
        elif isinstance(s, Apply):
            self.apply(s)
        else:  # pragma: no cover - the grammar allows nothing else here
            self.fail("syntax", "unexpected statement", s.span)

    def emit(self, s) -> None:
        self.block.append(s)

    def assign(self, s: ir.Assign) -> None:
        try:
            self.assign_(s)
        except LoweringError:
            if s.name in self.states:
                self.poisoned.add(s.name)
            else:
                self.frames[-1].names[s.name] = _POISON  # later uses report nothing more
            raise

    def assign_(self, s: ir.Assign) -> None:
        if s.name in self.states:
            self.state_write(s)
            return
        if s.index is not None:
            self.fail("syntax", f"`{s.name}` is not a state sequence and cannot be indexed", s.span,
                      hint=f"declare it in `State:` as `{s.name}[N] ∈ ℝ[...]`")
        value = self.expr(s.value)
        if isinstance(value, AttnWeights):
            self.frames[-1].names[s.name] = value
            return
        value = self.tensor(value, s.value.span, f"the value of `{s.name}`")
        self.bind(s.name, value, s)

    def bind(self, name: str, value: TVal, s: ir.Assign, fixed: bool = False) -> TVal:
        frame = self.frames[-1]
        old = frame.names.get(name)
        if isinstance(old, TVal) and name in frame.ir_names and self.same(old, value):
            ir_name = frame.ir_names[name]
            self.emit(ir.Assign(ir_name, None, value.expr, s.span, s.name_span))
        else:
            if fixed:
                if name in self.taken or name in _RESERVED:
                    self.fail("redefinition", f"`{name}` is already declared", s.name_span)
                self.taken.add(name)
                ir_name = name
            else:
                ir_name = self.fresh(name)
            self.emit(ir.Let(ir_name, value.expr, s.span, s.name_span))
        frame.ir_names[name] = ir_name
        local = TVal(ir.Name(ir_name, s.name_span), value.shape, value.dtype, s.name_span, value.heads)
        frame.names[name] = local
        return local

    def same(self, a: TVal, b: TVal) -> bool:
        return a.dtype == b.dtype and a.heads == b.heads and len(a.shape) == len(b.shape) and all(
            self.sizes.find(x) is self.sizes.find(y) or (
                isinstance(self.sizes.find(x), Dim) and self.sizes.find(x) == self.sizes.find(y))
            for x, y in zip(a.shape, b.shape))

    def state_index(self, st: StateInfo, index, span: Span) -> Dim | None:
        if st.count is None:
            if index is not None:
                self.fail("syntax", f"state `{st.entry.name}` is one tensor, not a sequence: write "
                          f"`{st.entry.name}`", span)
            return None
        if index is None:
            self.fail("syntax", f"state `{st.entry.name}` is a sequence: write `{st.entry.name}[i]`", span)
        if len(index) != 1:
            self.fail("syntax", f"`{st.entry.name}[...]` takes one index", span)
        return self.size(index[0])

    def state_write(self, s: ir.Assign) -> None:
        st = self.states[s.name]
        if st.is_input:  # pragma: no cover - an assigned state is never an input
            self.fail("assign-undeclared", f"`{s.name}` is an input", s.span)
        idx = self.state_index(st, s.index, s.span)
        value = self.tensor(self.expr(s.value), s.value.span, f"the value of `{s.name}`")
        if value.heads:
            self.fail("shape-mismatch", f"`{s.name}` holds a value split into heads; merge them first",
                      s.value.span, hint="write `MergeHeads(...)`")
        if value.dtype != st.dtype:
            self.fail("dtype-mismatch", f"`{s.name}` is {st.dtype} but the value is {value.dtype}", s.value.span)
        self.unify_shapes(st.shape, value.shape, s.value.span,
                          f"`{s.name}` is declared {self.sizes.show_shape(st.shape)} but the value is")
        if st.step is None:  # the first write
            if idx is not None and not equal(idx, Dim.const(0))[0]:
                self.fail("syntax", f"the first value of `{s.name}` must be `{s.name}[0]`", s.span)
            if self.loop is not None:
                self.fail("syntax", f"`{s.name}` must get its first value before the loop", s.span,
                          hint=f"write `{s.name}[0] = ...` in `Init:`")
            self.emit(ir.Let(s.name, value.expr, s.span, s.name_span))
            st.step = Dim.const(0)
            return
        if idx is not None:
            want = st.step + 1
            if self.loop is not None and st.written:
                self.fail("syntax", f"`{s.name}` is assigned twice in one step", s.span)
            if not equal(idx, want)[0]:
                self.fail("syntax", f"this writes `{s.name}[{self.text(s.index[0].span)}]`, but the next state is "
                          f"`{s.name}[{show(want).replace(_LOOP, self.loop_name())}]`", s.index[0].span)
            if self.loop is not None:
                st.written = True
            else:
                st.step = want
        self.emit(ir.Assign(s.name, None, value.expr, s.span, s.name_span))

    def loop_name(self) -> str:
        return self.loop["var"] if self.loop else "l"

    def state_read(self, st: StateInfo, index, span: Span) -> TVal:
        name = st.entry.name
        if st.is_input:
            if index is not None:
                self.fail("syntax", f"input `{name}` is one tensor: write `{name}`", span)
            return TVal(ir.Name(name, span), st.shape, st.dtype, span)
        idx = self.state_index(st, index, span)
        if st.step is None:
            self.poisoned.add(name)  # one report per state
            self.fail("unknown-name", f"`{name}` is read before it is assigned", span,
                      hint=f"give it a first value: `{name}[0] = ...`" if st.count is not None else None)
        if idx is not None:
            now = st.step + 1 if (self.loop is not None and st.written) else st.step
            if not equal(idx, now)[0]:
                shown = show(now).replace(_LOOP, self.loop_name())
                self.fail("syntax", f"`{name}[{self.text(index[0].span)}]` is not the current state here; "
                          f"the current one is `{name}[{shown}]`", span)
        return TVal(ir.Name(name, span), st.shape, st.dtype, span)

    def top_assign(self, s: ir.Assign) -> None:
        try:
            self.top_assign_(s)
        except LoweringError:
            self.frames[0].names.setdefault(s.name, _POISON)
            raise

    def top_assign_(self, s: ir.Assign) -> None:
        if s.name in self.states:
            self.stmt_guarded(s)
            return
        if self.declared_outputs is not None and s.name not in {o.name for o in self.declared_outputs}:
            self.stmt_guarded(s)
            return
        if s.index is not None:
            self.fail("syntax", f"`{s.name}` is not a state sequence and cannot be indexed", s.span)
        value = self.tensor(self.expr(s.value), s.value.span, f"output `{s.name}`")
        if value.heads:
            self.fail("shape-mismatch", f"output `{s.name}` is split into heads; merge them first", s.value.span)
        if s.name in self.outputs:
            self.fail("redefinition", f"output `{s.name}` is computed twice", s.name_span)
        local = self.bind(s.name, value, s, fixed=True)
        self.outputs[s.name] = (local, s.name_span)

    def loss(self, item: LossDef) -> None:
        value = self.tensor(self.expr(item.value), item.value.span, "the loss")
        if value.shape:
            self.fail("shape-mismatch", f"the loss must be a scalar, got {self.sizes.show_shape(value.shape)}",
                      item.value.span, hint="use `CrossEntropy(logits, targets)`")
        if "loss" in self.outputs:
            self.fail("redefinition", "the loss is defined twice", item.span)
        s = ir.Assign("loss", None, item.value, item.span, item.span)
        local = self.bind("loss", value, s, fixed=True)
        self.outputs["loss"] = (local, item.span)

    def for_block(self, f: ForBlock) -> None:
        if self.loop is not None:  # pragma: no cover - the grammar nests no loops
            self.fail("syntax", "depth loops cannot nest", f.span)
        lo, hi = self.size(f.lo), self.size(f.hi)
        if not equal(lo, Dim.const(0))[0]:
            self.r.error("loop-range", f"the depth recurrence starts at 0, not {show(lo)}", f.lo.span,
                         hint=f"write `For {f.var} in [0 .. {self.text(f.hi.span)}]:`")
        count = hi + 1
        var = self.fresh(f.var)
        self.loop = {"var": f.var, "ir": var, "count": count, "span": f.var_span}
        outer, self.block = self.block, []
        errors_before = len(self.r.items)
        base = {n: st.step for n, st in self.states.items()}
        for st in self.states.values():
            st.written = False
            if st.step is not None and st.count is not None:
                st.step = st.step + Dim.sym(_LOOP)
        try:
            for s in f.body:
                self.stmt_guarded(s)
        finally:
            body, self.block = self.block, outer
            self.loop = None
            failed = any(d.severity == "error" for d in self.r.items[errors_before:])
            for n, st in self.states.items():
                if st.step is not None and st.count is not None:
                    st.step = base[n] + count if st.written else base[n]
                    if failed:
                        self.poisoned.add(n)  # its step is unknown after a failed body
                st.written = False
        self.emit(ir.For(var, ir.Num(0, f.lo.span), f.hi, tuple(body), f.span))

    def apply(self, s: Apply) -> None:
        if self.loop is None:  # pragma: no cover - `apply` is only parsed inside `For`
            self.fail("syntax", "`apply` belongs inside `For`", s.span)
        t = self.transitions.get(s.name)
        if t is None:
            close = difflib.get_close_matches(s.name, list(self.transitions), n=1)
            self.fail("unknown-name", f"no transition `{s.name}`", s.span,
                      hint=f"did you mean `{close[0]}`?" if close else "define it with `Transition NAME:`")
        self.used_ops.add(t.name)
        self.inline(t.body, {}, t.name, s.span)

    def inline(self, body, bindings: dict, name: str, span: Span):
        if self.inline_depth > 16:
            self.fail("too-large", f"`{name}` expands recursively", span)
        self.inline_depth += 1
        frame = Frame(dict(bindings), {})
        self.frames.append(frame)
        result = None
        try:
            for s in body:
                if isinstance(s, Return):
                    v = self.expr(s.value)
                    result = v if isinstance(v, AttnWeights) else self.tensor(v, s.value.span, "the result")
                    break
                self.stmt(s)
        finally:
            self.frames.pop()
            self.inline_depth -= 1
        for local, v in frame.names.items():
            if isinstance(v, AttnWeights) and not v.used and v is not result:
                self.r.warning("unused", f"`{local}` is computed but never used", v.span)
        return result

    # ------------------------------------------------------------------ expressions
    def tensor(self, v, span: Span, what: str) -> TVal:
        if isinstance(v, TVal):
            return v
        if isinstance(v, AttnWeights):
            self.fail("arg-kind", f"{what} is attention weights `{self.text(v.span)}`, which snfc can only use as "
                      "`p @ v`", span, hint="multiply the weights by the values: `p @ v`")
        if isinstance(v, (ParamRef, GroupRef)):
            self.fail("arg-kind", f"{what} is a parameter; parameters are passed to operations such as "
                      "`Linear(x, θ)`", span)
        self.fail("arg-kind", f"{what} must be a tensor, got `{self.text(span)}`", span)

    def expr(self, e):
        method = getattr(self, f"e_{type(e).__name__}", None)
        if method is None:
            self.fail("syntax", f"`{self.text(e.span)}` is not supported here", e.span)
        return method(e)

    def e_Num(self, e: ir.Num):
        if isinstance(e.value, int):
            return SVal(e, "int", Dim.const(e.value), e.span)
        return SVal(e, "float", None, e.span)

    def e_Str(self, e: ir.Str):
        return SVal(e, "str", None, e.span)

    def e_Name(self, e: ir.Name):
        if e.id in self.poisoned and not any(e.id in f.names for f in self.frames):
            raise LoweringError
        for frame in reversed(self.frames):
            if e.id in frame.names:
                v = frame.names[e.id]
                if v is _POISON:
                    raise LoweringError
                if isinstance(v, TVal):
                    return TVal(ir.Name(v.expr.id, e.span) if isinstance(v.expr, ir.Name) else v.expr, v.shape,
                                v.dtype, e.span, v.heads)
                if isinstance(v, AttnWeights):
                    v.used = True
                return v
        if self.loop is not None and e.id == self.loop["var"]:
            return SVal(ir.Name(self.loop["ir"], e.span), "loopvar", Dim.sym(_LOOP), e.span)
        if e.id in self.dims:
            return SVal(ir.Name(e.id, e.span), "int", Dim.sym(e.id), e.span)
        if e.id in self.states:
            return self.state_read(self.states[e.id], None, e.span)
        if e.id in self.groups:
            g = self.groups[e.id]
            g.used = True
            if g.count is not None:
                return GroupRef(e.id, False, e.span)
            return ParamRef(e.id, None, False, e.span)
        if e.id in self.operators or e.id in self.transitions:
            self.fail("arg-kind", f"`{e.id}` is an operator; call it: `{e.id}(...)`", e.span)
        if e.id in self.outputs:
            local = self.outputs[e.id][0]
            return TVal(ir.Name(local.expr.id, e.span), local.shape, local.dtype, e.span)
        names = list(self.dims) + list(self.states) + list(self.groups) + [n for f in self.frames for n in f.names]
        close = difflib.get_close_matches(e.id, names, n=1)
        self.fail("unknown-name", f"`{e.id}` is not defined", e.span,
                  hint=f"did you mean `{close[0]}`?" if close else None)

    def e_Subscript(self, e: ir.Subscript):
        if isinstance(e.value, ir.Name) and e.value.id in self.poisoned:
            raise LoweringError
        if isinstance(e.value, ir.Name) and e.value.id in self.states and not any(
                e.value.id in f.names for f in self.frames):
            return self.state_read(self.states[e.value.id], e.index, e.span)
        base = self.expr(e.value)
        if isinstance(base, GroupRef) and not base.layered:
            g = self.groups[base.group]
            if len(e.index) != 1 or self.loop is None or not (
                    isinstance(e.index[0], ir.Name) and e.index[0].id == self.loop["var"]):
                self.fail("stacked-index", f"`{base.group}` has one entry per layer; index it with the loop "
                          f"variable inside `For`: `{base.group}[{self.loop_name()}]`", e.span)
            if not equal(g.count, self.loop["count"])[0]:
                self.fail("stacked-index", f"`{base.group}` has {show(g.count)} entries but the loop runs "
                          f"{show(self.loop['count'])} times", e.span)
            return GroupRef(base.group, True, e.span)
        self.fail("syntax", f"`{self.text(e.span)}`: only state sequences and per-layer parameter groups are "
                  "indexed", e.span)

    def e_Attribute(self, e: ir.Attribute):
        base = self.expr(e.value)
        if isinstance(base, GroupRef):
            if not base.layered:
                self.fail("stacked-index", f"`{base.group}` has one entry per layer: write "
                          f"`{base.group}[{self.loop_name()}].{e.attr}`", e.value.span)
            return ParamRef(base.group, e.attr, True, e.span)
        if isinstance(base, ParamRef) and base.fieldname is None:
            return ParamRef(base.group, e.attr, base.layered, e.span)
        self.fail("syntax", f"`.{e.attr}`: only parameter groups have fields", e.span)

    def e_Unary(self, e: ir.Unary):
        v = self.expr(e.operand)
        if isinstance(v, SVal) and v.kind in ("int", "float"):
            return SVal(ir.Unary("-", v.expr, e.span), v.kind, -v.dim if v.dim is not None else None, e.span)
        t = self.tensor(v, e.operand.span, "the operand of `-`")
        self.no_heads(t)
        return TVal(ir.Unary("-", t.expr, e.span), t.shape, t.dtype, e.span)

    def e_Transposed(self, e: Transposed):
        t = self.tensor(self.expr(e.value), e.value.span, "a transposed value")
        self.no_heads(t, "only `q @ k^T` inside a softmax")
        if len(t.shape) < 2:
            self.fail("rank-mismatch", f"`{self.text(e.span)}` transposes a tensor of rank {len(t.shape)}", e.span)
        return TVal(ir.Call("transpose", (t.expr,), (), e.span, e.span), t.shape[:-2] + (t.shape[-1], t.shape[-2]),
                    t.dtype, e.span)

    def e_Shifted(self, e: Shifted):
        self.fail("syntax", "`shifted by` marks the targets of `CrossEntropy(logits, tok shifted by 1)`", e.span)

    def no_heads(self, t: TVal, where: str = "") -> None:
        if t.heads:
            self.fail("arg-kind", f"`{self.text(t.span)}` is split into heads; it can only be used in attention "
                      "(`CausalSoftmax(q @ k^T / √d) @ v`) and `MergeHeads`", t.span)

    def e_BinOp(self, e: ir.BinOp):
        if e.op == "@":
            return self.matmul(e)
        a, b = self.expr(e.left), self.expr(e.right)
        if isinstance(a, SVal) and isinstance(b, SVal):
            return self.scalar_op(e, a, b)
        if e.op not in ("+", "-", "*", "/", "**"):
            self.fail("syntax", f"`{e.op}` does not apply to tensors", e.span)
        if isinstance(a, SVal) or isinstance(b, SVal):
            t, s = (b, a) if isinstance(a, SVal) else (a, b)
            t = self.tensor(t, e.span, "an operand")
            self.no_heads(t)
            if s.kind not in ("int", "float"):
                self.fail("arg-kind", f"`{self.text(s.span)}` is not a number", s.span)
            return TVal(ir.BinOp(e.op, a.expr, b.expr, e.span), t.shape, t.dtype, e.span)
        ta = self.tensor(a, e.left.span, f"the left operand of `{e.op}`")
        tb = self.tensor(b, e.right.span, f"the right operand of `{e.op}`")
        self.no_heads(ta)
        self.no_heads(tb)
        if ta.dtype != tb.dtype:
            self.fail("dtype-mismatch", f"`{e.op}` of {ta.dtype} and {tb.dtype}", e.span)
        return TVal(ir.BinOp(e.op, ta.expr, tb.expr, e.span), self.broadcast(ta.shape, tb.shape, e), ta.dtype, e.span)

    def broadcast(self, a: tuple, b: tuple, e) -> tuple:
        out = []
        for i in range(1, max(len(a), len(b)) + 1):
            x = self.sizes.find(a[-i]) if i <= len(a) else None
            y = self.sizes.find(b[-i]) if i <= len(b) else None
            if x is None or (isinstance(x, Dim) and x.value == 1):
                out.append(y)
            elif y is None or (isinstance(y, Dim) and y.value == 1):
                out.append(x)
            elif self.sizes.unify(x, y):
                out.append(x)
            else:
                self.fail("shape-mismatch", f"`{self.text(e.span)}`: cannot combine {self.sizes.show_shape(a)} "
                          f"with {self.sizes.show_shape(b)}", e.span)
        return tuple(reversed(out))

    def scalar_op(self, e: ir.BinOp, a: SVal, b: SVal) -> SVal:
        if "str" in (a.kind, b.kind):
            self.fail("arg-kind", f"`{e.op}` of a string", e.span)
        if a.dim is not None and b.dim is not None and e.op in ("+", "-", "*", "/"):
            if e.op == "/" and b.dim.value == 0:
                self.fail("bad-constraint", f"`{self.text(e.span)}` divides by zero", e.span)
            if e.op == "/":
                dim = a.dim // b.dim
                return SVal(ir.BinOp("//", a.expr, b.expr, e.span), "int", dim, e.span)
            dim = {"+": a.dim + b.dim, "-": a.dim - b.dim, "*": a.dim * b.dim}[e.op]
            return SVal(ir.BinOp(e.op, a.expr, b.expr, e.span), "int", dim, e.span)
        return SVal(ir.BinOp(e.op, a.expr, b.expr, e.span), "float", None, e.span)

    def matmul(self, e: ir.BinOp):
        a = self.expr(e.left)
        if isinstance(a, AttnWeights):
            v = self.tensor(self.expr(e.right), e.right.span, "the values of attention")
            return self.attention(a, v, e)
        b = self.expr(e.right)
        ta = self.tensor(a, e.left.span, "the left operand of `@`")
        tb = self.tensor(b, e.right.span, "the right operand of `@`")
        self.no_heads(ta)
        self.no_heads(tb)
        if len(ta.shape) < 2 or len(tb.shape) < 2:
            self.fail("rank-mismatch", "`@` multiplies tensors of rank 2 or more", e.span)
        if not self.sizes.unify(ta.shape[-1], tb.shape[-2]):
            self.fail("shape-mismatch", f"`{self.text(e.span)}`: inner sizes differ, "
                      f"{self.sizes.show_shape(ta.shape)} @ {self.sizes.show_shape(tb.shape)}", e.span)
        batch = self.broadcast(ta.shape[:-2], tb.shape[:-2], e)
        return TVal(ir.BinOp("@", ta.expr, tb.expr, e.span), batch + (ta.shape[-2], tb.shape[-1]), ta.dtype, e.span)

    # ------------------------------------------------------------------ calls
    def e_Call(self, e: ir.Call):
        if e.func in self.operators:
            return self.call_operator(e)
        fn = BUILTINS.get(e.func)
        if fn is None:
            names = list(BUILTINS) + list(self.operators)
            close = difflib.get_close_matches(e.func, names, n=1)
            self.fail("unknown-op", f"unknown operation `{e.func}`", e.func_span,
                      hint=f"did you mean `{close[0]}`?" if close else "docs/notation.md lists the operations")
        arity, kws = fn.arity, fn.kwargs
        if not arity[0] <= len(e.args) <= arity[1]:
            want = str(arity[0]) if arity[0] == arity[1] else f"{arity[0]} to {arity[1]}"
            self.fail("arity", f"`{e.func}` takes {want} argument{'s' * (arity[1] != 1)}, got {len(e.args)}",
                      e.span)
        for k in e.kwargs:
            if k.name not in kws:
                self.fail("unknown-arg", f"`{e.func}` has no argument `{k.name}`", k.span)
        return getattr(self, f"f_{fn.method}")(e)

    def call_operator(self, e: ir.Call):
        op = self.operators[e.func]
        self.used_ops.add(op.name)
        if e.kwargs or len(e.args) != len(op.params):
            self.fail("arity", f"`{op.name}` takes {len(op.params)} argument{'s' * (len(op.params) != 1)}, got "
                      f"{len(e.args) + len(e.kwargs)}", e.span)
        bindings = {}
        base = op.name[:-2] if op.name.endswith("_l") else op.name
        for (pname, _), arg in zip(op.params, e.args):
            v = self.expr(arg)
            if isinstance(v, TVal) and not isinstance(v.expr, ir.Name):
                # bind a computed argument once: the operator may use it several times
                s = ir.Assign(f"{base.lower()}_{pname}", None, arg, arg.span, arg.span)
                outer = self.frames[-1]
                v = self.bind(s.name, v, s)
                outer.names.pop(s.name, None)
            bindings[pname] = v
        result = self.inline(op.body, bindings, op.name, e.span)
        if result is None:
            self.fail("syntax", f"`{op.name}` returns nothing", op.name_span, hint="end it with `return ...`")
        if isinstance(result, TVal):
            result = TVal(result.expr, result.shape, result.dtype, e.span, result.heads)
        return result

    def param(self, ref, role: str, rank: int, span: Span, use: ir.Call, suffix: str | None = None):
        """The parameter `ref` used as a `role` tensor; returns (DSL expression, per-layer shape)."""
        if not isinstance(ref, ParamRef):
            if isinstance(ref, GroupRef):
                self.fail("stacked-index", f"`{ref.group}` has one entry per layer: write "
                          f"`{ref.group}[{self.loop_name()}]`", span)
            self.fail("arg-kind", f"`{self.text(span)}` must be a parameter (from `Parameters:`)", span)
        name = ref.group + (f"_{ref.fieldname}" if ref.fieldname else "") + (f"_{suffix}" if suffix else "")
        g = self.groups[ref.group]
        g.used = True
        g.used_fields.add(ref.fieldname or "")
        kind = "norm" if suffix else role
        seen = g.kinds.setdefault(ref.fieldname or "", (kind, ref.span))
        if seen[0] != kind and {seen[0], kind} != {"matrix", "table"}:
            # a table may also serve as a Linear weight: that is weight tying ([V, D] both ways)
            self.fail("arg-kind", f"`{self.text(span)}` is used as {_KIND_TEXT[kind]} here but as "
                      f"{_KIND_TEXT[seen[0]]} at line {seen[1].line}", span)
        p = self.params.get(name)
        if p is None:
            if name in self.taken or name in _RESERVED:
                self.fail("redefinition", f"parameter `{name}` clashes with another name", span)
            self.taken.add(name)
            declared = g.declared.get(ref.fieldname or "")
            if declared is not None:
                shape = declared[0]
                if len(shape) != rank:
                    self.fail("rank-mismatch", f"`{self.text(ref.span)}` is declared with {len(shape)} axes but "
                              f"used as {_ROLE_TEXT[role]}", span)
            else:
                shape = tuple(self.sizes.var(Origin("free", span, self.text(use.span))) for _ in range(rank))
            p = Param(name, ref.group, ref.fieldname, role, shape, g.count, ref.span, self.text(ref.span),
                      declared is not None, suffix)
            self.params[name] = p

        expr = ir.Name(name, ref.span)
        if ref.layered:
            expr = ir.Subscript(expr, (ir.Name(self.loop["ir"], ref.span),), ref.span)
        return expr, p

    def f_linear(self, e: ir.Call):
        x = self.tensor(self.expr(e.args[0]), e.args[0].span, "the input of `Linear`")
        self.no_heads(x)
        if x.dtype != "float32" or not x.shape:
            self.fail("arg-kind", "`Linear` takes a float tensor", e.args[0].span)
        w_expr, w = self.param(self.expr(e.args[1]), "matrix", 2, e.args[1].span, e)
        if not self.sizes.unify(w.shape[1], x.shape[-1]):
            known = (f"declared {self.sizes.show_shape(w.shape)}" if w.declared else
                     f"[out, {self.sizes.show(w.shape[1])}] from its use at line {w.span.line}")
            self.fail("shape-mismatch", f"`{self.text(e.args[1].span)}` is {known}, but the input "
                      f"`{self.text(e.args[0].span)}` is {self.sizes.show_shape(x.shape)}: a Linear weight is "
                      "[out, in]", e.args[1].span)
        out = self.sizes.find(w.shape[0])
        if isinstance(out, Var) and out.origin.kind == "free":
            out.origin = Origin("linear-out", e.span, self.text(e.span), x.shape[-1])
        kwargs = [ir.Keyword("weight", w_expr, e.args[1].span)]
        if len(e.args) == 3:
            b_expr, b = self.param(self.expr(e.args[2]), "vector", 1, e.args[2].span, e)
            if not self.sizes.unify(b.shape[0], w.shape[0]):
                self.fail("shape-mismatch", f"the bias `{self.text(e.args[2].span)}` is "
                          f"{self.sizes.show_shape(b.shape)} but the output has {self.sizes.show(w.shape[0])} "
                          "features", e.args[2].span)
            kwargs.append(ir.Keyword("bias", b_expr, e.args[2].span))
        call = ir.Call("linear", (x.expr,), tuple(kwargs), e.span, e.func_span)
        return TVal(call, x.shape[:-1] + (w.shape[0],), x.dtype, e.span)

    def f_embed(self, e: ir.Call):
        idx = self.tensor(self.expr(e.args[0]), e.args[0].span, "the ids of `Embed`")
        if idx.dtype != "int64":
            self.fail("dtype-mismatch", f"`Embed` looks up integer ids, but `{self.text(e.args[0].span)}` is "
                      f"{idx.dtype}", e.args[0].span, hint="ids live in ℕ: `tok ∈ ℕ[B, T]`")
        t_expr, t = self.param(self.expr(e.args[1]), "table", 2, e.args[1].span, e)
        vocab = self.role_of("vocab")
        rows = self.sizes.find(t.shape[0])
        if isinstance(rows, Var) and rows.origin.kind == "free":
            rows.origin = Origin("table-rows", e.span, self.text(e.span))
        if vocab is not None and not self.sizes.unify(t.shape[0], vocab):
            self.fail("shape-mismatch", f"`{self.text(e.args[1].span)}` has {self.sizes.show(t.shape[0])} rows, "
                      f"but token ids range over the vocabulary {show(vocab)}", e.span)
        width = self.sizes.find(t.shape[1])
        if isinstance(width, Var) and width.origin.kind == "free":
            width.origin = Origin("table-width", e.span, self.text(e.span))
        self.first_embed = self.first_embed or e.span
        call = ir.Call("gather", (t_expr, idx.expr), (), e.span, e.func_span)
        return TVal(call, idx.shape + (t.shape[1],), "float32", e.span)

    def f_position(self, e: ir.Call):
        """`PositionEmbed(θ_pos)`: the first T rows of a learned [context, D] table."""
        t_expr, t = self.param(self.expr(e.args[0]), "table", 2, e.args[0].span, e)
        context = self.role_of("context")
        seq = self.role_of("sequence")
        if context is None or seq is None:
            self.fail("unknown-dim", "`PositionEmbed` needs a `context_length` dim (the table's rows) and a "
                      "`sequence_position` dim in `Domain:`", e.span)
        if not self.sizes.unify(t.shape[0], context):
            self.fail("shape-mismatch", f"`{self.text(e.args[0].span)}` has {self.sizes.show(t.shape[0])} rows, "
                      f"not {show(context)}", e.span)
        width = self.sizes.find(t.shape[1])
        if isinstance(width, Var) and width.origin.kind == "free":
            width.origin = Origin("table-width", e.span, self.text(e.span))
        self.has_positions = True
        index = ir.ListExpr((ir.SliceExpr(ir.Num(0, e.span), dim_to_expr(seq, e.span), e.span),
                             ir.SliceExpr(None, None, e.span)), e.span)
        call = ir.Call("slice", (t_expr, index), (), e.span, e.func_span)
        return TVal(call, (seq, t.shape[1]), "float32", e.span)

    def f_norm(self, e: ir.Call, kind: str = "Norm"):
        x = self.tensor(self.expr(e.args[0]), e.args[0].span, f"the input of `{e.func}`")
        self.no_heads(x)
        ref = self.expr(e.args[1])
        if kind == "Norm":
            self.r.warning("ambiguous", f"`{e.func}` does not say which normalisation: using LayerNorm with a "
                           "weight and a bias (GPT-2's), eps 1e-5", e.func_span,
                           hint="write `LayerNorm(...)` or `RMSNorm(...)` to choose")
        kwargs = []
        parts = ("weight",) if kind == "RMSNorm" else ("weight", "bias")
        for part in parts:
            expr, p = self.param(ref, "vector", 1, e.args[1].span, e, suffix=part)
            if not self.sizes.unify(p.shape[0], x.shape[-1]):
                self.fail("shape-mismatch", f"`{self.text(e.args[1].span)}` is {self.sizes.show_shape(p.shape)} "
                          f"but normalises {self.sizes.show_shape(x.shape)}", e.args[1].span)
            kwargs.append(ir.Keyword(part, expr, e.args[1].span))
        op = "rms_norm" if kind == "RMSNorm" else "layer_norm"
        return TVal(ir.Call(op, (x.expr,), tuple(kwargs), e.span, e.func_span), x.shape, x.dtype, e.span)

    def f_layer_norm(self, e):
        return self.f_norm(e, "LayerNorm")

    def f_rms_norm(self, e):
        return self.f_norm(e, "RMSNorm")

    def f_activation(self, e: ir.Call):
        x = self.tensor(self.expr(e.args[0]), e.args[0].span, f"the input of `{e.func}`")
        self.no_heads(x)
        last = self.sizes.find(x.shape[-1]) if x.shape else None
        if isinstance(last, Var):
            last.hidden = True
        kwargs = ()
        op = BUILTINS[e.func].op
        for k in e.kwargs:
            v = self.expr(k.value)
            if not isinstance(v, SVal) or v.kind != "str":
                self.fail("arg-kind", f"`{k.name}` takes a string", k.span)
            kwargs += (ir.Keyword(k.name, v.expr, k.span),)
        return TVal(ir.Call(op, (x.expr,), kwargs, e.span, e.func_span), x.shape, x.dtype, e.span)

    def f_softmax(self, e: ir.Call, causal: bool = False):
        arg = e.args[0]
        scale = None
        inner = arg
        if isinstance(arg, ir.BinOp) and arg.op in ("/", "*"):
            left, right = arg.left, arg.right
            if arg.op == "*" and _is_scores(right) and not _is_scores(left):
                left, right = right, left
            if _is_scores(left):
                inner, scale = left, (arg.op, right)
        if _is_scores(inner):
            return self.attention_weights(e, inner, scale, causal)
        if causal:
            self.fail("syntax", "`CausalSoftmax` takes attention scores `q @ k^T` (optionally scaled)", arg.span,
                      hint="write `CausalSoftmax(q @ k^T / √D)`")
        x = self.tensor(self.expr(arg), arg.span, "the input of `Softmax`")
        self.no_heads(x)
        return TVal(ir.Call("softmax", (x.expr,), (), e.span, e.func_span), x.shape, x.dtype, e.span)

    def f_causal_softmax(self, e: ir.Call):
        return self.f_softmax(e, causal=True)

    def attention_weights(self, e: ir.Call, scores: ir.BinOp, scale, causal: bool) -> AttnWeights:
        q = self.tensor(self.expr(scores.left), scores.left.span, "the queries")
        k = self.tensor(self.expr(scores.right.value), scores.right.value.span, "the keys")
        if q.heads != k.heads:
            self.fail("shape-mismatch", "queries and keys must both be split into heads, or neither", scores.span)
        for t in (q, k):
            if len(t.shape) != (4 if t.heads else 3) or t.dtype != "float32":
                self.fail("rank-mismatch", f"attention takes [B, T, d] (or heads [B, H, T, d]) float tensors; "
                          f"`{self.text(t.span)}` is {self.sizes.show_shape(t.shape)}", t.span)
        batch_axes = 2 if q.heads else 1
        if not all(self.sizes.unify(a, b) for a, b in zip(q.shape[:batch_axes], k.shape[:batch_axes])):
            self.fail("shape-mismatch", f"queries {self.sizes.show_shape(q.shape)} and keys "
                      f"{self.sizes.show_shape(k.shape)} differ in batch or heads", scores.span)
        if not self.sizes.unify(q.shape[-1], k.shape[-1]):
            self.fail("shape-mismatch", f"`{self.text(scores.span)}`: queries are {self.sizes.show_shape(q.shape)}"
                      f" but keys are {self.sizes.show_shape(k.shape)}", scores.span)
        scaled = "unscaled"
        if scale is None:
            scale_expr = ir.Num(1.0, scores.span)
        else:
            scaled = f"scores {'divided by' if scale[0] == '/' else 'times'} {self.text(scale[1].span)}"
            op, s = scale
            if isinstance(s, ir.Call) and s.func == "√" and len(s.args) == 1:
                # `/ √d` names the key width d (scaled dot-product attention): unify it
                d = self.expr(s.args[0])
                if isinstance(d, SVal) and d.dim is not None and d.kind == "int":
                    if not self.sizes.unify(q.shape[-1], d.dim):
                        self.fail("shape-mismatch", f"`{self.text(s.span)}` scales keys of width "
                                  f"{self.sizes.show(q.shape[-1])}, not {show(d.dim)}", s.span)
            sv = self.expr(s)
            if not isinstance(sv, SVal) or sv.kind not in ("int", "float"):
                self.fail("arg-kind", f"`{self.text(s.span)}` must be a number", s.span)
            scale_expr = ir.BinOp("/", ir.Num(1, s.span), sv.expr, s.span) if op == "/" else sv.expr
        self.has_attention = True
        if not q.heads:
            heads = self.role_of("heads")
            if heads is not None:
                self.r.warning("ambiguous", f"attention is single-headed as written (one head of width "
                               f"{self.sizes.show(q.shape[-1])}, {scaled}), although "
                               f"`{show(heads)}` attention heads are declared; `{show(heads)}` is not used",
                               e.func_span, hint="split into heads with `SplitHeads(q, H)` and `MergeHeads(...)` "
                               "for multi-head attention")
        return AttnWeights(q, k, scale_expr, causal, e.span)

    def attention(self, w: AttnWeights, v: TVal, e: ir.BinOp) -> TVal:
        q, k = w.q, w.k
        if v.heads != q.heads or len(v.shape) != len(q.shape):
            self.fail("shape-mismatch", f"values {self.sizes.show_shape(v.shape)} do not match the queries "
                      f"{self.sizes.show_shape(q.shape)}", e.right.span)
        seq_axis = 2 if q.heads else 1
        if not all(self.sizes.unify(a, b) for a, b in zip(k.shape[:seq_axis + 1], v.shape[:seq_axis + 1])):
            self.fail("shape-mismatch", f"values {self.sizes.show_shape(v.shape)} do not match the keys "
                      f"{self.sizes.show_shape(k.shape)}", e.right.span)
        span = e.span

        def four(t: TVal) -> ir.Expr:
            if t.heads:
                return t.expr
            b, tt, d = t.shape
            return ir.Call("reshape", (t.expr, self.shape_expr((b, tt, Dim.const(1), d), span)), (), span, span)

        kwargs = (ir.Keyword("q", four(q), span), ir.Keyword("k", four(k), span), ir.Keyword("v", four(v), span),
                  ir.Keyword("causal", ir.Const(w.causal, span), span), ir.Keyword("scale", w.scale, span))
        call = ir.Call("flash_attention", (), kwargs, span, span)
        if q.heads:
            return TVal(call, q.shape[:-1] + (v.shape[-1],), q.dtype, span, heads=True)
        b, tt, _ = q.shape
        out = ir.Call("reshape", (call, self.shape_expr((b, tt, v.shape[-1]), span)), (), span, span)
        return TVal(out, (b, tt, v.shape[-1]), q.dtype, span)

    def f_split_heads(self, e: ir.Call):
        x = self.tensor(self.expr(e.args[0]), e.args[0].span, "the input of `SplitHeads`")
        h = self.expr(e.args[1])
        if not isinstance(h, SVal) or h.dim is None or h.kind != "int" or h.dim.value is not None and h.dim.value < 1:
            self.fail("arg-kind", "`SplitHeads(x, H)` takes a head count from the Domain", e.args[1].span)
        if x.heads or len(x.shape) != 3:
            self.fail("rank-mismatch", f"`SplitHeads` takes [B, T, C], got {self.sizes.show_shape(x.shape)}",
                      e.args[0].span)
        b, t, c = x.shape
        part = self.sizes.var(Origin("free", e.span, self.text(e.span)))
        self.sizes.rels.append(Rel(c, h.dim, part, e.span))
        self.sizes.propagate()
        shape = (b, t, h.dim, part)
        call = ir.Call("reshape", (x.expr, self.shape_expr(shape, e.span)), (), e.span, e.func_span)
        return TVal(call, (b, h.dim, t, part), x.dtype, e.span, heads=True)

    def f_merge_heads(self, e: ir.Call):
        x = self.tensor(self.expr(e.args[0]), e.args[0].span, "the input of `MergeHeads`")
        if not x.heads:
            self.fail("arg-kind", f"`{self.text(e.args[0].span)}` is not split into heads", e.args[0].span)
        b, h, t, part = x.shape
        h = self.sizes.find(h)
        whole = self.sizes.var(Origin("free", e.span, self.text(e.span)))
        self.sizes.rels.append(Rel(whole, h, part, e.span))
        self.sizes.propagate()
        call = ir.Call("reshape", (x.expr, self.shape_expr((b, t, whole), e.span)), (), e.span, e.func_span)
        return TVal(call, (b, t, whole), x.dtype, e.span)

    def f_cross_entropy(self, e: ir.Call):
        logits = self.tensor(self.expr(e.args[0]), e.args[0].span, "the logits")
        self.no_heads(logits)
        target_e, shift = e.args[1], False
        if isinstance(target_e, Shifted):
            by = self.expr(target_e.by)
            if not isinstance(by, SVal) or by.dim is None or by.dim.value != 1:
                self.fail("syntax", "targets can only be `shifted by 1` (next-token prediction)", target_e.by.span)
            target_e, shift = target_e.value, True
        targets = self.tensor(self.expr(target_e), target_e.span, "the targets")
        if targets.dtype != "int64":
            self.fail("dtype-mismatch", f"targets `{self.text(target_e.span)}` must be integer ids", target_e.span)
        if len(logits.shape) != len(targets.shape) + 1 or not all(
                self.sizes.unify(a, b) for a, b in zip(logits.shape[:-1], targets.shape)):
            self.fail("shape-mismatch", f"logits {self.sizes.show_shape(logits.shape)} and targets "
                      f"{self.sizes.show_shape(targets.shape)} do not line up", e.span)
        vocab = self.role_of("vocab")
        if vocab is not None and not self.sizes.unify(logits.shape[-1], vocab):
            self.fail("shape-mismatch", f"logits score {self.sizes.show(logits.shape[-1])} classes, but the targets "
                      f"are token ids in the vocabulary {show(vocab)}", e.args[0].span)
        kwargs = (ir.Keyword("shift", ir.Const(True, e.args[1].span), e.args[1].span),) if shift else ()
        call = ir.Call("cross_entropy", (logits.expr, targets.expr), kwargs, e.span, e.func_span)
        return TVal(call, (), logits.dtype, e.span)

    def f_sqrt(self, e: ir.Call):
        v = self.expr(e.args[0])
        if isinstance(v, SVal) and v.kind in ("int", "float"):
            return SVal(ir.Call("sqrt", (v.expr,), (), e.span, e.func_span), "float", None, e.span)
        t = self.tensor(v, e.args[0].span, "the operand of `√`")
        self.no_heads(t)
        return TVal(ir.Call("sqrt", (t.expr,), (), e.span, e.func_span), t.shape, t.dtype, e.span)

    # ------------------------------------------------------------------ sizes, declarations
    def finish_sizes(self) -> None:
        """Default what the text leaves open, then check every parameter size is known."""
        if not self.sizes.propagate():
            return
        for v in list(self.sizes.vars):
            root = self.sizes.find(v)
            if not isinstance(root, Var) or root is not v:
                continue
            o = root.origin
            in_dim = self.sizes.find(o.in_dim) if o.in_dim is not None else None
            if o.kind == "linear-out" and isinstance(in_dim, Dim):
                if root.hidden:
                    value = in_dim * MLP_EXPANSION
                    self.r.warning("ambiguous", f"the hidden width of `{o.text}` is not determined by the text: using "
                                   f"{show(value)} ({MLP_EXPANSION} × the input width, as GPT-2's MLP)", o.span)
                else:
                    value = in_dim
                    self.r.warning("ambiguous", f"the output width of `{o.text}` is not determined by the text: "
                                   f"using {show(value)}, the input width", o.span)
                self.sizes.unify(root, value)
                self.sizes.propagate()
        for p in self.params.values():
            for d in p.shape:
                if isinstance(self.sizes.find(d), Var):
                    self.r.error("implicit-shape", f"the shape of `{p.use_text}` cannot be inferred from its uses "
                                 f"(got {self.sizes.show_shape(p.shape)})", p.span,
                                 hint="declare the dim it ranges over in `Domain:` (e.g. `V : vocab`)")
                    break

    def warn_unused(self) -> None:
        for name, g in self.groups.items():
            if not g.used:
                self.r.warning("unused", f"parameter group `{name}` is declared but never used", g.entry.name_span)
                continue
            for key, (_, f) in g.declared.items():
                if key not in g.used_fields:
                    self.r.warning("unused", f"field `{f.name}` of `{name}` is declared but never used", f.span)
        for table in (self.operators, self.transitions):
            for name, d in table.items():
                if name not in self.used_ops:
                    self.r.warning("unused", f"`{name}` is defined but never used", d.name_span)
        if self.has_attention and not self.has_positions and self.first_embed is not None:
            self.r.warning("ambiguous", "no position embedding in the text: none is added, so attention sees token "
                           "order only through the causal mask", self.first_embed,
                           hint="add `+ PositionEmbed(θ_pos)` with a `context_length` dim to learn positions")
        if self.declared_outputs is not None:
            for o in self.declared_outputs:
                if o.name not in self.outputs:
                    self.r.error("output-unbound", f"output `{o.name}` is never computed", o.span)

    def tensor_type(self, shape, dtype: str, span: Span) -> ir.Call:
        items = ir.ListExpr(tuple(self.size_expr(d, span) for d in shape), span)
        return ir.Call("Tensor", (items, ir.Name(dtype, span)), (), span, span)

    def declarations(self) -> list:
        decls = []
        for name, e in self.dims.items():
            role = self.roles[name]
            if role in RUNTIME_ROLES:
                continue
            default = e.default if e.default is not None else DEFAULTS[role]
            decls.append(ir.Decl("param", name, ir.Name("int", e.role_span), ir.Num(default, e.span),
                                 span=e.span, name_span=e.name_span))
        for name, st in self.states.items():
            if st.is_input:
                decls.append(ir.Decl("input", name, self.tensor_type(st.shape, st.dtype, st.entry.span),
                                     None, span=st.entry.span, name_span=st.entry.name_span))
        inferred: dict = {}
        for p in self.params.values():
            full = ((p.count,) if p.count is not None else ()) + p.shape
            decls.append(ir.Decl("parameter", p.name, self.tensor_type(full, "float32", p.span), None,
                                 span=p.span, name_span=p.span))
            if not p.declared:
                inferred.setdefault((p.group, p.fieldname), []).append(p)
        for ps in inferred.values():  # one warning per parameter of the text (a norm's pair is one)
            p = ps[0]
            full = ((p.count,) if p.count is not None else ()) + p.shape
            per_layer = self.sizes.show_shape(p.shape)
            stacked = f", stacked over {show(p.count)} layers as {self.sizes.show_shape(full)}" if p.count else ""
            if p.suffix:
                what = "norm " + " and ".join(q.suffix for q in ps)
                names = ", ".join(f"`{q.name}`" for q in ps)
                each = " each" if len(ps) > 1 else ""
                message = f"`{p.use_text}` ({what}) is inferred as {names} {per_layer}{each}{stacked}"
            else:
                message = f"`{p.use_text}` ({_ROLE_TEXT[p.role]}) is inferred as `{p.name}` {per_layer}{stacked}"
            self.r.note("implicit-shape", message, p.span)
        for name, (local, span) in self.outputs.items():
            decls.append(ir.Decl("output", name, self.tensor_type(local.shape, local.dtype, span), None,
                                 span=span, name_span=span))
        return decls

    def fill(self, node):
        """Replace each `_Hole` by its size, now that unification is done."""
        if isinstance(node, _Hole):
            d = self.sizes.find(node.size)
            if isinstance(d, Var):
                self.r.error("implicit-shape", "a size here cannot be inferred from the text", node.span)
                return ir.Num(1, node.span)
            return dim_to_expr(d, node.span)
        if isinstance(node, tuple):
            return tuple(self.fill(n) for n in node)
        if hasattr(node, "__dataclass_fields__"):
            changes = {}
            for f in node.__dataclass_fields__:
                v = getattr(node, f)
                if isinstance(v, (tuple, _Hole)) or hasattr(v, "__dataclass_fields__"):
                    nv = self.fill(v)
                    if nv is not v:
                        changes[f] = nv
            return ir.replace(node, **changes) if changes else node
        return node


def _is_scores(e) -> bool:
    return isinstance(e, ir.BinOp) and e.op == "@" and isinstance(e.right, Transposed)


def _model_name(path: str) -> str:
    from .parser import _model_name as name
    return name(path)


_ROLE_TEXT = {"matrix": "a Linear weight [out, in]", "table": "an embedding table [rows, width]",
              "vector": "a vector"}
_KIND_TEXT = dict(_ROLE_TEXT, norm="a norm's weight and bias")
_RESERVED = {"Tensor", "exists", "None", "True", "False", "int", "float", "bool", "str",
             "float16", "bfloat16", "float32", "float64", "int32", "int64"}


@dataclass(frozen=True)
class Builtin:
    method: str
    arity: tuple
    kwargs: tuple = ()
    op: str = ""


BUILTINS: dict[str, Builtin] = {
    "Linear": Builtin("linear", (2, 3)),
    "Embed": Builtin("embed", (2, 2)),
    "PositionEmbed": Builtin("position", (1, 1)),
    "Norm": Builtin("norm", (2, 2)),
    "LayerNorm": Builtin("layer_norm", (2, 2)),
    "RMSNorm": Builtin("rms_norm", (2, 2)),
    "GELU": Builtin("activation", (1, 1), ("approximate",), "gelu"),
    "ReLU": Builtin("activation", (1, 1), (), "relu"),
    "SiLU": Builtin("activation", (1, 1), (), "silu"),
    "Tanh": Builtin("activation", (1, 1), (), "tanh"),
    "Softmax": Builtin("softmax", (1, 1)),
    "CausalSoftmax": Builtin("causal_softmax", (1, 1)),
    "SplitHeads": Builtin("split_heads", (2, 2)),
    "MergeHeads": Builtin("merge_heads", (1, 1)),
    "CrossEntropy": Builtin("cross_entropy", (2, 2)),
    "√": Builtin("sqrt", (1, 1)),
}
