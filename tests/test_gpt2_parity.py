"""generated/nanogpt.py against transformers' GPT2LMHeadModel on the same (random) weights."""

from __future__ import annotations

import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")

import generated.nanogpt as ng  # noqa: E402
from snf.interop import CheckpointError, CheckpointWarning, load_state_dict, spec_state  # noqa: E402

CONFIGS = [
    # odd sizes: 3 heads of 16, a prime vocabulary, T shorter than the context
    dict(n_layer=2, n_head=3, n_embd=48, vocab_size=97, block_size=16, T=11),
    dict(n_layer=1, n_head=1, n_embd=16, vocab_size=50, block_size=8, T=8),
    dict(n_layer=3, n_head=4, n_embd=32, vocab_size=64, block_size=12, T=5),
]


def make_hf(cfg: dict, seed: int = 0):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    hc = GPT2Config(vocab_size=cfg["vocab_size"], n_positions=cfg["block_size"], n_embd=cfg["n_embd"],
                    n_layer=cfg["n_layer"], n_head=cfg["n_head"], resid_pdrop=0.0, embd_pdrop=0.0,
                    attn_pdrop=0.0, bos_token_id=None, eos_token_id=None)
    hf = GPT2LMHeadModel(hc).eval()
    with torch.no_grad():  # random everything, so biases and norm weights matter too
        for name, p in hf.named_parameters():
            centre = 1.0 if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")) else 0.0
            p.copy_(centre + torch.randn_like(p) * 0.2)
    return hf


