"""Text in, text out: a model's `generate` between its folder's tokenizer's encode and decode
(`snfc generate FOLDER --prompt "..."`, `snf.generate_text`). The tokenizer is transformers'
`AutoTokenizer` where transformers is installed, else the `tokenizers` library reading the
folder's tokenizer.json; snfc itself needs neither.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional


class TokenizerMissing(RuntimeError):
    """The folder has no tokenizer this Python can read."""


class _Tokenizer:
    """encode(text) -> ids and decode(ids) -> text, over either library."""

    def __init__(self, folder: Path):
        try:
            import transformers
        except ImportError:
            transformers = None
        if transformers is not None:
            try:
                inner = transformers.AutoTokenizer.from_pretrained(str(folder))
            except (OSError, ValueError) as err:
                raise TokenizerMissing(f"{folder}: transformers cannot read a tokenizer there ({err})") from None
            self.encode = lambda text: inner(text)["input_ids"]
            self.decode = lambda ids: inner.decode(ids, skip_special_tokens=True)
            return
        try:
            import tokenizers
        except ImportError:
            raise TokenizerMissing("reading a tokenizer needs transformers or tokenizers: pip install tokenizers") \
                from None
        if not (folder / "tokenizer.json").is_file():
            raise TokenizerMissing(f"{folder} has no tokenizer.json (install transformers for other tokenizers)")
        inner = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.encode = lambda text: inner.encode(text).ids
        self.decode = lambda ids: inner.decode(ids, skip_special_tokens=True)


class _TextStream:
    """A generate streamer (transformers' protocol) that writes the text of the new tokens as they
    come: each time their `continuation` after the prompt, and what it adds written, held back while
    it ends in a partial character."""

    def __init__(self, tokenizer: _Tokenizer, write: Callable[[str], object]):
        self.tokenizer, self.write = tokenizer, write
        self.prompt: list[int] | None = None
        self.new: list[int] = []
        self.shown = ""

    def put(self, value) -> None:
        ids = [int(v) for v in value.reshape(-1)]
        if self.prompt is None:  # the prompt comes first: the caller shows it
            self.prompt = ids
            return
        self.new += ids
        self._flush(final=False)

    def end(self) -> None:
        self._flush(final=True)

    def _flush(self, final: bool) -> None:
        text = continuation(self.tokenizer, self.prompt or [], self.new)
        if text.endswith("\ufffd") and not final:
            return
        if text.startswith(self.shown) and len(text) > len(self.shown):
            self.write(text[len(self.shown):])
            self.shown = text


def generate_text(model, prompt: str, *, tokenizer=None, folder=None, max_new_tokens: int = 64,
                  temperature: float = 0.0, top_k: Optional[int] = None, top_p: Optional[float] = None,
                  seed: Optional[int] = None, stream: Optional[Callable[[str], object]] = None) -> str:
    """The prompt and its continuation as text. `model`: a loaded model, or a `save_pretrained`
    folder (snf.from_pretrained); `tokenizer` one from `load_tokenizer`, by default the folder's.
    Greedy by default (`temperature=0`); `seed` makes sampling reproducible. `stream(text)` is called
    with each piece of the continuation as it is made. Stops at the model's end tokens
    (its `generation_config`, from the folder)."""
    import torch

    from .pretrained import from_pretrained

    if isinstance(model, (str, Path)):
        folder = Path(model)
        model = from_pretrained(folder)
    if tokenizer is None:
        source = folder if folder is not None else getattr(model, "_hf_folder", None)
        if source is None:
            raise TokenizerMissing("give a tokenizer, or a model loaded from a folder that has one")
        tokenizer = load_tokenizer(source)
    ids = tokenizer.encode(prompt)
    if not ids:
        raise ValueError("the prompt encodes to no tokens")
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
    streamer = _TextStream(tokenizer, stream) if stream is not None else None
    out = model.generate(torch.tensor([ids], device=device), max_new_tokens, temperature=temperature, top_k=top_k,
                         top_p=top_p, generator=generator, streamer=streamer)
    return prompt + continuation(tokenizer, ids, out[0, len(ids):].tolist())


def continuation(tokenizer, prompt_ids: list, new_ids: list) -> str:
    """The text `new_ids` add after the prompt: decoded together with it, so that a tokenizer that
    spells a word's space with the word keeps it."""
    base, full = tokenizer.decode(prompt_ids), tokenizer.decode(prompt_ids + new_ids)
    return full[len(base):] if full.startswith(base) else tokenizer.decode(new_ids)


def load_tokenizer(folder) -> _Tokenizer:
    """The tokenizer of a `save_pretrained` folder (TokenizerMissing where there is none to read)."""
    return _Tokenizer(Path(folder))
