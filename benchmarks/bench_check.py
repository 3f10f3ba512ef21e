"""`snfc check specs/` as a user runs it: a fresh process each time, start-up and imports included.

Issue 19's budget for the whole process is 0.25 s plus 0.25 ms per spec line. Each run is timed
by the wall clock and by its CPU time (user and system, which other processes on a shared machine
do not add to); the medians are printed beside the budget, with the load average.

    PYTHONPATH=. python3 benchmarks/bench_check.py                     # 20 runs: ~10 s
    PYTHONPATH=. python3 benchmarks/bench_check.py --against ../main   # alternating with another checkout
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET_S, PER_LINE_S = 0.25, 0.00025


def spec_lines(paths: list[str]) -> tuple[int, int]:
    """(specs, lines) under `paths`, as `snfc check` finds them."""
    files = []
    for p in map(Path, paths):
        files += sorted(p.rglob("*.snf")) if p.is_dir() else [p]
    return len(files), sum(len(f.read_bytes().splitlines()) for f in files)


def run_once(checkout: Path, paths: list[str], python: str) -> tuple[float, float]:
    """(wall, CPU) seconds of one `python -m snf check paths` in `checkout` (`-m` puts the working
    folder first on sys.path: that checkout's snf is the one run)."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # time it as installed: with its .pyc files
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    p = subprocess.run([python, "-m", "snf", "check", *paths], cwd=checkout, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"snfc check failed in {checkout}:\n{p.stdout}{p.stderr}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="*", default=["specs/"], help="what to check (default specs/)")
    parser.add_argument("--runs", type=int, default=20, help="timed runs per checkout")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs first (they write the .pyc files)")
    parser.add_argument("--against", type=Path, help="another checkout, run alternately with this one")
    parser.add_argument("--python", default=sys.executable, help="the interpreter (default this one)")
    parser.add_argument("--json", type=Path, help="write every sample here")
    args = parser.parse_args(argv)

    checkouts = {"this": ROOT} | ({"against": args.against.resolve()} if args.against else {})
    n_specs, lines = spec_lines([str(ROOT / p) for p in args.paths])
    budget = BUDGET_S + PER_LINE_S * lines
    for _ in range(args.warmup):
        for checkout in checkouts.values():
            run_once(checkout, args.paths, args.python)
    load = os.getloadavg()[0]
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in checkouts}
    for _ in range(args.runs):  # alternated, so a burst of load lands on both
        for name, checkout in checkouts.items():
            samples[name].append(run_once(checkout, args.paths, args.python))

    print(f"snfc check {' '.join(args.paths)}: {n_specs} specs, {lines} lines; budget {BUDGET_S:.2f} s + "
          f"{PER_LINE_S * 1000:.2f} ms/line = {budget:.3f} s")
    print(f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after, on {os.cpu_count()} CPUs; "
          f"{args.runs} runs each")
    print("| checkout | median wall s | min wall s | median CPU s | within budget (wall) |")
    print("|---|---|---|---|---|")
    for name, runs in samples.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        wall = statistics.median(walls)
        print(f"| {name} ({checkouts[name]}) | {wall:.3f} | {min(walls):.3f} | {statistics.median(cpus):.3f} | "
              f"{'yes' if wall <= budget else 'no'} |")
    if args.json:
        args.json.write_text(json.dumps({"budget": budget, "lines": lines, "specs": n_specs, "samples": {
            name: [{"wall": w, "cpu": c} for w, c in runs] for name, runs in samples.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
