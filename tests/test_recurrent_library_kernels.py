"""The recurrent ops' library kernels (snf/runtime/kernels.py), without the libraries: fake modules in
sys.modules with each library's documented signature, each a token-by-token torch loop written from
the library's docstrings (not from snf's kernels) that checks the layouts its C++/Triton code checks
and records its calls, and the device test widened to the CPU. Checked: which function is called,
with what layout and arguments; results equal to the torch code in float32 (outputs, final states,
initial states, gradients); what falls back; what recurrent_kernels() says; SNF_RECURRENT_KERNELS=torch;
generated modules; torch.compile; and that on the CPU nothing is even imported."""

from __future__ import annotations

import dataclasses
import importlib
import math
import sys
import types

import pytest
import torch
import torch.nn.functional as F

from conftest import REPO, fresh_module
from snf import runtime
from snf.runtime import kernels as kern
from snf.runtime import recurrent as rec
from specs_table import ROWS
from test_recurrent_kernels import _conv_args, _delta_args, _ssd_args

F32 = torch.float32
OPS = ("causal_conv1d", "causal_conv1d_state", "ssd_scan", "ssd_state", "gated_delta_rule", "gated_delta_state")
LIBRARIES = {"causal_conv1d": "causal-conv1d 1.6.1", "ssd": "mamba_ssm 2.3.2",
             "gated_delta": "flash-linear-attention 0.5.2"}


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


# ----------------------------------------------------------------------------- the fake libraries

def _no_grad(*tensors):
    assert not torch.is_grad_enabled() or not any(t is not None and t.requires_grad for t in tensors), \
        "this kernel has no backward"


def _conv_loop(prev, x, weight, bias):
    """out[:, :, i] = bias + sum_j weight[:, j] * (prev ++ x)[:, :, i + j] (causal_conv1d_ref's meaning)."""
    k, t = weight.shape[1], x.shape[2]
    xp = torch.cat([prev, x], dim=-1).float()
    return torch.stack([sum(weight[:, j].float() * xp[:, :, i + prev.shape[2] - (k - 1) + j] for j in range(k))
                        + (0 if bias is None else bias.float()) for i in range(t)], dim=-1).to(x.dtype)


def causal_conv1d_fn(x, weight, bias=None, seq_idx=None, initial_states=None, return_final_states=False,
                     final_states_out=None, activation=None):
    """x (batch, dim, seqlen), weight (dim, width), bias (dim,), initial_states (batch, dim, width - 1)."""
    b, c, t = x.shape
    k = weight.shape[1]
    assert weight.shape == (c, k) and 2 <= k <= 4 and activation is None and not return_final_states
    assert x.stride(2) == 1 or x.stride(1) == 1
    channel_last = x.stride(1) == 1 and x.stride(2) > 1
    if channel_last:
        assert c % 8 == 0 and x.stride(2) % 8 == 0 and x.stride(0) % 8 == 0
    assert bias is None or bias.dtype == weight.dtype
    if initial_states is not None:
        assert channel_last, "initial_states is only supported for channel last layout"
        assert initial_states.shape == (b, c, k - 1) and initial_states.stride(1) == 1
        assert initial_states.dtype == x.dtype
    return _conv_loop(x.new_zeros(b, c, k - 1) if initial_states is None else initial_states, x, weight, bias)


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None,
                         conv_state_indices=None):
    """x (batch, dim, seqlen), conv_state (batch, dim, state_len >= width - 1), updated in place."""
    _no_grad(x, conv_state, weight, bias)
    assert x.dim() == 3 and conv_state.dtype == x.dtype and conv_state.shape[2] >= weight.shape[1] - 1
    out = _conv_loop(conv_state, x, weight, bias)
    conv_state.copy_(torch.cat([conv_state, x], dim=-1)[:, :, -conv_state.shape[2]:])
    return out


def _ssd_loop(s, x, dt, A, B, C, D):
    """Per token: s = exp(dt A) s + dt x B^T, y = s C + D x; B, C per head; in float32."""
    ys = []
    for i in range(x.shape[1]):
        d = dt[:, i, :, None, None]
        s = s * torch.exp(d * A[:, None, None]) + d * x[:, i, :, :, None].float() * B[:, i, :, None, :]
        y = (s * C[:, i, :, None, :]).sum(-1)
        ys.append(y if D is None else y + D.float()[:, None] * x[:, i].float())
    return torch.stack(ys, dim=1), s


