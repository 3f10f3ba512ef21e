"""`rope`, `flash_attention(softcap=)` and `flash_attention(sinks=)` against transformers' own functions
(issue 20).

Each RoPE variant is computed three ways on the same random [B, T, H, head_dim] tensor: by
transformers (its rotary-embedding module of the model family, which runs ROPE_INIT_FUNCTIONS and,
for "dynamic", dynamic_rope_update, then that family's apply_rotary_pos_emb), by the module snfc
generates for a one-line spec, and by the float64 NumPy reference. The generated module computes
as transformers does, step for step in float32; the reference differs from both only by float32's
rounding of the frequencies (checked on the frequencies themselves too).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from snf.compiler import analyze, generate_source
from snf.interpret import interpret
from snf.ops.attention import np_rope_frequencies
from snf.source import Source
from test_kv_cache import _state

transformers = pytest.importorskip("transformers")
from transformers import GPTNeoXConfig, LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward  # noqa: E402
from transformers.models.gpt_oss import modeling_gpt_oss as gpt_oss  # noqa: E402
from transformers.models.gpt_neox import modeling_gpt_neox as neox  # noqa: E402
from transformers.models.gptj import modeling_gptj as gptj  # noqa: E402
from transformers.models.llama import modeling_llama as llama  # noqa: E402

H, HD = 4, 16

# name -> (transformers' rope_parameters (beside rope_theta), max_position_embeddings, the spec's arguments)
LLAMA = {
    "default": ({"rope_type": "default"}, 64, ""),
    "linear": ({"rope_type": "linear", "factor": 2.5}, 64, 'scaling="linear", factor=2.5'),
    "dynamic": ({"rope_type": "dynamic", "factor": 4.0}, 16,
                'scaling="dynamic", factor=4.0, original_max_position=16'),
    "llama3": ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64}, 256,
               'scaling="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=64'),
    "yarn": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}, 128,
             'scaling="yarn", factor=4.0, original_max_position=32'),
    "yarn (betas, mscale, no truncation)": (
        {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16, "beta_fast": 16.0,
         "beta_slow": 2.0, "mscale": 0.707, "mscale_all_dim": 1.0, "truncate": False}, 128,
        'scaling="yarn", factor=8.0, original_max_position=16, beta_fast=16.0, beta_slow=2.0, mscale=0.707, '
        'mscale_all_dim=1.0, truncate=False'),
    "yarn (attention_factor)": (
        {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32, "attention_factor": 1.25}, 64,
        'scaling="yarn", factor=2.0, original_max_position=32, attention_factor=1.25'),
}
# (offset, T): within the trained length, and (for "dynamic") past it, from the start and after a cache
POSITIONS = [(0, 9), (5, 20), (30, 3)]
BASE = 500.0
WORST: dict[str, float] = {}  # variant -> the largest |generated - transformers| seen


def _build(text: str):
    """The checked model, the generated Model class and its source, of a spec's text."""
    res = analyze(Source.from_text("spec.snf", text))
    assert res.ok, [d.message for d in res.diagnostics]
    ns: dict = {}
    source = generate_source(res)
    exec(compile(source, "<spec>", "exec"), ns)
    return res.model, ns["Model"], source


def _module(args: str, base: float = BASE):
    text = (f"param:\n  P : int = 0\ninput:\n  x : Tensor([B, T, {H}, {HD}], float32)\n"
            f"output:\n  y : Tensor([B, T, {H}, {HD}], float32)\n"
            f"let y = rope(x, offset=P, base={base}{', ' + args if args else ''})\n")
    return _build(text)[:2]


def _ours(args: str, x: torch.Tensor, offset: int, base: float = BASE):
    model, Model = _module(args, base)
    got = Model(P=offset)(x=x).detach()
    ref = interpret(model, {}, {"x": x.double().numpy()}, config={"P": offset})["y"]
    return got, ref


def _record(name: str, got: torch.Tensor, want: torch.Tensor) -> float:
    delta = (got - want).abs().max().item()
    WORST[name] = max(WORST.get(name, 0.0), delta)
    return delta


def _spec_kwargs(params: dict) -> dict:
    names = {"original_max_position_embeddings": "original_max_position"}
    return {names.get(k, k): v for k, v in params.items() if k != "rope_type"}


