"""`from_pretrained` of ~1B folders, plain and quantized: time to load, time to the first logits and
memory, snfc beside transformers.

Three folders of random weights, written once as each release is (config.json and one
model.safetensors, the keys and dtypes transformers saves): a Llama of 1.0B parameters in bfloat16
(hidden 2048, 20 layers, MLP 5632, vocabulary 32000: 2.0 GB); a gpt-oss-shaped one of 0.9B whose
experts are MXFP4 (hidden 1024, 8 layers of 32 experts, top 4); a DeepSeek-V3-shaped one of 0.9B
whose linears are block-scaled FP8 at 128 x 128 (hidden 1024, 16 layers, latent attention, 32
experts, top 4; every size a multiple of 128, since transformers' CPU dequantization derives the
block from the grid, and refuses a size 128 does not divide or reads it in other blocks:
tests/test_quantized.py). The keys and shapes are the bundled spec's
`checkpoint hf:` names (snf.pretrained.hf_state_dict of the model on the meta device), which
transformers then loads.

Each load runs in a process of its own after its imports, with the folder's pages already in the
page cache: `snf.from_pretrained(folder)` twice, with an empty cache of compiled specs and with
the one the first left (a second process compiles no spec), and transformers'
`AutoModelForCausalLM.from_pretrained(folder)`; each then computes the logits of a 16-token
prompt (the first logits), and afterwards, untimed, those of the model cast to float32, which must
agree with transformers' (to 1e-3 of the largest). Each kind loads `--reps` times, the three
alternated; the table has the medians: seconds to load and to the first logits (wall clock) and the
process's CPU seconds to the first logits (its threads' user and system time: the steadier figure
on a shared machine). Memory is the resident memory's peak rise over the load and the first logits
(benchmarks/_timing.py `peak_memory`), against the loaded model's parameters (the dequantized
weights).

    PYTHONPATH=. python3 benchmarks/bench_pretrained.py --threads 1   # ~10 minutes on 2 cores, 4 GB of disk in /tmp
    PYTHONPATH=. python3 benchmarks/bench_pretrained.py --quick --reps 1   # tiny folders, for the tests
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT = 16
LLAMA = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=20, num_attention_heads=32,
             num_key_value_heads=4, vocab_size=32000)
GPT_OSS = dict(hidden_size=1024, intermediate_size=1024, num_hidden_layers=8, num_attention_heads=16,
               num_key_value_heads=8, head_dim=64, num_local_experts=32, num_experts_per_tok=4, vocab_size=32000)
DEEPSEEK = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=16, num_attention_heads=16,
                num_key_value_heads=16, q_lora_rank=384, kv_lora_rank=384, qk_rope_head_dim=128, qk_nope_head_dim=64,
                v_head_dim=64, n_routed_experts=32, moe_intermediate_size=512, num_experts_per_tok=4, n_group=4,
                topk_group=2, first_k_dense_replace=1, n_shared_experts=1, vocab_size=32000,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
QUICK = {"llama": dict(LLAMA, hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=8,
                       num_key_value_heads=2),
         "gpt_oss": dict(GPT_OSS, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                         vocab_size=1000),
         "deepseek_v3": dict(DEEPSEEK, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                             num_key_value_heads=2, q_lora_rank=32, kv_lora_rank=48, qk_rope_head_dim=16,
                             qk_nope_head_dim=16, v_head_dim=16, n_routed_experts=4, moe_intermediate_size=32,
                             num_experts_per_tok=2, n_group=2, topk_group=1, vocab_size=1000)}
FOLDERS = {  # name: (transformers config class, sizes, quantization_config, what the release quantizes)
    "llama": ("LlamaConfig", LLAMA, None, None),
    "gpt_oss": ("GptOssConfig", GPT_OSS, {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]},
        ("experts.gate_up_proj", "experts.down_proj")),
    "deepseek_v3": ("DeepseekV3Config", DEEPSEEK, {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                                                   "weight_block_size": [128, 128]},
                    ("_proj.weight",)),
}
NAMES = {"snfc-cold": "snf.from_pretrained, no compiled spec kept", "snfc": "snf.from_pretrained",
         "transformers": "AutoModelForCausalLM.from_pretrained"}


def _write(folder: Path, name: str, sizes: dict) -> None:
    """A folder as the release is: config.json, and the spec's `checkpoint hf:` keys at their shapes,
    random (norms near 1, the rest N(0, 0.02)), bfloat16 or quantized as the release has them."""
    import torch
    import transformers
    from safetensors.torch import save_file

    import snf
    from snf.pretrained import config_from_hf, hf_state_dict
    from snf.quantized import FORMATS

    class_name, _, quantization, quantized = FOLDERS[name]
    config = getattr(transformers, class_name)(**sizes, max_position_embeddings=4096, tie_word_embeddings=False,
                                               dtype="bfloat16", architectures=[class_name.replace("Config",
                                                                                                  "ForCausalLM")])
    folder.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(folder)
    hf = json.loads((folder / "config.json").read_text())
    module = snf.load(ROOT / "specs" / f"{'llama3' if name == 'llama' else name}.snf")
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in hf_state_dict(module.Model(config_from_hf(module, hf))).items()}
    if quantization is not None:
        (folder / "config.json").write_text(json.dumps({**hf, "quantization_config": quantization}, indent=2))
    g = torch.Generator().manual_seed(0)
    fmt = FORMATS[quantization["quant_method"]] if quantization else None
    tensors = {}
    for key, shape in shapes.items():
        plain = torch.randn(shape, generator=g) * 0.02 + (1.0 if key.endswith("norm.weight") else 0.0)
        if fmt is not None and key.endswith(quantized) and ".mlp.gate." not in key:
            settings = fmt.settings(quantization, "bench")
            tensors[fmt.codes_key(key)], tensors[fmt.scales_key(key)] = fmt.quantize(plain, settings)
        else:
            tensors[key] = plain.to(torch.bfloat16)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


def _child(kind: str, folder: str) -> None:
    import torch

    sys.path.insert(0, str(ROOT))
    from benchmarks._timing import peak_memory

    if kind.startswith("snfc"):
        import snf
        load = lambda: snf.from_pretrained(folder)  # noqa: E731
    else:
        import transformers
        transformers.logging.set_verbosity_error()
        load = lambda: transformers.AutoModelForCausalLM.from_pretrained(folder)  # noqa: E731
    idx = torch.arange(1, PROMPT + 1)[None]
    got: dict = {}

    def first_logits():
        start, cpu = time.perf_counter(), time.process_time()
        got["model"] = model = load()
        got["load"] = time.perf_counter() - start
        with torch.no_grad():
            model(idx)
        got["first"], got["cpu"] = time.perf_counter() - start, time.process_time() - cpu
    got["peak"] = peak_memory(first_logits, torch.device("cpu"))
    model = got.pop("model")
    got["weights"] = sum(p.numel() * p.element_size() for p in model.parameters())
    got["dtypes"] = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()})
    with torch.no_grad():  # compared in float32, where a router's choice does not turn on bfloat16's rounding
        got["logits"] = model.float()(idx).logits[0, -1].tolist()
    print(json.dumps(got))


def _run(kind: str, folder: Path, cache: Path, threads: int | None) -> dict:
    # as an installed snfc runs: its modules' bytecode kept (where PYTHONDONTWRITEBYTECODE is set, every process
    # compiles snf's sources again, 0.2 s of a load; transformers' were compiled as pip installed it)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    out = subprocess.run([sys.executable, __file__, "--child", kind, str(folder)], capture_output=True, text=True,
                         cwd=ROOT, env={**env, "SNFC_CACHE_DIR": str(cache)})
    if out.returncode:
        raise SystemExit(f"{kind} on {folder.name}:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _read(folder: Path) -> None:
    """The folder's files into the page cache, so that no contender pays the disk for the others."""
    for path in folder.iterdir():
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass


