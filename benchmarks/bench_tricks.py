"""Each speed trick of the generated code against the same code without it, in one run.

    PYTHONPATH=. python3 benchmarks/bench_tricks.py            # full run: a few minutes on 2 cores
    PYTHONPATH=. python3 benchmarks/bench_tricks.py --quick    # smoke run

A trick earns its place in generated code with a row here on each device it touches. The rows
(generated/nanogpt.py unless said; 4 layers, 4 heads, D=256, vocab 1024; torch.compile on, as
shipped, unless the row says eager):

- fused q/k/v: the `fuse_linear` pass (one nn.Linear for q, k, v) against three nn.Linears
  (the spec compiled without the pass); a training step (forward + backward), B=8, T=128.
- decode attention written out (CPU only): `_attention`'s one-query path in a compiled decode
  step against an SDPA call there; generate, batch 1.
- realize threshold (CPU only): the decode step compiled with inductor's
  `realize_opcount_threshold=4` against the default; generate, batch 1, gpt_decoder.snf (RoPE).
- decompose_mm_pass (CPU only): the decode step compiled with inductor's post-grad pass that
  writes a one-row matmul as a reduction over the weight, against the GEMM; generate, batch 1.
- cache buckets: a decode step reads `_bucket(position)` slots of a 1024-slot cache against all
  1024; generate, batch 1.

Each pair alternates rep by rep; `ratio` is the median of (with trick / without), below 1 is a
gain. The device is the CPU (this project's CI machines have no GPU): CUDA rows are unmeasured.
"""

from __future__ import annotations

import argparse
import os
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks import _timing  # noqa: E402
from snf.interop import load_state_dict, spec_state  # noqa: E402

FULL = dict(n_layer=4, n_head=4, n_embd=256, vocab_size=1024, block_size=128)
QUICK = dict(n_layer=2, n_head=2, n_embd=32, vocab_size=64, block_size=32)


def module_from(spec: str, name: str, fuse: bool = False) -> types.ModuleType:
    """The generated module of specs/<spec>.snf, compiled in process (with fuse_linear, which PASSES
    no longer runs, where `fuse`)."""
    from snf import passes as passes_mod
    from snf.codegen import generate
    from snf.compiler import analyze
    from snf.passes.fuse_linear import fuse_linear
    from snf.source import Source

    result = analyze(Source.read(ROOT / "specs" / f"{spec}.snf"))
    model = passes_mod.run_passes(result.model)
    if fuse:
        model = fuse_linear(model)
        passes_mod.verify(model)
    # standalone: the helpers a trick patches (m._bucket, m._attention) are this module's own copy
    code = generate(passes_mod.plan(model), f"specs/{spec}.snf", standalone=True)
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(code, f"<{name}>", "exec"), module.__dict__)
    return module


def pair(a, b, *, reps: int, warmup: int) -> tuple[float, float, float]:
    samples = _timing.time_alternating({"with": a, "without": b}, warmup=warmup, reps=reps)
    return (_timing.summarize(samples["with"]).median, _timing.summarize(samples["without"]).median,
            _timing.paired_ratio(samples["with"], samples["without"]))


def fused_qkv(cfg: dict, args) -> list:
    rows = []
    fused, plain = module_from("nanogpt", "trick_fused", fuse=True), module_from("nanogpt", "trick_unfused")
    torch.manual_seed(0)
    a = fused.Model(fused.Config(**cfg)).train()
    b = plain.Model(plain.Config(**cfg)).train()
    load_state_dict(b, spec_state(a))  # the same weights
    idx = torch.randint(0, cfg["vocab_size"], (8 if not args.quick else 2, cfg["block_size"]))

    def step(model):
        def run():
            model.zero_grad(set_to_none=True)
            logits = model(idx).logits
            F.cross_entropy(logits.flatten(0, 1), idx.flatten()).backward()
        return run

    for compiled in ([False] if args.no_compile else [False, True]):
        with _timing.snf_compile(compiled):
            with_ms, without_ms, r = pair(step(a), step(b), reps=args.reps, warmup=args.warmup)
        rows.append(["fused q/k/v", "compiled" if compiled else "eager", "training step", with_ms, without_ms,
                     f"{r:.3f}"])
    return rows


