"""The design snf did not take: tiered compiling, where generate's first decode steps run eagerly
while the step compiles in a background thread, and the compiled step takes over once ready.

snf instead compiles a step only where the measured saving beats the measured cost (docs/language.md,
section 10). This script measures what tiering would give on this machine, for one model at batch 1:

* `eager`: the decode step's time alone;
* `compile alone`: the first compiled decode step (an empty inductor cache), nothing else running;
* `compile behind`: the same compile in a background thread while the main thread decodes eagerly,
  and the eager steps' time meanwhile (the two share the cores and Python's lock);
* `compiled`: the compiled step's time once ready.

From them, the time to N tokens each design gives: `eager` (the rule's choice where compiling does not
pay), `tiered` (eager steps at the slowed speed until the compile is ready, then compiled), and
`compile first` (SNF_COMPILE=1: wait for the compile, then compiled).

    PYTHONPATH=. python3 benchmarks/bench_tiering.py                  # GPT-2 small: a few minutes
    PYTHONPATH=. python3 benchmarks/bench_tiering.py --model 2x64
"""

from __future__ import annotations

import argparse
import copy
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODELS = {"gpt2-small": dict(block_size=1024), "2x64": dict(n_layer=2, n_head=4, n_embd=64, block_size=1024)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=list(MODELS), default="gpt2-small")
    ap.add_argument("--steps", type=int, default=40, help="eager steps timed alone")
    ap.add_argument("--alone", action="store_true", help=argparse.SUPPRESS)  # the child: compile, print its seconds
    args = ap.parse_args(argv)
    import generated.nanogpt as ng
    from snf.runtime import generate as runtime  # generate's loop reads runtime._sample at each token
    if args.alone:
        return compile_alone(args, ng)
    saved = os.environ.get("TORCHINDUCTOR_CACHE_DIR"), runtime._sample
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="snf-tiering-")  # an empty cache
    try:
        return measure(args, ng)
    finally:
        if saved[0] is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR")
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = saved[0]
        runtime._sample = saved[1]


def compile_alone(args, ng) -> int:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="snf-tiering-")
    import torch
    torch.manual_seed(0)
    model = ng.Model(**MODELS[args.model]).eval()
    prompt = torch.randint(0, model.config.vocab_size, (1, 16))
    model.generate(prompt, 2, temperature=0, compile=False)
    t0 = time.perf_counter()
    model.generate(prompt, 2, temperature=0, compile=True)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    model.generate(prompt, 2, temperature=0, compile=False)
    print(first - (time.perf_counter() - t0))
    return 0


def measure(args, ng) -> int:
    import torch
    torch.manual_seed(0)
    model = ng.Model(**MODELS[args.model]).eval()
    twin = copy.deepcopy(model)  # the background thread's, so the two decode loops share no state
    prompt = torch.randint(0, model.config.vocab_size, (1, 16))
    from snf.runtime import generate as runtime
    stamps: list = []
    sample = runtime._sample

    def timed(*a, **k):
        out = sample(*a, **k)
        if threading.current_thread() is threading.main_thread():
            stamps.append(time.perf_counter())
        return out
    runtime._sample = timed

    def eager_steps(n: int) -> list:
        stamps.clear()
        model.generate(prompt, n, temperature=0, compile=False)
        return [b - a for a, b in zip(stamps, stamps[1:])]

    eager_steps(4)
    alone = sorted(eager_steps(args.steps))[args.steps // 2]

    done = {}

    def compile_behind():
        t0 = time.perf_counter()
        twin.generate(prompt, 2, temperature=0, compile=True)  # one decode step: compiles bucket 128, batch 1
        done["behind"] = time.perf_counter() - t0

    worker = threading.Thread(target=compile_behind)
    stamps.clear()
    worker.start()
    while worker.is_alive():
        model.generate(prompt, 16, temperature=0, compile=False)
    worker.join()
    gaps = sorted(b - a for a, b in zip(stamps, stamps[1:]) if b - a < 1.0)  # within one generate call
    slowed = gaps[len(gaps) // 2]
    during = len(stamps)

    # the same compile in the foreground: a fresh process with an empty cache of its own
    child = subprocess.run([sys.executable, __file__, "--model", args.model, "--alone"], capture_output=True,
                           text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True)
    alone_compile = float(child.stdout.split()[-1])
    stamps.clear()
    model.generate(prompt, 64, temperature=0, compile=True)
    compiled = sorted(b - a for a, b in zip(stamps, stamps[1:]))[31]

    from benchmarks._timing import cpu_line  # noqa: PLC0415

    print(cpu_line())
    print(f"{args.model}, batch 1, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print("| measure | value |")
    print("|---|---|")
    print(f"| eager step, alone | {alone * 1e3:.2f} ms |")
    print(f"| eager step, while compiling behind | {slowed * 1e3:.2f} ms ({slowed / alone:.2f}x) |")
    print(f"| compile alone (bucket 128, another process) | {alone_compile:.1f} s |")
    print(f"| compile behind (bucket 128) | {done['behind']:.1f} s ({during} eager tokens meanwhile) |")
    print(f"| compiled step | {compiled * 1e3:.2f} ms |")
    print("\n| new tokens | eager s | tiered s | compile first s |")
    print("|---|---|---|---|")
    for n in (32, 128, 512, 2048):
        eager = n * alone
        ready = done["behind"]
        by_then = min(n, int(ready / slowed))
        idle = 0.0 if by_then == n else max(0.0, ready - by_then * slowed)  # the last eager step to the switch
        tiered = by_then * slowed + idle + (n - by_then) * compiled
        first_compile = alone_compile + n * compiled
        print(f"| {n} | {eager:.2f} | {tiered:.2f} | {first_compile:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
