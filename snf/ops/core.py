"""The ops. Each `register` call is one op: signature, shape rule, NumPy reference, torch lowering.

Shape rules receive `ctx` (symbolic equality and display, see `check.ShapeCtx`) and `args`, the
checked arguments by name: a `TensorT` for tensors, a `Dim` for ints, a Python value for
static floats, bools and strings (None when only known at run time), tuples for lists.
Torch lowerings receive `call`, which gives each argument's code (`call.code("x")`), static
value (`call.val`), type (`call.ty`) and whether it was given (`call.given`).
"""

from __future__ import annotations

import math

from ..dims import Dim
from ..ir import ScalarT, TensorT
from .lazy_numpy import np
from . import sharding
from .registry import NON_NEGATIVE, POSITIVE, PROBABILITY, OpDef, OpError, Param, registrar
from .shapes import (FLOATS, INTS, axis_index, broadcast, product, rank_at_least, require_float, same_dtype,
                     slices_shape, stored)

OPS: dict[str, OpDef] = {}
register = registrar(OPS)



# ----------------------------------------------------------------------------- activations

def _float_tensor_rule(ctx, args):
    require_float(args["x"], "x")
    return args["x"]


def np_gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    from math import erf
    return 0.5 * x * (1.0 + np.vectorize(erf, otypes=[np.float64])(x / math.sqrt(2.0)))


register(OpDef(
    "gelu", (Param("x", "tensor"), Param("approximate", "str", "none", choices=("none", "tanh"), static=True)),
    _float_tensor_rule, numpy=np_gelu,
    torch=lambda call: (f"F.gelu({call.code('x')}, approximate='tanh')" if call.val("approximate") == "tanh"
                     else f"F.gelu({call.code('x')})"),
    doc="GELU; `approximate=\"tanh\"` is GPT-2's tanh form, the default is exact (erf).", elementwise=True,
    shard=sharding.pointwise))

register(OpDef("relu", (Param("x", "tensor"),), _float_tensor_rule, numpy=lambda x: np.maximum(x, 0.0),
               torch=lambda call: f"F.relu({call.code('x')})", doc="ReLU", elementwise=True, keeps_result=True,
               shard=sharding.pointwise))


def _np_silu(x):
    return x / (1.0 + np.exp(-x))


register(OpDef("silu", (Param("x", "tensor"),), _float_tensor_rule, numpy=_np_silu,
               torch=lambda call: f"F.silu({call.code('x')})", doc="SiLU (swish): x * sigmoid(x)", elementwise=True,
               shard=sharding.pointwise))


def np_softcap(x, cap):
    return cap * np.tanh(x / cap)


register(OpDef(
    "softcap", (Param("x", "tensor"), Param("cap", "float", within=POSITIVE)), _float_tensor_rule, numpy=np_softcap,
    torch=lambda call: f"{call.code('cap', prec=21)} * torch.tanh({call.code('x', prec=21)} / {call.code('cap', prec=21)})",
    doc="soft-capping, cap * tanh(x / cap): x squashed smoothly into (-cap, cap) (Gemma 2's final logits)",
    elementwise=True, prec=20, shard=sharding.pointwise))


def _swiglu_rule(ctx, args):
    g, u = args["gate"], args["up"]
    require_float(g, "gate")
    same_dtype(g, u, "gate", "up")
    return TensorT(broadcast(ctx, g.shape, u.shape, "gate", "up"), g.dtype)


register(OpDef("swiglu", (Param("gate", "tensor"), Param("up", "tensor")), _swiglu_rule,
               numpy=lambda gate, up: _np_silu(gate) * up,
               torch=lambda call: f"F.silu({call.code('gate')}) * {call.code('up', prec=21)}",
               doc="SwiGLU gating: silu(gate) * up", prec=20, shard=sharding.pointwise))


def np_softmax(x, axis=-1):
    if x.size == 0:  # B = 0 or T = 0: nothing to normalise (np.max has no identity to start from)
        return np.array(x, dtype=np.float64)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _softmax_rule(ctx, args):
    require_float(args["x"], "x")
    axis_index(args["axis"], args["x"].rank)
    return args["x"]


