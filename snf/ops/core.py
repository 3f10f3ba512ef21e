"""The ops. Each `register` call is one op: signature, shape rule, NumPy reference, torch lowering.

Shape rules receive `ctx` (symbolic equality and display, see `check.ShapeCtx`) and `a`, the
checked arguments by name: a `TensorT` for tensors, a `Dim` for ints, a Python value for
static floats, bools and strings (None when only known at run time), tuples for lists.
"""

from __future__ import annotations

import math

import numpy as np

from ..dims import Dim
from ..ir import BOOL, FLOAT, ScalarT, TensorT
from .registry import REQUIRED, OpDef, OpError, P, registrar
from .shapes import slices_shape

OPS: dict[str, OpDef] = {}
register = registrar(OPS)

FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("int32", "int64")


# ----------------------------------------------------------------------------- rule helpers

def _same_dtype(a: TensorT, b: TensorT, an: str, bn: str) -> None:
    if a.dtype != b.dtype:
        raise OpError(f"`{bn}` is {b.dtype} but `{an}` is {a.dtype}", bn, code="dtype-mismatch",
                      hint="operands of one op must share a dtype", blame=(an, bn))


def _float(t: TensorT, name: str) -> None:
    if t.dtype not in FLOATS:
        raise OpError(f"`{name}` must be a floating tensor, got {t.dtype}", name, code="dtype-mismatch")


def _rank_at_least(t: TensorT, n: int, name: str, what: str = "") -> None:
    if t.rank < n:
        raise OpError(f"`{name}` must have at least {n} axes{what}, got rank {t.rank}", name, code="rank-mismatch")


def _axis(axis: Dim | None, rank: int, name: str = "axis") -> int:
    v = axis.value if axis is not None else None
    if v is None:
        raise OpError(f"`{name}` must be a constant integer", name, code="arg-kind")
    if not -rank <= v < rank:
        raise OpError(f"axis {v} is out of range for a rank-{rank} tensor", name, code="bad-axis")
    return v % rank


def broadcast(ctx, s1: tuple, s2: tuple, n1: str, n2: str) -> tuple:
    out = []
    for i in range(1, max(len(s1), len(s2)) + 1):
        d1 = s1[-i] if i <= len(s1) else None
        d2 = s2[-i] if i <= len(s2) else None
        if d1 is None or (d2 is not None and d1.value == 1 and d2.value != 1):
            out.append(d2)
        elif d2 is None or d2.value == 1:
            out.append(d1)
        elif ctx.eq(d1, d2):
            out.append(d1)
        else:
            raise OpError(f"cannot broadcast {ctx.show(s1)} with {ctx.show(s2)}: "
                          f"{ctx.show_dim(d1)} != {ctx.show_dim(d2)}", n2, blame=(n1, n2))
    return tuple(reversed(out))


# ----------------------------------------------------------------------------- arithmetic

_SCALAR_FN = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
              "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b}


def _binary_rule(opname: str):
    def rule(ctx, a):
        x, y = a["a"], a["b"]
        if isinstance(x, ScalarT) and isinstance(y, ScalarT):
            kind = "float" if "float" in (x.kind, y.kind) or opname in ("div", "pow") else "int"
            if kind == "int" and x.dim is not None and y.dim is not None and opname in _SCALAR_FN:
                return ScalarT("int", ctx.dim_op(_SCALAR_FN[opname], x.dim, y.dim))
            return ScalarT(kind)
        if opname in ("floordiv", "mod"):
            raise OpError(f"`{ {'floordiv': '//', 'mod': '%'}[opname]}` applies to integers, not tensors", "a",
                          code="arg-kind")
        tx = x if isinstance(x, TensorT) else None
        ty = y if isinstance(y, TensorT) else None
        if tx and ty:
            _same_dtype(tx, ty, "a", "b")
            return TensorT(broadcast(ctx, tx.shape, ty.shape, "a", "b"), tx.dtype)
        t = tx or ty
        return TensorT(t.shape, t.dtype)
    return rule