def _generate_pair(module, cfg: dict, patch, args, prompt_len: int = 16, new: int = 64, spec_kwargs=None):
    """Tokens/s of generate as shipped, and with `patch(module_copy)` undoing the trick."""
    torch.manual_seed(0)
    model = module.Model(module.Config(**cfg, **(spec_kwargs or {}))).eval()
    other = patch()
    model_b = other.Model(other.Config(**cfg, **(spec_kwargs or {}))).eval()
    model_b.load_state_dict(model.state_dict())
    prompt = torch.randint(0, cfg["vocab_size"], (1, prompt_len if not args.quick else 4))
    n = new if not args.quick else 4
    a = model.generate(prompt, n, temperature=0)
    b = model_b.generate(prompt, n, temperature=0)
    if not torch.equal(a, b):
        raise SystemExit("ABORT: the variants generated different tokens")
    return pair(lambda: model.generate(prompt, n, temperature=0), lambda: model_b.generate(prompt, n, temperature=0),
                reps=args.reps, warmup=args.warmup)


def decode_tricks(cfg: dict, args) -> list:
    rows = []
    if args.no_compile:
        return rows
    with _timing.snf_compile(True):
        # the written-out one-query attention, against SDPA in the same compiled step
        def sdpa_only():
            m = module_from("nanogpt", "trick_sdpa")
            original = m._attention

            def attention(q, k, v, mask, causal, dropout_p=0.0, scale=None, decode=None):
                if decode is not None:  # as the written-out path would see it, through SDPA
                    rows_ = decode.position + torch.arange(q.size(-2), device=q.device)
                    allowed = torch.arange(k.size(-2), device=q.device)[None, :] <= rows_[:, None]
                    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)
                return original(q, k, v, mask, causal, dropout_p, scale, decode)
            m._attention = attention
            return m
        with_ms, without_ms, r = _generate_pair(module_from("nanogpt", "trick_written"), cfg, sdpa_only, args)
        rows.append(["decode attention written out", "compiled (CPU)", "generate, batch 1", with_ms, without_ms,
                     f"{r:.3f}"])

        # inductor's realize threshold in the decode step (RoPE's query), gpt_decoder
        def default_threshold():
            m = module_from("gpt_decoder", "trick_threshold_off")
            m.Model._decode_step = m._hot_path(m.Model.forward.__wrapped__, dynamic=False,  # the shipped step less the threshold
                                               cpu_options={"post_grad_fusion_options": {"decompose_mm_pass": {}}})
            return m
        extra = dict(mlp_hidden=704, gradient_checkpointing=False)
        with_ms, without_ms, r = _generate_pair(module_from("gpt_decoder", "trick_threshold_on"), cfg,
                                                default_threshold, args, spec_kwargs=extra)
        rows.append(["realize_opcount_threshold=4", "compiled (CPU)", "generate, batch 1, gpt_decoder",
                     with_ms, without_ms, f"{r:.3f}"])

        # one-row matmuls as reductions over the weights (inductor's decompose_mm_pass), nanogpt
        def gemm_rows():
            m = module_from("nanogpt", "trick_mm_gemm")
            m.Model._decode_step = m._hot_path(m.Model.forward.__wrapped__, dynamic=False,  # the plain forward
                                               cpu_options={"realize_opcount_threshold": 4})
            return m
        with_ms, without_ms, r = _generate_pair(module_from("nanogpt", "trick_mm_reduce"), cfg, gemm_rows, args)
        rows.append(["decompose_mm_pass", "compiled (CPU)", "generate, batch 1", with_ms, without_ms, f"{r:.3f}"])

        # cache buckets, at a 1024-slot cache
        def whole_cache():
            m = module_from("nanogpt", "trick_no_buckets")
            m._bucket = lambda filled, size: size
            return m
        long = dict(cfg, block_size=1024 if not args.quick else 256)
        with_ms, without_ms, r = _generate_pair(module_from("nanogpt", "trick_buckets"), long, whole_cache, args)
        rows.append(["cache buckets", "compiled (CPU)", f"generate, batch 1, block_size {long['block_size']}",
                     with_ms, without_ms, f"{r:.3f}"])
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _timing.add_common_args(parser, reps=7, warmup=2)
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    os.environ["SNF_COMPILE"] = "0"
    print("\n".join(_timing.environment_lines()))
    print(f"config: {cfg}")
    rows = fused_qkv(cfg, args) + decode_tricks(cfg, args)
    print(_timing.format_table(["trick", "mode", "what is timed", "with ms", "without ms",
                                "ratio (median of paired, < 1: the trick helps)"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