register(OpDef("softmax", (Param("x", "tensor"), Param("axis", "int", -1, aliases=("dim",), static=True)),
               _softmax_rule,
               numpy=lambda x, axis=-1: np_softmax(x, axis),
               torch=lambda call: f"F.softmax({call.code('x')}, dim={call.code('axis')})", doc="softmax along an axis",
               keeps_result=True, shard=sharding.along("normalises", keepdim=True)))


def _dropout_rule(ctx, args):
    require_float(args["x"], "x")
    return args["x"]


register(OpDef(
    "dropout", (Param("x", "tensor"), Param("rate", "float", aliases=("p",), within=PROBABILITY)), _dropout_rule,
    numpy=lambda x, rate: x,
    torch=lambda call: f"F.dropout({call.code('x')}, p={call.code('rate')}, training=self.training)",
    doc="dropout; identity outside training (`model.eval()`).", passthrough=True, shard=sharding.pointwise))


# ----------------------------------------------------------------------------- norms & linear

def _norm_rule(ctx, args, has_bias: bool):
    x = args["x"]
    require_float(x, "x")
    rank_at_least(x, 1, "x")
    names = ("weight", "bias") if has_bias else ("weight",)
    for n in names:
        w = args.get(n)
        if w is None:
            continue
        if w.rank != 1 or not ctx.eq(w.shape[0], x.shape[-1]):
            raise OpError(f"`{n}` is {ctx.show(w.shape)} but normalising {ctx.show(x.shape)} needs "
                          f"[{ctx.show_dim(x.shape[-1])}]", n, blame=("x", n))
        same_dtype(x, w, "x", n)
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
    (Param("x", "tensor"), Param("weight", "tensor?", None, role="norm_weight"),
     Param("bias", "tensor?", None, role="bias"), Param("eps", "float", 1e-5, within=NON_NEGATIVE)),
    lambda ctx, args: _norm_rule(ctx, args, True), numpy=_np_layer_norm,
    torch=lambda call: f"F.layer_norm({call.code('x')}, ({call.dim(call.ty('x').shape[-1])},), {call.code('weight')}, "
                    f"{call.code('bias')}, {call.code('eps')})",
    doc="LayerNorm over the last axis.", shard=sharding.last_axis("normalises", others=("weight", "bias"))))


def _np_rms_norm(x, weight=None, eps=1e-6):
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y * weight if weight is not None else y


register(OpDef(
    "rms_norm",
    (Param("x", "tensor"), Param("weight", "tensor?", None, role="norm_weight"),
     Param("eps", "float", 1e-6, within=NON_NEGATIVE)),
    lambda ctx, args: _norm_rule(ctx, args, False), numpy=_np_rms_norm,
    torch=lambda call: f"F.rms_norm({call.code('x')}, ({call.dim(call.ty('x').shape[-1])},), {call.code('weight')}, "
                       f"{call.code('eps')})",
    doc="RMSNorm over the last axis: x / sqrt(mean(x^2) + eps) * weight.",
    shard=sharding.last_axis("normalises", others=("weight",))))


def _linear_rule(ctx, args):
    x, w, b = args["x"], args["weight"], args.get("bias")
    require_float(x, "x")
    rank_at_least(x, 1, "x")
    if w.rank != 2:
        raise OpError(f"`weight` must be a matrix [out, in], got {ctx.show(w.shape)}", "weight", code="rank-mismatch")
    same_dtype(x, w, "x", "weight")
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
        same_dtype(x, b, "x", "bias")
    return TensorT(x.shape[:-1] + (out,), x.dtype)


def _linear_flops(args, out, grads):
    """x @ W.T over the flattened leading axes; the bias add is not a product."""
    x, w = args["x"], args["weight"]
    forward = 2 * product(x.shape[:-1]) * w.shape[0] * w.shape[1]
    return forward, forward * len(grads & {"x", "weight"})


def _np_linear(x, weight, bias=None):
    y = x @ weight.T
    return y + bias if bias is not None else y


register(OpDef(
    "linear",
    (Param("x", "tensor"), Param("weight", "tensor", role="weight"), Param("bias", "tensor?", None, role="bias")),
    _linear_rule, numpy=_np_linear, flops=_linear_flops,
    torch=lambda call: (f"F.linear({call.code('x')}, {call.code('weight')}, {call.code('bias')})" if call.given("bias")
                     else f"F.linear({call.code('x')}, {call.code('weight')})"),
    doc="`x @ weight.T + bias`, with weight [out, in] as in torch.nn.Linear.", shard=sharding.linear))