def _code_binary(sym: str):
    def lower(c):
        if sym == "**":  # right-associative, and binds tighter than a unary minus on its left
            return f"{c.code('a', prec=41)} ** {c.code('b', prec=40)}"
        return f"{c.code('a', prec=_PREC[sym])} {sym} {c.code('b', prec=_PREC[sym] + 1)}"
    return lower


_PREC = {"+": 10, "-": 10, "*": 20, "/": 20, "//": 20, "%": 20, "@": 20, "**": 30}

for _name, _sym, _np in [("add", "+", np.add), ("sub", "-", np.subtract), ("mul", "*", np.multiply),
                         ("div", "/", np.divide), ("floordiv", "//", np.floor_divide), ("mod", "%", np.mod),
                         ("pow", "**", np.power)]:
    register(OpDef(
        _name, (P("a", "value"), P("b", "value")), _binary_rule(_name),
        numpy=(lambda f: lambda a, b: f(a, b))(_np),
        torch=_code_binary(_sym), doc=f"`a {_sym} b`, elementwise with broadcasting", elementwise=True,
        prec=_PREC[_sym]))


def _neg_rule(ctx, a):
    x = a["a"]
    if isinstance(x, ScalarT):
        return ScalarT(x.kind, -x.dim if x.dim is not None else None)
    return x


register(OpDef("neg", (P("a", "value"),), _neg_rule, numpy=lambda a: -a,
               torch=lambda c: f"-{c.code('a', prec=40)}", doc="`-a`", elementwise=True, prec=40))


def _matmul_rule(ctx, a):
    x, y = a["a"], a["b"]
    if not isinstance(x, TensorT) or not isinstance(y, TensorT):
        raise OpError("`@` multiplies two tensors", "a", code="arg-kind")
    _same_dtype(x, y, "a", "b")
    _rank_at_least(x, 2, "a")
    _rank_at_least(y, 2, "b")
    if not ctx.eq(x.shape[-1], y.shape[-2]):
        raise OpError(f"matmul of {ctx.show(x.shape)} @ {ctx.show(y.shape)}: inner dims "
                      f"{ctx.show_dim(x.shape[-1])} and {ctx.show_dim(y.shape[-2])} differ", "b", blame=("a", "b"))
    batch = broadcast(ctx, x.shape[:-2], y.shape[:-2], "a", "b")
    return TensorT(batch + (x.shape[-2], y.shape[-1]), x.dtype)


register(OpDef("matmul", (P("a", "tensor"), P("b", "tensor")), _matmul_rule,
               numpy=lambda a, b: a @ b, torch=_code_binary("@"), prec=20,
               doc="`a @ b`: plain matrix product, batched over leading axes (no transpose)."))


def _unary_float(name, np_fn, torch_fn, doc):
    def rule(ctx, a):
        x = a["x"]
        if isinstance(x, ScalarT):
            return FLOAT
        _float(x, "x")
        return x
    register(OpDef(name, (P("x", "value"),), rule, numpy=lambda x: np_fn(x),
                   torch=lambda c: torch_fn(c), doc=doc, elementwise=True))


def _scalar_or_tensor(c, tensor_fn: str, scalar_fn: str) -> str:
    return f"{tensor_fn}({c.code('x')})" if isinstance(c.ty("x"), TensorT) else f"{scalar_fn}({c.code('x')})"


_unary_float("sqrt", np.sqrt, lambda c: _scalar_or_tensor(c, "torch.sqrt", "math.sqrt"), "square root")
_unary_float("exp", np.exp, lambda c: _scalar_or_tensor(c, "torch.exp", "math.exp"), "exponential")
_unary_float("log", np.log, lambda c: _scalar_or_tensor(c, "torch.log", "math.log"), "natural logarithm")
_unary_float("tanh", np.tanh, lambda c: f"torch.tanh({c.code('x')})", "hyperbolic tangent")


def _logic_rule(kind_in: str):
    def rule(ctx, a):
        for n, t in a.items():
            if not isinstance(t, ScalarT):
                raise OpError("conditions compare config values, not tensors", n, code="bad-condition")
        return BOOL
    return rule


