"""The recurrent ops' library kernels: where one is installed and covers the call, recurrent.py runs
it instead of its own torch code. causal-conv1d (`causal_conv1d_fn`, `causal_conv1d_update`) for
`causal_conv1d`, mamba_ssm (`mamba_chunk_scan_combined`, `selective_state_update`) for `ssd_scan`
and `ssd_state`, flash-linear-attention (`chunk_gated_delta_rule`, `fused_recurrent_gated_delta_rule`)
for `gated_delta_rule` and `gated_delta_state`, and its `chunk_kda`, `fused_recurrent_kda` for those with
a decay per key channel (Kimi Delta Attention).

A library is imported at the first call whose tensors are on CUDA, once (a failed import is cached
too), never as a module is imported and never on the CPU. The torch code runs instead where the
tensors are elsewhere, the library is missing, SNF_RECURRENT_KERNELS=torch is set, or the call
asks for something the kernel does not do (each `_kernel_*` lists what). `recurrent_kernels()` says
which ran, per op. The libraries compute in float32 as the torch code does, but their Triton
kernels' matrix products use TF32 for float32 inputs (Triton's default): in float32 the results
agree to that precision.

The calling conventions, as read in the libraries' sources (causal_conv1d/causal_conv1d_interface.py
and csrc/causal_conv1d.cpp of Dao-AILab/causal-conv1d 1.6.1, commit 0d2252d;
mamba_ssm/ops/triton/ssd_combined.py, ssd_chunk_state.py and selective_state_update.py of
state-spaces/mamba 2.3.2.post1, commit e9594ce; fla/ops/gated_delta_rule/chunk.py and
fused_recurrent.py of fla-org/flash-linear-attention 0.5.2, commit bc3b101; fla/ops/kda/fused_recurrent.py
of its commit 04a0bc0) and in how
transformers 5.23 calls them (models/mamba2, qwen3_next), are noted where they are used.
"""

from __future__ import annotations

import math
import os
from typing import Optional

import torch

# op -> what its last call ran: "torch", or the library with its version
_KERNELS_RAN: dict = {}
# library -> its functions by name and "version", or None where it did not import; each tried once
_KERNEL_LIBRARIES: dict = {}
# library -> (the name the report gives, {function: the module it is imported from})
_KERNEL_SOURCES = {
    "causal_conv1d": ("causal-conv1d", {"causal_conv1d_fn": "causal_conv1d", "causal_conv1d_update": "causal_conv1d"}),
    "mamba_ssm": ("mamba_ssm", {"mamba_chunk_scan_combined": "mamba_ssm.ops.triton.ssd_combined",
                                "selective_state_update": "mamba_ssm.ops.triton.selective_state_update"}),
    "fla": ("flash-linear-attention", {"chunk_gated_delta_rule": "fla.ops.gated_delta_rule",
                                       "fused_recurrent_gated_delta_rule": "fla.ops.gated_delta_rule"}),
    # the decay per key channel (Kimi Delta Attention): a library apart, since releases before 0.4 lack it
    "fla_kda": ("flash-linear-attention", {"chunk_kda": "fla.ops.kda", "fused_recurrent_kda": "fla.ops.kda"}),
}
# what the kernels take (all three refuse float64)
_KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def recurrent_kernels() -> dict:
    """Which implementation the last call of each recurrent op ran, by op name ("causal_conv1d",
    "ssd_scan", ...): "torch" (snf's own code) or the library's name and version, such as
    "causal-conv1d 1.6.1", "mamba_ssm 2.3.2" or "flash-linear-attention 0.5.2"."""
    return dict(_KERNELS_RAN)


def _kernel_device(t: torch.Tensor) -> bool:
    """Whether `t` is where the libraries' kernels run."""
    return t.is_cuda


def _kernel_library(name: str, t: torch.Tensor) -> Optional[dict]:
    """Library `name`'s functions (and its "version") for tensors like `t`, or None: not on CUDA,
    SNF_RECURRENT_KERNELS=torch, or the library does not import."""
    if not _kernel_device(t) or os.environ.get("SNF_RECURRENT_KERNELS", "").lower() == "torch":
        return None
    if name not in _KERNEL_LIBRARIES:
        import importlib
        label, functions = _KERNEL_SOURCES[name]
        try:
            found = {f: getattr(importlib.import_module(m), f) for f, m in functions.items()}
            package = importlib.import_module(next(iter(functions.values())).split(".")[0])
            found["version"] = f"{label} {getattr(package, '__version__', '?')}"
            found["release"] = tuple(int(part) for part in found["version"].split()[-1].split(".")[:2]
                                     if part.isdigit())
        except Exception:  # missing, or installed but broken (triton, CUDA): the torch code serves
            found = None
        _KERNEL_LIBRARIES[name] = found
    return _KERNEL_LIBRARIES[name]


