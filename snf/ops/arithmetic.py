"""Arithmetic and conditions: `+ - * / // % **`, unary `-`, `@`, `sqrt exp log tanh`, and the
comparisons and logic (of config conditions, or elementwise of tensors). The same conventions as
core.py.

The dtype rules of arithmetic live here (`_arith_dtype`, docs/language.md 5.1): a result has
its tensor's dtype, so nothing may change it the way torch's type promotion would.
"""

from __future__ import annotations

import math

from ..dims import Dim
from ..ir import BOOL, FLOAT, ScalarT, TensorT
from .lazy_numpy import np
from . import sharding
from .registry import COMPARISON, UNARY, DivisionByZero, OpDef, OpError, Param, ScalarError, may_fail, registrar
from .shapes import FLOATS, INTS, broadcast, product, rank_at_least, require_float, same_dtype

OPS: dict[str, OpDef] = {}
register = registrar(OPS)


# ----------------------------------------------------------------------------- on numbers
# Each op's `scalar`: its value on Python numbers, as folding computes it (check/fold.py), each
# failure a ScalarError saying why. Python's own semantics otherwise (`//` floors, `%` takes the
# divisor's sign), so the mapping language and a checkpoint key's fields compute with them too.

@may_fail
def _div(a, b):
    if b == 0:
        raise DivisionByZero("divides by zero")
    return a / b


@may_fail
def _floordiv(a, b):
    if b == 0:
        raise DivisionByZero("divides by zero")
    return a // b


@may_fail
def _mod(a, b):
    if b == 0:
        raise DivisionByZero("divides by zero")
    return a % b


@may_fail
def _pow(a, b):
    """a ** b, estimated first: its size is |b| * log2|a| bits, checked before it is computed (an
    integer past 2**62, the limit of dims, is too large; a float past 2**1023 overflows)."""
    if a == 0 and b < 0:
        raise DivisionByZero("divides by zero (0 to a negative power)")
    exact = isinstance(a, int) and isinstance(b, int) and b >= 0
    if a not in (0, 1, -1):
        try:
            bits = b * math.log2(abs(a))
        except OverflowError:
            bits = math.inf
        if bits > (62 if exact else 1023):
            raise ScalarError("is too large" if exact else "overflows")
    if a < 0 and isinstance(b, float) and b != int(b):
        raise ScalarError("is not a real number (a negative base to a fractional power)")
    try:
        return a ** b
    except OverflowError:
        raise ScalarError("overflows") from None


@may_fail
def _sqrt(x):
    if x < 0:
        raise ScalarError("takes the square root of a negative number")
    return math.sqrt(x)


@may_fail
def _log(x):
    if x <= 0:
        raise ScalarError("takes the logarithm of a number <= 0")
    return math.log(x)


@may_fail
def _exp(x):
    if x > 709:
        raise ScalarError("overflows")
    return math.exp(x)


def _power(base: Dim, exponent: Dim) -> Dim | None:
    """`base ** exponent` as a dim, for a small constant exponent >= 0; else None."""
    k = exponent.value
    if k is None or not 0 <= k <= 62:
        return None
    out = Dim.const(1)
    for _ in range(k):
        out = out * base
    return out


def _scalar_arith(ctx, opname: str, x: ScalarT, y: ScalarT) -> ScalarT:
    if "bool" in (x.kind, y.kind):
        raise OpError(f"`{OPS[opname].symbol}` applies to numbers, not True or False", "a", code="arg-kind")
    kind = "float" if "float" in (x.kind, y.kind) or opname == "div" else "int"
    if kind == "int" and x.dim is not None and y.dim is not None:
        if opname == "pow":
            if y.dim.value is not None and y.dim.value < 0:
                return FLOAT  # 2 ** -1 is 0.5
            power = ctx.dim_op(_power, x.dim, y.dim) if y.dim.value is not None else None
            return ScalarT("int", power) if power is not None else ScalarT("int")
        # + - * // % of dims: the op's own function, on the dims' polynomials
        return ScalarT("int", ctx.dim_op(OPS[opname].scalar, x.dim, y.dim))
    return ScalarT(kind)


