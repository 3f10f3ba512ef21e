"""Train a causal language model from an SNF spec on a text file, nanoGPT style.

    python examples/train.py --data input.txt --spec specs/nanogpt.snf --out out \
        --set n_layer=4 --set n_head=4 --set n_embd=128 --set block_size=128 --max-iters 2000

The text becomes character (or byte) tokens; the spec's vocabulary field is set to their count.
Each eval writes out/ckpt.pt (model, optimizer, step, config, vocabulary, random states), and
`--resume` goes on from it exactly. examples/sample.py samples from a checkpoint. Any spec whose
module has `generate` works (specs/nanogpt.snf, llama3.snf, mistral.snf, gpt_decoder.snf, ...):
the loss is the next-token cross-entropy of its logits, whatever its own loss input is called.
The module compiles as its `compile_units` say for the device (on a CPU, training runs eagerly).
Exit status: 0 done, 1 a bad argument or file (spec, checkpoint, a failed save), 130 Ctrl-C.

Under torchrun it trains on every rank, tensor parallel over --tp ranks (snf.parallelize, the plan
derived from the spec) and data parallel (FSDP2) over the rest of the world, as nanoGPT's DDP mode:

    torchrun --standalone --nproc-per-node 2 examples/train.py --tp 2 --data input.txt --spec specs/llama3.snf ...

Each data-parallel rank trains on its own --batch-size sequences (a step sees batch-size x world/tp).
The checkpoint is gathered: rank 0 writes the whole model and optimizer state into the same
out/ckpt.pt a single-process run writes, so a run with or without torchrun (any --tp) resumes from
it and examples/sample.py samples from it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import pickle
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

import snf
from snf.compiler import analyze, lower
from snf.diagnostics import SpecError
from snf.parallel import clip_grad_norm_
from snf.passes import plan
from snf.source import Source

SPEC = str(Path(__file__).resolve().parent.parent / "specs" / "nanogpt.snf")


class UserError(Exception):
    """A bad file (the spec, the checkpoint) or a failed save: printed on one line, exit 1."""


class BadArgument(UserError):
    """A bad command line, found before training starts: printed on one line, exit 1, as the CLI's."""


class Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line like the scripts' own (no usage block)."""

    def error(self, message):
        raise BadArgument(message)


def arguments(argv=None) -> argparse.Namespace:
    p = Parser(prog="train.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="a text file")
    p.add_argument("--spec", help="the SNF spec of the model (default: this repository's specs/nanogpt.snf; "
                   "with --resume, the checkpoint's)")
    p.add_argument("--tokens", choices=("char", "byte"), help="default char; with --resume, the checkpoint's")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="a Config field")
    p.add_argument("--config", help="a JSON file of Config fields (--set wins)")
    p.add_argument("--out", default="out", help="where ckpt.pt goes")
    p.add_argument("--resume", action="store_true", help="go on from OUT/ckpt.pt")
    p.add_argument("--max-iters", type=int, default=2000)
    p.add_argument("--stop-at", type=int, help="save and stop after this step (a job with a time limit: "
                   "--resume goes on, on the same schedule); 0 saves the untrained model")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup-iters", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0, help="0: no clipping")
    p.add_argument("--eval-interval", type=int, default=250)
    p.add_argument("--eval-iters", type=int, default=20)
    p.add_argument("--log-interval", type=int, default=10)
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=seed, default=1337)
    p.add_argument("--tp", type=int, help="under torchrun: ranks a model is split over (tensor parallel); "
                   "the world size / tp ranks train data parallel (default 1)")
    args = p.parse_args(argv)
    check_arguments(args)
    return args


