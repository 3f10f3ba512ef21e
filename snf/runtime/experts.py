"""The mixture-of-experts runtime of generated modules (`moe_experts`): each token runs through the
k experts its router chose, sparse (tokens grouped by expert, each expert on its own tokens only) or
dense (every expert on every token, weighted 0 outside the top k) where that is faster.

The sparse form has sizes that depend on the routing (how many tokens each expert gets), which
torch.compile(fullgraph=True) cannot trace: it is an opaque custom op, `torch.ops.snf.moe_experts`,
with a fake implementation (its result is x's shape) and a backward that is a custom op too
(recomputing under autograd), so dynamo compiles the rest of a layer block around it. A flop formula
is registered for both, so torch.utils.flop_counter counts the expert products the op runs.

Real Python, imported and tested as it is (tests/test_moe.py); code generation copies into each
generated module the definitions it calls, as for checks.py. Edit here, then regenerate generated/.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from .checks import _eager_check

_EXPERT_ACTIVATIONS = {"silu": F.silu, "relu": F.relu, "gelu": F.gelu,
                       "gelu_tanh": lambda h: F.gelu(h, approximate="tanh"),
                       "relu2": lambda h: F.relu(h).square()}  # squared ReLU (Nemotron-H's experts)

# The dense form runs E/k times the expert products but no sort, no gather, no host sync and no loop
# over experts. Measured on this CPU, one thread (`benchmarks/bench_moe.py --sweep --threads 1`, 8
# experts, top-2), it was faster only for tiny experts: F * D up to 64 * 128, while the dense work
# (tokens * E * F * D * 3 multiply-adds) stayed under about 1e7; from F * D = 128 * 256 the sparse
# form won at every token count, one decode token included (1.7x there; 21x at D=1024, F=3584, where
# it reads 2 experts' weights instead of 8). The one place the rule lives; `_moe_dense_wins` applies it.
_MOE_DENSE_EXPERT = 2 ** 13  # F * D of one expert
_MOE_DENSE_MACS = 2 ** 23


def _moe_dense_wins(tokens: int, experts: int, hidden: int, width: int, gated: bool) -> bool:
    """Whether the dense form is the faster for `tokens` tokens through `experts` experts of
    [hidden, width] (see _MOE_DENSE_EXPERT)."""
    return (hidden * width <= _MOE_DENSE_EXPERT
            and tokens * experts * hidden * width * (3 if gated else 2) <= _MOE_DENSE_MACS)


def _expert_hidden(g: Optional[torch.Tensor], u: torch.Tensor, act: str, alpha: float, limit: float):
    """An expert's hidden activation from its gate product `g` (None without a gate) and up product `u`:
    act(g) * u, act(u), or gpt-oss's clamped SwiGLU (both clamped, then (u + 1) * g * sigmoid(alpha * g))."""
    if act == "clamped_swiglu":
        g = g.clamp(max=limit)
        return (u.clamp(-limit, limit) + 1) * (g * torch.sigmoid(g * alpha))
    return _EXPERT_ACTIVATIONS[act](g) * u if g is not None else _EXPERT_ACTIVATIONS[act](u)


def _expert_mlp(x, gate: Optional[torch.Tensor], up: torch.Tensor, down: torch.Tensor, act: str, biases: tuple,
                alpha: float, limit: float):
    """One expert on its rows x [n, D]: down(act(gate x) * up x), or down(act(up x)) without a gate;
    `biases` its (gate, up, down) biases, each None where it has none."""
    g = F.linear(x, gate, biases[0]) if gate is not None else None
    return F.linear(_expert_hidden(g, F.linear(x, up, biases[1]), act, alpha, limit), down, biases[2])


def _expert_biases(e: int, gate_bias, up_bias, down_bias) -> tuple:
    return tuple(b[e] if b is not None else None for b in (gate_bias, up_bias, down_bias))