def _arith_dtype(opname: str, t: TensorT, other) -> None:
    """The dtype rules of arithmetic on tensors (docs/language.md 5.1): the result has the tensor's
    dtype, so nothing may change it the way torch's type promotion would."""
    sym = OPS[opname].symbol
    if t.dtype == "bool":
        raise OpError(f"`{sym}` does not apply to bool tensors", "a", code="dtype-mismatch",
                      hint="arithmetic takes int and float tensors; a bool tensor is a mask (`cast(m, int64)` counts)")
    if t.dtype in FLOATS:
        if isinstance(other, ScalarT) and other.kind == "bool":
            raise OpError(f"`{sym}` of a tensor and True/False", "b", code="arg-kind")
        return
    # an integer tensor
    if opname == "div":
        raise OpError(f"`/` on {t.dtype} tensors is true division, whose result is a float tensor", "a",
                      code="dtype-mismatch", hint="divide float tensors: `cast(x, float32) / 2`")
    if isinstance(other, ScalarT) and other.kind != "int":
        raise OpError(f"`{sym}` of an {t.dtype} tensor and a {other.kind} would make a float tensor", "b",
                      code="dtype-mismatch", hint="use an integer, or cast the tensor first: `cast(x, float32)`")
    if opname == "pow":
        if isinstance(other, TensorT):
            raise OpError(f"`**` of {t.dtype} tensors: an exponent tensor may hold negative powers", "b",
                          code="dtype-mismatch", hint="raise an integer tensor to a constant power >= 0")
        if other.dim is None or other.dim.value is None or other.dim.value < 0:
            raise OpError(f"`**` of an {t.dtype} tensor needs a constant power >= 0: integers to negative "
                          f"powers are not integers", "b", code="dtype-mismatch")


def _binary_rule(opname: str):
    def rule(ctx, args):
        x, y = args["a"], args["b"]
        if isinstance(x, ScalarT) and isinstance(y, ScalarT):
            return _scalar_arith(ctx, opname, x, y)
        if opname in ("floordiv", "mod"):
            raise OpError(f"`{OPS[opname].symbol}` applies to integers, not tensors", "a", code="arg-kind")
        tx = x if isinstance(x, TensorT) else None
        ty = y if isinstance(y, TensorT) else None
        if tx and ty:
            same_dtype(tx, ty, "a", "b")
            _arith_dtype(opname, tx, ty)
            return TensorT(broadcast(ctx, tx.shape, ty.shape, "a", "b"), tx.dtype)
        t = tx or ty
        if opname == "pow" and ty is not None and t.dtype not in FLOATS:  # 2 ** x on an integer x
            raise OpError(f"`**` with an {t.dtype} exponent tensor may hold negative powers", "b",
                          code="dtype-mismatch")
        _arith_dtype(opname, t, y if tx else x)
        return TensorT(t.shape, t.dtype)
    return rule


def _code_binary(name: str):
    def lower(call):
        op = OPS[name]
        left, right = op.operand_precs()
        return f"{call.code('a', prec=left)} {op.symbol} {call.code('b', prec=right)}"
    return lower


for _name, _sym, _prec, _np, _scalar in [
        ("add", "+", 10, "add", lambda a, b: a + b), ("sub", "-", 10, "subtract", lambda a, b: a - b),
        ("mul", "*", 20, "multiply", lambda a, b: a * b), ("div", "/", 20, "divide", _div),
        ("floordiv", "//", 20, "floor_divide", _floordiv), ("mod", "%", 20, "mod", _mod),
        ("pow", "**", 30, "power", _pow)]:
    register(OpDef(
        _name, (Param("a", "value"), Param("b", "value")), _binary_rule(_name),
        numpy=(lambda f: lambda a, b: getattr(np, f)(a, b))(_np),
        torch=_code_binary(_name), doc=f"`a {_sym} b`, elementwise with broadcasting", elementwise=True,
        prec=_prec, symbol=_sym, scalar=_scalar,
        keeps_result=_name == "pow", shard=sharding.pointwise))  # a tensor exponent's gradient reads the result


def _neg_rule(ctx, args):
    x = args["a"]
    if isinstance(x, ScalarT):
        if x.kind == "bool":
            raise OpError("`-` applies to numbers, not True or False", "a", code="arg-kind")
        return ScalarT(x.kind, -x.dim if x.dim is not None else None)
    _arith_dtype("neg", x, None)
    return x


register(OpDef("neg", (Param("a", "value"),), _neg_rule, numpy=lambda a: -a,
               torch=lambda call: f"-{call.code('a', prec=UNARY)}", doc="`-a`", elementwise=True, prec=UNARY,
               symbol="-", scalar=lambda a: -a, shard=sharding.pointwise))


