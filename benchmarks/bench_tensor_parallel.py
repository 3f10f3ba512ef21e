"""Tensor parallelism (snf.parallelize): per-rank peak memory and training-step time of a llama3 at
tp = 1, 2, 4, one torchrun launch per tp (gloo on CPU; NCCL, one GPU a rank, where CUDA is there).

    PYTHONPATH=. python3 benchmarks/bench_tensor_parallel.py            # llama3 of about 350 MB (fp32), tp 1, 2, 4
    PYTHONPATH=. python3 benchmarks/bench_tensor_parallel.py --quick    # smoke run: tiny sizes, tp 1, 2

A step is forward, cross-entropy, backward and an AdamW step on a batch of --batch sequences, the
same on every rank (tensor parallelism splits the model, not the batch). Time: the median step of
--reps after --warmup, the slowest rank's. Memory: each rank's peak resident set (ru_maxrss) above
what the process held before it built the model, or torch.cuda.max_memory_allocated on CUDA; the
fullest rank's. "params" is the bytes of parameters a rank holds. On a CPU the ranks share its
cores: tp = 4 on 4 cores runs each rank's quarter on one core, so the times say what communication
and the smaller matmuls cost, not what separate devices would gain.
"""

from __future__ import annotations

import argparse
import json
import os
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

FULL = dict(vocab_size=32000, block_size=256, n_layer=6, n_head=12, n_kv_head=4, n_embd=768, mlp_hidden=2048,
            rope_scaling=0)
QUICK = dict(vocab_size=64, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, mlp_hidden=48, rope_scaling=0)


def arguments(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, tp 1 and 2")
    p.add_argument("--tp", type=int, nargs="+", help="the tp degrees (default 1 2 4; --quick 1 2)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--json", help="write the rows here too")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # a rank's run: where rank 0 writes its numbers
    return p.parse_args(argv)


def worker(args) -> None:
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh

    import snf
    import generated.llama3 as mod
    sys.path.insert(0, str(ROOT / "tests"))
    from tensor_parallel_worker import LOCAL  # STAND-IN until llama3.py carries tp_local (issue 50)

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)
    tp = dist.get_world_size()
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cfg = QUICK if args.quick else FULL
    torch.manual_seed(0)
    model = mod.Model(mod.Config(**cfg)).to(device).train()
    mesh = init_device_mesh(device.type, (tp,), mesh_dim_names=("tp",))
    model = snf.parallelize(model, mesh, local=LOCAL)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    tokens = torch.randint(0, cfg["vocab_size"], (args.batch, cfg["block_size"] + 1),
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
    peak = torch.cuda.max_memory_allocated() if cuda else (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024
    params = sum((p.to_local() if hasattr(p, "to_local") else p).nbytes for p in model.parameters())
    worst = torch.tensor([statistics.median(times), float(peak), float(params)], device=device)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        Path(args.worker).write_text(json.dumps(worst.tolist()))
    dist.destroy_process_group()


def main(argv=None) -> int:
    args = arguments(argv)
    if args.worker:
        worker(args)
        return 0
    degrees = args.tp or ([1, 2] if args.quick else [1, 2, 4])
    gpus = torch.cuda.device_count()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for tp in degrees:
            if gpus and tp > gpus:
                print(f"tp {tp}: skipped, {gpus} GPU(s)")
                continue
            out = Path(tmp) / f"tp{tp}.json"
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(tp),
                       __file__, "--worker", str(out), "--batch", str(args.batch), "--reps", str(args.reps),
                       "--warmup", str(args.warmup)] + (["--quick"] if args.quick else [])
            env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                return 1
            step, peak, params = json.loads(out.read_text())
            rows.append({"tp": tp, "step_ms": step * 1e3, "peak_mb": peak / 2 ** 20, "params_mb": params / 2 ** 20})
    device = "CUDA, NCCL" if gpus else "CPU, gloo"
    from benchmarks._timing import cpu_line  # noqa: PLC0415

    print(cpu_line(threads=1) + " by each rank (OMP_NUM_THREADS=1)")
    print(f"llama3 {'(quick)' if args.quick else ''} on {device}, batch {args.batch} x {(QUICK if args.quick else FULL)['block_size']}")
    print("| tp | step ms (median, slowest rank) | peak MB (fullest rank) | params MB a rank |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['tp']} | {r['step_ms']:.1f} | {r['peak_mb']:.1f} | {r['params_mb']:.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
