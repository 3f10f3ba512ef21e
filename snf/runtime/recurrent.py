"""The recurrent ops of generated modules: Mamba2's selective scan (`_ssd_scan`), gated DeltaNet's
delta rule (`_gated_delta_rule`) and their short causal convolution (`_causal_conv1d`), each with a
`_state` twin giving the state after the last token, which the next call takes as `state`.

A prompt runs chunked: within a chunk of C tokens the recurrence is rewritten as masked matrix
products (attention-like, parallel in time), and only the chunk boundaries are carried from chunk to
chunk, so a T-token prompt costs T/C sequential steps instead of T. One decode token (T == 1) runs
the recurrence itself, a single update, with none of the chunk machinery. Both are plain tensor code,
so autograd differentiates them and torch.compile(fullgraph=True) traces them; half-precision inputs
are computed in float32, as the decays (exp of cumulative sums) need. The `_state` twins share the
computation but skip the outputs (for the scan, most of the work: training never asks for a state).
On CUDA, a library's kernel runs instead where one is installed and covers the call (kernels.py).

Real Python, imported and tested as it is (tests/test_recurrent_kernels.py, against the token-by-token
NumPy references of snf/ops/recurrent_np.py and transformers' own implementations); code generation
copies into each generated module the definitions it calls, as for checks.py. Edit here, then
regenerate generated/.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F

from .kernels import _KERNELS_RAN, _kernel_call, _kernel_causal_conv1d

# The chunk sizes, measured at T=2048 on the 2-core dev CPU (one thread, median of 7; ms fwd / fwd+bwd).
# Larger chunks: more intra-chunk work (quadratic in the chunk); smaller: more chunks to carry, which
# for the SSD is a (T/chunk)^2 matrix. Mamba2-130m's shapes (H=24, P=64, N=128, G=1):
# 32: 132/374, 64: 64/229, 128: 83/263, 256: 158/548
_SSD_CHUNK = 64
# Qwen3-Next-like (Hk=4, Hv=8, K=V=128); 64 over 32: as fast with backward, half the sequential steps:
# 32: 70/311, 64: 76/285, 128: 95/327, 256: 136/430
_GDR_CHUNK = 64
# The delta rule with a decay per key channel, whose [L, L, K] decays per chunk grow with the chunk squared
# (H=8, K=V=64, T=2048, one thread of a loaded CPU, ms fwd / fwd+bwd): 8: 2209/9118, 16: 2109/8184, 32: 2681/10738
_KDA_CHUNK = 16


def _recurrent_dtype(t: torch.Tensor) -> torch.dtype:
    """What the recurrences compute in: float64 for float64, float32 otherwise (half precision
    cannot hold the decays)."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _segsum(a: torch.Tensor) -> torch.Tensor:
    """a [..., L] -> [..., L, L]: out[i, j] = a[j+1] + ... + a[i] for j <= i and -inf above the
    diagonal, so exp(out) is the decay from position j to position i. Summed as such rather than as
    cumsum[i] - cumsum[j], which loses the small differences once the cumulative sums are large."""
    n = a.shape[-1]
    ones = torch.ones(n, n, dtype=torch.bool, device=a.device)
    terms = a[..., None].expand(*a.shape, n).masked_fill(~torch.tril(ones, -1), 0)
    return torch.cumsum(terms, dim=-2).masked_fill(~torch.tril(ones), -math.inf)


# ----------------------------------------------------------------------------- causal convolution

def _causal_conv1d_input(x, weight, state):
    """The state [B, K-1, C] (zeros without one) followed by x [B, T, C], in the dtype both x and the
    weight fit in."""
    dtype = torch.promote_types(x.dtype, weight.dtype)
    if state is None:
        return F.pad(x.to(dtype), (0, 0, weight.shape[-1] - 1, 0))
    return torch.cat([state.to(dtype), x.to(dtype)], dim=1)