# ----------------------------------------------------------------------------- shape ops

def _gather_rule(ctx, args):
    table, idx = args["table"], args["index"]
    if idx.dtype not in INTS:
        raise OpError(f"`index` must be an integer tensor, got {idx.dtype}", "index", code="dtype-mismatch")
    ax = axis_index(args["axis"], table.rank)
    if ax != 0:
        raise OpError("only `axis=0` (an embedding lookup) is supported", "axis", code="bad-axis")
    return TensorT(idx.shape + table.shape[1:], table.dtype)


def _lower_gather(call):
    table = call.ty("table")
    if table.rank == 2 and table.dtype in FLOATS:  # an embedding table
        return f"F.embedding({call.code('index')}, {call.code('table')})"
    return f"{call.code('table', prec=50)}[{call.code('index')}]"  # rows of any table


register(OpDef(
    "gather", (Param("table", "tensor", role="embedding"), Param("index", "tensor", aliases=("idx",)),
               Param("axis", "int", 0, static=True)),
    _gather_rule, numpy=lambda table, index, axis=0: table[index],
    torch=_lower_gather,
    doc="rows of `table` at `index` (an embedding lookup).", shard=sharding.rows))


def _slice_rule(ctx, args):
    return TensorT(slices_shape(ctx, args["x"].shape, args["index"], "index"), args["x"].dtype)


def _np_index(x, index):
    return x[tuple(index)]


register(OpDef("slice", (Param("x", "tensor"), Param("index", "slices")), _slice_rule, numpy=_np_index, view=True,
               torch=lambda call: f"{call.code('x', prec=50)}[{call.slices('index')}]",
               doc="`x[0:T, :]`: a slice along leading axes.", shard=sharding.subscript))

# `x[i]` and `x[a:b]` in a spec; `index` is its name in the IR.
register(OpDef("index", (Param("x", "tensor"), Param("index", "slices")), _slice_rule, numpy=_np_index, view=True,
               torch=lambda call: f"{call.code('x', prec=50)}[{call.slices('index')}]", doc="subscript",
               shard=sharding.subscript))


def _size_rule(ctx, args):
    x = args["x"]
    ax = axis_index(args["axis"], x.rank)
    return ScalarT("int", x.shape[ax])


register(OpDef("size", (Param("x", "tensor"), Param("axis", "int", static=True)), _size_rule,
               numpy=lambda x, axis: x.shape[axis],
               torch=lambda call: f"{call.code('x', prec=50)}.size({call.code('axis')})", doc="`x.shape[i]`",
               shard=sharding.mixed("reads the size of the axis")))


def _reshape_rule(ctx, args):
    x, dims = args["x"], args["shape"]
    for i, d in enumerate(dims):
        ctx.size(d, f"axis {i} of the new shape", "shape")
    before = ctx.product(x.shape)
    after = ctx.product(dims)
    if not ctx.eq(before, after):
        raise OpError(f"cannot reshape {ctx.show(x.shape)} to {ctx.show(dims)}: "
                      f"{ctx.show_dim(before)} elements vs {ctx.show_dim(after)}", "shape", blame=("x", "shape"))
    return TensorT(tuple(dims), x.dtype)


def _changed_axes(old, new, eq) -> tuple[int, int, int]:
    """(i, j, k): the axes old[i:j] that become new[i:k], the others kept on either side."""
    i = 0
    while i < min(len(old), len(new)) and eq(old[i], new[i]):
        i += 1
    s = 0
    while s < min(len(old), len(new)) - i and eq(old[-1 - s], new[-1 - s]):
        s += 1
    return i, len(old) - s, len(new) - s


