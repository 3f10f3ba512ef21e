"""Train a causal language model from an SNF spec on a text file, nanoGPT style.

    python examples/train.py --data input.txt --spec specs/nanogpt.snf --out out \
        --set n_layer=4 --set n_head=4 --set n_embd=128 --set block_size=128 --max-iters 2000

The text becomes character (or byte) tokens; the spec's vocabulary field is set to their count.
Each eval writes out/ckpt.pt (model, optimizer, step, config, vocabulary, random states), and
`--resume` goes on from it exactly. examples/sample.py samples from a checkpoint. Any spec whose
module has `generate` works (specs/nanogpt.snf, llama3.snf, mistral.snf, gpt_decoder.snf, ...):
the loss is the next-token cross-entropy of its logits, whatever its own loss input is called.
The module compiles as its `compile_units` say for the device (on a CPU, training runs eagerly).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import snf
from snf.compiler import analyze, lower
from snf.diagnostics import SpecError
from snf.passes import plan
from snf.source import Source


class UserError(Exception):
    """A mistake in the command line or the files: printed, exit 1."""


def arguments(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="a text file")
    p.add_argument("--spec", default=str(Path(__file__).resolve().parent.parent / "specs" / "nanogpt.snf"),
                   help="the SNF spec of the model (default: this repository's specs/nanogpt.snf)")
    p.add_argument("--tokens", choices=("char", "byte"), default="char")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="a Config field")
    p.add_argument("--config", help="a JSON file of Config fields (--set wins)")
    p.add_argument("--out", default="out", help="where ckpt.pt goes")
    p.add_argument("--resume", action="store_true", help="go on from OUT/ckpt.pt")
    p.add_argument("--max-iters", type=int, default=2000)
    p.add_argument("--stop-at", type=int, help="save and stop after this step (a job with a time limit: "
                   "--resume goes on, on the same schedule)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup-iters", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--eval-interval", type=int, default=250)
    p.add_argument("--eval-iters", type=int, default=20)
    p.add_argument("--log-interval", type=int, default=10)
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=1337)
    return p.parse_args(argv)


# ------------------------------------------------------------------------------- the spec

@dataclasses.dataclass(frozen=True)
class LanguageModel:
    module: object  # the generated module (Config, Model)
    vocab_field: str  # the Config field the logits' last axis is (vocab_size)
    context_field: str | None  # the Config field that bounds the tokens' length (block_size)
    logits: str  # the output generate samples from


def language_model(spec: str) -> LanguageModel:
    """The spec's module, and which Config fields are its vocabulary and its context, from the
    checked model's decode plan (what `generate` uses)."""
    if not Path(spec).is_file():
        raise UserError(f"no spec at {spec}")
    result = analyze(Source.read(spec))
    if not result.ok:
        raise UserError(str(SpecError(result.diagnostics, {result.source.path: result.source})))
    decode = plan(lower(result.model)).decode
    if decode is None:
        raise UserError(f"{spec} is not a causal language model (its module has no generate): `snfc check -v` says why")
    logits = next(o for o in result.model.outputs if o.name == decode.logits)
    vocab = logits.ty.shape[-1].as_symbol()
    if vocab not in result.model.config_names():
        raise UserError(f"the vocabulary of {spec} ({logits.ty.shape[-1]}) is not a Config field")
    context = decode.context.as_symbol() if decode.context is not None else None
    return LanguageModel(snf.load(spec), vocab, context, decode.logits)


def make_config(lm: LanguageModel, args, vocab: int, saved: dict | None = None):
    """The Config: the saved one when resuming, else the defaults, --config, --set, and the vocabulary."""
    Config = lm.module.Config
    types = {f.name: f.type for f in dataclasses.fields(Config)}
    if saved is not None:
        return Config(**saved)
    values = {}
    if args.config:
        try:
            values.update(json.loads(Path(args.config).read_text()))
        except (OSError, ValueError) as e:
            raise UserError(f"--config {args.config}: {e}") from None
    for pair in args.set:
        name, eq, text = pair.partition("=")
        if not eq or name not in types:
            known = ", ".join(types)
            raise UserError(f"--set {pair}: not FIELD=VALUE with a Config field ({known})")
        try:
            values[name] = {"int": int, "float": float, "str": str,
                            "bool": lambda t: {"true": True, "false": False}[t.lower()]}[types[name]](text)
        except (ValueError, KeyError):
            raise UserError(f"--set {pair}: `{name}` is {types[name]}") from None
    unknown = sorted(set(values) - set(types))
    if unknown:
        raise UserError(f"unknown Config fields: {', '.join(unknown)}")
    if values.setdefault(lm.vocab_field, vocab) < vocab:
        raise UserError(f"{lm.vocab_field}={values[lm.vocab_field]} is below the data's {vocab} tokens")
    try:
        return Config(**values)
    except (TypeError, ValueError) as e:
        raise UserError(f"the config: {e}") from None


# ------------------------------------------------------------------------------- the data

def tokenize(path: str, kind: str, vocab: list | None = None) -> tuple[torch.Tensor, list]:
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise UserError(f"--data {path}: {e.strerror}") from None
    if kind == "byte":
        return torch.tensor(list(raw), dtype=torch.long), list(range(256))
    text = raw.decode("utf-8", errors="replace")
    vocab = vocab or sorted(set(text))
    index = {c: i for i, c in enumerate(vocab)}
    return torch.tensor([index.get(c, 0) for c in text], dtype=torch.long), vocab


