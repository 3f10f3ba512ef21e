"""The quickstart: the specs in specs/ on the default path, a few of them (SHOWN) trained briefly on a
task that fits each, then measured; `--all` trains every one.

Run from the repository root after `snfc compile specs/*.snf` (scripts/demo.sh does both):

    python -m snf.quickstart [--steps N] [--all]

The tasks read this repository's own text (README, docs, specs); nothing is downloaded.

- A causal language model (a module with `generate`) learns the next character, then samples.
- A bidirectional model reads the text with every character written twice, some of them hidden,
  and restores each hidden one from its twin, on its left or its right. Where its module takes an
  `attention_mask`, a quarter of the rows end in padding. A model whose output is hidden states
  rather than character logits is read out through a linear layer the demo adds.
- TinyTransformer has no positions, so it gets a task that needs none: every position predicts
  the largest token of its sequence.
- A spec not trained (not in SHOWN without `--all`, or with no entry in DEMO) still gets a line: it is
  built at its defaults on the meta device (no memory used) and run forward there once, on the inputs
  its spec requires (an encoder-decoder's decoder input too) at lengths its checks allow, which gives
  its parameter count and output shapes.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

MODES = {
    "auto": "the default path: a unit compiles where the time it saves beats what compiling costs; at these sizes\n"
            "  on a CPU nothing does, so nothing waits for torch.compile (`SNF_COMPILE=1` compiles anyway).",
    "always": "compiled (SNF_COMPILE=1): each model's first steps and decode steps wait for torch.compile.",
    "never": "eager (SNF_COMPILE=0): nothing compiles.",
}
# the specs trained by default, one of each kind: a causal language model, an encoder, a mixture of
# experts; `--all` trains every spec
SHOWN = ("nanogpt", "bert", "mixtral")

ROOT = Path.cwd()
ALPHABET = "\n" + "".join(map(chr, range(32, 127)))  # the characters the text tasks keep
MASK = len(ALPHABET)                                   # the token that hides a character
VOCAB = len(ALPHABET) + 1
CONTEXT = 64                                           # characters per training sequence
BATCH = 16


class Progress:
    """A dependency-free progress bar: redrawn in place on a terminal, a line every tenth of the
    steps in logs (with the seconds so far: a bar that stays still looks like a hang)."""

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
            tenth = int(done * 10)
            if tenth != self.last_line:
                self.last_line = tenth
                print(f"  {self.label} step {step + 1}/{self.total} loss {loss:.3f} "
                      f"({time.perf_counter() - self.start:.0f} s)", file=sys.stderr, flush=True)

    def close(self) -> float:
        if self.tty:
            sys.stderr.write("\n")
        return time.perf_counter() - self.start


def _train(model, params, batch_fn, loss_fn, steps: int, lr: float, label: str) -> None:
    """AdamW with a short warm-up and a cosine decay; prints what the losses did."""
    params = list(params)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * s / steps)))
    bar, losses = Progress(steps, label), []
    model.train()
    for step in range(steps):
        loss = loss_fn(model, *batch_fn())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        bar.update(step, loss.item())
    seconds = bar.close()
    last = losses[-10:]
    print(f"  training loss {losses[0]:.3f} at step 1 -> {sum(last) / len(last):.3f} "
          f"(mean of the last {len(last)} steps); {steps} steps in {seconds:.1f} s")
    model.eval()


def _first(out) -> torch.Tensor:
    """A module's first output: the tensor itself, or the first field of its Output tuple."""
    return out if isinstance(out, torch.Tensor) else out[0]


def _logits(model, x) -> torch.Tensor:
    """The first output, asked for where a model training with its own loss would skip the
    logits (`return_logits`, docs/language.md section 10.3)."""
    asked = {"return_logits": True} if "return_logits" in inspect.signature(model.forward).parameters else {}
    return _first(model(x, **asked))


def _count(params) -> str:
    n = sum(p.numel() for p in params)
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k" if n >= 1e4 else f"{n:,}"


# ------------------------------------------------------------------------------ the text

