"""Every family snf.from_pretrained loads, on the compiled path, against transformers (the eager
comparisons are tests/test_from_pretrained.py's): one process, one family after another."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

import snf  # noqa: E402
from test_from_pretrained import CAUSAL, _close, saved, tokens  # noqa: E402


@pytest.mark.slow  # torch.compile, in this process: every family, one after another, as a session would
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch internals, while compiling
def test_every_family_on_the_compiled_path(tmp_path, monkeypatch, capsys):
    """Each family loaded by from_pretrained, run compiled: the forward per layer block (CUDA's
    default, which the CPU runs eagerly: `compile_units`) against transformers, and the default
    `generate` (its decode step compiles on every device) token for token against transformers'
    greedy generate. Prints max |difference| of the logits (BERT: hidden states), eager and compiled."""
    import warnings
    monkeypatch.setenv("SNF_COMPILE", "1")
    rows = []
    for family in CAUSAL + ["bert"]:
        torch._dynamo.reset()
        hf, folder = saved(tmp_path, family)
        model = snf.from_pretrained(folder)
        idx = tokens(hf.config.vocab_size)
        with torch.no_grad():
            want = hf(idx).logits if family in CAUSAL else hf(idx).last_hidden_state
            out = lambda: model(idx).logits if family in CAUSAL else model(idx).last_hidden_state  # noqa: E731
            eager = out()
            model.compile_units = {device: {"train": "none", "eval": "block"} for device in ("cpu", "cuda")}
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)  # a fallback to eager fails here
                compiled = out()
        assert _close(eager, want) and _close(compiled, want), family
        same = "n/a"
        if family in CAUSAL:
            del model.compile_units  # the class's table again: the default path
            prompt = idx[:, :5]
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)
                got = model.generate(prompt, 6, temperature=0)
            same = torch.equal(got, hf.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=0))
            assert same, family
        rows.append(f"{family:9} eager {(eager - want).abs().max().item():.1e}  "
                    f"compiled {(compiled - want).abs().max().item():.1e}  greedy generate equal: {same}")
    with capsys.disabled():
        print("\nmax |difference| against transformers (fp32):\n" + "\n".join(rows))
