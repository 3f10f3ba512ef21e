"""examples/train.py's training step against nanoGPT's, on the same baby GPT and the same batches.

    PYTHONPATH=. python3 benchmarks/bench_train_example.py              # CPU: about a minute on 2 cores
    PYTHONPATH=. python3 benchmarks/bench_train_example.py --threads 1 --clock cpu   # a shared machine
    PYTHONPATH=. python3 benchmarks/bench_train_example.py --quick      # smoke run

One iteration is what examples/train.py does per step (its `train_step`: the next-token loss of
a batch of character windows, backward, gradient clipping at 1.0, AdamW with weight decay on the
matrices, its warmup-then-cosine learning rate), for two models:

- `snfc`: specs/nanogpt.snf compiled in process as train.py compiles it (`snf.load`), loss from
  its logits as train.py computes it (`next_token_loss`); on a CPU it trains eagerly (its
  `compile_units`);
- `nanogpt`: benchmarks/nanogpt_ref.py, Karpathy's model.py structure, loss as nanoGPT's train.py
  takes it (`logits, loss = model(X, Y)`).

Both start from the same weights (nanoGPT's, loaded through the spec's `checkpoint nanogpt:`
section), with GPT-2's tanh GELU on both sides so that they compute the same function, and draw
the same batches of this repository's README as characters. The first steps' losses must agree
(1e-4) before anything is timed. Steps alternate (snfc, nanogpt, snfc, ...), each model keeping
its own optimizer state; the table gives the median ms/iter, tokens/s, the interquartile spread
and the median of the per-step ratios snfc / nanogpt (below 1: snfc is faster). The config is a
baby GPT for a CPU (nanoGPT's shakespeare_char, smaller): 4 layers, 4 heads, n_embd 128,
block_size 64, batch 12, dropout 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "examples"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import torch  # noqa: E402

import train  # noqa: E402  examples/train.py
from benchmarks import _timing  # noqa: E402
from benchmarks.nanogpt_ref import GPT, GPTConfig  # noqa: E402
from snf.interop import load_state_dict  # noqa: E402

FULL = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, batch=12)
QUICK = dict(n_layer=1, n_head=2, n_embd=32, block_size=16, batch=2)
TOL = 1e-4


def _adamw(model, args):
    """train.py's optimizer (and nanoGPT's configure_optimizers): decay on the matrices only."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))


def contenders(cfg: dict, device: str):
    """{name: step()} for both models, each step drawing its own (identical) next batch."""
    data, vocab = train.tokenize(str(ROOT / "README.md"), "char")
    targs = train.arguments(["--data", str(ROOT / "README.md")])  # train.py's defaults: lr, clip, schedule
    lm = train.language_model(str(ROOT / "specs" / "nanogpt.snf"))
    sizes = dict(n_layer=cfg["n_layer"], n_head=cfg["n_head"], n_embd=cfg["n_embd"], block_size=cfg["block_size"],
                 vocab_size=len(vocab), dropout=0.0, bias=True)
    torch.manual_seed(0)
    ref = GPT(GPTConfig(**sizes)).to(device).train()
    ours = lm.module.Model(lm.module.Config(**sizes, gelu_tanh=True)).to(device).train()
    load_state_dict(ours, ref.state_dict(), "nanogpt")
    losses = {
        "snfc": lambda x, y: train.next_token_loss(ours, lm, x, y),
        "nanogpt": lambda x, y: ref(x, y)[1],
    }
    steps = {}
    for name, model in (("snfc", ours), ("nanogpt", ref)):
        opt, g, it = _adamw(model, targs), torch.Generator().manual_seed(targs.seed), [0]

        def step(model=model, opt=opt, g=g, it=it, loss_of=losses[name]):
            micro = [train.batch(data, cfg["batch"], cfg["block_size"], g, device)]
            loss = train.train_step(model, opt, loss_of, micro, train.learning_rate(it[0], targs), targs.grad_clip,
                                    contextlib.nullcontext())
            it[0] += 1
            if device == "cuda":
                torch.cuda.synchronize()
            return loss
        steps[name] = step
    return steps, sum(p.numel() for p in ours.parameters())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _timing.add_common_args(parser, reps=40, warmup=3)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = QUICK if args.quick else FULL
    steps, n_params = contenders(cfg, args.device)
    print("\n".join(_timing.environment_lines("--threads" if args.threads else "")))
    print(f"device {args.device}; nanoGPT n_layer={cfg['n_layer']} n_head={cfg['n_head']} n_embd={cfg['n_embd']} "
          f"block_size={cfg['block_size']}, batch {cfg['batch']}, {n_params / 1e6:.2f}M parameters; eager; "
          f"clock {args.clock}")
    for i in range(2):  # the same start, the same batches: the same losses, or nothing is timed
        a, b = steps["snfc"](), steps["nanogpt"]()
        if not abs(a - b) <= TOL:
            raise SystemExit(f"ABORT: step {i + 1}: loss {a:.6f} (snfc) vs {b:.6f} (nanogpt); not timing")
    print(f"steps 1-2 agree: loss {a:.6f} (snfc) vs {b:.6f} (nanogpt)")
    samples = _timing.time_alternating(steps, warmup=args.warmup, reps=args.reps, clock=_timing.clock_of(args.clock))
    tokens = cfg["batch"] * cfg["block_size"]
    stats = {name: _timing.summarize(s) for name, s in samples.items()}
    print(_timing.format_table(["contender", "ms/iter", "tokens/s", "IQR", "vs nanogpt"], [
        [name, st.median, f"{tokens / st.median * 1e3:,.0f}", f"{st.spread:.0%}",
         _timing.paired_ratio(samples[name], samples["nanogpt"])] for name, st in stats.items()]))
    if args.json:
        Path(args.json).write_text(json.dumps({"config": cfg, "device": args.device, "ms": samples}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
