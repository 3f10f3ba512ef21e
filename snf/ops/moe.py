"""Routing and mixtures of experts: `top_k`, `top_k_indices`, `one_hot` and `moe_experts`. The same
conventions as core.py. A router is written with the ordinary ops (a `linear`, a `softmax` or a
`sigmoid`, a renormalising division) around `top_k`; `moe_experts` runs each token through the
experts it chose, sparse at top-k cost (snf/runtime/experts.py).
"""

from __future__ import annotations

from ..dims import Dim
from ..ir import ScalarT, TensorT
from .lazy_numpy import np
from . import sharding
from .registry import POSITIVE, OpDef, OpError, Param, registrar
from .shapes import FLOATS, axis_index, product, rank_at_least, require_float, same_dtype

OPS: dict[str, OpDef] = {}
register = registrar(OPS)


# ----------------------------------------------------------------------------- top-k

def _top_k_rule(indices: bool):
    def rule(ctx, args):
        x, k = args["x"], args["k"]
        if x.dtype == "bool":
            raise OpError("`top_k` of a bool tensor", "x", code="dtype-mismatch", hint="cast it first: `cast(m, int64)`")
        ax = axis_index(args["axis"], x.rank)
        if k is None or not ctx.static(k):  # the result's shape: known when the Config is
            raise OpError("k must be an int known from the config (a constant or a config expression), not a "
                          "run-time size", "k", code="arg-kind")
        if k.value is not None and k.value < 1:
            raise OpError(f"k must be at least 1, got {k.value}", "k", code="bad-constraint")
        ctx.bound(Dim.const(1), k, "k")
        size = x.shape[ax]
        if not ctx.need(k, "<=", size, f"top_k's k must not exceed the size of axis {ax}"):
            raise OpError(f"k = {ctx.show_dim(k)} exceeds axis {ax}, of size {ctx.show_dim(size)}"
                          f"{ctx.defaults_note(size - k)}", "k", code="index-range",
                          hint="k picks k entries of the axis, so it needs k <= the axis size")
        s = list(x.shape)
        s[ax] = k
        return TensorT(tuple(s), "int64" if indices else x.dtype)
    return rule


def np_top_k_indices(x, k, axis=-1):
    """Largest first; among equal values the lower index first (a stable sort of the negated
    values). torch.topk agrees on distinct values; its order among ties is unspecified."""
    order = np.argsort(-np.asarray(x), axis=axis, kind="stable")
    return np.take(order, np.arange(k), axis=axis)


def _np_top_k(x, k, axis=-1):
    return np.take_along_axis(np.asarray(x, dtype=np.float64), np_top_k_indices(x, k, axis), axis=axis)


def _lower_top_k(call) -> str:
    return f"torch.topk({call.code('x')}, {call.code('k')}, dim={call.code('axis')}).values"


def _lower_top_k_indices(call) -> str:
    # torch.topk's order among equal values is unspecified (and differs compiled): a stable sort
    # gives the reference's, the lower index first, so routing on ties is the same everywhere
    axis = call.code('axis')
    return (f"torch.sort({call.code('x')}, dim={axis}, descending=True, stable=True).indices"
            f".narrow({axis}, 0, {call.code('k')})")


for _name, _field, _np, _what in [("top_k", "values", _np_top_k, "the k largest entries"),
                                  ("top_k_indices", "indices", np_top_k_indices, "the indices (int64) of the k largest entries")]:
    register(OpDef(
        _name, (Param("x", "tensor"), Param("k", "int", static=True),
                Param("axis", "int", -1, aliases=("dim",), static=True)),
        _top_k_rule(_field == "indices"), numpy=_np,
        torch=_lower_top_k_indices if _field == "indices" else _lower_top_k,
        doc=f"{_what} along an axis, largest first; among equal values the lower index first.",
        shard=sharding.along("picks the largest entries", keepdim=True)))


# ----------------------------------------------------------------------------- one-hot

def _one_hot_rule(ctx, args):
    idx, n = args["indices"], args["n"]
    if idx.dtype != "int64":  # torch's one_hot takes int64 only
        raise OpError(f"`indices` must be an int64 tensor, got {idx.dtype}", "indices", code="dtype-mismatch")
    if n is None or not ctx.static(n):
        raise OpError("the class count must be an int known from the config (a constant or a config "
                      "expression)", "n", code="arg-kind")
    ctx.bound(Dim.const(1), n, "n")
    return TensorT(idx.shape + (n,), args["dtype"])


def _np_one_hot(indices, n, dtype="int64"):
    indices = np.asarray(indices)
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        raise ValueError(f"one_hot: indices must be in [0, {n}), got {indices.min() if indices.min() < 0 else indices.max()}")
    return (indices[..., None] == np.arange(n)).astype(np.float64 if dtype in FLOATS else np.int64)


def _lower_one_hot(call):
    code = f"F.one_hot({call.code('indices')}, {call.code('n')})"
    dtype = call.val("dtype")
    return code if dtype == "int64" else f"{code}.to({call.dtype(dtype)})"


