"""Recurrent ops: layers that carry a fixed-size state from token to token (Mamba2's selective scan,
gated DeltaNet's delta rule, their short causal convolution) and `cumsum`. The same conventions as
core.py.

Each recurrent op comes as a pair with one signature: `op(...)` gives the outputs over the sequence,
`op_state(...)` the state after its last token, which a spec writes into a cache output (the caller
feeds it back as `state=` on the next call, docs/language.md 10.2). The state op runs only when the
caches are asked for (`use_cache`), so training never computes it. Both run chunked over time for a
prompt and as a one-token update in decode (snf/runtime/recurrent.py); the NumPy references are the
plain recurrences, token by token (recurrent_np.py).
"""

from __future__ import annotations

from ..dims import Dim
from ..ir import TensorT
from .recurrent_np import (np_causal_conv1d, np_causal_conv1d_state, np_gated_delta_rule, np_gated_delta_state,
                           np_ssd_scan, np_ssd_state)
from .lazy_numpy import np
from . import sharding
from .registry import NON_NEGATIVE, OpDef, OpError, Param, registrar
from .shapes import axis_index, divides, product, require_float, same_dtype

OPS: dict[str, OpDef] = {}
register = registrar(OPS)


def _shaped(ctx, t: TensorT | None, name: str, want: tuple, what: str, against: str) -> None:
    """`t` (when given) has the shape `want`, which `what` spells out ("[B, T, H]: one per head")."""
    if t is None:
        return
    if t.rank != len(want) or not all(ctx.eq(a, b) for a, b in zip(t.shape, want)):
        raise OpError(f"`{name}` is {ctx.show(t.shape)} but `{against}` makes it {ctx.show(want)}: {what}", name,
                      blame=(against, name))


def _float_args(args, names) -> list:
    given = [(n, args[n]) for n in names if args.get(n) is not None]
    for n, t in given:
        require_float(t, n)
    for n, t in given[1:]:
        same_dtype(given[0][1], t, given[0][0], n)
    return given


def _groups(ctx, heads: Dim, groups: Dim, arg: str, against: str, what: str) -> None:
    """`groups` divides `heads` (each group serves heads / groups heads), as grouped-query attention's."""
    if ctx.eq(heads, groups):
        return
    if not (ctx.static(heads) and ctx.static(groups)):
        raise OpError(f"`{arg}` has {ctx.show_dim(groups)} {what} and `{against}` {ctx.show_dim(heads)} heads: "
                      f"both must be config values", arg, blame=(against, arg))
    if not divides(ctx, groups, heads):
        raise OpError(f"`{arg}` has {ctx.show_dim(groups)} {what} and `{against}` {ctx.show_dim(heads)} heads: "
                      f"each serves the same number of heads, so {ctx.show_dim(groups)} must divide "
                      f"{ctx.show_dim(heads)}", arg, blame=(against, arg))


def _rank(t: TensorT, n: int, name: str, layout: str) -> None:
    if t.rank != n:
        raise OpError(f"`{name}` must be {layout}, got rank {t.rank}", name, code="rank-mismatch")


def _positional(call, names) -> str:
    return ", ".join(call.code(n) if call.given(n) else "None" for n in names)


def _recurrence_flops(per: int, out: str, width):
    """The products of the recurrence as one token at a time runs it: `per` times the elements of the
    argument `out` times `width(args)`; the backward twice that. The convolution: 2 K per element; the
    SSD: 2 P N per token and head to add x B^T to the state and as many to read it with C; the delta
    rule: 2 K V per token and value head each to read the state with k, add k delta^T and read it with
    q. The chunked form a prompt runs does more (its intra-chunk scores: docs/stats.md); the runtime's
    formulas for the ops torch.compile sees are these (snf/runtime/recurrent.py)."""
    def flops(args, result, grads):
        fwd = per * product(args[out].shape) * width(args)
        return fwd, (2 * fwd if grads else Dim.const(0))
    return flops


def _pair(ops: tuple, params: tuple, rule, numpy: tuple, flops, doc: str, state_doc: str, shard: tuple) -> None:
    """An op and its `_state` twin (`ops`, the output's first): one signature, `rule(state_out)`, the
    NumPy references of both, the output's FLOPs (the twin runs with the caches only). Each lowers to
    the runtime function of its name with an underscore (snf/runtime/recurrent.py); `shard`, the sharding
    rule of each."""
    names = tuple(p.name for p in params)
    for twin, (op, np_fn, text, sharded) in enumerate(zip(ops, numpy, (doc, state_doc), shard)):
        register(OpDef(op, params, rule(bool(twin)), numpy=np_fn, flops=None if twin else flops, shard=sharded,
                       torch=lambda call, op=op: f"_{op}({_positional(call, names)})", doc=text))


