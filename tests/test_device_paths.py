"""Device-chosen paths of the generated modules (issue 13's CUDA readiness).

On CUDA, generate's decode step runs as a CUDA graph (torch.compile's mode "reduce-overhead"),
over cache buffers kept across calls and marked static; attention on the plain causal path passes
SDPA no mask, so flash or cuDNN attention can run it. The CPU keeps its own choices (inductor
options, fresh buffers, the written-out one-query attention). Where the code path exists on the
CPU, it is tested here on the CPU (a CUDA tensor can be a fake one, which has a device but no
data); the rest runs only where CUDA is (pytest.mark.skipif).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from conftest import REPO, fresh_module
from snf.runtime import compiling, writes

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
SMALL = dict(vocab_size=61, block_size=32, n_layer=2, n_head=2, n_embd=32)


def _module(name: str = "nanogpt", tag: str = ""):
    return fresh_module(REPO / "generated" / f"{name}.py", f"{name}_device_paths{tag}")


def _fake_cuda(*shape):
    """A CUDA tensor without a CUDA device: it has a device and a shape, but no data."""
    with FakeTensorMode():
        return torch.zeros(*shape, device="cuda")


def test_the_decode_step_compiles_as_a_cuda_graph_on_cuda_only(monkeypatch):
    mod = _module(tag="_modes")
    calls = []

    def compile_(fn, **kwargs):
        calls.append(kwargs)
        return lambda *a, **k: "compiled"
    monkeypatch.setattr(torch, "compile", compile_)
    monkeypatch.setenv("SNF_COMPILE", "1")
    step = mod.Model._decode_step
    assert step(None, torch.zeros(1, 1, dtype=torch.long)) == "compiled"
    assert step(None, _fake_cuda(1, 1)) == "compiled"
    cpu, cuda = calls
    assert cpu["mode"] is None and cpu["dynamic"] is False
    assert cpu["options"] == {"realize_opcount_threshold": 4, "post_grad_fusion_options": {"decompose_mm_pass": {}}}
    assert cuda["mode"] == "reduce-overhead" and cuda["options"] is None and cuda["dynamic"] is False


def test_cache_buffers_are_kept_on_cuda_and_fresh_on_the_cpu():
    owner = torch.nn.Linear(1, 1)
    cpu = torch.randn(2, 1, 3, 2, 4)  # [n_layer, B, T, H, head_dim], 3 slots filled
    first, second = (writes._cache_buffers(cpu, 1, 8, owner, "past_keys") for _ in range(2))
    assert first[0] is not second[0] and not hasattr(first[0], "_dynamo_static_input_type")
    assert torch.equal(first[1][:, :3], cpu[1]) and first[1].shape == (1, 8, 2, 4)
    with FakeTensorMode():  # CUDA tensors without a CUDA device (they hold no data)
        def buffers(batch):
            return writes._decode_buffers(owner, "past_keys", 2, (batch, 8, 2, 4), torch.bfloat16, torch.device("cuda"))
        first, second, other = buffers(1), buffers(1), buffers(2)
    assert first[0] is second[0] and first[0].dtype == torch.bfloat16 and first[0].is_cuda
    assert other[0] is not first[0] and other[0].shape == (2, 8, 2, 4)  # another batch: new buffers


def test_a_compiled_decode_step_marks_the_batch_dynamic_above_one_and_cuda_buffers_static():
    """compiling._ready_for_decode, before a compiled step (an eager one marks nothing, so the eager
    path never imports torch._dynamo): one graph for every batch above 1; on CUDA, where the step is
    a CUDA graph, the cache buffers at fixed addresses, as transformers' StaticCache marks them."""
    cpu = [torch.zeros(2, 8, 2, 4) for _ in range(2)]
    one = [torch.zeros(1, 8, 2, 4)]
    compiling._ready_for_decode((None, torch.zeros(2, 1, dtype=torch.long)), {"past_keys": cpu, "past_values": one})
    assert all(0 in b._dynamo_dynamic_indices for b in cpu) and not hasattr(one[0], "_dynamo_dynamic_indices")
    assert not hasattr(cpu[0], "_dynamo_static_input_type")
    with FakeTensorMode():
        cuda = [torch.zeros(1, 8, 2, 4, device="cuda") for _ in range(2)]
        compiling._ready_for_decode((None, torch.zeros(1, 1, dtype=torch.long, device="cuda")), {"past_keys": cuda})
    assert all(getattr(b, "_dynamo_static_input_type", None) for b in cuda)  # torch._dynamo.mark_static_address


@pytest.mark.parametrize("name", ["nanogpt", "gpt_decoder"])
def test_plain_causal_attention_passes_sdpa_no_mask(name, monkeypatch):
    """Training and the prompt of generate attend with is_causal=True and no mask, which flash and
    cuDNN attention accept; only decode steps over a preallocated cache pass one."""
    mod = _module(name, "_sdpa")
    calls = []
    sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kwargs):
        calls.append((q.size(-2), attn_mask is None, is_causal))
        return sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **kwargs)
    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    config = dict(SMALL, **({"mlp_hidden": 48} if name == "gpt_decoder" else {}))
    model = mod.Model(**config).train()
    idx = torch.randint(0, 61, (2, 12))
    model(idx).logits.sum().backward()
    model.generate(idx[:1, :5], 3, temperature=0)
    plain = [(no_mask, causal) for length, no_mask, causal in calls if length > 1]
    steps = [no_mask for length, no_mask, _ in calls if length == 1]
    assert len(plain) >= 4 and set(plain) == {(True, True)}, calls  # the training forward, the prompt
    assert steps == [False] * 4, calls  # two decode steps of two layers, masking the empty slots


@CUDA
def test_generate_on_cuda_runs_cuda_graphs_like_eager(monkeypatch):
    mod = _module(tag="_cuda_generate")
    torch.manual_seed(0)
    model = mod.Model(**SMALL).cuda().eval()
    prompt = torch.randint(0, 61, (2, 5), device="cuda")
    monkeypatch.setenv("SNF_COMPILE", "0")
    eager = model.generate(prompt, 8, temperature=0)
    monkeypatch.setenv("SNF_COMPILE", "1")
    assert torch.equal(model.generate(prompt, 8, temperature=0), eager)
    assert torch.equal(model.generate(prompt, 8, temperature=0), eager)  # the kept buffers, a second time
    for how in ("bfloat16", "autocast"):
        cast = model.to(torch.bfloat16) if how == "bfloat16" else model
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=how == "autocast"):
            tokens = cast.generate(prompt, 8, temperature=0)
        assert tokens.shape == (2, 13)
        model = model.float()


@CUDA
def test_bfloat16_training_on_cuda_runs_flash_or_cudnn_attention():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    mod = _module("gpt_decoder", "_cuda_train")
    model = mod.Model(**SMALL, mlp_hidden=48, gradient_checkpointing=False).cuda().train()
    idx = torch.randint(0, 61, (2, 16), device="cuda")
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION]), \
            torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(idx, labels=idx).loss  # raises if neither backend can run it
    loss.backward()
    assert torch.isfinite(loss) and all(p.grad is not None for p in model.parameters())
