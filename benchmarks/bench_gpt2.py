"""Training and forward speed of the generated nanoGPT (snfc) against transformers' GPT2LMHeadModel
(HF) and a hand-written nanoGPT in model.py style (benchmarks/nanogpt_ref.py), on the same weights.

    PYTHONPATH=. python3 benchmarks/bench_gpt2.py                  # CPU: the bench config, then GPT-2's vocabulary
    PYTHONPATH=. python3 benchmarks/bench_gpt2.py --device cuda    # GPT-2 small, B=16, T=1024, bf16 autocast
    PYTHONPATH=. python3 benchmarks/bench_gpt2.py --quick          # smoke run, tiny model
    PYTHONPATH=. python3 benchmarks/bench_gpt2.py --threads 1 --clock cpu   # steadier on a shared machine

Contenders: hf (eager), hf-compiled (torch.compile(model)), nanogpt and nanogpt-compiled (the
hand-written model.py), snfc (SNF_COMPILE=0) and snfc-compiled (SNF_COMPILE=1, the default: what
`compile_units` in the generated module says). A training step is forward, loss and backward
(gradients zeroed untimed before each); each model computes its loss the way its users would:
HF's logits into F.cross_entropy, nanoGPT's `model(idx, targets)`, snfc's `model(idx, targets).loss`
(by default, in training, the head and the loss fused: the logits are never made). Forward is
eval mode under no_grad, the logits. Each row's ratio is the median of the per-rep ratios
against HF eager, alternated rep by rep in one process. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks import _timing  # noqa: E402

CONFIGS = {
    "bench": dict(n_layer=4, n_head=4, n_embd=256, vocab_size=1024, block_size=128, batch=8, seq=128),
    "gpt2-vocab": dict(n_layer=4, n_head=4, n_embd=256, vocab_size=50257, block_size=128, batch=8, seq=128),
    "gpt2": dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, block_size=1024, batch=16, seq=1024),
    "quick": dict(n_layer=2, n_head=2, n_embd=64, vocab_size=128, block_size=32, batch=2, seq=32),
}
CONTENDERS = ("hf", "hf-compiled", "nanogpt", "nanogpt-compiled", "snfc", "snfc-compiled")
# what runs when no --config is given: (config, passes, contenders)
PLANS = {
    "cpu": (("bench", ("forward", "train"), CONTENDERS), ("gpt2-vocab", ("train",), ("hf", "snfc", "snfc-compiled"))),
    "cuda": (("gpt2", ("train", "forward"), CONTENDERS),),
}
TOL = {"float32": 1e-4, "bf16-autocast": 5e-2, "bfloat16": 5e-2}  # logits and losses against HF eager


def build_models(cfg: dict):
    """The generated model and an HF GPT-2 (random init, sdpa attention) holding the same weights."""
    import transformers  # noqa: PLC0415
    from transformers import GPT2Config, GPT2LMHeadModel  # noqa: PLC0415

    import snf.interop  # noqa: PLC0415
    from generated.nanogpt import Config, Model  # noqa: PLC0415

    transformers.logging.set_verbosity_error()
    hf_cfg = GPT2Config(
        vocab_size=cfg["vocab_size"], n_positions=cfg["block_size"], n_embd=cfg["n_embd"],
        n_layer=cfg["n_layer"], n_head=cfg["n_head"], resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, attn_implementation="sdpa",
    )
    hf = GPT2LMHeadModel(hf_cfg)
    hf.set_attn_implementation("sdpa")
    attn_impl = hf.config._attn_implementation
    if attn_impl != "sdpa":
        raise SystemExit(f"ABORT: HF attention implementation is {attn_impl!r}, wanted 'sdpa'")

    ours = Model(Config(vocab_size=cfg["vocab_size"], block_size=cfg["block_size"], n_layer=cfg["n_layer"],
                        n_head=cfg["n_head"], n_embd=cfg["n_embd"], dropout=0.0, bias=True, gelu_tanh=True))
    snf.interop.load_state_dict(ours, hf.state_dict(), "hf")
    return ours, hf, attn_impl


def build_reference(cfg: dict, hf):
    """The hand-written nanoGPT (benchmarks/nanogpt_ref.py) with HF's weights."""
    from benchmarks.nanogpt_ref import GPT, GPTConfig  # noqa: PLC0415
    ref = GPT(GPTConfig(block_size=cfg["block_size"], vocab_size=cfg["vocab_size"], n_layer=cfg["n_layer"],
                        n_head=cfg["n_head"], n_embd=cfg["n_embd"], dropout=0.0, bias=True))
    return ref.load_hf_state_dict(hf.state_dict())


