"""generate over recurrent states (issue 37): the states live in one buffer per layer, allocated once
per call, and each decode step writes the new state over the old one in place; a hybrid's KV caches
sit in preallocated buffers beside them. The tokens are those of feeding back what each step
returns, and the cache plan refuses the in-place path where a spec reads a state after writing it."""

from __future__ import annotations

import importlib

import pytest
import torch

from conftest import REPO
from specs_table import ROWS

HYBRIDS = ["mamba2", "nemotron_h", "qwen3_next", "kimi_linear"]


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    monkeypatch.setenv("SNF_COMPILE", "0")


def _model(name: str):
    torch.manual_seed(0)
    model = importlib.import_module(f"generated.{name}").Model(**ROWS[name].small).eval()
    with torch.no_grad():  # random everything, so nothing hides
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def _fed_back(model, prompt: torch.Tensor, steps: int) -> torch.Tensor:
    """Greedy decoding the plain way: each call given what the last one returned."""
    seq, out = prompt, model(prompt, use_cache=True)
    caches = {p: getattr(out, n) for p, n in _pairs(model)}
    for _ in range(steps):
        token = out.logits[:, -1:].argmax(-1)
        seq = torch.cat([seq, token], dim=1)
        out = model(token, **caches, use_cache=True)
        caches = {p: getattr(out, n) for p, n in _pairs(model)}
    return seq


def _pairs(model) -> tuple:
    """The (input, output) cache pairs the generated generate feeds back, read off its source."""
    import inspect
    import re
    source = inspect.getsource(type(model).generate)
    return eval(re.search(r"caches=(\(\(.*?\)\)),", source.replace("\n", " ")).group(1))  # noqa: S307 - our file


@pytest.mark.parametrize("name", HYBRIDS)
def test_generate_writes_the_states_over_their_buffers(name):
    model = _model(name)
    prompt = torch.randint(0, 64, (2, 5))
    seen = []
    step = type(model)._decode_step

    def recording(self, idx, use_cache, decode, **caches):
        seen.append({k: [(id(t), t.data_ptr()) for t in v] for k, v in caches.items()})
        out = step(self, idx, **caches, use_cache=use_cache, decode=decode)
        for (past, new) in _pairs(model):  # the step returns its states in the buffers it was given
            assert getattr(out, new) is caches[past], (past, new)
        return out
    model._decode_step = recording.__get__(model)
    with torch.no_grad():
        out = model.generate(prompt, 6, temperature=0)
    assert len(seen) == 5 and all(s == seen[0] for s in seen)  # the same buffers at every step
    del model._decode_step
    with torch.no_grad():
        assert torch.equal(out, _fed_back(model, prompt, 6))


@pytest.mark.parametrize("name", HYBRIDS)
def test_each_generate_call_starts_from_its_own_prompt(name, monkeypatch):
    model = _model(name)
    # the buffers kept on the model between calls, as on CUDA (a CUDA graph reads fixed addresses)
    from snf.runtime import writes
    kept = writes._decode_buffers
    monkeypatch.setattr(writes, "_decode_buffers", lambda owner, *rest: kept(model, *rest))
    a, b = torch.randint(0, 64, (1, 4)), torch.randint(0, 64, (1, 6))
    with torch.no_grad():
        first = model.generate(a, 4, temperature=0)
        model.generate(b, 4, temperature=0)  # leaves its states in its own buffers, not in the model
        assert torch.equal(model.generate(a, 4, temperature=0), first)


def test_a_state_read_after_its_write_is_fed_back_instead(tmp_path):
    """Written first, the new state would overwrite what the scan still reads: the plan keeps the
    fed-back path, says why, and generate gives the same tokens."""
    from conftest import fresh_module, snfc, write_spec
    text = (REPO / "specs" / "mamba2.snf").read_text(encoding="utf-8")
    late = "    new_ssm[l] = ssd_state(xs, dt, A, b_in, c_out, D=D_skip[l], dt_bias=dt_bias[l], state=ssm_state)\n"
    assert late in text
    text = text.replace(late, "").replace("    let y = reshape(ssd_scan(", late + "    let y = reshape(ssd_scan(")
    spec = write_spec(tmp_path, text, "early.snf")
    code, out, err = snfc("check", "-v", str(spec))
    assert code == 0, err
    line = text.splitlines().index(late.rstrip("\n")) + 1
    assert (f"generate feeds back the caches each step returns (no preallocated buffers): line {line + 1} reads the "
            f"past state `past_ssm` after line {line} writes the new one") in out + err
    code, out, err = snfc("compile", str(spec), "-o", str(tmp_path / "early.py"))
    assert code == 0, err
    source = (tmp_path / "early.py").read_text(encoding="utf-8")
    assert "_decode_step =" not in source and "buffer_axes=None" in source
    mod = fresh_module(tmp_path / "early.py", "mamba2_early")
    torch.manual_seed(0)
    model = mod.Model(**ROWS["mamba2"].small).eval()
    prompt = torch.randint(0, 64, (2, 5))
    with torch.no_grad():
        assert torch.equal(model.generate(prompt, 5, temperature=0), _fed_back(model, prompt, 5))


def test_the_bundled_recurrent_specs_write_their_states_in_place():
    from snf.compiler import analyze, lower
    from snf.passes import plan
    from snf.source import Source
    for name in HYBRIDS:
        path = REPO / "specs" / f"{name}.snf"
        plans = plan(lower(analyze(Source.from_bytes(str(path), path.read_bytes())).model))
        assert plans.caches.preallocated is not None and plans.decode_steps, (name, plans.caches.reason)


def test_the_compile_wait_message_of_a_states_only_decode_step_names_no_slots():
    from snf.runtime.policy import _named
    from snf.runtime.writes import _DecodeState
    model = _model("mamba2")
    fn = type(model).forward
    state = _DecodeState(torch.tensor(3), None)  # states alone: no slots to read
    assert _named(fn, (model, torch.zeros(2, 1, dtype=torch.long)), {"decode": state}, "decode", "batch") == \
        "the decode step of specs/mamba2.snf's generate (batch 2)"
