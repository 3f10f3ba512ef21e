"""The suite's one table of the bundled specs: a row per spec in specs/, holding what no plan of the
compiler says (a small config, the transformers family's small config, how its compiled session
and its exports run). Every harness reads its rows from here: tests/property/test_session.py,
test_export.py, test_from_pretrained.py, test_stats.py, test_every_tool.py and the rest.

What the compiler knows it is asked: whether a spec is causal, an encoder-decoder or an encoder
(`kind`, from its decode plan), which transformers family loads it (`family`, from its `config hf:`
section, as snf.from_pretrained reads it), and which of its inputs an export gives (from the
checked inputs' types).

A new spec joins the suite with its row here (docs/ci.md, "Adding a family to the suite").
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Row:
    # Config overrides: the spec's defaults scaled down to a few seconds of compiling and running on a
    # CPU, with every construct of the spec switched on (each harness builds the model at this config)
    small: dict
    # the transformers config (keyword arguments) of the family the spec's `config hf:` section reads,
    # as small: tests/test_from_pretrained.py builds it with random weights and compares, and the
    # spec's compiled session runs at the config from_pretrained reads from it. None: no family
    hf: dict | None = None
    # overrides of `hf` for the compiled session, where `hf` costs graphs for no construct more
    session_hf: dict = field(default_factory=dict)
    fast: bool = False  # the session runs in the fast tier too (`-m "not slow"`): the compiled path on a few
    # the session runs moe_experts' sparse form (its opaque op inside the compiled graphs) even at the row's
    # sizes, where the dense form is the default: one spec with experts does
    sparse_experts: bool = False
    # the exports of tests/test_export.py: each the optional inputs it gives besides the required ones
    exports: tuple = ((),)


CACHE = ("past_keys", "past_values")
# transformers' decoder configs: what most families' rows share
DECODER = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=64, bos_token_id=None, eos_token_id=None)
GEMMA3_ROPE = {"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 5000.0},
               "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}}
GEMMA4_ROPE = {"full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 5000.0},
               "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}}
LLAMA4_ROPE = {"rope_type": "llama3", "rope_theta": 5000.0, "factor": 4.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8}
# the small configs' shared sizes: a decoder with grouped-query attention
GQA = dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, mlp_hidden=48)

ROWS = {
    "nanogpt": Row(dict(vocab_size=64, block_size=32, n_layer=2, n_head=2, n_embd=32),
                   hf=dict(vocab_size=97, n_positions=32, n_embd=48, n_layer=2, n_head=3, bos_token_id=None,
                           eos_token_id=None),
                   fast=True, exports=((), CACHE)),
    "gpt_decoder": Row(dict(vocab_size=64, block_size=32, n_layer=2, n_head=2, n_embd=32, mlp_hidden=48),
                       exports=((), ("labels",))),
    "snowflake_core": Row(dict(vocab_size=64, block_size=32, n_layer=2, n_head=2, n_embd=32, d_ff=48),
                          exports=((), ("attention_mask",))),
    # its defaults are tiny; two layers for the layer loop
    "tiny_transformer": Row(dict(block_size=16, n_layer=2)),
    "nanogpt_model": Row(dict(V=64, P=32, L=2, H=2, D=32)),
    "llama3": Row(dict(GQA), hf=dict(DECODER, rope_theta=5000.0), exports=(CACHE,)),
    "mistral": Row(dict(GQA, sliding_window=3), hf=dict(DECODER, sliding_window=5)),
    # a Llama-style decoder whose MLP is squared ReLU
    "arcee": Row(dict(GQA), hf=dict(DECODER, hidden_act="relu2")),
    "mixtral": Row(dict(GQA, sliding_window=3, n_expert=4, n_expert_tok=2),
                   hf=dict(DECODER, sliding_window=5, num_local_experts=4, num_experts_per_tok=2), sparse_experts=True),
    "olmoe": Row(dict(GQA, n_expert=4, n_expert_tok=2),
                 hf=dict(DECODER, num_experts=4, num_experts_per_tok=2, pad_token_id=None)),
    # layer 0 dense by mlp_only_layers (dense_layers), layer 1 sparse; with decoder_sparse_step too:
    # tests/test_from_pretrained_families.py
    "qwen3_moe": Row(dict(GQA, head_dim=16, mlp_hidden=24, n_expert=4, n_expert_tok=2, dense_hidden=48,
                          dense_layers=[1, 0]),
                     hf=dict(DECODER, head_dim=16, moe_intermediate_size=24, num_experts=4, num_experts_per_tok=2,
                             norm_topk_prob=True, mlp_only_layers=[0])),
    # sparse_step 2: a dense layer (a SwiGLU MLP), then a sparse one (experts and the shared expert)
    "qwen2_moe": Row(dict(GQA, expert_hidden=24, shared_hidden=40, n_expert=4, n_expert_tok=2, sparse_step=2,
                          dense_layers=[0, 0]),
                     hf=dict(DECODER, moe_intermediate_size=24, shared_expert_intermediate_size=40, num_experts=4,
                             num_experts_per_tok=2, decoder_sparse_step=2)),
    "bert": Row(dict(vocab_size=64, max_positions=32, n_layer=2, n_head=2, n_embd=32, intermediate=48),
                hf=dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=48, max_position_embeddings=64, type_vocab_size=3),
                exports=(("attention_mask",),)),
    "t5_encoder": Row(dict(vocab_size=64, n_layer=2, n_head=2, d_model=32, d_kv=8, d_ff=48, num_buckets=8,
                           max_distance=16), exports=(("attention_mask",),)),
    # three encoder layers, two decoder ones (transformers 5's generate sizes its cache by num_layers)
    "t5": Row(dict(vocab_size=64, n_layer=2, n_dec_layer=2, n_head=2, d_model=32, d_kv=8, d_ff=48, num_buckets=8,
                   max_distance=16),
              hf=dict(vocab_size=97, d_model=24, d_kv=10, num_heads=3, d_ff=40, num_layers=3, num_decoder_layers=2,
                      relative_attention_num_buckets=8, relative_attention_max_distance=12,
                      feed_forward_proj="gated-gelu", tie_word_embeddings=False, decoder_start_token_id=0),
              exports=(("attention_mask",),)),
    # log-mel features in, a decoder with cross-attention out. small: 16 frames, two layers each. hf: the
    # decoder's heads (4) unlike the encoder's (2), its MLP narrower, ids of its own for the start/end/pad
    "whisper": Row(dict(vocab_size=64, num_mel_bins=8, max_source_positions=8, max_target_positions=16, n_layer=2,
                        n_dec_layer=2, n_head=2, n_dec_head=2, d_model=32, encoder_ffn_dim=48, decoder_ffn_dim=48,
                        decoder_start_token_id=1, eos_token_id=2, pad_token_id=0),
                   hf=dict(vocab_size=97, num_mel_bins=8, max_source_positions=12, max_target_positions=24,
                           encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=4,
                           d_model=32, encoder_ffn_dim=48, decoder_ffn_dim=40, decoder_start_token_id=90,
                           bos_token_id=91, pad_token_id=91, eos_token_id=92)),
    "qwen2": Row(dict(GQA), hf=dict(DECODER, rope_theta=20000.0)),
    "gemma2": Row(dict(GQA, head_dim=16, query_pre_attn_scalar=12, sliding_window=3, attn_softcap=2.0,
                       final_softcap=5.0),
                  hf=dict(DECODER, head_dim=16, query_pre_attn_scalar=12, sliding_window=5, attn_logit_softcapping=2.0,
                          final_logit_softcapping=5.0, pad_token_id=None),
                  exports=(CACHE,)),
    # small: a sliding layer, then a full one with linear RoPE scaling; the logits capped. hf: a full
    # layer between two sliding ones, each kind its own RoPE base, the full one's scaled (linear);
    # attn_logit_softcapping set, which transformers' Gemma 3 does not apply. Its session: one of each
    "gemma3_text": Row(dict(vocab_size=64, block_size=32, layer_types=["sliding_attention", "full_attention"],
                            n_head=4, n_kv_head=2, n_embd=32, head_dim=16, mlp_hidden=48, query_pre_attn_scalar=12,
                            sliding_window=3, rope_local_base=100.0, rope_linear=True, rope_factor=4.0,
                            final_softcapping=True, final_softcap=5.0),
                       hf=dict(DECODER, num_hidden_layers=3, head_dim=16, query_pre_attn_scalar=12, sliding_window=5,
                               rms_norm_eps=1e-5, layer_types=["sliding_attention", "full_attention",
                                                               "sliding_attention"],
                               rope_parameters=GEMMA3_ROPE, attn_logit_softcapping=2.0, final_logit_softcapping=5.0,
                               pad_token_id=None),
                       session_hf=dict(num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"]),
                       exports=(CACHE,)),
    # small: a sliding layer, a full one with a head twice as wide, then a sliding one sharing layer 0's keys and
    # values; per-layer embeddings, experts beside each MLP, the logits capped. hf: five layers, the last two
    # sharing (a sliding and a full one), proportional RoPE on a quarter of the full layers' pairs; its session
    # three layers, the last sharing
    "gemma4": Row(dict(vocab_size=64, block_size=32, layer_types=["sliding_attention", "full_attention",
                                                                  "sliding_attention"],
                       n_head=4, n_kv_head=2, n_embd=32, head_dim=8, global_head_dim=16, mlp_hidden=48,
                       rope_local_base=100.0, sliding_window=3, n_kv_shared=1, ple_dim=4, moe=True, n_expert=4,
                       n_expert_tok=2, expert_hidden=24, final_softcapping=True, final_softcap=5.0),
                  hf=dict(DECODER, num_hidden_layers=5, head_dim=8, global_head_dim=16, sliding_window=5,
                          rms_norm_eps=1e-5, hidden_size_per_layer_input=4, vocab_size_per_layer_input=97,
                          layer_types=["sliding_attention", "full_attention", "sliding_attention", "sliding_attention",
                                       "full_attention"],
                          num_kv_shared_layers=2, enable_moe_block=True, num_experts=4, top_k_experts=2,
                          moe_intermediate_size=24, final_logit_softcapping=5.0, pad_token_id=None,
                          rope_parameters=GEMMA4_ROPE),
                  session_hf=dict(num_hidden_layers=3, num_kv_shared_layers=1,
                                  layer_types=["sliding_attention", "full_attention", "sliding_attention"])),
    "gptj": Row(dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_embd=32, mlp_hidden=48, rotary_dim=4),
                hf=dict(vocab_size=97, n_positions=64, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, bos_token_id=None,
                        eos_token_id=None)),
    "gpt_neox": Row(dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_embd=32, mlp_hidden=48, rotary_pct=0.5),
                    hf=dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                            num_attention_heads=4, max_position_embeddings=64, rotary_pct=0.5, bos_token_id=None,
                            eos_token_id=None)),
    # no attention: Mamba2 layers, heads of 8 channels in 2 groups of B and C
    "mamba2": Row(dict(vocab_size=64, n_layer=2, n_embd=32, n_head=8, head_dim=8, state_size=16, n_groups=2,
                       conv_kernel=4),
                  hf=dict(vocab_size=97, hidden_size=32, num_heads=8, head_dim=8, state_size=16, n_groups=2,
                          num_hidden_layers=2, conv_kernel=4, bos_token_id=None, eos_token_id=None, pad_token_id=None),
                  exports=(("past_conv", "past_ssm"),)),
    # every layer attention and a Mamba2 mixer side by side, each multiplier away from 1
    "falcon_h1": Row(dict(vocab_size=64, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, head_dim=8, mlp_hidden=48,
                          mamba_d_ssm=64, mamba_n_heads=8, mamba_d_state=16, mamba_n_groups=2, mamba_d_conv=4),
                     hf=dict(DECODER, head_dim=16, mamba_d_ssm=48, mamba_n_heads=6, mamba_d_state=8, mamba_n_groups=2,
                             mamba_d_conv=4, mamba_rms_norm=True, mamba_norm_before_gate=False,
                             embedding_multiplier=1.5, lm_head_multiplier=0.7, attention_in_multiplier=0.9,
                             attention_out_multiplier=1.2, key_multiplier=0.6, ssm_in_multiplier=1.3,
                             ssm_out_multiplier=0.8, ssm_multipliers=[0.5, 1.5, 0.75, 1.25, 0.9],
                             mlp_multipliers=[0.7, 1.4], rope_theta=5000.0, pad_token_id=None)),
    # gated DeltaNet on layer 0, gated attention on layer 1 (full_attention_interval 2, which config.json
    # keeps only beside layer_types); a dense MLP, then a sparse one (sparse_step 2)
    "qwen3_next": Row(dict(GQA, full_attention_interval=2, head_dim=16, lin_n_key_head=2, lin_n_value_head=4,
                           lin_key_dim=8, lin_value_dim=12, expert_hidden=24, shared_hidden=40, n_expert=4,
                           n_expert_tok=2, sparse_step=2, dense_layers=[0, 0]),
                      hf=dict(DECODER, hidden_size=64, num_hidden_layers=2, full_attention_interval=2,
                              layer_types=["linear_attention", "full_attention"], head_dim=16, linear_num_key_heads=2,
                              linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                              moe_intermediate_size=24, shared_expert_intermediate_size=40, num_experts=4,
                              num_experts_per_tok=2, decoder_sparse_step=2, pad_token_id=None)),
    # small: LongRoPE on, the switch inside the session's lengths (its decode crosses it). hf: fused
    # projections, three quarters of each head rotating, plain RoPE (LongRoPE against transformers:
    # test_phi3_longrope_matches_transformers_past_the_switch)
    "phi3": Row(dict(GQA, rotary_pct=0.5, sliding_window=32, longrope=True, original_max_position=8,
                     short_factor=[1.0, 1.5], long_factor=[2.0, 5.0]),
                hf=dict(DECODER, hidden_size=64, rope_parameters={"rope_type": "default", "rope_theta": 5000.0,
                                                                  "partial_rotary_factor": 0.75},
                        pad_token_id=None)),
    # small: latent attention with YaRN, a dense layer then a sparse one (4 groups of 2 experts, 2 picked).
    # hf: a q bottleneck, RoPE on adjacent pairs, one dense layer then two sparse ones: a sigmoid router with
    # a correction bias, picking in the 2 best of 4 groups, two shared experts. Its session: one of each
    "deepseek_v3": Row(dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_embd=32, mlp_hidden=48, q_rank=24,
                            kv_rank=16, nope_dim=12, rope_dim=8, v_dim=10, rope_factor=4.0, original_max_position=8,
                            first_dense=1, n_expert=8, n_expert_tok=2, expert_hidden=16, n_group=4, topk_group=2),
                       hf=dict(DECODER, num_key_value_heads=4, num_hidden_layers=3, kv_lora_rank=16, q_lora_rank=24,
                               qk_rope_head_dim=8, qk_nope_head_dim=12, v_head_dim=10, moe_intermediate_size=16,
                               n_routed_experts=8, n_group=4, topk_group=2, num_experts_per_tok=3,
                               first_k_dense_replace=1, n_shared_experts=2, routed_scaling_factor=1.5,
                               rope_parameters={"rope_type": "default", "rope_theta": 5000.0}, pad_token_id=None),
                       session_hf=dict(num_hidden_layers=2)),
    # small: a KDA layer (the delta rule with a decay per key channel) with a dense MLP, then an MLA layer
    # (no RoPE) with experts (4 groups of 2, 2 picked). hf: KDA, MLA, KDA; one dense layer, then experts
    # picked in the 2 best of 4 groups, two shared experts. Its session: one of each
    "kimi_linear": Row(dict(vocab_size=64, block_size=32, layer_types=["linear_attention", "full_attention"],
                            n_embd=32, n_head=4, kv_rank=16, nope_dim=12, rope_dim=8, v_dim=10, lin_n_head=2,
                            lin_head_dim=8, mlp_hidden=48, n_expert=8, n_expert_tok=2, expert_hidden=16, n_group=4,
                            topk_group=2),
                       hf=dict(DECODER, num_key_value_heads=4, num_hidden_layers=3,
                               layer_types=["linear_attention", "full_attention", "linear_attention"],
                               kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=12,
                               v_head_dim=10, linear_num_heads=4, linear_head_dim=8, moe_intermediate_size=16,
                               num_experts=8, n_group=4, topk_group=2, num_experts_per_tok=3, n_shared_experts=2,
                               routed_scaling_factor=1.5, pad_token_id=None),
                       session_hf=dict(num_hidden_layers=2, layer_types=["linear_attention", "full_attention"])),
    # small: biases on the attention, an untied head, a window on layer 1. hf: heads 16 wide (not 32 // 4),
    # biases on the attention, a tied head, a window on layer 1
    "qwen3": Row(dict(GQA, head_dim=16, attention_bias=True, tie_embeddings=False, use_sliding_window=True,
                      sliding_window=3, max_window_layers=1),
                 hf=dict(DECODER, head_dim=16, attention_bias=True, tie_word_embeddings=True, use_sliding_window=True,
                         sliding_window=5, max_window_layers=1, rope_theta=5000.0)),
    # norms after the attention and the MLP, q and k normalised whole; biases on the attention, a tied head
    "olmo2": Row(dict(GQA, attention_bias=True, tie_embeddings=True),
                 hf=dict(DECODER, attention_bias=True, tie_word_embeddings=True, rope_theta=5000.0, rms_norm_eps=1e-6,
                         pad_token_id=None)),
    # parallel attention and MLP, interleaved RoPE, scaled logits; a LayerNorm per head of q and k
    # (use_qk_norm, Command-R+'s), biases on the attention and an untied head
    "cohere": Row(dict(GQA, logit_scale=0.5, use_qk_norm=True, attention_bias=True, tie_embeddings=False),
                  hf=dict(DECODER, logit_scale=0.4, use_qk_norm=True, attention_bias=True, tie_word_embeddings=False,
                          rope_theta=5000.0, layer_norm_eps=1e-4)),
    # Phi-2-style: one layer norm for attention and MLP, biases everywhere; here grouped key/value heads,
    # part of each head rotating, queries and keys layer-normed per head, a tied head
    "phi": Row(dict(GQA, rotary_pct=0.5, qk_layernorm=True, tie_embeddings=True),
               hf=dict(DECODER, rope_parameters={"rope_type": "default", "rope_theta": 5000.0,
                                                 "partial_rotary_factor": 0.75},
                       qk_layernorm=True, layer_norm_eps=1e-4, resid_pdrop=0.1, embd_pdrop=0.05)),
    # small: a layer of each kind: RoPE and chunked (3 positions) or NoPE with a temperature; dense or sparse
    # (top 2). hf: layer 0 RoPE and dense, 1 NoPE and sparse, 2 NoPE and dense, 3 RoPE and sparse (moe step 2),
    # the RoPE layers chunked (5 positions), Llama 3's RoPE scaling, the NoPE layers' temperature within 13
    # tokens. Its session: two layers, RoPE in chunks and dense, NoPE and sparse (two constructs, not four)
    "llama4_text": Row(dict(GQA, n_layer=4, head_dim=16, expert_hidden=24, n_expert=4, n_expert_tok=2, moe_step=2,
                            attention_bias=True, rope_llama3=True, rope_factor=4.0, rope_original_max_position=8,
                            chunk_size=3, floor_scale=2, attn_scale=0.5, no_rope_layers=[1, 0, 0, 1],
                            attn_types=["chunked_attention", "full_attention", "full_attention", "chunked_attention"]),
                       hf=dict(DECODER, num_hidden_layers=4, head_dim=16, intermediate_size=24,
                               intermediate_size_mlp=40, num_local_experts=4, num_experts_per_tok=2,
                               interleave_moe_layer_step=2, no_rope_layers=[1, 0, 0, 1], attention_chunk_size=5,
                               floor_scale=4, attn_scale=0.5, attention_bias=True, rms_norm_eps=1e-6,
                               rope_parameters=LLAMA4_ROPE, pad_token_id=None),
                       session_hf=dict(num_hidden_layers=2, no_rope_layers=[1, 0], interleave_moe_layer_step=2)),
    # small: a full layer, then a sliding one; YaRN; clamps that bind. hf: the same, YaRN with every parameter
    # away from its default; attention sinks, biases and the experts' interleaved gate and up columns
    "gpt_oss": Row(dict(GQA, head_dim=16, mlp_hidden=24, sliding_window=3,
                        attention_types=["full_attention", "sliding_attention"], n_expert=4, n_expert_tok=2,
                        swiglu_limit=1.0, rope_factor=4.0, rope_original_max_position=8),
                   hf=dict(DECODER, head_dim=16, intermediate_size=24, sliding_window=5, num_local_experts=4,
                           num_experts_per_tok=2, swiglu_alpha=1.5, swiglu_limit=1.0,
                           layer_types=["full_attention", "sliding_attention"],
                           rope_parameters={"rope_type": "yarn", "rope_theta": 5000.0, "factor": 8.0,
                                            "beta_fast": 16.0, "beta_slow": 2.0, "truncate": True,
                                            "original_max_position_embeddings": 8}, pad_token_id=None)),
    # a layer of each kind (Mamba2, attention, experts, a squared-ReLU MLP); the experts in a latent, picked
    # in 2 of 4 groups. hf: by layers_block_type, grouped attention without RoPE; the router picks 3 of 8
    # experts in the 2 best of 4 groups, its weights not renormalised, then scaled; biases on the MLP and the
    # shared expert (the latent and a correction bias: tests/test_from_pretrained_families.py). Its session:
    # one layer of each kind
    "nemotron_h": Row(dict(vocab_size=64, block_size=32, layer_types=["linear_attention", "full_attention", "moe",
                                                                      "mlp", "linear_attention"],
                           n_embd=32, n_head=4, n_kv_head=2, head_dim=8, mlp_hidden=48, ssm_n_head=8, ssm_head_dim=8,
                           state_size=16, n_groups=2, n_expert=8, n_expert_tok=2, expert_hidden=16, shared_hidden=24,
                           moe_latent=16, expert_groups=4, topk_group=2, routed_scaling=1.5),
                      hf=dict(DECODER, layers_block_type=["linear_attention", "full_attention", "moe", "mlp",
                                                          "linear_attention"], head_dim=16, mamba_num_heads=6,
                              mamba_head_dim=8, ssm_state_size=8, n_groups=2, conv_kernel=4, mlp_bias=True,
                              use_bias=True, n_routed_experts=8, n_group=4, topk_group=2, num_experts_per_tok=3,
                              moe_intermediate_size=16, moe_shared_expert_intermediate_size=24,
                              routed_scaling_factor=1.5, norm_topk_prob=False, pad_token_id=None),
                      session_hf=dict(layers_block_type=["linear_attention", "full_attention", "moe", "mlp"])),
}

SPECS = sorted(ROWS)
# sizes a session of a bundled spec draws from; inputs that are masks keep key 0 visible
HINTS = SimpleNamespace(domains={"B": [1, 2, 3], "T": [1, 2, 3, 4, 5], "T_past": [0, 1, 2, 3]},
                        masks={"attention_mask"}, int_high={"attention_mask": 2})


def spec_path(name: str) -> Path:
    return REPO / "specs" / f"{name}.snf"


@functools.cache
def checked(name: str):
    """The spec's checked IR."""
    from snf.compiler import analyze
    from snf.source import Source
    result = analyze(Source.read(spec_path(name)))
    assert result.ok, [d.message for d in result.diagnostics if d.severity == "error"]
    return result.model


