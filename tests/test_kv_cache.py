"""KV-cache decoding (issue 5): incremental == full recompute, greedy generate == transformers."""

from __future__ import annotations

import sys
import warnings

import pytest
import torch

from snf.interop import load_state_dict
from snf.runtime import generate, writes


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    monkeypatch.setenv("SNF_COMPILE", "0")


def _nanogpt(seed=0, **over):
    from generated.nanogpt import Model
    torch.manual_seed(seed)
    cfg = dict(vocab_size=97, block_size=64, n_layer=2, n_head=3, n_embd=48, gelu_tanh=True)  # GPT-2's GELU
    cfg.update(over)
    model = Model(**cfg).eval()
    with torch.no_grad():  # random everything, biases and norms included, so nothing hides
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def _decoder(seed=0, **over):
    from generated.gpt_decoder import Model
    torch.manual_seed(seed)
    cfg = dict(vocab_size=97, block_size=64, n_layer=2, n_head=3, n_embd=48, mlp_hidden=64)
    cfg.update(over)
    model = Model(**cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


MODELS = {"nanogpt": _nanogpt, "gpt_decoder": _decoder}
CHUNKINGS = [(7, 1, 3, 1, 8, 2), (1, 1, 1, 1), (16,), (5, 11)]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("chunks", CHUNKINGS, ids=["-".join(map(str, c)) for c in CHUNKINGS])
def test_incremental_equals_full_recompute(name, chunks):
    model = MODELS[name]()
    idx = torch.randint(0, 97, (2, sum(chunks)))
    with torch.no_grad():
        full = model(idx).logits
        keys = values = None
        start, pieces = 0, []
        for n in chunks:
            out = model(idx[:, start:start + n], past_keys=keys, past_values=values)
            pieces.append(out.logits)
            keys, values = out.new_keys, out.new_values
            start += n
    assert keys.shape[2] == sum(chunks)
    assert (torch.cat(pieces, dim=1) - full).abs().max().item() <= 1e-5


@pytest.mark.parametrize("name", MODELS)
def test_cache_of_a_full_pass_equals_the_chunked_cache(name):
    model = MODELS[name]()
    idx = torch.randint(0, 97, (2, 12))
    with torch.no_grad():
        whole = model(idx)
        first = model(idx[:, :5])
        rest = model(idx[:, 5:], past_keys=first.new_keys, past_values=first.new_values)
    assert (rest.new_keys - whole.new_keys).abs().max().item() <= 1e-5
    assert (rest.new_values - whole.new_values).abs().max().item() <= 1e-5


@pytest.mark.parametrize("name", MODELS)
def test_block_size_overflow_is_a_clear_error_and_generate_crops(name):
    model = MODELS[name](block_size=10)
    idx = torch.randint(0, 97, (1, 8))
    with torch.no_grad():
        out = model(idx)
        model(idx[:, :2], past_keys=out.new_keys, past_values=out.new_values)  # 8 + 2 = 10 is fine
        with pytest.raises(ValueError, match=r"<= block_size") as info:
            model(idx[:, :3], past_keys=out.new_keys, past_values=out.new_values)
    assert "block_size = 10" in str(info.value) and "= 11" in str(info.value)
    assert model.generate(idx, max_new_tokens=5).shape == (1, 13)  # past the context, as nanoGPT: cropped


@pytest.mark.parametrize("name", MODELS)
def test_cache_inputs_come_together(name):
    model = MODELS[name]()
    idx = torch.randint(0, 97, (1, 4))
    with torch.no_grad():
        out = model(idx)
        with pytest.raises(ValueError, match="together"):
            model(idx, past_keys=out.new_keys)


def _hf_gpt2(model):
    transformers = pytest.importorskip("transformers")
    c = model.config
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd, vocab_size=c.vocab_size, n_positions=c.block_size,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.1)
    load_state_dict(model, hf.state_dict(), "hf")
    return hf


def _hf_llama(model):
    transformers = pytest.importorskip("transformers")
    c = model.config
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        num_hidden_layers=c.n_layer, hidden_size=c.n_embd, num_attention_heads=c.n_head,
        num_key_value_heads=c.n_head, intermediate_size=c.mlp_hidden, vocab_size=c.vocab_size,
        tie_word_embeddings=True, rms_norm_eps=c.norm_eps, rope_theta=c.rope_base,
        max_position_embeddings=c.block_size)).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.1)
    load_state_dict(model, hf.state_dict(), "hf")
    return hf