def _causal_conv1d(x, weight, bias: Optional[torch.Tensor] = None, state: Optional[torch.Tensor] = None):
    """Depthwise causal convolution of x [B, T, C] by weight [C, 1, K] (nn.Conv1d's, groups=C), the
    K-1 tokens before x being `state` [B, K-1, C] (zeros without one): [B, T, C] in x's dtype."""
    # compiled, torch's convolution (inductor fuses it; the library's would break the graph)
    y = None if torch.compiler.is_compiling() else _kernel_causal_conv1d(x, weight, bias, state)
    if y is not None:
        return y
    _KERNELS_RAN["causal_conv1d"] = "torch"
    if x.shape[1] == 0:  # (conv1d refuses an input shorter than its kernel)
        return x.new_zeros(x.shape)
    xp = _causal_conv1d_input(x, weight, state)
    y = F.conv1d(xp.transpose(1, 2), weight.to(xp.dtype), None if bias is None else bias.to(xp.dtype),
                 groups=x.shape[2])
    return y.transpose(1, 2).to(x.dtype)


def _causal_conv1d_state(x, weight, bias: Optional[torch.Tensor] = None, state: Optional[torch.Tensor] = None):
    """The last K-1 tokens of `state` followed by x: the state [B, K-1, C] after x, in the state's
    dtype (x's without one)."""
    _KERNELS_RAN["causal_conv1d_state"] = "torch"  # a copy of the last inputs: no kernel to call
    xp = _causal_conv1d_input(x, weight, state)
    return xp[:, xp.shape[1] - (weight.shape[-1] - 1):].to(x.dtype if state is None else state.dtype)


# ----------------------------------------------------------------------------- Mamba2's selective scan

def _ssd(x, dt, A, B, C, D, dt_bias, dt_softplus: bool, dt_min, dt_max, state, want_y: bool):
    """The scan of x [Bt, T, H, P] in the compute dtype: (y [Bt, T, H, P], or None unless `want_y`;
    the final state [Bt, H, P, N]). Head h uses group h // (H / G) of B and C [Bt, T, G, N]; the
    heads of a group stay together as [G, R] (R = H / G) so that C B^T is computed once per group."""
    dtype = _recurrent_dtype(x)
    bt, t, h, p = x.shape
    g, n = B.shape[2], B.shape[3]
    r = h // g
    x, dt, A, B, C = (v.to(dtype) for v in (x, dt, A, B, C))
    if dt_bias is not None:
        dt = dt + dt_bias.to(dtype)
    if dt_softplus:
        dt = F.softplus(dt)
    if dt_min is not None or dt_max is not None:
        dt = torch.clamp(dt, dt_min, dt_max)
    s0 = x.new_zeros(bt, h, p, n) if state is None else state.to(dtype)
    skip = None if D is None or not want_y else D.to(dtype)[:, None] * x
    if t == 0:  # new tensors, not the inputs, as for any other length
        return x.new_zeros(x.shape), s0.clone()
    if t == 1:  # one token: the recurrence itself
        d = dt[:, 0].reshape(bt, g, r)
        s = (s0.reshape(bt, g, r, p, n) * torch.exp(d * A.reshape(g, r))[..., None, None]
             + (d[..., None] * x[:, 0].reshape(bt, g, r, p))[..., None] * B[:, 0, :, None, None, :])
        y = None
        if want_y:
            y = torch.einsum("bgrpn,bgn->bgrp", s, C[:, 0]).reshape(bt, 1, h, p)
            y = y if skip is None else y + skip
        return y, s.reshape(bt, h, p, n)

    size = min(_SSD_CHUNK, t)
    chunks = (t + size - 1) // size
    pad = chunks * size - t  # padded tokens have dt = 0: no input, no decay
    xdt = F.pad(x * dt[..., None], (0, 0, 0, 0, 0, pad)).reshape(bt, chunks, size, g, r, p)
    Bc = F.pad(B, (0, 0, 0, 0, 0, pad)).reshape(bt, chunks, size, g, n)
    a = F.pad(dt * A, (0, 0, 0, pad)).reshape(bt, chunks, size, g, r).permute(0, 1, 3, 4, 2)  # [b, c, g, r, l]
    acs = torch.cumsum(a, dim=-1)

    # each chunk's own contribution to the state at its end: its inputs, decayed to the end
    to_end = torch.exp(acs[..., -1:] - acs).permute(0, 1, 4, 2, 3)[..., None]  # [b, c, l, g, r, 1]
    states = torch.einsum("bclgn,bclgrp->bcgrpn", Bc, xdt * to_end)
    # the states at the chunk boundaries: boundary i gets boundary j's state (j = 0: s0; j > 0:
    # chunk j-1's contribution) decayed over the chunks between, all at once as a matrix over chunks
    carry = torch.exp(_segsum(F.pad(acs[..., -1].permute(0, 2, 3, 1), (1, 0))))  # [b, g, r, c+1, c+1]
    states = torch.cat([s0.reshape(bt, 1, g, r, p, n), states], dim=1)
    if not want_y:
        return None, torch.einsum("bgrj,bjgrpn->bgrpn", carry[..., -1, :], states).reshape(bt, h, p, n)
    bounds = torch.einsum("bgrij,bjgrpn->bigrpn", carry, states)

    # the output: within a chunk, attention-like with the decay as causal mask (C B^T once per
    # group); from before it, the chunk's start state read by C and decayed to the position
    Cc = F.pad(C, (0, 0, 0, 0, 0, pad)).reshape(bt, chunks, size, g, n)
    scores = torch.einsum("bclgn,bcsgn->bcgls", Cc, Bc)[:, :, :, None] * torch.exp(_segsum(a))
    y = torch.einsum("bcgrls,bcsgrp->bclgrp", scores, xdt)
    from_start = torch.exp(acs).permute(0, 1, 4, 2, 3)[..., None]
    y = y + torch.einsum("bclgn,bcgrpn->bclgrp", Cc, bounds[:, :-1]) * from_start
    y = y.reshape(bt, chunks * size, h, p)[:, :t]
    return (y if skip is None else y + skip), bounds[:, -1].reshape(bt, h, p, n)