register(OpDef(
    "one_hot", (Param("indices", "tensor"), Param("n", "int", static=True), Param("dtype", "dtype", "int64")),
    _one_hot_rule, numpy=_np_one_hot, torch=_lower_one_hot,
    doc="`indices` [...] as [..., n]: 1 at each index, 0 elsewhere (of `dtype`, int64 by default); every index "
        "must be in [0, n).", shard=sharding.repeat))


# ----------------------------------------------------------------------------- experts

def _moe_rule(ctx, args):
    x, idx, w, up, down, gate = (args[n] for n in ("x", "indices", "weights", "up", "down", "gate"))
    require_float(x, "x")
    rank_at_least(x, 1, "x")
    if idx.dtype != "int64":
        raise OpError(f"`indices` must be an int64 tensor (top_k_indices), got {idx.dtype}", "indices",
                      code="dtype-mismatch")
    lead = x.shape[:-1]
    for name, t in (("indices", idx), ("weights", w)):
        if t.rank != x.rank or not all(ctx.eq(p, q) for p, q in zip(t.shape[:-1], lead)):
            raise OpError(f"`{name}` is {ctx.show(t.shape)} but `x` is {ctx.show(x.shape)}: expected "
                          f"{ctx.show(lead + (Dim.sym('k'),))}, k experts per token", name, blame=("x", name))
    if not ctx.eq(w.shape[-1], idx.shape[-1]):
        raise OpError(f"`weights` is {ctx.show(w.shape)} but `indices` is {ctx.show(idx.shape)}: one weight per "
                      f"chosen expert", "weights", blame=("indices", "weights"))
    same_dtype(x, w, "x", "weights")
    d = x.shape[-1]
    if up.rank != 3 or not ctx.eq(up.shape[2], d):
        raise OpError(f"`up` is {ctx.show(up.shape)} but experts of `x` {ctx.show(x.shape)} take [E, F, "
                      f"{ctx.show_dim(d)}] (each expert's [out, in], as `linear` takes it)", "up", blame=("x", "up"))
    e, f = up.shape[0], up.shape[1]
    want = (e, d, f)
    if down.rank != 3 or not all(ctx.eq(p, q) for p, q in zip(down.shape, want)):
        raise OpError(f"`down` is {ctx.show(down.shape)} but `up` is {ctx.show(up.shape)}: expected "
                      f"{ctx.show(want)}", "down", blame=("up", "down"))
    for name, t in (("up", up), ("down", down)) + ((("gate", gate),) if gate is not None else ()):
        same_dtype(x, t, "x", name)
    if gate is not None and (gate.rank != 3 or not all(ctx.eq(p, q) for p, q in zip(gate.shape, up.shape))):
        raise OpError(f"`gate` is {ctx.show(gate.shape)} but `up` is {ctx.show(up.shape)}: the two must agree",
                      "gate", blame=("up", "gate"))
    ctx.bound(Dim.const(1), e, "up")
    _moe_biases(ctx, args, x, e, f, d)
    _moe_activation(args)
    return x


def _moe_biases(ctx, args, x: TensorT, e: Dim, f: Dim, d: Dim) -> None:
    """Each expert's biases: gate_bias and up_bias [E, F], down_bias [E, D]; a gate's only beside a gate."""
    for name, want in (("gate_bias", (e, f)), ("up_bias", (e, f)), ("down_bias", (e, d))):
        t = args[name]
        if t is None:
            continue
        if name == "gate_bias" and args["gate"] is None:
            raise OpError("`gate_bias` without `gate`: the bias of a gate the experts do not have", name,
                          code="missing-arg", hint="pass the gate's weights as `gate=`")
        if t.rank != 2 or not all(ctx.eq(p, q) for p, q in zip(t.shape, want)):
            weight = "down" if name == "down_bias" else "up"
            raise OpError(f"`{name}` is {ctx.show(t.shape)} but the experts' `{weight}` {ctx.show(args[weight].shape)} "
                          f"takes a bias of {ctx.show(want)}, a row per expert", name, blame=(weight, name))
        same_dtype(x, t, "x", name)


def _moe_activation(args) -> None:
    """`alpha` and `limit` belong to act="clamped_swiglu", which needs them and a gate."""
    act = args["act"]
    for name in ("alpha", "limit"):
        if isinstance(args[name], TensorT) or isinstance(args[name], ScalarT) and args[name].kind == "bool":
            raise OpError(f"`{name}=` of `moe_experts` takes a number", name, code="arg-kind")
    if act == "clamped_swiglu":
        for name in ("gate", "alpha", "limit"):
            if args[name] is None:
                raise OpError(f'`act="clamped_swiglu"` needs `{name}`', "act", code="missing-arg",
                              hint="gpt-oss: gate=..., alpha=swiglu_alpha (1.702), limit=swiglu_limit (7.0)")
    else:
        for name in ("alpha", "limit"):
            if args[name] is not None:
                raise OpError(f'`{name}=` is a parameter of act="clamped_swiglu", not of "{act}"', name,
                              code="unknown-arg")


