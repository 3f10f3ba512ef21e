"""The quickstart: import the generated modules, train each briefly on a built-in task, sample.

Run from the repository root after `snfc compile specs/*.snf` (scripts/demo.sh does both):

    python -m snf.quickstart

Nothing is downloaded: the character-level tasks read text this repository contains.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("SNF_COMPILE", "0")  # tiny models: compiling would cost more than it saves

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ROOT = Path.cwd()


class Progress:
    """A dependency-free progress bar: redrawn in place on a terminal, a few lines in logs."""

    def __init__(self, total: int, label: str, width: int = 24):
        self.total, self.label, self.width = total, label, width
        self.tty = sys.stderr.isatty()
        self.start = time.perf_counter()
        self.last_line = -1

    def update(self, step: int, loss: float) -> None:
        done = (step + 1) / self.total
        if self.tty:
            bar = "#" * int(done * self.width)
            sys.stderr.write(f"\r  {self.label} [{bar:<{self.width}}] {step + 1}/{self.total} loss {loss:.3f}")
            sys.stderr.flush()
        else:
            tenth = int(done * 4)
            if tenth != self.last_line:
                self.last_line = tenth
                print(f"  {self.label} step {step + 1}/{self.total} loss {loss:.3f}", file=sys.stderr)

    def close(self) -> float:
        if self.tty:
            sys.stderr.write("\n")
        return time.perf_counter() - self.start


def _module(name: str):
    sys.path.insert(0, str(ROOT))
    try:
        return importlib.import_module(f"generated.{name}")
    finally:
        sys.path.pop(0)


def _train(model, batch_fn, loss_fn, steps: int, lr: float, label: str) -> list[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * s / steps)))
    bar, losses = Progress(steps, label), []
    model.train()
    for step in range(steps):
        loss = loss_fn(model, *batch_fn())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        bar.update(step, loss.item())
    seconds = bar.close()
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    print(f"  loss {first:.3f} -> {last:.3f} in {steps} steps ({seconds:.1f} s)")
    model.eval()
    return losses


# ------------------------------------------------------------------------------ tasks

def tiny_max_task(steps: int) -> None:
    """TinyTransformer has no positions, so its task must not need them: every position
    predicts the largest token of its sequence (the answer is the same wherever you stand)."""
    mod = _module("tiny_transformer")
    torch.manual_seed(0)
    model = mod.Model()
    cfg = model.config
    print(f"\n== tiny_transformer: predict the sequence maximum at every position "
          f"(vocab {cfg.vocab_size}, d {cfg.n_embd}, {sum(p.numel() for p in model.parameters())} parameters)")

    def batch(n=128):
        x = torch.randint(0, cfg.vocab_size, (n, cfg.block_size))
        return x, x.max(1, keepdim=True).values.expand(-1, cfg.block_size)

    _train(model, batch, lambda m, x, y: F.cross_entropy(m(x).logits.flatten(0, 1), y.flatten()), steps, 3e-2,
           "tiny_transformer")
    x, y = batch(4096)
    with torch.no_grad():
        acc = (model(x).y == y).float().mean().item()
    print(f"  accuracy on 4096 fresh sequences: {acc:.1%}   e.g. {x[0].tolist()} -> {model(x[:1]).y[0].tolist()}")


def _corpus() -> str:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "specs").glob("*.snf"))]
    text = "\n".join(p.read_text(encoding="utf-8") for p in files if p.exists())
    return "".join(ch for ch in text if ch.isprintable() or ch == "\n")


class Chars:
    def __init__(self, text: str):
        self.vocab = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.vocab)}
        data = torch.tensor([self.index[c] for c in text], dtype=torch.long)
        split = int(len(data) * 0.9)
        self.train, self.val = data[:split], data[split:]

    def batch(self, n: int, t: int, val: bool = False):
        data = self.val if val else self.train
        starts = torch.randint(0, len(data) - t - 1, (n,))
        x = torch.stack([data[s:s + t] for s in starts])
        y = torch.stack([data[s + 1:s + t + 1] for s in starts])
        return x, y

    def decode(self, ids) -> str:
        return "".join(self.vocab[i] for i in ids)


def _logits(out):
    return out.logits if hasattr(out, "logits") else out


def _sample(model, chars: Chars, prompt: str, n: int, block: int, temperature: float = 0.8) -> str:
    g = torch.Generator().manual_seed(0)
    ids = torch.tensor([[chars.index.get(c, 0) for c in prompt]])
    if hasattr(model, "generate") and ids.size(1) + n <= block:  # the generated KV-cache decoder
        return chars.decode(model.generate(ids, n, temperature=temperature, top_k=20, generator=g)[0].tolist())
    with torch.no_grad():
        for _ in range(n):
            logits = _logits(model(ids[:, -block:]))[:, -1] / temperature
            nxt = torch.multinomial(F.softmax(logits, -1), 1, generator=g)
            ids = torch.cat([ids, nxt], 1)
    return chars.decode(ids[0].tolist())


def char_lm(name: str, overrides: dict, steps: int, lr: float, t: int = 64) -> None:
    mod = _module(name)
    chars = Chars(_corpus())
    torch.manual_seed(0)
    model = mod.Model(vocab_size=len(chars.vocab), block_size=t, **overrides)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"\n== {name}: character-level language model on this repository's own text "
          f"({len(chars.train)} chars, vocab {len(chars.vocab)}, {n_params / 1e3:.0f}k parameters)")

    def loss_fn(m, x, y):
        return F.cross_entropy(_logits(m(x)).flatten(0, 1), y.flatten())

    _train(model, lambda: chars.batch(32, t), loss_fn, steps, lr, name)
    x, y = chars.batch(256, t, val=True)
    with torch.no_grad():
        logits = _logits(model(x))
        acc = (logits.argmax(-1) == y).float().mean().item()
        val = F.cross_entropy(logits.flatten(0, 1), y.flatten()).item()
    print(f"  held-out next-character accuracy {acc:.1%} (loss {val:.3f}; chance {1 / len(chars.vocab):.1%})")
    text = _sample(model, chars, "let x = ", 48, t)
    print("  sample: " + repr(text))


def snowflake_pairs(steps: int) -> None:
    """SnowflakeCore is bidirectional: sequences are made of pairs (a, a); one token of some pairs
    is masked, and restoring it needs its partner, which sits on its left or on its right.
    A quarter of the rows are short and padded (the padding mask keeps them out)."""
    mod = _module("snowflake_core")
    vocab, t = 20, 16
    mask_id = vocab - 1
    torch.manual_seed(0)
    model = mod.Model(vocab_size=vocab, block_size=t, n_layer=2, n_head=4, n_embd=64, d_ff=128, dropout=0.0)
    print(f"\n== snowflake_core: restore masked tokens from their pair partner, left or right "
          f"(bidirectional, padded batches, {sum(p.numel() for p in model.parameters()) / 1e3:.0f}k parameters)")

    def batch(n=32):
        x = torch.randint(0, mask_id, (n, t // 2)).repeat_interleave(2, dim=1)
        pick = torch.randint(0, 2, (n, t // 2))                     # which one of the pair is hidden
        hidden = torch.zeros(n, t, dtype=torch.bool)
        chosen = torch.rand(n, t // 2) < 0.3
        hidden[:, 0::2] = chosen & (pick == 0)
        hidden[:, 1::2] = chosen & (pick == 1)
        pad = torch.ones(n, t, dtype=torch.long)
        pad[::4, t // 2:] = 0
        hidden &= pad.bool()
        return x.masked_fill(hidden, mask_id), pad, x, hidden

    def loss_fn(m, inp, pad, target, hidden):
        return F.cross_entropy(m(inp, pad)[hidden], target[hidden])

    _train(model, batch, loss_fn, steps, 3e-3, "snowflake_core")
    inp, pad, target, hidden = batch(512)
    with torch.no_grad():
        acc = (model(inp, pad).argmax(-1)[hidden] == target[hidden]).float().mean().item()
    print(f"  accuracy on masked tokens of 512 fresh sequences: {acc:.1%} (chance {1 / (vocab - 1):.1%})")


def main() -> int:
    start = time.perf_counter()
    torch.set_num_threads(max(1, min(torch.get_num_threads(), 4)))
    print(f"snfc quickstart: training the generated modules in generated/ (torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, SNF_COMPILE={os.environ['SNF_COMPILE']})")
    tiny_max_task(600)
    char_lm("gpt_decoder", dict(n_layer=2, n_head=4, n_embd=64, mlp_hidden=172, gradient_checkpointing=False),
            steps=700, lr=3e-3)
    char_lm("nanogpt", dict(n_layer=2, n_head=4, n_embd=64, dropout=0.0), steps=400, lr=3e-3)
    snowflake_pairs(1200)
    print(f"\ndone in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
