"""The path users get by default, for every generated module: each spec's defaults scaled down in
size (SMALL, which tests/property/test_session.py's sessions use: every spec trains there two
steps compiled whole, the CUDA default, and generates compiled, against eager), and the CPU's
own training default, which compiles nothing.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from conftest import REPO, fresh_module

# per spec: the defaults scaled down to a few seconds of compiling and running on a CPU
SMALL = {
    "nanogpt": dict(vocab_size=64, block_size=32, n_layer=2, n_head=2, n_embd=32),
    "gpt_decoder": dict(vocab_size=64, block_size=32, n_layer=2, n_head=2, n_embd=32, mlp_hidden=48),
    "snowflake_core": dict(vocab_size=64, block_size=32, n_layer=2, n_head=2, n_embd=32, d_ff=48),
    "tiny_transformer": dict(block_size=12),  # otherwise its defaults are tiny
    "nanogpt_model": dict(V=64, P=32, L=2, H=2, D=32),
    "llama3": dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, mlp_hidden=48),
    "mistral": dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, mlp_hidden=48,
                    sliding_window=3),
    "mixtral": dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, mlp_hidden=48,
                    sliding_window=3, n_expert=4, n_expert_tok=2),
    "olmoe": dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, mlp_hidden=48,
                  n_expert=4, n_expert_tok=2),
    # layer 0 dense by mlp_only_layers (dense_layers), layer 1 sparse
    "qwen3_moe": dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, head_dim=16,
                      mlp_hidden=24, n_expert=4, n_expert_tok=2, dense_hidden=48, dense_layers=[1, 0]),
    # sparse_step 2: a dense layer, then a sparse one
    "qwen2_moe": dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, mlp_hidden=48,
                      expert_hidden=24, shared_hidden=40, n_expert=4, n_expert_tok=2, sparse_step=2,
                      dense_layers=[0, 0]),
    "bert": dict(vocab_size=64, max_positions=32, n_layer=2, n_head=2, n_embd=32, intermediate=48),
    "t5_encoder": dict(vocab_size=64, n_layer=2, n_head=2, d_model=32, d_kv=8, d_ff=48, num_buckets=8,
                       max_distance=16),
    "t5": dict(vocab_size=64, n_layer=2, n_dec_layer=2, n_head=2, d_model=32, d_kv=8, d_ff=48, num_buckets=8,
               max_distance=16),
    "qwen2": dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, mlp_hidden=48),
    "gemma2": dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, head_dim=16,
                   mlp_hidden=48, query_pre_attn_scalar=12, sliding_window=3, attn_softcap=2.0, final_softcap=5.0),
    # a sliding layer, then a full one with linear RoPE scaling; the logits capped
    "gemma3_text": dict(vocab_size=64, block_size=32, layer_types=["sliding_attention", "full_attention"], n_head=4,
                        n_kv_head=2, n_embd=32, head_dim=16, mlp_hidden=48, query_pre_attn_scalar=12, sliding_window=3,
                        rope_local_base=100.0, rope_linear=True, rope_factor=4.0, final_softcapping=True,
                        final_softcap=5.0),
    "gptj": dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_embd=32, mlp_hidden=48, rotary_dim=4),
    "gpt_neox": dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_embd=32, mlp_hidden=48, rotary_pct=0.5),
    "mamba2": dict(vocab_size=64, n_layer=2, n_embd=32, n_head=8, head_dim=8, state_size=16, n_groups=2, conv_kernel=4),
    "falcon_h1": dict(vocab_size=64, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, head_dim=8, mlp_hidden=48,
                      mamba_d_ssm=64, mamba_n_heads=8, mamba_d_state=16, mamba_n_groups=2, mamba_d_conv=4),
    "qwen3_next": dict(vocab_size=64, block_size=32, n_layer=2, full_attention_interval=2, n_embd=32, n_head=4, n_kv_head=2, head_dim=16,
                       lin_n_key_head=2, lin_n_value_head=4, lin_key_dim=8, lin_value_dim=12, mlp_hidden=48,
                       expert_hidden=24, shared_hidden=40, n_expert=4, n_expert_tok=2, sparse_step=2,
                       dense_layers=[0, 0]),
    # LongRoPE on, the switch inside the session's lengths (its decode crosses it)
    "phi3": dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, mlp_hidden=48,
                 rotary_pct=0.5, sliding_window=32, longrope=True, original_max_position=8,
                 short_factor=[1.0, 1.5], long_factor=[2.0, 5.0]),
    # latent attention with YaRN, a dense layer then a sparse one (4 groups of 2 experts, 2 picked)
    "deepseek_v3": dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_embd=32, mlp_hidden=48, q_rank=24,
                        kv_rank=16, nope_dim=12, rope_dim=8, v_dim=10, rope_factor=4.0, original_max_position=8,
                        first_dense=1, n_expert=8, n_expert_tok=2, expert_hidden=16, n_group=4, topk_group=2),
    # biases on the attention, an untied head, a window on layer 1
    "qwen3": dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, head_dim=16, mlp_hidden=48,
                  attention_bias=True, tie_embeddings=False, use_sliding_window=True, sliding_window=3,
                  max_window_layers=1),
    "olmo2": dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, mlp_hidden=48,
                  attention_bias=True, tie_embeddings=True),
    "cohere": dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, mlp_hidden=48,
                   logit_scale=0.5, use_qk_norm=True, attention_bias=True, tie_embeddings=False),
    # grouped key/value heads, half of each head rotating, queries and keys layer-normed, a tied head
    "phi": dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, mlp_hidden=48,
                rotary_pct=0.5, qk_layernorm=True, tie_embeddings=True),
    # a layer of each kind: RoPE and chunked (3 positions) or NoPE with a temperature; dense or sparse (top 2)
    "llama4_text": dict(vocab_size=64, block_size=32, n_layer=4, n_head=4, n_kv_head=2, n_embd=32, head_dim=16,
                        mlp_hidden=48, expert_hidden=24, n_expert=4, n_expert_tok=2, moe_step=2, attention_bias=True,
                        rope_llama3=True, rope_factor=4.0, rope_original_max_position=8, chunk_size=3, floor_scale=2,
                        attn_scale=0.5, no_rope_layers=[1, 0, 0, 1],
                        attn_types=["chunked_attention", "full_attention", "full_attention", "chunked_attention"]),
    # a full layer, then a sliding one; YaRN; clamps that bind
    "gpt_oss": dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, head_dim=16, mlp_hidden=24,
                    sliding_window=3, attention_types=["full_attention", "sliding_attention"], n_expert=4,
                    n_expert_tok=2, swiglu_limit=1.0, rope_factor=4.0, rope_original_max_position=8),
    # a layer of each kind; the experts in a latent, picked in 2 of 4 groups
    "nemotron_h": dict(vocab_size=64, block_size=32, layer_types=["linear_attention", "full_attention", "moe", "mlp",
                                                                  "linear_attention"], n_embd=32, n_head=4,
                       n_kv_head=2, head_dim=8, mlp_hidden=48, ssm_n_head=8, ssm_head_dim=8, state_size=16,
                       n_groups=2, n_expert=8, n_expert_tok=2, expert_hidden=16, shared_hidden=24, moe_latent=16,
                       expert_groups=4, topk_group=2, routed_scaling=1.5),
}


def _modules() -> list:
    return sorted(p.stem for p in (REPO / "generated").glob("*.py") if p.stem != "__init__")


def test_every_generated_module_has_a_small_config():
    assert set(_modules()) <= set(SMALL), "add the new spec's scaled-down config to SMALL"


def _inputs(model, batch: int, length: int, generator: torch.Generator) -> dict:
    """Random valid values of the required inputs, and of an optional `labels`/`targets`."""
    import inspect
    inputs = {}
    for name, param in inspect.signature(model.forward).parameters.items():
        if param.kind is not param.POSITIONAL_OR_KEYWORD:
            continue
        if param.default is None and name not in ("labels", "targets", "attention_mask"):
            continue
        if name == "attention_mask":
            mask = torch.ones(batch, length, dtype=torch.long)
            mask[0, -2:] = 0
            inputs[name] = mask
        else:
            inputs[name] = torch.randint(0, _vocab(model.config), (batch, length), generator=generator)
    return inputs


def _vocab(config) -> int:
    return getattr(config, "vocab_size", None) or config.V


def _loss(out) -> torch.Tensor:
    loss = getattr(out, "loss", None)
    if loss is not None:
        return loss
    first = out if isinstance(out, torch.Tensor) else out[0]
    return first.float().square().mean()  # any scalar of the outputs trains the parameters


def _train(mod, config, compiled: bool, monkeypatch, whole: bool = True) -> tuple[list, dict, object]:
    monkeypatch.setenv("SNF_COMPILE", "1" if compiled else "0")
    torch.manual_seed(0)
    model = mod.Model(config)
    if whole:  # the CUDA default; else the module's own (a CPU trains eagerly)
        model.compile_units = {"cpu": {"train": "model", "eval": "block"}}
    model.train()
    # SGD, not Adam: Adam divides by the gradient's size, so it turns the float noise in a gradient
    # that is zero in exact arithmetic (a key bias's) into a full step, different in each mode
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    losses, grads = [], {}
    for step in range(2):
        inputs = _inputs(model, 2, 12, gen)
        torch.manual_seed(100 + step)  # dropout masks
        loss = _loss(model(**inputs))
        loss.backward()
        if step == 0:
            grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, grads, model


def test_the_cpu_default_trains_checkpointed_layers_eagerly(monkeypatch):
    """A CPU trains with nothing compiled (compile_units "none"), gradient checkpointing included:
    a layer recomputed in backward, after forward's _eagerly() has ended, must not compile then
    (a compiled recomputation saves other tensors than the eager forward did, and backward fails)."""
    mod = fresh_module(REPO / "generated" / "gpt_decoder.py", "cpu_default_gpt_decoder")
    config = dataclasses.replace(mod.Config(), **SMALL["gpt_decoder"])
    assert config.gradient_checkpointing and mod.Model.compile_units["cpu"]["train"] == "none"

    def no_compile(*args, **kwargs):
        raise AssertionError("torch.compile was called in CPU training")
    monkeypatch.setattr(torch, "compile", no_compile)
    losses, grads, _ = _train(mod, config, True, monkeypatch, whole=False)
    eager_losses, eager_grads, _ = _train(mod, config, False, monkeypatch, whole=False)
    assert losses == eager_losses and grads.keys() == eager_grads.keys()
    assert all(torch.equal(grads[k], eager_grads[k]) for k in grads)
