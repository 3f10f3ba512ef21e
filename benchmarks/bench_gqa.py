"""Grouped-query attention: SDPA's `enable_gqa=True` against repeating the key/value heads first.

    PYTHONPATH=. python3 benchmarks/bench_gqa.py             # full run (about a minute on 2 cores)
    PYTHONPATH=. python3 benchmarks/bench_gqa.py --quick     # smoke run, tiny shapes
    PYTHONPATH=. python3 benchmarks/bench_gqa.py --device cuda

This is the measurement behind `flash_attention`'s GQA lowering (snf/ops/core.py and the
`_attention` helper in snf/runtime/attention.py). Three ways to let H query heads share KVH
key/value heads, on the same q, k, v:

- `enable_gqa`: `F.scaled_dot_product_attention(q, k, v, enable_gqa=True)`;
- `repeat_interleave`: `k.repeat_interleave(H // KVH, dim=1)` (and v), then plain SDPA;
- `expand`: `k[:, :, None].expand(B, KVH, G, T, hd).reshape(B, H, T, hd)` (transformers' `repeat_kv`).

Rows: a causal prefill (no mask), a padded batch (a boolean [B, 1, 1, T] mask), and a decode step
(one query over a long cache, with and without a mask). Ratio = contender / enable_gqa (median of
per-rep ratios): above 1.0 means enable_gqa is faster. Every contender is checked against
enable_gqa's output before timing.
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

TOL = 1e-4
FULL = dict(batch=4, n_head=32, n_kv_head=8, head_dim=64, seq=512, cache=2048)
QUICK = dict(batch=1, n_head=4, n_kv_head=2, head_dim=8, seq=16, cache=32)


def _repeat(k: torch.Tensor, group: int) -> torch.Tensor:
    return k.repeat_interleave(group, dim=1)


def _expand(k: torch.Tensor, group: int) -> torch.Tensor:
    b, kvh, t, hd = k.shape
    return k[:, :, None].expand(b, kvh, group, t, hd).reshape(b, kvh * group, t, hd)


def contenders(q, k, v, mask, causal: bool) -> dict:
    group = q.size(1) // k.size(1)
    return {
        "enable_gqa": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                             enable_gqa=True),
        "repeat_interleave": lambda: F.scaled_dot_product_attention(q, _repeat(k, group), _repeat(v, group),
                                                                    attn_mask=mask, is_causal=causal),
        "expand": lambda: F.scaled_dot_product_attention(q, _expand(k, group), _expand(v, group), attn_mask=mask,
                                                         is_causal=causal),
    }


def scenarios(cfg: dict, device: str) -> list[tuple[str, tuple]]:
    g = torch.Generator(device=device).manual_seed(0)
    b, h, kvh, hd, t, c = (cfg[k] for k in ("batch", "n_head", "n_kv_head", "head_dim", "seq", "cache"))

    def rand(*shape):
        return torch.randn(*shape, generator=g, device=device)

    padded = torch.ones(b, 1, 1, t, dtype=torch.bool, device=device)
    padded[0, ..., t // 2:] = False
    filled = torch.arange(c, device=device)[None, None, None, :] < c - c // 4  # a preallocated cache, 3/4 full
    return [
        (f"prefill, causal, T={t}", (rand(b, h, t, hd), rand(b, kvh, t, hd), rand(b, kvh, t, hd), None, True)),
        (f"padded batch, T={t}", (rand(b, h, t, hd), rand(b, kvh, t, hd), rand(b, kvh, t, hd), padded, False)),
        (f"decode, cache {c}", (rand(b, h, 1, hd), rand(b, kvh, c, hd), rand(b, kvh, c, hd), None, False)),
        (f"decode, cache {c}, mask", (rand(b, h, 1, hd), rand(b, kvh, c, hd), rand(b, kvh, c, hd), filled, False)),
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _timing.add_common_args(parser, reps=30, warmup=3)
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    print("\n".join(_timing.environment_lines()))
    print(f"device {args.device}; B={cfg['batch']}, H={cfg['n_head']}, KVH={cfg['n_kv_head']}, "
          f"head_dim={cfg['head_dim']}, float32; eager" + ("" if args.no_compile else " and torch.compile"))
    rows, results = [], {}
    modes = [False] if args.no_compile else [False, True]
    with torch.no_grad():
        for name, (q, k, v, mask, causal) in scenarios(cfg, args.device):
            for compiled in modes:
                fns = contenders(q, k, v, mask, causal)
                if compiled:
                    fns = {n: torch.compile(f, fullgraph=True, dynamic=False) for n, f in fns.items()}
                want = fns["enable_gqa"]()
                for n, f in fns.items():
                    _timing.check_close(f(), want, TOL, f"{name}: {n}")
                timed = {n: (lambda f=f: (f(), sync())) for n, f in fns.items()}
                samples = _timing.time_alternating(timed, warmup=args.warmup, reps=args.reps)
                base = samples["enable_gqa"]
                label = f"{name}{', compiled' if compiled else ''}"
                results[label] = {n: {"ms": s, "median": _timing.summarize(s).median} for n, s in samples.items()}
                for n, s in samples.items():
                    st = _timing.summarize(s)
                    rows.append([label, n, st.median, f"{st.spread:.0%}", _timing.paired_ratio(s, base)])
    print(_timing.format_table(["case", "contender", "median ms", "spread", "ratio vs enable_gqa"], rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"config": cfg, "device": args.device, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
