"""Text in, text out: a model's `generate` between its folder's tokenizer's encode and decode
(`snfc generate FOLDER --prompt "..."`, `snf.generate_text`). The tokenizer is transformers'
`AutoTokenizer` where transformers is installed, else the `tokenizers` library reading the
folder's tokenizer.json; snfc itself needs neither.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable, Optional


class TokenizerMissing(RuntimeError):
    """The folder has no tokenizer this Python can read."""


# the files a save_pretrained folder's tokenizer is read from: a folder with none has no tokenizer
# (transformers would make an empty one of the model's type, which encodes every prompt to nothing)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt",
                   "spiece.model", "sentencepiece.bpe.model", "merges.txt")
HOW = ("save the model's tokenizer beside it (in transformers: AutoTokenizer.from_pretrained(NAME)"
       ".save_pretrained(FOLDER)), or give generate_text a tokenizer=")


class _Tokenizer:
    """encode(text) -> ids and decode(ids) -> text, over either library. Nothing in the folder runs:
    transformers is asked with trust_remote_code=False (a tokenizer_config.json's `auto_map` names
    Python files in the folder, which transformers would otherwise offer to run) and
    local_files_only=True (the folder is local: nothing is fetched from the Hub)."""

    def __init__(self, folder):
        from .pretrained import local_folder

        folder = local_folder(folder)
        if not any((folder / name).is_file() for name in TOKENIZER_FILES):
            raise TokenizerMissing(f"{folder} holds no tokenizer (none of {', '.join(TOKENIZER_FILES)}): {HOW}")
        try:
            import transformers
        except ImportError:
            transformers = None
        if transformers is not None:
            try:
                inner = transformers.AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False,
                                                                   local_files_only=True)
                empty = inner.vocab_size == 0
                inner.decode(inner("snfc")["input_ids"])  # what a setting breaks only when used, found here
            except Exception as err:  # noqa: BLE001 - a hostile file breaks transformers in any way
                raise TokenizerMissing(_unreadable(folder, err)) from None
            if empty:  # (no vocabulary file beside a tokenizer_config.json: every prompt encodes to nothing)
                raise TokenizerMissing(f"{folder}'s tokenizer has an empty vocabulary ({_present(folder)}): {HOW}")
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
        try:
            inner = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
        except Exception as err:  # noqa: BLE001 - the library raises a bare Exception for a malformed file
            raise TokenizerMissing(_unreadable(folder, err)) from None
        self.encode = lambda text: inner.encode(text).ids
        self.decode = lambda ids: inner.decode(ids, skip_special_tokens=True)


def _unreadable(folder: Path, err: Exception) -> str:
    """Why the folder's tokenizer cannot be read: code in the folder it names (which snfc never
    runs), or what the library said."""
    for name in ("tokenizer_config.json", "config.json"):
        try:
            named = json.loads((folder / name).read_text(encoding="utf-8")).get("auto_map")
        except (OSError, ValueError, AttributeError, RecursionError):
            continue
        if named:
            return (f"{folder / name}: its auto_map names Python code in the folder ({json.dumps(named)}), which "
                    f"snfc never runs; {HOW}")
    said = str(err).splitlines()[0] if str(err) else ""
    return f"{folder}: cannot read its tokenizer ({_present(folder)}: {type(err).__name__}: {said}): {HOW}"


def _present(folder: Path) -> str:
    return ", ".join(name for name in TOKENIZER_FILES if (folder / name).is_file())


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
    (its `loaded_from.generation_config`, from the folder)."""
    import torch

    from .pretrained import from_pretrained

    check_prompt(prompt)
    if isinstance(model, (str, Path)):
        folder = model
        model = from_pretrained(folder)
    check_continues(model)
    if tokenizer is None:
        source = folder if folder is not None else getattr(getattr(model, "loaded_from", None), "folder", None)
        if source is None:
            raise TokenizerMissing("give a tokenizer, or a model loaded from a folder that has one")
        tokenizer = load_tokenizer(source)
    ids = tokenizer.encode(prompt)
    if not ids:
        raise ValueError("the prompt encodes to no tokens: give it some text")
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
    streamer = _TextStream(tokenizer, stream) if stream is not None else None
    out = model.generate(torch.tensor([ids], device=device), max_new_tokens, temperature=temperature, top_k=top_k,
                         top_p=top_p, generator=generator, streamer=streamer)
    return prompt + continuation(tokenizer, ids, out[0, len(ids):].tolist())


def check_prompt(prompt) -> None:
    """A prompt is text that UTF-8 can write: not bytes, and no lone surrogate (what Python makes of
    a command line's bytes that are not UTF-8), which the tokenizer cannot encode."""
    if not isinstance(prompt, str):
        raise TypeError(f"the prompt must be a str, got {type(prompt).__name__}"
                        + (" (decode it first: prompt.decode('utf-8'))" if isinstance(prompt, bytes) else ""))
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as err:
        code = ord(prompt[err.start])
        what = f"the byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"the lone surrogate U+{code:04X}"
        raise ValueError(f"the prompt is not UTF-8 text: {what} at character {err.start}; give it as UTF-8") from None


def check_continues(model) -> None:
    """The model continues a prompt: a decoder's generate (the prompt, then new tokens after it).
    An encoder (BERT) has no generate; an encoder-decoder's (T5) writes a new text from the encoded
    prompt, which is no continuation of it."""
    module = sys.modules[type(model).__module__]
    spec = Path(getattr(module, "SPEC", {}).get("path", type(model).__name__)).name
    if not callable(getattr(model, "generate", None)):
        gives = getattr(getattr(module, "Output", None), "_fields", ())
        why = (f" (its forward gives {', '.join(gives)}, no next-token logits: an encoder)"
               if gives and "logits" not in gives else "")
        raise ValueError(f"{spec}'s model has no generate, so it cannot continue a prompt: the spec makes it no "
                         f"decoding loop{why}. Use a decoder's folder (a causal language model: gpt2, llama, ...)")
    if hasattr(model, "_encode"):
        raise ValueError(f"{spec}'s model is an encoder-decoder: its generate writes a new text from the encoded "
                         "prompt, not a continuation of it, so generate_text and snfc generate do not run it. From "
                         "Python, model.generate(input_ids, max_new_tokens) gives the decoder's tokens")


def continuation(tokenizer, prompt_ids: list, new_ids: list) -> str:
    """The text `new_ids` add after the prompt: decoded together with it, so that a tokenizer that
    spells a word's space with the word keeps it."""
    base, full = tokenizer.decode(prompt_ids), tokenizer.decode(prompt_ids + new_ids)
    return full[len(base):] if full.startswith(base) else tokenizer.decode(new_ids)


def load_tokenizer(folder) -> _Tokenizer:
    """The tokenizer of a `save_pretrained` folder (TokenizerMissing where there is none to read)."""
    return _Tokenizer(folder)
