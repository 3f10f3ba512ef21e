"""The losses generated modules call: cross-entropy with its target checks, and the fused
head-and-loss of training (`linear_cross_entropy`), which runs a chunk of rows at a time.

Real Python, imported and tested as it is (tests/test_runtime.py). Generated modules import the
definitions they call from here (a `--standalone` one holds a copy of them and what they call:
snf/runtime/__init__.py). Edit here, then regenerate generated/; a change modules generated before
cannot use raises snf.runtime.ABI.
"""

from __future__ import annotations

import contextlib
from typing import Optional

import torch
import torch.nn.functional as F

from .checks import _eager_check
from .writes import _autocast_dtype


def _check_targets(targets: torch.Tensor, classes: int, ignore_index: int, name: str, classes_name: str) -> None:
    """Class indices: each in [0, classes) or ignore_index; checked as _check_index checks ids
    (eagerly, on the CPU, outside torch.compile), so a bad one is not torch's IndexError."""
    if _eager_check(targets):
        bad = (targets != ignore_index) & ((targets < 0) | (targets >= classes))
        if bool(bad.any()):
            raise ValueError(f"{name} must hold class indices in [0, {classes_name}) = [0, {classes}) or "
                             f"{ignore_index} (ignore_index), got {int(targets[bad][0])}")


def _cross_entropy(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int, dtype: torch.dtype, name: str,
                   classes_name: str) -> torch.Tensor:
    """Mean cross-entropy of logits [..., V] against targets [...], over the targets that are not
    ignore_index, computed in float32 (or wider) and given in the spec's `dtype`, or the logits'
    where that is wider. When every target is ignored it is 0, with zero gradients: a mean over
    no positions, where F.cross_entropy's mean would give 0/0 = nan. `name` and `classes_name`
    are what a bad target's message says."""
    _check_targets(targets, logits.size(-1), ignore_index, name, classes_name)
    targets = targets.flatten()
    logits = logits.flatten(0, -2)
    total = F.cross_entropy(logits.to(torch.promote_types(logits.dtype, torch.float32)), targets,
                            ignore_index=ignore_index, reduction="sum")
    return (total / (targets != ignore_index).sum().clamp(min=1)).to(torch.promote_types(logits.dtype, dtype))


