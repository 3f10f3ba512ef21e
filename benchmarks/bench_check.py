"""`snfc check specs/` as a user runs it: a fresh process each time, start-up and imports included.

Issue 19's budget for the whole process is 0.25 s plus 0.25 ms per spec line. Issue 35 adds
specs/qwen3_moe.snf generated at 1000 layers and 1024 experts (written to a temporary folder), whose
budget is 0.3 s: check's cost follows the spec, not its default sizes, so it takes what the same
spec at 2 layers and 4 experts takes (the row below it). Each run is timed by the wall clock and by
its CPU time (user and system, which other processes on a shared machine do not add to); the
medians are printed beside the budgets, with the load average.

    PYTHONPATH=. python3 benchmarks/bench_check.py                     # 20 runs: ~10 s
    PYTHONPATH=. python3 benchmarks/bench_check.py --against ../main   # alternating with another checkout
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET_S, PER_LINE_S = 0.25, 0.00025
LARGE_BUDGET_S = 0.3  # issue 35: a 1000-layer, 1024-expert spec, whole process
SIZES = ((1000, 1024), (2, 4))  # (n_layer, n_expert) of the generated specs


def _cpu_line() -> str:
    """The CPU the table was taken on (benchmarks/_timing.py; imported late: it imports torch)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks._timing import cpu_line  # noqa: PLC0415

    return cpu_line()


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


def sized_qwen(folder: Path, layers: int, experts: int) -> Path:
    """specs/qwen3_moe.snf with the defaults `n_layer = layers`, `n_expert = experts` and 2 experts per
    token (which 4 experts allow), and a `dense_layers` of `layers` zeros, in `folder`."""
    text = (ROOT / "specs" / "qwen3_moe.snf").read_text()
    for name, value in (("n_layer", layers), ("n_expert", experts), ("n_expert_tok", 2)):
        text, n = re.subn(rf"(?m)^(  {name} : int = )\d+", rf"\g<1>{value}", text)
        assert n == 1, f"no `{name} : int = ...` in specs/qwen3_moe.snf"
    text, n = re.subn(r"(?m)^(  dense_layers : list\[int, n_layer\] = )\[[^\]]*\]", rf"\g<1>{[0] * layers}", text)
    assert n == 1, "no `dense_layers : list[int, n_layer] = [...]` in specs/qwen3_moe.snf"
    path = folder / f"qwen3_moe_{layers}x{experts}.snf"
    path.write_text(text)
    return path


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
    with tempfile.TemporaryDirectory() as tmp:
        # what is checked: (label, paths, budget)
        cases = [(" ".join(args.paths), args.paths, budget)] + [
            (f"qwen3_moe at {layers} x {experts}", [str(sized_qwen(Path(tmp), layers, experts))], LARGE_BUDGET_S)
            for layers, experts in SIZES]
        for _ in range(args.warmup):
            for checkout in checkouts.values():
                run_once(checkout, args.paths, args.python)
        load = os.getloadavg()[0]
        samples: dict[tuple, list[tuple[float, float]]] = {(c, name): [] for c in range(len(cases)) for name in checkouts}
        for _ in range(args.runs):  # alternated, so a burst of load lands on both
            for c, (_, paths, _) in enumerate(cases):
                for name, checkout in checkouts.items():
                    samples[(c, name)].append(run_once(checkout, paths, args.python))

    print(f"snfc check {' '.join(args.paths)}: {n_specs} specs, {lines} lines; budget {BUDGET_S:.2f} s + "
          f"{PER_LINE_S * 1000:.2f} ms/line = {budget:.3f} s")
    print(f"specs/qwen3_moe.snf generated at {SIZES[0][0]} layers x {SIZES[0][1]} experts: budget "
          f"{LARGE_BUDGET_S:.3f} s; at {SIZES[1][0]} x {SIZES[1][1]} for comparison")
    print(f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after, on {os.cpu_count()} CPUs; "
          f"{args.runs} runs each")
    print(_cpu_line())
    print("| checkout | checked | median wall s | min wall s | median CPU s | budget s | within budget (wall) |")
    print("|---|---|---|---|---|---|---|")
    for (c, name), runs in samples.items():
        label, _, limit = cases[c]
        walls, cpus = [w for w, _ in runs], [cpu for _, cpu in runs]
        wall = statistics.median(walls)
        print(f"| {name} ({checkouts[name]}) | {label} | {wall:.3f} | {min(walls):.3f} | "
              f"{statistics.median(cpus):.3f} | {limit:.3f} | {'yes' if wall <= limit else 'no'} |")
    if args.json:
        args.json.write_text(json.dumps({"budget": budget, "lines": lines, "specs": n_specs, "samples": [
            {"checkout": name, "checked": cases[c][0], "budget": cases[c][2],
             "runs": [{"wall": w, "cpu": cpu} for w, cpu in runs]} for (c, name), runs in samples.items()]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
