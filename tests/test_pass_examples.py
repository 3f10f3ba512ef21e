"""What each pass does, by example: a small spec per pass and its IR before and after (a rewrite)
or the plan the pass makes (a planning pass), as golden files in tests/golden/passes/. Read them
to see a pass at work; regenerate with SNF_ACCEPT=1 and review the diff."""

from __future__ import annotations

import pytest

from conftest import assert_golden
from snf.codegen import generate
from snf.compiler import analyze, lower
from snf.irdump import dump
from snf.passes import plan
from snf.passes.show import show_blocks, show_caches, show_decode, show_layout, show_loss, show_outputs, show_writes
from snf.source import Source

LAYERS = """\
param:
  n_layer : int = 2
  D : int = 8
  H : int = 2
  scale : float = 0.5
input:
  x : Tensor([B, T, D], float32)
parameter:
  ln_w : Tensor([n_layer, D], float32)
  W_q : Tensor([n_layer, D, D], float32)
  W_k : Tensor([n_layer, D, D], float32)
  W_v : Tensor([n_layer, D, D], float32)
output:
  y : Tensor([B, T, D], float32)
let h = x
for l in 0..n_layer-1:
    let a = layer_norm(h, weight=ln_w[l])
    let q = linear(a, weight=W_q[l])
    let k = linear(a, weight=W_k[l])
    let v = linear(a, weight=W_v[l])
    let o = flash_attention(reshape(q, [B, T, H, D // H]), reshape(k, [B, T, H, D // H]),
                            reshape(v, [B, T, H, D // H]), causal=True)
    h = h + reshape(o, [B, T, D]) * scale
let y = h
"""

CACHED = """\
param:
  n_layer : int = 2
  V : int = 11
  D : int = 8
  block_size : int = 16
input:
  idx : Tensor([B, T], int64)
  past_keys : Tensor([n_layer, B, T_past, 1, D], float32)?
  past_values : Tensor([n_layer, B, T_past, 1, D], float32)?
parameter:
  emb : Tensor([V, D], float32)
  W_k : Tensor([n_layer, D, D], float32)
  W_v : Tensor([n_layer, D, D], float32)
output:
  logits : Tensor([B, T, V], float32)
  new_keys : Tensor([n_layer, B, T_past + T, 1, D], float32)
  new_values : Tensor([n_layer, B, T_past + T, 1, D], float32)
assert T_past + T <= block_size
let h = gather(emb, idx)
let new_keys = full([n_layer, B, T_past + T, 1, D], 0.0, float32)
let new_values = full([n_layer, B, T_past + T, 1, D], 0.0, float32)
for l in 0..n_layer-1:
    let q = reshape(h, [B, T, 1, D])
    let k = reshape(linear(h, weight=W_k[l]), [B, T, 1, D])
    let v = reshape(linear(h, weight=W_v[l]), [B, T, 1, D])
    let kk = concat([past_keys[l], k], axis=1) if past_keys exists else k
    let vv = concat([past_values[l], v], axis=1) if past_values exists else v
    new_keys[l] = kk
    new_values[l] = vv
    h = h + reshape(flash_attention(q, kk, vv, causal=True), [B, T, D])
let logits = linear(h, weight=emb)
"""

LOSS = """\
param:
  V : int = 11
  D : int = 8
input:
  idx : Tensor([B, T], int64)
  targets : Tensor([B, T], int64)?
parameter:
  emb : Tensor([V, D], float32)
  head : Tensor([V, D], float32)
output:
  logits : Tensor([B, T, V], float32)
  loss : Tensor([], float32)?
let h = gather(emb, idx)
let logits = linear(h, weight=head)
let loss = cross_entropy(logits, targets, shift=True) if targets exists else None
"""

ENCDEC = """\
param:
  n_layer : int = 2
  V : int = 11
  D : int = 8
  decoder_start_token_id : int = 0
input:
  src : Tensor([B, S], int64)
  tgt : Tensor([B, T], int64)
  past_keys : Tensor([n_layer, B, T_past, 1, D], float32)?
  past_values : Tensor([n_layer, B, T_past, 1, D], float32)?
parameter:
  emb : Tensor([V, D], float32)
  W_ck : Tensor([n_layer, D, D], float32)
  W_k : Tensor([n_layer, D, D], float32)
output:
  logits : Tensor([B, T, V], float32)
  new_keys : Tensor([n_layer, B, T_past + T, 1, D], float32)
  new_values : Tensor([n_layer, B, T_past + T, 1, D], float32)
let enc = reshape(gather(emb, src), [B, S, 1, D])
enc = flash_attention(enc, enc, enc)
let memory = full([n_layer, B, S, 1, D], 0.0, float32)
for l in 0..n_layer-1:
    memory[l] = reshape(linear(reshape(enc, [B, S, D]), weight=W_ck[l]), [B, S, 1, D])
let h = gather(emb, tgt)
let new_keys = full([n_layer, B, T_past + T, 1, D], 0.0, float32)
let new_values = full([n_layer, B, T_past + T, 1, D], 0.0, float32)
for l in 0..n_layer-1:
    let q = reshape(h, [B, T, 1, D])
    let k = reshape(linear(h, weight=W_k[l]), [B, T, 1, D])
    let kk = concat([past_keys[l], k], axis=1) if past_keys exists else k
    let vv = concat([past_values[l], k], axis=1) if past_values exists else k
    new_keys[l] = kk
    new_values[l] = vv
    h = h + reshape(flash_attention(q, kk, vv, causal=True), [B, T, D])
    h = h + reshape(flash_attention(q, memory[l], memory[l]), [B, T, D])
let logits = linear(h, weight=emb)
"""

