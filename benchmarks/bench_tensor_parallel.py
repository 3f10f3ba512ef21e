"""Tensor parallelism (snf.parallelize): per-rank peak memory and training-step time of a llama3 at
tp = 1, 2, 4, one torchrun launch per tp, with ratios against tp = 1 of the same run.

    PYTHONPATH=. python3 benchmarks/bench_tensor_parallel.py            # llama3 of 107 M parameters (407 MiB fp32), CPU, gloo
    PYTHONPATH=. python3 benchmarks/bench_tensor_parallel.py --quick    # smoke run: tiny sizes, tp 1, 2
    PYTHONPATH=. python3 benchmarks/bench_tensor_parallel.py --device cuda --backend nccl   # one GPU a rank

A step is forward, cross-entropy, backward and an AdamW step on a batch of --batch sequences of
--length tokens, the same on every rank (tensor parallelism splits the model, not the batch). Time:
the median step of --reps after --warmup, the slowest rank's. Memory: the fullest rank's peak during
the steps, after sharding: on a CPU the peak resident set (VmHWM, reset once the model is sharded)
above what the process held before it built the model (each rank builds the whole model, then
shards it: that transient is left out); on CUDA torch.cuda.max_memory_allocated. "params" is the
bytes of parameters a rank holds. On a CPU the ranks share its cores, one thread each: tp above the
core count oversubscribes them, so the times say what communication and the smaller matmuls cost,
not what separate devices would gain.
"""

from __future__ import annotations

import argparse
import gc
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
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

# 107 M parameters (407 MiB fp32): 8 blocks of 11 M, a vocabulary of 8,000 so the blocks dominate
FULL = dict(vocab_size=8000, block_size=128, n_layer=8, n_head=16, n_kv_head=4, n_embd=1024, mlp_hidden=2816,
            rope_scaling=0)
QUICK = dict(vocab_size=64, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, mlp_hidden=48, rope_scaling=0)


def arguments(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, tp 1 and 2")
    p.add_argument("--tp", type=int, nargs="+", help="the tp degrees (default 1 2 4; --quick 1 2)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--length", type=int, help="tokens a sequence (default: the config's block_size, 128)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--json", help="write the rows here too")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # a rank's run: where rank 0 writes its numbers
    return p.parse_args(argv)


def worker(args) -> None:
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh

    import generated.llama3 as mod
    import snf

    cuda = args.device == "cuda"
    dist.init_process_group(args.backend)
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)
    tp = dist.get_world_size()
    from torch.distributed.tensor import parallel  # noqa: F401  what sharding imports, before the baseline

    mesh = init_device_mesh(device.type, (tp,), mesh_dim_names=("tp",))
    base = resident_kb("VmRSS")
    cfg = QUICK if args.quick else FULL
    torch.manual_seed(0)
    model = mod.Model(mod.Config(**cfg)).to(device).train()
    model = snf.parallelize(model, mesh)
    gc.collect()
    reset_peak()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    tokens = torch.randint(0, cfg["vocab_size"], (args.batch, (args.length or cfg["block_size"]) + 1),
                           generator=torch.Generator().manual_seed(1)).to(device)
    times = []
    for i in range(args.warmup + args.reps):
        dist.barrier()
        start = time.perf_counter()
        logits = model(tokens[:, :-1], use_cache=False).logits
        F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() if cuda else (resident_kb("VmHWM") - base) * 1024
    params = sum((p.to_local() if hasattr(p, "to_local") else p).nbytes for p in model.parameters())
    worst = torch.tensor([statistics.median(times), float(peak), float(params)], device=device)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        Path(args.worker).write_text(json.dumps(worst.tolist()))
    dist.destroy_process_group()


def resident_kb(field: str) -> int:
    """This process's resident set (VmRSS) or its peak (VmHWM), in KiB; ru_maxrss where /proc has none."""
    try:
        return int(re.search(rf"^{field}:\s+(\d+)", Path("/proc/self/status").read_text(), re.M).group(1))
    except (OSError, AttributeError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def reset_peak() -> None:
    """Start VmHWM again from the present resident set (Linux: clear_refs 5); elsewhere it keeps the build's peak."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def machine(device: str) -> str:
    """The processor the table was measured on: the CPU's model name and cores, or the GPU's name."""
    if device == "cuda":
        return f"{torch.cuda.get_device_name(0)} x {torch.cuda.device_count()}"
    try:
        name = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M).group(1).strip()
    except (OSError, AttributeError):
        import platform
        name = platform.processor() or platform.machine()
    return f"{name}, {os.cpu_count()} cores"


def table(rows: list, header: str, device: str) -> str:
    """The rows as a markdown table, each with its ratio against tp = 1 (the first row where it ran)."""
    one = next((r for r in rows if r["tp"] == 1), None)

    def ratio(r, key):
        return f"{r[key] / one[key]:.2f}" if one and one[key] else "-"

    lines = [header, "| tp | step ms | step / tp 1 | peak MB | peak / tp 1 | params MB a rank | params / tp 1 |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['tp']} | {r['step_ms']:.1f} | {ratio(r, 'step_ms')} | {r['peak_mb']:.1f} | {ratio(r, 'peak_mb')} "
              f"| {r['params_mb']:.1f} | {ratio(r, 'params_mb')} |" for r in rows]
    lines.append(f"\n{machine(device)}")
    cores = os.cpu_count() or 1
    over = [r["tp"] for r in rows if r["tp"] > cores]
    if device == "cpu" and over:
        lines.append(f"tp {', '.join(map(str, over))} on {cores} cores oversubscribes them (a rank a thread): "
                     "its times are not what separate devices would give")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = arguments(argv)
    if args.worker:
        worker(args)
        return 0
    degrees = args.tp or ([1, 2] if args.quick else [1, 2, 4])
    gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for tp in degrees:
            if gpus and tp > gpus:
                print(f"tp {tp}: skipped, {gpus} GPU(s)")
                continue
            out = Path(tmp) / f"tp{tp}.json"
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(tp),
                       __file__, "--worker", str(out), "--batch", str(args.batch), "--reps", str(args.reps),
                       "--warmup", str(args.warmup), "--device", args.device, "--backend", args.backend] + \
                (["--quick"] if args.quick else []) + (["--length", str(args.length)] if args.length else [])
            env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                return 1
            step, peak, params = json.loads(out.read_text())
            rows.append({"tp": tp, "step_ms": step * 1e3, "peak_mb": peak / 2 ** 20, "params_mb": params / 2 ** 20})
    cfg = QUICK if args.quick else FULL
    print(table(rows, f"llama3{' (quick)' if args.quick else ''} ({cfg['n_layer']} layers, n_embd {cfg['n_embd']}) "
                      f"on {args.device}, {args.backend}, batch {args.batch} x {args.length or cfg['block_size']}, "
                      f"median of {args.reps} steps (slowest rank), peak of the fullest rank", args.device))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