def flops_per_token(cfg: dict, backward: bool) -> float:
    """nanoGPT's estimate (PaLM, appendix B): 6N + 12 L D T per trained token, a third of it for a
    forward pass; N counts the layers' matrices and the head."""
    L, D, V, T = cfg["n_layer"], cfg["n_embd"], cfg["vocab_size"], cfg["seq"]
    train = 6 * (12 * L * D * D + V * D) + 12 * L * D * T
    return train if backward else train / 3


class Contenders:
    """Each contender's forward and training step, as its users would call it."""

    def __init__(self, cfg: dict, device: torch.device, dtype: str):
        self.cfg, self.device, self.dtype = cfg, device, dtype
        ours, hf, self.attn_impl = build_models(cfg)
        ref = build_reference(cfg, hf)
        cast = torch.bfloat16 if dtype == "bfloat16" else None
        self.models = {"hf": hf, "nanogpt": ref, "snfc": ours}
        for name, m in self.models.items():
            self.models[name] = m.to(device=device, dtype=cast) if cast else m.to(device)
        self.compiled: dict = {}
        self.sync = _timing.synchronizer(device)

    def model(self, contender: str):
        return self.models[contender.removesuffix("-compiled")]

    def _call(self, contender: str):
        """(forward(idx) -> logits, step(idx, targets) -> loss) of one contender."""
        base = contender.removesuffix("-compiled")
        compiled = contender.endswith("-compiled")
        m = self.models[base]
        if base == "snfc":
            def with_env(fn):
                def run(*a):
                    with _timing.snf_compile(compiled):
                        return fn(*a)
                return run
            # no KV cache in the forward rows, as HF is called
            return with_env(lambda idx: m(idx, use_cache=False).logits), with_env(lambda idx, tgt: m(idx, tgt).loss)
        if compiled and base not in self.compiled:  # one compiled module per model, shared by the passes
            self.compiled[base] = torch.compile(m)
        run = self.compiled[base] if compiled else m
        vocab = self.cfg["vocab_size"]
        if base == "hf":
            def hf_logits(idx):
                return run(input_ids=idx, use_cache=False).logits
            return hf_logits, lambda idx, tgt: F.cross_entropy(hf_logits(idx).float().view(-1, vocab), tgt.view(-1))
        return lambda idx: run(idx)[0], lambda idx, tgt: run(idx, tgt)[1]

    def fns(self, contenders, backward: bool, idx, tgt):
        autocast = self.dtype == "bf16-autocast"
        out = {}
        for c in contenders:
            forward, step = self._call(c)
            model = self.model(c)

            def run(forward=forward, step=step, model=model):
                with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=autocast):
                    if backward:
                        result = step(idx, tgt)
                        result.backward()
                    else:
                        with torch.no_grad():
                            result = forward(idx)
                self.sync()
                return result.detach()
            out[c] = run
        return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _timing.add_common_args(ap, reps=20, warmup=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config", choices=sorted(CONFIGS), help="one config instead of the device's plan (see PLANS)")
    ap.add_argument("--passes", default="forward,train", help="with --config: comma-separated, forward and/or train")
    ap.add_argument("--contenders", default=",".join(CONTENDERS), help="with --config: comma-separated, from " +
                    ", ".join(CONTENDERS))
    ap.add_argument("--dtype", choices=sorted(TOL), default=None,
                    help="float32 (CPU default), bf16-autocast (CUDA default), or bfloat16 weights")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory column")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = args.dtype or ("bf16-autocast" if device.type == "cuda" else "float32")
    if args.quick:
        given = sys.argv[1:] if argv is None else argv
        args.reps = args.reps if any(a.startswith("--reps") for a in given) else 3
        args.warmup = args.warmup if any(a.startswith("--warmup") for a in given) else 1
        plan = (("quick", ("forward", "train"), CONTENDERS),)
    elif args.config:
        plan = ((args.config, tuple(args.passes.split(",")), tuple(args.contenders.split(","))),)
    else:
        plan = PLANS[device.type]
    if args.no_compile:
        plan = tuple((c, p, tuple(x for x in cs if not x.endswith("-compiled"))) for c, p, cs in plan)
    peak = _timing.peak_flops(device, dtype != "float32")

    print("bench_gpt2: generated nanoGPT (snfc) vs transformers GPT2LMHeadModel (HF) and a hand-written nanoGPT, "
          "same weights")
    for line in _timing.environment_lines("--threads" if args.threads else ""):
        print("  " + line)
    print(f"  device {device}{' (' + torch.cuda.get_device_name(device) + ')' if device.type == 'cuda' else ''}, "
          f"{dtype}; clock: {args.clock}; reps={args.reps} (alternated), warmup={args.warmup}"
          f"{' [--quick: numbers not meaningful]' if args.quick else ''}")
    print(f"  MFU against {peak[1]}" if peak else "  MFU: not reported (no peak FLOP/s for this device)")

    rows, results, notes = [], [], []
    for config, passes, contenders in plan:
        cfg = CONFIGS[config]
        torch.manual_seed(args.seed)
        models = Contenders(cfg, device, dtype)
        B, T, V = cfg["batch"], cfg["seq"], cfg["vocab_size"]
        g = torch.Generator().manual_seed(args.seed + 1)
        idx = torch.randint(0, V, (B, T), generator=g).to(device)
        tgt = torch.randint(0, V, (B, T), generator=g).to(device)
        print(f"  config {config}: n_layer={cfg['n_layer']} n_head={cfg['n_head']} n_embd={cfg['n_embd']} vocab={V} "
              f"block={cfg['block_size']}; batch B={B}, T={T}; HF attention {models.attn_impl!r}", flush=True)
        for pass_name in passes:
            backward = pass_name == "train"
            for m in models.models.values():
                m.train(backward)
            fns = models.fns(contenders, backward, idx, tgt)
            setup = {c: (lambda m=models.model(c): m.zero_grad(set_to_none=True)) for c in contenders} if backward else {}
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                first, outputs = {}, {}
                for c, fn in fns.items():  # the first call compiles the compiled ones: untimed
                    setup.get(c, lambda: None)()
                    t0 = time.perf_counter()
                    outputs[c] = fn()
                    first[c] = time.perf_counter() - t0
                diffs = {c: _check(outputs[c], outputs[contenders[0]], TOL[dtype], f"{config} {pass_name} {c}")
                         for c in contenders}
                samples = _timing.time_alternating(fns, warmup=args.warmup, reps=args.reps, setup=setup,
                                                   clock=_timing.clock_of(args.clock))
                memory = {} if args.no_memory else {
                    c: _timing.peak_memory(lambda c=c: (setup.get(c, lambda: None)(), fns[c]()), device)
                    for c in contenders}
            for w in caught:
                if "torch.compile is unavailable" in str(w.message):
                    notes.append(f"{config} {pass_name}: snfc fell back to eager: {w.message}")
            base = samples["hf" if "hf" in samples else contenders[0]]
            for c in contenders:
                s = _timing.summarize(samples[c])
                tokens = B * T / (s.median / 1e3)
                mfu = f"{100 * tokens * flops_per_token(cfg, backward) / peak[0]:.1f}%" if peak else "-"
                vs_eager = f"{_timing.paired_ratio(samples[c], samples['snfc']):.3f}" \
                    if c == "snfc-compiled" and "snfc" in samples else "-"
                mem = memory.get(c)
                rows.append([config, pass_name, c, s.median, f"{tokens:.0f}", f"{_timing.paired_ratio(samples[c], base):.3f}",
                             vs_eager, f"{mem / 2**20:.0f}" if mem is not None else "-", mfu,
                             f"{first[c]:.1f}", f"{100 * s.spread:.0f}%", f"{diffs[c]:.1e}"])
                results.append(dict(config=config, pass_=pass_name, contender=c, stats=s.__dict__, ms=samples[c],
                                    tokens_per_s=tokens, peak_bytes=mem, first_call_s=first[c], max_abs_diff=diffs[c]))
            print(f"  done: {config} {pass_name}", flush=True)
        del models

    print()
    print(_timing.format_table(
        ["config", "pass", "contender", "ms", "tokens/s", "vs hf", "vs snfc", "peak MB", "MFU",
         "first call s", "IQR", "max |diff|"], rows))
    print(f"\nms: median per step ({args.clock} clock); vs hf: median of the per-rep ratios to HF eager (lower is "
          "better, < 1: faster); vs snfc: snfc-compiled against snfc eager, the same way;\npeak MB: " +
          ("max_memory_allocated during one step (weights included)" if device.type == "cuda" else
           "how far the process's resident memory rose during one step (weights excluded, gradients included)") +
          "; first call: the untimed first step (where torch.compile compiles); IQR: interquartile range / median; "
          "max |diff|: the logits' or the loss's difference from the first contender.")
    for n in notes:
        print("  note: " + n)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(plan=plan, reps=args.reps, warmup=args.warmup, device=str(device),
                                                   dtype=dtype, clock=args.clock, torch=torch.__version__,
                                                   threads=torch.get_num_threads(), rows=results), indent=1))
    return 0


def _check(out: torch.Tensor, ref: torch.Tensor, tol: float, what: str) -> float:
    """Abort unless a contender's logits (or loss) agree with the first contender's."""
    scale = 1.0 if tol < 1e-3 else max(1.0, ref.float().abs().max().item())  # bf16: relative to the largest
    return _timing.check_close(out, ref, tol * scale, what)


if __name__ == "__main__":
    raise SystemExit(main())