def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, initial_states=None,
                              seq_idx=None, cu_seqlens=None, dt_softplus=False, dt_limit=(0.0, float("inf")),
                              return_final_states=False, return_varlen_states=False):
    """x (batch, seqlen, nheads, headdim), dt (batch, seqlen, nheads), A (nheads), B, C (batch, seqlen,
    ngroups, dstate), D (nheads,), dt_bias (nheads,), initial_states (batch, nheads, headdim, dstate);
    dt clamped to dt_limit always (the Triton kernel's min/max); the final states in float32."""
    b, t, h, p = x.shape
    g, n = B.shape[2:]
    assert dt.shape == (b, t, h) and A.shape == (h,) and C.shape == B.shape and h % g == 0 and z is None
    assert D is None or D.shape == (h,)
    dt = dt.float() + (0 if dt_bias is None else dt_bias.float())
    dt = (F.softplus(dt) if dt_softplus else dt).clamp(dt_limit[0], dt_limit[1])
    s = x.new_zeros(b, h, p, n, dtype=F32) if initial_states is None else initial_states.float()
    y, s = _ssd_loop(s, x, dt, A.float(), *(u.float().repeat_interleave(h // g, dim=2) for u in (B, C)), D)
    return (y.to(x.dtype), s) if return_final_states else y.to(x.dtype)


def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
                           state_batch_indices=None):
    """state (batch, nheads, dim, dstate), updated in place; x, dt (batch, nheads, dim); A (nheads, dim,
    dstate); B, C (batch, ngroups, dstate); D, dt_bias (nheads, dim). No dt limit."""
    _no_grad(state, x, dt, A, B, C, D, dt_bias)
    b, h, p, n = state.shape
    assert x.shape == dt.shape == (b, h, p) and A.shape == (h, p, n) and B.shape[0::2] == (b, n) and z is None
    assert D is None or D.shape == (h, p)
    assert dt_bias is not None and dt_bias.shape == (h, p)  # (its stride is read unconditionally)
    dt = dt.float() + dt_bias.float()
    dt = F.softplus(dt) if dt_softplus else dt
    Bh, Ch = (u.float().repeat_interleave(h // B.shape[1], dim=1) for u in (B, C))
    new = state.float() * torch.exp(dt[..., None] * A.float()) + (dt * x.float())[..., None] * Bh[:, :, None]
    state.copy_(new)
    y = (new * Ch[:, :, None]).sum(-1) + (0 if D is None else D.float() * x.float())
    return y.to(x.dtype)


def _delta_loop(q, k, v, g, beta, scale, initial_state, l2norm):
    """Per token: S = S exp(g) (g [B, T, H], or [B, T, H, K]: S's rows each by its own); S += k ((v -
    k^T S) beta)^T; o = (scale q)^T S; in float32."""
    q, k, v, g, beta = (u.float() for u in (q, k, v, g, beta))
    if l2norm:
        q, k = (u / torch.sqrt((u * u).sum(-1, keepdim=True) + 1e-6) for u in (q, k))
    b, t, h, kd = k.shape
    s = q.new_zeros(b, h, kd, v.shape[3]) if initial_state is None else initial_state.float()
    os_ = []
    for i in range(t):
        s = s * (torch.exp(g[:, i])[..., None, None] if g.dim() == 3 else torch.exp(g[:, i])[..., None])
        u = (v[:, i] - (k[:, i, :, :, None] * s).sum(-2)) * beta[:, i, :, None]
        s = s + k[:, i, :, :, None] * u[:, :, None, :]
        os_.append((scale * q[:, i, :, :, None] * s).sum(-2))
    return torch.stack(os_, dim=1), s


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, cu_seqlens=None, **kwargs):
    """q, k (B, T, H, K), v (B, T, H, V) (the heads of all equal, as fla before grouped value heads),
    g, beta (B, T, H), initial_state (B, H, K, V); (o in q's dtype, the final state in float32 or None)."""
    assert q.shape[:3] == k.shape[:3] == v.shape[:3] and g.shape == beta.shape == v.shape[:3]
    if sys.modules["fla"].__version__ < "0.4" and q.dtype == F32:
        raise AssertionError("ChunkGatedDeltaRuleFunction does not support float32. Please use bfloat16.")
    scale = k.shape[-1] ** -0.5 if scale is None else scale
    o, s = _delta_loop(q, k, v, g, beta, scale, initial_state, use_qk_l2norm_in_kernel)
    return o.to(q.dtype), (s if output_final_state else None)


def fused_recurrent_gated_delta_rule(q, k, v, g=None, gk=None, gv=None, beta=None, scale=None, initial_state=None,
                                     output_final_state=False, use_qk_l2norm_in_kernel=False, cu_seqlens=None,
                                     **kwargs):
    """As chunk_gated_delta_rule, without a backward; o in v's dtype."""
    _no_grad(q, k, v, g, beta, initial_state)
    assert q.shape[:3] == k.shape[:3] == v.shape[:3] and gk is None and gv is None and beta is not None
    scale = k.shape[-1] ** -0.5 if scale is None else scale
    o, s = _delta_loop(q, k, v, g, beta, scale, initial_state, use_qk_l2norm_in_kernel)
    return o.to(v.dtype), (s if output_final_state else None)


def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, cu_seqlens=None, **kwargs):
    """q, k (B, T, H, K), v (B, T, HV, V), g (decays) (B, T, HV, K), beta (B, T, HV), initial_state
    (N, HV, K, V); (o, the final state in float32 or None). Here H == HV (as snf calls it)."""
    assert q.shape == k.shape == g.shape and v.shape[:3] == beta.shape == q.shape[:3]
    assert not kwargs.get("use_gate_in_kernel") and not kwargs.get("use_beta_sigmoid_in_kernel")
    scale = k.shape[-1] ** -0.5 if scale is None else scale
    o, s = _delta_loop(q, k, v, g, beta, scale, initial_state, use_qk_l2norm_in_kernel)
    return o.to(q.dtype), (s if output_final_state else None)


def fused_recurrent_kda(q, k, v, g, beta=None, A_log=None, dt_bias=None, scale=None, initial_state=None,
                        output_final_state=False, use_qk_l2norm_in_kernel=False, **kwargs):
    """As chunk_kda, without a backward (A_log and dt_bias sit between beta and scale)."""
    _no_grad(q, k, v, g, beta, initial_state)
    assert A_log is None and dt_bias is None and beta is not None
    return chunk_kda(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel)


@pytest.fixture
def calls(monkeypatch):
    """The fakes installed (their calls recorded, in order: (name, args, kwargs)) and the device test
    widened to the CPU; the import cache and the report emptied."""
    found = []

    def recorded(fn):
        def call(*args, **kwargs):
            found.append((fn.__name__, args, kwargs))
            return fn(*args, **kwargs)
        return call

    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update({k: recorded(v) if callable(v) else v for k, v in attrs.items()})
        monkeypatch.setitem(sys.modules, name, m)

    module("causal_conv1d", __version__="1.6.1", causal_conv1d_fn=causal_conv1d_fn,
           causal_conv1d_update=causal_conv1d_update)
    for name in ("mamba_ssm.ops", "mamba_ssm.ops.triton", "fla.ops"):
        module(name)
    module("mamba_ssm", __version__="2.3.2")
    module("mamba_ssm.ops.triton.ssd_combined", mamba_chunk_scan_combined=mamba_chunk_scan_combined)
    module("mamba_ssm.ops.triton.selective_state_update", selective_state_update=selective_state_update)
    module("fla", __version__="0.5.2")
    module("fla.ops.gated_delta_rule", chunk_gated_delta_rule=chunk_gated_delta_rule,
           fused_recurrent_gated_delta_rule=fused_recurrent_gated_delta_rule)
    module("fla.ops.kda", chunk_kda=chunk_kda, fused_recurrent_kda=fused_recurrent_kda)
    monkeypatch.setattr(kern, "_kernel_device", lambda t: True)
    monkeypatch.setattr(kern, "_KERNEL_LIBRARIES", {})
    monkeypatch.delenv("SNF_RECURRENT_KERNELS", raising=False)
    kern._KERNELS_RAN.clear()
    yield found
    kern._KERNELS_RAN.clear()


def _torch(monkeypatch, fn, args):
    """fn(*args) through snf's own torch code."""
    with monkeypatch.context() as m:
        m.setenv("SNF_RECURRENT_KERNELS", "torch")
        return fn(*args)


def _same(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * max(want.abs().max().item(), 1e-30))


def _grads(fn, args):
    """The gradients of sum(fn(*args) * a fixed random tensor) w.r.t. every tensor argument."""
    leaves = [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
    out = fn(*leaves)
    (out * torch.randn(out.shape, generator=torch.Generator().manual_seed(3))).sum().backward()
    return [a.grad for a in leaves if isinstance(a, torch.Tensor)]


def _check(monkeypatch, calls, fn, args, called, grads=False):
    """fn(*args) through the library equals the torch code (and, `grads`, so do the gradients), having
    called the library function `called` once."""
    if grads:  # (the one-token kernels serve only calls without)
        args = [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
        for want, got in zip(_torch(monkeypatch, lambda *a: _grads(fn, a), args), _grads(fn, args)):
            assert (got is None) == (want is None)  # (a state's, w.r.t. D: none)
            if want is not None:
                _same(got, want)
    want = _torch(monkeypatch, fn, args).detach()  # then the library's, which the report then names
    start = len(calls)
    _same(fn(*args).detach(), want)
    assert [c[0] for c in calls[start:]] == [called]


# ----------------------------------------------------------------------------- nothing changes without them

def test_on_the_cpu_nothing_is_imported_and_the_torch_code_runs(calls, monkeypatch):
    monkeypatch.setattr(kern, "_kernel_device", lambda t: t.is_cuda)
    rec._causal_conv1d(*_conv_args(dtype=F32))
    rec._causal_conv1d_state(*_conv_args(dtype=F32))
    for fn in (rec._ssd_scan, rec._ssd_state):
        fn(*_ssd_args(dtype=F32))
    for fn in (rec._gated_delta_rule, rec._gated_delta_state):
        fn(*_delta_args(dtype=F32))
    assert calls == [] and kern._KERNEL_LIBRARIES == {}
    assert runtime.recurrent_kernels() == {op: "torch" for op in OPS}


def test_a_missing_library_is_tried_once_then_the_torch_code_runs(calls, monkeypatch):
    tried = []
    real = importlib.import_module

    def import_module(name, *rest):
        tried.append(name)
        return real(name, *rest)
    monkeypatch.setattr(importlib, "import_module", import_module)
    for name in ("causal_conv1d", "mamba_ssm.ops.triton.ssd_combined", "fla.ops.gated_delta_rule"):
        monkeypatch.setitem(sys.modules, name, None)  # what an absent module raises ImportError for
    for _ in range(2):
        rec._causal_conv1d(*_conv_args(c=16, dtype=F32))
        rec._ssd_scan(*_ssd_args(dtype=F32))
        rec._gated_delta_rule(*_delta_args(dtype=F32))
    assert tried == ["causal_conv1d", "mamba_ssm.ops.triton.ssd_combined", "fla.ops.gated_delta_rule"]
    assert kern._KERNEL_LIBRARIES == dict.fromkeys(("causal_conv1d", "mamba_ssm", "fla"))
    assert calls == [] and set(runtime.recurrent_kernels().values()) == {"torch"}


def test_forcing_the_torch_code(calls, monkeypatch):
    """SNF_RECURRENT_KERNELS=torch, read at each call: set after the libraries were imported too."""
    rec._ssd_scan(*_ssd_args(dtype=F32))
    assert len(calls) == 1 and runtime.recurrent_kernels() == {"ssd_scan": LIBRARIES["ssd"]}
    monkeypatch.setenv("SNF_RECURRENT_KERNELS", "torch")
    rec._causal_conv1d(*_conv_args(c=16, dtype=F32))
    rec._ssd_scan(*_ssd_args(dtype=F32))
    rec._gated_delta_rule(*_delta_args(dtype=F32))
    assert len(calls) == 1 and set(runtime.recurrent_kernels().values()) == {"torch"}


# ----------------------------------------------------------------------------- the convolution

@pytest.mark.parametrize("t, c, state, called", [
    (7, 16, False, "causal_conv1d_fn"),
    (7, 6, False, "causal_conv1d_fn"),  # C % 8 != 0: channel-first
    (7, 16, True, "causal_conv1d_fn"),  # a state: channel-last
    (1, 6, True, "causal_conv1d_update"),
    (1, 16, False, "causal_conv1d_fn"),
], ids=["prompt", "prompt-C6", "prompt-after-state", "one-token-update", "one-token-no-state"])
def test_causal_conv1d_runs_the_library_with_its_layouts(calls, monkeypatch, t, c, state, called):
    args = _conv_args(t=t, c=c, state=state, dtype=F32)
    before = None if args[3] is None else args[3].clone()
    _check(monkeypatch, calls, rec._causal_conv1d, args, called)
    name, given, options = calls[0]
    weight = given[1 if called == "causal_conv1d_fn" else 2]
    assert given[0].shape == (2, c, t) and weight.shape == (c, 4)  # [B, C, T]; weight [C, K]
    if called == "causal_conv1d_update":
        assert given[1].shape == (2, c, 3)  # the state [B, C, K - 1]
    if called == "causal_conv1d_fn" and state:
        assert given[0].stride(1) == 1 and options["initial_states"].shape == (2, c, 3)
    if before is not None:
        assert torch.equal(args[3], before)  # the update wrote a copy of the state
    assert runtime.recurrent_kernels() == {"causal_conv1d": LIBRARIES["causal_conv1d"]}
    rec._causal_conv1d_state(*args)
    assert len(calls) == 1 and runtime.recurrent_kernels()["causal_conv1d_state"] == "torch"


def test_causal_conv1d_gradients_through_the_library(calls, monkeypatch):
    """A prompt after a state: gradients w.r.t. x, the weight, the bias and the state."""
    _check(monkeypatch, calls, rec._causal_conv1d, _conv_args(t=5, c=8, dtype=F32), "causal_conv1d_fn", grads=True)


@pytest.mark.parametrize("case", ["K=1", "K=5", "T=0", "float64", "state-C6-prompt", "bias-dtype", "state-dtype"])
def test_causal_conv1d_falls_back_where_the_library_does_not_reach(calls, case):
    args = {"K=1": lambda: _conv_args(c=16, k=1, dtype=F32), "K=5": lambda: _conv_args(c=16, k=5, dtype=F32),
            "T=0": lambda: _conv_args(t=0, c=16, dtype=F32), "float64": lambda: _conv_args(c=16),
            "state-C6-prompt": lambda: _conv_args(c=6, dtype=F32)}.get(case, lambda: _conv_args(c=16, dtype=F32))()
    if case == "bias-dtype":
        args[2] = args[2].half()
    if case == "state-dtype":
        args[3] = args[3].double()
    rec._causal_conv1d(*args)
    assert calls == [] and runtime.recurrent_kernels() == {"causal_conv1d": "torch"}


# ----------------------------------------------------------------------------- the selective scan

_SSD = {
    "all-options": dict(),
    "plain": dict(D=False, dt_bias=False, state=False, g=1),
    "clipped-no-softplus": dict(dt_softplus=False, dt_min=0.05, dt_max=0.7),
    "no-lower-limit": dict(dt_softplus=False, dt_min=None),
}


@pytest.mark.parametrize("case", _SSD)
@pytest.mark.parametrize("fn", [rec._ssd_scan, rec._ssd_state], ids=["scan", "state"])
def test_ssd_prompt_runs_mamba_chunk_scan_combined(calls, monkeypatch, case, fn):
    args = _ssd_args(t=7, dtype=F32, **_SSD[case])
    if case == "no-lower-limit":  # dt < 0 grows the state: small enough not to overflow
        args[1], args[2] = 0.3 * args[1], -torch.rand(4)
    _check(monkeypatch, calls, fn, args, "mamba_chunk_scan_combined")
    _, given, options = calls[0]
    assert all(a is b for a, b in zip(given, args[:5])) and given[5] == 256  # our layouts are the library's
    assert options["D"] is args[5] and options["dt_bias"] is args[6] and options["initial_states"] is args[10]
    dt_min, dt_max = args[8:10]
    assert options["dt_limit"] == (-math.inf if dt_min is None else dt_min, math.inf if dt_max is None else dt_max)
    assert options["return_final_states"] == (fn is rec._ssd_state)
    assert runtime.recurrent_kernels() == {fn.__name__[1:]: LIBRARIES["ssd"]}


@pytest.mark.parametrize("case", ["all-options", "plain"])
@pytest.mark.parametrize("fn", [rec._ssd_scan, rec._ssd_state], ids=["scan", "state"])
def test_ssd_one_token_runs_selective_state_update_on_a_copy(calls, monkeypatch, case, fn):
    args = _ssd_args(t=1, dtype=F32, **_SSD[case])
    before = None if args[10] is None else args[10].clone()
    _check(monkeypatch, calls, fn, args, "selective_state_update")
    _, (state, x, dt, A, B, C), options = calls[0]
    assert state.shape == (2, 4, 3, 5) and x.shape == dt.shape == (2, 4, 3) and A.shape == (4, 3, 5)
    assert dt.stride(-1) == A.stride(-1) == A.stride(-2) == options["dt_bias"].stride(-1) == 0  # per head
    assert B.shape == C.shape == (2, args[3].shape[2], 5) and options["dt_softplus"]
    if before is not None:
        assert torch.equal(args[10], before)


@pytest.mark.parametrize("case", ["dt_max", "dt_min>0", "gradient"])
def test_ssd_one_token_the_update_cannot_take_runs_the_chunked_kernel(calls, monkeypatch, case):
    """selective_state_update clips nothing and has no backward."""
    args = _ssd_args(t=1, dtype=F32, dt_max=0.5 if case == "dt_max" else None,
                     dt_min=0.2 if case == "dt_min>0" else 0.0)
    _check(monkeypatch, calls, rec._ssd_scan, args, "mamba_chunk_scan_combined", grads=case == "gradient")


def test_ssd_gradients_through_the_library(calls, monkeypatch):
    """Of y and of the final state w.r.t. x, dt, A, B, C, D, dt_bias and the initial state."""
    args = _ssd_args(t=6, dtype=F32)
    _check(monkeypatch, calls, rec._ssd_scan, args, "mamba_chunk_scan_combined", grads=True)
    _check(monkeypatch, calls, rec._ssd_state, args, "mamba_chunk_scan_combined", grads=True)


def test_ssd_falls_back_on_float64_and_empty_and_keeps_dtypes_in_half(calls):
    rec._ssd_scan(*_ssd_args())
    rec._ssd_state(*_ssd_args(t=0, dtype=F32))
    assert calls == [] and runtime.recurrent_kernels() == {"ssd_scan": "torch", "ssd_state": "torch"}
    args = _ssd_args(dtype=torch.bfloat16)
    args[10] = args[10].float()
    assert (rec._ssd_scan(*args).dtype, rec._ssd_state(*args).dtype) == (torch.bfloat16, F32)
    assert len(calls) == 2


# ----------------------------------------------------------------------------- the delta rule

_DELTA = {"Hv=2Hk+state": dict(), "no-l2norm+scale+no-state": dict(hk=4, l2norm=False, scale=0.3, state=False)}


@pytest.mark.parametrize("case", _DELTA)
@pytest.mark.parametrize("t, called", [(7, "chunk_gated_delta_rule"), (1, "fused_recurrent_gated_delta_rule")],
                         ids=["prompt", "one-token"])
@pytest.mark.parametrize("fn", [rec._gated_delta_rule, rec._gated_delta_state], ids=["rule", "state"])
def test_gated_delta_rule_runs_fla(calls, monkeypatch, case, t, called, fn):
    args = _delta_args(t=t, dtype=F32, **_DELTA[case])
    _check(monkeypatch, calls, fn, args, called)
    _, given, options = calls[0]
    assert given[0].shape == given[1].shape == (2, t, 4, 3)  # q, k repeated to the value heads
    scale, l2norm = args[6:]
    assert options["scale"] == (3 ** -0.5 if scale is None else scale) and options["use_qk_l2norm_in_kernel"] == l2norm
    assert options["initial_state"] is args[5] and options["output_final_state"] == (fn is rec._gated_delta_state)
    if called == "fused_recurrent_gated_delta_rule":
        assert options["g"] is args[3] and options["beta"] is args[4]  # keywords: gk, gv sit between
    assert runtime.recurrent_kernels() == {fn.__name__[1:]: LIBRARIES["gated_delta"]}


@pytest.mark.parametrize("t, called", [(7, "chunk_kda"), (1, "fused_recurrent_kda")], ids=["prompt", "one-token"])
@pytest.mark.parametrize("fn", [rec._gated_delta_rule, rec._gated_delta_state], ids=["rule", "state"])
def test_a_decay_per_key_channel_runs_fla_kda(calls, monkeypatch, t, called, fn):
    """g [B, T, Hv, K] (Kimi Delta Attention): fla.ops.kda's functions, q and k repeated to the value
    heads, g and beta by keyword; gradients through chunk_kda; without fla.ops.kda (fla before 0.4),
    the torch code, while the per-head decay still runs fla."""
    args = _delta_args(t=t, dtype=F32, kda=True)
    _check(monkeypatch, calls, fn, args, called)
    _, given, options = calls[0]
    assert given[0].shape == given[1].shape == (2, t, 4, 3)
    assert options["g"] is args[3] and options["beta"] is args[4] and options["initial_state"] is args[5]
    assert options["output_final_state"] == (fn is rec._gated_delta_state)
    assert runtime.recurrent_kernels() == {fn.__name__[1:]: LIBRARIES["gated_delta"]}
    if t == 7 and fn is rec._gated_delta_rule:
        _check(monkeypatch, calls, fn, args, "chunk_kda", grads=True)
        monkeypatch.setitem(sys.modules, "fla.ops.kda", None)
        monkeypatch.setattr(kern, "_KERNEL_LIBRARIES", {})
        del calls[:]
        fn(*args)
        assert calls == [] and runtime.recurrent_kernels() == {"gated_delta_rule": "torch"}
        _check(monkeypatch, calls, fn, _delta_args(t=t, dtype=F32), "chunk_gated_delta_rule")


def test_gated_delta_gradients_through_the_library(calls, monkeypatch):
    """Prompts and one token alike run chunk_gated_delta_rule when a gradient is wanted."""
    for t in (6, 1):
        args = _delta_args(t=t, dtype=F32)
        _check(monkeypatch, calls, rec._gated_delta_rule, args, "chunk_gated_delta_rule", grads=True)
        _check(monkeypatch, calls, rec._gated_delta_state, args, "chunk_gated_delta_rule", grads=True)


def test_gated_delta_falls_back_where_fla_does_not_reach(calls, monkeypatch):
    """float64, mixed dtypes, no tokens, keys over 256 wide; float32 prompts in fla before 0.4 (one
    token still runs it)."""
    rec._gated_delta_rule(*_delta_args())
    rec._gated_delta_rule(*_delta_args(t=2, kd=257, dtype=F32))
    args = _delta_args(dtype=F32)
    args[2] = args[2].half()
    rec._gated_delta_rule(*args)
    rec._gated_delta_state(*_delta_args(t=0, dtype=F32))
    monkeypatch.setattr(sys.modules["fla"], "__version__", "0.3.2")
    monkeypatch.setattr(kern, "_KERNEL_LIBRARIES", {})
    rec._gated_delta_rule(*_delta_args(t=7, dtype=F32))
    assert calls == [] and set(runtime.recurrent_kernels().values()) == {"torch"}
    _check(monkeypatch, calls, rec._gated_delta_rule, _delta_args(t=1, dtype=F32), "fused_recurrent_gated_delta_rule")


# ----------------------------------------------------------------------------- generated modules, compiled

@pytest.mark.parametrize("spec", ["mamba2", "qwen3_next", "kimi_linear"])
def test_a_generated_model_prefills_and_decodes_through_the_libraries(calls, monkeypatch, spec):
    """Eager: the logits and caches of a prompt and of a decode step after it equal the torch code's."""
    monkeypatch.setenv("SNF_COMPILE", "0")
    mod = fresh_module(REPO / "generated" / f"{spec}.py", f"library_kernels_{spec}")
    torch.manual_seed(0)
    model = mod.Model(dataclasses.replace(mod.Config(), **ROWS[spec].small)).eval()
    idx = torch.randint(0, 64, (2, 9))

    def run():
        with torch.no_grad():
            first = model(idx[:, :8], use_cache=True)
            caches = {k: v for k, v in first._asdict().items() if k.startswith("new_")}
            past = {k.replace("new_", "past_"): v for k, v in caches.items()}
            return [*first, *model(idx[:, 8:], **past, use_cache=True)]
    want = _torch(monkeypatch, run, ())
    for got, wanted in zip(run(), want):
        if isinstance(wanted, torch.Tensor):
            _same(got, wanted)
    ran = runtime.recurrent_kernels()
    assert ran["causal_conv1d"] == LIBRARIES["causal_conv1d"] and ran["causal_conv1d_state"] == "torch"
    names = {c[0] for c in calls}
    assert "causal_conv1d_fn" in names and "causal_conv1d_update" in names
    if spec == "mamba2":
        assert {"mamba_chunk_scan_combined", "selective_state_update"} <= names
        # the decode step's state is the one its output's call updated: one call a layer, not two
        assert sum(c[0] == "selective_state_update" for c in calls) == model.config.n_layer
    elif spec == "qwen3_next":
        assert {"chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"} <= names
    else:  # a decay per key channel
        assert {"chunk_kda", "fused_recurrent_kda"} <= names and not any("gated_delta" in n for n in names)


def test_the_opaque_ops_run_the_library_without_its_autograd(calls, monkeypatch):
    """torch.ops.snf.* (what compiled graphs call) run the library under no_grad, even the one-token
    kernels that have no backward; their gradient is the torch code's."""
    monkeypatch.setattr(rec, "_RECURRENT_OPAQUE", True)
    _check(monkeypatch, calls, rec._ssd_scan, _ssd_args(t=1, dtype=F32), "selective_state_update", grads=True)
    _check(monkeypatch, calls, rec._gated_delta_state, _delta_args(t=1, dtype=F32), "fused_recurrent_gated_delta_rule",
           grads=True)
    _check(monkeypatch, calls, rec._ssd_state, _ssd_args(t=6, dtype=F32), "mamba_chunk_scan_combined", grads=True)


@pytest.mark.slow
def test_compiled_the_library_runs_inside_the_opaque_ops(calls, monkeypatch):
    """torch.compile(fullgraph=True): the scan and the delta rule call the libraries from inside
    torch.ops.snf.* (no graph break), the convolution is torch's; values and gradients (the ops' torch
    backward) equal eager torch code's."""
    conv, ssd, delta = _conv_args(t=6, c=8, dtype=F32), _ssd_args(t=6, dtype=F32), _delta_args(t=6, dtype=F32)

    def f(*tensors):
        c, s, d = tensors[:4], tensors[4:15], tensors[15:]
        return (rec._causal_conv1d(*c).sum() + rec._ssd_scan(*s).sum() + rec._ssd_state(*s).sum()
                + (rec._gated_delta_rule(*d) ** 2).sum() + rec._gated_delta_state(*d).sum())
    args = [*conv, *ssd, *delta]
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)
    want = _torch(monkeypatch, lambda *a: _grads(lambda *b: f(*b)[None], a), args)
    for got, wanted in zip(_grads(lambda *a: compiled(*a)[None], args), want):
        _same(got, wanted)
    assert {c[0] for c in calls} == {"mamba_chunk_scan_combined", "chunk_gated_delta_rule"}
    assert runtime.recurrent_kernels() == {
        "causal_conv1d": "torch", "ssd_scan": LIBRARIES["ssd"], "ssd_state": LIBRARIES["ssd"],
        "gated_delta_rule": LIBRARIES["gated_delta"], "gated_delta_state": LIBRARIES["gated_delta"]}
