"""Generation speed: the generated nanoGPT's `Model.generate` vs transformers' `generate`, both with
their KV cache, on the same weights (greedy, so both must produce the same tokens).

    PYTHONPATH=. python3 benchmarks/bench_generate.py           # full run
    PYTHONPATH=. python3 benchmarks/bench_generate.py --quick   # smoke run

4 layers, 4 heads, D=256, vocab 1024; a 16-token prompt, 64 new tokens; batch 1 and 8. Rows:
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

FULL = dict(n_layer=4, n_head=4, n_embd=256, vocab_size=1024, block_size=128, prompt=16, new=64)
QUICK = dict(n_layer=2, n_head=2, n_embd=64, vocab_size=128, block_size=64, prompt=8, new=8)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _timing.add_common_args(parser, reps=7, warmup=2)
    parser.add_argument("--batches", default="1,8", help="comma-separated batch sizes (default 1,8)")
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    os.environ["SNF_COMPILE"] = "0"
    torch.manual_seed(0)
    ours, hf, attn = build_models(cfg)
    ours.eval()
    hf.eval()
    print("\n".join(_timing.environment_lines()))
    print(f"config: {cfg}; HF attention: {attn}; greedy decoding")
    rows = []
    modes = [("eager", False)] + ([] if args.no_compile else [("compiled", True)])
    for (mode, compiled), batch in ((m, int(b)) for m in modes for b in args.batches.split(",")):
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
            raise SystemExit(f"ABORT: batch {batch}: the two generated different tokens; not timing")
        samples = _timing.time_alternating({"snfc": run_ours, "hf": run_hf}, warmup=args.warmup, reps=args.reps)
        tokens = batch * cfg["new"]
        ours_tps = tokens / (_timing.summarize(samples["snfc"]).median / 1e3)
        hf_tps = tokens / (_timing.summarize(samples["hf"]).median / 1e3)
        speedup = 1.0 / _timing.paired_ratio(samples["snfc"], samples["hf"])
        rows.append([f"snfc {mode}", batch, f"{ours_tps:.0f}", f"{hf_tps:.0f}", f"{speedup:.2f}x"])
    print(_timing.format_table(["snfc", "batch", "snfc tokens/s", "HF tokens/s (eager)",
                                "speed-up (median of paired ratios)"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
