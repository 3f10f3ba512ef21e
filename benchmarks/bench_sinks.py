"""Attention sinks (gpt-oss): the written-out lowering against the ways SDPA could be made to do it.

    PYTHONPATH=. python3 benchmarks/bench_sinks.py --threads 1   # full run (about a minute)
    PYTHONPATH=. python3 benchmarks/bench_sinks.py --quick       # smoke run, tiny shapes

This is the measurement behind `flash_attention(..., sinks=)`'s lowering (snf/ops/attention.py,
the `_sink_attention` helper in snf/runtime/attention.py). A sink is a logit per query head that
joins each query's softmax as one more column, whose share is then dropped. SDPA takes no such
column, so the contenders, on the same q, k, v and sinks (H query heads over KVH key/value heads):

- `written out`: `_sink_attention` (the scores, the mask, a softmax over them and the sink);
- `SDPA, zero key`: a key and a value of zeros appended, each head's sink that key's score in a
  float mask of [1, H, T, T_keys + 1] (its value adds nothing, its score takes the sink's share);
- `SDPA + lse`: SDPA, then scaled by sigmoid(lse - sink), lse the log-sum-exp of each query's
  scores, which SDPA does not return: the scores are computed a second time;
- `SDPA, no sinks`: plain SDPA, the cost of attention without them (not the same numbers).

Rows: a causal prefill of T tokens, the same with a sliding window, both forward and forward +
backward; a decode step (one query over a cache). Ratio = contender / written out (median of per-rep
ratios): above 1.0 means the written-out form is faster. The first three are checked equal first.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks import _timing  # noqa: E402
from snf.runtime.writes import _DecodeState  # noqa: E402
from snf.runtime.attention import _sink_attention, _visible_keys  # noqa: E402

TOL = 1e-4
FULL = dict(n_head=16, n_kv_head=4, head_dim=64, seq=512, window=128, cache=4096)
QUICK = dict(n_head=4, n_kv_head=2, head_dim=8, seq=16, window=4, cache=32)


def contenders(q, k, v, sinks, window, decode) -> dict:
    allowed = _visible_keys(q, k, None, True, decode, window)
    b, h, tq, hd = q.shape

    def zero_key():
        zeros = k.new_zeros(b, k.size(1), 1, hd)
        scores = torch.zeros(allowed.shape[-2:]).masked_fill(~allowed, float("-inf")).expand(1, h, tq, -1)
        mask = torch.cat([scores, sinks.reshape(1, h, 1, 1).expand(1, h, tq, 1)], dim=-1)
        return F.scaled_dot_product_attention(q, torch.cat([k, zeros], 2), torch.cat([v, zeros], 2),
                                              attn_mask=mask, enable_gqa=True)

    def with_lse():
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
        scores = q @ k.repeat_interleave(h // k.size(1), 1).transpose(-1, -2) * hd ** -0.5
        lse = torch.logsumexp(scores.masked_fill(~allowed, float("-inf")), -1, keepdim=True)
        return out * torch.sigmoid(lse - sinks.reshape(1, h, 1, 1))

    return {
        "written out": lambda: _sink_attention(q, k, v, None, causal=True, window=window, decode=decode, sinks=sinks),
        "SDPA, zero key": zero_key,
        "SDPA + lse": with_lse,
        "SDPA, no sinks": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True),
    }


def scenarios(cfg: dict) -> list:
    g = torch.Generator().manual_seed(0)
    h, kvh, hd, t, c = (cfg[k] for k in ("n_head", "n_kv_head", "head_dim", "seq", "cache"))

    def rand(*shape):
        return torch.randn(*shape, generator=g)

    sinks = rand(h)
    decode = _DecodeState(torch.tensor(c - 1), c)  # the cache full but for this step's token
    return [(f"prefill, causal, T={t}", (rand(1, h, t, hd), rand(1, kvh, t, hd), rand(1, kvh, t, hd), sinks, None,
                                         None)),
            (f"prefill, window {cfg['window']}, T={t}", (rand(1, h, t, hd), rand(1, kvh, t, hd), rand(1, kvh, t, hd),
                                                         sinks, cfg["window"], None)),
            (f"decode, cache {c}", (rand(1, h, 1, hd), rand(1, kvh, c, hd), rand(1, kvh, c, hd), sinks, None, decode))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _timing.add_common_args(parser, reps=20, warmup=2)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = QUICK if args.quick else FULL
    print("\n".join(_timing.environment_lines("--threads" if args.threads else "")))
    print(f"H={cfg['n_head']}, KVH={cfg['n_kv_head']}, head_dim={cfg['head_dim']}, batch 1, float32, eager")
    rows = []
    for name, tensors in scenarios(cfg):
        q, k, v, sinks, window, decode = tensors
        for training in ([False] if decode is not None else [False, True]):
            leaves = [t.detach().requires_grad_(training) for t in (q, k, v, sinks)]
            fns = contenders(*leaves, window, decode)
            want = fns["written out"]().detach()
            for n in ("SDPA, zero key", "SDPA + lse"):
                _timing.check_close(fns[n]().detach(), want, TOL, f"{name}: {n}")
            if training:
                fns = {n: (lambda f=f: f().sum().backward()) for n, f in fns.items()}
            with torch.set_grad_enabled(training):
                samples = _timing.time_alternating(fns, warmup=args.warmup, reps=args.reps)
            label = f"{name}{', forward + backward' if training else ''}"
            for n, s in samples.items():
                st = _timing.summarize(s)
                rows.append([label, n, st.median, f"{st.spread:.0%}", _timing.paired_ratio(s, samples["written out"])])
    print(_timing.format_table(["case", "contender", "median ms", "spread", "ratio vs written out"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