# ----------------------------------------------------------------------------- cumsum

register(OpDef(
    "cumsum", (Param("x", "tensor"), Param("axis", "int", aliases=("dim",), static=True)),
    lambda ctx, args: (axis_index(args["axis"], args["x"].rank), require_float(args["x"], "x"), args["x"])[-1],
    numpy=lambda x, axis: np.cumsum(np.asarray(x, dtype=np.float64), axis=axis),
    torch=lambda call: f"torch.cumsum({call.code('x')}, dim={call.code('axis')})",
    doc="the running sum along an axis: y[i] = x[0] + ... + x[i].", shard=sharding.along("sums", keepdim=True)))


# ----------------------------------------------------------------------------- causal convolution

_CONV = (Param("x", "tensor"), Param("weight", "tensor", role="weight"), Param("bias", "tensor?", None, role="bias"),
         Param("state", "tensor?", None))


def _conv_rule(state_out: bool):
    def rule(ctx, args):
        x, w = args["x"], args["weight"]
        _float_args(args, ("x", "weight", "bias", "state"))
        _rank(x, 3, "x", "[B, T, C]")
        _rank(w, 3, "weight", "[C, 1, K] (torch's depthwise Conv1d weight)")
        b, c = x.shape[0], x.shape[2]
        k = w.shape[2]
        _shaped(ctx, w, "weight", (c, Dim.const(1), k), "one kernel per channel, [C, 1, K]", "x")
        if not ctx.static(k):
            raise OpError("the kernel size must be a config value", "weight", code="arg-kind")
        ctx.bound(Dim.const(1), k, "weight")
        _shaped(ctx, args.get("bias"), "bias", (c,), "one per channel", "x")
        keep = (b, k - Dim.const(1), c)
        _shaped(ctx, args.get("state"), "state", keep, "the last K - 1 inputs before x", "weight")
        return TensorT(keep, x.dtype) if state_out else x
    return rule


_pair(("causal_conv1d", "causal_conv1d_state"), _CONV, _conv_rule, (np_causal_conv1d, np_causal_conv1d_state),
      _recurrence_flops(2, "x", lambda a: a["weight"].shape[2]),
      "a depthwise causal convolution over time (Mamba's and DeltaNet's short conv): x [B, T, C], weight [C, 1, K], "
      "y[t] = bias + sum_j weight[:, 0, j] * x[t - K + 1 + j], where the K - 1 inputs before x are `state` "
      "[B, K - 1, C] (zeros without one). No activation.",
      "the state after `causal_conv1d` with the same arguments: its last K - 1 inputs, [B, K - 1, C] (the `state` "
      "before x included), for the next call's `state=`.", (sharding.channels, sharding.channels))


# ----------------------------------------------------------------------------- Mamba2's selective scan

_SSD = (Param("x", "tensor"), Param("dt", "tensor"), Param("A", "tensor"), Param("B", "tensor"), Param("C", "tensor"),
        Param("D", "tensor?", None), Param("dt_bias", "tensor?", None),
        Param("dt_softplus", "bool", True, static=True),
        Param("dt_min", "float", 0.0, within=NON_NEGATIVE), Param("dt_max", "float", None, within=NON_NEGATIVE),
        Param("state", "tensor?", None))
# each argument's heads axis (B and C: their groups, which whole heads share)
_SSD_HEADS = {"x": 2, "dt": 2, "A": 0, "D": 0, "dt_bias": 0, "B": 2, "C": 2, "state": 1}
_SSD_ARGS = ("x", "dt", "A", "B", "C", "D", "dt_bias", "dt_softplus", "dt_min", "dt_max", "state")


def _ssd_rule(state_out: bool):
    def rule(ctx, args):
        x = args["x"]
        _float_args(args, ("x", "dt", "A", "B", "C", "D", "dt_bias", "state"))
        _rank(x, 4, "x", "[B, T, H, P] (heads of P channels)")
        b, t, h, p = x.shape
        _shaped(ctx, args["dt"], "dt", (b, t, h), "one step size per token and head", "x")
        for n in ("A", "D", "dt_bias"):
            _shaped(ctx, args.get(n), n, (h,), "one per head", "x")
        _rank(args["B"], 4, "B", "[B, T, G, N] (G groups of a state of N)")
        g, n = args["B"].shape[2], args["B"].shape[3]
        _shaped(ctx, args["B"], "B", (b, t, g, n), "[B, T, G, N]", "x")
        _shaped(ctx, args["C"], "C", (b, t, g, n), "as `B`", "B")
        _groups(ctx, h, g, "B", "x", "groups")
        _shaped(ctx, args.get("state"), "state", (b, h, p, n), "one [P, N] state per head", "x")
        return TensorT((b, h, p, n), x.dtype) if state_out else x
    return rule


