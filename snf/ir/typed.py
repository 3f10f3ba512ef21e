"""Types and the typed IR the checker builds (`Ref`, `Op`, `Bind`, `Loop`, `Model`, ...).

Every expression carries its type with a symbolic shape, names are resolved, and calls are
bound to an op's signature. Passes, code generation and the NumPy interpreter read only these.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Union

from ..dims import Dim, Divides, show_dim
from ..source import NO_SPAN, Span
from .syntax import ConfigEntry, MapEntry

# ============================================================================ types


@dataclass(frozen=True)
class TensorT:
    shape: tuple[Dim, ...]
    dtype: str
    maybe_none: bool = False  # a conditional parameter or an optional input

    @property
    def rank(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class ScalarT:
    kind: str  # int | float | bool | str | dtype
    dim: Dim | None = None  # the symbolic value of an int, when known


@dataclass(frozen=True)
class ShapeT:
    dims: tuple[Dim, ...]


@dataclass(frozen=True)
class ListT:
    items: tuple["Type", ...]


@dataclass(frozen=True)
class SeqT:
    """A list-valued config field (`layer_types : list[str]`): its items' kind and its length, a
    dim when the spec gives one (`list[str, n_layer]`, or a derived `n = len(layer_types)`)."""

    kind: str  # int | float | bool | str
    length: Dim | None = None


@dataclass(frozen=True)
class SliceT:
    lo: Dim | None
    hi: Dim | None


@dataclass(frozen=True)
class NoneT:
    pass


@dataclass(frozen=True)
class ErrorT:
    """The type of a value whose checking already failed: uses of it report nothing more."""


Type = Union[TensorT, ScalarT, ShapeT, ListT, SeqT, SliceT, NoneT, ErrorT]
INT, FLOAT, BOOL, STR = ScalarT("int"), ScalarT("float"), ScalarT("bool"), ScalarT("str")

# ============================================================================ typed IR


@dataclass(frozen=True)
class Ref:
    """A resolved name. kind: local | config | dim | input | param | layer_param | layer_input | buffer | loopvar."""

    name: str
    kind: str
    ty: Type
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Lit:
    value: Any  # int | float | bool | str | None
    ty: Type
    span: Span = NO_SPAN


@dataclass(frozen=True)
class DimVal:
    """An int known only symbolically (a shape entry, a derived dim)."""

    dim: Dim
    ty: Type
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Op:
    """A call of a registry op; args are bound to the op's parameter names, in signature order."""

    op: str
    args: tuple[tuple[str, "TExpr"], ...]
    ty: Type
    span: Span = NO_SPAN

    def arg(self, name: str) -> "TExpr":
        return dict(self.args)[name]


@dataclass(frozen=True)
class TCond:
    test: "TExpr"
    body: "TExpr"
    orelse: "TExpr"
    ty: Type
    span: Span = NO_SPAN


@dataclass(frozen=True)
class TList:
    items: tuple["TExpr", ...]
    ty: Type
    span: Span = NO_SPAN


@dataclass(frozen=True)
class TSlice:
    lo: "TExpr | None"
    hi: "TExpr | None"
    ty: Type
    span: Span = NO_SPAN


@dataclass(frozen=True)
class IsPresent:
    """`X exists` for an optional input."""

    name: str
    ty: Type = BOOL
    span: Span = NO_SPAN


TExpr = Union[Ref, Lit, DimVal, Op, TCond, TList, TSlice, IsPresent]


@dataclass(frozen=True)
class Bind:
    """`name = value`; `let` marks the first binding in its scope."""

    name: str
    value: TExpr
    let: bool
    span: Span = NO_SPAN


@dataclass(frozen=True)
class SetItem:
    """`name[index] = value`, an in-place write into a local tensor."""

    name: str
    index: tuple[TExpr, ...]
    value: TExpr
    span: Span = NO_SPAN