def _matmul_rule(ctx, args):
    x, y = args["a"], args["b"]
    if not isinstance(x, TensorT) or not isinstance(y, TensorT):
        raise OpError("`@` multiplies two tensors", "a", code="arg-kind")
    require_float(x, "a")  # integer matmul has no CUDA kernel
    same_dtype(x, y, "a", "b")
    rank_at_least(x, 2, "a")
    rank_at_least(y, 2, "b")
    if not ctx.eq(x.shape[-1], y.shape[-2]):
        raise OpError(f"matmul of {ctx.show(x.shape)} @ {ctx.show(y.shape)}: inner dims "
                      f"{ctx.show_dim(x.shape[-1])} and {ctx.show_dim(y.shape[-2])} differ", "b", blame=("a", "b"))
    batch = broadcast(ctx, x.shape[:-2], y.shape[:-2], "a", "b")
    return TensorT(batch + (x.shape[-2], y.shape[-1]), x.dtype)


def _matmul_flops(args, out, grads):
    """2 m k n per batch entry; each operand's gradient is one more product of that size."""
    forward = 2 * product(out.shape[:-2]) * args["a"].shape[-2] * args["a"].shape[-1] * args["b"].shape[-1]
    return forward, forward * len(grads & {"a", "b"})


register(OpDef("matmul", (Param("a", "tensor"), Param("b", "tensor")), _matmul_rule,
               numpy=lambda a, b: a @ b, torch=_code_binary("matmul"), prec=20, symbol="@", flops=_matmul_flops,
               doc="`a @ b`: plain matrix product, batched over leading axes (no transpose).", shard=sharding.matmul))


def _float_unary(name, np_fn, torch_fn, doc, scalar, keeps_result: bool = False):
    """An elementwise op of one float argument (a number, or a floating tensor); `np_fn` names a
    NumPy function, or is one; `scalar` computes it on a number."""
    def rule(ctx, args):
        x = args["x"]
        if isinstance(x, ScalarT):
            if x.kind == "bool":
                raise OpError(f"`{name}` applies to numbers, not True or False", "x", code="arg-kind")
            return FLOAT
        require_float(x, "x")
        return x
    numpy = np_fn if callable(np_fn) else lambda x: getattr(np, np_fn)(x)
    register(OpDef(name, (Param("x", "value"),), rule, numpy=numpy,
                   torch=lambda call: torch_fn(call), doc=doc, elementwise=True, keeps_result=keeps_result,
                   scalar=scalar, shard=sharding.pointwise))


def scalar_or_tensor(call, tensor_fn: str, scalar_fn: str) -> str:
    return f"{tensor_fn}({call.code('x')})" if isinstance(call.ty("x"), TensorT) else f"{scalar_fn}({call.code('x')})"


_float_unary("sqrt", "sqrt", lambda call: scalar_or_tensor(call, "torch.sqrt", "math.sqrt"), "square root", _sqrt,
             keeps_result=True)
_float_unary("exp", "exp", lambda call: scalar_or_tensor(call, "torch.exp", "math.exp"), "exponential", _exp,
             keeps_result=True)
_float_unary("log", "log", lambda call: scalar_or_tensor(call, "torch.log", "math.log"), "natural logarithm", _log)
_float_unary("tanh", "tanh", lambda call: scalar_or_tensor(call, "torch.tanh", "math.tanh"), "hyperbolic tangent",
             math.tanh, keeps_result=True)
_float_unary("sin", "sin", lambda call: scalar_or_tensor(call, "torch.sin", "math.sin"), "sine", math.sin)
_float_unary("cos", "cos", lambda call: scalar_or_tensor(call, "torch.cos", "math.cos"), "cosine", math.cos)


def np_sigmoid(x):
    """1 / (1 + exp(-x)), as (1 + tanh(x / 2)) / 2: the same number, without exp's overflow."""
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _lower_sigmoid(call):
    if isinstance(call.ty("x"), TensorT):
        return f"torch.sigmoid({call.code('x')})"
    return f"(0.5 * (1.0 + math.tanh(0.5 * {call.code('x', prec=21)})))"  # a call's precedence


_float_unary("sigmoid", np_sigmoid, _lower_sigmoid, "the logistic function 1 / (1 + exp(-x))",
             lambda x: 0.5 * (1.0 + math.tanh(0.5 * x)), keeps_result=True)