def _by_expert(indices, experts: int):
    """The (token, slot) pairs of indices [N, k] grouped by expert: their order (a stable argsort of
    the flattened indices), the token of each, and how many each expert has (read on the host)."""
    flat = indices.reshape(-1)
    order = torch.argsort(flat, stable=True)
    return order, order // indices.shape[1], torch.bincount(flat, minlength=experts).tolist()


def _moe_sparse(x, indices, weights, gate: Optional[torch.Tensor], up, down, act: str,
                gate_bias: Optional[torch.Tensor] = None, up_bias: Optional[torch.Tensor] = None,
                down_bias: Optional[torch.Tensor] = None, alpha: float = 1.0, limit: float = 0.0):
    """x [N, D], indices and weights [N, k]: the (token, slot) pairs sorted by expert (a stable
    argsort), each expert run on its rows only, the results weighted and added back per token."""
    order, rows, counts = _by_expert(indices, up.shape[0])
    xs = x[rows]
    parts, start = [], 0
    for e, count in enumerate(counts):
        if count:
            parts.append(_expert_mlp(xs[start:start + count], gate[e] if gate is not None else None, up[e], down[e],
                                     act, _expert_biases(e, gate_bias, up_bias, down_bias), alpha, limit))
        start += count
    y = torch.cat(parts) if parts else x.new_zeros(0, x.shape[1])
    y = y * weights.reshape(-1)[order].unsqueeze(1)
    return x.new_zeros(x.shape).index_add(0, rows, y)


def _moe_dense(x, indices, weights, gate: Optional[torch.Tensor], up, down, act: str,
               gate_bias: Optional[torch.Tensor] = None, up_bias: Optional[torch.Tensor] = None,
               down_bias: Optional[torch.Tensor] = None, alpha: float = 1.0, limit: float = 0.0):
    """Every expert on every token, weighted by an [N, E] matrix holding the router's weights at the
    chosen experts and 0 elsewhere: plain tensor code, which autograd and torch.compile see through."""
    dense = x.new_zeros(x.shape[0], up.shape[0]).scatter_add(1, indices, weights)
    u = torch.einsum("nd,efd->nef", x, up)
    u = u + up_bias if up_bias is not None else u
    g = torch.einsum("nd,efd->nef", x, gate) if gate is not None else None
    g = g + gate_bias if gate_bias is not None else g
    h = _expert_hidden(g, u, act, alpha, limit)
    # two operands, not three ("ne,nef,edf->nd"): where opt_einsum is installed, torch orders a
    # three-operand einsum by its sizes, which fixes the token count of a dynamic graph
    out = torch.einsum("nef,edf->nd", h * dense.unsqueeze(-1), down)
    return out + dense @ down_bias if down_bias is not None else out


def _moe_flops(x_shape, indices_shape, up_shape, gated: bool) -> int:
    """The expert products of the sparse form: 2 * (token, slot) pairs * F * D per matrix."""
    pairs = indices_shape[0] * indices_shape[1]
    return 2 * pairs * up_shape[1] * up_shape[2] * (3 if gated else 2)


def _activation_grad(act: str, g: torch.Tensor) -> torch.Tensor:
    """d act(g) / dg, elementwise."""
    if act == "silu":
        s = torch.sigmoid(g)
        return s * (1 + g * (1 - s))
    if act == "relu":
        return (g > 0).to(g.dtype)
    if act == "relu2":
        return 2 * F.relu(g)
    if act == "gelu":
        return 0.5 * (1 + torch.erf(g * 0.5 ** 0.5)) + g * torch.exp(-0.5 * g * g) * (2 * torch.pi) ** -0.5
    c = (2 / torch.pi) ** 0.5  # gelu_tanh
    t = torch.tanh(c * (g + 0.044715 * g ** 3))
    return 0.5 * (1 + t) + 0.5 * g * (1 - t * t) * c * (1 + 3 * 0.044715 * g * g)


