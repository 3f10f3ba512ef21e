"""Generation speed: the generated nanoGPT's `Model.generate` vs transformers' `generate`, both with
their KV cache, on the same weights (greedy, so both must produce the same tokens).

    PYTHONPATH=. python3 benchmarks/bench_generate.py                 # full run (GPT-2)
    PYTHONPATH=. python3 benchmarks/bench_generate.py --quick         # smoke run
    PYTHONPATH=. python3 benchmarks/bench_generate.py --model llama   # gpt_decoder.snf vs LlamaForCausalLM

4 layers, 4 heads, D=256, vocab 1024 (Llama: SwiGLU hidden 704, tied embeddings); a 16-token
prompt, 64 new tokens; batch 1 and 8; a context (block_size, the cache's preallocated slots) of
128, 256 and 1024: a long context must not make short generations slow. Rows:
snfc eager (SNF_COMPILE=0) and snfc as shipped (SNF_COMPILE=1: the layer block compiled, the
decode step with its preallocated cache compiled once, compile time excluded by warmup), each
against HF's `generate` as shipped (eager, DynamicCache), alternated rep by rep in one process.
Reported: median tokens/s of each and the median of the per-rep ratios (above 1: snfc is faster).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks import _timing  # noqa: E402
from benchmarks.bench_gpt2 import build_models  # noqa: E402

LLAMA_HIDDEN = 704  # about 2.75 x D, as the spec's default ratio


def build_llama(cfg: dict):
    """The generated gpt_decoder and an HF LlamaForCausalLM (sdpa attention) holding the same weights."""
    import transformers  # noqa: PLC0415

    import snf.interop  # noqa: PLC0415
    from generated.gpt_decoder import Config, Model  # noqa: PLC0415

    transformers.logging.set_verbosity_error()
    ours = Model(Config(vocab_size=cfg["vocab_size"], block_size=cfg["block_size"], n_layer=cfg["n_layer"],
                        n_head=cfg["n_head"], n_embd=cfg["n_embd"], mlp_hidden=LLAMA_HIDDEN))
    c = ours.config
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        num_hidden_layers=c.n_layer, hidden_size=c.n_embd, num_attention_heads=c.n_head,
        num_key_value_heads=c.n_head, intermediate_size=c.mlp_hidden, vocab_size=c.vocab_size,
        tie_word_embeddings=True, rms_norm_eps=c.norm_eps, rope_theta=c.rope_base,
        max_position_embeddings=c.block_size, attn_implementation="sdpa"))
    with torch.no_grad():  # HF's std 0.02 leaves near-ties in the logits that float noise flips
        for p in hf.parameters():
            p.normal_(0.0, 0.1)
    snf.interop.load_state_dict(ours, hf.state_dict(), "hf")
    return ours, hf, hf.config._attn_implementation

FULL = dict(n_layer=4, n_head=4, n_embd=256, vocab_size=1024, block_size=128, prompt=16, new=64)
QUICK = dict(n_layer=2, n_head=2, n_embd=64, vocab_size=128, block_size=64, prompt=8, new=8)
BLOCK_SIZES = "128,256,1024"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _timing.add_common_args(parser, reps=7, warmup=2)
    parser.add_argument("--batches", default="1,8", help="comma-separated batch sizes (default 1,8)")
    parser.add_argument("--block-sizes", default=None,
                        help=f"comma-separated contexts (block_size) to build the models with (default {BLOCK_SIZES}; "
                             "--quick: the quick config's)")
    parser.add_argument("--model", choices=("gpt2", "llama"), default="gpt2",
                        help="gpt2: nanogpt.snf vs GPT2LMHeadModel (default); llama: gpt_decoder.snf vs LlamaForCausalLM")
    args = parser.parse_args(argv)
    base = QUICK if args.quick else FULL
    sizes = [int(n) for n in (args.block_sizes or (str(base["block_size"]) if args.quick else BLOCK_SIZES)).split(",")]
    print("\n".join(_timing.environment_lines()))
    rows = []
    for block_size in sizes:
        cfg = dict(base, block_size=block_size)
        os.environ["SNF_COMPILE"] = "0"
        torch.manual_seed(0)
        ours, hf, attn = (build_llama if args.model == "llama" else build_models)(cfg)
        hf.generation_config.eos_token_id = None  # no end token: min_new_tokens would ban it from the argmax
        ours.eval()
        hf.eval()
        print(f"model: {args.model}; config: {cfg}; HF attention: {attn}; greedy decoding")
        modes = [("eager", False)] + ([] if args.no_compile else [("compiled", True)])
        for (mode, compiled), batch in ((m, int(b)) for m in modes for b in args.batches.split(",")):
            rows.append(_row(ours, hf, cfg, mode, compiled, batch, args))
    print(_timing.format_table(["snfc", "block_size", "batch", "snfc tokens/s", "HF tokens/s (eager)",
                                "speed-up (median of paired ratios)"], rows))
    return 0


def _row(ours, hf, cfg: dict, mode: str, compiled: bool, batch: int, args) -> list:
    os.environ["SNF_COMPILE"] = "1" if compiled else "0"
    prompt = torch.randint(0, cfg["vocab_size"], (batch, cfg["prompt"]))
    mask = torch.ones_like(prompt)

    def run_ours():
        return ours.generate(prompt, cfg["new"], temperature=0)

    def run_hf():
        return hf.generate(prompt, attention_mask=mask, max_new_tokens=cfg["new"], min_new_tokens=cfg["new"],
                           do_sample=False, use_cache=True, pad_token_id=0)

    a, b = run_ours(), run_hf()
    if not torch.equal(a, b):
        raise SystemExit(f"ABORT: block_size {cfg['block_size']}, batch {batch}: the two generated different "
                         "tokens; not timing")
    samples = _timing.time_alternating({"snfc": run_ours, "hf": run_hf}, warmup=args.warmup, reps=args.reps)
    tokens = batch * cfg["new"]
    ours_tps = tokens / (_timing.summarize(samples["snfc"]).median / 1e3)
    hf_tps = tokens / (_timing.summarize(samples["hf"]).median / 1e3)
    speedup = 1.0 / _timing.paired_ratio(samples["snfc"], samples["hf"])
    return [f"snfc {mode}", cfg["block_size"], batch, f"{ours_tps:.0f}", f"{hf_tps:.0f}", f"{speedup:.2f}x"]


if __name__ == "__main__":
    sys.exit(main())