def batch(data: torch.Tensor, size: int, length: int, g: torch.Generator, device: str):
    starts = torch.randint(len(data) - length - 1, (size,), generator=g)
    x = torch.stack([data[s:s + length] for s in starts])
    y = torch.stack([data[s + 1:s + 1 + length] for s in starts])
    return x.to(device), y.to(device)


# ------------------------------------------------------------------------------- training

def learning_rate(it: int, args) -> float:
    """Linear warmup, then a cosine down to min_lr at max_iters."""
    if it < args.warmup_iters:
        return args.lr * (it + 1) / args.warmup_iters
    progress = (it - args.warmup_iters) / max(1, args.max_iters - args.warmup_iters)
    return args.min_lr + 0.5 * (1 + math.cos(math.pi * min(1.0, progress))) * (args.lr - args.min_lr)


def next_token_loss(model, lm: LanguageModel, x, y) -> torch.Tensor:
    out = model(x)
    logits = out if isinstance(out, torch.Tensor) else getattr(out, lm.logits)
    return F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())


def train_step(model, opt, loss_of, micro_batches: list, lr: float, grad_clip: float, autocast) -> float:
    """One optimizer step as nanoGPT's train.py takes it: the micro-batches' gradients summed,
    clipped, AdamW, gradients dropped. Returns the loss (of the last micro-batch, unscaled).
    benchmarks/bench_train_example.py times it against nanoGPT."""
    for group in opt.param_groups:
        group["lr"] = lr
    for x, y in micro_batches:
        with autocast:
            loss = loss_of(x, y) / len(micro_batches)
        loss.backward()
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item() * len(micro_batches)


def main(argv=None) -> int:
    args = arguments(argv)
    try:
        return train(args)
    except UserError as e:
        print(f"train.py: error: {e}", file=sys.stderr)
        return 1


def train(args) -> int:
    out = Path(args.out)
    ckpt_path = out / "ckpt.pt"
    saved = None
    if args.resume:
        if not ckpt_path.is_file():
            raise UserError(f"--resume: no checkpoint at {ckpt_path}")
        saved = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        args.spec, args.tokens = saved["spec"], saved["tokens"]
    lm = language_model(args.spec)
    data, vocab = tokenize(args.data, args.tokens, saved["vocab"] if saved else None)
    config = make_config(lm, args, len(vocab), saved["config"] if saved else None)
    length = getattr(config, lm.context_field) if lm.context_field else 256
    if len(data) < 2 * (length + 1):
        raise UserError(f"--data has {len(data)} tokens; it needs at least {2 * (length + 1)} for "
                        f"{lm.context_field or 'the context'} = {length}")
    split = int(0.9 * len(data))
    parts = {"train": data[:split], "val": data[split:]}
    if len(parts["val"]) < length + 2:
        parts["val"] = data  # a tiny corpus: evaluate on all of it
    torch.manual_seed(args.seed)
    model = lm.module.Model(config).to(args.device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": rest, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(args.seed)
    start = 0
    if saved:
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        g.set_state(saved["data_rng"])
        torch.set_rng_state(saved["rng"])
        start = saved["iter"]
        print(f"resuming at step {start} from {ckpt_path}")
    autocast = torch.autocast(args.device.split(":")[0], torch.bfloat16) if args.bf16 else contextlib.nullcontext()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{Path(args.spec).name}: {n_params / 1e6:.2f}M parameters, {len(vocab)} {args.tokens} tokens, "
          f"{lm.context_field or 'context'} = {length}, {len(data):,} tokens of data")

    def evaluate() -> dict:
        model.eval()
        losses = {}
        eval_g = torch.Generator().manual_seed(args.seed + 1)  # the same batches at every eval
        with torch.no_grad(), autocast:
            for name, part in parts.items():
                losses[name] = sum(next_token_loss(model, lm, *batch(part, args.batch_size, length, eval_g, args.device))
                                   .item() for _ in range(args.eval_iters)) / args.eval_iters
        model.train()
        return losses

    def save(it: int) -> None:
        out.mkdir(parents=True, exist_ok=True)
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "iter": it,
                    "config": dataclasses.asdict(config), "spec": args.spec, "tokens": args.tokens,
                    "vocab": vocab, "data_rng": g.get_state(), "rng": torch.get_rng_state()}, ckpt_path)

    model.train()
    tick = time.perf_counter()
    end = min(args.max_iters, args.stop_at or args.max_iters)
    for it in range(start, end):
        if it % args.eval_interval == 0 and it > start:
            losses = evaluate()
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            save(it)
        lr = learning_rate(it, args)
        micro = [batch(parts["train"], args.batch_size, length, g, args.device) for _ in range(args.grad_accum)]
        loss = train_step(model, opt, lambda x, y: next_token_loss(model, lm, x, y), micro, lr, args.grad_clip, autocast)
        if (it + 1) % args.log_interval == 0 or it + 1 == end:
            elapsed = (time.perf_counter() - tick) / args.log_interval
            tokens = args.batch_size * args.grad_accum * length
            print(f"step {it + 1}: loss {loss:.4f}, lr {lr:.2e}, {elapsed * 1000:.1f} ms/iter, "
                  f"{tokens / elapsed:,.0f} tokens/s", flush=True)
            tick = time.perf_counter()
    losses = evaluate()
    print(f"step {end}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
    save(end)
    print(f"saved {ckpt_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