WRITES = """\
param:
  D : int = 4
input:
  x : Tensor([B, D], float32)
output:
  y : Tensor([B, D], float32)
  z : Tensor([B, D], float32)
  p : Tensor([B, D], float32)
let y = full([B, D], 0.0, float32)
y[:, 0:2] = x[:, 0:2]
let z = x
z[:, 0:1] = full([B, 1], 1.0, float32)
let p = softmax(x, axis=-1)
p[:, 0:1] = full([B, 1], 1.0, float32)
"""


# a block that holds no tensor and gets none: it makes its tensors on the device its caller passes
NO_TENSOR = """\
param:
  n_layer : int = 2
  D : int = 4
input:
  x : Tensor([B, D], float32)
output:
  y : Tensor([B, n_layer, D], float32)
let out = full([n_layer, D], 0.0)
for l in 0..n_layer-1:
    let v = arange(D, dtype=float32) * 2.0
    out[l] = v
let y = reshape(x, [B, 1, D]) + out
"""


def test_a_block_with_no_tensor_takes_the_device_from_its_caller(tmp_path):
    import torch

    from snf.api import _load
    plans = plan(lower(_checked(NO_TENSOR, "no_tensor")))
    sig = plans.signatures[0]
    assert not (sig.args or sig.device_from or sig.device_held or sig.dtype_held or sig.use_cache or sig.decode)
    code = generate(plans, "no_tensor.snf")  # the block's code makes tensors: it takes the device, as an argument
    assert "def forward(self, device: torch.device) -> torch.Tensor:" in code
    assert "out_layer = layer(x.device)" in code
    module = _load(Source.from_bytes("no_tensor.snf", NO_TENSOR.encode("utf-8")), "no_tensor.snf")
    y = module.Model()(torch.ones(3, 4))
    assert torch.equal(y, 1 + 2 * torch.arange(4.0).expand(3, 2, 4))


def test_a_write_into_a_result_autograd_keeps_copies_first(monkeypatch):
    """The write example's `p[...] = ...` after `softmax`: written in place, the backward fails
    (softmax's gradient reads its result; the session long mode, seed 363)."""
    import torch

    from snf.api import _load
    monkeypatch.setenv("SNF_COMPILE", "0")
    module = _load(Source.from_bytes("writes.snf", WRITES.encode("utf-8")), "writes.snf")
    x = torch.randn(3, 4, requires_grad=True)
    out = module.Model()(x)
    out.p.sum().backward()
    want = torch.softmax(x.detach(), -1)
    want[:, 0] = 1.0
    assert torch.equal(out.p.detach(), want) and x.grad is not None


def _checked(text: str, name: str):
    result = analyze(Source.from_bytes(f"{name}.snf", text.encode("utf-8")))
    assert result.ok, [str(d) for d in result.diagnostics]
    return result.model


def _example(name: str, text: str, before: str, after: str) -> str:
    return f"# {name}: the spec\n{text}\n# before\n{before}\n# after\n{after}"


def test_fuse_linear():
    """The rewrite pass: the q, k and v projections of one input become one fused projection. Not in
    PASSES (a fused weight cannot be split column-wise into whole heads per rank), run here by itself."""
    from snf.passes.fuse_linear import fuse_linear
    model = _checked(LAYERS, "fuse_linear")
    assert_golden("passes/fuse_linear.txt", _example("fuse_linear", LAYERS, dump(model), dump(fuse_linear(model))))


def test_absorb_latent():
    """The rewrite pass: attention over keys and values expanded from a cached latent becomes
    latent_attention over the latent (the expansion's statements go), and the cache is the latent."""
    from test_latent_attention import PAPER as text
    model = _checked(text, "absorb")
    lowered = lower(model)
    assert_golden("passes/absorb.txt", _example("absorb", text, dump(model), dump(lowered) + "# the cache plan\n"
                                                + "".join(f"{line}\n" for line in show_caches(plan(lowered)))))


PLANNERS = {  # pass -> (spec, what its plan says)
    "blocks": (LAYERS, show_blocks),
    "layout": (LAYERS, show_layout),
    "caches": (CACHED, show_caches),
    "decode": (CACHED, show_decode),
    "encoder": (ENCDEC, show_decode),  # an encoder-decoder's decode plan, with what runs once
    "outputs": (CACHED, show_outputs),
    "fused_loss": (LOSS, show_loss),
    "outputs_loss": (LOSS, show_outputs),
    "writes": (WRITES, show_writes),
    "signatures": (CACHED, show_blocks),  # what each block takes besides what its loop carries and reads
}


@pytest.mark.parametrize("name", sorted(PLANNERS))
def test_planning_pass(name):
    """A planning pass reads the lowered IR and says what the generated code does."""
    text, show = PLANNERS[name]
    lowered = lower(_checked(text, name))
    lines = show(plan(lowered))
    assert lines, f"the example for {name} shows no decision"
    assert_golden(f"passes/{name}.txt",
                  _example(name, text, dump(lowered), "".join(f"{line}\n" for line in lines)))