def check_arguments(args) -> None:
    """What the command line alone shows to be wrong, before the spec compiles."""
    at_least(args, batch_size=1, grad_accum=1, eval_interval=1, eval_iters=1, log_interval=1, max_iters=0,
             stop_at=0, warmup_iters=0, lr=0, min_lr=0, weight_decay=0, grad_clip=0, tp=1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if (args.tp or 1) > 1 and "WORLD_SIZE" not in os.environ:
        raise BadArgument(f"--tp {args.tp} runs under torchrun: torchrun --nproc-per-node {args.tp} examples/train.py "
                          f"--tp {args.tp} ...")
    if world % (args.tp or 1):
        raise BadArgument(f"--tp {args.tp} does not divide the {world} ranks torchrun started")
    check_device(args.device)
    for flag, path in (("--data", args.data), ("--spec", args.spec), ("--config", args.config)):
        if path is not None and not Path(path).is_file():
            raise BadArgument(f"{flag} {path}: {'not a file' if Path(path).exists() else 'no such file'}")
    if Path(args.data).stat().st_size == 0:
        raise BadArgument(f"--data {args.data} is empty")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise BadArgument(f"--out {args.out} is a file; it names the folder that holds ckpt.pt")


def at_least(args, **lowest) -> None:
    """Each named argument unset (None) or a finite number at least its lowest value."""
    for name, low in lowest.items():
        value = getattr(args, name)
        if value is not None and not low <= value < math.inf:
            kind = "an int" if isinstance(value, int) else "a finite number"
            raise BadArgument(f"--{name.replace('_', '-')} must be {kind} >= {low}, got {value}")


def seed(text: str) -> int:
    """A seed torch's generators take, seed + 1 too (the eval batches'); else argparse says `invalid seed value`."""
    value = int(text)
    if not 0 <= value < 2**63 - 1:
        raise ValueError(text)
    return value


def check_device(name: str) -> None:
    try:
        device = torch.device(name)
    except RuntimeError:
        raise BadArgument(f"--device {name!r} is not a device name (cpu, cuda, cuda:1, mps)") from None
    count = {"cpu": 1, "cuda": torch.cuda.device_count(), "mps": int(torch.backends.mps.is_available())}
    if device.type not in count:
        raise BadArgument(f"--device {name}: the examples run on cpu, cuda or mps")
    if (device.index or 0) >= count[device.type]:
        raise BadArgument(f"--device {name}: this torch sees {count[device.type]} {device.type} device(s) here")


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


KINDS = {"int": int, "float": (int, float), "bool": bool, "str": str}  # what a JSON value may be, by field type


def config_values(lm: LanguageModel, args) -> dict:
    """The Config fields --config and then --set give, each checked against its field's type."""
    types = {f.name: f.type for f in dataclasses.fields(lm.module.Config)}
    known = ", ".join(types)
    values = {}
    if args.config:
        try:
            values = json.loads(Path(args.config).read_text(encoding="utf-8"))
        except OSError as e:
            raise BadArgument(f"--config {args.config}: {e.strerror or e}") from None
        except (ValueError, RecursionError) as e:
            raise BadArgument(f"--config {args.config} is not JSON: {e}") from None
        if not isinstance(values, dict):
            raise BadArgument(f"--config {args.config} holds a JSON {type(values).__name__}, not an object of Config fields")
        for name, value in values.items():
            if name not in types:
                raise BadArgument(f"--config {args.config}: {name!r} is not a Config field ({known})")
            if isinstance(value, bool) != (types[name] == "bool") or not isinstance(value, KINDS.get(types[name], object)):
                raise BadArgument(f"--config {args.config}: `{name}` is {types[name]}, got {value!r}")
    for pair in args.set:
        name, eq, text = pair.partition("=")
        if not eq or name not in types:
            raise BadArgument(f"--set {pair}: not FIELD=VALUE with a Config field ({known})")
        try:
            values[name] = {"int": int, "float": float, "str": str,
                            "bool": lambda t: {"true": True, "false": False}[t.lower()]}[types[name]](text)
        except (ValueError, KeyError):
            raise BadArgument(f"--set {pair}: `{name}` is {types[name]}") from None
    return values


def make_config(lm: LanguageModel, args, vocab: int):
    """The spec's defaults, then --config, --set, and the data's vocabulary."""
    values = config_values(lm, args)
    if values.setdefault(lm.vocab_field, vocab) < vocab:
        raise BadArgument(f"{lm.vocab_field}={values[lm.vocab_field]} (--set or --config) is below the data's {vocab} tokens")
    try:
        return lm.module.Config(**values)
    except (TypeError, ValueError) as e:
        raise BadArgument(f"the config: {e}") from None


# ------------------------------------------------------------------------------- checkpoints

# what save() writes: tensors and plain values only, so that loading needs no unpickling of code
LAYOUT = {"model": dict, "optimizer": dict, "iter": int, "config": dict, "spec": str, "tokens": str, "vocab": list,
          "data_rng": torch.Tensor, "rng": torch.Tensor}


def save_checkpoint(state: dict, path: Path) -> None:
    """Write `path` whole or not at all: into a temporary file beside it, then renamed over it
    (atomic on POSIX), so that an error or Ctrl-C midway leaves the last good checkpoint."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(e, OSError):
            raise UserError(f"cannot write {path}: {e.strerror or e}") from None
        raise


def read_checkpoint(path: Path):
    """The checkpoint save_checkpoint wrote at `path`, checked against its spec before any weights
    are made: (the saved dict, the LanguageModel, the Config)."""
    if not path.is_file():
        raise UserError(f"no checkpoint at {path}")
    if path.stat().st_size == 0:
        raise UserError(f"{path} is empty")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns of pickle protocols in files it then refuses
            saved = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise UserError(f"{path} is not a checkpoint train.py wrote: torch.load(weights_only=True) refuses it "
                        "(a plain pickle, or objects that unpickling would have to run)") from None
    except Exception as e:  # torch raises several kinds for a truncated or corrupt file
        raise UserError(f"{path} is truncated or corrupt: torch.load cannot read it ({type(e).__name__})") from None
    wrong = [key for key, kind in LAYOUT.items() if not isinstance(saved, dict) or not isinstance(saved.get(key), kind)]
    if wrong or saved["tokens"] not in ("char", "byte") or saved["iter"] < 0:
        raise UserError(f"{path} is not a checkpoint train.py wrote (bad or missing: {', '.join(wrong) or 'tokens, iter'})")
    try:
        lm = language_model(saved["spec"])
    except UserError as e:
        raise UserError(f"{path} was trained from {saved['spec']}: {e}") from None
    try:
        config = lm.module.Config(**saved["config"])
    except (TypeError, ValueError) as e:
        raise UserError(f"{path}: its config does not fit {saved['spec']}: {e}") from None
    vocab = saved["vocab"]
    good = list(range(256)) if saved["tokens"] == "byte" else sorted(set(c for c in vocab if isinstance(c, str) and len(c) == 1))
    if vocab != good or len(vocab) > getattr(config, lm.vocab_field):
        raise UserError(f"{path}: its vocabulary is not {saved['tokens']} tokens that fit {lm.vocab_field}="
                        f"{getattr(config, lm.vocab_field)}")
    with torch.device("meta"):  # the shapes the weights must have, without making them
        expected = lm.module.Model(config).state_dict()
    weights = saved["model"]
    unfit = sorted(set(expected) ^ set(weights)) or [k for k, v in expected.items() if not isinstance(weights[k], torch.Tensor)
                                                      or (weights[k].shape, weights[k].dtype) != (v.shape, v.dtype)]
    if unfit:
        raise UserError(f"{path}: its weights do not fit {saved['spec']} with its config (first: {unfit[0]}); "
                        "another spec or config wrote them")
    return saved, lm, config


def first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]


def same_run(args, saved: dict, lm: LanguageModel, config, path: Path) -> None:
    """With --resume, --spec, --tokens, --config and --set may repeat the checkpoint's, not change them."""
    if args.spec and Path(args.spec).resolve() != Path(saved["spec"]).resolve():
        raise UserError(f"{path} was trained from {saved['spec']}, not --spec {args.spec}: train that into another --out")
    if args.tokens and args.tokens != saved["tokens"]:
        raise UserError(f"{path} has {saved['tokens']} tokens, not --tokens {args.tokens}")
    for name, value in config_values(lm, args).items():
        if getattr(config, name) != value:
            raise UserError(f"{path} has {name}={getattr(config, name)!r}, not {value!r}: train that into another --out")


# ------------------------------------------------------------------------------- the data

def tokenize(path: str, kind: str, vocab: list | None = None) -> tuple[torch.Tensor, list]:
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise BadArgument(f"--data {path}: {e.strerror}") from None
    if kind == "byte":
        return torch.tensor(list(raw), dtype=torch.long), list(range(256))
    text = raw.decode("utf-8", errors="replace")
    if vocab is None:
        vocab = sorted(set(text))
    unknown = set(text).difference(vocab)
    if unknown:  # only when resuming: another text than the checkpoint's
        raise UserError(f"--data {path} has characters the checkpoint's vocabulary lacks: {''.join(sorted(unknown))[:40]!r}")
    index = {c: i for i, c in enumerate(vocab)}
    return torch.tensor([index[c] for c in text], dtype=torch.long), vocab


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


def train_step(model, opt, loss_of, micro_batches: list, lr: float, grad_clip: float, autocast,
               clip=torch.nn.utils.clip_grad_norm_) -> float:
    """One optimizer step as nanoGPT's train.py takes it: the micro-batches' gradients summed,
    clipped (by `clip`: snf.parallel's for a parallelized model), AdamW, gradients dropped. Returns
    the loss (of the last micro-batch, unscaled). benchmarks/bench_train_example.py times it against nanoGPT."""
    for group in opt.param_groups:
        group["lr"] = lr
    for x, y in micro_batches:
        with autocast:
            loss = loss_of(x, y) / len(micro_batches)
        loss.backward()
    if grad_clip:
        clip(model.parameters(), grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item() * len(micro_batches)


def main(argv=None) -> int:
    first = int(os.environ.get("RANK", "0")) == 0  # under torchrun every rank meets the same error: one says it
    try:
        return train(arguments(argv))
    except UserError as e:
        if first:
            print(f"train.py: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:  # train() says where it stopped
        if first:
            print(f"train.py: {e or 'interrupted'}", file=sys.stderr)
        return 130
    finally:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


# ------------------------------------------------------------------------------- under torchrun

@dataclasses.dataclass(frozen=True)
class Ranks:
    """Where this process is in a torchrun world of dp x tp ranks."""
    mesh: object  # DeviceMesh: ("tp",), or ("dp", "tp") when dp > 1
    rank: int
    dp: int
    dp_rank: int


def start_ranks(args) -> Ranks | None:
    """The process group and mesh under torchrun (None without it); on CUDA each rank its own GPU (nccl)."""
    if "WORLD_SIZE" not in os.environ:
        return None
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    kind = torch.device(args.device).type
    if kind == "cuda":
        args.device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}"
        torch.cuda.set_device(args.device)
    dist.init_process_group("nccl" if kind == "cuda" else "gloo")
    tp = args.tp or 1
    dp = dist.get_world_size() // tp
    mesh = init_device_mesh(kind, (dp, tp), mesh_dim_names=("dp", "tp")) if dp > 1 else \
        init_device_mesh(kind, (tp,), mesh_dim_names=("tp",))
    return Ranks(mesh, dist.get_rank(), dp, mesh["dp"].get_local_rank() if dp > 1 else 0)


def gathered_states(model, opt) -> tuple[dict, dict]:
    """The model's and optimizer's state dicts with every shard gathered, as one process would hold
    them (snf.parallel.whole_tensor: a projection of pieces' rows back in the spec's order too)."""
    from torch.distributed.fsdp import FSDPModule

    from snf.parallel import whole_tensor
    for m in model.modules():  # FSDP2 leaves the root unsharded after a forward (the eval before a save):
        if isinstance(m, FSDPModule):  # its sharded parameters, the optimizer's, registered again
            m.reshard()
    names = {id(p): n for n, p in model.named_parameters()}
    params = [p for group in opt.param_groups for p in group["params"]]
    state = opt.state_dict()
    state["state"] = {i: {k: whole_tensor(model, names[id(params[i])], v) for k, v in s.items()}
                      for i, s in state["state"].items()}
    return {k: whole_tensor(model, k, v) for k, v in model.state_dict().items()}, state


def sharded_optimizer_state(model, opt, saved: dict) -> dict:
    """A gathered optimizer state dict with each tensor laid out as its (DTensor) parameter is."""
    from snf.parallel import sharded_like
    names = {id(p): n for n, p in model.named_parameters()}
    params = [p for group in opt.param_groups for p in group["params"]]
    state = dict(saved, state={})
    for i, s in saved["state"].items():
        p = params[i]
        state["state"][i] = {k: sharded_like(model, names[id(p)], v, p) if torch.is_tensor(v) and v.shape == p.shape
                             else v for k, v in s.items()}
    return state


def train(args) -> int:
    ranks = start_ranks(args)
    say = print if ranks is None or ranks.rank == 0 else (lambda *a, **k: None)
    out = Path(args.out)
    ckpt_path = out / "ckpt.pt"
    saved = None
    if args.resume:
        saved, lm, config = read_checkpoint(ckpt_path)
        same_run(args, saved, lm, config, ckpt_path)
        args.spec, args.tokens = saved["spec"], saved["tokens"]
        data, vocab = tokenize(args.data, args.tokens, saved["vocab"])
    else:
        args.spec, args.tokens = args.spec or SPEC, args.tokens or "char"
        lm = language_model(args.spec)
        data, vocab = tokenize(args.data, args.tokens)
        config = make_config(lm, args, len(vocab))
    start = saved["iter"] if saved else 0
    end = args.max_iters if args.stop_at is None else min(args.stop_at, args.max_iters)
    if end < start:  # saving would write an earlier step with later weights
        flag = "--max-iters" if args.stop_at is None or args.stop_at > args.max_iters else "--stop-at"
        raise BadArgument(f"{flag} {end} is below step {start}, where {ckpt_path} is")
    length = getattr(config, lm.context_field) if lm.context_field else 256
    if len(data) < 2 * (length + 1):
        raise BadArgument(f"--data {args.data} has {len(data)} tokens; it needs at least {2 * (length + 1)} for "
                          f"{lm.context_field or 'the context'} = {length}")
    split = int(0.9 * len(data))
    parts = {"train": data[:split], "val": data[split:]}
    if len(parts["val"]) < length + 2:
        parts["val"] = data  # a tiny corpus: evaluate on all of it
    torch.manual_seed(args.seed)
    model = lm.module.Model(config).to(args.device)
    if ranks is not None:  # the whole model on every rank (the same seed), loaded, then sharded
        if saved:
            model.load_state_dict(saved["model"])
        try:
            model = snf.parallelize(model, ranks.mesh)
        except ValueError as e:  # snf.parallel.ShardingError: a tp the plan cannot take
            raise BadArgument(f"--tp {args.tp}: {first_line(e)}") from None
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": rest, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(args.seed)
    if saved:
        try:
            if ranks is None:
                model.load_state_dict(saved["model"])
            opt.load_state_dict(saved["optimizer"] if ranks is None else sharded_optimizer_state(model, opt, saved["optimizer"]))
            if any(torch.is_tensor(v) and v.dim() and v.shape != p.shape for p, s in opt.state.items() for v in s.values()):
                raise ValueError("its optimizer state does not fit the weights")
            g.set_state(saved["data_rng"])
            torch.set_rng_state(saved["rng"])
        except (RuntimeError, ValueError, TypeError, KeyError, AttributeError, IndexError) as e:
            raise UserError(f"{ckpt_path}: its optimizer or random states do not fit the model ({first_line(e)})") from None
        say(f"resuming at step {start} from {ckpt_path}")
    autocast = torch.autocast(args.device.split(":")[0], torch.bfloat16) if args.bf16 else contextlib.nullcontext()
    n_params = sum(p.numel() for p in model.parameters())
    say(f"{Path(args.spec).name}: {n_params / 1e6:.2f}M parameters, {len(vocab)} {args.tokens} tokens, "
        f"{lm.context_field or 'context'} = {length}, {len(data):,} tokens of data"
        + (f", {ranks.dp} x tp {args.tp or 1} ranks" if ranks else ""))

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
        losses = evaluate()
        say(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        model_state, opt_state = (model.state_dict(), opt.state_dict()) if ranks is None else gathered_states(model, opt)
        if ranks is None or ranks.rank == 0:
            save_checkpoint({"model": model_state, "optimizer": opt_state, "iter": it,
                             "config": dataclasses.asdict(config), "spec": args.spec, "tokens": args.tokens,
                             "vocab": vocab, "data_rng": g.get_state(), "rng": torch.get_rng_state()}, ckpt_path)
        if ranks is not None:
            torch.distributed.barrier()  # no rank goes on (or ends) before the file is whole

    dp = ranks.dp if ranks else 1
    mine = slice(ranks.dp_rank * args.batch_size, (ranks.dp_rank + 1) * args.batch_size) if ranks else None
    model.train()
    tick = time.perf_counter()
    done, last_saved, logged = start, (start if saved else None), start
    try:
        for it in range(start, end):
            if it % args.eval_interval == 0 and it > start:
                save(it)
                last_saved = it
            lr = learning_rate(it, args)
            micro = [batch(parts["train"], args.batch_size * dp, length, g, args.device) for _ in range(args.grad_accum)]
            if dp > 1:  # every rank draws the whole step's batch (one data generator, one state to save), keeps its part
                micro = [(x[mine], y[mine]) for x, y in micro]
            loss = train_step(model, opt, lambda x, y: next_token_loss(model, lm, x, y), micro, lr, args.grad_clip, autocast,
                              clip=torch.nn.utils.clip_grad_norm_ if ranks is None else clip_grad_norm_)
            done = it + 1
            if done % args.log_interval == 0 or done == end:
                if dp > 1:  # the step's loss: the mean of the dp ranks' (each its own sequences); every rank logs
                    mean = torch.tensor(loss / dp, dtype=torch.float64, device=args.device)
                    torch.distributed.all_reduce(mean, group=ranks.mesh["dp"].get_group())
                    loss = mean.item()
                elapsed = (time.perf_counter() - tick) / (done - logged)
                tokens = args.batch_size * dp * args.grad_accum * length  # a step's, over the dp ranks
                say(f"step {done}: loss {loss:.4f}, lr {lr:.2e}, {elapsed * 1000:.1f} ms/iter, "
                    f"{tokens / elapsed:,.0f} tokens/s", flush=True)
                tick, logged = time.perf_counter(), done
        save(end)
    except KeyboardInterrupt:
        # nothing is saved: a step cut midway is half applied; the last checkpoint stays whole
        kept = f"{ckpt_path} holds step {last_saved} (--resume goes on from it)" if last_saved is not None \
            else "no checkpoint was saved"
        raise KeyboardInterrupt(f"stopped by Ctrl-C after step {done}; {kept}") from None
    say(f"saved {ckpt_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