class Text:
    """This repository's README, docs and specs as character ids (ALPHABET; other characters are
    dropped), split 90/10 into training and held-out text."""

    _cached: "Text | None" = None

    def __init__(self, text: str):
        index = {c: i for i, c in enumerate(ALPHABET)}
        data = torch.tensor([index[c] for c in text if c in index], dtype=torch.long)
        split = int(len(data) * 0.9)
        self.train, self.held_out = data[:split], data[split:]

    @classmethod
    def load(cls) -> "Text":
        if cls._cached is None:
            files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "specs").glob("*.snf"))]
            cls._cached = cls("\n".join(p.read_text(encoding="utf-8") for p in files if p.exists()))
        return cls._cached

    def batch(self, n: int, t: int, held_out: bool = False, generator: torch.Generator | None = None):
        """n windows of t characters, and the same windows one character later."""
        data = self.held_out if held_out else self.train
        starts = torch.randint(0, len(data) - t - 1, (n,), generator=generator)
        x = torch.stack([data[s:s + t] for s in starts])
        y = torch.stack([data[s + 1:s + t + 1] for s in starts])
        return x, y

    @staticmethod
    def encode(s: str) -> torch.Tensor:
        return torch.tensor([[ALPHABET.index(c) for c in s]])

    @staticmethod
    def decode(ids) -> str:
        return "".join(ALPHABET[i] if i < len(ALPHABET) else "_" for i in ids)


def _most_common(targets: torch.Tensor) -> tuple[int, float]:
    """The most common target and how often it is right: the accuracy to beat."""
    counts = torch.bincount(targets.flatten())
    return int(counts.argmax()), counts.max().item() / targets.numel()


# ------------------------------------------------------------------------------ the tasks

def next_character(name: str, model, demo: "Demo") -> str:
    """A causal language model: the next character of this repository's text; then a sample."""
    text = Text.load()
    print(f"  task: predict the next character of this repository's text "
          f"({len(text.train):,} training characters, {VOCAB} tokens)")

    def loss_fn(m, x, y):
        return F.cross_entropy(_logits(m, x).flatten(0, 1), y.flatten())

    _train(model, model.parameters(), lambda: text.batch(BATCH, CONTEXT), loss_fn, demo.steps, demo.lr, name)
    x, y = text.batch(256, CONTEXT, held_out=True, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = _first(model(x))
    acc = (logits.argmax(-1) == y).float().mean().item()
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten()).item()
    common, base = _most_common(y)
    print(f"  held-out text: next character right {acc:.1%} of the time (loss {loss:.3f}); "
          f"always guessing {Text.decode([common])!r} is right {base:.1%}")
    prompt = "let x = "
    ids = model.generate(Text.encode(prompt), 48, temperature=0.8, top_k=20, generator=torch.Generator().manual_seed(0))
    print(f"  sample (generate, temperature 0.8, top-k 20): {Text.decode(ids[0].tolist())!r}")
    return f"next character: {acc:.1%} right (baseline {base:.1%})"


