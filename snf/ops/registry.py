"""The op registry: one `OpDef` per op holds everything snfc knows about it.

An entry gives the op's signature, its shape-and-dtype rule, a NumPy reference (float64,
used by `snf.interpret`) and a torch lowering (used by code generation). Adding an op is
one `register(OpDef(...))` in the family module it belongs to, its case in tests/test_ops.py and
its row in docs/language.md, and nothing else (docs/architecture.md, "Recipes"). This module holds
the types only and imports no op: `snf.ops` merges the families' tables (`all_ops()`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

REQUIRED = object()
PROBABILITY = (0.0, 1.0, False)  # Param.within of a dropout rate
POSITIVE = (0.0, None, True)
NON_NEGATIVE = (0.0, None, False)  # a norm's eps: 0 is allowed, a negative one can take a root of < 0

# Argument kinds a signature may use:
#   tensor      a tensor                      tensor?   a tensor or None (optional bias, mask)
#   value       a tensor or a number          int / float / bool / str   a scalar (str: from `choices`)
#   dims        a list of dims [B, T, D]      slices    a list of slices/indices [0:T, :]
#   tensors     a list of tensors             dtype     float32, int64, ...
#   list        a list-valued param (`layer_types : list[str]`)
KINDS = {"tensor", "tensor?", "value", "int", "float", "bool", "str", "dims", "slices", "tensors", "dtype", "list"}


@dataclass(frozen=True)
class Param:
    """One parameter of an op."""

    name: str
    kind: str
    default: Any = REQUIRED
    aliases: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    role: str | None = None  # default init of a spec parameter passed here (weight, bias, norm_weight, ...)
    static: bool = False  # must be a compile-time constant (a literal or config expression)
    # (low, high, low_open) a number passed here must lie in, either bound None: checked for the
    # defaults, and by Config for every config (a dropout rate in [0, 1])
    within: tuple | None = None

    def __post_init__(self):
        assert self.kind in KINDS, self.kind


class OpError(Exception):
    """Raised by a shape rule; the checker turns it into a located diagnostic."""

    def __init__(self, message: str, arg: str | None = None, hint: str | None = None,
                 code: str = "shape-mismatch", blame: tuple[str, ...] = ()):
        super().__init__(message)
        self.message, self.arg, self.hint, self.code, self.blame = message, arg, hint, code, blame


class ScalarError(ArithmeticError):
    """Raised by an op's `scalar` for numbers it has no value for; the message says why, as
    folding reports it (`1.0 / 0.0` "divides by zero")."""


class DivisionByZero(ScalarError, ZeroDivisionError):
    """A division by zero: still a ZeroDivisionError to the readers that compute as Python does
    (the mapping language, a checkpoint key's fields)."""


def may_fail(scalar: Callable) -> Callable:
    """Marks a `scalar` that raises ScalarError for some finite numbers (a division by zero, a
    square root of a negative): a number the module computes with it from config values is
    checked for every config (check/numbers.py)."""
    scalar.may_fail = True
    return scalar


# Python's precedence of a comparison (`<`, `==`): operands of one do not chain (`(a < b) < c`)
COMPARISON = 4
UNARY = 40  # of a unary minus: `-a ** b` is `-(a ** b)`


@dataclass(frozen=True)
class OpDef:
    name: str
    params: tuple[Param, ...]
    shape: Callable  # (ctx, args) -> Type; args: dict name -> checked value (see check/calls.py)
    numpy: Callable  # (**args) -> ndarray | scalar, float64
    torch: Callable  # (call) -> str, a Python expression; call gives each argument's code
    doc: str = ""
    elementwise: bool = False
    # precedence of the lowered expression (50: a call or attribute access), as Python's; of the
    # operator `symbol` too, where the op has one (its spelling in the spec and in Python)
    prec: int = 50
    symbol: str | None = None  # the operator that writes it (`+`; `-` with one operand is `neg`), or None
    # (numbers) -> the op's value on Python numbers, as folding and the mapping language compute it;
    # it raises ScalarError where there is none (a division by zero); None: the op has no such function
    scalar: Callable | None = None
    # (argument types by name, result type, names of the arguments that need a gradient) ->
    # (forward, backward) FLOPs of the op's matrix products, for `snfc stats`; None: it has none
    flops: Callable | None = None
    # (argument types by name, result type) -> elements of the tensors its lowering makes on the way to
    # its result and autograd keeps (latent_attention's expanded keys), `snfc stats`' activations; None: none
    makes: Callable | None = None
    view: bool = False  # the result is a view of an argument: it takes no memory of its own
    # the result may be an argument itself at run time (dropout outside training, a cast to the
    # dtype it has): a write to it must not be done in place
    passthrough: bool = False
    # autograd keeps the result for the backward (exp, softmax, SDPA's output): a write into it in
    # place would make the backward fail, so such a write copies first (passes/writes.py)
    keeps_result: bool = False
    # the arguments that hold the keys an attention reads (a cache may feed them): an op with
    # them mixes positions, causally where its `causal` is True
    keys: tuple[str, ...] = ()
    # (call, argument, axis) -> sharding.Passage: how that argument's axis, sharded over tensor-parallel
    # ranks, passes through the op (kept, contracted, reduced, mixed: snf/ops/sharding.py); None: the op
    # refuses a sharded argument (an op of no tensor arguments needs none)
    shard: Callable | None = None

    def param(self, name: str) -> Param | None:
        for p in self.params:
            if p.name == name or name in p.aliases:
                return p
        return None

    def operand_precs(self) -> tuple[int, ...]:
        """How tightly each operand of the operator must bind to be written without parentheses,
        as Python reads it: `a - b - c` groups from the left, `a ** b ** c` from the right (and
        `(-a) ** b` needs its parentheses), comparisons do not chain; `-`'s operand is a unary or
        tighter, `not`'s a comparison or tighter."""
        if len(self.params) == 1:
            return (self.prec if self.prec == UNARY else self.prec + 1,)
        if self.symbol == "**":
            return UNARY + 1, UNARY
        if self.prec == COMPARISON:
            return self.prec + 1, self.prec + 1
        return self.prec, self.prec + 1


def registrar(table: dict[str, OpDef]) -> Callable[[OpDef], OpDef]:
    """A `register(OpDef(...))` function that adds each op to `table`, once."""
    def register(op: OpDef) -> OpDef:
        assert op.name not in table, f"op {op.name} registered twice"
        table[op.name] = op
        return op
    return register
