"""`generate` past the context the spec asserts (`T_past + T <= block_size`): as nanoGPT does, each
step past it runs the last `block_size` tokens again, so the tokens are those of recomputing
from the cropped context; a prompt longer than the context is cropped the same way."""

from __future__ import annotations

import pytest
import torch

from conftest import REPO, fresh_module

CASES = {  # module -> a small config; its steps feed preallocated buffers, with learned or rotary positions,
    # or (nanogpt_model, whose text notation gives no cache) the whole window each time
    "nanogpt": dict(vocab_size=37, block_size=8, n_layer=2, n_head=2, n_embd=16),
    "llama3": dict(vocab_size=37, block_size=8, n_layer=2, n_head=4, n_kv_head=2, n_embd=16, mlp_hidden=24),
    "mistral": dict(vocab_size=37, block_size=8, n_layer=2, n_head=4, n_kv_head=2, n_embd=16, mlp_hidden=24,
                    sliding_window=3),
    "nanogpt_model": dict(V=37, P=8, L=2, H=2, D=16),
}


def _greedy_by_hand(model, prompt, steps: int, window: int) -> torch.Tensor:
    seq = prompt
    with torch.no_grad():
        for _ in range(steps):
            out = model(seq[:, -window:])
            logits = out if isinstance(out, torch.Tensor) else out.logits
            seq = torch.cat([seq, logits[:, -1:].argmax(-1)], dim=1)
    return seq


@pytest.mark.parametrize("name", sorted(CASES))
def test_generate_goes_past_the_context_as_nanogpt_does(name, monkeypatch):
    monkeypatch.setenv("SNF_COMPILE", "0")  # the default path's decode step is tested compiled in test_session
    mod = fresh_module(REPO / "generated" / f"{name}.py", f"{name}_context")
    torch.manual_seed(0)
    model = mod.Model(**CASES[name]).eval()
    window = CASES[name].get("block_size") or CASES[name]["P"]
    vocab = CASES[name].get("vocab_size") or CASES[name]["V"]
    for prompt_length in (3, window, window + 4):  # shorter than the context, all of it, longer
        prompt = torch.randint(0, vocab, (2, prompt_length))
        steps = 2 * window
        got = model.generate(prompt, steps, temperature=0)
        assert got.shape == (2, prompt_length + steps)
        assert torch.equal(got, _greedy_by_hand(model, prompt, steps, window)), (name, prompt_length)
