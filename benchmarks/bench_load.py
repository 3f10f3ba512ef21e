"""Loading a checkpoint: the memory it takes above the model's own weights, and its time.

A nanoGPT (generated/nanogpt.py) of GPT-2 small's size, 124M parameters (0.50 GB in float32), is
saved in the spec's own format (`save_checkpoint`, safetensors) and as a transformers GPT-2
`save_pretrained` folder; each is loaded into a fresh model with `load_checkpoint`, and compared
with the peer every user has: `model.load_state_dict(safetensors.torch.load_file(...))` of the
model's own state dict, which reads the file once. Each load runs in its own process, so its peak
is its own: the resident memory's rise during the load (benchmarks/_timing.py `peak_memory`).

    PYTHONPATH=. python3 benchmarks/bench_load.py            # ~1 minute on 2 cores
    PYTHONPATH=. python3 benchmarks/bench_load.py --quick    # a 4-layer model, for the tests
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _child(kind: str, path: str, config: dict) -> None:
    import torch

    sys.path.insert(0, str(ROOT))
    from benchmarks._timing import peak_memory
    from generated.nanogpt import Model
    from snf.interop import load_checkpoint

    with torch.device("cpu"):
        model = Model(**config)
    weights = sum(p.numel() * p.element_size() for p in model.state_dict().values())
    start = time.perf_counter()
    if kind == "peer":
        from safetensors.torch import load_file
        peak = peak_memory(lambda: model.load_state_dict(load_file(path)), torch.device("cpu"))
    else:
        peak = peak_memory(lambda: load_checkpoint(model, path, kind), torch.device("cpu"))
    print(json.dumps({"peak": peak, "weights": weights, "seconds": time.perf_counter() - start}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], args.child[1], json.loads(args.child[2]))
        return
    import torch
    import transformers

    sys.path.insert(0, str(ROOT))
    from generated.nanogpt import Model
    from snf.interop import save_checkpoint

    config = dict(n_layer=4 if args.quick else 12, gelu_tanh=True)
    transformers.logging.set_verbosity_error()
    with tempfile.TemporaryDirectory() as tmp:
        model = Model(**config)
        save_checkpoint(model, f"{tmp}/spec.safetensors")
        from safetensors.torch import save_file
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, f"{tmp}/own.safetensors")
        c = model.config
        hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd, vocab_size=c.vocab_size, n_positions=c.block_size))
        hf.save_pretrained(f"{tmp}/hf")
        del model, hf
        rows = []
        for kind, path in (("peer", f"{tmp}/own.safetensors"), ("spec", f"{tmp}/spec.safetensors"),
                           ("hf", f"{tmp}/hf")):
            out = subprocess.run([sys.executable, __file__, "--child", kind, path, json.dumps(config)],
                                 capture_output=True, text=True, cwd=ROOT)
            if out.returncode:
                raise SystemExit(out.stderr[-2000:])
            rows.append((kind, json.loads(out.stdout.strip().splitlines()[-1])))
    peer = rows[0][1]
    from benchmarks._timing import cpu_line

    print(cpu_line())
    print(f"nanogpt n_layer={config['n_layer']}: {peer['weights'] / 2**30:.2f} GiB of weights, torch {torch.__version__}")
    print(f"{'load':38} {'peak above the model':>22} {'x weights':>10} {'vs peer':>8} {'seconds':>8}")
    names = {"peer": "load_state_dict(load_file(own))", "spec": "load_checkpoint(spec safetensors)",
             "hf": "load_checkpoint(hf folder, 'hf')"}
    for kind, r in rows:
        print(f"{names[kind]:38} {r['peak'] / 2**30:>18.2f} GiB {r['peak'] / r['weights']:>10.2f} "
              f"{r['peak'] / peer['peak']:>8.2f} {r['seconds']:>8.2f}")


if __name__ == "__main__":
    main()
