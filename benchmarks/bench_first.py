"""What a user waits for: time to the first generated token and to 32 and 512, and to the first
training step and to step 50, each from the start of a fresh process (imports included).

Contenders, each in a process of its own, in this order (the caches are torch's inductor cache and
snf's record of compile times, which lives in it):

| contender      | what runs                                                                  | cache        |
|----------------|----------------------------------------------------------------------------|--------------|
| `default-cold` | the default path (`SNF_COMPILE` unset): it compiles where that pays          | empty        |
| `compile-cold` | `SNF_COMPILE=1`: compiles every unit `compile_units` names, and the decode step | empty     |
| `compile-warm` | `SNF_COMPILE=1` again                                                       | compile-cold's |
| `default-warm` | the default path, where these sizes compiled before                         | compile-cold's |
| `eager`        | `SNF_COMPILE=0`                                                             | -            |
| `hf`           | transformers' eager model of the same sizes (`generate` with its cache)     | -            |

Configs: nanoGPT at 2 layers x 64 and at GPT-2 small (specs/nanogpt.snf), and Llama-3- and
Mixtral-shaped models of 4 layers x 256 (specs/llama3.snf, specs/mixtral.snf), each built from
its transformers config through the spec's `config hf:` section, with random weights.
`generate`: batch 1, a 16-token prompt, greedy, 512 new tokens (transformers' forced to 512 by
`min_new_tokens`). Training: AdamW, `model(x, targets=y).loss` where the spec has a loss, else
cross-entropy over the logits (transformers': `labels=`), at each config's batch.

    PYTHONPATH=. python3 benchmarks/bench_first.py                       # every config: about an hour on 2 cores
    PYTHONPATH=. python3 benchmarks/bench_first.py --configs nanogpt-2x64 --contenders default-cold eager hf
    PYTHONPATH=. python3 benchmarks/bench_first.py --device cuda         # the same rows on a GPU (bfloat16)

Each row is one process's figures (with `--repeat N`, the fastest of N rounds, each round running
every contender in turn); a shared machine moves them, so read the ratios against `eager`, which
the table prints beside them. The goals (issue 35): on the default path with a cold cache
the first token within 1.5x eager's time plus 1 s, and 512 tokens and 50 steps no slower than eager.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CONTENDERS = ("default-cold", "compile-cold", "compile-warm", "default-warm", "eager", "hf")
COMPILE_ENV = {"default": None, "compile": "1", "eager": "0"}  # SNF_COMPILE by the contender's first word


@dataclasses.dataclass(frozen=True)
class Case:
    spec: str  # generated/<spec>.py
    hf_config: str  # the transformers config class
    hf: dict  # its arguments
    train_batch: tuple  # (rows, tokens) of a training step
    checks: bool = True  # the snfc model's config is read from the transformers one


_LLAMA = dict(vocab_size=32000, hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=2048, rope_theta=500000.0)
CASES = {
    "nanogpt-2x64": Case("nanogpt", "GPT2Config", dict(n_layer=2, n_head=4, n_embd=64), (8, 64)),
    "gpt2-small": Case("nanogpt", "GPT2Config", {}, (4, 256)),
    "llama3-4x256": Case("llama3", "LlamaConfig", _LLAMA, (8, 128)),
    "mixtral-4x256": Case("mixtral", "MixtralConfig", dict(_LLAMA, intermediate_size=512, num_local_experts=8,
                                                          num_experts_per_tok=2, sliding_window=None), (8, 128)),
}


# ------------------------------------------------------------------------------ the child process

def _hf_model(case: Case):
    import transformers
    config = getattr(transformers, case.hf_config)(**case.hf)
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa"), config


def child(kind: str, case_name: str, contender: str, tokens: int, steps: int, device: str, out: Path,
          config: dict) -> None:
    """One process: build the model, then generate `tokens` tokens or train `steps` steps; write the
    wall-clock time of each event (time.time(), so the parent can subtract its own start)."""
    events: dict = {}
    import torch
    case = CASES[case_name]
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    if contender == "hf":
        model, _ = _hf_model(case)
        module = None
    else:
        import importlib
        module = importlib.import_module(f"generated.{case.spec}")
        torch.manual_seed(0)
        model = module.Model(module.Config(**config))
    model = model.to(device=device, dtype=dtype)
    events["built"] = time.time()
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    marks: list = []

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    if kind == "generate":
        model.eval()
        prompt = torch.randint(0, vocab, (1, 16), generator=gen).to(device)
        class Streamer:  # transformers' protocol, which snfc's generate takes too: a time per token
            first = True

            def put(self, value):
                if self.first:  # the prompt
                    self.first = False
                    return
                sync()
                marks.append(time.time())

            def end(self):
                pass
        if module is not None:
            model.generate(prompt, tokens, temperature=0, streamer=Streamer())
        else:
            model.generate(prompt, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, streamer=Streamer(),
                           pad_token_id=0, eos_token_id=None)
    else:
        model.train()
        rows, length = case.train_batch
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        takes_targets = module is not None and "targets" in model.forward.__wrapped__.__code__.co_varnames
        for _ in range(steps):
            x = torch.randint(0, vocab, (rows, length + 1), generator=gen).to(device)
            if module is None:
                loss = model(input_ids=x[:, :-1], labels=x[:, :-1]).loss
            elif takes_targets:
                loss = model(x[:, :-1], targets=x[:, 1:]).loss
            else:
                logits = model(x[:, :-1]).logits
                loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), x[:, 1:].flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss.item()
            marks.append(time.time())
    events["marks"] = marks
    events["compiled"] = _compiled_shapes(module) if module is not None else None
    out.write_text(json.dumps(events))


def _compiled_shapes(module) -> int:
    """The shapes snf compiled in this process, over the module's compiled units (each `_hot_path`
    wrapper's unit keeps what it has seen: Block.forward, the decode step, the whole forward)."""
    wrappers = []
    for cls in vars(module).values():
        if isinstance(cls, type):
            for value in vars(cls).values():
                wrappers += [value, getattr(value, "whole", None)]
    units = [w.unit for w in wrappers if hasattr(w, "unit")]
    return sum(1 for u in units if u.payoff is not None for seen in u.payoff.shapes.values() if seen.compiled)