_LOGIC_PREC = {"or": 1, "and": 2, "==": 4, "!=": 4, "<": 4, "<=": 4, ">": 4, ">=": 4}

for _name, _sym, _fn in [("eq", "==", lambda a, b: a == b), ("ne", "!=", lambda a, b: a != b),
                         ("lt", "<", lambda a, b: a < b), ("le", "<=", lambda a, b: a <= b),
                         ("gt", ">", lambda a, b: a > b), ("ge", ">=", lambda a, b: a >= b),
                         ("and", "and", lambda a, b: a and b), ("or", "or", lambda a, b: a or b)]:
    register(OpDef(_name, (P("a", "value"), P("b", "value")), _logic_rule(_name),
                   numpy=(lambda f: lambda a, b: f(a, b))(_fn),
                   torch=(lambda sym, p: lambda c: f"{c.code('a', prec=p + 1)} {sym} {c.code('b', prec=p + 1)}")(
                       _sym, _LOGIC_PREC[_sym]),
                   doc=f"`a {_sym} b` on config values", prec=_LOGIC_PREC[_sym]))

register(OpDef("not", (P("a", "value"),), _logic_rule("not"), numpy=lambda a: not a,
               torch=lambda c: f"not {c.code('a', prec=4)}", doc="`not a` on config values", prec=3))


# ----------------------------------------------------------------------------- activations

def _float_tensor_rule(ctx, a):
    _float(a["x"], "x")
    return a["x"]


def _np_gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    from math import erf
    return 0.5 * x * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))


register(OpDef(
    "gelu", (P("x", "tensor"), P("approximate", "str", "none", choices=("none", "tanh"), static=True)),
    _float_tensor_rule, numpy=_np_gelu,
    torch=lambda c: (f"F.gelu({c.code('x')}, approximate='tanh')" if c.val("approximate") == "tanh"
                     else f"F.gelu({c.code('x')})"),
    doc="GELU; `approximate=\"tanh\"` is GPT-2's tanh form, the default is exact (erf).", elementwise=True))

register(OpDef("relu", (P("x", "tensor"),), _float_tensor_rule, numpy=lambda x: np.maximum(x, 0.0),
               torch=lambda c: f"F.relu({c.code('x')})", doc="ReLU", elementwise=True))


def _np_silu(x):
    return x / (1.0 + np.exp(-x))


register(OpDef("silu", (P("x", "tensor"),), _float_tensor_rule, numpy=_np_silu,
               torch=lambda c: f"F.silu({c.code('x')})", doc="SiLU (swish): x * sigmoid(x)", elementwise=True))


def _swiglu_rule(ctx, a):
    g, u = a["gate"], a["up"]
    _float(g, "gate")
    _same_dtype(g, u, "gate", "up")
    return TensorT(broadcast(ctx, g.shape, u.shape, "gate", "up"), g.dtype)


register(OpDef("swiglu", (P("gate", "tensor"), P("up", "tensor")), _swiglu_rule,
               numpy=lambda gate, up: _np_silu(gate) * up,
               torch=lambda c: f"F.silu({c.code('gate')}) * {c.code('up', prec=21)}",
               doc="SwiGLU gating: silu(gate) * up", prec=20))


def _np_softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _softmax_rule(ctx, a):
    _float(a["x"], "x")
    _axis(a["axis"], a["x"].rank)
    return a["x"]


register(OpDef("softmax", (P("x", "tensor"), P("axis", "int", -1, aliases=("dim",), static=True)), _softmax_rule,
               numpy=lambda x, axis=-1: _np_softmax(x, axis),
               torch=lambda c: f"F.softmax({c.code('x')}, dim={c.code('axis')})", doc="softmax along an axis"))


def _dropout_rule(ctx, a):
    _float(a["x"], "x")
    return a["x"]


register(OpDef(
    "dropout", (P("x", "tensor"), P("rate", "float", aliases=("p",))), _dropout_rule,
    numpy=lambda x, rate: x,
    torch=lambda c: f"F.dropout({c.code('x')}, p={c.code('rate')}, training=self.training)",
    doc="dropout; identity outside training (`model.eval()`)."))


