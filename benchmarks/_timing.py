"""Shared timing helpers for the snfc benchmarks (bench_gpt2.py, bench_generate.py).

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
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, list[float]]:
    """Time each callable `reps` times, alternating them in the order given; return ms per call.

    `warmup` untimed rounds (every callable once per round, same order) come first; compiling
    callables must compile there. `setup[name]`, if given, runs untimed before every call of
    `name` (e.g. zeroing gradients). Each callable must finish its work before returning (on CPU
    it does; a CUDA callable must synchronize itself). `clock` is wall time by default;
    `time.process_time` counts this process's CPU time instead (see `clock_of`).
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
                t0 = clock()
                fns[name]()
                samples[name].append((clock() - t0) * 1e3)
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


def cpu_line(threads: Optional[int] = None) -> str:
    """The CPU a table was measured on, to print with it: the model name and vendor (/proc/cpuinfo, else
    platform), the logical CPUs, the vector ISA torch's kernels use, and the threads used (torch's count
    unless `threads` says otherwise). A figure from one CPU can differ several-fold on another."""
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    model = info.get("model name") or platform.processor() or platform.machine()
    vendor = info.get("vendor_id", "")
    capability = torch.backends.cpu.get_cpu_capability()
    used = torch.get_num_threads() if threads is None else threads
    family = f", family {info['cpu family']} model {info['model']}" if "cpu family" in info and "model" in info else ""
    return (f"CPU: {model}" + (f" ({vendor}{family})" if vendor and vendor not in model else family)
            + f", {os.cpu_count()} logical CPUs, torch's kernels {capability}, {used} thread{'s' * (used != 1)} used")


def environment_lines(threads_set_by: str = "") -> list[str]:
    """What a reader needs to compare runs: the CPU, versions, threads.

    `threads_set_by`: say who changed torch's thread count (e.g. "--threads"), if anyone did.
    """
    if threads_set_by:
        how = f"set by {threads_set_by}"
    elif os.environ.get("OMP_NUM_THREADS"):
        how = f"from OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"
    else:
        how = "torch's default, unchanged"
    lines = [
        cpu_line(),
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


# ---------------------------------------------------------------------------- devices, memory, MFU

# dense peak TFLOP/s per GPU, (bfloat16/float16 tensor cores, float32 without TF32), from the
# vendor's data sheets; matched against torch.cuda.get_device_name() in this order
PEAK_TFLOPS = (
    ("H100 PCIe", (756.0, 51.2)),
    ("H100 NVL", (835.0, 60.0)),
    ("H100", (989.4, 66.9)),  # SXM5 (e.g. "NVIDIA H100 80GB HBM3")
    ("H200", (989.4, 66.9)),
    ("A100", (312.0, 19.5)),
    ("L40S", (362.1, 91.6)),
    ("L4", (121.0, 30.3)),
)


def peak_flops(device: torch.device, low_precision: bool) -> tuple[float, str] | None:
    """(peak FLOP/s, where the figure comes from) for a CUDA device this table knows, else None.
    MFU is not reported on a CPU: there is no agreed peak to divide by."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, (low, fp32) in PEAK_TFLOPS:
        if key in name:
            which = "bf16 dense" if low_precision else "fp32"
            return (low if low_precision else fp32) * 1e12, f"{name}: {key} {which} peak"
    return None


def synchronizer(device: torch.device) -> Callable[[], None]:
    """What a timed callable calls last, so that its time covers its work (a no-op on a CPU)."""
    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


def _proc_status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def peak_memory(fn: Callable[[], object], device: torch.device) -> Optional[int]:
    """Bytes: on CUDA, torch.cuda.max_memory_allocated() during fn (weights included); on a CPU (Linux
    only, else None), how far the process's resident memory rose above what it held before fn
    (VmHWM after resetting it through /proc/self/clear_refs, minus VmRSS before, after
    malloc_trim returned the allocator's free memory): what fn allocated at its peak, weights
    excluded. tracemalloc does not see torch's allocations, and RSS covers compiled code too."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated(device)
    try:
        import ctypes  # noqa: PLC0415

        gc.collect()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        before = _proc_status("VmRSS:")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
    except (OSError, KeyError):
        return None
    fn()
    return _proc_status("VmHWM:") - before


def clock_of(name: str) -> Callable[[], float]:
    """`wall`: time.perf_counter; `cpu`: time.process_time, this process's CPU time. With one
    thread (--threads 1) CPU time is the work done, whatever else the machine runs: the steadiest
    figure on a shared machine, though caches shared with other processes still slow it."""
    return {"wall": time.perf_counter, "cpu": time.process_time}[name]


def add_common_args(parser: argparse.ArgumentParser, *, reps: int, warmup: int) -> None:
    parser.add_argument("--reps", type=int, default=reps, help=f"timed reps per contender and row (default {reps})")
    parser.add_argument("--warmup", type=int, default=warmup,
                        help=f"untimed warmup rounds per row; compiled rows compile here (default {warmup})")
    parser.add_argument("--quick", action="store_true",
                        help="tiny smoke run: small model, few reps (numbers not meaningful)")
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled rows")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads(N) first (default: leave torch's default alone)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall time (default), or this process's CPU time (with --threads 1, on a shared "
                             "machine; see _timing.clock_of)")
