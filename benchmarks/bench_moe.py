"""A Mixtral-shaped MoE layer: snfc's sparse and dense lowerings of `moe_experts` against
transformers' own MixtralSparseMoeBlock, on the same weights.

    PYTHONPATH=. python3 benchmarks/bench_moe.py            # D=1024, F=3584 (Mixtral's 4096/14336 / 4), 8 experts, top-2
    PYTHONPATH=. python3 benchmarks/bench_moe.py --quick    # smoke run, tiny shapes
    PYTHONPATH=. python3 benchmarks/bench_moe.py --sweep    # the dense/sparse crossover behind _moe_dense_wins
    PYTHONPATH=. python3 benchmarks/bench_moe.py --sweep --threads 1   # steadier on a shared machine

Each contender computes the whole block: the router (softmax, top-2, renormalised) and the experts.
`sparse` is `_moe_sparse` through the custom op torch.ops.snf.moe_experts (tokens grouped by expert,
a loop over experts), `dense` is `_moe_dense` (every expert on every token, weighted 0 outside the
top 2), `hf` is transformers' MixtralSparseMoeBlock. Rows: prefill (B=1, T=512) and decode (B=1,
T=1). Ratio = contender / sparse (median of per-rep ratios): above 1.0 means sparse is faster.
Every contender is checked against `hf`'s output before timing. fp32, eager, no grad.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks import _timing  # noqa: E402
from snf.runtime import experts  # noqa: E402

TOL = 1e-4
FULL = dict(hidden=1024, ffn=3584, experts=8, top_k=2, prefill=512)
QUICK = dict(hidden=32, ffn=48, experts=8, top_k=2, prefill=16)


def hf_block(cfg: dict):
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    config = MixtralConfig(hidden_size=cfg["hidden"], intermediate_size=cfg["ffn"], num_local_experts=cfg["experts"],
                           num_experts_per_tok=cfg["top_k"])
    torch.manual_seed(0)
    block = MixtralSparseMoeBlock(config).eval()
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, 0.02)
    return block


def contenders(block, k: int) -> dict:
    f = block.experts.down_proj.shape[2]
    gate, up = block.experts.gate_up_proj[:, :f], block.experts.gate_up_proj[:, f:]  # views: Mixtral's fused [E, 2F, D]
    gate, up, down, router = gate.contiguous(), up.contiguous(), block.experts.down_proj, block.gate.weight

    def ours(fn):
        def run(x):
            flat = x.reshape(-1, x.shape[-1])
            w, i = F.softmax(F.linear(flat, router), dim=-1).topk(k, dim=-1)
            return fn(flat, i, w / w.sum(-1, keepdim=True), gate, up, down, "silu").reshape(x.shape)
        return run
    return {"sparse": ours(experts._MOE_OP), "dense": ours(experts._moe_dense), "hf": block}


def sweep(args) -> None:
    """Dense against sparse over tokens and sizes: the crossover that sets _moe_dense_wins's constants."""
    rows = []
    for d, f in ((32, 64), (64, 128), (128, 256), (256, 512), (1024, 3584)):
        for tokens in (1, 4, 16, 64):
            cfg = dict(hidden=d, ffn=f, experts=8, top_k=2)
            fns = contenders(hf_block(cfg), 2)
            x = torch.randn(1, tokens, d)
            timed = {n: (lambda fn=fns[n]: fn(x)) for n in ("sparse", "dense")}
            samples = _timing.time_alternating(timed, warmup=args.warmup, reps=args.reps)
            macs = tokens * 8 * d * f * 3
            rows.append([d, f, tokens, macs, _timing.summarize(samples["sparse"]).median,
                         _timing.summarize(samples["dense"]).median,
                         _timing.paired_ratio(samples["dense"], samples["sparse"]),
                         experts._moe_dense_wins(tokens, 8, f, d, True)])
    print(_timing.format_table(["D", "F", "tokens", "dense MACs", "sparse ms", "dense ms", "dense / sparse",
                                "rule: dense"], rows))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _timing.add_common_args(parser, reps=10, warmup=2)
    parser.add_argument("--sweep", action="store_true", help="dense vs sparse over sizes and token counts")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print("\n".join(_timing.environment_lines("--threads" if args.threads else "")))
    if args.sweep:
        sweep(args)
        return 0
    cfg = QUICK if args.quick else FULL
    print(f"MoE layer: D={cfg['hidden']}, F={cfg['ffn']}, {cfg['experts']} experts, top-{cfg['top_k']}; fp32, eager")
    block = hf_block(cfg)
    fns = contenders(block, cfg["top_k"])
    rows, results = [], {}
    with torch.no_grad():
        for name, tokens in ((f"prefill B=1 T={cfg['prefill']}", cfg["prefill"]), ("decode B=1 T=1", 1)):
            x = torch.randn(1, tokens, cfg["hidden"], generator=torch.Generator().manual_seed(1))
            want = block(x)
            for n, fn in fns.items():
                _timing.check_close(fn(x), want, TOL, f"{name}: {n}")
            timed = {n: (lambda fn=fn: fn(x)) for n, fn in fns.items()}
            samples = _timing.time_alternating(timed, warmup=args.warmup, reps=args.reps)
            results[name] = {n: _timing.summarize(s).median for n, s in samples.items()}
            for n, s in samples.items():
                st = _timing.summarize(s)
                rows.append([name, n, st.median, f"{st.spread:.0%}", _timing.paired_ratio(s, samples["sparse"])])
    print(_timing.format_table(["case", "contender", "median ms", "spread", "ratio vs sparse"], rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"config": cfg, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
