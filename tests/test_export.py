"""torch.export on every generated model: dynamic batch and sequence dims, and the exported program
matches eager at sizes other than the traced ones.

Export runs with SNF_COMPILE=1, the default: the layer blocks' torch.compile wrapper (`_hot_path`)
must not stand in its way. The eager reference runs with SNF_COMPILE=0.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import pytest
import torch
import torch.utils._pytree as pytree
from torch.export import Dim

from conftest import REPO

pytestmark = pytest.mark.slow  # about 1-3 s per export on a 2-core CPU


@dataclass(frozen=True)
class Case:
    module: str
    config: dict
    inputs: dict  # name -> (shape: ints, or "B" / "T" / "P" for a dynamic dim; kind: tokens, mask, float)
    seq: int  # largest T (and, with a cache, largest T_past): T + T_past <= block_size over the whole range
    vocab: int = 29


CASES = {
    "nanogpt": Case("nanogpt", dict(vocab_size=29, block_size=16, n_layer=2, n_head=2, n_embd=16),
                    {"idx": (("B", "T"), "tokens")}, seq=16),
    "nanogpt+cache": Case("nanogpt", dict(vocab_size=29, block_size=16, n_layer=2, n_head=2, n_embd=16),
                          {"idx": (("B", "T"), "tokens"), "past_keys": ((2, "B", "P", 2, 8), "float"),
                           "past_values": ((2, "B", "P", 2, 8), "float")}, seq=8),
    "gpt_decoder": Case("gpt_decoder", dict(vocab_size=29, block_size=16, n_layer=2, n_head=2, n_embd=16,
                                            mlp_hidden=24), {"idx": (("B", "T"), "tokens")}, seq=16),
    "gpt_decoder+labels": Case("gpt_decoder", dict(vocab_size=29, block_size=16, n_layer=2, n_head=2, n_embd=16,
                                                   mlp_hidden=24),
                               {"idx": (("B", "T"), "tokens"), "labels": (("B", "T"), "tokens")}, seq=16),
    "snowflake_core": Case("snowflake_core", dict(vocab_size=29, block_size=16, n_layer=2, n_head=2, n_embd=16,
                                                  d_ff=24), {"input_ids": (("B", "T"), "tokens")}, seq=16),
    "snowflake_core+mask": Case("snowflake_core", dict(vocab_size=29, block_size=16, n_layer=2, n_head=2, n_embd=16,
                                                       d_ff=24),
                                {"input_ids": (("B", "T"), "tokens"), "attention_mask": (("B", "T"), "mask")}, seq=16),
    # the shifted loss over T - 1 tokens: T = 1 gives NaN (no targets), in eager and exported alike
    "nanogpt_model": Case("nanogpt_model", dict(D=16, H=2, L=2, V=29, P=16), {"tok": (("B", "T"), "tokens")}, seq=16),
    "tiny_transformer": Case("tiny_transformer", dict(vocab_size=10, block_size=8, n_layer=2, n_head=1, n_embd=5,
                                                      d_ff=5), {"x": (("B", "T"), "tokens")}, seq=8, vocab=10),
    # grouped-query attention (4 query heads, 2 key/value heads), with the KVH-wide cache
    "llama3+cache": Case("llama3", dict(vocab_size=29, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=16,
                                        mlp_hidden=24),
                         {"idx": (("B", "T"), "tokens"), "past_keys": ((2, "B", "P", 2, 4), "float"),
                          "past_values": ((2, "B", "P", 2, 4), "float")}, seq=8),
    "mistral": Case("mistral", dict(vocab_size=29, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=16,
                                    mlp_hidden=24, sliding_window=3), {"idx": (("B", "T"), "tokens")}, seq=16),
    # mixtures of experts (the dense form at this size: see _moe_dense_wins)
    "mixtral": Case("mixtral", dict(vocab_size=29, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=16,
                                    mlp_hidden=24, sliding_window=3, n_expert=4, n_expert_tok=2),
                    {"idx": (("B", "T"), "tokens")}, seq=16),
    "olmoe": Case("olmoe", dict(vocab_size=29, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=16,
                                mlp_hidden=24, n_expert=4, n_expert_tok=2), {"idx": (("B", "T"), "tokens")}, seq=16),
    "qwen3_moe": Case("qwen3_moe", dict(vocab_size=29, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=16,
                                        head_dim=8, mlp_hidden=24, n_expert=4, n_expert_tok=2, dense_hidden=24,
                                        dense_layers=[1, 0]),
                      {"idx": (("B", "T"), "tokens")}, seq=16),
    "qwen2_moe": Case("qwen2_moe", dict(vocab_size=29, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=16,
                                        mlp_hidden=24, expert_hidden=12, shared_hidden=20, n_expert=4, n_expert_tok=2,
                                        sparse_step=2, dense_layers=[0, 0]), {"idx": (("B", "T"), "tokens")}, seq=16),
    # recurrent states (the scans are opaque ops to export, as to torch.compile), and the hybrids
    "mamba2+states": Case("mamba2", dict(vocab_size=29, n_layer=2, n_embd=16, n_head=4, head_dim=8, state_size=8,
                                         n_groups=2, conv_kernel=4),
                          {"idx": (("B", "T"), "tokens"), "past_conv": ((2, "B", 3, 64), "float"),
                           "past_ssm": ((2, "B", 4, 8, 8), "float")}, seq=16),
    "falcon_h1": Case("falcon_h1", dict(vocab_size=29, n_layer=2, n_head=4, n_kv_head=2, n_embd=16, head_dim=4,
                                        mlp_hidden=24, mamba_d_ssm=32, mamba_n_heads=4, mamba_d_state=8, mamba_n_groups=2,
                                        mamba_d_conv=4), {"idx": (("B", "T"), "tokens")}, seq=16),
    "qwen3_next": Case("qwen3_next", dict(vocab_size=29, block_size=16, n_layer=2, full_attention_interval=2, n_embd=16,
                                          n_head=4, n_kv_head=2, head_dim=8, lin_n_key_head=2, lin_n_value_head=4,
                                          lin_key_dim=8, lin_value_dim=8, mlp_hidden=24, expert_hidden=12,
                                          shared_hidden=20, n_expert=4, n_expert_tok=2, dense_layers=[0, 0]),
                       {"idx": (("B", "T"), "tokens")}, seq=16),
    "phi3": Case("phi3", dict(vocab_size=29, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=16, mlp_hidden=24,
                              sliding_window=16, longrope=True, original_max_position=8, short_factor=[1.0, 1.5],
                              long_factor=[2.0, 3.0]), {"idx": (("B", "T"), "tokens")}, seq=16),
    "deepseek_v3": Case("deepseek_v3", dict(vocab_size=29, block_size=16, n_layer=2, n_head=4, n_embd=16, mlp_hidden=24,
                                            q_rank=12, kv_rank=8, nope_dim=6, rope_dim=4, v_dim=5, rope_factor=4.0,
                                            original_max_position=8, first_dense=1, n_expert=8, n_expert_tok=2,
                                            expert_hidden=8, n_group=4, topk_group=2),
                        {"idx": (("B", "T"), "tokens")}, seq=16),
    "qwen3": Case("qwen3", dict(vocab_size=29, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=16, head_dim=8,
                                mlp_hidden=24, attention_bias=True, use_sliding_window=True, sliding_window=3,
                                max_window_layers=1), {"idx": (("B", "T"), "tokens")}, seq=16),
    "olmo2": Case("olmo2", dict(vocab_size=29, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=16, mlp_hidden=24,
                                attention_bias=True), {"idx": (("B", "T"), "tokens")}, seq=16),
    "cohere": Case("cohere", dict(vocab_size=29, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=16, mlp_hidden=24,
                                  use_qk_norm=True, attention_bias=True), {"idx": (("B", "T"), "tokens")}, seq=16),
    "phi": Case("phi", dict(vocab_size=29, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=16, mlp_hidden=24,
                            rotary_pct=0.5, qk_layernorm=True), {"idx": (("B", "T"), "tokens")}, seq=16),
    # chunked attention, NoPE layers with a temperature, a dense layer and experts scaled at their input
    "llama4_text": Case("llama4_text", dict(vocab_size=29, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=16,
                                            head_dim=8, mlp_hidden=24, expert_hidden=12, n_expert=4, n_expert_tok=2,
                                            moe_step=2, chunk_size=3, floor_scale=2, no_rope_layers=[1, 0],
                                            attn_types=["chunked_attention", "full_attention"]),
                        {"idx": (("B", "T"), "tokens")}, seq=16),
    # attention sinks (written out), sliding and full layers, YaRN, experts with biases and the clamped SwiGLU
    "gpt_oss": Case("gpt_oss", dict(vocab_size=29, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=16,
                                    head_dim=8, mlp_hidden=24, sliding_window=3, n_expert=4, n_expert_tok=2,
                                    attention_types=["sliding_attention", "full_attention"], swiglu_limit=1.0,
                                    rope_factor=4.0, rope_original_max_position=8),
                    {"idx": (("B", "T"), "tokens")}, seq=16),
    "nemotron_h": Case("nemotron_h", dict(vocab_size=29, block_size=16, layer_types=["linear_attention", "full_attention",
                                                                                  "moe", "mlp"], n_embd=16, n_head=4,
                                          n_kv_head=2, head_dim=4, mlp_hidden=24, ssm_n_head=4, ssm_head_dim=8,
                                          state_size=8, n_groups=2, n_expert=4, n_expert_tok=2, expert_hidden=12,
                                          shared_hidden=20, expert_groups=2, topk_group=1),
                       {"idx": (("B", "T"), "tokens")}, seq=16),
    "bert+mask": Case("bert", dict(vocab_size=29, max_positions=16, n_layer=2, n_head=2, n_embd=16, intermediate=24),
                      {"input_ids": (("B", "T"), "tokens"), "attention_mask": (("B", "T"), "mask")}, seq=16),
    # the relative position bias is computed from arange(T) for every T
    "t5_encoder+mask": Case("t5_encoder", dict(vocab_size=29, n_layer=2, n_head=2, d_model=16, d_kv=8, d_ff=24,
                                               num_buckets=8, max_distance=16),
                            {"input_ids": (("B", "T"), "tokens"), "attention_mask": (("B", "T"), "mask")}, seq=16),
    # an encoder-decoder: the encoder's length is the dynamic dim "P" (S), the decoder's "T"
    "t5+mask": Case("t5", dict(vocab_size=29, n_layer=2, n_dec_layer=2, n_head=2, d_model=16, d_kv=8, d_ff=24,
                               num_buckets=8, max_distance=16),
                    {"input_ids": (("B", "P"), "tokens"), "decoder_input_ids": (("B", "T"), "tokens"),
                     "attention_mask": (("B", "P"), "mask")}, seq=16),
    "qwen2": Case("qwen2", dict(vocab_size=29, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=16,
                                mlp_hidden=24), {"idx": (("B", "T"), "tokens")}, seq=16),
    # soft-capped attention and logits, alternating sliding and global layers, a cache
    "gemma2+cache": Case("gemma2", dict(vocab_size=29, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=16,
                                        head_dim=8, mlp_hidden=24, query_pre_attn_scalar=8, sliding_window=3,
                                        attn_softcap=2.0, final_softcap=5.0),
                         {"idx": (("B", "T"), "tokens"), "past_keys": ((2, "B", "P", 2, 8), "float"),
                          "past_values": ((2, "B", "P", 2, 8), "float")}, seq=8),
    # per-head query and key norms, a sliding layer and a full one (each its RoPE base, linear scaling), a cache
    "gemma3_text+cache": Case("gemma3_text", dict(vocab_size=29, block_size=16, layer_types=["sliding_attention",
                                                                                          "full_attention"],
                                                  n_head=4, n_kv_head=2, n_embd=16, head_dim=8, mlp_hidden=24,
                                                  query_pre_attn_scalar=8, sliding_window=3, rope_linear=True,
                                                  rope_factor=4.0, final_softcapping=True, final_softcap=5.0),
                              {"idx": (("B", "T"), "tokens"), "past_keys": ((2, "B", "P", 2, 8), "float"),
                               "past_values": ((2, "B", "P", 2, 8), "float")}, seq=8),
    "gptj": Case("gptj", dict(vocab_size=29, block_size=16, n_layer=2, n_head=2, n_embd=16, mlp_hidden=24,
                              rotary_dim=4), {"idx": (("B", "T"), "tokens")}, seq=16),
    "gpt_neox": Case("gpt_neox", dict(vocab_size=29, block_size=16, n_layer=2, n_head=2, n_embd=16, mlp_hidden=24,
                                      rotary_pct=0.5), {"idx": (("B", "T"), "tokens")}, seq=16),
}
TRACED = dict(B=2, T=5, P=3)
CHECKED = [dict(B=1, T=1, P=1), dict(B=3, T=2, P=6), dict(B=4, T=7, P=1)]


def make_inputs(case: Case, sizes: dict, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, (shape, kind) in case.inputs.items():
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in shape)
        if kind == "tokens":
            out[name] = torch.randint(0, case.vocab, shape, generator=g)
        elif kind == "mask":  # padding at the end of some rows; the first token always kept
            out[name] = (torch.rand(shape, generator=g) > 0.3).long().cummin(dim=-1).values
            out[name][:, 0] = 1
        else:
            out[name] = torch.randn(shape, generator=g)
    return out


def dynamic_shapes(case: Case) -> dict:
    dims = {"B": Dim("batch", min=1, max=8), "T": Dim("seq", min=1, max=case.seq),
            "P": Dim("past", min=1, max=case.seq)}
    return {name: {axis: dims[d] for axis, d in enumerate(shape) if isinstance(d, str)}
            for name, (shape, _) in case.inputs.items()}


def leaves(out) -> list:
    return [out] if isinstance(out, torch.Tensor) else [x for x in out if x is not None]


def build(case: Case) -> torch.nn.Module:
    mod = importlib.import_module(f"generated.{case.module}")
    torch.manual_seed(0)
    return mod.Model(mod.Config(**case.config)).eval()


def export(model, case: Case, monkeypatch, strict: bool = False):
    monkeypatch.setenv("SNF_COMPILE", "1")  # the default: export goes past _hot_path
    program = torch.export.export(model, (), make_inputs(case, TRACED, 0), dynamic_shapes=dynamic_shapes(case),
                                  strict=strict)
    monkeypatch.setenv("SNF_COMPILE", "0")
    return program


def assert_matches_eager(program, model, case: Case) -> None:
    for seed, sizes in enumerate(CHECKED, start=1):
        sizes = {k: min(v, case.seq) for k, v in sizes.items()}
        inputs = make_inputs(case, sizes, seed)
        with torch.no_grad():
            got, want = program.module()(**inputs), model(**inputs)
        assert type(got) is type(want)
        assert len(leaves(got)) == len(leaves(want))
        for a, b in zip(leaves(got), leaves(want)):
            assert a.shape == b.shape and a.dtype == b.dtype
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5, equal_nan=True)


def test_every_generated_model_is_covered():
    generated = {p.stem for p in (REPO / "generated").glob("*.py") if p.stem != "__init__"}
    assert generated == {case.module for case in CASES.values()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_export_matches_eager(name, monkeypatch):
    case = CASES[name]
    model = build(case)
    program = export(model, case, monkeypatch)
    ranges = sorted((r.lower, r.upper) for r in program.range_constraints.values())
    assert (1, 8) in ranges and (1, case.seq) in ranges  # batch and sequence stayed dynamic, whole range
    assert_matches_eager(program, model, case)


def test_strict_export_and_a_saved_program(tmp_path, monkeypatch):
    case = CASES["nanogpt"]
    model = build(case)
    program = export(model, case, monkeypatch, strict=True)
    # saving needs a name for the Output namedtuple; torch has only a private call for that
    output = importlib.import_module("generated.nanogpt").Output
    if output not in pytree.SUPPORTED_SERIALIZED_TYPES:
        pytree._register_namedtuple(output, serialized_type_name="generated.nanogpt.Output")
    torch.export.save(program, tmp_path / "nanogpt.pt2")
    assert_matches_eager(torch.export.load(tmp_path / "nanogpt.pt2"), model, case)
