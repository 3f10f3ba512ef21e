"""The fused loss (snf/passes/fused_loss.py, `_linear_cross_entropy` in snf/runtime/loss.py):
a head + cross-entropy that a training step computes in chunks of rows, without the logits.

Parity: the fused loss and every gradient equal the unfused ones (the same forward with
`return_logits=True`, which computes the logits and `F.cross_entropy`). Tolerance in float32:
rtol 1e-5, atol 1e-6. The two add the same float32 terms in another order (per chunk, then
over the chunks; a weight's gradient is a sum of per-chunk products instead of one matmul), so
they differ by rounding, about 1e-7 relative; nothing is approximated. In bfloat16 (autocast, or
a model cast to it), each chunk's weight gradient is rounded to bfloat16 before the float32
sum, where the unfused matmul rounds once: they agree to bfloat16's precision (2^-8), checked
at 2% of the largest entry.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import generated.gpt_decoder as gd
import generated.nanogpt as ng
from conftest import REPO
from snf.compiler import analyze, lower
from snf.interpret import interpret
from snf.runtime import loss
from snf.passes import plan
from snf.source import Source

NANOGPT = (REPO / "specs" / "nanogpt.snf").read_text(encoding="utf-8")
V = 97


def _models():
    """(module, model in training mode, the targets' input name, its ignore_index)."""
    torch.manual_seed(0)
    yield ng, ng.Model(vocab_size=V, block_size=16, n_layer=2, n_head=2, n_embd=16).train(), "targets", -1
    torch.manual_seed(0)
    yield gd, gd.Model(vocab_size=V, block_size=16, n_layer=2, n_head=2, n_embd=16, mlp_hidden=24,
                       gradient_checkpointing=False).train(), "labels", -100


def _step(model, idx, targets, name, return_logits, context=None):
    model.zero_grad(set_to_none=True)
    with context or torch.enable_grad():
        out = model(idx, **{name: targets}, return_logits=return_logits)
    out.loss.backward()
    return out, {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 5 rows (the last one shorter), so a small batch runs through several."""
    monkeypatch.setattr(loss, "_loss_chunk", lambda vocab: 5)  # the runtime both modules import


def test_the_plan_fuses_the_heads_of_the_specs():
    for name, logits, targets in (("nanogpt", "logits", ("targets",)), ("gpt_decoder", "logits", ("labels",)),
                                  ("nanogpt_model", "logits", ())):
        text = (REPO / "specs" / f"{name}.snf").read_text(encoding="utf-8")
        loss = _plans(text).loss
        assert loss is not None and loss.logits == logits and loss.targets == targets, name
        assert loss.fused.value != loss.loss.value and loss.head.name == logits
    assert _plans((REPO / "specs" / "snowflake_core.snf").read_text(encoding="utf-8")).loss is None  # no loss


@pytest.mark.parametrize("change", [
    # the logits are read by something else too: the fused loss would not save them
    ("let loss = cross_entropy(", "let top = argmax(logits)\nlet loss = cross_entropy("),
    # the head's input changes between the head and the loss: fusing would read the new value
    ("let loss = cross_entropy(", "x_final = x_final * 2.0\nlet loss = cross_entropy("),
])
def test_no_fused_loss_where_it_would_change_the_result(change):
    text = NANOGPT.replace(*change)
    assert text != NANOGPT
    assert _plans(text).loss is None


def _plans(text: str):
    result = analyze(Source.from_text("spec.snf", text))
    assert result.ok, [d.message for d in result.diagnostics]
    return plan(lower(result.model))


def test_loss_and_every_gradient_equal_the_unfused_ones(small_chunks):
    for mod, model, name, ignore in _models():
        idx = torch.randint(0, V, (3, 16))
        targets = torch.randint(0, V, (3, 16))
        targets[0, :7] = ignore  # ignored positions, in a chunk of their own and across chunks
        targets[2, 3] = ignore
        plain, plain_grads = _step(model, idx, targets, name, True)
        fused, fused_grads = _step(model, idx, targets, name, False)
        assert plain.logits is not None and fused.logits is None, mod.__name__
        torch.testing.assert_close(fused.loss, plain.loss, rtol=1e-5, atol=1e-6)
        assert fused_grads.keys() == plain_grads.keys() and len(fused_grads) == len(list(model.parameters()))
        for key in plain_grads:
            torch.testing.assert_close(fused_grads[key], plain_grads[key], rtol=1e-5, atol=1e-6, msg=key)


def test_the_shifted_loss_scores_each_position_against_the_next_token(small_chunks):
    _, model, name, _ = list(_models())[1]  # gpt_decoder: cross_entropy(logits, labels, shift=True)
    idx = torch.randint(0, V, (2, 16))
    out, _ = _step(model, idx, idx, name, False)
    with torch.no_grad():
        logits = model(idx, return_logits=True).logits
    want = F.cross_entropy(logits[:, :-1].flatten(0, 1), idx[:, 1:].flatten())
    torch.testing.assert_close(out.loss, want, rtol=1e-5, atol=1e-6)


def test_training_defaults_to_the_fused_loss_and_returns_logits_when_asked():
    model = ng.Model(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16)
    idx, targets = torch.randint(0, V, (2, 8)), torch.randint(0, V, (2, 8))
    model.train()
    assert model(idx, targets).logits is None  # training with targets: no logits by default
    assert model(idx, targets, return_logits=True).logits.shape == (2, 8, V)
    assert model(idx).logits.shape == (2, 8, V) and model(idx).loss is None  # no targets: nothing to fuse
    model.eval()
    out = model(idx, targets)
    assert out.logits.shape == (2, 8, V) and out.loss is not None  # eval: the logits by default
    assert model(idx, targets, return_logits=False).logits is None


def test_a_fused_training_step_never_makes_the_logits(small_chunks):
    """No tensor of the step (forward and backward) is as large as the [B*T, V] logits."""
    vocab = 997  # larger than every other tensor of the step
    model, name = ng.Model(vocab_size=vocab, block_size=16, n_layer=2, n_head=2, n_embd=16).train(), "targets"
    idx, targets = torch.randint(0, vocab, (4, 16)), torch.randint(0, vocab, (4, 16))

    class Largest(TorchDispatchMode):
        largest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    Largest.largest = max(Largest.largest, t.numel())
            return out

    with Largest():
        _step(model, idx, targets, name, None)
    assert Largest.largest == vocab * 16, Largest.largest  # the head's weight [V, D] (a chunk's logits: 5 * V)
    with Largest():
        _step(model, idx, targets, name, True)
    assert Largest.largest == 4 * 16 * vocab  # the unfused step makes them


@pytest.mark.parametrize("how", ["autocast", "bfloat16"])
def test_bfloat16_fused_loss_and_gradients_agree_with_the_unfused_ones(how, small_chunks):
    for mod, model, name, ignore in _models():
        if how == "bfloat16":
            model = model.to(torch.bfloat16)
        idx, targets = torch.randint(0, V, (3, 16)), torch.randint(0, V, (3, 16))
        targets[1, :4] = ignore
        context = torch.autocast("cpu", dtype=torch.bfloat16) if how == "autocast" else None
        plain, plain_grads = _step(model, idx, targets, name, True, context)
        fused, fused_grads = _step(model, idx, targets, name, False, context)
        # in a cast model the spec's float32 is the cast's dtype, the loss's too (docs/language.md 3.2)
        assert fused.loss.dtype == plain.loss.dtype == (torch.bfloat16 if how == "bfloat16" else torch.float32)
        assert abs(fused.loss.item() - plain.loss.item()) <= 0.01 * plain.loss.item()
        for key, want in plain_grads.items():
            got = fused_grads[key]
            assert got.dtype == want.dtype == next(model.parameters()).dtype, key
            scale = want.float().abs().max().item()
            # 3% of the largest: a bias's gradient sums the rows' bf16-rounded terms, which cancel; nanogpt's
            # layers.0.ln2.bias measured 2.6% (4 bf16 ulps) once q, k and v became three linears (issue 50)
            assert (got.float() - want.float()).abs().max().item() <= 0.03 * scale + 1e-6, (mod.__name__, key)


def test_a_loss_with_every_target_ignored_is_zero_with_zero_gradients(small_chunks):
    for mod, model, name, ignore in _models():
        idx = torch.randint(0, V, (2, 16))
        targets = torch.full((2, 16), ignore)
        for return_logits in (True, False):
            out, grads = _step(model, idx, targets, name, return_logits)
            assert out.loss.item() == 0.0, (mod.__name__, return_logits)
            assert all(g.abs().max().item() == 0.0 for g in grads.values()), (mod.__name__, return_logits)


def test_the_numpy_reference_of_a_fully_ignored_loss_is_zero():
    result = analyze(Source.from_text("nanogpt.snf", NANOGPT))
    config = dict(vocab_size=13, block_size=8, n_layer=1, n_head=2, n_embd=8)
    model = ng.Model(**config).eval()
    from snf.interop import spec_state
    params = {k: v.double().numpy() for k, v in spec_state(model).items()}
    idx = torch.randint(0, 13, (2, 8))
    for targets in (torch.full((2, 8), -1), torch.randint(0, 13, (2, 8))):
        ref = interpret(result.model, params, {"idx": idx.numpy(), "targets": targets.numpy()}, config)["loss"]
        with torch.no_grad():
            got = model(idx, targets, return_logits=False).loss.item()
        assert abs(got - float(ref)) <= 1e-5, (got, ref)


def test_the_helper_with_a_bias_and_every_gradient(monkeypatch):
    """`_linear_cross_entropy` on its own, with a bias (no spec here has one on its head)."""
    monkeypatch.setattr(loss, "_loss_chunk", lambda vocab: 4)
    torch.manual_seed(0)
    x, w, b = torch.randn(3, 6, 8), torch.randn(11, 8), torch.randn(11)
    targets = torch.randint(0, 11, (3, 6))
    targets[1, 2] = -100
    grads = []
    for fn in (lambda x, w, b: ng._cross_entropy(F.linear(x, w, b), targets, -100, torch.float32, "targets", "V"),
               lambda x, w, b: ng._linear_cross_entropy(x, w, b, targets, -100, torch.float32, "targets", "V")):
        leaves = [t.clone().requires_grad_() for t in (x, w, b)]
        value = fn(*leaves)
        (value * 3.0).backward()  # backward scales the gradients forward computed
        grads.append([value.detach()] + [t.grad for t in leaves])
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_a_float64_model_keeps_float64(small_chunks):
    for mod, model, name, _ in _models():
        model = model.double()
        idx, targets = torch.randint(0, V, (2, 16)), torch.randint(0, V, (2, 16))
        plain, plain_grads = _step(model, idx, targets, name, True)
        fused, fused_grads = _step(model, idx, targets, name, False)
        assert fused.loss.dtype == plain.loss.dtype == torch.float64
        torch.testing.assert_close(fused.loss, plain.loss, rtol=1e-12, atol=1e-12)
        for key in plain_grads:
            torch.testing.assert_close(fused_grads[key], plain_grads[key], rtol=1e-10, atol=1e-12, msg=key)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_helper_compiled_gives_the_eager_gradients():
    """Compiled (as a training step compiled whole runs it), the helper gives the eager loss and
    gradients. With torch 2.11 (the H200 machine's) every gradient came out 0 while the loss was
    right: the backward of an output that was `.to()`'s alias of the loss was handed a zero
    gradient (specs/nanogpt_model.snf's CUDA session, and the CPU one under that torch)."""
    torch.manual_seed(0)
    x, w = torch.randn(3, 4, 8), torch.randn(13, 8)
    targets = torch.randint(0, 13, (3, 4))
    targets[:, -1] = -100

    def step(x, w):  # x an intermediate value, as a model's last hidden state is
        return loss._linear_cross_entropy(x * 1.0, w, None, targets, -100, torch.float32, "targets", "V")

    runs = []
    torch._dynamo.reset()
    for fn in (step, torch.compile(step, fullgraph=True, dynamic=False)):
        leaves = [t.clone().requires_grad_() for t in (x, w)]
        value = fn(*leaves)
        value.backward()
        runs.append([value.detach()] + [t.grad for t in leaves])
    torch._dynamo.reset()
    for got, want in zip(runs[1], runs[0]):
        assert got.abs().max() > 0
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