_SSD_DOC = ("Mamba2's selective state space scan (the SSD form) over x [B, T, H, P]: per token and head, dt' = "
            "clip(softplus(dt + dt_bias), dt_min, dt_max) (softplus if `dt_softplus`), the state [P, N] becomes "
            "exp(dt' A) state + dt' x B^T, and y = state C + D x; dt [B, T, H], A and D [H] (A negative: -exp(A_log)), "
            "B and C [B, T, G, N] shared by H / G heads each; `state` [B, H, P, N] is the state before x (zeros "
            "without one).")

_pair(("ssd_scan", "ssd_state"), _SSD, _ssd_rule, (np_ssd_scan, np_ssd_state),
      _recurrence_flops(4, "x", lambda a: a["B"].shape[3]), _SSD_DOC,
      "the state [B, H, P, N] after `ssd_scan` with the same arguments, for the next call's `state=`.",
      tuple(sharding.heads(_SSD_HEADS, out) for out in (2, 1)))


# ----------------------------------------------------------------------------- gated delta rule

_DELTA = (Param("q", "tensor"), Param("k", "tensor"), Param("v", "tensor"), Param("g", "tensor"),
          Param("beta", "tensor"), Param("state", "tensor?", None), Param("scale", "float", None),
          Param("l2norm", "bool", True, static=True))
# each argument's (value) heads axis; q and k have key heads, which whole value heads share
_DELTA_HEADS = {"q": 2, "k": 2, "v": 2, "g": 2, "beta": 2, "state": 1}
_DELTA_ARGS = ("q", "k", "v", "g", "beta", "state", "scale", "l2norm")


def _delta_rule(state_out: bool):
    def rule(ctx, args):
        q, k, v = args["q"], args["k"], args["v"]
        _float_args(args, ("q", "k", "v", "g", "beta", "state"))
        _rank(q, 4, "q", "[B, T, H, K]")
        b, t, hk, kd = q.shape
        _shaped(ctx, k, "k", q.shape, "as `q`", "q")
        _rank(v, 4, "v", "[B, T, Hv, V]")
        hv, vd = v.shape[2], v.shape[3]
        _shaped(ctx, v, "v", (b, t, hv, vd), "[B, T, Hv, V]", "q")
        _groups(ctx, hv, hk, "k", "v", "key heads")
        _shaped(ctx, args["beta"], "beta", (b, t, hv), "one per token and value head", "v")
        # the decay: one per token and value head (gated DeltaNet) or also per key channel (Kimi Delta Attention)
        g = args["g"]
        if g.rank == 4:  # its heads are v's, its width q's
            if not all(ctx.eq(a, w) for a, w in zip(g.shape, (b, t, hv, kd))):
                raise OpError(f"`g` is {ctx.show(g.shape)} but `v`'s heads and `q`'s width make it "
                              f"{ctx.show((b, t, hv, kd))}: one per token, value head and key channel (or [B, T, Hv]: "
                              f"one per token and value head)", "g", blame=("v", "g"))
        else:
            _shaped(ctx, g, "g", (b, t, hv), "one per token and value head (or [B, T, Hv, K]: one per key "
                    "channel too)", "v")
        _shaped(ctx, args.get("state"), "state", (b, hv, kd, vd), "one [K, V] state per value head", "v")
        return TensorT((b, hv, kd, vd), v.dtype) if state_out else v
    return rule


_DELTA_DOC = ("the gated delta rule of gated DeltaNet (Qwen3-Next) over q, k [B, T, Hk, K] and v [B, T, Hv, V] "
              "(Hk divides Hv: value head h reads key head h // (Hv / Hk)): with q and k L2-normalised (`l2norm`) "
              "and q scaled (by 1 / sqrt(K) unless `scale`), per token the state S [K, V] becomes S exp(g), then "
              "S + k ((v - k^T S) beta)^T, and the output is q^T S; g (the log decay) [B, T, Hv], or [B, T, Hv, K] "
              "for a decay per key channel (Kimi Delta Attention: S's row i times exp(g_i)); beta [B, T, Hv]; "
              "`state` [B, Hv, K, V] is S before the first token (zeros without one).")

_pair(("gated_delta_rule", "gated_delta_state"), _DELTA, _delta_rule, (np_gated_delta_rule, np_gated_delta_state),
      _recurrence_flops(6, "v", lambda a: a["q"].shape[3]), _DELTA_DOC,
      "the state [B, Hv, K, V] after `gated_delta_rule` with the same arguments, for the next call's `state=`.",
      tuple(sharding.heads(_DELTA_HEADS, out) for out in (2, 1)))

# the ops whose outputs at a position see only the tokens up to it (passes/decode.py)
CAUSAL = frozenset({"causal_conv1d", "ssd_scan", "gated_delta_rule", "cumsum"})