_NP_ACTS = {"silu": lambda h: h / (1.0 + np.exp(-h)), "relu": lambda h: np.maximum(h, 0.0),
            "relu2": lambda h: np.maximum(h, 0.0) ** 2}


def _np_act(act, h):
    if act in _NP_ACTS:
        return _NP_ACTS[act](h)
    from .core import np_gelu
    return np_gelu(h, "tanh" if act == "gelu_tanh" else "none")


def np_clamped_swiglu(g, u, alpha, limit):
    """gpt-oss's expert activation: the gate clamped above at `limit`, the up projection to [-limit,
    limit], then (up + 1) * gate * sigmoid(alpha * gate)."""
    g = np.minimum(g, limit)
    return (np.clip(u, -limit, limit) + 1.0) * g / (1.0 + np.exp(-alpha * g))


def _np_moe(x, indices, weights, up, down, gate=None, act="silu", gate_bias=None, up_bias=None, down_bias=None,
            alpha=None, limit=None):
    """Per chosen expert: the expert's matrices (and biases) gathered per token, applied and weighted."""
    d = x.shape[-1]
    xf = np.asarray(x, dtype=np.float64).reshape(-1, d)
    k = indices.shape[-1]
    idx, w = np.asarray(indices).reshape(-1, k), np.asarray(weights, dtype=np.float64).reshape(-1, k)
    if idx.size and (idx.min() < 0 or idx.max() >= up.shape[0]):
        raise ValueError(f"moe_experts: expert indices must be in [0, {up.shape[0]})")

    def product(weight, bias, e, h):
        y = np.einsum("nij,nj->ni", weight[e], h)
        return y if bias is None else y + bias[e]
    out = np.zeros_like(xf)
    for j in range(k):
        e = idx[:, j]
        u = product(up, up_bias, e, xf)
        g = product(gate, gate_bias, e, xf) if gate is not None else None
        if act == "clamped_swiglu":
            h = np_clamped_swiglu(g, u, alpha, limit)
        else:
            h = _np_act(act, g) * u if gate is not None else _np_act(act, u)
        out += w[:, j:j + 1] * product(down, down_bias, e, h)
    return out.reshape(x.shape)


def _moe_flops(args, out, grads):
    """The chosen experts' products (the top-k cost): per token and slot, 2 * F * D for each of up,
    down and gate; the router is a `linear` of its own. Backward, as the sparse lowering runs it
    (snf/runtime/experts.py, `_moe_backward`): every gradient, with gate x and up x recomputed: 8
    such products with a gate, 5 without."""
    idx, up = args["indices"], args["up"]
    gated = isinstance(args.get("gate"), TensorT)  # an absent gate is NoneT here
    one = 2 * product(idx.shape) * up.shape[1] * up.shape[2]
    return one * (3 if gated else 2), (one * (8 if gated else 5) if grads else Dim.const(0))


_MOE_EXTRAS = ("gate_bias", "up_bias", "down_bias", "alpha", "limit")  # passed by name, where given


def _lower_moe(call) -> str:
    extra = "".join(f", {n}={call.code(n)}" for n in _MOE_EXTRAS if call.given(n))
    return (f"_moe_experts({call.code('x')}, {call.code('indices')}, {call.code('weights')}, "
            f"{call.code('gate') if call.given('gate') else 'None'}, {call.code('up')}, "
            f"{call.code('down')}, {call.val('act')!r}{extra})")


register(OpDef(
    "moe_experts",
    (Param("x", "tensor"), Param("indices", "tensor"), Param("weights", "tensor"),
     Param("up", "tensor", role="weight"), Param("down", "tensor", role="weight"),
     Param("gate", "tensor?", None, role="weight"),
     Param("act", "str", "silu", choices=("silu", "gelu", "gelu_tanh", "relu", "relu2", "clamped_swiglu"), static=True),
     Param("gate_bias", "tensor?", None, role="bias"), Param("up_bias", "tensor?", None, role="bias"),
     Param("down_bias", "tensor?", None, role="bias"),
     Param("alpha", "value", None, within=POSITIVE), Param("limit", "value", None, within=POSITIVE)),
    _moe_rule, numpy=_np_moe, flops=_moe_flops, torch=_lower_moe,
    doc="a mixture of experts: x [..., D] through the experts `indices` [..., k] names (int64 in [0, E)), "
        "weighted by `weights` [..., k] and summed: `sum_j weights[j] * down[e_j] @ (act(gate[e_j] @ x) * "
        "(up[e_j] @ x))`, or `down[e] @ act(up[e] @ x)` without `gate`; gate and up [E, F, D], down [E, D, F], "
        "optional biases gate_bias and up_bias [E, F], down_bias [E, D]. act=\"relu2\" is relu(h)^2 "
        "(Nemotron-H's experts); act=\"clamped_swiglu\" (gpt-oss) is "
        "(clamp(u, -limit, limit) + 1) * g * sigmoid(alpha * g) with g = min(gate x, limit). "
        "Sparse: each expert runs on its own tokens only (dense where that is faster, see "
        "docs/porting.md).",
        shard=sharding.mixed("reads every feature in each expert (the experts shard by their own width)")))