def _loss_chunk(vocab: int) -> int:
    """Rows per chunk of the fused head + loss: a power of two, at least 16, whose float32 logits
    take at most 64 MB (256 rows of GPT-2's 50257 columns). Fewer rows save memory but make the
    matmuls slower on a CPU (benchmarks/README.md)."""
    return max(16, 1 << ((64 << 20) // (4 * vocab)).bit_length() - 1)


class _LinearCrossEntropy(torch.autograd.Function):
    """_cross_entropy(F.linear(x, weight, bias), targets, ignore_index), a chunk of rows at a time,
    so that the [rows, V] logits never exist. Forward computes the gradients too: a chunk's
    log-softmax becomes its softmax minus the one-hot targets (d loss / d logits, up to each row's
    weight `scale`), which gives the chunk's share of the gradients of x, weight and bias; backward
    only scales them. The row weights multiply the small [rows, D] sides of the products, not the
    [rows, V] one. The matmuls run in the dtype the model computes in (autocast's, or the
    weight's), the softmax and the sums in float32 (or wider); two chunk-sized buffers serve every
    chunk."""

    @staticmethod
    def forward(ctx, x, weight, bias, targets, ignore_index: int, out_dtype: torch.dtype, grads: bool):
        device = x.device.type
        autocast = _autocast_dtype(device)
        dtype = autocast if autocast is not None else x.dtype
        wide = torch.promote_types(dtype, torch.float32)  # the softmax's and the sums' dtype
        h, w = x.reshape(-1, x.size(-1)).to(dtype), weight.to(dtype)
        b = bias.to(dtype) if bias is not None else None
        n = h.size(0)
        targets = targets.flatten()
        keep = targets != ignore_index
        count = keep.sum().clamp(min=1)
        picked = targets.masked_fill(~keep, 0)[:, None]
        scale = keep.to(wide) / count  # d loss / d (a row's loss): 0 for an ignored row
        total = torch.zeros((), dtype=wide, device=x.device)
        need_x, need_w, need_b = (grads and need for need in ctx.needs_input_grad[:3])
        grad_x = torch.empty_like(h) if need_x else None
        grad_w = torch.zeros_like(weight, dtype=wide) if need_w else None  # summed over the chunks
        grad_b = torch.zeros_like(bias, dtype=wide) if need_b else None
        step = min(_loss_chunk(w.size(0)), max(n, 1))
        compiling = torch.compiler.is_compiling()  # then inductor plans the memory, and fuses the softmax's steps
        if not compiling:  # eager: the same two chunk-sized buffers for every chunk, not fresh ones each time
            logits = h.new_empty(step, w.size(0))
            logp = torch.empty_like(logits, dtype=wide)
        # dtypes are explicit here; a device without autocast (meta) has none to turn off
        with torch.autocast(device, enabled=False) if autocast is not None else contextlib.nullcontext():
            for lo in range(0, n, step):
                rows = slice(lo, min(lo + step, n))
                size = rows.stop - lo
                if compiling:
                    lp = torch.log_softmax(F.linear(h[rows], w, b), -1, dtype=wide)
                else:
                    z = torch.mm(h[rows], w.t(), out=logits[:size])
                    if b is not None:
                        z.add_(b)
                    lp = torch.log_softmax(z, -1, dtype=wide, out=logp[:size])
                total = total - (lp.gather(1, picked[rows]).squeeze(1) * keep[rows]).sum()
                if grad_x is None and grad_w is None and grad_b is None:
                    continue
                grad = lp.exp_()  # the softmax, in place
                grad.scatter_add_(1, picked[rows], grad.new_full((size, 1), -1.0))
                grad, weights = grad.to(dtype), scale[rows, None]
                if grad_x is not None:
                    grad_x[rows] = (grad @ w) * weights
                if grad_w is not None and grad_w.dtype == dtype:
                    grad_w.addmm_(grad.t(), h[rows] * weights)
                elif grad_w is not None:  # a narrower dtype: each chunk's product, summed wider
                    grad_w.add_(grad.t() @ (h[rows] * weights.to(dtype)))
                if grad_b is not None:
                    grad_b.add_(grad.t().to(wide) @ weights.squeeze(1))
        ctx.save_for_backward(grad_x, grad_w, grad_b)
        ctx.dtypes = (x.dtype, weight.dtype, bias.dtype if bias is not None else None)
        ctx.x_shape = x.shape
        loss, want = total / count, torch.promote_types(dtype, out_dtype)
        # never .to()'s alias of the loss when its dtype is right already: compiled (torch 2.11) the
        # backward of such an output was handed a zero gradient, so every gradient was 0
        return loss if loss.dtype == want else loss.to(want)

    @staticmethod
    def backward(ctx, grad_loss):
        grad_x, grad_w, grad_b = ctx.saved_tensors
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        return ((grad_x * grad_loss).to(x_dtype).view(ctx.x_shape) if grad_x is not None else None,
                (grad_w * grad_loss).to(w_dtype) if grad_w is not None else None,
                (grad_b * grad_loss).to(b_dtype) if grad_b is not None else None, None, None, None, None)


def _linear_cross_entropy(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                          targets: torch.Tensor, ignore_index: int, dtype: torch.dtype, name: str,
                          classes_name: str) -> torch.Tensor:
    """_cross_entropy(F.linear(x, weight, bias), targets, ignore_index, dtype, ...) without the
    logits: the head and the loss of a training step, fused (see _LinearCrossEntropy)."""
    _check_targets(targets, weight.size(0), ignore_index, name, classes_name)
    return _LinearCrossEntropy.apply(x, weight, bias, targets, ignore_index, dtype, torch.is_grad_enabled())


def _next_tokens(targets: torch.Tensor, ignore_index: int) -> torch.Tensor:
    """Next-token targets: position t gets targets[t + 1], the last position ignore_index. Rolled
    rather than sliced (targets[..., 1:]): torch.export would exclude length 2 for a slice."""
    last = torch.arange(targets.size(-1), device=targets.device) == targets.size(-1) - 1
    return targets.roll(-1, dims=-1).masked_fill(last, ignore_index)
