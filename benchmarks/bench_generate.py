"""Generation speed: the generated nanoGPT's `Model.generate` against transformers' `generate`, with
its dynamic and its static KV cache, on the same weights (greedy, so all produce the same tokens).

    PYTHONPATH=. python3 benchmarks/bench_generate.py                 # full run (GPT-2), CPU
    PYTHONPATH=. python3 benchmarks/bench_generate.py --quick         # smoke run
    PYTHONPATH=. python3 benchmarks/bench_generate.py --model llama   # gpt_decoder.snf vs LlamaForCausalLM
    PYTHONPATH=. python3 benchmarks/bench_generate.py --device cuda --dtype bfloat16   # the H100 table
    PYTHONPATH=. python3 benchmarks/bench_generate.py --batches 1 --block-sizes 1024 --threads 1 --clock cpu \
        --step-options   # the decode step under each inductor CPU option set (README, issue 53)

4 layers, 4 heads, D=256, vocab 1024 (Llama: SwiGLU hidden 704, tied embeddings); a 16-token
prompt, 64 new tokens; batch 1 and 8; a context (block_size, the cache's preallocated slots) of
128, 256 and 1024 on the CPU: a long context must not make short generations slow. On CUDA:
GPT-2 small (12 layers, D=768, vocab 50257, context 1024), batch 1 and 16.
Contenders: hf (eager, DynamicCache), hf-static (cache_implementation="static"), hf-static-compiled
(the static cache with `model.forward` compiled, mode "reduce-overhead", as transformers documents;
on CUDA only by default, --hf-compile adds it on the CPU), snfc (SNF_COMPILE=0) and snfc-compiled
(SNF_COMPILE=1, as shipped: each decode step one compiled graph, a CUDA graph on CUDA). All
alternate rep by rep in one process; compiling happens in the warmup rounds. Reported: tokens/s,
ms per new token, the median of the per-rep speed-ups over hf (above 1: faster), peak memory, MFU.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks import _timing  # noqa: E402
from benchmarks.bench_gpt2 import build_models  # noqa: E402

LLAMA_HIDDEN = 704  # about 2.75 x D, as the spec's default ratio


def build_llama(cfg: dict):
    """The generated gpt_decoder and an HF LlamaForCausalLM (sdpa attention) holding the same weights."""
    import transformers  # noqa: PLC0415

    import snf.interop  # noqa: PLC0415
    from generated.gpt_decoder import Config, Model  # noqa: PLC0415

    transformers.logging.set_verbosity_error()
    ours = Model(Config(vocab_size=cfg["vocab_size"], block_size=cfg["block_size"], n_layer=cfg["n_layer"],
                        n_head=cfg["n_head"], n_embd=cfg["n_embd"], mlp_hidden=cfg.get("mlp_hidden", LLAMA_HIDDEN)))
    c = ours.config
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        num_hidden_layers=c.n_layer, hidden_size=c.n_embd, num_attention_heads=c.n_head,
        num_key_value_heads=c.n_head, intermediate_size=c.mlp_hidden, vocab_size=c.vocab_size,
        tie_word_embeddings=True, rms_norm_eps=c.norm_eps, rope_theta=c.rope_base,
        max_position_embeddings=c.block_size, attn_implementation="sdpa"))
    with torch.no_grad():  # HF's std 0.02 leaves near-ties in the logits that float noise flips
        for p in hf.parameters():
            p.normal_(0.0, 0.1)
    snf.interop.load_state_dict(ours, hf.state_dict(), "hf")
    return ours, hf, hf.config._attn_implementation


FULL = dict(n_layer=4, n_head=4, n_embd=256, vocab_size=1024, block_size=128, prompt=16, new=64)
GPT2 = dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, block_size=1024, prompt=16, new=64,
            mlp_hidden=2048)
QUICK = dict(n_layer=2, n_head=2, n_embd=64, vocab_size=128, block_size=64, prompt=8, new=8)
# --step-options: the decode step under each inductor CPU option set (contender name -> options)
_DECOMPOSE = {"post_grad_fusion_options": {"decompose_mm_pass": {}}}
STEP_OPTIONS = {"step:decompose+threshold": {"realize_opcount_threshold": 4, **_DECOMPOSE},
                "step:decompose": dict(_DECOMPOSE), "step:threshold": {"realize_opcount_threshold": 4},
                "step:plain": {}}
BLOCK_SIZES = {"cpu": "128,256,1024", "cuda": "1024"}
BATCHES = {"cpu": "1,8", "cuda": "1,16"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _timing.add_common_args(parser, reps=7, warmup=2)
    parser.add_argument("--batches", default=None, help="comma-separated batch sizes (default 1,8; CUDA 1,16)")
    parser.add_argument("--block-sizes", default=None,
                        help="comma-separated contexts (block_size) to build the models with (default 128,256,1024; "
                             "CUDA 1024; --quick: the quick config's)")
    parser.add_argument("--model", choices=("gpt2", "llama"), default="gpt2",
                        help="gpt2: nanogpt.snf vs GPT2LMHeadModel (default); llama: gpt_decoder.snf vs LlamaForCausalLM")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "bf16-autocast"), default="float32",
                        help="float32 (default), bfloat16 weights, or float32 weights under bf16 autocast")
    parser.add_argument("--hf-compile", action="store_true", help="also hf-static-compiled on a CPU")
    parser.add_argument("--step-options", action="store_true",
                        help="also snfc-compiled with its decode step compiled under each of STEP_OPTIONS' inductor "
                             "CPU options (the one-row matmul decomposition and the realize threshold, on and off)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    base = QUICK if args.quick else GPT2 if device.type == "cuda" else FULL
    sizes = args.block_sizes or (str(base["block_size"]) if args.quick else BLOCK_SIZES[device.type])
    batches = [int(b) for b in (args.batches or BATCHES[device.type]).split(",")]
    contenders = ["hf", "hf-static"] + (["hf-static-compiled"] if device.type == "cuda" or args.hf_compile else []) \
        + ["snfc", "snfc-compiled"]
    if args.step_options:
        contenders += list(STEP_OPTIONS)
    if args.no_compile:
        contenders = [c for c in contenders if not c.endswith("-compiled") and c not in STEP_OPTIONS]
    peak = _timing.peak_flops(device, args.dtype != "float32")
    print("\n".join(_timing.environment_lines("--threads" if args.threads else "")))
    print(f"device {device}, {args.dtype}, clock {args.clock}; "
          + (f"MFU against {peak[1]}" if peak else "MFU: not reported (no peak FLOP/s for this device)"))
    rows = []
    for block_size in (int(n) for n in sizes.split(",")):
        cfg = dict(base, block_size=block_size)
        os.environ["SNF_COMPILE"] = "0"
        torch.manual_seed(0)
        ours, hf, attn = (build_llama if args.model == "llama" else build_models)(cfg)
        hf.generation_config.eos_token_id = None  # no end token: min_new_tokens would ban it from the argmax
        cast = {"dtype": torch.bfloat16} if args.dtype == "bfloat16" else {}
        ours, hf = ours.to(device, **cast).eval(), hf.to(device, **cast).eval()
        static = None
        if "hf-static-compiled" in contenders:  # its own copy: compiling replaces forward
            static = copy.deepcopy(hf)
            static.forward = torch.compile(static.forward, mode="reduce-overhead", fullgraph=True)
        print(f"model: {args.model}; config: {cfg}; HF attention: {attn}; greedy decoding", flush=True)
        for batch in batches:
            rows += _rows(ours, hf, static, cfg, batch, contenders, device, peak, args)
    print(_timing.format_table(["block_size", "batch", "contender", "tokens/s", "ms/token", "speed-up vs hf",
                                "peak MB", "MFU"], rows))
    print("speed-up: median of the per-rep ratios hf time / contender time (above 1: faster); peak MB: " +
          ("max_memory_allocated during one generate (weights included)" if device.type == "cuda" else
           "how far resident memory rose during one generate (weights excluded)"))
    return 0


def _rows(ours, hf, static, cfg: dict, batch: int, contenders: list, device, peak, args) -> list:
    prompt = torch.randint(0, cfg["vocab_size"], (batch, cfg["prompt"])).to(device)
    mask = torch.ones_like(prompt)
    sync = _timing.synchronizer(device)
    autocast = args.dtype == "bf16-autocast"

    def hf_generate(model, **kwargs):
        def run():
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                out = model.generate(prompt, attention_mask=mask, max_new_tokens=cfg["new"],
                                     min_new_tokens=cfg["new"], do_sample=False, use_cache=True, pad_token_id=0,
                                     **kwargs)
            sync()
            return out
        return run

    def snfc_generate(compiled: bool):
        def run():
            os.environ["SNF_COMPILE"] = "1" if compiled else "0"
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                out = ours.generate(prompt, cfg["new"], temperature=0)
            sync()
            return out
        return run

    def step_variant(options: dict):  # `ours` whose decode step compiles with these CPU options
        from snf.runtime.compiling import _hot_path  # noqa: PLC0415

        cls = type(ours)
        step = _hot_path(cls.forward.__wrapped__, dynamic=False, unit="decode", cpu_options=options)
        variant = copy.copy(ours)  # the same weights and buffers
        variant.__class__ = type(cls.__name__, (cls,), {"_decode_step": step})

        def run():
            os.environ["SNF_COMPILE"] = "1"
            out = variant.generate(prompt, cfg["new"], temperature=0)
            sync()
            return out
        return run

    fns = {"hf": hf_generate(hf), "hf-static": hf_generate(hf, cache_implementation="static"),
           "hf-static-compiled": hf_generate(static, cache_implementation="static"),
           "snfc": snfc_generate(False), "snfc-compiled": snfc_generate(True)}
    fns.update({name: step_variant(options) for name, options in STEP_OPTIONS.items() if name in contenders})
    fns = {c: fns[c] for c in contenders}
    tokens = {c: fn() for c, fn in fns.items()}
    if args.dtype == "float32":
        for c, t in tokens.items():
            if not torch.equal(t, tokens["hf"]):
                raise SystemExit(f"ABORT: block_size {cfg['block_size']}, batch {batch}: {c} generated other tokens "
                                 "than hf; not timing")
    samples = _timing.time_alternating(fns, warmup=args.warmup, reps=args.reps, clock=_timing.clock_of(args.clock))
    memory = {c: _timing.peak_memory(fn, device) for c, fn in fns.items()}
    new = batch * cfg["new"]
    L, D, V = cfg["n_layer"], cfg["n_embd"], cfg["vocab_size"]
    flops = 2 * (12 * L * D * D + V * D) + 4 * L * D * (cfg["prompt"] + cfg["new"] // 2)  # per new token, roughly
    rows = []
    for c in contenders:
        median = _timing.summarize(samples[c]).median
        rate = new / (median / 1e3)
        speedup = _timing.paired_ratio(samples["hf"], samples[c])  # the median of hf[i] / c[i]
        mem = memory[c]
        rows.append([cfg["block_size"], batch, c, f"{rate:.0f}", f"{median / cfg['new']:.2f}", f"{speedup:.2f}x",
                     f"{mem / 2**20:.0f}" if mem is not None else "-",
                     f"{100 * rate * flops / peak[0]:.2f}%" if peak else "-"])
    return rows


if __name__ == "__main__":
    sys.exit(main())