def _logic_rule(opname: str):
    def rule(ctx, args):
        tensors = {n: t for n, t in args.items() if isinstance(t, TensorT)}
        if tensors and OPS[opname].prec == COMPARISON:  # elementwise on tensors: a bool tensor
            if len(tensors) == 2:
                same_dtype(args["a"], args["b"], "a", "b")
                return TensorT(broadcast(ctx, args["a"].shape, args["b"].shape, "a", "b"), "bool")
            (n, t), = tensors.items()
            other = args["b" if n == "a" else "a"]
            if t.dtype in INTS + ("bool",) and other.kind == "float":
                raise OpError(f"`{n}` is {t.dtype} but the number compared with it is a float", n,
                              code="dtype-mismatch", hint="cast one side first: `cast(x, float32)`")
            return TensorT(t.shape, "bool")
        if tensors:  # `and`, `or`, `not` of masks
            return _mask_logic(ctx, opname, args)
        texts = [n for n, t in args.items() if t.kind == "str"]
        if texts and len(texts) != len(args):
            raise OpError(f"`{'==' if opname == 'eq' else '!='}` compares a string with a number", texts[0],
                          code="arg-kind")
        return BOOL
    return rule


def _mask_logic(ctx, opname: str, args) -> TensorT:
    """`and`, `or` and `not` of bool tensors: elementwise, with broadcasting (a bool tensor)."""
    for n, t in args.items():
        if isinstance(t, ScalarT):  # torch's `&` would not short-circuit as the condition's `and` does
            raise OpError(f"`{opname}` of a tensor and a config condition", n, code="bad-condition",
                          hint="`and`, `or` and `not` combine two conditions, or two bool tensors; pick a mask "
                               "by a condition with `m1 if flag else m2`")
        if t.dtype != "bool":
            raise OpError(f"`{opname}` of tensors takes bool tensors, but `{n}` is {t.dtype}", n,
                          code="dtype-mismatch", hint="make a bool tensor by comparing: `x > 0.0`, `i != 0`")
    if opname == "not":
        return args["a"]
    return TensorT(broadcast(ctx, args["a"].shape, args["b"].shape, "a", "b"), "bool")


# the elementwise forms of `and` and `or` on bool tensors, with the precedence of Python's `&`, `|`
_MASK_OP = {"and": ("&", 7, "logical_and"), "or": ("|", 5, "logical_or")}


def _lower_logic(name: str):
    def lower(call):
        if name in _MASK_OP and isinstance(call.ty("a"), TensorT):
            op, p, _ = _MASK_OP[name]
            return f"{call.code('a', prec=p)} {op} {call.code('b', prec=p + 1)}"
        left, right = OPS[name].operand_precs()
        return f"{call.code('a', prec=left)} {OPS[name].symbol} {call.code('b', prec=right)}"
    return lower


def _np_logic(name: str, fn):
    def run(a, b):
        if name in _MASK_OP and isinstance(a, np.ndarray):
            return getattr(np, _MASK_OP[name][2])(a, b)
        return fn(a, b)
    return run


for _name, _sym, _prec, _fn in [
        ("eq", "==", COMPARISON, lambda a, b: a == b), ("ne", "!=", COMPARISON, lambda a, b: a != b),
        ("lt", "<", COMPARISON, lambda a, b: a < b), ("le", "<=", COMPARISON, lambda a, b: a <= b),
        ("gt", ">", COMPARISON, lambda a, b: a > b), ("ge", ">=", COMPARISON, lambda a, b: a >= b),
        ("and", "and", 2, lambda a, b: a and b), ("or", "or", 1, lambda a, b: a or b)]:
    register(OpDef(_name, (Param("a", "value"), Param("b", "value")), _logic_rule(_name),
                   numpy=_np_logic(_name, _fn), torch=_lower_logic(_name),
                   doc=f"`a {_sym} b`: " + ("on config values, or elementwise on tensors (a bool tensor)"
                                            if _prec == COMPARISON else
                                            "of config conditions, or elementwise of bool tensors"),
                   prec=_prec, symbol=_sym, scalar=_fn, shard=sharding.pointwise))

register(OpDef("not", (Param("a", "value"),), _logic_rule("not"),
               numpy=lambda a: np.logical_not(a) if isinstance(a, np.ndarray) else not a,
               torch=lambda call: (f"~{call.code('a', prec=UNARY)}" if isinstance(call.ty("a"), TensorT)
                                   else f"not {call.code('a', prec=OPS['not'].operand_precs()[0])}"),
               doc="`not a`: of a config condition, or elementwise of a bool tensor", prec=3, symbol="not",
               scalar=lambda a: not a, shard=sharding.pointwise))

