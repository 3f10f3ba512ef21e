"""Sample text from a checkpoint examples/train.py wrote.

    python examples/sample.py --out out --prompt "The " --max-new-tokens 200 --temperature 0.8 --top-k 40
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train import UserError, language_model  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="out", help="the folder holding ckpt.pt")
    p.add_argument("--prompt", default="\n")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--samples", type=int, default=1)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args(argv)
    try:
        for text in sample(args):
            print(text)
            print("-" * 40)
    except UserError as e:
        print(f"sample.py: error: {e}", file=sys.stderr)
        return 1
    return 0


def sample(args) -> list[str]:
    path = Path(args.out) / "ckpt.pt"
    if not path.is_file():
        raise UserError(f"no checkpoint at {path}: train one with examples/train.py --out {args.out}")
    saved = torch.load(path, map_location="cpu", weights_only=False)
    lm = language_model(saved["spec"])
    model = lm.module.Model(lm.module.Config(**saved["config"])).to(args.device)
    model.load_state_dict(saved["model"])
    model.eval()
    vocab = saved["vocab"]
    if saved["tokens"] == "byte":
        ids, decode = list(args.prompt.encode("utf-8")), lambda t: bytes(t).decode("utf-8", errors="replace")
    else:
        unknown = sorted(set(args.prompt) - set(vocab))
        if unknown:
            raise UserError(f"the prompt has characters the training text did not: {''.join(unknown)!r}")
        ids, decode = [vocab.index(c) for c in args.prompt], lambda t: "".join(vocab[i] for i in t)
    if not ids:
        raise UserError("--prompt is empty")
    g = torch.Generator(device=args.device).manual_seed(args.seed)
    prompt = torch.tensor([ids] * args.samples, device=args.device)
    with torch.no_grad():
        out = model.generate(prompt, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k, generator=g)
    return [decode(row.tolist()) for row in out]


if __name__ == "__main__":
    sys.exit(main())