@pytest.mark.parametrize("name,hf_of", [("nanogpt", _hf_gpt2), ("gpt_decoder", _hf_llama)])
@pytest.mark.parametrize("batch", [1, 3])
def test_greedy_generate_equals_transformers(name, hf_of, batch):
    model = MODELS[name]()
    hf = hf_of(model)
    prompt = torch.randint(0, 97, (batch, 9))
    ours = model.generate(prompt, max_new_tokens=24, temperature=0)
    theirs = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=24, do_sample=False,
                         pad_token_id=0, eos_token_id=None)
    assert ours.shape == (batch, 33)
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("name", MODELS)
def test_generate_uses_the_cache_and_matches_recompute(name):
    model = MODELS[name]()
    prompt = torch.randint(0, 97, (2, 5))
    calls, steps = [], []
    original = model.forward
    model.forward = lambda *a, **k: calls.append(a[0].shape[1]) or original(*a, **k)
    model._decode_step = lambda *a, **k: steps.append((a[0].shape[1], int(k["decode"].position))) or \
        type(model)._decode_step(model, *a, **k)
    out = model.generate(prompt, max_new_tokens=6, temperature=0)
    assert calls == [5, 1, 1, 1, 1, 1]  # the prompt once, then one token per step at the next cache slot
    assert steps == [(1, 5), (1, 6), (1, 7), (1, 8), (1, 9)]
    model.forward = original
    del model._decode_step
    seq = prompt
    with torch.no_grad():  # the same tokens by recomputing the whole sequence each step
        for _ in range(6):
            seq = torch.cat([seq, model(seq).logits[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(out, seq)


@pytest.mark.parametrize("name", MODELS)
def test_sampling_is_reproducible_with_a_generator(name):
    model = MODELS[name]()
    prompt = torch.randint(0, 97, (2, 4))
    runs = [model.generate(prompt, 10, temperature=0.9, top_k=20, top_p=0.9,
                           generator=torch.Generator().manual_seed(7)) for _ in range(2)]
    other = model.generate(prompt, 10, temperature=0.9, top_k=20, top_p=0.9, generator=torch.Generator().manual_seed(8))
    assert torch.equal(runs[0], runs[1])
    assert not torch.equal(runs[0], other)
    assert torch.equal(runs[0][:, :4], prompt)


def test_top_k_and_top_p_restrict_the_candidates():
    _sample = generate._sample
    logits = torch.tensor([[4.0, 3.0, 2.0, -1.0, -2.0]])
    g = torch.Generator().manual_seed(0)
    picks = {_sample(logits, 1.0, 2, None, g).item() for _ in range(200)}
    assert picks == {0, 1}
    picks = {_sample(logits, 1.0, None, 0.5, g).item() for _ in range(200)}
    assert picks == {0}  # token 0 alone has ~66% of the mass
    assert _sample(logits, 0, None, None, None).item() == 0


@pytest.mark.parametrize("temperature", [1e-40, 1e-300, 5e-324, 1e-8, 1e30, 1e300])
def test_sampling_is_finite_for_any_temperature_above_zero(temperature):
    """Issue 18: temperature=1e-40 passed _check_sampling, then logits / temperature overflowed
    to inf and the probabilities were NaN. The logits less their largest are divided instead: a
    tiny temperature samples the largest logit (or one of tied ones), a huge one uniformly."""
    _sample = generate._sample
    logits = torch.tensor([[4.0, 3.0, 2.0, -1.0, float("-inf")], [1e30, -1e30, 1e30, 0.0, 0.0]])
    g = torch.Generator().manual_seed(0)
    picks = [_sample(logits, temperature, None, None, g) for _ in range(50)]
    assert all(p.shape == (2, 1) for p in picks)
    if temperature < 1:
        assert {p[0].item() for p in picks} == {0} and {p[1].item() for p in picks} <= {0, 2}
    else:
        assert len({p[0].item() for p in picks}) > 1 and 4 not in {p[0].item() for p in picks}
    for top in ((3, None), (None, 0.5), (2, 0.9)):
        assert _sample(logits, temperature, *top, g).shape == (2, 1)


def test_generate_at_a_tiny_temperature_is_greedy():
    model = MODELS["nanogpt"]()
    prompt = torch.randint(0, 97, (2, 4))
    assert torch.equal(model.generate(prompt, 6, temperature=1e-40, generator=torch.Generator().manual_seed(0)),
                       model.generate(prompt, 6, temperature=0))


@pytest.mark.parametrize("name", MODELS)
def test_bad_generate_arguments_are_clear_errors(name):
    model = MODELS[name]()
    prompt = torch.randint(0, 97, (1, 3))
    bad = [({"max_new_tokens": -1}, "max_new_tokens must be an int >= 0, got -1"),
           ({"max_new_tokens": 2.5}, "max_new_tokens must be an int >= 0, got 2.5"),
           ({"temperature": -0.5}, "temperature must be a finite number >= 0 .0 is greedy., got -0.5"),
           ({"temperature": float("nan")}, "temperature must be a finite number >= 0 .0 is greedy., got nan"),
           ({"temperature": float("inf")}, "temperature must be a finite number >= 0 .0 is greedy., got inf"),
           ({"top_k": 0}, "top_k must be None or an int >= 1, got 0"),
           ({"top_p": 0.0}, r"top_p must be None or a number in \(0, 1\], got 0.0"),
           ({"top_p": 1.5}, r"top_p must be None or a number in \(0, 1\], got 1.5")]
    for kwargs, message in bad:
        args = {"max_new_tokens": 2, **kwargs}
        with pytest.raises(ValueError, match=message):
            model.generate(prompt, **args)
    assert torch.equal(model.generate(prompt, 0), prompt)  # nothing to add
    assert model.generate(prompt, 2, top_k=10**6, top_p=1.0).shape == (1, 5)  # the widest settings are fine


@pytest.mark.parametrize("name", MODELS)
def test_generate_runs_the_models_forward_hooks(name):
    model = MODELS[name]()
    prompt = torch.randint(0, 97, (2, 4))
    free = model.generate(prompt, 12, temperature=0)
    banned = int(free[0, -1])  # a token greedy decoding picks

    def ban(module, args, out):  # a logit bias, as a user would add one
        out.logits[..., banned] = float("-inf")
        return out

    handle = model.register_forward_hook(ban)
    try:
        hooked = model.generate(prompt, 12, temperature=0)
    finally:
        handle.remove()
    assert not (hooked[:, 4:] == banned).any()  # every step, the decode steps included


@pytest.mark.parametrize("how", ["double", "bfloat16", "autocast"])
@pytest.mark.parametrize("name", MODELS)
def test_generate_on_cast_models(name, how):
    """The spec's float32 is the cast's dtype (docs/language.md 3.2): the caches, the logits and the
    preallocated buffers are float64 or bfloat16 in a cast model; under autocast the model, and so
    its caches, stay float32, and the logits are bfloat16."""
    model = MODELS[name]()
    if how != "autocast":
        model.to(getattr(torch, how))
    prompt = torch.randint(0, 97, (2, 5))
    context = torch.autocast("cpu", dtype=torch.bfloat16) if how == "autocast" else torch.no_grad()
    with context:
        out = model.generate(prompt, 6, temperature=0)
        seq = prompt
        with torch.no_grad():
            for _ in range(6):
                logits = model(seq).logits
                seq = torch.cat([seq, logits[:, -1:].argmax(-1)], dim=1)
    assert logits.dtype == (torch.float64 if how == "double" else torch.bfloat16)
    with context:  # chunked forward, feeding back the cache it returns
        first = model(seq[:, :7])
        step = model(seq[:, 7:9], past_keys=first.new_keys, past_values=first.new_values)
        whole = model(seq[:, :9])
    assert first.new_keys.dtype == {"double": torch.float64, "bfloat16": torch.bfloat16, "autocast": torch.float32}[how]
    tol = 1e-12 if how == "double" else 0.05 * whole.logits.abs().max().item()  # bf16 rounding
    assert (step.logits.double() - whole.logits[:, 7:].double()).abs().max().item() <= tol
    if how == "bfloat16":  # 8-bit mantissas: cached and recomputed logits differ in rounding, so
        assert out.shape == seq.shape and (out[:, :6] == seq[:, :6]).all()  # only the first pick is held
    else:
        assert torch.equal(out, seq)


def _state(model, position, length=None):
    """A decode step's state, as generate's (see the module's _decode) hands it to forward."""
    return sys.modules[type(model).__module__]._DecodeState(position,
                                                            model.config.block_size if length is None else length)


@pytest.mark.parametrize("name", MODELS)
def test_the_decode_position_needs_its_caches(name):
    model = MODELS[name]()
    token = torch.zeros(1, 1, dtype=torch.long)
    cfg = model.config
    layers = [torch.zeros(1, cfg.block_size, cfg.n_head, cfg.n_embd // cfg.n_head)] * cfg.n_layer
    message = "the decode position must be a 0-d integer tensor, with the preallocated caches past_keys, past_values"
    for position, caches in [(torch.tensor(3), {}), (torch.tensor(3.0), {"past_keys": layers, "past_values": layers}),
                             (torch.tensor([3]), {"past_keys": layers, "past_values": layers}),
                             (3, {"past_keys": layers, "past_values": layers})]:
        with pytest.raises(ValueError, match=message):
            model(token, **caches, decode=_state(model, position))


@pytest.mark.slow
def test_fixed_shape_decode_compiles_once_per_bucket(monkeypatch):
    """generate() moves the cache into preallocated buffers written in place and attends over the
    first `_bucket(position)` slots: the decode steps of one bucket have the same shapes, so
    torch.compile compiles a step once per bucket, for a batch of 1 and once for every larger batch
    (its batch axis is dynamic). On a CPU the prompt's pass runs eagerly (compile_units)."""
    from pathlib import Path

    from torch._dynamo.utils import counters

    from conftest import fresh_module
    torch._dynamo.reset()
    mod = fresh_module(Path(__file__).resolve().parents[1] / "generated" / "nanogpt.py", "nanogpt_decode_once")
    torch.manual_seed(0)
    model = mod.Model(vocab_size=64, block_size=32, n_layer=2, n_head=2, n_embd=32).eval()
    prompt = torch.randint(0, 64, (2, 5))
    monkeypatch.setenv("SNF_COMPILE", "1")
    counters.clear()
    first = model.generate(prompt, 3, temperature=0)  # compiles one decode step
    graphs = counters["stats"]["unique_graphs"]
    assert graphs == 1
    again = model.generate(prompt, 12, temperature=0)  # ten more decode steps at new positions
    assert counters["stats"]["unique_graphs"] == graphs  # no recompilation
    assert not counters["graph_break"]
    monkeypatch.setenv("SNF_COMPILE", "0")
    assert torch.equal(again, model.generate(prompt, 12, temperature=0))
    assert torch.equal(first, again[:, :8])
    _compiled_step_equals_eager(mod, model, again, monkeypatch)  # on one cache state
    assert counters["stats"]["unique_graphs"] == graphs
    # a long context: the steps read 128 slots, then 256 when the text passes 128, not all 512
    long = mod.Model(vocab_size=64, block_size=512, n_layer=2, n_head=2, n_embd=32).eval()
    text = torch.randint(0, 64, (1, 120))
    before = counters["stats"]["unique_graphs"]
    compiled = long.generate(text, 20, temperature=0)
    assert counters["stats"]["unique_graphs"] == before + 2  # a step per bucket, at a batch of 1
    assert [generate._bucket(n, 512) for n in (1, 128, 129, 500)] == [128, 128, 256, 512]
    # a new batch size and a second config mixed in one loop: graphs of their own, each correct
    wide = torch.randint(0, 64, (3, 4))
    other = mod.Model(vocab_size=64, block_size=32, n_layer=2, n_head=4, n_embd=32).eval()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mixed = [model.generate(wide, 9, temperature=0), other.generate(prompt, 9, temperature=0),
                 model.generate(prompt, 9, temperature=0), long.generate(text[:, :3], 4, temperature=0)]
    assert not [w for w in caught if "running eager" in str(w.message)]  # compiled all along
    assert counters["stats"]["unique_graphs"] == before + 3  # `other`'s own step; batch 3 reuses batch 2's
    monkeypatch.setenv("SNF_COMPILE", "0")
    assert torch.equal(compiled, long.generate(text, 20, temperature=0))
    eager = [model.generate(wide, 9, temperature=0), other.generate(prompt, 9, temperature=0),
             model.generate(prompt, 9, temperature=0), long.generate(text[:, :3], 4, temperature=0)]
    for got, want in zip(mixed, eager):
        assert torch.equal(got, want)
    assert not counters["graph_break"]
    # batch 1, where inductor writes the step's one-row matmuls as reductions (decompose_mm_pass)
    counters.clear()
    _compiled_step_equals_eager(mod, model, again[:1], monkeypatch)
    assert counters["inductor"]["decompose_addmm"] > 0


def _compiled_step_equals_eager(mod, model, text, monkeypatch) -> None:
    """The compiled decode step against eager on the cache of text[:, :9], feeding text[:, 9]."""
    monkeypatch.setenv("SNF_COMPILE", "0")
    size = model.config.block_size
    with torch.no_grad():
        out = model(text[:, :9])
        caches = [writes._cache_buffers(c, 1, size) for c in (out.new_keys, out.new_values)]
        copies = [[t.clone() for t in c] for c in caches]
        token = text[:, 9:10].contiguous()  # as generate's tokens are: a strided one is another graph
        step = dict(use_cache=True, decode=_state(model, torch.tensor(9)))  # as generate's step is called
        eager = model._decode_step(token, past_keys=copies[0], past_values=copies[1], **step)
        monkeypatch.setenv("SNF_COMPILE", "1")
        compiled = model._decode_step(token, past_keys=caches[0], past_values=caches[1], **step)
    assert (compiled.logits - eager.logits).abs().max().item() <= 1e-5
    for got, want in zip(caches[0] + caches[1], copies[0] + copies[1]):
        assert (got - want).abs().max().item() <= 1e-5


@pytest.mark.parametrize("steps", [1, 3], ids=["one token (decode)", "three tokens"])
@pytest.mark.parametrize("form", ["stacked", "per-layer list"])
@pytest.mark.parametrize("name", MODELS)
def test_preallocated_cache_step_equals_concatenated_cache(name, form, steps):
    model = MODELS[name]()
    idx = torch.randint(0, 97, (2, 6 + steps))
    with torch.no_grad():
        out = model(idx[:, :6])
        size = model.config.block_size
        keys = out.new_keys.new_zeros(out.new_keys.shape[:2] + (size,) + out.new_keys.shape[3:])
        values = torch.zeros_like(keys)
        keys[:, :, :6], values[:, :, :6] = out.new_keys, out.new_values
        given = (keys, values) if form == "stacked" else (list(keys), list(values))  # views: writes land in keys
        # a decode step over the preallocated caches
        static = model(idx[:, 6:], past_keys=given[0], past_values=given[1], decode=_state(model, torch.tensor(6)))
        grown = model(idx[:, 6:], past_keys=out.new_keys, past_values=out.new_values)
    assert (static.logits - grown.logits).abs().max().item() <= 1e-5
    assert static.new_keys is given[0]  # written in place
    assert (keys[:, :, :6 + steps] - grown.new_keys).abs().max().item() <= 1e-5
    assert (values[:, :, :6 + steps] - grown.new_values).abs().max().item() <= 1e-5
    assert not keys[:, :, 6 + steps:].any()  # the empty slots stay empty


@pytest.mark.parametrize("name", MODELS)
def test_preallocated_cache_is_checked(name):
    model = MODELS[name]()
    cfg = model.config
    layer = torch.zeros(2, cfg.block_size, cfg.n_head, cfg.n_embd // cfg.n_head)
    at = torch.tensor(3)
    token = torch.zeros(2, 1, dtype=torch.long)
    bad = {
        "one layer short": [layer] * (cfg.n_layer - 1),
        "fewer slots than block_size": [layer[:, :-1]] * cfg.n_layer,
        "a batch of 3": [torch.zeros(3, *layer.shape[1:])] * cfg.n_layer,
        "not tensors": [None] * cfg.n_layer,
        "integers": [layer.long()] * cfg.n_layer,
    }
    for cache in bad.values():  # each one: a clear error, not an index error deep in a layer
        with pytest.raises(ValueError, match=r"input past_keys must be \[n_layer, B, block_size, H, head_dim\] float32, "
                                             r"or a list of its \d+ layers"):
            model(token, past_keys=cache, past_values=[layer] * cfg.n_layer, decode=_state(model, at))
    with pytest.raises(ValueError, match=r"past_values must be \[n_layer, B, block_size, H, head_dim\] float32, got \[2, 2\] float32$"):
        model(token, past_keys=[layer] * cfg.n_layer, past_values=torch.zeros(2, 2), decode=_state(model, at))


def test_an_input_sized_by_the_cache_turns_the_fixed_shape_path_off(tmp_path):
    """A mask [B, T_past + T] is sized by the filled length, which a preallocated buffer does not
    have, and must come with the cache, which generate cannot fill: such a spec gets no
    fixed-shape decode step, and generate recomputes the sequence each step, correctly."""
    from pathlib import Path

    from conftest import fresh_module, snfc, unwrapped, write_spec
    text = (Path(__file__).resolve().parents[1] / "specs" / "nanogpt.snf").read_text(encoding="utf-8")
    text = text.replace("  past_values : Tensor([n_layer, B, T_past, H, head_dim], float32)?\n",
                        "  past_values : Tensor([n_layer, B, T_past, H, head_dim], float32)?\n"
                        "  attention_mask : Tensor([B, T_past + T], int64)?\n")
    text = text.replace("        causal=True,", "        mask=attention_mask,\n        causal=True,")
    spec = write_spec(tmp_path, text, "masked.snf")
    code, out, err = snfc("compile", str(spec), "-o", str(tmp_path / "masked.py"))
    assert code == 0, err
    source = (tmp_path / "masked.py").read_text(encoding="utf-8")
    assert "def forward(self, idx: torch.Tensor, targets: Optional[torch.Tensor] = None, past_keys: " \
           "Optional[torch.Tensor] = None, past_values: Optional[torch.Tensor] = None, attention_mask: " \
           "Optional[torch.Tensor] = None, *, use_cache: Optional[bool] = None, return_logits: Optional[bool] = " \
           "None) -> Output:" in unwrapped(source)
    assert "_decode_step =" not in source and "_check_decode" not in source  # no fixed-shape path
    mod = fresh_module(tmp_path / "masked.py", "nanogpt_masked")
    torch.manual_seed(0)
    model = mod.Model(vocab_size=50, block_size=32, n_layer=2, n_head=2, n_embd=16).eval()
    prompt = torch.randint(0, 50, (2, 5))
    seq = prompt
    with torch.no_grad():
        for _ in range(6):
            seq = torch.cat([seq, model(seq).logits[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(model.generate(prompt, 6, temperature=0), seq)


VALUE_HEADS = """\
param:
  vocab_size : int = 13
  block_size : int = 16
  n_layer : int = 2
  H : int = 2
  hd : int = 4
  hv : int = 6                # values wider than queries and keys
  D : int = 8
input:
  idx : Tensor([B, T], int64)
  past_keys : Tensor([n_layer, B, T_past, H, hd], float32)?
  past_values : Tensor([n_layer, B, T_past, H, hv], float32)?
parameter:
  emb : Tensor([vocab_size, D], float32)
  q_w : Tensor([n_layer, H*hd, D], float32)
  k_w : Tensor([n_layer, H*hd, D], float32)
  v_w : Tensor([n_layer, H*hv, D], float32)
  o_w : Tensor([n_layer, D, H*hv], float32)
  head : Tensor([vocab_size, D], float32)
output:
  logits : Tensor([B, T, vocab_size], float32)
  new_keys : Tensor([n_layer, B, T_past + T, H, hd], float32)
  new_values : Tensor([n_layer, B, T_past + T, H, hv], float32)
assert T_past + T <= block_size
let x = gather(emb, idx)
let new_keys = full([n_layer, B, T_past + T, H, hd], 0.0, float32)
let new_values = full([n_layer, B, T_past + T, H, hv], 0.0, float32)
for l in 0..n_layer-1:
    let q = rope(reshape(linear(x, weight=q_w[l]), [B, T, H, hd]), offset=T_past)
    let k = rope(reshape(linear(x, weight=k_w[l]), [B, T, H, hd]), offset=T_past)
    let v = reshape(linear(x, weight=v_w[l]), [B, T, H, hv])
    let k_all = concat([past_keys[l], k], axis=1) if past_keys exists else k
    let v_all = concat([past_values[l], v], axis=1) if past_values exists else v
    new_keys[l] = k_all
    new_values[l] = v_all
    x = x + linear(reshape(flash_attention(q, k_all, v_all, causal=True), [B, T, H*hv]), weight=o_w[l])
let logits = linear(x, weight=head)
"""


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_values_with_their_own_head_width_decode_compiled(tmp_path, monkeypatch):
    """flash_attention allows values of another head width than the queries'; the compiled CPU
    decode step's written-out attention once reshaped its result with the queries' width (and fell
    back to eager with a warning)."""
    import warnings

    import snf
    from conftest import write_spec
    mod = snf.load(write_spec(tmp_path, VALUE_HEADS, "value_heads.snf"))
    torch.manual_seed(0)
    model = mod.Model().eval()
    prompt = torch.randint(0, 13, (1, 3))
    monkeypatch.setenv("SNF_COMPILE", "0")
    eager = model.generate(prompt, 5, temperature=0)
    monkeypatch.setenv("SNF_COMPILE", "1")
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback to eager
        assert torch.equal(model.generate(prompt, 5, temperature=0), eager)
