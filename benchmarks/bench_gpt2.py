"""Generated nanoGPT (generated/nanogpt.py) vs transformers' GPT2LMHeadModel, on the same weights.

    PYTHONPATH=. python3 benchmarks/bench_gpt2.py            # full run (a few minutes on 2 cores)
    PYTHONPATH=. python3 benchmarks/bench_gpt2.py --quick    # smoke run, tiny model
    PYTHONPATH=. python3 benchmarks/bench_gpt2.py --no-compile

Rows: forward (eval, no_grad) and forward+backward (train mode, dropout 0, cross-entropy loss,
gradients zeroed untimed before each rep), each eager and compiled. "compiled" means
SNF_COMPILE=1 for ours (the generated Block.forward goes through torch.compile) and
torch.compile(hf_model) for HF. Ratio = snfc / HF median: below 1.0 means snfc is faster.
See benchmarks/README.md.
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

TOL = 1e-4

FULL = dict(n_layer=4, n_head=4, n_embd=256, vocab_size=1024, block_size=128, batch=8, seq=128)
QUICK = dict(n_layer=2, n_head=2, n_embd=64, vocab_size=128, block_size=32, batch=2, seq=32)


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
                        n_head=cfg["n_head"], n_embd=cfg["n_embd"], dropout=0.0, bias=True))
    snf.interop.load_state_dict(ours, hf.state_dict(), "hf")
    return ours, hf, attn_impl


def hf_logits(m, idx):
    return m(input_ids=idx, use_cache=False).logits


def logits_of(out):
    """The logits from the generated model's output: a tensor, or an Output(logits, ...) tuple."""
    if isinstance(out, torch.Tensor):
        return out
    return out.logits if hasattr(out, "logits") else out[0]


def snfc_logits(m, idx):
    return logits_of(m(idx, use_cache=False))  # as HF is called: no KV cache


def make_row_fns(ours, hf_call, idx, tgt, vocab: int, backward: bool):
    """Callables for one row: ours and HF, forward-only or forward+backward."""
    if not backward:
        def fwd_ours():
            with torch.no_grad():
                return ours(idx)

        def fwd_hf():
            with torch.no_grad():
                return hf_call(idx)

        return {"snfc": fwd_ours, "hf": fwd_hf}

    def step(call):
        def run():
            logits = call(idx)
            loss = F.cross_entropy(logits.float().view(-1, vocab), tgt.view(-1))
            loss.backward()
            return loss

        return run

    return {"snfc": step(ours), "hf": step(hf_call)}