def make_snf(cfg: dict):
    return ng.Model(vocab_size=cfg["vocab_size"], block_size=cfg["block_size"], n_layer=cfg["n_layer"],
                    n_head=cfg["n_head"], n_embd=cfg["n_embd"], gelu_tanh=True).eval()  # GPT-2's GELU


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"L{c['n_layer']}H{c['n_head']}D{c['n_embd']}V{c['vocab_size']}")
def test_logits_match_gpt2(cfg):
    hf = make_hf(cfg)
    model = make_snf(cfg)
    load_state_dict(model, hf.state_dict(), "hf")
    idx = torch.randint(0, cfg["vocab_size"], (2, cfg["T"]), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = hf(idx).logits
        got = model(idx).logits
    assert got.shape == want.shape == (2, cfg["T"], cfg["vocab_size"])
    assert want.abs().max() > 0.5  # a non-trivial comparison
    assert (got - want).abs().max().item() <= 1e-5


def test_the_head_is_the_token_embedding_as_in_nanogpt_and_gpt2():
    """nanogpt.snf ties the head to the token embedding: one parameter, no `lm_head` module."""
    cfg = CONFIGS[1]
    hf = make_hf(cfg)
    model = make_snf(cfg)
    load_state_dict(model, hf.state_dict(), "hf")
    assert not hasattr(model, "lm_head")
    assert torch.equal(model.token_embedding.weight, hf.state_dict()["lm_head.weight"])


# ------------------------------------------------------------------------ checkpoint errors

def _snapshot(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def _unchanged(model, before) -> bool:
    after = model.state_dict()
    return after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)


@pytest.fixture
def pair():
    cfg = CONFIGS[0]
    return make_hf(cfg), make_snf(cfg)


def test_wrong_shape_is_listed_and_nothing_is_copied(pair):
    hf, model = pair
    sd = dict(hf.state_dict())
    sd["transformer.h.1.mlp.c_fc.bias"] = torch.zeros(7)
    before = _snapshot(model)
    with pytest.raises(CheckpointError) as info:
        load_state_dict(model, sd, "hf")
    msg = str(info.value)
    assert "transformer.h.1.mlp.c_fc.bias (for layers.1.mlp_fc.bias): expected shape [192], got [7]" in msg
    assert info.value.mismatched == [("transformer.h.1.mlp.c_fc.bias (for layers.1.mlp_fc.bias)", (192,), (7,))]
    assert _unchanged(model, before)


def test_missing_key_is_listed_and_nothing_is_copied(pair):
    hf, model = pair
    sd = dict(hf.state_dict())
    del sd["transformer.h.0.ln_1.weight"]
    before = _snapshot(model)
    with pytest.raises(CheckpointError) as info:
        load_state_dict(model, sd, "hf")
    assert "missing keys: transformer.h.0.ln_1.weight" in str(info.value)
    assert _unchanged(model, before)


def test_extra_key_is_listed_and_nothing_is_copied(pair):
    hf, model = pair
    sd = dict(hf.state_dict())
    sd["transformer.h.0.mlp.extra.weight"] = torch.zeros(3)
    before = _snapshot(model)
    with pytest.raises(CheckpointError) as info:
        load_state_dict(model, sd, "hf")
    assert "unexpected keys: transformer.h.0.mlp.extra.weight" in str(info.value)
    assert _unchanged(model, before)


def test_all_problems_are_reported_together(pair):
    hf, model = pair
    sd = dict(hf.state_dict())
    del sd["transformer.ln_f.bias"]
    sd["surplus"] = torch.zeros(1)
    sd["transformer.wpe.weight"] = torch.zeros(3, 3)
    with pytest.raises(CheckpointError) as info:
        load_state_dict(model, sd, "hf")
    e = info.value
    assert "transformer.ln_f.bias" in e.missing and e.unexpected == ["surplus"]
    assert [m[0] for m in e.mismatched] == ["transformer.wpe.weight (for position_embedding)"]


def test_a_fused_part_of_the_wrong_shape_names_its_rows(pair):
    """A source split three ways (and transposed) is checked before the transforms: it is named
    once, with the shape it must have and the first parameter it fills."""
    hf, model = pair
    sd = dict(hf.state_dict())
    sd["transformer.h.0.attn.c_attn.weight"] = torch.zeros(48, 3 * 40)
    with pytest.raises(CheckpointError) as info:
        load_state_dict(model, sd, "hf")
    assert info.value.mismatched == [("transformer.h.0.attn.c_attn.weight (for layers.0.attn_q.weight)",
                                      (48, 144), (48, 120))]


def test_strict_false_keeps_what_the_checkpoint_lacks_and_says_so(pair):
    hf, model = pair
    sd = dict(hf.state_dict())
    del sd["transformer.h.0.ln_1.weight"]
    sd["surplus"] = torch.zeros(1)
    before = _snapshot(model)
    with pytest.warns(CheckpointWarning) as record:
        load_state_dict(model, sd, "hf", strict=False)
    message = str(record[0].message)
    assert "left as they were: layers.0.ln1.weight;" in message and "unused checkpoint keys: surplus" in message
    after = model.state_dict()
    assert torch.equal(after["layers.0.ln1.weight"], before["layers.0.ln1.weight"])  # its initial value
    assert torch.equal(after["layers.1.ln1.weight"], sd["transformer.h.1.ln_1.weight"])  # the rest loaded
    del sd["transformer.h.1.attn.c_attn.weight"]  # q, k and v of layer 1: one fused tensor of GPT-2's
    sd["transformer.h.1.ln_1.weight"] = torch.zeros(48)
    before = _snapshot(model)
    with pytest.warns(CheckpointWarning, match=r"layers.1.attn_q.weight, layers.1.attn_k.weight"):
        load_state_dict(model, sd, "hf", strict=False)
    after = model.state_dict()
    assert torch.equal(after["layers.1.attn_q.weight"], before["layers.1.attn_q.weight"])
    assert torch.equal(after["layers.1.ln1.weight"], torch.zeros(48))
    sd["transformer.wpe.weight"] = torch.zeros(3, 3)  # a wrong shape is an error even so
    with pytest.raises(CheckpointError, match="position_embedding"):
        load_state_dict(model, sd, "hf", strict=False)


def test_strict_false_with_the_spec_names(pair):
    _, model = pair
    sd = {k: torch.zeros_like(v) for k, v in spec_state(model).items()}
    kept = sd.pop("ln1_weight")
    sd["extra"] = kept
    with pytest.warns(CheckpointWarning, match=r"left as they were: layers.0.ln1.weight, layers.1.ln1.weight; "
                                               r"unused checkpoint keys: extra"):
        load_state_dict(model, sd, "spec", strict=False)
    after = spec_state(model)
    assert torch.equal(after["attn_q_weight"], sd["attn_q_weight"])
    assert torch.equal(after["ln1_weight"], torch.ones_like(kept))  # as initialised


def test_a_buffer_the_config_decides_needs_no_source(tmp_path):
    """The issue's GQA workaround: a ones tensor kept in a buffer made loading fail with a missing key."""
    import snf
    spec = tmp_path / "ones_buffer.snf"
    spec.write_text("param:\n  D : int = 4\ninput:\n  x : Tensor([B, D], float32)\nparameter:\n"
                    "  w : Tensor([D, D], float32)\nbuffer:\n  ones_b : Tensor([D], float32) = ones\n"
                    "  table : Tensor([6, D], float32) = sinusoidal\n  noise : Tensor([D], float32) = normal\n"
                    "output:\n  y : Tensor([B, D], float32)\n"
                    "let y = linear(x, weight=w) * ones_b + table[0, :] + noise\n"
                    "checkpoint hf:\n  w <- \"w\"\n  noise <- \"noise\"\n", encoding="utf-8")
    mod = snf.load(spec)
    assert mod.RECOMPUTED_BUFFERS == ("ones_b", "table")
    model = mod.Model()
    w, noise = torch.randn(4, 4), torch.randn(4)
    load_state_dict(model, {"w": w, "noise": noise}, "hf")  # strict, and nothing about ones_b or table
    assert torch.equal(spec_state(model)["w"], w) and torch.equal(model.ones_b, torch.ones(4))
    with pytest.raises(CheckpointError, match="missing keys: noise"):  # a random buffer is not recomputed
        load_state_dict(model, {"w": w}, "hf")


def test_unknown_format_is_refused(pair):
    hf, model = pair
    with pytest.raises(ValueError, match="no checkpoint format 'gguf'"):
        load_state_dict(model, hf.state_dict(), "gguf")


# ------------------------------------------------------------------------ the spec's own names

def test_state_dict_and_named_parameters_tell_one_story():
    model = make_snf(CONFIGS[0])
    assert list(model.state_dict()) == [n for n, _ in model.named_parameters()]  # no hidden renaming
    keys = set(model.state_dict())
    assert {"layers.0.attn_q.weight", "layers.0.attn_q.bias", "layers.1.ln1.weight",
            "token_embedding.weight", "position_embedding"} <= keys
    # where each spec name lives: q, k and v each an nn.Linear (GPT-2's fused c_attn split on loading)
    table = sys.modules[type(model).__module__].spec_parameters(model.config)
    assert table["attn_k_weight"]._asdict() == dict(key="layers.{l}.attn_k.weight", shape=(48, 48),
                                                    dtype=torch.float32, rows=None, loop="layers", layers=2)
    assert table["ln_f_bias"]._asdict() == dict(key="ln_f.bias", shape=(48,), dtype=torch.float32, rows=None,
                                                loop=None, layers=None)
    assert isinstance(model.layers[0].attn_k, torch.nn.Linear)
    spec = spec_state(model)
    assert spec["attn_k_weight"].shape == (2, 48, 48)
    assert torch.equal(spec["attn_k_weight"][1], model.layers[1].attn_k.weight)


def test_state_dict_round_trip():
    cfg = CONFIGS[0]
    src = make_snf(cfg)
    load_state_dict(src, make_hf(cfg, seed=3).state_dict(), "hf")
    sd = src.state_dict()
    dst = make_snf(cfg)
    dst.load_state_dict(sd)  # plain torch loading
    assert _unchanged(dst, {k: v.clone() for k, v in sd.items()})
    other = make_snf(cfg)
    load_state_dict(other, spec_state(src), "spec")  # through the spec's names
    idx = torch.randint(0, cfg["vocab_size"], (1, 6))
    with torch.no_grad():
        assert torch.equal(src(idx).logits, dst(idx).logits) and torch.equal(src(idx).logits, other(idx).logits)
    assert torch.equal(dst.layers[1].attn_k.weight, spec_state(src)["attn_k_weight"][1])


def test_spec_load_reports_wrong_names():
    model = make_snf(CONFIGS[1])
    sd = spec_state(model)
    sd["attn_qkv_weight"] = sd.pop("attn_q_weight")
    sd["ln1_bias"] = sd["ln1_bias"][:0]  # no layers
    before = _snapshot(model)
    with pytest.raises(CheckpointError) as info:
        load_state_dict(model, sd, "spec")
    assert info.value.missing == ["attn_q_weight"]
    assert info.value.mismatched == [("ln1_bias", (1, 16), (0, 16))]
    assert info.value.unexpected == ["attn_qkv_weight"]
    assert _unchanged(model, before)


def test_keys_the_spec_declares_ignorable_are_ignored_per_layer():
    # older GPT-2 checkpoints carry causal-mask buffers; the spec lists them as `_ <- "...{l}..."`
    cfg = CONFIGS[0]
    sd = dict(make_hf(cfg).state_dict())
    sd["transformer.h.0.attn.bias"] = torch.ones(1)
    sd["transformer.h.1.attn.masked_bias"] = torch.ones(1)
    load_state_dict(make_snf(cfg), sd, "hf")
    sd["transformer.h.0.attn.extra"] = torch.ones(1)
    with pytest.raises(CheckpointError) as info:
        load_state_dict(make_snf(cfg), sd, "hf")
    assert info.value.unexpected == ["transformer.h.0.attn.extra"]