def twin_characters(name: str, model, demo: "Demo") -> str:
    """A bidirectional model: this repository's text with every character written twice
    ("ttwwiiccee"); some characters are hidden (MASK), and each is restored from its twin, which
    sits on its left or on its right, so the model must look both ways."""
    text = Text.load()
    pairs = 8                              # characters per row, so rows of 16 tokens
    padded = "attention_mask" in inspect.signature(model.forward).parameters
    with torch.no_grad():
        width = _first(model(text.batch(1, 2 * pairs)[0])).size(-1)
    head = None if width == VOCAB else torch.nn.Linear(width, VOCAB)  # hidden states: read them out
    print(f"  task: restore hidden characters of this repository's text written twice over ('ttwwiiccee'), "
          f"each from its twin on the left or the right"
          + ("; a quarter of the rows end in padding" if padded else "")
          + (f"; the model's {width}-wide output read out by a linear layer the demo adds" if head else ""))

    def batch(n: int = 4 * BATCH, generator: torch.Generator | None = None, held_out: bool = False):
        x = text.batch(n, pairs, held_out, generator)[0].repeat_interleave(2, dim=1)
        chosen = torch.rand(n, pairs, generator=generator) < 0.3           # pairs with one twin hidden
        left = torch.rand(n, pairs, generator=generator) < 0.5             # which twin
        hidden = torch.stack([chosen & left, chosen & ~left], dim=2).flatten(1)
        keep = torch.ones_like(x)
        if padded:
            keep[::4, pairs:] = 0  # padding: attention_mask 0, and nothing to restore there
            hidden &= keep.bool()
        return x.masked_fill(hidden, MASK), keep, x, hidden

    def logits(m, inp, keep):
        out = _first(m(inp, attention_mask=keep) if padded else m(inp))
        return head(out) if head is not None else out

    def loss_fn(m, inp, keep, target, hidden):
        return F.cross_entropy(logits(m, inp, keep)[hidden], target[hidden])

    params = [*model.parameters(), *(head.parameters() if head is not None else ())]
    _train(model, params, batch, loss_fn, demo.steps, demo.lr, name)
    inp, keep, target, hidden = batch(1024, torch.Generator().manual_seed(0), held_out=True)
    with torch.no_grad():
        acc = (logits(model, inp, keep).argmax(-1)[hidden] == target[hidden]).float().mean().item()
    common, base = _most_common(target[hidden])
    print(f"  held-out text: hidden characters restored {acc:.1%} of the time; "
          f"always guessing {Text.decode([common])!r} is right {base:.1%}")
    return f"hidden twin characters: {acc:.1%} right (baseline {base:.1%})"


def sequence_maximum(name: str, model, demo: "Demo") -> str:
    """TinyTransformer has no positions, so its task must not need them: every position predicts
    the largest token of its sequence (the answer is the same wherever you stand)."""
    cfg = model.config
    print(f"  task: predict the largest token of the sequence at every position "
          f"(sequences of {cfg.block_size} tokens out of {cfg.vocab_size})")

    def batch(n=128, generator=None):
        x = torch.randint(0, cfg.vocab_size, (n, cfg.block_size), generator=generator)
        return x, x.max(1, keepdim=True).values.expand(-1, cfg.block_size)

    def loss_fn(m, x, y):
        return F.cross_entropy(m(x).logits.flatten(0, 1), y.flatten())

    _train(model, model.parameters(), batch, loss_fn, demo.steps, demo.lr, name)
    x, y = batch(4096, torch.Generator().manual_seed(0))
    with torch.no_grad():
        acc = (model(x).y == y).float().mean().item()
    common, base = _most_common(y)
    print(f"  4096 fresh sequences: {acc:.1%} right; always guessing {common} is right {base:.1%}; "
          f"e.g. {x[0].tolist()} -> {model(x[:1]).y[0].tolist()}")
    return f"sequence maximum: {acc:.1%} right (baseline {base:.1%})"


def sorted_text(name: str, model, demo: "Demo") -> str:
    """An encoder-decoder: the decoder writes the encoder's characters in sorted order, so each
    output character is found in the encoder's (cross-attention) by its content, not its position
    (T5 has no absolute positions, and a task that needs them, reversing, learns slowly)."""
    text, start, n = Text.load(), model.config.decoder_start_token_id, 8
    print(f"  task: write {n} characters of this repository's text sorted (the encoder reads them, "
          f"the decoder writes them)")

    def batch(k: int = BATCH, generator: torch.Generator | None = None, held_out: bool = False):
        x = text.batch(k, n, held_out, generator)[0]
        y = x.sort(dim=1).values
        return x, torch.cat([torch.full((k, 1), start), y[:, :-1]], dim=1), y  # teacher forcing

    def loss_fn(m, x, dec, y):
        return F.cross_entropy(m(x, decoder_input_ids=dec).logits.flatten(0, 1), y.flatten())

    _train(model, model.parameters(), batch, loss_fn, demo.steps, demo.lr, name)
    x, dec, y = batch(256, torch.Generator().manual_seed(0), held_out=True)
    with torch.no_grad():
        acc = (model(x, decoder_input_ids=dec).logits.argmax(-1) == y).float().mean().item()
    common, base = _most_common(y)
    print(f"  held-out text: {acc:.1%} of the characters right (given the ones before); "
          f"always guessing {Text.decode([common])!r} is right {base:.1%}")
    ids = model.generate(Text.encode("let x=y;"), n, temperature=0)
    print(f"  'let x=y;' sorted (greedy generate): {Text.decode(ids[0, 1:].tolist())!r}")
    return f"sorted text: {acc:.1%} right (baseline {base:.1%})"


