"""Syntax nodes: what the front ends build from text, close to it (`Name`, `Call`, `Let`, `For`, ...).

Frozen dataclasses, each keeping its source span; `Spec` is a whole parsed file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from ..source import NO_SPAN, Span


@dataclass(frozen=True)
class Name:
    id: str
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Num:
    value: int | float
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Str:
    value: str
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Const:
    """True, False or None."""

    value: Any
    span: Span = NO_SPAN


@dataclass(frozen=True)
class BinOp:
    op: str  # + - * / // % @ **
    left: "Expr"
    right: "Expr"
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Unary:
    op: str  # - + not
    operand: "Expr"
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Compare:
    op: str  # == != < <= > >=
    left: "Expr"
    right: "Expr"
    span: Span = NO_SPAN


@dataclass(frozen=True)
class BoolOp:
    op: str  # and | or
    left: "Expr"
    right: "Expr"
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Cond:
    """`body if test else orelse`; orelse is None for a guarded statement (`x = f(x) if c`)."""

    body: "Expr"
    test: "Expr"
    orelse: "Expr | None"
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Keyword:
    name: str
    value: "Expr"
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Call:
    func: str
    args: tuple["Expr", ...]
    kwargs: tuple[Keyword, ...]
    span: Span = NO_SPAN
    func_span: Span = NO_SPAN


@dataclass(frozen=True)
class SliceExpr:
    lo: "Expr | None"
    hi: "Expr | None"
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Subscript:
    value: "Expr"
    index: tuple["Expr", ...]
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Attribute:
    value: "Expr"
    attr: str
    span: Span = NO_SPAN


@dataclass(frozen=True)
class ListExpr:
    items: tuple["Expr", ...]
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Exists:
    name: Name
    span: Span = NO_SPAN


Expr = Union[Name, Num, Str, Const, BinOp, Unary, Compare, BoolOp, Cond, Call, SliceExpr,
             Subscript, Attribute, ListExpr, Exists]


@dataclass(frozen=True)
class Let:
    name: str
    value: Expr
    span: Span = NO_SPAN
    name_span: Span = NO_SPAN


@dataclass(frozen=True)
class Assign:
    name: str
    index: tuple[Expr, ...] | None
    value: Expr
    span: Span = NO_SPAN
    name_span: Span = NO_SPAN


@dataclass(frozen=True)
class If:
    test: Expr
    body: tuple["Stmt", ...]
    orelse: tuple["Stmt", ...]
    span: Span = NO_SPAN


@dataclass(frozen=True)
class For:
    var: str
    lo: Expr
    hi: Expr  # inclusive, as in `0..n_layer-1`
    body: tuple["Stmt", ...]
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Assert:
    """`assert T <= block_size`: a condition on dims, checked at run time (or in Config)."""

    test: Expr
    span: Span = NO_SPAN


Stmt = Union[Let, Assign, If, For, Assert]


@dataclass(frozen=True)
class Decl:
    """One line of a section: `name : type [?] [= default] [if cond else None]`, or `name = expr`."""

    section: str
    name: str
    type: Expr | None  # None for a derived `name = expr`
    value: Expr | None  # default / init / derived value
    optional: bool = False
    condition: Expr | None = None
    where: tuple["Decl", ...] = ()
    span: Span = NO_SPAN
    name_span: Span = NO_SPAN
    # `name[l] : ...`: the layer variable its condition reads, and where it is written
    layer_var: tuple[str, Span] | None = None


@dataclass(frozen=True)
class MapEntry:
    """`name[l] <- source` in a `checkpoint FMT:` section; `name[l, e] <- source` reads the axis
    after the layer axis one key per entry (`{e}` in the key: an expert of a mixture)."""

    fmt: str
    name: str
    layer_var: str | None
    source: Expr
    span: Span = NO_SPAN
    expert_var: str | None = None


@dataclass(frozen=True)
class ConfigEntry:
    """One line of a `config FMT:` section: `field <- source` (kind "read"; `_ <- FMT.key` lists keys
    to ignore), `FMT.key <- value` ("write": what the way back writes) or `assert test, "message"`
    ("assert")."""

    fmt: str
    kind: str
    target: str | None  # the field (read), "FMT.key" (write); None for an assert
    source: Expr
    message: str | None = None
    span: Span = NO_SPAN
    target_span: Span = NO_SPAN


@dataclass(frozen=True)
class Spec:
    """A parsed spec, before checking."""

    path: str
    sha256: str
    name: str
    decls: tuple[Decl, ...]
    body: tuple[Stmt, ...]
    mappings: tuple[MapEntry, ...] = ()
    notation: str = "dsl"
    config_maps: tuple[ConfigEntry, ...] = ()


__all__ = [
    "Name", "Num", "Str", "Const", "BinOp", "Unary", "Compare", "BoolOp", "Cond", "Keyword", "Call",
    "SliceExpr", "Subscript", "Attribute", "ListExpr", "Exists", "Expr", "Let", "Assign", "If",
    "For", "Assert", "Stmt", "Decl", "MapEntry", "ConfigEntry", "Spec",
]