# ----------------------------------------------------------------------------- norms & linear

def _norm_rule(ctx, a, has_bias: bool):
    x = a["x"]
    _float(x, "x")
    _rank_at_least(x, 1, "x")
    names = ("weight", "bias") if has_bias else ("weight",)
    for n in names:
        w = a.get(n)
        if w is None:
            continue
        if w.rank != 1 or not ctx.eq(w.shape[0], x.shape[-1]):
            raise OpError(f"`{n}` is {ctx.show(w.shape)} but normalising {ctx.show(x.shape)} needs "
                          f"[{ctx.show_dim(x.shape[-1])}]", n, blame=("x", n))
        _same_dtype(x, w, "x", n)
    return x


def _np_layer_norm(x, weight=None, bias=None, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


register(OpDef(
    "layer_norm",
    (P("x", "tensor"), P("weight", "tensor?", None, role="norm_weight"), P("bias", "tensor?", None, role="bias"),
     P("eps", "float", 1e-5)),
    lambda ctx, a: _norm_rule(ctx, a, True), numpy=_np_layer_norm,
    torch=lambda c: f"F.layer_norm({c.code('x')}, ({c.dim(c.ty('x').shape[-1])},), {c.code('weight')}, "
                    f"{c.code('bias')}, {c.code('eps')})",
    doc="LayerNorm over the last axis."))


def _np_rms_norm(x, weight=None, eps=1e-6):
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y * weight if weight is not None else y


register(OpDef(
    "rms_norm", (P("x", "tensor"), P("weight", "tensor?", None, role="norm_weight"), P("eps", "float", 1e-6)),
    lambda ctx, a: _norm_rule(ctx, a, False), numpy=_np_rms_norm,
    torch=lambda c: f"F.rms_norm({c.code('x')}, ({c.dim(c.ty('x').shape[-1])},), {c.code('weight')}, {c.code('eps')})",
    doc="RMSNorm over the last axis: x / sqrt(mean(x^2) + eps) * weight."))


def _linear_rule(ctx, a):
    x, w, b = a["x"], a["weight"], a.get("bias")
    _float(x, "x")
    _rank_at_least(x, 1, "x")
    if w.rank != 2:
        raise OpError(f"`weight` must be a matrix [out, in], got {ctx.show(w.shape)}", "weight", code="rank-mismatch")
    _same_dtype(x, w, "x", "weight")
    d_in = x.shape[-1]
    out, inn = w.shape
    if not ctx.eq(inn, d_in):
        if ctx.eq(out, d_in):
            # the weight is stored [in, out]: say so, and carry on as if transposed
            want = f"[{ctx.show_dim(inn)}, {ctx.show_dim(out)}]"
            hint = f"declare the weight transposed as {want}, or use `matmul(x, weight)` for a plain x @ W"
            ctx.recover(TensorT(x.shape[:-1] + (inn,), x.dtype))
        else:
            want = f"[out, {ctx.show_dim(d_in)}]"
            hint = f"the weight's second axis must equal the input's last axis, {ctx.show_dim(d_in)}"
        raise OpError(f"`weight` is {ctx.show(w.shape)} but `linear` takes [out, in] = {want} for the input "
                      f"`x` {ctx.show(x.shape)}", "weight", hint, blame=("x", "weight"))
    if b is not None:
        if b.rank != 1 or not ctx.eq(b.shape[0], out):
            raise OpError(f"`bias` is {ctx.show(b.shape)} but the output has {ctx.show_dim(out)} features: "
                          f"expected [{ctx.show_dim(out)}]", "bias", blame=("weight", "bias"))
        _same_dtype(x, b, "x", "bias")
    return TensorT(x.shape[:-1] + (out,), x.dtype)


def _np_linear(x, weight, bias=None):
    y = x @ weight.T
    return y + bias if bias is not None else y


register(OpDef(
    "linear", (P("x", "tensor"), P("weight", "tensor", role="weight"), P("bias", "tensor?", None, role="bias")),
    _linear_rule, numpy=_np_linear,
    torch=lambda c: (f"F.linear({c.code('x')}, {c.code('weight')}, {c.code('bias')})" if c.given("bias")
                     else f"F.linear({c.code('x')}, {c.code('weight')})"),
    doc="`x @ weight.T + bias`, with weight [out, in] as in torch.nn.Linear."))


# ----------------------------------------------------------------------------- shape ops

def _gather_rule(ctx, a):
    table, idx = a["table"], a["index"]
    if idx.dtype not in INTS:
        raise OpError(f"`index` must be an integer tensor, got {idx.dtype}", "index", code="dtype-mismatch")
    ax = _axis(a["axis"], table.rank)
    if ax != 0:
        raise OpError("only `axis=0` (an embedding lookup) is supported", "axis", code="bad-axis")
    return TensorT(idx.shape + table.shape[1:], table.dtype)


register(OpDef(
    "gather", (P("table", "tensor", role="embedding"), P("index", "tensor", aliases=("idx",)),
               P("axis", "int", 0, static=True)),
    _gather_rule, numpy=lambda table, index, axis=0: table[index],
    torch=lambda c: f"F.embedding({c.code('index')}, {c.code('table')})",
    doc="rows of `table` at `index` (an embedding lookup)."))


def _slice_rule(ctx, a):
    return TensorT(slices_shape(ctx, a["x"].shape, a["index"], "index"), a["x"].dtype)


def _np_index(x, index):
    return x[tuple(index)]


register(OpDef("slice", (P("x", "tensor"), P("index", "slices")), _slice_rule, numpy=_np_index,
               torch=lambda c: f"{c.code('x', prec=50)}[{c.slices('index')}]",
               doc="`x[0:T, :]`: a slice along leading axes."))

# `x[i]` and `x[a:b]` in a spec; `index` is its name in the IR.
register(OpDef("index", (P("x", "tensor"), P("index", "slices")), _slice_rule, numpy=_np_index,
               torch=lambda c: f"{c.code('x', prec=50)}[{c.slices('index')}]", doc="subscript"))


def _size_rule(ctx, a):
    x = a["x"]
    ax = _axis(a["axis"], x.rank)
    return ScalarT("int", x.shape[ax])


register(OpDef("size", (P("x", "tensor"), P("axis", "int", static=True)), _size_rule,
               numpy=lambda x, axis: x.shape[axis],
               torch=lambda c: f"{c.code('x', prec=50)}.size({c.code('axis')})", doc="`x.shape[i]`"))


def _reshape_rule(ctx, a):
    x, dims = a["x"], a["shape"]
    before = ctx.product(x.shape)
    after = ctx.product(dims)
    if not ctx.eq(before, after):
        raise OpError(f"cannot reshape {ctx.show(x.shape)} to {ctx.show(dims)}: "
                      f"{ctx.show_dim(before)} elements vs {ctx.show_dim(after)}", "shape", blame=("x", "shape"))
    return TensorT(tuple(dims), x.dtype)


register(OpDef("reshape", (P("x", "tensor"), P("shape", "dims")), _reshape_rule,
               numpy=lambda x, shape: x.reshape(shape),
               torch=lambda c: f"{c.code('x', prec=50)}.reshape({c.dims_code('shape')})",
               doc="reshape; the element counts must agree symbolically."))


def _transpose_rule(ctx, a):
    x = a["x"]
    i, j = _axis(a["a"], x.rank, "a"), _axis(a["b"], x.rank, "b")
    s = list(x.shape)
    s[i], s[j] = s[j], s[i]
    return TensorT(tuple(s), x.dtype)


register(OpDef("transpose", (P("x", "tensor"), P("a", "int", -2, static=True), P("b", "int", -1, static=True)),
               _transpose_rule, numpy=lambda x, a=-2, b=-1: np.swapaxes(x, a, b),
               torch=lambda c: f"{c.code('x', prec=50)}.transpose({c.code('a')}, {c.code('b')})",
               doc="swap two axes (the last two by default)."))


def _concat_rule(ctx, a):
    ts = a["tensors"]
    if not ts:
        raise OpError("`concat` needs at least one tensor", "tensors", code="missing-arg")
    first = ts[0]
    ax = _axis(a["axis"], first.rank)
    total = first.shape[ax]
    for i, t in enumerate(ts[1:], 1):
        if t.rank != first.rank:
            raise OpError(f"tensor {i} has rank {t.rank} but tensor 0 has rank {first.rank}", "tensors",
                          code="rank-mismatch")
        for k, (d0, d1) in enumerate(zip(first.shape, t.shape)):
            if k != ax and not ctx.eq(d0, d1):
                hint = None
                if sorted(map(str, first.shape[:ax] + first.shape[ax + 1:])) == \
                        sorted(map(str, t.shape[:ax] + t.shape[ax + 1:])) or \
                        sorted(map(str, first.shape)) != sorted(map(str, t.shape)) and \
                        set(map(str, first.shape)) & set(map(str, t.shape)) and first.rank > 2:
                    hint = ("the two tensors hold the same kind of axes in different orders: declare one in the "
                            "other's layout (or transpose it) before concatenating")
                raise OpError(f"cannot concatenate `#0` {ctx.show(first.shape)} and `#{i}` {ctx.show(t.shape)} "
                              f"along axis {ax}: axis {k} is {ctx.show_dim(d0)} in one and {ctx.show_dim(d1)} "
                              f"in the other", "tensors", hint=hint, blame=("tensors",))
        _same_dtype(first, t, "tensors", "tensors")
        total = total + t.shape[ax]
    s = list(first.shape)
    s[ax] = total
    return TensorT(tuple(s), first.dtype)


register(OpDef("concat", (P("tensors", "tensors"), P("axis", "int", 0, aliases=("dim",), static=True)), _concat_rule,
               numpy=lambda tensors, axis=0: np.concatenate(tensors, axis=axis),
               torch=lambda c: f"torch.cat({c.code('tensors')}, dim={c.code('axis')})",
               doc="concatenate along an axis."))


def _full_rule(ctx, a):
    return TensorT(tuple(a["shape"]), a["dtype"])


register(OpDef("full", (P("shape", "dims"), P("value", "float"), P("dtype", "dtype", "float32")), _full_rule,
               numpy=lambda shape, value, dtype="float32": np.full(shape, value, dtype=np.float64),
               torch=lambda c: f"torch.full(({c.dims_code('shape')},), {c.code('value')}, "
                               f"dtype=torch.{c.val('dtype')}, device={c.device})",
               doc="a tensor filled with one value."))


def _assign_rule(ctx, a):
    x, v = a["x"], a["value"]
    region = slices_shape(ctx, x.shape, a["index"], "index")
    if isinstance(v, TensorT):
        broadcast(ctx, region, v.shape, "x", "value")
        got = ctx.show(v.shape)
        if len(v.shape) != len(region) or not all(ctx.eq(p, q) for p, q in zip(region, v.shape)):
            raise OpError(f"the region {ctx.show(region)} does not match the value {got}", "value",
                          blame=("index", "value"))
    return x


def _np_assign(x, index, value):
    y = np.array(x, copy=True)
    y[tuple(index)] = value
    return y


register(OpDef("assign", (P("x", "tensor"), P("index", "slices"), P("value", "value")), _assign_rule,
               numpy=_np_assign,
               torch=lambda c: f"_assign({c.code('x')}, {c.slice_objects('index')}, {c.code('value')})",
               helpers=("_assign",), doc="a copy of `x` with `x[index] = value`."))


def _argmax_rule(ctx, a):
    x = a["x"]
    ax = _axis(a["axis"], x.rank)
    return TensorT(x.shape[:ax] + x.shape[ax + 1:], "int64")


register(OpDef("argmax", (P("x", "tensor"), P("axis", "int", -1, aliases=("dim",), static=True)), _argmax_rule,
               numpy=lambda x, axis=-1: np.argmax(x, axis=axis),
               torch=lambda c: f"{c.code('x', prec=50)}.argmax(dim={c.code('axis')})",
               doc="index of the largest entry along an axis (int64)."))


# ----------------------------------------------------------------------------- attention

def _attention_rule(ctx, a):
    q, k, v, mask = a["q"], a["k"], a["v"], a.get("mask")
    for n in ("q", "k", "v"):
        t = a[n]
        _float(t, n)
        if t.rank != 4:
            raise OpError(f"`{n}` must be [B, T, H, head_dim], got {ctx.show(t.shape)}", n, code="rank-mismatch",
                          hint="reshape the projection to [B, T, H, head_dim] first")
    _same_dtype(q, k, "q", "k")
    _same_dtype(q, v, "q", "v")
    for n, t in (("k", k), ("v", v)):
        for axis, label in ((0, "batch"), (2, "heads")):
            if not ctx.eq(q.shape[axis], t.shape[axis]):
                raise OpError(f"`{n}` is {ctx.show(t.shape)} but `q` is {ctx.show(q.shape)}: the {label} axes "
                              f"({ctx.show_dim(t.shape[axis])} vs {ctx.show_dim(q.shape[axis])}) differ; "
                              f"layout is [B, T, H, head_dim]", n, blame=("q", n))
    if not ctx.eq(q.shape[3], k.shape[3]):
        raise OpError(f"`k` is {ctx.show(k.shape)} but `q` is {ctx.show(q.shape)}: head dims differ", "k",
                      blame=("q", "k"))
    if not ctx.eq(k.shape[1], v.shape[1]):
        raise OpError(f"`v` is {ctx.show(v.shape)} but `k` is {ctx.show(k.shape)}: key lengths differ", "v",
                      blame=("k", "v"))
    if mask is not None:
        if mask.rank != 2 or not ctx.eq(mask.shape[0], q.shape[0]) or not ctx.eq(mask.shape[1], k.shape[1]):
            raise OpError(f"`mask` is {ctx.show(mask.shape)}; a padding mask is [B, T_keys] = "
                          f"[{ctx.show_dim(q.shape[0])}, {ctx.show_dim(k.shape[1])}]", "mask")
    return TensorT(q.shape[:3] + (v.shape[3],), q.dtype)


def _np_attention(q, k, v, causal=False, scale=None, mask=None, dropout=0.0):
    q, k, v = (np.swapaxes(t, 1, 2) for t in (q, k, v))  # [B, H, T, hd]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ np.swapaxes(k, -1, -2)) * scale
    tq, tk = s.shape[-2], s.shape[-1]
    if causal:  # bottom-right aligned: query i sees keys j <= i + (tk - tq)
        allowed = np.tril(np.ones((tq, tk), dtype=bool), k=tk - tq)
        s = np.where(allowed, s, -np.inf)
    if mask is not None:
        s = np.where(mask[:, None, None, :] != 0, s, -np.inf)
    return np.swapaxes(_np_softmax(s, -1) @ v, 1, 2)


def _lower_attention(c):
    q, k, v = (f"{c.code(n, prec=50)}.transpose(1, 2)" for n in ("q", "k", "v"))
    causal = c.val("causal")
    extra = ""
    if c.given("dropout"):
        extra += f", dropout_p=({c.code('dropout', prec=5)} if self.training else 0.0)"
    if c.given("scale"):
        extra += f", scale={c.code('scale')}"
    same_len = c.eq(c.ty("q").shape[1], c.ty("k").shape[1])
    if c.given("mask") or (causal and not same_len):
        mask = c.code("mask") if c.given("mask") else "None"
        if causal and not same_len and c.cache_position:  # keys may sit in a preallocated cache
            extra += f", cache_position={c.cache_position}"
        return f"_attention({q}, {k}, {v}, {mask}, causal={bool(causal)}{extra}).transpose(1, 2)"
    return f"F.scaled_dot_product_attention({q}, {k}, {v}, is_causal={bool(causal)}{extra}).transpose(1, 2)"


register(OpDef(
    "flash_attention",
    (P("q", "tensor", aliases=("Q",)), P("k", "tensor", aliases=("K",)), P("v", "tensor", aliases=("V",)),
     P("causal", "bool", False, aliases=("is_causal",), static=True), P("scale", "float", None),
     P("mask", "tensor?", None, aliases=("attention_mask",)), P("dropout", "float", None, aliases=("dropout_p",))),
    _attention_rule, numpy=_np_attention, torch=_lower_attention, helpers=("_attention",),
    doc="softmax(q k^T * scale) v over [B, T, H, head_dim]; `causal` is aligned bottom-right; "
        "`mask` is a [B, T_keys] padding mask (0 = padding). Lowers to F.scaled_dot_product_attention."))


def _rope_rule(ctx, a):
    x = a["x"]
    _float(x, "x")
    if x.rank != 4:
        raise OpError(f"`x` must be [B, T, H, head_dim], got {ctx.show(x.shape)}", "x", code="rank-mismatch")
    hd = x.shape[3]
    if not ctx.divisible(hd, 2):
        raise OpError(f"RoPE needs an even head_dim, got {ctx.show_dim(hd)}", "x", code="bad-constraint")
    return x


def _np_rope(x, offset=0, base=10000.0):
    t, hd = x.shape[1], x.shape[3]
    inv = 1.0 / (base ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    ang = np.outer(np.arange(offset, offset + t, dtype=np.float64), inv)
    emb = np.concatenate([ang, ang], axis=-1)  # [T, hd]
    cos, sin = np.cos(emb)[None, :, None, :], np.sin(emb)[None, :, None, :]
    rot = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], axis=-1)
    return x * cos + rot * sin