@dataclass(frozen=True)
class TIf:
    test: TExpr
    body: tuple["TStmt", ...]
    orelse: tuple["TStmt", ...]
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Loop:
    """A layer loop over `count` iterations; stacked params indexed by `var` become per-layer."""

    var: str
    count: Dim
    body: tuple["TStmt", ...]
    carried: tuple[str, ...]  # outer locals the body re-assigns
    reads: tuple[str, ...]  # outer locals/inputs the body reads
    stacked: tuple[str, ...]  # parameters indexed per layer
    span: Span = NO_SPAN
    uses_var: bool = False  # var used other than to index stacked params
    layer_inputs: tuple[str, ...] = ()  # inputs indexed per layer (`past_keys[l]`): each layer gets its slice


@dataclass(frozen=True)
class FusedLinear:
    """Several `linear`s of one input, fused into one matmul (the `fuse_linear` pass)."""

    targets: tuple[str, ...]
    input: TExpr
    weights: tuple[str, ...]  # per-layer parameter names, in target order
    biases: tuple[str | None, ...]
    fused_weight: str
    fused_bias: str | None
    sizes: tuple[Dim, ...]
    tys: tuple[Type, ...]
    span: Span = NO_SPAN


TStmt = Union[Bind, SetItem, TIf, Loop, FusedLinear]


@dataclass(frozen=True)
class ConfigField:
    name: str
    kind: str  # int | float | bool | str, or list[<one of them>]
    default: Any  # python value (a tuple for a list), or MISSING
    span: Span = NO_SPAN
    length: Dim | None = None  # a list's declared length (`list[str, n_layer]`): Config checks it
    # a list of strings' known items (its defaults', and those the spec compares its items with): Config
    # refuses any other, which the spec would take for none of them
    choices: tuple[str, ...] | None = None

    @property
    def item_kind(self) -> str | None:
        """A list field's items' kind; None for a scalar field."""
        return self.kind[5:-1] if self.kind.startswith("list[") else None

    def choices_message(self) -> str:
        """What Config says of an item of a list of strings that the spec does not know."""
        known = ", ".join(map(repr, self.choices[:-1])) + (" or " if len(self.choices) > 1 else "")
        return f"each item of `{self.name}` must be {known}{self.choices[-1]!r}"


MISSING = object()


@dataclass(frozen=True)
class Derived:
    """`head_dim = D // H` (an int dim) or a derived float."""

    name: str
    dim: Dim | None
    value: TExpr
    alias_of: str | None  # `D = n_embd`
    span: Span = NO_SPAN
    opaque: bool = False  # an int no polynomial of the params expresses (`int(x)` of a float): dim is its own name


@dataclass(frozen=True)
class Tensor:
    """An input, parameter, buffer or output declaration, typed."""

    name: str
    ty: TensorT
    optional: bool = False
    condition: TExpr | None = None  # `if bias else None`
    init: TExpr | None = None  # parameter/buffer initialiser
    span: Span = NO_SPAN
    role: str = ""  # registry-inferred default init role: weight | bias | norm_weight | embedding
    # `name[l] : ... if cond else None`: the variable `condition` reads for the layer number; the
    # tensor exists on the layers where it holds (a Block holds it or None)
    layer_var: str | None = None


@dataclass(frozen=True)
class Constraint:
    """A condition on config fields, checked when a Config is built."""

    cond: Divides
    span: Span
    why: str
    when: tuple[TExpr, ...] = ()  # config conditions its statement runs under (`if flag:`): made only then


