"""Multi-head latent attention: specs/deepseek_v3.snf's decode step against transformers'
DeepseekV3ForCausalLM on the same weights.

A DeepSeek-V3-shaped attention layer scaled down to fit: DeepSeek-V3's per-head sizes (128 dims
without RoPE and 64 with, values of 128, a latent of 512 + 64) and 16 heads instead of 128, width
2048, a query bottleneck of 384; one layer (dense, its MLP 512 wide) and a vocabulary of 512, so
attention is most of a step. Random weights, float32, built by transformers and loaded with
snf.from_pretrained, timed in one process, the contenders alternated rep by rep (_timing.py):
one token decoded after a context of 64, and of 4,096, tokens, the cache given back each step.

* snfc: the latent cache, and the absorbed plan its lowering picks for one query (the key
  up-projection folded into the query, the value one applied after: attention over the latent);
* snfc, expanded: the same model made to take the other plan (each cached latent expanded into
  every head's key and value each step, as for a prompt);
* transformers 5: caches the latent too, and expands the whole cache each step.

Cache bytes: what each keeps per token and layer, and what expanded keys and values would hold.

    PYTHONPATH=. python3 benchmarks/bench_mla.py            # ~1 minute on 2 cores
    PYTHONPATH=. python3 benchmarks/bench_mla.py --quick    # tiny, for the tests
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import _timing  # noqa: E402

_COMMON = dict(num_hidden_layers=1, first_k_dense_replace=1, n_routed_experts=8, n_group=1, topk_group=1,
               num_experts_per_tok=2, bos_token_id=None, eos_token_id=None, pad_token_id=None,
               rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
SHAPES = {
    "full": dict(_COMMON, vocab_size=512, hidden_size=2048, intermediate_size=512, moe_intermediate_size=64,
                 num_attention_heads=16, num_key_value_heads=16, q_lora_rank=384, kv_lora_rank=512,
                 qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, max_position_embeddings=8192),
    "quick": dict(_COMMON, vocab_size=97, hidden_size=32, intermediate_size=48, moe_intermediate_size=16,
                  num_attention_heads=4, num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=32, qk_nope_head_dim=12,
                  qk_rope_head_dim=8, v_head_dim=10, max_position_embeddings=128),
}


def _models(shape: dict, folder: Path):
    import transformers

    import snf
    torch.manual_seed(0)
    hf = transformers.DeepseekV3ForCausalLM(transformers.DeepseekV3Config(**shape)).eval()
    hf.save_pretrained(folder)
    return snf.from_pretrained(folder), hf


def _ours_decode(model, prompt: torch.Tensor):
    out = model(prompt[:, :-1], use_cache=True)
    return lambda: model(prompt[:, -1:], past_latent=out.new_latent)


def _theirs_decode(hf, prompt: torch.Tensor):
    out = hf(prompt[:, :-1], use_cache=True)
    cache = out.past_key_values

    def step():
        got = hf(prompt[:, -1:], past_key_values=cache, use_cache=True)
        cache.crop(-1)  # the same context every rep: drop the token this one added
        return got
    return step


def main(argv: list | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    shape = SHAPES["quick" if args.quick else "full"]
    short, long = (8, 64) if args.quick else (64, 4096)
    os.environ.setdefault("SNF_COMPILE", "0")  # both eager: the plans, not the compiler
    rows = []
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        ours, hf = _models(shape, Path(tmp))
        module = sys.modules[type(ours).__module__]
        expanded = functools.partial(module._latent_attention, absorb=False)
        idx = torch.randint(0, shape["vocab_size"], (1, long), generator=torch.Generator().manual_seed(1))
        want = hf(idx[:, :short]).logits
        _timing.check_close(ours(idx[:, :short]).logits, want, 1e-5 * want.abs().max().item(), "logits")
        for length in (short, long):
            prompt = idx[:, :length]
            wide = _ours_decode(ours, prompt)
            steps = {"snfc": _ours_decode(ours, prompt), "transformers": _theirs_decode(hf, prompt),
                     "snfc expanded": lambda: _with(module, expanded, wide)}
            got, theirs = steps["snfc"]().logits, steps["transformers"]().logits
            _timing.check_close(got, theirs, 1e-4 * theirs.abs().max().item(), f"decode logits after {length}")
            samples = _timing.time_alternating(steps, warmup=2, reps=args.reps)
            rows.append(_row(f"decode 1 token after {length}", samples))
    print(_timing.format_table(["case", "snfc ms", "snfc expanded ms", "transformers ms", "snfc / transformers",
                                "expanded / transformers"], rows))
    per_layer = {"snfc (latent)": shape["kv_lora_rank"] + shape["qk_rope_head_dim"],
                 "transformers 5 (latent)": shape["kv_lora_rank"] + shape["qk_rope_head_dim"],
                 "expanded keys and values": shape["num_attention_heads"] * (
                     shape["qk_nope_head_dim"] + shape["qk_rope_head_dim"] + shape["v_head_dim"])}
    print("\ncache per token and layer: " + "; ".join(f"{k} {v} values ({4 * v} bytes)" for k, v in per_layer.items()))
    print("\n".join(_timing.environment_lines("--threads" if args.threads else "")))
    return 0


def _with(module, plan, step):
    """`step` with the module's latent attention replaced by `plan`."""
    kept, module._latent_attention = module._latent_attention, plan
    try:
        return step()
    finally:
        module._latent_attention = kept


def _row(case: str, samples: dict) -> list:
    ours, wide, theirs = (_timing.summarize(samples[k]).median for k in ("snfc", "snfc expanded", "transformers"))
    return [case, round(ours, 2), round(wide, 2), round(theirs, 2), round(_timing.ratio(ours, theirs), 2),
            round(_timing.ratio(wide, theirs), 2)]


if __name__ == "__main__":
    sys.exit(main())