register(OpDef(
    "rope", (P("x", "tensor"), P("offset", "int", 0, aliases=("pos",)), P("base", "float", 10000.0, aliases=("theta",))),
    _rope_rule, numpy=_np_rope,
    torch=lambda c: f"_rope({c.code('x')}, {c.code('offset')}, {c.code('base')})", helpers=("_rope",),
    doc="rotary position embedding on [B, T, H, head_dim], HF Llama's rotate-half convention; "
        "positions start at `offset`."))


def _ce_rule(ctx, a):
    logits, tgt = a["logits"], a["targets"]
    _float(logits, "logits")
    if tgt.dtype not in INTS:
        raise OpError(f"`targets` must be an integer tensor, got {tgt.dtype}", "targets", code="dtype-mismatch")
    if tgt.rank != logits.rank - 1 or not all(ctx.eq(p, q) for p, q in zip(tgt.shape, logits.shape[:-1])):
        raise OpError(f"`targets` is {ctx.show(tgt.shape)} but `logits` is {ctx.show(logits.shape)}: expected "
                      f"{ctx.show(logits.shape[:-1])}", "targets", blame=("logits", "targets"))
    return TensorT((), logits.dtype)


def _np_ce(logits, targets, shift=False, ignore_index=-100):
    if shift:
        logits, targets = logits[..., :-1, :], targets[..., 1:]
    flat = logits.reshape(-1, logits.shape[-1])
    t = targets.reshape(-1)
    keep = t != ignore_index
    z = flat - flat.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return -logp[np.arange(len(t))[keep], t[keep]].mean()


def _lower_ce(c):
    lg, tg, ignore = c.code("logits", prec=50), c.code("targets", prec=50), c.code("ignore_index")
    if c.val("shift"):  # targets rolled, not sliced: see _next_tokens
        tg = f"{c.helper('_next_tokens')}({c.code('targets')}, {ignore})"
    return f"F.cross_entropy({lg}.flatten(0, -2), {tg}.flatten(), ignore_index={ignore})"


register(OpDef(
    "cross_entropy",
    (P("logits", "tensor"), P("targets", "tensor"), P("shift", "bool", False, static=True),
     P("ignore_index", "int", -100, static=True)),
    _ce_rule, numpy=_np_ce, torch=_lower_ce,
    doc="mean cross-entropy; `shift=True` scores position t against target t+1 (next-token loss)."))

__all__ = ["REQUIRED"]