def _kernel_ran(op: str, lib: dict, result):
    _KERNELS_RAN[op] = lib["version"]
    return result


def _kernel_no_grad(*tensors) -> bool:
    """Whether autograd has nothing to record for `tensors` (the one-token kernels have no backward)."""
    return not torch.is_grad_enabled() or not any(t is not None and t.requires_grad for t in tensors)


def _kernel_causal_conv1d(x, weight, bias, state) -> Optional[torch.Tensor]:
    """causal-conv1d on [B, C, T] views of x [B, T, C], its weight [C, K] and initial state
    [B, C, K-1]: causal_conv1d_update for one token after a state without gradient (it updates
    the state in place: a copy), else causal_conv1d_fn (differentiable, state included), whose
    initial state needs x channel-last (stride 1 along C), C % 8 == 0 and 8-aligned strides.
    Not covered: T == 0, K outside 2..4, float64, a bias not in the weight's dtype, a state not in
    x's (the C++ checks), a state before several tokens with C % 8 != 0."""
    lib = _kernel_library("causal_conv1d", x)
    t, c, k = x.shape[1], x.shape[2], weight.shape[-1]
    if (lib is None or t == 0 or not 2 <= k <= 4 or x.dtype not in _KERNEL_DTYPES or weight.dtype not in _KERNEL_DTYPES
            or (bias is not None and bias.dtype != weight.dtype) or (state is not None and state.dtype != x.dtype)):
        return None
    w = weight[:, 0]
    if state is not None and t == 1 and _kernel_no_grad(x, weight, bias, state):
        y = lib["causal_conv1d_update"](x.transpose(1, 2), state.transpose(1, 2).clone(), w, bias)
    elif state is not None and c % 8:
        return None
    else:
        xt = x.contiguous().transpose(1, 2)  # channel-last, as the initial state needs
        xt = xt if c % 8 == 0 else xt.contiguous()  # (channel-last needs C % 8 == 0: here no state)
        y = lib["causal_conv1d_fn"](xt, w, bias, initial_states=None if state is None
                                    else state.contiguous().transpose(1, 2))
    return _kernel_ran("causal_conv1d", lib, y.transpose(1, 2))


# The state the last output call's library gave with its output unasked (selective_state_update, a
# decode step's), kept for the state call with the same arguments that follows it: (the arguments,
# their tensors' versions, the state, the library); empty when none is kept
_KEPT_STATE: list = []


def _kernel_call(op: str, args: tuple):
    """The library's result for torch.ops.snf.`op` (ssd_scan, ssd_state, gated_delta_rule or
    gated_delta_state) on recurrent.py's positional `args`, contiguous, in the torch code's dtype;
    None where no library covers the call."""
    x, state = (args[0], args[10]) if op.startswith("ssd") else (args[0], args[5])
    versions = tuple(a._version if isinstance(a, torch.Tensor) else None for a in args)
    kept, _KEPT_STATE[:] = list(_KEPT_STATE), []
    if op.endswith("_state") and kept and len(kept[0]) == len(args) and versions == kept[1] and \
            all(a is b if isinstance(a, torch.Tensor) else a == b for a, b in zip(kept[0], args)):
        out, lib = kept[2], kept[3]
    else:
        found = (_kernel_ssd if op.startswith("ssd") else _kernel_gated_delta)(*args, want_state=op.endswith("_state"))
        if found is None:
            return None
        y, final, lib = found
        out = final if op.endswith("_state") else y
        if final is not None and not op.endswith("_state"):
            _KEPT_STATE[:] = [args, versions, final, lib]
    dtype = x.dtype if op in ("ssd_scan", "gated_delta_rule") or state is None else state.dtype
    return _kernel_ran(op, lib, out.to(dtype).contiguous())