@functools.cache
def plans(name: str):
    """The spec's plans, as the compiler made them for its generated module."""
    from snf.compiler import planned
    return planned(checked(name))


def constructs(name: str) -> frozenset:
    """What the spec asks of torch.compile, as its checked IR says: each op it calls with the literal
    options of the call (`rope` with `scaling="yarn"`, `interleaved=True`), and its kind (causal,
    encoder-decoder, encoder)."""
    from snf.ir.typed import Op
    from snf.ir.walk import walk_exprs

    def options(call: Op) -> tuple:
        literal = [(k, v.value) for k, v in call.args if isinstance(getattr(v, "value", None), (str, bool))]
        return tuple(sorted((k, repr(value)) for k, value in literal))
    ops = {(e.op,) + options(e) for e in walk_exprs(checked(name).body) if isinstance(e, Op)}
    return frozenset(ops | {("kind", kind(name))})


@functools.cache
def compiled_whole() -> frozenset:
    """The specs whose CPU sessions compile what CUDA's default compiles too (a training step whole,
    traced as CUDA's compile traces it: session._as_cuda_traces), besides what the CPU's default
    compiles (generate's decode steps, which every session compiles): the fast rows, then greedily the spec with the most constructs not
    yet compiled, until every construct of every spec is in one of them. On CUDA every session compiles
    every unit."""
    want = {name: constructs(name) for name in ROWS}
    chosen = {name for name, row in ROWS.items() if row.fast}
    covered = set().union(*(want[name] for name in chosen))
    while left := {name: want[name] - covered for name in ROWS if want[name] - covered}:
        best = max(sorted(left), key=lambda name: len(left[name]))
        chosen.add(best)
        covered |= want[best]
    return frozenset(chosen)


def kind(name: str) -> str:
    """"causal" (generate continues its tokens), "seq2seq" (an encoder-decoder: generate decodes from
    its encoder's values) or "encoder" (no generate), by the spec's decode plan."""
    decode = plans(name).decode
    return "encoder" if decode is None else "causal" if decode.encoder is None else "seq2seq"


@functools.cache
def families() -> dict[str, str]:
    """transformers model_type -> the spec snf.from_pretrained loads it with, for the rows with `hf`."""
    from snf.pretrained import bundled_specs
    by_spec = {path.stem: model_type for model_type, path in bundled_specs().items()}
    return {by_spec[name]: name for name, row in ROWS.items() if row.hf is not None}


def family(name: str) -> str | None:
    """The transformers model_type whose checkpoints snf.from_pretrained loads with this spec, when its
    row gives that family's config."""
    return next((f for f, spec in families().items() if spec == name), None)