@dataclass(frozen=True)
class Check:
    """A condition `lhs <op> rhs` on dims (a slice end within its axis, an `assert`).

    Checked when a Config is built if it names config fields only, else on entry to forward."""

    lhs: Dim
    rhs: Dim
    span: Span
    op: str = "<="
    why: str = ""  # what the error says when it fails ("T must be divisible by 2"); else the comparison
    # what its statement runs under, each a condition the check can test where it is made: the
    # optional inputs given (`past exists`), the ifs' tests on config values and sizes (`small`)
    when: tuple[TExpr, ...] = ()

    def text(self, display=()) -> str:
        """`T_past + T <= block_size`, in the spec's spellings (`display`, as Model.display): the one
        printer of a check, for `snfc ir`, messages, stats and the interpreter."""
        names = dict(display)
        return f"{show_dim(self.lhs, names)} {self.op} {show_dim(self.rhs, names)}"

    def message(self, display=()) -> str:
        """What a failure says: the checker's own sentence, else the comparison expected."""
        return self.why or f"expected {self.text(display)}"

    @property
    def fields(self) -> list[str]:
        """The dims it reads, sorted: a failure shows their values."""
        return sorted(self.lhs.symbols() | self.rhs.symbols())

    @property
    def given(self) -> tuple[str, ...]:
        """The optional inputs it is made under."""
        return tuple(w.name for w in self.when if isinstance(w, IsPresent))

    @property
    def tested(self) -> bool:
        """Whether it is made under a test of a value (`if small:`), not only under inputs given."""
        return any(not isinstance(w, IsPresent) for w in self.when)

    def reads(self) -> set[str]:
        """The names it and its conditions read: dims, config values, the inputs tested."""
        out = self.lhs.symbols() | self.rhs.symbols()
        stack = list(self.when)
        while stack:
            e = stack.pop()
            if isinstance(e, DimVal) or isinstance(e, Ref) and getattr(e.ty, "dim", None) is not None:
                out |= (e.dim if isinstance(e, DimVal) else e.ty.dim).symbols()
            elif isinstance(e, (Ref, IsPresent)):
                out.add(e.name)
            elif isinstance(e, Op):
                stack.extend(a for _, a in e.args)
            elif isinstance(e, TCond):
                stack += [e.test, e.body, e.orelse]
        return out


@dataclass(frozen=True)
class ValueCheck:
    """A number the module computes from config values alone (an initialiser's argument, an op's
    scalar argument, a derived float or computed int): for every config it must compute (no
    division by zero, no square root of a negative), be finite, and lie in its range where the
    op gives one (a dropout rate in [0, 1]). Checked when a Config is built."""

    value: TExpr
    span: Span
    what: str  # "`rate` of `dropout`": the message says it
    fields: tuple[str, ...]  # the config values it is computed from, for the message
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # low < value, not low <= value
    # config conditions under which the module computes it (the `if` it is in, a conditional
    # parameter's flag, a loop's `n_layer >= 1`): a config for which one is false never computes it
    when: tuple[TExpr, ...] = ()

    def range_text(self) -> str:
        if self.low is not None and self.high is not None:
            return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        return f"<= {self.high:g}" if self.high is not None else "finite"

    def holds(self, value) -> bool:
        """Whether a computed value (a Python or NumPy number) is finite and in range."""
        try:
            value = float(value)
        except (TypeError, ValueError, OverflowError):
            return False
        if value != value or value in (float("inf"), float("-inf")):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or value <= self.high