def check_row(ours, hf_call, idx, tgt, vocab: int, what: str) -> float:
    """Logits (no_grad) and the training loss must agree to TOL; abort otherwise."""
    with torch.no_grad():
        d = _timing.check_close(ours(idx), hf_call(idx), TOL, f"{what} logits")
    lo = F.cross_entropy(ours(idx).float().view(-1, vocab), tgt.view(-1)).detach()
    lh = F.cross_entropy(hf_call(idx).float().view(-1, vocab), tgt.view(-1)).detach()
    _timing.check_close(lo, lh, TOL, f"{what} loss")
    return d


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _timing.add_common_args(ap, reps=20, warmup=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch.set_num_threads(N) first (default: leave torch's default alone)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        cfg = QUICK
        given = sys.argv[1:] if argv is None else argv
        if not any(a.startswith("--reps") for a in given):
            args.reps = 3
        if not any(a.startswith("--warmup") for a in given):
            args.warmup = 1
    else:
        cfg = FULL

    torch.manual_seed(args.seed)
    ours_model, hf, attn_impl = build_models(cfg)

    def ours(x):
        return snfc_logits(ours_model, x)

    B, T, V = cfg["batch"], cfg["seq"], cfg["vocab_size"]
    g = torch.Generator().manual_seed(args.seed + 1)
    idx = torch.randint(0, V, (B, T), generator=g)
    tgt = torch.randint(0, V, (B, T), generator=g)

    print("bench_gpt2: generated nanoGPT (snfc) vs transformers GPT2LMHeadModel (HF), same weights")
    for line in _timing.environment_lines("--threads" if args.threads else ""):
        print("  " + line)
    print(f"  config: n_layer={cfg['n_layer']} n_head={cfg['n_head']} n_embd={cfg['n_embd']} "
          f"vocab={V} block={cfg['block_size']} dropout=0; batch B={B}, T={T}, float32, CPU")
    print(f"  HF attention implementation: {attn_impl!r}; HF called with use_cache=False")
    print(f"  reps={args.reps} (timed, alternated snfc/HF), warmup={args.warmup} rounds"
          f"{' [--quick: numbers not meaningful]' if args.quick else ''}")

    modes = [("eager", False)] + ([] if args.no_compile else [("compiled", True)])
    rows, notes, results = [], [], []
    for mode, compiled in modes:
        hf_model_call = torch.compile(hf) if compiled else hf  # created here: eager rows see no compile workers

        def hf_call(x, _m=hf_model_call):
            return hf_logits(_m, x)

        for pass_name, backward in (("forward", False), ("fwd+bwd", True)):
            ours_model.train(backward)
            hf.train(backward)
            with _timing.snf_compile(compiled), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fns = make_row_fns(ours, hf_call, idx, tgt, V, backward)
                setup = {}
                if backward:
                    setup = {"snfc": lambda: ours_model.zero_grad(set_to_none=True),
                             "hf": lambda: hf.zero_grad(set_to_none=True)}
                first = {}
                for name, fn in fns.items():  # first call: compiles in compiled mode; untimed
                    if name in setup:
                        setup[name]()
                    t0 = time.perf_counter()
                    fn()
                    first[name] = time.perf_counter() - t0
                diff = check_row(ours, hf_call, idx, tgt, V, f"{mode} {pass_name}")
                samples = _timing.time_alternating(fns, warmup=args.warmup, reps=args.reps, setup=setup)
            fell_back = [str(w.message) for w in caught if "torch.compile is unavailable" in str(w.message)]
            if fell_back:
                notes.append(f"{mode} {pass_name}: snfc fell back to eager: {fell_back[0]}")
            so, sh = _timing.summarize(samples["snfc"]), _timing.summarize(samples["hf"])
            r = _timing.ratio(so.median, sh.median)
            pr = _timing.paired_ratio(samples["snfc"], samples["hf"])
            rows.append([mode, pass_name, so.median, sh.median, f"{r:.3f}", f"{pr:.3f}",
                         f"{so.min:.1f} / {sh.min:.1f}", f"{100 * so.spread:.0f}% / {100 * sh.spread:.0f}%",
                         f"{diff:.1e}"])
            if compiled:
                notes.append(f"{mode} {pass_name}: first call (compile, untimed) "
                             f"snfc {first['snfc']:.1f}s, HF {first['hf']:.1f}s")
            results.append(dict(mode=mode, pass_=pass_name, snfc=so.__dict__, hf=sh.__dict__, ratio=r,
                                paired_ratio=pr, max_abs_logit_diff=diff, snfc_ms=samples["snfc"], hf_ms=samples["hf"]))
            print(f"  done: {mode} {pass_name}", flush=True)

    print()
    print(_timing.format_table(
        ["mode", "pass", "snfc ms", "HF ms", "ratio", "paired", "min ms snfc / HF", "IQR snfc / HF",
         "max |dlogit|"], rows))
    print("\nms = median per call; ratio = snfc ms / HF ms (lower is better, < 1.0 = snfc faster); "
          "paired = median of per-rep ratios\n(adjacent calls share the machine's load: trust it over "
          "`ratio` when IQR is large); IQR = interquartile range / median (noise).")
    for n in notes:
        print("  note: " + n)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(config=cfg, reps=args.reps, warmup=args.warmup,
                                                   torch=torch.__version__, threads=torch.get_num_threads(),
                                                   hf_attn=attn_impl, rows=results), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
