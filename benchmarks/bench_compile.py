"""What torch.compile buys the generated nanoGPT, per compile unit: the data behind `compile_units`
in the generated modules (templates/module.py.j2).

    PYTHONPATH=. python3 benchmarks/bench_compile.py                        # speed per unit, then compile time vs n_layer
    PYTHONPATH=. python3 benchmarks/bench_compile.py --threads 1 --clock cpu  # steadier on a shared machine
    PYTHONPATH=. python3 benchmarks/bench_compile.py --quick

Speed: one model per unit, the same weights, alternated rep by rep: `none` (eager), `block` (each
layer block compiled, the rest eager) and `model` (forward compiled whole, embedding to loss);
a training step (forward, the spec's loss with targets, backward) and an eval forward (logits,
no cache), at the bench config (vocab 1024) and GPT-2's vocabulary (50257). Compile time: the
first training step of a fresh process per (unit, n_layer), with inductor's on-disk caches off,
so each compiles from scratch.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import tempfile
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks import _timing  # noqa: E402

UNITS = ("none", "block", "model")
SIZES = {"bench": dict(vocab_size=1024), "gpt2-vocab": dict(vocab_size=50257)}
SHAPE = dict(n_head=4, n_embd=256, block_size=128)
BATCH, SEQ = 8, 128


def _models(vocab: int, n_layer: int, training: bool) -> dict:
    import generated.nanogpt as ng  # noqa: PLC0415
    torch.manual_seed(0)
    first = ng.Model(vocab_size=vocab, n_layer=n_layer, **SHAPE).train(training)
    models = {u: (first if i == 0 else copy.deepcopy(first)) for i, u in enumerate(UNITS)}
    for unit, m in models.items():
        m.compile_units = {"cpu": {"train": unit, "eval": unit}, "cuda": {"train": unit, "eval": unit}}
    return models


def speed_rows(args, device: torch.device) -> list:
    rows = []
    sync = _timing.synchronizer(device)
    configs = {"quick": dict(vocab_size=128)} if args.quick else SIZES
    for config, size in configs.items():
        vocab = size["vocab_size"]
        idx = torch.randint(0, vocab, (BATCH, SEQ), device=device)
        targets = torch.randint(0, vocab, (BATCH, SEQ), device=device)
        for pass_name in ("train", "eval"):
            training = pass_name == "train"
            models = {u: m.to(device) for u, m in _models(vocab, args.layers, training).items()}

            def fn(m):
                def run():
                    if training:
                        m(idx, targets).loss.backward()
                    else:
                        with torch.no_grad():
                            m(idx, use_cache=False)
                    sync()
                return run
            fns = {u: fn(m) for u, m in models.items()}
            setup = {u: (lambda m=m: m.zero_grad(set_to_none=True)) for u, m in models.items()}
            first = {}
            with _timing.snf_compile(True):
                for u, f in fns.items():
                    setup[u]()
                    t0 = time.perf_counter()
                    f()
                    first[u] = time.perf_counter() - t0
                samples = _timing.time_alternating(fns, warmup=args.warmup, reps=args.reps, setup=setup,
                                                   clock=_timing.clock_of(args.clock))
            for u in UNITS:
                s = _timing.summarize(samples[u])
                rows.append([config, pass_name, u, s.median, f"{_timing.paired_ratio(samples[u], samples['none']):.3f}",
                             f"{first[u]:.1f}", f"{100 * s.spread:.0f}%"])
            print(f"  done: {config} {pass_name}", flush=True)
    return rows


def compile_time(unit: str, n_layer: int, device: str) -> float:
    """Seconds of the first training step, in a fresh process with inductor's caches off."""
    code = (f"import sys, time, torch; sys.path.insert(0, {str(ROOT)!r}); import generated.nanogpt as ng; "
            f"m = ng.Model(vocab_size=1024, n_layer={n_layer}, n_head=4, n_embd=256, block_size=128).to({device!r}).train(); "
            f"m.compile_units = {{{device!r}: {{'train': {unit!r}, 'eval': {unit!r}}}}}; "
            f"i = torch.randint(0, 1024, ({BATCH}, {SEQ}), device={device!r}); t0 = time.perf_counter(); "
            f"m(i, i).loss.backward(); print(time.perf_counter() - t0)")
    env = dict(os.environ, SNF_COMPILE="1", TORCHINDUCTOR_FX_GRAPH_CACHE="0", TORCHINDUCTOR_AUTOGRAD_CACHE="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


# A session of 30 eval calls of varied sizes (issue 18): batch 1-8, 16-128 tokens, half of them fed
# a cache of 8-64 tokens from the call before, as an evaluation loop and a chat do.
SESSION = (f"import random, sys, time, torch; sys.path.insert(0, {{root!r}}); import generated.nanogpt as ng; "
           f"from torch._dynamo.eval_frame import _debug_get_cache_entry_list as entries; "
           f"torch.manual_seed(0); m = ng.Model(vocab_size=1024, n_layer=4, n_head=4, n_embd=256, block_size=256)"
           f".to({{device!r}}).eval(); m.compile_units = {{{{{{device!r}}: {{{{'train': 'none', 'eval': {{unit!r}}}}}}}}}}; "
           f"r = random.Random(0); calls = [(r.randint(1, 8), r.randint(16, 128), r.choice([0, r.randint(8, 64)])) "
           f"for _ in range(30)]\n"
           f"def run():\n"
           f"    t0 = time.perf_counter()\n"
           f"    with torch.no_grad():\n"
           f"        for b, t, p in calls:\n"
           f"            c = m(torch.randint(0, 1024, (b, p), device={{device!r}}), use_cache=True) if p else None\n"
           f"            m(torch.randint(0, 1024, (b, t), device={{device!r}}), past_keys=c and c.new_keys, "
           f"past_values=c and c.new_values)\n"
           f"    return time.perf_counter() - t0\n"
           f"first, second = run(), run()\n"
           f"print(len(entries(ng.Block.forward.__wrapped__.__code__)), first, second)")


def session_cost(unit: str, device: str) -> list:
    """[graphs per block, the session's first run (compiling), its second run] in a fresh process,
    inductor's caches off."""
    code = SESSION.format(root=str(ROOT), device=device, unit=unit)
    env = dict(os.environ, SNF_COMPILE="1", TORCHINDUCTOR_FX_GRAPH_CACHE="0", TORCHINDUCTOR_AUTOGRAD_CACHE="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    graphs, first, second = out.stdout.split()
    return [unit, int(graphs), f"{float(first):.1f}", f"{float(second):.2f}"]


# The decode step of generate, the unit snf compiles by default where it pays: its eager and
# compiled step times and what compiling it costs on an empty and on a warm cache, by model size
# (the parameter and buffer tensors its graph reads): the data behind _RATIO, _COLD and _WARM in
# snf/runtime/compiling.py. Each row is two fresh processes sharing one inductor cache folder.
DECODE_CASES = {
    "nanogpt 1x256": ("nanogpt", dict(vocab_size=1024, n_layer=1, n_head=4, n_embd=256, block_size=512)),
    "nanogpt 4x256": ("nanogpt", dict(vocab_size=1024, n_layer=4, n_head=4, n_embd=256, block_size=512)),
    "nanogpt 12x256": ("nanogpt", dict(vocab_size=1024, n_layer=12, n_head=4, n_embd=256, block_size=512)),
    "gpt2-small": ("nanogpt", dict(block_size=512)),
    "llama3 4x256": ("llama3", dict(vocab_size=32000, n_layer=4, n_head=4, n_kv_head=2, n_embd=256, mlp_hidden=688,
                                    block_size=512, rope_scaling=0)),
    "mixtral 4x256": ("mixtral", dict(vocab_size=32000, n_layer=4, n_head=4, n_kv_head=2, n_embd=256, mlp_hidden=512,
                                      n_expert=8, n_expert_tok=2, block_size=512)),
}
DECODE_CHILD = """
import json, sys, time, torch
sys.path.insert(0, {root!r})
import importlib
from snf.runtime.compiling import _size
mod = importlib.import_module("generated." + {spec!r})
torch.manual_seed(0)
m = mod.Model(**{config!r}).eval().to({device!r})
p = torch.randint(0, m.config.vocab_size, ({batch}, 16)).to({device!r})
def run(n, compile):
    t0 = time.perf_counter(); m.generate(p, n, temperature=0, compile=compile)
    if {device!r} == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0
out = {{"tensors": _size(m)}}
run(2, False)
out["eager_ms"] = min((run(65, False) - run(1, False)) / 64 for _ in range(3)) * 1e3
out["compile_s"] = run(2, True) - run(2, False)  # one decode step, compiling (bucket 128)
out["compiled_ms"] = min((run(65, True) - run(1, True)) / 64 for _ in range(3)) * 1e3
print(json.dumps(out))
"""


def decode_figures(name: str, batch: int, device: str, folder: Path) -> list:
    spec, config = DECODE_CASES[name]
    code = DECODE_CHILD.format(root=str(ROOT), spec=spec, config=config, batch=batch, device=device)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(folder))
    env.pop("SNF_COMPILE", None)
    runs = [json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                      check=True).stdout.strip().splitlines()[-1]) for _ in range(2)]
    cold, warm = runs
    eager, compiled = min(r["eager_ms"] for r in runs), min(r["compiled_ms"] for r in runs)
    saving = (eager - compiled) / 1e3
    return [name, batch, cold["tensors"], f"{eager:.2f}", f"{compiled:.2f}", f"{compiled / eager:.2f}",
            f"{cold['compile_s']:.1f}", f"{warm['compile_s']:.1f}", f"{warm['compile_s'] / cold['compile_s']:.2f}",
            f"{cold['compile_s'] / saving:.0f}" if saving > 0 else "never"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _timing.add_common_args(ap, reps=10, warmup=2)
    ap.add_argument("--layers", type=int, default=4, help="n_layer of the speed rows (default 4)")
    ap.add_argument("--compile-layers", default="1,4,12,24", help="n_layer values of the compile-time rows")
    ap.add_argument("--decode", nargs="*", choices=list(DECODE_CASES), metavar="CASE",
                    help="only the decode step's figures, for these cases (all without a name): "
                         + ", ".join(DECODE_CASES))
    args = ap.parse_args(argv)
    if args.decode is not None:
        return decode_table(args.decode or list(DECODE_CASES), args.device)
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.reps, args.warmup, args.layers, args.compile_layers = 2, 1, 1, "1"
    print("\n".join(_timing.environment_lines("--threads" if args.threads else "")))
    print(f"device {device}; clock {args.clock}; reps {args.reps}, warmup {args.warmup}; n_layer {args.layers}, "
          f"n_embd {SHAPE['n_embd']}, batch {BATCH} x {SEQ}", flush=True)
    rows = speed_rows(args, device)
    print(_timing.format_table(["config", "pass", "unit", "ms", "vs none", "first call s", "IQR"], rows))
    if args.no_compile:
        return 0
    print("\n30 varied eval calls (bench config, block_size 256), s (compiling from scratch, caches off):")
    print(_timing.format_table(["eval unit", "graphs per block", "first 30 calls", "same 30 again"],
                               [session_cost(u, args.device) for u in ("none", "block")]))
    layers = [int(n) for n in args.compile_layers.split(",")]
    times = [[n] + [f"{compile_time(u, n, args.device):.1f}" for u in ("block", "model")] for n in layers]
    print("\nfirst training step, s (compiling from scratch, caches off):")
    print(_timing.format_table(["n_layer", "block", "model"], times))
    return decode_table(["nanogpt 1x256"] if args.quick else list(DECODE_CASES), args.device)


def decode_table(names: list, device: str) -> int:
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            for batch in (1, 4):
                rows.append(decode_figures(name, batch, device, Path(scratch) / f"{name}-{batch}".replace(" ", "_")))
                print(f"  done: {name} batch {batch}", flush=True)
    print("\ngenerate's decode step (bucket 128), eager and compiled ms per step, compile s on an empty and a warm "
          "cache:")
    print(_timing.format_table(["model", "batch", "tensors", "eager ms", "compiled ms", "ratio", "cold s", "warm s",
                                "warm / cold", "break-even steps (cold)"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