def _median(runs: list, key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="tiny folders (numbers not meaningful)")
    parser.add_argument("--reps", type=int, default=3, help="loads of each kind, alternated (default 3; the medians)")
    parser.add_argument("--only", choices=list(FOLDERS), nargs="+", default=list(FOLDERS), help="these folders only")
    parser.add_argument("--threads", type=int, help="each load's torch threads (OMP_NUM_THREADS; by default torch's "
                        "own): 1 on a shared machine, where two threads wait for each other behind other work")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(*args.child)
        return 0
    import torch
    import transformers

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only:
            sizes = FOLDERS[name][1]
            folder = Path(tmp) / name
            _write(folder, name, QUICK[name] if args.quick else sizes)
            _read(folder)
            runs: dict = {kind: [] for kind in NAMES}
            for rep in range(args.reps):  # alternated, so that a burst of load elsewhere spreads over all three
                cache = Path(tmp) / f"cache-{name}-{rep}"  # empty: the first load compiles the spec, the next finds it
                for kind in NAMES:
                    runs[kind].append(_run(kind, folder, cache, args.threads))
            theirs = torch.tensor(runs["transformers"][0]["logits"])
            peer = {key: _median(runs["transformers"], key) for key in ("first", "cpu")}
            for kind, results in runs.items():
                diff = max((torch.tensor(r["logits"]) - theirs).abs().max().item() for r in results)
                if not diff <= 1e-3 * theirs.abs().max().item():
                    raise SystemExit(f"ABORT: {kind} on {name}: its logits differ from transformers' by {diff:.3g}")
                first, cpu, peak, weights = (_median(results, key) for key in ("first", "cpu", "peak", "weights"))
                rows.append((name, NAMES[kind], ",".join(results[0]["dtypes"]), f"{weights / 2**30:.2f} GiB",
                             f"{_median(results, 'load'):.2f}", f"{first:.2f}", f"{first / peer['first']:.2f}",
                             f"{cpu:.2f}", f"{cpu / peer['cpu']:.2f}", f"{peak / 2**30:.2f} GiB",
                             f"{peak / weights:.2f}"))
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks._timing import cpu_line  # noqa: PLC0415

    print(cpu_line(args.threads or torch.get_num_threads()))
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, CPU, {args.threads or torch.get_num_threads()} "
          f"threads, medians of {args.reps}; load average {os.getloadavg()[0]:.1f} at the end")
    headers = ("folder", "load", "dtype", "weights", "load s", "first logits s", "vs transformers", "CPU s",
               "CPU vs transformers", "peak rise", "x weights")
    print("| " + " | ".join(headers) + " |\n|" + "---|" * len(headers))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
