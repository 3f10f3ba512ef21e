"""Sample text from a checkpoint examples/train.py wrote.

    python examples/sample.py --out out --prompt "The " --max-new-tokens 200 --temperature 0.8 --top-k 40

Exit status: 0 done, 1 a bad argument, prompt or checkpoint, 130 Ctrl-C.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train import BadArgument, Parser, UserError, at_least, check_device, read_checkpoint, seed  # noqa: E402


def main(argv=None) -> int:
    p = Parser(prog="sample.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="out", help="the folder holding ckpt.pt")
    p.add_argument("--prompt", default="\n")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.8, help="0 is greedy")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--num-samples", "--samples", type=int, default=1)
    p.add_argument("--seed", type=seed, default=1337)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    try:
        args = p.parse_args(argv)
        at_least(args, max_new_tokens=0, temperature=0, top_k=1, num_samples=1)
        check_device(args.device)
        for text in sample(args):
            print(text)
            print("-" * 40)
    except UserError as e:
        print(f"sample.py: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("sample.py: interrupted", file=sys.stderr)
        return 130
    return 0


def sample(args) -> list[str]:
    path = Path(args.out) / "ckpt.pt"
    if not path.is_file():
        raise UserError(f"no checkpoint at {path}: train one with examples/train.py --out {args.out}")
    saved, lm, config = read_checkpoint(path)
    vocab = saved["vocab"]
    if saved["tokens"] == "byte":
        ids = list(args.prompt.encode("utf-8"))
    else:
        unknown = sorted(set(args.prompt) - set(vocab))
        if unknown:
            raise BadArgument(f"--prompt has characters the training text did not: {''.join(unknown)!r}")
        ids = [vocab.index(c) for c in args.prompt]
    if not ids:
        raise BadArgument("--prompt is empty")
    model = lm.module.Model(config).to(args.device)
    model.load_state_dict(saved["model"])
    model.eval()
    g = torch.Generator(device=args.device).manual_seed(args.seed)
    prompt = torch.tensor([ids] * args.num_samples, device=args.device)
    with torch.no_grad():
        out = model.generate(prompt, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k, generator=g)
    return [decode(row.tolist(), vocab, saved["tokens"]) for row in out]


def decode(ids: list[int], vocab: list, tokens: str) -> str:
    """The text of `ids`; an id past the vocabulary (a --set vocab_size above the text's) is U+FFFD."""
    if tokens == "byte":
        return b"".join(bytes([i]) if i < 256 else "\ufffd".encode() for i in ids).decode("utf-8", errors="replace")
    return "".join(vocab[i] if i < len(vocab) else "\ufffd" for i in ids)


if __name__ == "__main__":
    sys.exit(main())