def _hidden_grads(g: Optional[torch.Tensor], u: torch.Tensor, gh: torch.Tensor, act: str, alpha: float,
                  limit: float):
    """(h, the gradient of g, of u) of _expert_hidden, given the gradient `gh` of its result h (g's
    None without a gate). A clamp passes the gradient where its input is within bounds, ends
    included, as torch's does."""
    if act == "clamped_swiglu":
        gc, uc = g.clamp(max=limit), u.clamp(-limit, limit) + 1
        s = torch.sigmoid(gc * alpha)
        glu = gc * s
        gg = gh * uc * (s + alpha * glu * (1 - s)) * (g <= limit)
        return glu * uc, gg, gh * glu * ((u >= -limit) & (u <= limit))
    if g is not None:
        a = _EXPERT_ACTIVATIONS[act](g)
        return a * u, gh * u * _activation_grad(act, g), gh * a
    return _EXPERT_ACTIVATIONS[act](u), None, gh * _activation_grad(act, u)


def _moe_backward(grad, x, indices, weights, gate: Optional[torch.Tensor], up, down, act: str,
                  gate_bias: Optional[torch.Tensor] = None, up_bias: Optional[torch.Tensor] = None,
                  down_bias: Optional[torch.Tensor] = None, alpha: float = 1.0, limit: float = 0.0):
    """The gradients of _moe_sparse's x, weights, gate, up, down and the three biases (an empty tensor
    for each one it does not have), written out by hand with the same grouping: autograd is off inside a
    custom op's kernel. It recomputes gate x and up x (not down's product) rather than keep them: 8
    products of [pairs, F, D] per expert with a gate (the forward has 3), 5 without (2); _moe_flops'
    callers count the same."""
    order, rows, counts = _by_expert(indices, up.shape[0])
    xs, gos, ws = x[rows], grad[rows], weights.reshape(-1)[order].unsqueeze(1)
    gxs, gws = torch.zeros_like(xs), xs.new_zeros(xs.shape[0])
    g_gate = torch.zeros_like(gate) if gate is not None else x.new_zeros(0)
    g_up, g_down = torch.zeros_like(up), torch.zeros_like(down)
    g_biases = [torch.zeros_like(b) if b is not None else x.new_zeros(0) for b in (gate_bias, up_bias, down_bias)]
    start = 0
    for e, count in enumerate(counts):
        if not count:
            continue
        part = slice(start, start + count)
        start += count
        xe, go = xs[part], gos[part]
        bias_g, bias_u, bias_d = _expert_biases(e, gate_bias, up_bias, down_bias)
        u = F.linear(xe, up[e], bias_u)
        g = F.linear(xe, gate[e], bias_g) if gate is not None else None
        gh = go @ down[e]  # the output's gradient before the slot weight: gives the weight's gradient without y
        h, gg, gu = _hidden_grads(g, u, gh * ws[part], act, alpha, limit)
        gws[part] = (gh * h).sum(1) + ((go * bias_d).sum(1) if bias_d is not None else 0)
        g_down[e] = (go * ws[part]).t() @ h
        gxs[part] = gu @ up[e] + (gg @ gate[e] if gate is not None else 0)
        g_up[e] = gu.t() @ xe
        if gate is not None:
            g_gate[e] = gg.t() @ xe
        for slot, (bias, grad_part) in enumerate(((gate_bias, gg), (up_bias, gu), (down_bias, go * ws[part]))):
            if bias is not None:
                g_biases[slot][e] = grad_part.sum(0)
    gx = torch.zeros_like(x).index_add(0, rows, gxs)
    gw = torch.zeros_like(gws).index_copy(0, order, gws).reshape(weights.shape)
    return [gx, gw, g_gate, g_up, g_down, *g_biases]


_MOE_ARGS = ("Tensor x, Tensor indices, Tensor weights, Tensor? gate, Tensor up, Tensor down, str act, "
             "Tensor? gate_bias=None, Tensor? up_bias=None, Tensor? down_bias=None, float alpha=1.0, float limit=0.0")


