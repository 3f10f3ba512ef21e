"""Training the generated nanoGPT: gradients flow, AdamW lowers the loss, dropout only in training."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import generated.nanogpt as ng

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
    # the fused q/k/v weight gets gradient in all three parts
    grad = model.layers[0].attn_qkv.weight.grad  # an nn.Linear [out, in]: q, k, v stacked by rows
    assert all(part.abs().sum() > 0 for part in grad.split(CONFIG["n_embd"], dim=0))


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
