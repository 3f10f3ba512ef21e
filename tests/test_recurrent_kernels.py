"""The recurrent kernels of snf/runtime/recurrent.py (Mamba2's selective scan, gated DeltaNet's delta
rule, the causal convolution): their chunked and one-token forms against the token-by-token NumPy
references of snf/ops/recurrent_np.py in float64, prefill-then-decode against one pass, gradients
(gradcheck), transformers' own implementations in float32, and torch.compile(fullgraph=True)."""

from __future__ import annotations

import ast
import builtins
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from snf.ops import recurrent_np as ref
from snf.runtime import kernels as kern
from snf.runtime import recurrent as rec

CHUNK = 5  # the chunk size in these tests, so that the lengths below stay small
LENGTHS = (0, 1, 3, CHUNK - 1, CHUNK, 2 * CHUNK + 3)
F64 = torch.float64


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(rec, "_SSD_CHUNK", CHUNK)
    monkeypatch.setattr(rec, "_GDR_CHUNK", CHUNK)
    monkeypatch.setattr(rec, "_KDA_CHUNK", CHUNK)


def _np(args):
    return [a.detach().numpy() if isinstance(a, torch.Tensor) else a for a in args]


def _close(got, want, tol=1e-10):
    want = torch.as_tensor(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    torch.testing.assert_close(got.to(want.dtype), want, rtol=tol, atol=tol)


# ----------------------------------------------------------------------------- inputs

def _conv_args(b=2, t=7, c=6, k=4, bias=True, state=True, dtype=F64):
    return [torch.randn(b, t, c, dtype=dtype), torch.randn(c, 1, k, dtype=dtype),
            torch.randn(c, dtype=dtype) if bias else None, torch.randn(b, k - 1, c, dtype=dtype) if state else None]


def _ssd_args(bt=2, t=7, h=4, p=3, g=2, n=5, D=True, dt_bias=True, state=True, dt_softplus=True, dt_min=0.0,
              dt_max=None, dtype=F64):
    """Positional arguments of _ssd_scan: x, dt, A, B, C, D, dt_bias, dt_softplus, dt_min, dt_max, state."""
    return [torch.randn(bt, t, h, p, dtype=dtype), torch.randn(bt, t, h, dtype=dtype) - 1,
            -torch.exp(torch.randn(h, dtype=dtype)), torch.randn(bt, t, g, n, dtype=dtype),
            torch.randn(bt, t, g, n, dtype=dtype), torch.randn(h, dtype=dtype) if D else None,
            torch.randn(h, dtype=dtype) if dt_bias else None, dt_softplus, dt_min, dt_max,
            torch.randn(bt, h, p, n, dtype=dtype) if state else None]


def _delta_args(bt=2, t=7, hk=2, hv=4, kd=3, vd=5, state=True, scale=None, l2norm=True, dtype=F64, kda=False):
    """Positional arguments of _gated_delta_rule: q, k, v, g, beta, state, scale, l2norm; `kda`: g
    [Bt, T, Hv, Kd], a decay per key channel (Kimi Delta Attention), some channels decaying steeply."""
    g = (-torch.rand(bt, t, hv, kd, dtype=dtype) * torch.tensor([0.1, 3.0, 1.0] * kd, dtype=dtype)[:kd]
         if kda else -torch.rand(bt, t, hv, dtype=dtype))
    return [torch.randn(bt, t, hk, kd, dtype=dtype), torch.randn(bt, t, hk, kd, dtype=dtype),
            torch.randn(bt, t, hv, vd, dtype=dtype), g,
            torch.rand(bt, t, hv, dtype=dtype), torch.randn(bt, hv, kd, vd, dtype=dtype) if state else None,
            scale, l2norm]


_SSD_CASES = {
    "plain": dict(D=False, dt_bias=False, state=False, g=1),
    "D+dt_bias+state+groups": dict(),
    "heads=groups": dict(g=4),
    "clipped-no-softplus": dict(dt_softplus=False, dt_min=0.05, dt_max=0.7),
}
_DELTA_CASES = {
    "Hv=Hk,no-state": dict(hk=4, state=False),
    "Hv=2Hk+state": dict(),
    "no-l2norm+scale": dict(l2norm=False, scale=0.3),
    "per-key-channel,Hv=Hk,no-state": dict(hk=4, state=False, kda=True),
    "per-key-channel,Hv=2Hk+state": dict(kda=True),
    "per-key-channel,no-l2norm+scale": dict(l2norm=False, scale=0.3, kda=True),
}


def _slice(args, start, stop, time_args):
    """args with the tensors at `time_args` cut to tokens [start, stop)."""
    return [a[:, start:stop] if i in time_args else a for i, a in enumerate(args)]


_SSD_TIME, _DELTA_TIME = (0, 1, 3, 4), (0, 1, 2, 3, 4)


# ----------------------------------------------------------------------------- against the references

@pytest.mark.parametrize("t", LENGTHS)
@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("bias,state", [(True, True), (False, False)])
def test_causal_conv1d_and_state_match_reference(t, k, bias, state):
    args = _conv_args(t=t, k=k, bias=bias, state=state)
    _close(rec._causal_conv1d(*args), ref.np_causal_conv1d(*_np(args)))
    _close(rec._causal_conv1d_state(*args), ref.np_causal_conv1d_state(*_np(args)))


@pytest.mark.parametrize("t", LENGTHS)
@pytest.mark.parametrize("case", _SSD_CASES)
def test_ssd_scan_and_state_chunked_and_one_token_match_reference(small_chunks, t, case):
    """Every length around the chunk (T == 1 runs the one-token update; T == 0 returns the state)."""
    args = _ssd_args(t=t, **_SSD_CASES[case])
    _close(rec._ssd_scan(*args), ref.np_ssd_scan(*_np(args)))
    _close(rec._ssd_state(*args), ref.np_ssd_state(*_np(args)))


@pytest.mark.parametrize("t", LENGTHS)
@pytest.mark.parametrize("case", _DELTA_CASES)
def test_gated_delta_rule_and_state_chunked_and_one_token_match_reference(small_chunks, t, case):
    args = _delta_args(t=t, **_DELTA_CASES[case])
    _close(rec._gated_delta_rule(*args), ref.np_gated_delta_rule(*_np(args)))
    _close(rec._gated_delta_state(*args), ref.np_gated_delta_state(*_np(args)))


def test_default_chunk_sizes_match_reference_over_several_chunks():
    """The module's own chunk sizes (not the tests' small one), over more than two chunks with padding."""
    t = 2 * max(rec._SSD_CHUNK, rec._GDR_CHUNK, rec._KDA_CHUNK) + 7
    args = _ssd_args(t=t, h=2, p=2, g=1, n=3)
    _close(rec._ssd_scan(*args), ref.np_ssd_scan(*_np(args)))
    _close(rec._ssd_state(*args), ref.np_ssd_state(*_np(args)))
    for kda in (False, True):
        args = _delta_args(t=t, hk=1, hv=2, kd=3, vd=2, kda=kda)
        _close(rec._gated_delta_rule(*args), ref.np_gated_delta_rule(*_np(args)))
        _close(rec._gated_delta_state(*args), ref.np_gated_delta_state(*_np(args)))


def test_references_reduce_to_hand_computed_values():
    """The references themselves on cases small enough to work out by hand."""
    # conv: K=2, weights (w0, w1) on (previous, current)
    y = ref.np_causal_conv1d(np.array([[[1.0], [2.0]]]), np.array([[[10.0, 1.0]]]), np.array([0.5]),
                             np.array([[[3.0]]]))
    np.testing.assert_allclose(y[0, :, 0], [0.5 + 30 + 1, 0.5 + 10 + 2])
    # ssd, one head, P = N = 1, no softplus: h = exp(dt A) h + dt x B, y = h C + D x
    x, dt, A, B, C = (np.full(s, v) for s, v in (((1, 2, 1, 1), 2.0), ((1, 2, 1), 0.5), ((1,), -1.0),
                                                  ((1, 2, 1, 1), 3.0), ((1, 2, 1, 1), 4.0)))
    h1 = 0.5 * 2 * 3
    h2 = math.exp(-0.5) * h1 + 0.5 * 2 * 3
    y = ref.np_ssd_scan(x, dt, A, B, C, D=np.array([1.0]), dt_softplus=False)
    np.testing.assert_allclose(y[0, :, 0, 0], [h1 * 4 + 2, h2 * 4 + 2])
    # delta rule, K = V = 1, no l2norm, scale 1: S = S e^g; S += k (v - k S) beta; o = q S
    s = 2.0 * math.exp(-0.1)
    s += 0.5 * (3.0 - 0.5 * s) * 0.25
    one = np.ones((1, 1, 1, 1))
    o = ref.np_gated_delta_rule(2 * one, 0.5 * one, 3 * one, np.full((1, 1, 1), -0.1), np.full((1, 1, 1), 0.25),
                                state=2 * one, scale=1.0, l2norm=False)
    np.testing.assert_allclose(o.ravel(), [2 * s])


# ----------------------------------------------------------------------------- prefill, then decode

@pytest.mark.parametrize("prefill", [0, 3, 2 * CHUNK + 1])
def test_prefill_then_one_token_steps_equals_one_pass(small_chunks, prefill):
    """The state entry points carry a prompt's state into token-by-token decode: the outputs and the
    final state are those of one pass over the whole sequence, for all three ops."""
    t = prefill + 4

    def run(scan, state_of, args, time_args, state_at):
        whole, final = scan(*args), state_of(*args)
        cut = _slice(args, 0, prefill, time_args)
        ys, state = [scan(*cut)], state_of(*cut)
        for i in range(prefill, t):
            step = _slice(args, i, i + 1, time_args)
            step[state_at] = state
            ys.append(scan(*step))
            state = state_of(*step)
        _close(torch.cat(ys, dim=1), whole)
        _close(state, final)

    run(rec._causal_conv1d, rec._causal_conv1d_state, _conv_args(t=t), (0,), 3)
    run(rec._ssd_scan, rec._ssd_state, _ssd_args(t=t), _SSD_TIME, 10)
    run(rec._gated_delta_rule, rec._gated_delta_state, _delta_args(t=t), _DELTA_TIME, 5)
    run(rec._gated_delta_rule, rec._gated_delta_state, _delta_args(t=t, kda=True), _DELTA_TIME, 5)


# ----------------------------------------------------------------------------- gradients

def _gradcheck(fns, args):
    """gradcheck of every fn in `fns` (all with `args`) w.r.t. every float tensor of args."""
    wrt = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]

    def run(*leaves):
        full = list(args)
        for i, leaf in zip(wrt, leaves):
            full[i] = leaf
        return tuple(fn(*full) for fn in fns)

    leaves = [args[i].detach().clone().requires_grad_() for i in wrt]
    assert torch.autograd.gradcheck(run, leaves, eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("t", [5, 1], ids=["chunked", "one-token"])
def test_gradients_wrt_every_input_including_state(monkeypatch, t):
    """Through the chunked forms (3 chunks of 2, the last padded) and the one-token update."""
    monkeypatch.setattr(rec, "_SSD_CHUNK", 2)
    monkeypatch.setattr(rec, "_GDR_CHUNK", 2)
    monkeypatch.setattr(rec, "_KDA_CHUNK", 2)
    _gradcheck((rec._causal_conv1d, rec._causal_conv1d_state), _conv_args(b=1, t=t, c=2, k=3))
    _gradcheck((rec._ssd_scan, rec._ssd_state), _ssd_args(bt=1, t=t, h=2, p=2, g=1, n=2))
    _gradcheck((rec._gated_delta_rule, rec._gated_delta_state), _delta_args(bt=1, t=t, hk=1, hv=2, kd=2, vd=2))
    _gradcheck((rec._gated_delta_rule, rec._gated_delta_state),
               _delta_args(bt=1, t=t, hk=1, hv=2, kd=2, vd=2, kda=True))


# ----------------------------------------------------------------------------- dtypes

def test_half_inputs_compute_in_float32_and_keep_their_dtypes():
    """bfloat16 inputs give bfloat16 outputs, computed in float32 (as close to the float64 reference as
    bfloat16 rounding of the result allows); a float32 state stays float32."""
    args = _ssd_args(t=9, dtype=torch.bfloat16)
    args[10] = args[10].float()
    y, s = rec._ssd_scan(*args), rec._ssd_state(*args)
    assert (y.dtype, s.dtype) == (torch.bfloat16, torch.float32)
    want = torch.as_tensor(ref.np_ssd_scan(*_np([a.double() if isinstance(a, torch.Tensor) else a for a in args])))
    assert (y.double() - want).abs().max() <= 1e-2 * want.abs().max()
    _close(s, ref.np_ssd_state(*_np([a.double() if isinstance(a, torch.Tensor) else a for a in args])), 1e-5)

    for kda in (False, True):
        args = _delta_args(t=9, dtype=torch.bfloat16, kda=kda)
        o, s = rec._gated_delta_rule(*args), rec._gated_delta_state(*args)
        assert (o.dtype, s.dtype) == (torch.bfloat16, torch.bfloat16)
    args = _conv_args(t=3, dtype=torch.bfloat16)
    args[1] = args[1].float()  # a float32 weight: computed in float32, returned in x's dtype
    assert rec._causal_conv1d(*args).dtype == torch.bfloat16


# ----------------------------------------------------------------------------- against transformers

def _transformers(module):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip(f"transformers.models.{module}")


def _same(got, want):
    # float32: 1e-5 relative to the largest value (elementwise relative error is unbounded where a sum
    # of many terms cancels to near 0; measured here, the largest difference is ~1e-6 of the largest)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


def test_ssd_matches_transformers_mamba2_chunk_scan_and_state_update():
    """mamba2_chunk_scan (chunks of 16, ours of the module's size) and mamba2_selective_state_update (its
    decode step, which takes per-channel expanded dt, A, D, dt_bias), in float32."""
    m = _transformers("mamba2.modeling_mamba2")
    x, dt, A, B, C, D, dt_bias, _, _, _, state = args = _ssd_args(t=37, h=4, p=8, g=2, n=16, dtype=torch.float32)
    y, final = m.mamba2_chunk_scan(x, dt, A, B, C, 16, D=D, dt_bias=dt_bias, initial_states=state,
                                   dt_softplus=True, return_final_states=True)
    _same(rec._ssd_scan(*args), y)
    _same(rec._ssd_state(*args), final)

    p, n = x.shape[3], B.shape[3]
    theirs = state.clone()  # updated in place
    y1 = m.mamba2_selective_state_update(theirs, x[:, 0], dt[:, 0, :, None].expand(-1, -1, p),
                                         A[:, None, None].expand(-1, p, n), B[:, 0], C[:, 0],
                                         D[:, None].expand(-1, p), dt_bias=dt_bias[:, None].expand(-1, p),
                                         dt_softplus=True)
    step = _slice(args, 0, 1, _SSD_TIME)
    _same(rec._ssd_scan(*step)[:, 0], y1)
    _same(rec._ssd_state(*step), theirs)


@pytest.mark.parametrize("family", ["qwen3_next", "kimi_linear"])
def test_gated_delta_rule_matches_transformers_chunk_and_recurrent(family):
    """Qwen3-Next's torch_chunk_gated_delta_rule and torch_recurrent_gated_delta_rule (Hv = 2 Hk), Kimi
    Linear's chunk_kimi_delta_attention and recurrent_kimi_delta_attention (a decay per key channel,
    the heads of q, k and v equal): chunks of 16, the decode step and the recurrence over a prompt,
    with the L2 norm in the kernel, in float32."""
    m = _transformers(f"{family}.modeling_{family}")
    kda = family == "kimi_linear"
    chunk, recurrent = ((m.chunk_kimi_delta_attention, m.recurrent_kimi_delta_attention) if kda
                        else (m.torch_chunk_gated_delta_rule, m.torch_recurrent_gated_delta_rule))
    q, k, v, g, beta, state, _, _ = args = _delta_args(t=37, hk=4 if kda else 2, hv=4, kd=16, vd=8,
                                                       dtype=torch.float32, kda=kda)
    o, final = chunk(q, k, v, g, beta, chunk_size=16, initial_state=state, output_final_state=True,
                     use_qk_l2norm_in_kernel=True)
    _same(rec._gated_delta_rule(*args), o)
    _same(rec._gated_delta_state(*args), final)
    o, final = recurrent(q, k, v, g, beta, initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True)
    _same(rec._gated_delta_rule(*args), o)
    step = _slice(args, 0, 1, _DELTA_TIME)
    o, final = recurrent(*step[:5], initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True)
    _same(rec._gated_delta_rule(*step), o)
    _same(rec._gated_delta_state(*step), final)


def test_causal_conv1d_matches_transformers_conv_fn_and_update():
    """causal_conv1d_fn (a prompt, zeros before it) and causal_conv1d_update (one token after a state;
    both take [B, C, T] and a [C, K] weight), in float32."""
    m = _transformers("mamba2.modeling_mamba2")
    x, weight, bias, state = _conv_args(t=9, dtype=torch.float32)
    theirs = m.causal_conv1d_fn(x.transpose(1, 2), weight[:, 0], bias)
    _same(rec._causal_conv1d(x, weight, bias, None), theirs.transpose(1, 2))
    theirs = state.transpose(1, 2).contiguous()  # updated in place
    y1 = m.causal_conv1d_update(x[:, :1].transpose(1, 2), theirs, weight[:, 0], bias)
    _same(rec._causal_conv1d(x[:, :1], weight, bias, state), y1.transpose(1, 2))
    _same(rec._causal_conv1d_state(x[:, :1], weight, bias, state), theirs.transpose(1, 2))


# ----------------------------------------------------------------------------- the file itself

@pytest.mark.parametrize("module", [rec, kern], ids=["recurrent", "kernels"])
def test_runtime_files_import_only_what_a_generated_module_has(module):
    """recurrent.py and kernels.py are copied, definition by definition, into standalone modules: their
    imports are those a generated module has (recurrent.py's from kernels.py too), and each definition
    reads only those, builtins, its own imports and the two files' definitions."""
    def tree(m):
        return ast.parse(Path(m.__file__).read_text(encoding="utf-8"))
    top = {n.name for m in (rec, kern) for n in tree(m).body if isinstance(n, ast.FunctionDef)}
    top |= {t.id for m in (rec, kern) for n in tree(m).body if isinstance(n, ast.Assign) for t in n.targets}
    top |= {n.target.id for m in (rec, kern) for n in tree(m).body if isinstance(n, ast.AnnAssign)}
    imported = set()
    for node in tree(module).body:
        if isinstance(node, ast.Import):
            imported |= {(a.name, a.asname) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            imported |= {(f"{node.module}.{a.name}", a.asname) for a in node.names}
    allowed_imports = {("math", None), ("os", None), ("typing.Optional", None), ("torch", None),
                       ("torch.nn.functional", "F")} | {(f"kernels.{n}", None) for n in top}
    assert imported <= allowed_imports, imported - allowed_imports
    allowed = top | {"math", "os", "Optional", "torch", "F"} | set(dir(builtins))
    for node in tree(module).body:
        if isinstance(node, ast.FunctionDef):
            local = {a.arg for a in ast.walk(node) if isinstance(a, ast.arg)}
            local |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            local |= {n.name for n in ast.walk(node) if isinstance(n, ast.FunctionDef)}
            local |= {a.asname or a.name.split(".")[0] for n in ast.walk(node)
                      if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
            read = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            assert read <= allowed | local, (node.name, read - allowed - local)


# ----------------------------------------------------------------------------- torch.compile

@pytest.mark.slow
@pytest.mark.parametrize("op", ["conv", "ssd", "delta", "kda"])
def test_entry_points_compile_fullgraph(monkeypatch, op):
    """Each entry point under torch.compile(fullgraph=True), chunked (2 chunks, padded) with a state,
    equal to eager; "kda" is the delta rule with a decay per key channel (Kimi Linear's chunked form,
    which no bundled spec's compiled session needs to cover: a compiled model calls it as an opaque op)."""
    monkeypatch.setattr(rec, "_SSD_CHUNK", 4)
    monkeypatch.setattr(rec, "_GDR_CHUNK", 4)
    monkeypatch.setattr(rec, "_KDA_CHUNK", 4)
    fns, args = {
        "conv": ((rec._causal_conv1d, rec._causal_conv1d_state), _conv_args(b=1, t=6, c=3, k=3, dtype=torch.float32)),
        "ssd": ((rec._ssd_scan, rec._ssd_state), _ssd_args(bt=1, t=6, h=2, p=2, g=1, n=2, dtype=torch.float32)),
        "delta": ((rec._gated_delta_rule, rec._gated_delta_state),
                  _delta_args(bt=1, t=6, hk=1, hv=2, kd=2, vd=2, dtype=torch.float32)),
        "kda": ((rec._gated_delta_rule, rec._gated_delta_state),
                _delta_args(bt=1, t=6, hk=1, hv=2, kd=2, vd=2, dtype=torch.float32, kda=True)),
    }[op]
    torch._dynamo.reset()
    for fn in fns:
        torch.testing.assert_close(torch.compile(fn, fullgraph=True)(*args), fn(*args), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name, args", [
    ("ssd_scan", lambda: _ssd_args(bt=1, t=6, h=2, p=2, g=1, n=2)),
    ("ssd_state", lambda: _ssd_args(bt=1, t=6, h=2, p=2, g=2, n=2, D=False, state=False)),
    ("gated_delta_rule", lambda: _delta_args(bt=1, t=6, hk=1, hv=2, kd=2, vd=2)),
    ("gated_delta_state", lambda: _delta_args(bt=1, t=6, hk=1, hv=2, kd=2, vd=2, state=False, scale=0.5)),
    ("gated_delta_rule", lambda: _delta_args(bt=1, t=6, hk=1, hv=2, kd=2, vd=2, kda=True)),
])
def test_the_opaque_ops_torch_compile_sees_have_the_kernels_gradients(small_chunks, name, args):
    """What a compiled graph runs (torch.ops.snf.<name>, its backward by torch.func.vjp of the chunked
    form): the eager kernel's values, and gradients that gradcheck accepts, absent optionals included."""
    args = args()
    op = rec._RECURRENT_OPS[name]
    eager = {"ssd_scan": rec._ssd_y, "ssd_state": rec._ssd_final, "gated_delta_rule": rec._gated_delta_o,
             "gated_delta_state": rec._gated_delta_final}[name]
    torch.testing.assert_close(op(*args), eager(*args), rtol=0, atol=0)
    at = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]

    def call(*tensors):
        full = list(args)
        for i, t in zip(at, tensors):
            full[i] = t
        return op(*full)
    inputs = [args[i].clone().requires_grad_() for i in at]
    assert torch.autograd.gradcheck(call, inputs)