def _moe_define_ops():
    """torch.ops.snf.moe_experts and its backward, with fake implementations, autograd and flop
    formulas; registered by the first module that needs them, shared by every later one (a custom
    op's name registers once per process)."""
    if hasattr(torch.ops.snf, "moe_experts"):
        return torch.ops.snf.moe_experts
    from torch.utils.flop_counter import register_flop_formula
    # the counts per expert are read on the host: no CUDA graph may capture the op (inductor
    # then leaves it out of the graphs it records)
    unsafe = (torch.Tag.cudagraph_unsafe,) if hasattr(torch.Tag, "cudagraph_unsafe") else ()
    forward = torch.library.custom_op("snf::moe_experts", _moe_sparse, mutates_args=(), tags=unsafe,
                                      schema=f"({_MOE_ARGS}) -> Tensor")
    backward = torch.library.custom_op("snf::moe_experts_backward", _moe_backward, mutates_args=(), tags=unsafe,
                                       schema=f"(Tensor grad, {_MOE_ARGS}) -> Tensor[]")
    forward.register_fake(lambda x, *args: x.new_empty(x.shape))

    def like(t, x):
        return t.new_empty(t.shape) if t is not None else x.new_empty(0)
    # a traced call may leave out the trailing arguments at their defaults (gate_bias=None ... limit=0.0)
    backward.register_fake(lambda grad, x, indices, weights, gate, up, down, act, gate_bias=None, up_bias=None,
                           down_bias=None, alpha=1.0, limit=0.0:
                           [x.new_empty(x.shape), weights.new_empty(weights.shape), like(gate, x), like(up, x),
                            like(down, x), like(gate_bias, x), like(up_bias, x), like(down_bias, x)])

    def setup_context(ctx, inputs, output):
        inputs = tuple(inputs) + (None, None, None, 1.0, 0.0)[len(inputs) - 7:]
        x, indices, weights, gate, up, down, act, gate_bias, up_bias, down_bias, alpha, limit = inputs
        ctx.save_for_backward(x, indices, weights, gate, up, down, gate_bias, up_bias, down_bias)
        ctx.act, ctx.alpha, ctx.limit = act, alpha, limit

    def grads(ctx, grad):
        saved = ctx.saved_tensors
        gx, gw, *rest = torch.ops.snf.moe_experts_backward(grad, *saved[:6], ctx.act, *saved[6:], ctx.alpha,
                                                           ctx.limit)
        ggate, gup, gdown, *gbiases = (g if t is not None else None for g, t in zip(rest, saved[3:]))
        return gx, None, gw, ggate, gup, gdown, None, *gbiases, None, None

    forward.register_autograd(grads, setup_context=setup_context)
    # the counter sees the op, not the products inside it: count them by their formula
    register_flop_formula(torch.ops.snf.moe_experts)(
        lambda x, indices, weights, gate, up, *args, out_shape=None, **kw: _moe_flops(x, indices, up, gate is not None))
    # gate x and up x recomputed, and x's and the weights' gradients (see _moe_backward)
    register_flop_formula(torch.ops.snf.moe_experts_backward)(
        lambda grad, x, indices, weights, gate, up, *args, out_shape=None, **kw:
        _moe_flops(x, indices, up, gate is not None) * (8 if gate is not None else 5) // (3 if gate is not None else 2))
    return torch.ops.snf.moe_experts


_MOE_OP = _moe_define_ops()


def _moe_experts(x, indices, weights, gate: Optional[torch.Tensor], up, down, act: str,
                 gate_bias: Optional[torch.Tensor] = None, up_bias: Optional[torch.Tensor] = None,
                 down_bias: Optional[torch.Tensor] = None, alpha: float = 1.0, limit: float = 0.0):
    """`moe_experts`: x [..., D] through the experts `indices` [..., k] names, weighted by `weights`
    [..., k] and added; gate and up [E, F, D], down [E, D, F], their biases [E, F] and [E, D] where
    given; `alpha` and `limit` those of act="clamped_swiglu". Dense or sparse by _moe_dense_wins."""
    # the weights are what says a call is sharded (snf.parallelize made them DTensors): one look at
    # their type a call, by name, so that a model never sharded imports nothing of torch.distributed
    if type(up).__name__ == "DTensor":
        return _moe_experts_sharded(x, indices, weights, gate, up, down, act, gate_bias, up_bias, down_bias, alpha,
                                    limit)
    return _moe_experts_local(x, indices, weights, gate, up, down, act, gate_bias, up_bias, down_bias, alpha, limit)


def _moe_experts_local(x, indices, weights, gate, up, down, act: str, gate_bias, up_bias, down_bias, alpha: float,
                       limit: float):
    """_moe_experts on plain tensors (the whole experts, or a rank's slice of each)."""
    experts = up.shape[0]
    if _eager_check(indices):
        low, high = int(indices.min()), int(indices.max())
        if low < 0 or high >= experts:
            raise ValueError(f"moe_experts: expert indices must be in [0, {experts}), got {low if low < 0 else high}")
    shape, k = x.shape, indices.shape[-1]
    # one dtype throughout, x's: under autocast a float32 router weight meets bfloat16 activations,
    # and the experts' float32 parameters are cast as autocast casts a linear's
    gate, up, down, gate_bias, up_bias, down_bias = (t.to(x.dtype) if t is not None else None
                                                     for t in (gate, up, down, gate_bias, up_bias, down_bias))
    x2, i2, w2 = x.reshape(-1, shape[-1]), indices.reshape(-1, k), weights.reshape(-1, k).to(x.dtype)
    extra = (gate_bias, up_bias, down_bias, float(alpha), float(limit))
    if _moe_dense_wins(x2.shape[0], experts, up.shape[1], up.shape[2], gate is not None):
        return _moe_dense(x2, i2, w2, gate, up, down, act, *extra).reshape(shape)
    return _MOE_OP(x2, i2, w2, gate, up, down, act, *extra).reshape(shape)


_TP_PLACEMENTS: list = []  # (DTensor, (Partial(),), (Replicate(),)), imported by the first sharded call


def _tp_placements():
    """DTensor and the placements the sharded experts use, imported once (torch.distributed loaded by then)."""
    if not _TP_PLACEMENTS:
        from torch.distributed.tensor import DTensor, Partial, Replicate
        _TP_PLACEMENTS.extend((DTensor, (Partial(),), (Replicate(),)))
    return _TP_PLACEMENTS


def _whole_on_ranks(t, mesh):
    """`t` itself in the forward; its gradient summed over the ranks of `mesh` in the backward."""
    dtensor, partial, replicate = _tp_placements()
    return dtensor.from_local(t, mesh, replicate, run_check=False).to_local(grad_placements=partial)


def _moe_experts_sharded(x, indices, weights, gate, up, down, act: str, gate_bias, up_bias, down_bias,
                         alpha: float, limit: float):
    """`moe_experts` on this tensor-parallel rank's slice of every expert's hidden width: gate and up
    sharded on F (axis 1), down on F (axis 2). Each rank's output is a partial sum, added over the
    ranks; x and the routing weights enter whole, and each rank's share of their gradients is added
    over the ranks in the backward (the trap of exact logits with gradients off). DTensor does both."""
    dtensor, partial, replicate = _tp_placements()
    mesh = up.device_mesh
    gate, up, down, gate_bias, up_bias = (t.to_local() if t is not None else None
                                          for t in (gate, up, down, gate_bias, up_bias))
    out = _moe_experts_local(_whole_on_ranks(x, mesh), indices, _whole_on_ranks(weights, mesh), gate, up, down, act,
                             gate_bias, up_bias, None, alpha, limit)
    out = dtensor.from_local(out, mesh, partial, run_check=False).redistribute(mesh, replicate).to_local()
    if down_bias is None:
        return out
    # the down bias [E, D] (whole on every rank) once, after the sum: each token's chosen biases, weighted
    shape, k = x.shape, indices.shape[-1]
    dense = x.new_zeros(x.numel() // shape[-1], down_bias.shape[0]).scatter_add(
        1, indices.reshape(-1, k), weights.reshape(-1, k).to(x.dtype))
    return out + (dense @ down_bias.to(x.dtype)).reshape(shape)