def _kernel_ssd(x, dt, A, B, C, D, dt_bias, dt_softplus, dt_min, dt_max, state, want_state):
    """mamba_ssm, as (y, the final state (None unless `want_state`, but for the one-token kernel's,
    which comes anyway), the library) or None. Its layouts are ours: x
    [B, T, H, P], dt [B, T, H], A, D, dt_bias [H], B, C [B, T, G, N], initial_states [B, H, P, N].
    One token without gradient: selective_state_update(state, x, dt, A, B, C, D=, dt_bias=,
    dt_softplus=) on per-channel views ([B, H, P] dt, [H, P, N] A, [H, P] D and dt_bias, all
    stride 0 along P as transformers passes them; dt_bias required), which updates the state in
    place (a float32 copy here) and clips nothing. Else mamba_chunk_scan_combined(x, dt, A, B, C,
    chunk_size, D=, dt_bias=, initial_states=, dt_softplus=, dt_limit=, return_final_states=)
    (differentiable), whose kernel always clamps dt to dt_limit (default (0, inf)): a missing
    bound is passed as infinite. Not covered: T == 0, float64."""
    lib = _kernel_library("mamba_ssm", x)
    if lib is None or x.shape[1] == 0 or any(t is not None and t.dtype not in _KERNEL_DTYPES
                                                                for t in (x, dt, A, B, C, D, dt_bias, state)):
        return None
    b, _, h, p = x.shape
    n = B.shape[3]
    unclipped = dt_max is None and (dt_min is None or (dt_softplus and dt_min <= 0))  # softplus is >= 0
    if x.shape[1] == 1 and unclipped and _kernel_no_grad(x, dt, A, B, C, D, dt_bias, state):
        s = x.new_zeros(b, h, p, n, dtype=torch.float32) if state is None else state.to(torch.float32, copy=True)
        bias = torch.zeros_like(A) if dt_bias is None else dt_bias
        y = lib["selective_state_update"](s, x[:, 0], dt[:, 0, :, None].expand(b, h, p),
                                          A[:, None, None].expand(h, p, n), B[:, 0], C[:, 0],
                                          D=None if D is None else D[:, None].expand(h, p),
                                          dt_bias=bias[:, None].expand(h, p), dt_softplus=dt_softplus)
        return y[:, None], s, lib
    limit = (-math.inf if dt_min is None else dt_min, math.inf if dt_max is None else dt_max)
    # 256: Mamba2's chunk size (how the kernel splits the sequence, not what it computes)
    out = lib["mamba_chunk_scan_combined"](x, dt, A, B, C, 256, D=D, dt_bias=dt_bias, initial_states=state,
                                           dt_softplus=dt_softplus, dt_limit=limit, return_final_states=want_state)
    return (out[0], out[1], lib) if want_state else (out, None, lib)


def _kernel_gated_delta(q, k, v, g, beta, state, scale, l2norm, want_state):
    """flash-linear-attention, as (o, the final state or None unless `want_state`, the library) or None: q, k [B, T, H, K],
    v [B, T, H, V], g, beta [B, T, H] (ours), initial_state [B, H, K, V]; both functions return
    (o, final_state or None), the state in float32. q and k are repeated to the value heads (grouped
    value heads are only in recent versions). One token without gradient:
    fused_recurrent_gated_delta_rule(q, k, v, g=, beta=, scale=, initial_state=, output_final_state=,
    use_qk_l2norm_in_kernel=) (keywords: gk and gv sit between g and beta), which has no backward;
    else chunk_gated_delta_rule(q, k, v, g, beta, same keywords), differentiable. A decay per key
    channel (g [B, T, H, K]): fused_recurrent_kda and chunk_kda (fla.ops.kda), the same arguments and
    keywords. Not covered: T == 0, float64, q, k, v of different dtypes, K > 256 (its state kernels
    assert K <= 256), float32 in chunk_gated_delta_rule before 0.4 (it refused)."""
    lib = _kernel_library("fla" if g.dim() == 3 else "fla_kda", q)
    if (lib is None or q.shape[1] == 0 or q.shape[3] > 256 or not q.dtype == k.dtype == v.dtype
            or any(t is not None and t.dtype not in _KERNEL_DTYPES for t in (q, g, beta, state))):
        return None
    step = q.shape[1] == 1 and _kernel_no_grad(q, k, v, g, beta, state)
    if not step and q.dtype == torch.float32 and lib["release"] < (0, 4):
        return None
    if v.shape[2] != k.shape[2]:
        q, k = (u.repeat_interleave(v.shape[2] // k.shape[2], dim=2) for u in (q, k))
    options = dict(scale=k.shape[-1] ** -0.5 if scale is None else scale, initial_state=state,
                   output_final_state=want_state, use_qk_l2norm_in_kernel=l2norm)
    if g.dim() == 4:  # the decay per key channel: g [B, T, H, K], the same keywords
        o, final = lib["fused_recurrent_kda" if step else "chunk_kda"](q, k, v, g=g, beta=beta, **options)
    elif step:
        o, final = lib["fused_recurrent_gated_delta_rule"](q, k, v, g=g, beta=beta, **options)
    else:
        o, final = lib["chunk_gated_delta_rule"](q, k, v, g, beta, **options)
    return o, final, lib