def _task(model) -> Callable:
    """The task a module's interface fits: next character when it generates, else twin characters."""
    return next_character if hasattr(model, "generate") else twin_characters


@dataclass(frozen=True)
class Demo:
    """How the quickstart trains one spec: its config (small enough for seconds of training on two
    CPU cores), its steps and learning rate, and its task (by default the one its interface fits)."""

    config: dict
    steps: int
    lr: float = 3e-3
    task: Callable | None = None
    note: str = ""  # printed under its section: what its numbers need said


# SnowflakeCore's first loss is far above chance (ln 97 = 4.6), as its seed's own model's is
SNOWFLAKE_NOTE = (
    "its first loss is far above chance (ln 97 = 4.6) by design of the seed it follows: the head is the token\n"
    "  table, drawn N(0, 1) as nn.Embedding draws it, so at initialisation each position's largest logit is its\n"
    "  own input token's (about n_embd / sqrt(1.5) = 52 here, the others about N(0, 8)): the model starts out\n"
    "  copying its input, and where the input is the mask token the loss is that margin. The seed's own\n"
    "  SnowflakeCore starts the same way; training brings it near chance in about 30 steps.")


TEXT = dict(vocab_size=VOCAB, block_size=CONTEXT)
DEMO = {
    # causal language models: the next character
    "gpt_decoder": Demo(dict(TEXT, n_layer=2, n_head=4, n_embd=64, mlp_hidden=172, gradient_checkpointing=False),
                        steps=400),
    "llama3": Demo(dict(TEXT, n_layer=2, n_head=4, n_kv_head=2, n_embd=64, mlp_hidden=172), steps=400),
    "mistral": Demo(dict(TEXT, n_layer=2, n_head=4, n_kv_head=2, n_embd=64, mlp_hidden=172, sliding_window=16),
                    steps=400),
    "nanogpt": Demo(dict(TEXT, n_layer=2, n_head=4, n_embd=64, dropout=0.0), steps=400),
    "gemma2": Demo(dict(TEXT, n_layer=2, n_head=4, n_kv_head=2, n_embd=64, head_dim=16, mlp_hidden=172,
                        query_pre_attn_scalar=16, sliding_window=16), steps=400),
    "gemma3_text": Demo(dict(TEXT, layer_types=["sliding_attention", "full_attention"], n_head=4, n_kv_head=2,
                             n_embd=64, head_dim=16, mlp_hidden=172, query_pre_attn_scalar=16, sliding_window=16),
                        steps=400),
    "qwen2": Demo(dict(TEXT, n_layer=2, n_head=4, n_kv_head=2, n_embd=64, mlp_hidden=172), steps=400),
    "mixtral": Demo(dict(TEXT, n_layer=2, n_head=4, n_kv_head=2, n_embd=64, mlp_hidden=96, sliding_window=16,
                         n_expert=4, n_expert_tok=2), steps=400),
    "olmoe": Demo(dict(TEXT, n_layer=2, n_head=4, n_kv_head=2, n_embd=64, mlp_hidden=96, n_expert=4, n_expert_tok=2),
                  steps=400),
    "qwen3_moe": Demo(dict(TEXT, n_layer=2, n_head=4, n_kv_head=2, n_embd=64, head_dim=16, mlp_hidden=96, n_expert=4,
                           n_expert_tok=2, dense_layers=[0, 0]), steps=400),
    "qwen2_moe": Demo(dict(TEXT, n_layer=2, n_head=4, n_kv_head=2, n_embd=64, mlp_hidden=172, expert_hidden=96,
                           shared_hidden=96, n_expert=4, n_expert_tok=2, sparse_step=2, dense_layers=[0, 0]),
                      steps=400),
    "gptj": Demo(dict(TEXT, n_layer=2, n_head=4, n_embd=64, mlp_hidden=256, rotary_dim=8), steps=400),
    "gpt_neox": Demo(dict(TEXT, n_layer=2, n_head=4, n_embd=64, mlp_hidden=256), steps=400),
    "nanogpt_model": Demo(dict(V=VOCAB, P=CONTEXT, L=2, H=4, D=64), steps=400),
    # recurrent layers (no length bound: no block_size), and the hybrids
    "mamba2": Demo(dict(vocab_size=VOCAB, n_layer=2, n_embd=64, n_head=8, head_dim=16, state_size=16, n_groups=1),
                   steps=400),
    "falcon_h1": Demo(dict(vocab_size=VOCAB, n_layer=2, n_head=4, n_kv_head=2, n_embd=64, head_dim=16, mlp_hidden=172,
                           mamba_d_ssm=128, mamba_n_heads=8, mamba_d_state=16, mamba_n_groups=1), steps=400),
    "qwen3_next": Demo(dict(TEXT, n_layer=2, full_attention_interval=2, n_embd=64, n_head=4, n_kv_head=2, head_dim=16,
                            lin_n_key_head=2, lin_n_value_head=4, lin_key_dim=16, lin_value_dim=16, mlp_hidden=172,
                            expert_hidden=96, shared_hidden=96, n_expert=4, n_expert_tok=2, dense_layers=[0, 0]),
                       steps=400),
    "phi3": Demo(dict(TEXT, n_layer=2, n_head=4, n_kv_head=2, n_embd=64, mlp_hidden=172, short_factor=[1.0] * 8,
                      long_factor=[1.0] * 8, original_max_position=CONTEXT), steps=400),
    "deepseek_v3": Demo(dict(TEXT, n_layer=2, n_head=4, n_embd=64, mlp_hidden=172, q_rank=32, kv_rank=32,
                             nope_dim=16, rope_dim=8, v_dim=16, yarn=False, first_dense=1, n_expert=8, n_expert_tok=2,
                             expert_hidden=48, n_group=4, topk_group=2), steps=400),
    "qwen3": Demo(dict(TEXT, n_layer=2, n_head=4, n_kv_head=2, n_embd=64, head_dim=16, mlp_hidden=172), steps=400),
    "olmo2": Demo(dict(TEXT, n_layer=2, n_head=4, n_kv_head=2, n_embd=64, mlp_hidden=172), steps=400),
    "cohere": Demo(dict(TEXT, n_layer=2, n_head=4, n_kv_head=2, n_embd=64, mlp_hidden=172, logit_scale=1.0),
                   steps=400),
    "phi": Demo(dict(TEXT, n_layer=2, n_head=4, n_kv_head=4, n_embd=64, mlp_hidden=256, rotary_pct=0.5), steps=400),
    "llama4_text": Demo(dict(TEXT, n_layer=2, n_head=4, n_kv_head=2, n_embd=64, head_dim=16, mlp_hidden=172,
                             expert_hidden=96, n_expert=4, n_expert_tok=1, moe_step=2, chunk_size=16,
                             floor_scale=CONTEXT, no_rope_layers=[1, 0], attn_types=["chunked_attention",
                                                                                      "full_attention"]), steps=400),
    "gpt_oss": Demo(dict(TEXT, n_layer=2, n_head=4, n_kv_head=2, n_embd=64, head_dim=16, mlp_hidden=96,
                         attention_types=["sliding_attention", "full_attention"], sliding_window=16, n_expert=4,
                         n_expert_tok=2), steps=400),
    "nemotron_h": Demo(dict(TEXT, layer_types=["linear_attention", "mlp", "full_attention", "mlp"], n_embd=64,
                            n_head=4, n_kv_head=2, head_dim=16, mlp_hidden=172, ssm_n_head=8, ssm_head_dim=16,
                            state_size=16, n_groups=1), steps=400),
    # bidirectional models: twin characters (more steps: they learn where the twin is slowly, and
    # a step costs less)
    "bert": Demo(dict(vocab_size=VOCAB, max_positions=CONTEXT, n_layer=2, n_head=4, n_embd=64, intermediate=128,
                      dropout=0.0, attn_dropout=0.0), steps=600),
    "snowflake_core": Demo(dict(TEXT, n_layer=2, n_head=4, n_embd=64, d_ff=128, dropout=0.0), steps=600,
                           note=SNOWFLAKE_NOTE),
    "t5_encoder": Demo(dict(vocab_size=VOCAB, n_layer=2, n_head=4, d_model=64, d_kv=16, d_ff=128, num_buckets=16,
                            max_distance=32, dropout=0.0), steps=600),
    # an encoder-decoder: text sorted (eos_token_id past the vocabulary: rows never end early)
    "t5": Demo(dict(vocab_size=VOCAB, n_layer=2, n_dec_layer=2, n_head=4, d_model=64, d_kv=16, d_ff=128,
                    num_buckets=16, max_distance=32, dropout=0.0, eos_token_id=VOCAB, pad_token_id=0), steps=600,
               task=sorted_text),
    # no positions: a task that needs none
    "tiny_transformer": Demo({}, steps=600, lr=3e-2, task=sequence_maximum),
}


