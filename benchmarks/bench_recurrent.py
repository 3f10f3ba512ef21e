"""Recurrent layers: specs/mamba2.snf against transformers' Mamba2ForCausalLM on the same weights.

transformers runs its own torch code here (mamba_ssm and causal-conv1d are CUDA kernels, not
installed on a CPU); snfc runs snf/runtime/recurrent.py (chunked scan for the prompt, a one-token
update per decode step). A Mamba2 of mamba2-130m's shape (24 layers, 768 wide, 24 heads of 64, a
state of 128, one group), random weights, float32, built by transformers and loaded with
snf.from_pretrained, is timed in one process, the two alternated rep by rep (_timing.py):

* prefill: one forward of a 2,048-token prompt that returns the states (what generate's first
  step does);
* decode: one token fed with the states left by a prompt of 64, and of 4,096, tokens (the time per
  generated token; a recurrent state is the same size at every position, so the two should match):
  snfc as generate runs it (the states in buffers made once, written over in place each step), and
  as forward called with the states the last call returned ("fed back": new states each call);
* peak memory: the resident memory's rise during the 2,048-token prefill (weights excluded).

    PYTHONPATH=. python3 benchmarks/bench_recurrent.py            # ~3 minutes on 2 cores
    PYTHONPATH=. python3 benchmarks/bench_recurrent.py --quick    # a 2-layer model, for the tests
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import _timing  # noqa: E402

SHAPES = {
    "full": dict(vocab_size=50288, hidden_size=768, num_heads=24, head_dim=64, state_size=128, n_groups=1,
                 num_hidden_layers=24, conv_kernel=4, chunk_size=256),
    "quick": dict(vocab_size=97, hidden_size=32, num_heads=8, head_dim=8, state_size=16, n_groups=2,
                  num_hidden_layers=2, conv_kernel=4, chunk_size=16),
}


def _models(shape: dict, folder: Path):
    import transformers

    import snf
    torch.manual_seed(0)
    hf = transformers.Mamba2ForCausalLM(transformers.Mamba2Config(**shape, bos_token_id=None, eos_token_id=None,
                                                                  pad_token_id=None)).eval()
    hf.save_pretrained(folder)
    return snf.from_pretrained(folder), hf


def _ours_decode(model, prompt: torch.Tensor):
    """generate's decode step: the states in buffers made once, each step writing over them in place."""
    from snf.runtime.generate import _decode
    from snf.runtime.writes import _cache_buffers
    out = model(prompt, use_cache=True)
    buffers = {"past_conv": _cache_buffers(out.new_conv, None, 0), "past_ssm": _cache_buffers(out.new_ssm, None, 0)}
    return lambda: _decode(model, prompt[:, -1:], prompt.size(1), None, **buffers)


def _ours_fed_back(model, prompt: torch.Tensor):
    """forward called as a user would, fed the states the last call returned (new ones each call)."""
    out = model(prompt, use_cache=True)
    return lambda: model(prompt[:, -1:], past_conv=out.new_conv, past_ssm=out.new_ssm, use_cache=True)


def _theirs_decode(hf, prompt: torch.Tensor):
    out = hf(prompt, use_cache=True)
    return lambda: hf(prompt[:, -1:], cache_params=out.cache_params, use_cache=True)


def main(argv: list | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    shape = SHAPES["quick" if args.quick else "full"]
    prefill, short, long = (64, 8, 64) if args.quick else (2048, 64, 4096)
    os.environ.setdefault("SNF_COMPILE", "0")  # the recurrent kernels as they run eagerly; see the README
    rows = []
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        ours, hf = _models(shape, Path(tmp))
        vocab = shape["vocab_size"]
        idx = torch.randint(0, vocab, (1, max(prefill, long)), generator=torch.Generator().manual_seed(1))
        first = idx[:, :prefill]
        want = hf(first).logits
        # float32 over 2,048 tokens and 24 layers: each side rounds its own way. Measured against the same
        # model in float64: snfc 4.1e-3, transformers 7.9e-3 (of logits up to 15.8), so the bound is 1e-3
        # of the largest logit; the 1e-5 comparisons are tests/test_from_pretrained.py's, at short lengths
        _timing.check_close(ours(first).logits, want, 1e-3 * want.abs().max().item(), "prefill logits")
        samples = _timing.time_alternating({"snfc": lambda: ours(first, use_cache=True),
                                            "transformers": lambda: hf(first, use_cache=True)},
                                           warmup=1, reps=args.reps)
        rows.append(_row(f"prefill {prefill} tokens", samples))
        for length in (short, long):
            prompt = idx[:, :length]
            steps = {"snfc": _ours_decode(ours, prompt), "snfc fed back": _ours_fed_back(ours, prompt),
                     "transformers": _theirs_decode(hf, prompt)}
            samples = _timing.time_alternating(steps, warmup=2, reps=max(args.reps, 20))
            rows.append(_row(f"decode 1 token after {length}", samples))
        peaks = {name: _timing.peak_memory(fn, torch.device("cpu"))
                 for name, fn in (("snfc", lambda: ours(first, use_cache=True)),
                                  ("transformers", lambda: hf(first, use_cache=True)))}
    print(_timing.format_table(["case", "snfc ms", "snfc fed back ms", "transformers ms", "snfc / transformers"],
                               rows))
    mib = {k: (v / 2 ** 20 if v is not None else float("nan")) for k, v in peaks.items()}
    print(f"\npeak memory of the {prefill}-token prefill above the weights: snfc {mib['snfc']:.0f} MiB, "
          f"transformers {mib['transformers']:.0f} MiB ({_timing.ratio(mib['snfc'], mib['transformers']):.2f}x)")
    decode = {r[0]: r[1] for r in rows if r[0].startswith("decode")}  # generate's step
    a, b = decode[f"decode 1 token after {short}"], decode[f"decode 1 token after {long}"]
    print(f"snfc decode after {long} / after {short}: {_timing.ratio(b, a):.2f}")
    print("\n".join(_timing.environment_lines("--threads" if args.threads else "")))
    return 0


def _row(case: str, samples: dict) -> list:
    ours, theirs = (_timing.summarize(samples[k]).median for k in ("snfc", "transformers"))
    fed = _timing.summarize(samples["snfc fed back"]).median if "snfc fed back" in samples else None
    return [case, round(ours, 2), round(fed, 2) if fed is not None else "-", round(theirs, 2),
            round(_timing.ratio(ours, theirs), 2)]


if __name__ == "__main__":
    sys.exit(main())