def _reshape_torch(call) -> str:
    """A split of one axis is an `unflatten` and a merge of neighbouring axes a `flatten`, which read
    the sizes a tensor-parallel rank holds: a split's outer size is the config value that names it
    (`unflatten(2, (cfg.n_head, cfg.head_dim))`, a rank's view of the config divides it: Model.tp_local),
    or left to torch (-1) where it is an expression of several; any other reshape names every size."""
    x, new = call.code('x', prec=50), call.dim_items('shape')
    if new is not None:
        i, j, k = _changed_axes(call.ty('x').shape, new, call.eq)
        if j - i == 1 and k - i > 1 and not any(call.run_time(d) for d in new[i:k]):
            codes = call.dims_codes('shape')[i:k]
            # a named count, not -1: an inner size of 0 (a config of width 0) leaves -1 undecidable
            outer = codes[0] if new[i].as_symbol() is not None else "-1"
            return f"{x}.unflatten({i}, ({outer}, {', '.join(codes[1:])}))"
        if k - i == 1 and j - i > 1:
            return f"{x}.flatten({i}, {j - 1})"
    return f"{x}.reshape({call.dims_code('shape')})"


register(OpDef("reshape", (Param("x", "tensor"), Param("shape", "dims")), _reshape_rule,
               numpy=lambda x, shape: x.reshape(shape), view=True, torch=_reshape_torch,
               doc="reshape; the element counts must agree symbolically.", shard=sharding.reshape))


def _transpose_rule(ctx, args):
    x = args["x"]
    i, j = axis_index(args["a"], x.rank, "a"), axis_index(args["b"], x.rank, "b")
    s = list(x.shape)
    s[i], s[j] = s[j], s[i]
    return TensorT(tuple(s), x.dtype)


register(OpDef("transpose",
               (Param("x", "tensor"), Param("a", "int", -2, static=True), Param("b", "int", -1, static=True)),
               _transpose_rule, numpy=lambda x, a=-2, b=-1: np.swapaxes(x, a, b), view=True,
               torch=lambda call: f"{call.code('x', prec=50)}.transpose({call.code('a')}, {call.code('b')})",
               doc="swap two axes (the last two by default).", shard=sharding.transpose))


def _concat_rule(ctx, args):
    ts = args["tensors"]
    if not ts:
        raise OpError("`concat` needs at least one tensor", "tensors", code="missing-arg")
    first = ts[0]
    ax = axis_index(args["axis"], first.rank)
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
        same_dtype(first, t, "tensors", "tensors")
        total = total + t.shape[ax]
    s = list(first.shape)
    s[ax] = total
    return TensorT(tuple(s), first.dtype)


def _lower_concat(call) -> str:
    # a half dtype goes through _cat: autocast's rule for torch.cat refuses one other than its own
    cat = "_cat" if call.op.ty.dtype in ("float16", "bfloat16") else "torch.cat"
    return f"{cat}({call.code('tensors')}, dim={call.code('axis')})"


register(OpDef("concat", (Param("tensors", "tensors"), Param("axis", "int", 0, aliases=("dim",), static=True)),
               _concat_rule,
               numpy=lambda tensors, axis=0: np.concatenate(tensors, axis=axis),
               torch=_lower_concat, doc="concatenate along an axis.", shard=sharding.concat))


def _full_rule(ctx, args):
    for i, d in enumerate(args["shape"]):
        ctx.size(d, f"axis {i} of the shape", "shape")
    dtype, value = args["dtype"], args["value"]
    if dtype not in FLOATS:  # the value must be one the dtype holds: torch would cast it silently
        allowed = "0 or 1" if dtype == "bool" else f"a constant integer that {dtype} holds"
        low, high = {"bool": (0, 1), "int32": (-2**31, 2**31 - 1)}.get(dtype, (-2**63, 2**63 - 1))
        if value is None or value != int(value) or not low <= value <= high:
            raise OpError(f"the value of {'an' if dtype[0] == 'i' else 'a'} {dtype} `full` must be {allowed}", "value",
                          code="dtype-mismatch", hint=f"torch would cast the value to {dtype}")
    return TensorT(tuple(args["shape"]), dtype)


def _np_full(shape, value, dtype="float32"):
    return np.full(shape, value, dtype=np.float64)  # float64 throughout; the rule keeps `value` exact in `dtype`


def _lower_full(call):
    dims = call.dims_code("shape")
    shape = f"({dims})" if len(call.args["shape"].items) > 1 else f"({dims},)" if dims else "()"
    return f"torch.full({shape}, {call.code('value')}, dtype={call.dtype(call.val('dtype'))}, device={call.device})"


register(OpDef("full", (Param("shape", "dims"), Param("value", "float"), Param("dtype", "dtype", "float32")),
               _full_rule, numpy=_np_full, torch=_lower_full,
               doc="a tensor filled with one value."))