# ------------------------------------------------------------------------------ one spec

def _module(name: str):
    sys.path.insert(0, str(ROOT))
    try:
        return importlib.import_module(f"generated.{name}")
    finally:
        sys.path.pop(0)


def _at_defaults(mod):
    """The model at the spec's defaults, built on the meta device (no memory), or None when its
    Config has fields without a default."""
    try:
        with torch.device("meta"):
            return mod.Model()
    except TypeError:
        return None


def _meta_inputs(spec: Path, model) -> dict:
    """Zeros on the meta device for each input forward requires (the spec's, in forward's order), by
    name: the batch (the first input's first axis) 2, each other axis a call decides 8 or the most the
    spec's checks allow at the model's config (`T <= block_size`), each axis of the config its value."""
    from .compiler import analyze
    from .dims import Dim
    from .source import Source
    result = analyze(Source.read(ROOT / spec))
    if not result.ok:
        raise ValueError(f"{spec.as_posix()} has errors: run `snfc check {spec.as_posix()}`")
    typed = result.model
    required = [i for i in typed.inputs if not i.optional]
    given = {d.as_symbol() for i in required for d in i.ty.shape}
    absent = {d: Dim.const(0) for d in typed.run_time_dims if d not in given}  # brought by optional inputs (T_past)
    batch = required[0].ty.shape[0].as_symbol() if required and required[0].ty.shape else None
    config = {}
    for name in {s for i in required for d in i.ty.shape for s in d.symbols()} | {
            s for c in typed.checks for s in c.rhs.symbols()}:
        if name not in typed.run_time_dims and hasattr(model.config, name):
            config[name] = getattr(model.config, name)
    sizes = {}
    for d in sorted(given & typed.run_time_dims):
        size = 2 if d == batch else 8
        for c in typed.checks:
            lhs, rhs = c.lhs.subs(absent), c.rhs.subs(absent)
            if c.op in ("<=", "<") and lhs == Dim.sym(d) and rhs.symbols() <= set(config):
                size = min(size, rhs.evaluate(config) - (c.op == "<"))
        sizes[d] = size
    env = {**config, **sizes}
    return {i.name: torch.zeros([d.evaluate(env) for d in i.ty.shape], dtype=getattr(torch, i.ty.dtype),
                                device="meta") for i in required}


