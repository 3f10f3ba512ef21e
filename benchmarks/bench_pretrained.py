"""`from_pretrained` of a ~1B bfloat16 Llama folder: its time and its memory, beside transformers'.

A Llama-shaped folder of 1.0B parameters in bfloat16 (2.0 GB; hidden 2048, 16 layers, MLP 5632,
vocabulary 32000, random weights) is written once, as `save_pretrained` writes it (config.json
saying "dtype": "bfloat16", one model.safetensors). Then, each in a process of its own after its
imports, `snf.from_pretrained(folder)` (the checkpoint's dtype by default) and transformers'
`AutoModelForCausalLM.from_pretrained(folder)` load it. Memory is the resident memory's rise
during the load (benchmarks/_timing.py `peak_memory`), against the weights' bytes. transformers maps
the file and keeps its tensors in the mapping (the page cache holds them), so its resident rise
counts the pages touched so far; snfc reads each tensor into its parameter.

    PYTHONPATH=. python3 benchmarks/bench_pretrained.py           # ~1 minute, 2 GB of disk in /tmp
    PYTHONPATH=. python3 benchmarks/bench_pretrained.py --quick   # a 20M model, for the tests
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
FULL = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=20, num_attention_heads=32,
            num_key_value_heads=4, vocab_size=32000)
QUICK = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=8,
             num_key_value_heads=2, vocab_size=32000)


def _write(folder: Path, sizes: dict) -> int:
    """A save_pretrained-style Llama folder of random bfloat16 weights; returns their bytes."""
    import torch
    import transformers
    from safetensors.torch import save_file

    config = transformers.LlamaConfig(**sizes, max_position_embeddings=2048, tie_word_embeddings=False,
                                      dtype="bfloat16", architectures=["LlamaForCausalLM"])
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in transformers.LlamaForCausalLM(config).state_dict().items()}
    g = torch.Generator().manual_seed(0)
    tensors = {k: (torch.randn(s, generator=g) * 0.02).to(torch.bfloat16) for k, s in shapes.items()}
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(folder)
    return sum(t.numel() * t.element_size() for t in tensors.values())


def _child(kind: str, folder: str) -> None:
    import torch

    sys.path.insert(0, str(ROOT))
    from benchmarks._timing import peak_memory

    if kind == "snfc":
        import snf
        load = lambda: snf.from_pretrained(folder)  # noqa: E731
    else:
        import transformers
        transformers.logging.set_verbosity_error()
        load = lambda: transformers.AutoModelForCausalLM.from_pretrained(folder)  # noqa: E731
    got = {}
    start = time.perf_counter()
    peak = peak_memory(lambda: got.setdefault("model", load()), torch.device("cpu"))
    seconds = time.perf_counter() - start
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in got["model"].parameters()})
    print(json.dumps({"peak": peak, "seconds": seconds, "dtypes": dtypes}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child)
        return
    import torch
    import transformers

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "llama"
        weights = _write(folder, QUICK if args.quick else FULL)
        rows = []
        for kind in ("snfc", "transformers"):
            out = subprocess.run([sys.executable, __file__, "--child", kind, str(folder)], capture_output=True,
                                 text=True, cwd=ROOT)
            if out.returncode:
                raise SystemExit(out.stderr[-2000:])
            rows.append((kind, json.loads(out.stdout.strip().splitlines()[-1])))
    print(f"Llama-shaped folder: {weights / 2**30:.2f} GiB of bfloat16 weights; torch {torch.__version__}, "
          f"transformers {transformers.__version__}, CPU")
    print(f"{'load':44} {'dtype':>9} {'peak rise':>12} {'x weights':>10} {'seconds':>8} {'time vs transformers':>21}")
    names = {"snfc": "snf.from_pretrained(folder)", "transformers": "AutoModelForCausalLM.from_pretrained(folder)"}
    peer = rows[1][1]
    for kind, r in rows:
        print(f"{names[kind]:44} {','.join(r['dtypes']):>9} {r['peak'] / 2**30:>8.2f} GiB {r['peak'] / weights:>10.2f} "
              f"{r['seconds']:>8.2f} {r['seconds'] / peer['seconds']:>21.2f}")


if __name__ == "__main__":
    main()