@pytest.mark.parametrize("offset,t", POSITIONS)
@pytest.mark.parametrize("name", LLAMA)
def test_rope_scaling_equals_transformers_llama(name, offset, t):
    params, max_pos, args = LLAMA[name]
    config = LlamaConfig(hidden_size=H * HD, num_attention_heads=H, head_dim=HD, max_position_embeddings=max_pos,
                         rope_parameters={**params, "rope_theta": BASE})
    torch.manual_seed(offset * 31 + t)
    x = torch.randn(2, t, H, HD)
    rotary = llama.LlamaRotaryEmbedding(config)
    cos, sin = rotary(x, torch.arange(offset, offset + t)[None])
    want, _ = llama.apply_rotary_pos_emb(x, x, cos, sin, unsqueeze_dim=2)  # [B, T, H, hd]: heads at axis 2
    got, ref = _ours(args, x, offset)
    assert _record(name, got, want) <= 1e-6
    assert np.abs(ref - want.double().numpy()).max() <= 1e-5  # float32's rounding of transformers' frequencies
    # the frequencies and the scale of cos and sin, as transformers computes them for this length
    kind = params["rope_type"]
    seq = offset + t
    if kind == "default":
        inv, scale = rotary.inv_freq, rotary.attention_scaling
    else:
        inv, scale = ROPE_INIT_FUNCTIONS[kind](config, "cpu", seq_len=torch.tensor(seq) if seq > max_pos else None)
    kwargs = _spec_kwargs(params)
    if kind == "dynamic":  # transformers' original length for "dynamic" is max_position_embeddings
        kwargs["original_max_position"] = max_pos
    mine, my_scale = np_rope_frequencies(HD, BASE, seq, "none" if kind == "default" else kind, **kwargs)
    np.testing.assert_allclose(mine, inv.double().numpy(), rtol=1e-6)
    assert abs(my_scale - scale) <= 1e-12


