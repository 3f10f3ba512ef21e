"""What the lowering tracks while it walks the program: tensors and scalars with their shapes,
references to parameter groups, attention weights not yet applied, the parameters it declares,
states, and the locals of each inlined body."""

from __future__ import annotations

from dataclasses import dataclass, field

from ... import ir
from ...dims import Dim
from ...language import RESERVED, SCALAR_KINDS
from ...source import Span
from .syntax import ParamEntry, StateEntry


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


LOOP = "⟨l⟩"  # the loop variable as a symbol in state indices
POISON = object()  # a name whose definition failed


ROLE_TEXT = {"matrix": "a Linear weight [out, in]", "table": "an embedding table [rows, width]",
              "vector": "a vector"}
KIND_TEXT = dict(ROLE_TEXT, norm="a norm's weight and bias")
RESERVED_NAMES = RESERVED | set(SCALAR_KINDS)  # the lowering never names a value one of these