# ------------------------------------------------------------------------------ the parent

def snf_config(case: Case) -> dict:
    """The snfc Config of `case`, read from its transformers config by the spec's `config hf:` section."""
    import importlib

    from snf.pretrained import config_from_hf
    _, hf_config = _hf_model(case)
    module = importlib.import_module(f"generated.{case.spec}")
    return dataclasses.asdict(config_from_hf(module, hf_config.to_dict()))


def run_child(kind: str, case: str, contender: str, args, cache: Path | None, config: dict) -> dict:
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("SNF_COMPILE", None)
    mode = COMPILE_ENV.get(contender.split("-")[0])
    if mode is not None:
        env["SNF_COMPILE"] = mode
    if cache is not None:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    command = [sys.executable, __file__, "--child", kind, case, contender, "--tokens", str(args.tokens), "--steps",
               str(args.steps), "--device", args.device, "--out", str(out), "--config", json.dumps(config)]
    start = time.time()
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{kind} {case} {contender} failed:\n{done.stderr[-4000:]}")
    events = json.loads(out.read_text())
    out.unlink()
    marks = [t - start for t in events["marks"]]
    return {"built": events["built"] - start, "marks": marks, "compiled": events["compiled"], "stderr": done.stderr}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=list(CONTENDERS))
    parser.add_argument("--kinds", nargs="+", default=["generate", "train"], choices=["generate", "train"])
    parser.add_argument("--tokens", type=int, default=512, help="new tokens per generate")
    parser.add_argument("--steps", type=int, default=50, help="training steps")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--repeat", type=int, default=1, help="rounds of every process; each row is its fastest")
    parser.add_argument("--json", type=Path, help="write every row here")
    parser.add_argument("--child", nargs=3, metavar=("KIND", "CONFIG", "CONTENDER"), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child, args.tokens, args.steps, args.device, args.out, json.loads(args.config))
        return 0
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            print("no CUDA device here: the cuda rows are skipped (run with --device cuda where one is)")
            return 0
    marks_at = {"generate": (1, min(32, args.tokens), args.tokens), "train": (1, args.steps)}
    from benchmarks._timing import cpu_line  # noqa: PLC0415 (imports torch, which the children time)

    print(cpu_line())
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; device {args.device}; "
          f"{args.tokens} tokens, {args.steps} steps; seconds from the process's start")
    header = ("| config | contender | first token | 32 tokens | 512 tokens | tokens vs eager | first step | "
              "50 steps | steps vs eager | shapes compiled |")
    print(header.replace("32 tokens", f"{marks_at['generate'][1]} tokens").replace("512", str(args.tokens))
          .replace("50 steps", f"{args.steps} steps"))
    print("|" + "---|" * (header.count("|") - 1))
    rows = []
    scratch = Path(tempfile.mkdtemp(prefix="snf-bench-first-"))
    try:
        for name in args.configs:
            config = snf_config(CASES[name])
            results: dict = {}
            for _ in range(args.repeat):  # each round in the same order: a burst of load lands on all
                for contender in args.contenders:
                    for kind in args.kinds:
                        cache = None
                        if contender in ("default-cold", "compile-cold"):
                            cache = scratch / f"{name}-{kind}-{contender}"
                            shutil.rmtree(cache, ignore_errors=True)
                        elif contender in ("compile-warm", "default-warm"):
                            cache = scratch / f"{name}-{kind}-compile-cold"
                        got = run_child(kind, name, contender, args, cache, config)
                        best = results.get((contender, kind))
                        if best is None or got["marks"][-1] < best["marks"][-1]:
                            results[(contender, kind)] = got  # the round that finished first
            for contender in args.contenders:
                cells = []
                for kind in ("generate", "train"):
                    got = results.get((contender, kind))
                    base = results.get(("eager", kind))
                    at = marks_at[kind]
                    if got is None:
                        cells += ["-"] * (len(at) + 1)
                        continue
                    cells += [f"{got['marks'][i - 1]:.2f}" for i in at]
                    cells.append(f"{got['marks'][-1] / base['marks'][-1]:.2f}" if base else "-")
                counts = [results[(contender, k)]["compiled"] for k in args.kinds if (contender, k) in results]
                cells.append("-" if None in counts else " + ".join(map(str, counts)))
                print(f"| {name} | {contender} | " + " | ".join(cells) + " |", flush=True)
                rows.append({"config": name, "contender": contender,
                             **{k: v for (c, k), v in results.items() if c == contender}})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