@dataclass(frozen=True)
class Model:
    name: str
    path: str
    sha256: str
    config: tuple[ConfigField, ...]
    derived: tuple[Derived, ...]
    inputs: tuple[Tensor, ...]
    params: tuple[Tensor, ...]
    buffers: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    body: tuple[TStmt, ...]
    constraints: tuple[Constraint, ...] = ()
    dim_sources: tuple[tuple[str, str, int], ...] = ()  # (dim, input, axis) where first bound
    display: tuple[tuple[Any, str], ...] = ()  # atom -> spec spelling, for messages and comments
    mappings: tuple[MapEntry, ...] = ()
    config_maps: tuple[ConfigEntry, ...] = ()  # `config FMT:` sections, checked (snf.weight_mapping encodes them)
    stacked: tuple[str, ...] = ()  # parameters that live per layer
    checks: tuple[Check, ...] = ()
    input_groups: tuple[tuple[str, ...], ...] = ()  # optional inputs given together or not at all
    float_dtype: str | None = None  # the parameters' floating dtype: in a cast model, the cast's
    values: tuple[ValueCheck, ...] = ()  # numbers computed from the config, checked by Config
    index_rows: tuple[tuple[str, tuple[Dim, ...]], ...] = ()  # input -> the distinct row counts it indexes (walk.index_rows)
    computed: tuple[tuple[str, int], ...] = ()  # each computed int (`rot = int(...)`) at the defaults (checker's fold)

    def param(self, name: str) -> Tensor:
        return next(p for p in self.params + self.buffers if p.name == name)

    # The model's facts, computed once from the checked model and read by every later stage
    # (codegen, stats, `snfc ir`, the interpreter, the planning passes): docs/architecture.md.
    def config_names(self) -> frozenset[str]:
        """What a Config holds: its fields, and the ints it computes (`h = int(D * r)`)."""
        return self._config_names

    @functools.cached_property
    def _config_names(self) -> frozenset[str]:
        return frozenset({c.name for c in self.config} | {d.name for d in self.derived if d.opaque})

    @functools.cached_property
    def run_time_dims(self) -> frozenset[str]:
        """The dims a call decides (`B`, `T`, `T_past`): what the inputs and outputs' shapes name
        beyond the Config."""
        derived = {d.name for d in self.derived}
        return frozenset({d for d, _, _ in self.dim_sources} | {
            s for t in self.inputs + self.outputs for d in t.ty.shape for s in d.symbols()
            if s not in self.config_names()} - derived)

    def runs_in_config(self, check: Check) -> bool:
        """Whether Config checks it when built (it and its conditions read config values only);
        else forward does."""
        return check.reads() <= self.config_names() | {d.name for d in self.derived}

    @functools.cached_property
    def forward_checks(self) -> tuple[Check, ...]:
        """The checks forward makes on entry: those that read a run-time dim."""
        return tuple(c for c in self.checks if not self.runs_in_config(c))

    def rows_indexed_by(self, name: str) -> tuple[Dim, ...]:
        """The row counts of the tables the integer input `name` indexes directly (`gather(table,
        name)`: an embedding): its ids must be rows of each."""
        return dict(self.index_rows).get(name, ())

    def config_conditions(self) -> list:
        """What a Config checks when it is built (the checks on config values alone, the
        divisibility constraints, the numbers it computes), in an order where each can be
        evaluated once those before it hold: bounds on fields first (a size >= 0, a divisor >= 1;
        inner divisors before the divisions they guard), then the computed numbers (computed ints
        among them), then the rest."""
        opaque = {d.name for d in self.derived if d.opaque}
        checks = [c for c in self.checks if self.runs_in_config(c)]

        def depth(d: Dim) -> int:
            return max((1 + max(depth(a.num), depth(a.den)) for a in d.atoms() if not isinstance(a, str)), default=0)
        bounds = sorted((c for c in checks if c.lhs.value is not None and c.op in ("<=", "<")
                         and not c.rhs.symbols() & opaque), key=lambda c: depth(c.rhs))
        rest = [c for c in checks if c not in bounds]
        return bounds + list(self.values) + rest + list(self.constraints)


__all__ = [
    "TensorT", "ScalarT", "ShapeT", "ListT", "SeqT", "SliceT", "NoneT", "ErrorT", "Type", "INT", "FLOAT",
    "BOOL", "STR", "Ref", "Lit", "DimVal", "Op", "TCond", "TList", "TSlice", "IsPresent", "TExpr",
    "Bind", "SetItem", "TIf", "Loop", "FusedLinear", "TStmt", "ConfigField", "MISSING", "Derived",
    "Tensor", "Constraint", "Check", "ValueCheck", "Model",
]