def _assign_rule(ctx, args):
    x, v = args["x"], args["value"]
    region = slices_shape(ctx, x.shape, args["index"], "index")
    stored(x.dtype, v)
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


register(OpDef("assign", (Param("x", "tensor"), Param("index", "slices"), Param("value", "value")), _assign_rule,
               numpy=_np_assign,
               torch=lambda call: f"_assign({call.code('x')}, {call.slice_objects('index')}, {call.code('value')})",
               doc="a copy of `x` with `x[index] = value`.", shard=sharding.mixed("writes into it by index")))


def _argmax_rule(ctx, args):
    x = args["x"]
    if x.dtype == "bool":
        raise OpError("`argmax` of a bool tensor", "x", code="dtype-mismatch", hint="argmax takes int and float tensors")
    ax = axis_index(args["axis"], x.rank)
    if not ctx.need(Dim.const(1), "<=", x.shape[ax], f"argmax over axis {ax} needs at least one entry"):
        raise OpError(f"argmax over axis {ax}, of size {ctx.show_dim(x.shape[ax])}, which is empty", "x",
                      code="index-range")
    return TensorT(x.shape[:ax] + x.shape[ax + 1:], "int64")


register(OpDef("argmax", (Param("x", "tensor"), Param("axis", "int", -1, aliases=("dim",), static=True)), _argmax_rule,
               numpy=lambda x, axis=-1: np.argmax(x, axis=axis),
               torch=lambda call: f"{call.code('x', prec=50)}.argmax(dim={call.code('axis')})",
               doc="index of the largest entry along an axis (int64).",
               shard=sharding.along("takes the largest entry", keepdim=False)))


def _reduction_rule(name: str):
    """`sum`, `mean`, `max`, `min` over one axis: the axis is dropped, or kept as 1 with `keepdim`."""
    def rule(ctx, args):
        x = args["x"]
        if name == "mean":
            require_float(x, "x")  # torch's mean of an integer tensor is an error
        elif x.dtype == "bool":
            raise OpError(f"`{name}` of a bool tensor", "x", code="dtype-mismatch",
                          hint="cast it first: `cast(m, int64)` (a count, for `sum`)")
        ax = axis_index(args["axis"], x.rank)
        if name in ("max", "min") and not ctx.need(Dim.const(1), "<=", x.shape[ax],
                                                   f"{name} over axis {ax} needs at least one entry"):
            raise OpError(f"{name} over axis {ax}, of size {ctx.show_dim(x.shape[ax])}, which is empty", "x",
                          code="index-range")
        kept = (Dim.const(1),) if args["keepdim"] else ()
        return TensorT(x.shape[:ax] + kept + x.shape[ax + 1:], x.dtype)
    return rule


def _lower_reduction(method: str):
    def lower(call):
        extra = ", keepdim=True" if call.val("keepdim") else ""
        if method == "sum" and call.ty("x").dtype == "int32":  # torch sums an int32 tensor into int64
            extra += ", dtype=torch.int32"
        if method in ("max", "min"):  # not amax/amin: inductor's amin/amax backward in bfloat16 gives NaN (torch 2.13)
            return f"{call.code('x', prec=50)}.{method}(dim={call.code('axis')}{extra}).values"
        return f"{call.code('x', prec=50)}.{method}(dim={call.code('axis')}{extra})"
    return lower


for _name, _method, _np_name, _what in [("sum", "sum", "sum", "the sum"), ("mean", "mean", "mean", "the mean"),
                                        ("max", "max", "max", "the largest entry"),
                                        ("min", "min", "min", "the smallest entry")]:
    register(OpDef(
        _name, (Param("x", "tensor"), Param("axis", "int", -1, aliases=("dim",), static=True),
                Param("keepdim", "bool", False, aliases=("keepdims",), static=True)),
        _reduction_rule(_name),
        numpy=(lambda f: lambda x, axis=-1, keepdim=False: getattr(np, f)(x, axis=axis, keepdims=keepdim))(_np_name),
        torch=_lower_reduction(_method),
        doc=f"{_what} along an axis, which is dropped (kept, of size 1, with `keepdim=True`).",
        shard=sharding.along("reduces")))


# ----------------------------------------------------------------------------- loss

