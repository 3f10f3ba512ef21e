"""`generate` past the context the spec asserts (`T_past + T <= block_size`): as nanoGPT does, each
step past it runs the last `block_size` tokens again, so the tokens are those of recomputing
from the cropped context; a prompt longer than the context is cropped the same way."""

from __future__ import annotations

import pytest
import torch

from conftest import REPO, fresh_module
from specs_table import ROWS, plans

# their steps feed preallocated buffers, with learned or rotary positions, or (nanogpt_model, whose
# text notation gives no cache) the whole window each time
NAMES = ("llama3", "mistral", "nanogpt", "nanogpt_model")
WINDOW = 8  # their context (block_size), short: generate goes past it soon


def _greedy_by_hand(model, prompt, steps: int, window: int) -> torch.Tensor:
    seq = prompt
    with torch.no_grad():
        for _ in range(steps):
            out = model(seq[:, -window:])
            logits = out if isinstance(out, torch.Tensor) else out.logits
            seq = torch.cat([seq, logits[:, -1:].argmax(-1)], dim=1)
    return seq


@pytest.mark.parametrize("name", NAMES)
def test_generate_goes_past_the_context_as_nanogpt_does(name, monkeypatch):
    monkeypatch.setenv("SNF_COMPILE", "0")  # the default path's decode step is tested compiled in test_session
    mod = fresh_module(REPO / "generated" / f"{name}.py", f"{name}_context")
    torch.manual_seed(0)
    context = plans(name).decode.context.as_symbol()  # the config field that bounds a forward's tokens
    model = mod.Model(**{**ROWS[name].small, context: WINDOW}).eval()
    window, vocab = WINDOW, ROWS[name].small.get("vocab_size") or ROWS[name].small["V"]
    for prompt_length in (3, window, window + 4):  # shorter than the context, all of it, longer
        prompt = torch.randint(0, vocab, (2, prompt_length))
        steps = 2 * window
        got = model.generate(prompt, steps, temperature=0)
        assert got.shape == (2, prompt_length + steps)
        assert torch.equal(got, _greedy_by_hand(model, prompt, steps, window)), (name, prompt_length)