@pytest.mark.parametrize("offset,t", POSITIONS)
def test_partial_interleaved_rope_equals_transformers_gptj(offset, t):
    """GPT-J (and CodeGen): the first rotary_dim dims rotate in adjacent pairs (rotate_every_two)."""
    rotary_dim = 8
    torch.manual_seed(t)
    x = torch.randn(2, t, H, HD)
    table = gptj.create_sinusoidal_positions(64, rotary_dim)  # transformers' own base, 10000
    sin, cos = torch.split(table[offset:offset + t][None], rotary_dim // 2, dim=-1)
    want = torch.cat([gptj.apply_rotary_pos_emb(x[..., :rotary_dim], sin, cos), x[..., rotary_dim:]], dim=-1)
    got, ref = _ours(f"rotary_dim={rotary_dim}, interleaved=True", x, offset, base=10000.0)
    assert _record("gptj partial interleaved", got, want) <= 1e-6
    assert np.abs(ref - want.double().numpy()).max() <= 1e-5


@pytest.mark.parametrize("offset,t", POSITIONS)
@pytest.mark.parametrize("scaling", ["default", "linear"])
def test_partial_rope_equals_transformers_gpt_neox(scaling, offset, t):
    """GPT-NeoX (and Phi): the first partial_rotary_factor * head_dim dims rotate (rotate_half), the rest pass."""
    params = {"rope_type": "linear", "factor": 2.0} if scaling == "linear" else {"rope_type": "default"}
    config = GPTNeoXConfig(hidden_size=H * HD, num_attention_heads=H, max_position_embeddings=64,
                           rope_parameters={**params, "rope_theta": BASE, "partial_rotary_factor": 0.25})
    torch.manual_seed(t + 7)
    x = torch.randn(2, t, H, HD)
    cos, sin = neox.GPTNeoXRotaryEmbedding(config)(x, torch.arange(offset, offset + t)[None])
    want, _ = neox.apply_rotary_pos_emb(x, x, cos, sin, unsqueeze_dim=2)
    args = "rotary_dim=4" + (', scaling="linear", factor=2.0' if scaling == "linear" else "")
    got, ref = _ours(args, x, offset)
    assert _record(f"gpt_neox partial ({scaling})", got, want) <= 1e-6
    assert np.abs(ref - want.double().numpy()).max() <= 1e-5


class _Gemma2Attention(torch.nn.Module):
    """What transformers' eager_attention_forward reads of its module."""

    def __init__(self, groups: int):
        super().__init__()
        self.num_key_value_groups, self.head_dim, self.training = groups, HD, False


@pytest.mark.parametrize("window", [None, 3], ids=["global", "sliding window"])
def test_softcapped_attention_equals_transformers_gemma2(window):
    """Gemma 2's attention: the scaled scores capped at softcap * tanh(s / softcap), then masked."""
    kvh, t, scale, cap = 2, 7, 0.3, 2.5
    text = (f"param:\n  W : int = {window or 1}\ninput:\n  q : Tensor([B, T, {H}, {HD}], float32)\n"
            f"  k : Tensor([B, T, {kvh}, {HD}], float32)\n  v : Tensor([B, T, {kvh}, {HD}], float32)\n"
            f"output:\n  y : Tensor([B, T, {H}, {HD}], float32)\n"
            f"let y = flash_attention(q, k, v, causal=True, scale={scale}, softcap={cap}"
            f"{', window=W' if window else ''})\n")
    model, Model, source = _build(text)
    torch.manual_seed(0)
    q, k, v = torch.randn(2, t, H, HD) * 3, torch.randn(2, t, kvh, HD), torch.randn(2, t, kvh, HD)
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    allowed = (j <= i) & (j > i - window) if window else j <= i
    additive = torch.zeros(t, t).masked_fill(~allowed, torch.finfo(torch.float32).min)[None, None]
    want, _ = eager_attention_forward(_Gemma2Attention(H // kvh), q.transpose(1, 2), k.transpose(1, 2),
                                      v.transpose(1, 2), additive, scaling=scale, softcap=cap)
    got = Model()(q=q, k=k, v=v).detach()
    assert _record(f"gemma2 softcap ({'window' if window else 'global'})", got, want) <= 1e-6
    ref = interpret(model, {}, {"q": q.double().numpy(), "k": k.double().numpy(), "v": v.double().numpy()})["y"]
    assert np.abs(ref - want.double().numpy()).max() <= 1e-5
    assert "_softcapped_attention(" in source and "def _attention" not in source  # the written-out path only


@pytest.mark.parametrize("window", [None, 3], ids=["full", "sliding window"])
def test_sink_attention_equals_transformers_gpt_oss(window):
    """gpt-oss's attention: a learned logit per query head joins each softmax, and its share is
    dropped; grouped heads, and keys longer than the queries (a cache of 4)."""
    kvh, t, past = 2, 5, 4
    text = (f"param:\n  W : int = {window or 1}\ninput:\n  q : Tensor([B, T, {H}, {HD}], float32)\n"
            f"  k : Tensor([B, N, {kvh}, {HD}], float32)\n  v : Tensor([B, N, {kvh}, {HD}], float32)\n"
            f"  s : Tensor([{H}], float32)\noutput:\n  y : Tensor([B, T, {H}, {HD}], float32)\n"
            f"let y = flash_attention(q, k, v, causal=True, sinks=s{', window=W' if window else ''})\n")
    model, Model, source = _build(text)
    torch.manual_seed(0)
    q, k, v = torch.randn(2, t, H, HD) * 2, torch.randn(2, past + t, kvh, HD), torch.randn(2, past + t, kvh, HD)
    sinks = torch.randn(H) * 2
    i, j = torch.arange(t)[:, None] + past, torch.arange(past + t)[None, :]
    allowed = (j <= i) & (j > i - window) if window else j <= i
    additive = torch.zeros(t, past + t).masked_fill(~allowed, torch.finfo(torch.float32).min)[None, None]
    module = _Gemma2Attention(H // kvh)
    module.sinks = sinks
    want, _ = gpt_oss.eager_attention_forward(module, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              additive, scaling=HD ** -0.5)
    got = Model()(q=q, k=k, v=v, s=sinks).detach()
    assert _record(f"gpt_oss sinks ({'window' if window else 'full'})", got, want) <= 1e-6
    feeds = {"q": q, "k": k, "v": v, "s": sinks}
    ref = interpret(model, {}, {n: x.double().numpy() for n, x in feeds.items()})["y"]
    assert np.abs(ref - want.double().numpy()).max() <= 1e-5
    assert "_sink_attention(" in source and "scaled_dot_product_attention" not in source  # written out


def _capped_decoder(tmp_path, rope: str):
    """specs/mistral.snf with Gemma 2's soft-capped attention and final logits, and RoPE with `rope`."""
    from pathlib import Path

    from conftest import fresh_module, snfc, write_spec
    text = (Path(__file__).resolve().parents[1] / "specs" / "mistral.snf").read_text(encoding="utf-8")
    text = text.replace("  sliding_window : int = 4096", "  sliding_window : int = 4096\n  attn_softcap : float = 2.0")
    text = text.replace("window=sliding_window)", "window=sliding_window, softcap=attn_softcap)")
    text = text.replace("base=rope_base)", f"base=rope_base, {rope})")
    text = text.replace("let logits = linear(rms_norm(x, weight=norm_weight, eps=norm_eps), weight=lm_head_weight)",
                        "let logits = softcap(linear(rms_norm(x, weight=norm_weight, eps=norm_eps), "
                        "weight=lm_head_weight), 3.0)")
    assert text.count("softcap") == 4 and text.count(rope) == 2
    spec = write_spec(tmp_path, text, "capped.snf")
    code, _, err = snfc("compile", str(spec), "-o", str(tmp_path / "capped.py"))
    assert code == 0, err
    mod = fresh_module(tmp_path / "capped.py", f"capped_decoder_{abs(hash(rope))}")
    torch.manual_seed(0)
    model = mod.Model(vocab_size=50, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, mlp_hidden=48,
                      sliding_window=5).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def _preallocated(model, keys, values, filled: int):
    size = model.config.block_size
    buffers = [torch.zeros(keys.shape[:2] + (size,) + keys.shape[3:]) for _ in range(2)]
    for buffer, cache in zip(buffers, (keys, values)):
        buffer[:, :, :filled] = cache[:, :, :filled]
    return buffers


def test_softcap_and_yarn_partial_rope_decode_with_a_kv_cache(tmp_path, monkeypatch):
    """A cached forward (chunked, and into a preallocated cache) gives what a full forward gives, and
    greedy generate what recomputing the sequence gives, with soft-capped attention and logits, and
    YaRN-scaled partial RoPE."""
    monkeypatch.setenv("SNF_COMPILE", "0")
    model = _capped_decoder(tmp_path, 'scaling="yarn", factor=2.0, original_max_position=8, rotary_dim=4')
    idx = torch.randint(0, 50, (2, 14))
    with torch.no_grad():
        full = model(idx).logits
        keys = values = None
        pieces = []
        for lo, hi in ((0, 5), (5, 6), (6, 11), (11, 14)):
            out = model(idx[:, lo:hi], past_keys=keys, past_values=values)
            pieces.append(out.logits)
            keys, values = out.new_keys, out.new_values
        assert (torch.cat(pieces, dim=1) - full).abs().max().item() <= 1e-5
        assert full.abs().max().item() <= 3.0  # the capped logits
        buffers = _preallocated(model, keys, values, 11)
        static = model(idx[:, 11:], past_keys=buffers[0], past_values=buffers[1], use_cache=True,
                       decode=_state(model, torch.tensor(11)))  # a decode step of generate, into the buffers
        assert (static.logits - full[:, 11:]).abs().max().item() <= 1e-5
    prompt = idx[:, :4]
    seq = prompt
    with torch.no_grad():
        for _ in range(9):
            seq = torch.cat([seq, model(seq).logits[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(model.generate(prompt, 9, temperature=0), seq)


def test_dynamic_rope_decodes_as_transformers_does(tmp_path, monkeypatch):
    """Dynamic RoPE's base grows with the sequence, so (in transformers too) the cached keys keep the
    rotation of the call that made them, and a cached forward is not a full one. Each call takes the
    base of its own last position: the same with the cache position a 0-d tensor (a preallocated
    cache) as with an int, and generate is that, a token at a time."""
    monkeypatch.setenv("SNF_COMPILE", "0")
    model = _capped_decoder(tmp_path, 'scaling="dynamic", factor=2.0, original_max_position=8')
    idx = torch.randint(0, 50, (2, 12))
    with torch.no_grad():
        out = model(idx[:, :9])
        grown = model(idx[:, 9:], past_keys=out.new_keys, past_values=out.new_values)
        buffers = _preallocated(model, out.new_keys, out.new_values, 9)
        static = model(idx[:, 9:], past_keys=buffers[0], past_values=buffers[1], use_cache=True,
                       decode=_state(model, torch.tensor(9)))  # a decode step of generate, into the buffers
        assert (static.logits - grown.logits).abs().max().item() <= 1e-5
        assert (model(idx).logits[:, 9:] - grown.logits).abs().max().item() > 1e-3  # not a full forward
        prompt, keys, values = idx[:, :4], None, None
        seq, step = prompt, prompt
        for _ in range(8):
            out = model(step, past_keys=keys, past_values=values)
            keys, values = out.new_keys, out.new_values
            step = out.logits[:, -1:].argmax(-1)
            seq = torch.cat([seq, step], dim=1)
    assert torch.equal(model.generate(prompt, 8, temperature=0), seq)
