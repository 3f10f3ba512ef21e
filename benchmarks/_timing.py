"""Shared timing helpers for the snfc benchmarks (bench_gpt2.py, and later the KV-cache/generate one).

Method: the contenders run in one process, *alternated* rep by rep (A, B, A, B, ...), after
untimed warmup calls (which is also where torch.compile compiles), with the garbage collector
off while timing. Each reports the median of its reps, so a burst of load from another process
on a shared machine spreads over both contenders instead of landing on one.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import platform
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Optional, Sequence

import torch


@dataclass(frozen=True)
class Stats:
    """Summary of one contender's timed reps, in milliseconds."""

    n: int
    median: float
    p25: float
    p75: float
    min: float

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0.03 = 3%): a noise indicator."""
        return (self.p75 - self.p25) / self.median if self.median else 0.0


def summarize(samples_ms: Sequence[float]) -> Stats:
    xs = sorted(samples_ms)
    if not xs:
        raise ValueError("no samples")
    if len(xs) >= 2:
        q = statistics.quantiles(xs, n=4, method="inclusive")
        p25, p75 = q[0], q[2]
    else:
        p25 = p75 = xs[0]
    return Stats(n=len(xs), median=statistics.median(xs), p25=p25, p75=p75, min=xs[0])


@contextlib.contextmanager
def snf_compile(enabled: bool) -> Iterator[None]:
    """Set SNF_COMPILE for the generated modules (read at call time); restore it afterwards."""
    old = os.environ.get("SNF_COMPILE")
    os.environ["SNF_COMPILE"] = "1" if enabled else "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SNF_COMPILE", None)
        else:
            os.environ["SNF_COMPILE"] = old


def time_alternating(
    fns: Mapping[str, Callable[[], object]],
    *,
    warmup: int,
    reps: int,
    setup: Optional[Mapping[str, Callable[[], object]]] = None,
) -> dict[str, list[float]]:
    """Time each callable `reps` times, alternating them in the order given; return ms per call.

    `warmup` untimed rounds (every callable once per round, same order) come first; compiling
    callables must compile there. `setup[name]`, if given, runs untimed before every call of
    `name` (e.g. zeroing gradients). Each callable must finish its work before returning (on CPU
    it does; a CUDA callable must synchronize itself).
    """
    setup = setup or {}
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            if name in setup:
                setup[name]()
            fns[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(reps):
            for name in names:
                if name in setup:
                    setup[name]()
                t0 = time.perf_counter()
                fns[name]()
                samples[name].append((time.perf_counter() - t0) * 1e3)
    finally:
        if was_enabled:
            gc.enable()
    return samples


def ratio(ours: float, theirs: float) -> float:
    return ours / theirs if theirs else float("nan")


def paired_ratio(ours_ms: Sequence[float], theirs_ms: Sequence[float]) -> float:
    """Median of the per-rep ratios ours[i] / theirs[i].

    Rep i of each contender ran back to back, so they saw about the same load from other
    processes; on a shared machine this is steadier than the ratio of the two medians.
    """
    return statistics.median(a / b for a, b in zip(ours_ms, theirs_ms) if b)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table with columns padded to line up in a terminal."""
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


def _fmt(c: object) -> str:
    if isinstance(c, float):
        return f"{c:.2f}" if abs(c) < 100 else f"{c:.1f}"
    return str(c)


def environment_lines(threads_set_by: str = "") -> list[str]:
    """What a reader needs to compare runs: versions, threads, machine.

    `threads_set_by`: say who changed torch's thread count (e.g. "--threads"), if anyone did.
    """
    if threads_set_by:
        how = f"set by {threads_set_by}"
    elif os.environ.get("OMP_NUM_THREADS"):
        how = f"from OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"
    else:
        how = "torch's default, unchanged"
    lines = [
        f"torch {torch.__version__}, python {platform.python_version()}, {platform.machine()}",
        f"threads: torch.get_num_threads()={torch.get_num_threads()} ({how}), os.cpu_count()={os.cpu_count()}",
    ]
    try:
        import transformers  # noqa: PLC0415

        lines.append(f"transformers {transformers.__version__}")
    except ImportError:
        pass
    return lines


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.detach().float() - b.detach().float()).abs().max().item()


def check_close(ours: torch.Tensor, theirs: torch.Tensor, tol: float, what: str) -> float:
    """Abort (SystemExit) unless the two agree to `tol` (max abs difference); return the difference."""
    if ours.shape != theirs.shape:
        raise SystemExit(f"ABORT: {what}: shapes differ, {tuple(ours.shape)} vs {tuple(theirs.shape)}")
    diff = max_abs_diff(ours, theirs)
    if not diff <= tol:
        raise SystemExit(f"ABORT: {what}: max abs difference {diff:.3g} > {tol:g}; not timing")
    return diff


def add_common_args(parser: argparse.ArgumentParser, *, reps: int, warmup: int) -> None:
    parser.add_argument("--reps", type=int, default=reps, help=f"timed reps per contender and row (default {reps})")
    parser.add_argument("--warmup", type=int, default=warmup,
                        help=f"untimed warmup rounds per row; compiled rows compile here (default {warmup})")
    parser.add_argument("--quick", action="store_true",
                        help="tiny smoke run: small model, few reps (numbers not meaningful)")
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled rows")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