def _shapes(tensors: dict) -> str:
    return ", ".join(f"{k} {list(v.shape)}" for k, v in tensors.items() if v is not None)


def _on_meta(model, inputs: dict) -> str:
    """Output shapes of one forward pass on the meta device, from `inputs` (_meta_inputs). A failure
    is the spec's (or the runtime's), not the demo's: it raises, and main counts it."""
    try:
        with torch.device("meta"):
            out = model.eval()(*inputs.values())
    except Exception as err:
        raise RuntimeError(f"forward on the meta device, on {_shapes(inputs)}: {type(err).__name__}: {err}") from err
    return f"output {list(out.shape)}" if isinstance(out, torch.Tensor) else _shapes(out._asdict())


def run_spec(spec: Path, steps: int | None = None, train: bool = True) -> str:
    """Prints one spec's section; returns its line of the summary. Without `train`, the section is its
    import, its size at its defaults and one forward on the meta device."""
    from .cli import module_name  # the module `snfc compile` wrote for it (`my-model.snf` -> my_model)
    name = module_name(spec)
    print(f"\n== {name} ({spec.as_posix()}): importing generated/{name}.py and building it at its defaults "
          "on the meta device", flush=True)
    mod = _module(name)
    at_defaults = _at_defaults(mod)
    defaults = _count(at_defaults.parameters()) if at_defaults is not None else "?"
    demo = DEMO.get(name)
    print(f"  {defaults} parameters at its defaults" if at_defaults is not None else "  its Config has no defaults")
    if demo is None or not train:
        what = "nothing to build"
        if at_defaults is not None:
            inputs = _meta_inputs(spec, at_defaults)
            what = (f"run forward once at its defaults on the meta device (no memory used), on {_shapes(inputs)}: "
                    f"{_on_meta(at_defaults, inputs)}")
        why = "no demo config in snf/quickstart.py's DEMO" if demo is None else "not trained in this run (--all)"
        print(f"  {why}: {what}")
        return (f"not trained: {'no demo config' if demo is None else 'see --all'} ({defaults} parameters at its "
                "defaults)")
    if steps is not None:
        demo = dataclasses.replace(demo, steps=steps)
    torch.manual_seed(0)
    model = mod.Model(**demo.config)
    settings = " ".join(f"{k}={v}" for k, v in demo.config.items())
    print(f"  trained here at {settings or 'its defaults'}: {_count(model.parameters())} parameters", flush=True)
    if demo.note:
        print(f"  note: {demo.note}")
    return (demo.task or _task(model))(name, model, demo)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m snf.quickstart", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, help="training steps per spec (default: each spec's own)")
    parser.add_argument("--all", action="store_true", help=f"train every spec (default: {', '.join(SHOWN)}; the "
                                                           "others are imported and run once on the meta device)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    # Models this small gain little from a second thread, and lose much on a busy machine.
    torch.set_num_threads(1)
    specs = sorted((ROOT / "specs").glob("*.snf"))
    if not specs:
        print(f"no specs in {ROOT / 'specs'}: run from the repository root", file=sys.stderr)
        return 1
    trained = [s.stem for s in specs] if args.all else [s.stem for s in specs if s.stem in SHOWN]
    print(f"snfc quickstart: the {len(specs)} specs in specs/, compiled to generated/; {len(trained)} trained "
          f"briefly ({', '.join(trained)}{'' if args.all else '; --all trains every one'}; torch "
          f"{torch.__version__}, 1 thread)")
    from .runtime import compile_mode
    try:
        print("mode: " + MODES[compile_mode()])
    except ValueError as err:  # SNF_COMPILE set to a value it does not know
        print(f"snfc quickstart: error: {err}", file=sys.stderr)
        return 1
    summary, failed = [], 0
    for spec in specs:
        try:
            line = run_spec(spec.relative_to(ROOT), args.steps, spec.stem in trained)
        except Exception as err:  # one spec's failure must not hide the others
            failed += 1
            line = f"FAILED: {type(err).__name__}: {err}"
            print(f"  {line}")
        summary.append((spec.stem, line))
    print("\nsummary (held-out results after training; a baseline always guesses the most common answer)")
    width = max(len(name) for name, _ in summary)
    for name, line in summary:
        print(f"  {name:<{width}}  {line}")
    print(f"done in {time.perf_counter() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