def _ce_rule(ctx, args):
    logits, tgt = args["logits"], args["targets"]
    require_float(logits, "logits")
    if tgt.dtype != "int64":  # torch's cross_entropy takes int64 class indices only
        raise OpError(f"`targets` must be an int64 tensor, got {tgt.dtype}", "targets", code="dtype-mismatch")
    if tgt.rank != logits.rank - 1 or not all(ctx.eq(p, q) for p, q in zip(tgt.shape, logits.shape[:-1])):
        raise OpError(f"`targets` is {ctx.show(tgt.shape)} but `logits` is {ctx.show(logits.shape)}: expected "
                      f"{ctx.show(logits.shape[:-1])}", "targets", blame=("logits", "targets"))
    return TensorT((), logits.dtype)


def _np_ce(logits, targets, shift=False, ignore_index=-100):
    """The mean over the targets that are not `ignore_index`; 0 when every one is (a mean over no
    positions, and no position to move: the gradients are zero too)."""
    if shift:
        logits, targets = logits[..., :-1, :], targets[..., 1:]
    flat = logits.reshape(-1, logits.shape[-1])
    t = targets.reshape(-1)
    keep = t != ignore_index
    bad = keep & ((t < 0) | (t >= flat.shape[-1]))
    if bad.any():  # as the module refuses them (_check_targets), not an index from the end
        raise ValueError(f"cross_entropy's targets must be class indices in [0, {flat.shape[-1]}) or "
                         f"{ignore_index} (ignore_index), got {t[bad][0]}")
    if not keep.any():
        return np.float64(0.0)
    z = flat - flat.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return -logp[np.arange(len(t))[keep], t[keep]].mean()


def _ce_targets(call) -> str:
    """The targets' code; with `shift`, rolled, not sliced: see _next_tokens."""
    if call.val("shift"):
        return f"_next_tokens({call.code('targets')}, {call.code('ignore_index')})"
    return call.code("targets")


def _ce_names(call, classes) -> str:
    """What a targets check's message names: the targets (`input labels`) and the classes' size."""
    return f"{call.describe('targets')!r}, {call.show_dim(classes)!r}"


register(OpDef(
    "cross_entropy",
    (Param("logits", "tensor"), Param("targets", "tensor"), Param("shift", "bool", False, static=True),
     Param("ignore_index", "int", -100, static=True)),
    _ce_rule, numpy=_np_ce,
    torch=lambda call: f"_cross_entropy({call.code('logits')}, {_ce_targets(call)}, {call.code('ignore_index')}, "
                       f"{call.dtype(call.op.ty.dtype)}, {_ce_names(call, call.ty('logits').shape[-1])})",
    doc="mean cross-entropy; `shift=True` scores position t against target t+1 (next-token loss); "
        "0 when every target is `ignore_index`.", shard=sharding.reduced("computes a loss over it")))


def _linear_ce_rule(ctx, args):
    x, w, tgt = args["x"], args["weight"], args["targets"]
    head = _linear_rule(ctx, {"x": x, "weight": w, "bias": args.get("bias")})
    return _ce_rule(ctx, {"logits": head, "targets": tgt})


register(OpDef(
    "linear_cross_entropy",
    (Param("x", "tensor"), Param("weight", "tensor", role="weight"), Param("targets", "tensor"),
     Param("bias", "tensor?", None, role="bias"), Param("shift", "bool", False, static=True),
     Param("ignore_index", "int", -100, static=True)),
    _linear_ce_rule, flops=_linear_flops,  # the head's products; the loss's own work is not a product
    numpy=lambda x, weight, targets, bias=None, shift=False, ignore_index=-100:
        _np_ce(_np_linear(x, weight, bias), targets, shift, ignore_index),
    torch=lambda call: f"_linear_cross_entropy({call.code('x')}, {call.code('weight')}, "
                       f"{call.code('bias') if call.given('bias') else 'None'}, {_ce_targets(call)}, "
                       f"{call.code('ignore_index')}, {call.dtype(call.op.ty.dtype)}, "
                       f"{_ce_names(call, call.ty('weight').shape[0])})",
    doc="`cross_entropy(linear(x, weight, bias), targets, ...)` computed in chunks of rows, so the "
        "[rows, out] logits never exist; what the compiler lowers a head + loss to in training.",
        shard=sharding.mixed("runs the head and the loss fused")))