# ----------------------------------------------------------------------------- gated delta rule

def _gated_delta(q, k, v, g, beta, state, scale, l2norm: bool, want_o: bool):
    """The delta rule in the compute dtype: (o [Bt, T, Hv, V], or None unless `want_o`; the final
    state [Bt, Hv, K, V])."""
    dtype = _recurrent_dtype(q)
    bt, t, hk, kd = k.shape
    hv, vd = v.shape[2], v.shape[3]

    def heads(u):  # [Bt, T, Hk, K] -> [Bt, Hv, T, K], each key head serving Hv / Hk value heads
        u = u.to(dtype)
        if l2norm:
            u = u * torch.rsqrt((u * u).sum(-1, keepdim=True) + 1e-6)
        return u.repeat_interleave(hv // hk, dim=2).transpose(1, 2)

    k, v, g, beta = heads(k), v.to(dtype).transpose(1, 2), g.to(dtype).transpose(1, 2), beta.to(dtype).transpose(1, 2)
    q = heads(q) * (kd ** -0.5 if scale is None else scale) if want_o else None
    s = k.new_zeros(bt, hv, kd, vd) if state is None else state.to(dtype)
    if t == 0:  # new tensors, not the inputs, as for any other length
        return v.new_zeros(bt, 0, hv, vd), s.clone()
    if t == 1:  # one token: the recurrence itself
        # g [Bt, Hv, 1] scales the state whole; g [Bt, Hv, 1, K] (a decay per key channel) its rows
        s = s * (torch.exp(g[:, :, 0])[..., None, None] if g.dim() == 3 else torch.exp(g[:, :, 0])[..., None])
        k0 = k[:, :, 0]
        delta = (v[:, :, 0] - torch.einsum("bhk,bhkv->bhv", k0, s)) * beta[:, :, 0, None]
        s = s + k0[..., None] * delta[..., None, :]
        o = torch.einsum("bhk,bhkv->bhv", q[:, :, 0], s)[:, None] if want_o else None
        return o, s

    if g.dim() == 4:
        return _kda_chunked(q, k, v, g, beta, s, want_o)
    size = min(_GDR_CHUNK, t)
    chunks = (t + size - 1) // size
    pad = chunks * size - t  # padded tokens have k = 0 and beta = 0 (no write) and g = 0 (no decay)
    k, v = (F.pad(u, (0, 0, 0, pad)).reshape(bt, hv, chunks, size, u.size(-1)) for u in (k, v))
    g, beta = (F.pad(u, (0, pad)).reshape(bt, hv, chunks, size) for u in (g, beta))
    gcs = torch.cumsum(g, dim=-1)
    decay = torch.exp(_segsum(g))  # [b, h, c, l, s]: from s to l, 0 for s > l

    # Within a chunk, what token l writes, u_l = beta_l (v_l - k_l^T S_l), depends on the chunk's
    # start state S and the earlier writes; that triangular system, solved once, gives u = U - W S
    # (the UT transform): (I + strictly_lower(beta k k^T decay)) [U, W] = [beta v, beta k exp(gcs)]
    kb = k * beta[..., None]
    system = (kb @ k.transpose(-1, -2)) * decay
    uw = torch.linalg.solve_triangular(system, torch.cat([v * beta[..., None], kb * torch.exp(gcs)[..., None]], -1),
                                       upper=False, unitriangular=True)
    U, W = uw[..., :vd], uw[..., vd:]
    k_end = k * torch.exp(gcs[..., -1:] - gcs)[..., None]  # keys decayed to the chunk's end
    chunk_decay = torch.exp(gcs[..., -1])[..., None, None]

    # the chunks in turn, carrying the [K, V] state (torch.compile unrolls this loop: a graph serves
    # one number of chunks)
    starts, writes = [], []
    for c in range(chunks):
        u = U[:, :, c] - W[:, :, c] @ s
        if want_o:
            starts.append(s)
            writes.append(u)
        s = s * chunk_decay[:, :, c] + k_end[:, :, c].transpose(-1, -2) @ u
    if not want_o:
        return None, s

    # the output: the chunk's start state read by q (decayed to the position), plus the chunk's own
    # writes, attention-like with the decay as causal mask
    q = F.pad(q, (0, 0, 0, pad)).reshape(bt, hv, chunks, size, kd)
    o = ((q * torch.exp(gcs)[..., None]) @ torch.stack(starts, dim=2)
         + ((q @ k.transpose(-1, -2)) * decay) @ torch.stack(writes, dim=2))
    return o.reshape(bt, hv, chunks * size, vd)[:, :, :t].transpose(1, 2), s


def _kda_chunked(q, k, v, g, beta, s, want_o: bool):
    """The delta rule with a decay per key channel (Kimi Delta Attention) over a prompt, chunked: q, k,
    g [Bt, Hv, T, K], v [Bt, Hv, T, V], beta [Bt, Hv, T] in the compute dtype (q scaled, None unless
    `want_o`), s the start state [Bt, Hv, K, V]; (o [Bt, T, Hv, V] or None, the final state). As the
    per-head form, but a decay from token j to token l is a vector over K, so the products that carry it
    (k_l . k_j, q_l . k_j) are summed over K with exp(gcs_l - gcs_j) inside: [L, L, K] per chunk, built
    chunk by chunk. Factored as (k exp(gcs)) . (k exp(-gcs)) they would overflow, exp(-gcs) growing
    without bound over a chunk where the decays are steep."""
    bt, hv, t, kd = k.shape
    vd = v.shape[-1]
    size = min(_KDA_CHUNK, t)
    chunks = (t + size - 1) // size
    pad = chunks * size - t  # padded tokens have k = 0 and beta = 0 (no write) and g = 0 (no decay)
    q = None if q is None else F.pad(q, (0, 0, 0, pad)).reshape(bt, hv, chunks, size, kd)
    k, v, g = (F.pad(u, (0, 0, 0, pad)).reshape(bt, hv, chunks, size, u.size(-1)) for u in (k, v, g))
    beta = F.pad(beta, (0, pad)).reshape(bt, hv, chunks, size)
    gcs = torch.cumsum(g, dim=-2)  # [b, h, c, l, K]
    lower = torch.tril(torch.ones(size, size, dtype=torch.bool, device=k.device))
    strict = torch.tril(lower, -1)
    outs = []
    for c in range(chunks):
        kc, gc, bc = k[:, :, c], gcs[:, :, c], beta[:, :, c, :, None]
        # from token j to token l (j <= l): exp(gcs_l - gcs_j) per channel, 0 above the diagonal
        decay = torch.exp((gc[..., :, None, :] - gc[..., None, :, :]).masked_fill(~lower[..., None], -math.inf))
        kb = kc * bc
        # what token l writes, u_l = beta_l (v_l - k_l^T S_l), from the chunk's start state and the earlier
        # writes: (I + strictly_lower(beta k k^T decay)) [U, W] = [beta v, beta k exp(gcs)], then u = U - W S
        # (products and sums, not einsum: quicker here, and autocast leaves them in the compute dtype)
        system = (kb[..., :, None, :] * kc[..., None, :, :] * decay).sum(-1).masked_fill(~strict, 0)
        uw = torch.linalg.solve_triangular(system, torch.cat([v[:, :, c] * bc, kb * torch.exp(gc)], -1),
                                           upper=False, unitriangular=True)
        u = uw[..., :vd] - uw[..., vd:] @ s
        if want_o:
            qc = q[:, :, c]
            scores = (qc[..., :, None, :] * kc[..., None, :, :] * decay).sum(-1)
            outs.append((qc * torch.exp(gc)) @ s + scores @ u)
        s = s * torch.exp(gc[..., -1, :])[..., None] + (kc * torch.exp(gc[..., -1:, :] - gc)).transpose(-1, -2) @ u
    if not want_o:
        return None, s
    return torch.stack(outs, dim=2).reshape(bt, hv, chunks * size, vd)[:, :, :t].transpose(1, 2), s


# ----------------------------------------------------------------------------- the entry points

def _ssd_y(x, dt, A, B, C, D, dt_bias, dt_softplus: bool, dt_min: Optional[float], dt_max: Optional[float], state):
    # contiguous: a custom op's result must have the strides of its fake (a new tensor's)
    return _ssd(x, dt, A, B, C, D, dt_bias, dt_softplus, dt_min, dt_max, state, True)[0].to(x.dtype).contiguous()


def _ssd_final(x, dt, A, B, C, D, dt_bias, dt_softplus: bool, dt_min: Optional[float], dt_max: Optional[float],
               state):
    final = _ssd(x, dt, A, B, C, D, dt_bias, dt_softplus, dt_min, dt_max, state, False)[1]
    return final.to(x.dtype if state is None else state.dtype).contiguous()


def _gated_delta_o(q, k, v, g, beta, state, scale: Optional[float], l2norm: bool):
    return _gated_delta(q, k, v, g, beta, state, scale, l2norm, True)[0].to(q.dtype).contiguous()


def _gated_delta_final(q, k, v, g, beta, state, scale: Optional[float], l2norm: bool):
    final = _gated_delta(q, k, v, g, beta, state, scale, l2norm, False)[1]
    return final.to(q.dtype if state is None else state.dtype).contiguous()


def _recurrent_run(op: str, kernel, args):
    """torch.ops.snf.`op`'s forward, eager or in a compiled graph: the library's kernel where one covers
    the call, else `kernel(*args)` (the torch code, whose gradients the op's backward always takes)."""
    out = _kernel_call(op, args)
    if out is None:
        _KERNELS_RAN[op] = "torch"
        out = kernel(*args)
    return out


def _recurrent_vjp(kernel, grad, args, slots) -> list:
    """The gradients of `kernel(*args)` for `grad`, one per tensor argument (the positions `slots`;
    an empty tensor for one that is None): the chunked form differentiated by torch.func, which works
    inside a custom op's kernel, where autograd does not record."""
    at = [i for i in slots if isinstance(args[i], torch.Tensor)]

    def partial(*tensors):
        full = list(args)
        for i, t in zip(at, tensors):
            full[i] = t
        return kernel(*full)
    with torch.enable_grad():
        _, pull = torch.func.vjp(partial, *[args[i] for i in at])
        found = dict(zip(at, pull(grad)))
    return [found[i].contiguous() if i in found else grad.new_empty(0) for i in slots]  # the fakes' strides


def _recurrent_define_ops() -> dict:
    """torch.ops.snf.ssd_scan, ssd_state, gated_delta_rule and gated_delta_state, which torch.compile
    sees as opaque ops: it compiles a layer around the scan rather than trace the chunked form, whose
    chunk arithmetic over a dynamic length cost about 10 s of symbolic-shape work per graph (a Mamba2
    session of tests/property/test_session.py: 180 s for 13 graphs). Eager calls run the Python
    directly. Registered by the first module that needs them (a custom op registers once per process)."""
    names = ("ssd_scan", "ssd_state", "gated_delta_rule", "gated_delta_state")
    if hasattr(torch.ops.snf, "ssd_scan"):
        return {n: getattr(torch.ops.snf, n) for n in names}
    ssd = ("Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? dt_bias, bool dt_softplus, "
           "float? dt_min, float? dt_max, Tensor? state")
    delta = "Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor? state, float? scale, bool l2norm"

    def ssd_state_shape(x, dt, A, B, C, D, dt_bias, dt_softplus, dt_min, dt_max, state):
        return (x if state is None else state).new_empty(x.shape[0], x.shape[2], x.shape[3], B.shape[3])

    def delta_state_shape(q, k, v, g, beta, state, scale, l2norm):
        return (q if state is None else state).new_empty(v.shape[0], v.shape[2], q.shape[3], v.shape[3])
    # name: (kernel, schema, the tensor arguments' positions, the result's fake)
    table = {"ssd_scan": (_ssd_y, ssd, (0, 1, 2, 3, 4, 5, 6, 10), lambda x, *rest: x.new_empty(x.shape)),
             "ssd_state": (_ssd_final, ssd, (0, 1, 2, 3, 4, 5, 6, 10), ssd_state_shape),
             "gated_delta_rule": (_gated_delta_o, delta, (0, 1, 2, 3, 4, 5),
                                  lambda q, k, v, *rest: q.new_empty(v.shape)),
             "gated_delta_state": (_gated_delta_final, delta, (0, 1, 2, 3, 4, 5), delta_state_shape)}
    for name, (kernel, schema, slots, fake) in table.items():
        def run(*args, name=name, kernel=kernel):
            with torch.no_grad():  # the op's backward is registered below: a library's autograd records nothing
                return _recurrent_run(name, kernel, args)
        forward = torch.library.custom_op(f"snf::{name}", run, mutates_args=(), schema=f"({schema}) -> Tensor")
        backward = torch.library.custom_op(
            f"snf::{name}_backward",
            lambda grad, *args, kernel=kernel, slots=slots: _recurrent_vjp(kernel, grad, args, slots),
            mutates_args=(), schema=f"(Tensor grad, {schema}) -> Tensor[]")
        forward.register_fake(fake)
        backward.register_fake(lambda grad, *args, slots=slots: [
            args[i].new_empty(args[i].shape) if args[i] is not None else grad.new_empty(0) for i in slots])

        def setup_context(ctx, inputs, output):
            ctx.given = [isinstance(a, torch.Tensor) for a in inputs]
            ctx.others = [None if isinstance(a, torch.Tensor) else a for a in inputs]
            ctx.save_for_backward(*[a for a in inputs if isinstance(a, torch.Tensor)])

        def grads(ctx, grad, name=name, slots=slots):
            saved = iter(ctx.saved_tensors)
            args = [next(saved) if given else other for given, other in zip(ctx.given, ctx.others)]
            found = dict(zip(slots, getattr(torch.ops.snf, f"{name}_backward")(grad, *args)))
            return tuple(found[i] if ctx.given[i] else None for i in range(len(args)))
        forward.register_autograd(grads, setup_context=setup_context)
    # the counter sees the ops, not the products inside them: count them by the formulas snfc stats uses
    # (snf/ops/recurrent.py), the backward twice the forward; the state ops only run with the caches
    from torch.utils.flop_counter import register_flop_formula
    for name, flops in (("ssd_scan", lambda x, dt, A, B, *rest, **kw: 4 * x.numel() * B[-1]),
                        ("gated_delta_rule", lambda q, k, v, *rest, **kw: 6 * v.numel() * q[-1])):
        register_flop_formula(getattr(torch.ops.snf, name))(lambda *a, flops=flops, out_shape=None, **kw: flops(*a))
        register_flop_formula(getattr(torch.ops.snf, f"{name}_backward"))(
            lambda grad, *a, flops=flops, out_shape=None, **kw: 2 * flops(*a))
    return {n: getattr(torch.ops.snf, n) for n in names}


_RECURRENT_OPS = _recurrent_define_ops()
# eager calls run the Python, without a custom op's dispatch per call (a decode step makes several per
# layer); tests/test_stats.py sets it to count the ops' FLOPs as compiled graphs run them
_RECURRENT_OPAQUE = False


def _recurrent(op: str, torch_code, args: tuple):
    """torch.ops.snf.`op` where a graph is compiled (or _RECURRENT_OPAQUE), else its Python directly."""
    if _RECURRENT_OPAQUE or torch.compiler.is_compiling():
        return _RECURRENT_OPS[op](*args)
    return _recurrent_run(op, torch_code, args)


def _ssd_scan(x, dt, A, B, C, D: Optional[torch.Tensor] = None, dt_bias: Optional[torch.Tensor] = None,
              dt_softplus: bool = True, dt_min: Optional[float] = 0.0, dt_max: Optional[float] = None,
              state: Optional[torch.Tensor] = None):
    """Mamba2's selective scan over x [Bt, T, H, P]: per token and head, dt' = clip(softplus(dt +
    dt_bias), dt_min, dt_max), state = exp(dt' A) state + dt' x B^T, y = state C + D x. dt [Bt, T, H];
    A, D, dt_bias [H]; B, C [Bt, T, G, N]; state [Bt, H, P, N] before x (zeros when None). y in x's dtype."""
    return _recurrent("ssd_scan", _ssd_y, (x, dt, A, B, C, D, dt_bias, dt_softplus, dt_min, dt_max, state))


def _ssd_state(x, dt, A, B, C, D: Optional[torch.Tensor] = None, dt_bias: Optional[torch.Tensor] = None,
               dt_softplus: bool = True, dt_min: Optional[float] = 0.0, dt_max: Optional[float] = None,
               state: Optional[torch.Tensor] = None):
    """The state [Bt, H, P, N] after `_ssd_scan` with the same arguments, in the state's dtype (x's
    without one)."""
    return _recurrent("ssd_state", _ssd_final, (x, dt, A, B, C, D, dt_bias, dt_softplus, dt_min, dt_max, state))


def _gated_delta_rule(q, k, v, g, beta, state: Optional[torch.Tensor] = None, scale: Optional[float] = None,
                      l2norm: bool = True):
    """Gated DeltaNet's delta rule over q, k [Bt, T, Hk, K] and v [Bt, T, Hv, V] (value head h reads
    key head h // (Hv / Hk)): q, k L2-normalised (`l2norm`), q scaled (1/sqrt(K) when `scale` is None);
    per token S = S exp(g), S = S + k ((v - k^T S) beta)^T, o = q^T S. g, beta [Bt, T, Hv]; state
    [Bt, Hv, K, V] before q (zeros when None). o [Bt, T, Hv, V] in q's dtype."""
    return _recurrent("gated_delta_rule", _gated_delta_o, (q, k, v, g, beta, state, scale, l2norm))


def _gated_delta_state(q, k, v, g, beta, state: Optional[torch.Tensor] = None, scale: Optional[float] = None,
                       l2norm: bool = True):
    """The state [Bt, Hv, K, V] after `_gated_delta_rule` with the same arguments, in the state's
    dtype (q's without one)."""
    return _recurrent("gated_delta_state", _gated_delta_final, (q, k, v, g, beta, state, scale, l2norm))
