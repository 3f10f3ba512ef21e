"""Training the generated nanoGPT: gradients flow, AdamW lowers the loss, dropout only in training;
and a CPU's default training compiles nothing (checkpointed layers included)."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

import generated.nanogpt as ng
from conftest import REPO, fresh_module
from specs_table import ROWS

CONFIG = dict(vocab_size=29, block_size=8, n_layer=2, n_head=2, n_embd=16)


def batch():
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, CONFIG["vocab_size"], (4, 9), generator=g)
    return data[:, :-1], data[:, 1:]


def loss_of(model, x, y):
    logits = model(x).logits
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))


def test_adamw_lowers_the_loss():
    torch.manual_seed(0)
    model = ng.Model(**CONFIG, dropout=0.1)
    x, y = batch()
    model.eval()
    with torch.no_grad():
        before = loss_of(model, x, y).item()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    model.train()
    for _ in range(8):
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model, x, y)
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        after = loss_of(model, x, y).item()
    assert before > 3.0  # about log(29) at initialisation
    assert after < before - 0.3, (before, after)


def test_every_parameter_gets_a_gradient():
    torch.manual_seed(0)
    model = ng.Model(**CONFIG)
    x, y = batch()
    loss_of(model, x, y).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert missing == []
    # q, k and v each get a gradient
    assert all(getattr(model.layers[0], f"attn_{x}").weight.grad.abs().sum() > 0 for x in "qkv")


def test_dropout_applies_in_training_only():
    torch.manual_seed(0)
    model = ng.Model(**CONFIG, dropout=0.5)
    x, _ = batch()
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(x).logits, model(x).logits)
    model.train()
    with torch.no_grad():
        assert not torch.equal(model(x).logits, model(x).logits)
    plain = ng.Model(**CONFIG, dropout=0.0).train()
    with torch.no_grad():
        assert torch.equal(plain(x).logits, plain(x).logits)


def _two_steps(mod, config, compiled: bool, monkeypatch) -> tuple[list, dict]:
    """Two SGD steps on the loss of a model of `mod` (its labels given): the losses, and the first
    step's gradients. SGD, not Adam: Adam divides by the gradient's size, so it turns the float noise
    in a gradient that is zero in exact arithmetic (a key bias's) into a full step, different in each mode."""
    monkeypatch.setenv("SNF_COMPILE", "1" if compiled else "0")
    torch.manual_seed(0)
    model = mod.Model(config).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    losses, grads = [], {}
    for step in range(2):
        idx, labels = torch.randint(0, config.vocab_size, (2, 2, 12), generator=gen)
        torch.manual_seed(100 + step)  # dropout masks
        loss = model(idx, labels=labels).loss
        loss.backward()
        if step == 0:
            grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, grads


def test_the_cpu_default_trains_checkpointed_layers_eagerly(monkeypatch):
    """A CPU trains with nothing compiled (compile_units "none"), gradient checkpointing included:
    a layer recomputed in backward, after forward's _eagerly() has ended, must not compile then
    (a compiled recomputation saves other tensors than the eager forward did, and backward fails)."""
    mod = fresh_module(REPO / "generated" / "gpt_decoder.py", "cpu_default_gpt_decoder")
    config = dataclasses.replace(mod.Config(), **ROWS["gpt_decoder"].small)
    assert config.gradient_checkpointing and mod.Model.compile_units["cpu"]["train"] == "none"

    def no_compile(*args, **kwargs):
        raise AssertionError("torch.compile was called in CPU training")
    monkeypatch.setattr(torch, "compile", no_compile)
    losses, grads = _two_steps(mod, config, True, monkeypatch)
    eager_losses, eager_grads = _two_steps(mod, config, False, monkeypatch)
    assert losses == eager_losses and grads.keys() == eager_grads.keys()
    assert all(torch.equal(grads[k], eager_grads[k]) for k in grads)
