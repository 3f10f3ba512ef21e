"""The passes' plans, as the generated module runs them (snf/passes/ -> snf/codegen/): caches found by
data flow and built only when asked for, one name per layer loop, generate's logits and when it is
refused, what `snfc check -v` says of them, where a block takes its dtype and device; and standard
tooling (weight decay by name, peft, torchao) on a generated model without wrappers. Issue 9's
reproducers are among them; those that need torch.compile live with the other compiled tests:
- (1) gpt_decoder trains compiled with its own gradient_checkpointing=True:
  tests/property/test_session.py (every spec trains compiled whole in a session), and
  tests/test_compile.py::test_only_compile_failures_fall_back;
- (5) a Config field named `head_dim` keeps its name: tests/test_hygiene.py.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import snf
from conftest import REPO, write_spec
from snf.compiler import analyze, lower
from snf.interop import load_state_dict, spec_state
from snf.interpret import interpret
from snf.passes import plan
from snf.source import Source

NANOGPT = (REPO / "specs" / "nanogpt.snf").read_text(encoding="utf-8")
SMALL = dict(vocab_size=31, block_size=16, n_layer=2, n_head=2, n_embd=16)


def load(tmp_path: Path, text: str, name: str = "spec"):
    return snf.load(write_spec(tmp_path, text, f"{name}.snf"))


def plans_of(text: str):
    result = analyze(Source.from_text("spec.snf", text))
    assert result.ok, result.diagnostics
    return plan(lower(result.model))


# ------------------------------------------------------------------ (2) the cache's length in code

LENGTH_DEPENDENT = NANOGPT.replace(
    "    let k_full = concat([past_keys[l], k_head], axis=1) if past_keys exists else k_head     # [B, T_total, H, head_dim]",
    "    let k_full = reshape(concat([past_keys[l], k_head], axis=1), [B, T_past + T, H, head_dim]) "
    "if past_keys exists else k_head")


def test_code_that_reads_the_cache_length_gets_no_fixed_shape_path(tmp_path):
    """`reshape(k_all, [B, T_past + T, ...])` reads the grown cache's length, which a preallocated
    buffer does not have: the cache plan keeps such a spec on the growing path, and generate works."""
    assert LENGTH_DEPENDENT != NANOGPT
    caches = plans_of(LENGTH_DEPENDENT).caches
    assert [c.input for c in caches.caches] == ["past_keys", "past_values"]
    assert caches.preallocated is None and "computed from a grown cache" in caches.reason
    assert plans_of(NANOGPT).caches.preallocated is not None  # the plain spec keeps it
    mod = load(tmp_path, LENGTH_DEPENDENT, "length_dependent")
    torch.manual_seed(0)
    model = mod.Model(**SMALL).eval()
    prompt = torch.randint(0, 31, (1, 3))
    out = model.generate(prompt, 5, temperature=0)  # crashed: shape '[1, 5, 2, 4]' is invalid for input of size 128
    seq = prompt
    with torch.no_grad():
        for _ in range(5):
            seq = torch.cat([seq, model(seq).logits[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(out, seq)


# ------------------------------------------------------------------ (3) a loop value the Block needs

FULL_IN_LOOP = """\
param:
  n_layer : int = 2
  D : int = 4
input:
  x : Tensor([B, T, D], float32)
parameter:
  w : Tensor([n_layer, D, D], float32)
output:
  y : Tensor([B, T, D], float32)
  ys : Tensor([n_layer, B, T, D], float32)
let h = x
let ys = full([n_layer, B, T, D], 0.0, float32)
for l in 0..n_layer-1:
    let a = linear(h, weight=w[l])
    ys[l] = a
    let ones = full([B, T, D], 1.0, float32)
    h = a * ones + h
let y = h
"""


def test_a_full_inside_a_loop_after_a_per_layer_write(tmp_path):
    """`full` in a loop after `ys[l] = a` generated a Block that read `ys`, which it is not given:
    NameError. The Block takes its device from a tensor it is given."""
    mod = load(tmp_path, FULL_IN_LOOP, "full_in_loop")
    model = mod.Model()
    x = torch.randn(2, 3, 4)
    out = model(x)
    result = analyze(Source.from_text("full_in_loop.snf", FULL_IN_LOOP))
    params = {k: v.detach().double().numpy() for k, v in spec_state(model).items()}
    want = interpret(result.model, params, {"x": x.double().numpy()})
    np.testing.assert_allclose(out.y.detach().numpy(), want["y"], rtol=1e-5, atol=1e-6)  # float32 vs float64
    np.testing.assert_allclose(out.ys.detach().numpy(), want["ys"], rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ (4) two layer loops

TWO_LOOPS = """\
param:
  n_enc : int = 2
  n_dec : int = 3
  D : int = 4
input:
  x : Tensor([B, D], float32)
parameter:
  enc_weight : Tensor([n_enc, D, D], float32)
  dec_weight : Tensor([n_dec, D, D], float32)
  dec_bias : Tensor([n_dec, D], float32)
output:
  y : Tensor([B, D], float32)
let h = x
for i in 0..n_enc-1:
    h = tanh(linear(h, weight=enc_weight[i]))
for j in 0..n_dec-1:
    h = h + linear(h, weight=dec_weight[j], bias=dec_bias[j])
let y = h

checkpoint ext:
  enc_weight[l] <- "encoder.{l}.w"
  dec_weight[l] <- "decoder.{l}.w"
  dec_bias[l] <- "decoder.{l}.b"
"""


def test_two_layer_loops_have_one_name_each_everywhere(tmp_path):
    """The second loop's Blocks are `layers2`; the state-dict keys, `spec_parameters` and interop
    all say so (they said `layers.{l}` for both loops)."""
    mod = load(tmp_path, TWO_LOOPS, "two_loops")
    model = mod.Model()
    table = mod.spec_parameters(model.config)
    assert table["enc_weight"]._asdict() == dict(key="layers.{l}.enc.weight", shape=(4, 4), dtype=torch.float32,
                                                 rows=None, loop="layers", layers=2)
    assert table["dec_weight"]._asdict() == dict(key="layers2.{l}.dec.weight", shape=(4, 4), dtype=torch.float32,
                                                 rows=None, loop="layers2", layers=3)
    assert set(model.state_dict()) == {f"layers.{i}.enc.weight" for i in range(2)} | \
        {f"layers2.{i}.dec.{p}" for i in range(3) for p in ("weight", "bias")}
    assert spec_state(model)["dec_weight"].shape == (3, 4, 4)
    foreign = {f"encoder.{i}.w": torch.randn(4, 4) for i in range(2)}
    foreign |= {f"decoder.{i}.w": torch.randn(4, 4) for i in range(3)} | {f"decoder.{i}.b": torch.randn(4)
                                                                           for i in range(3)}
    load_state_dict(model, foreign, "ext")
    assert torch.equal(model.layers2[2].dec.bias, foreign["decoder.2.b"])
    assert torch.equal(spec_state(model)["enc_weight"][1], foreign["encoder.1.w"])


# ------------------------------------------------------------------ (6) facts from data flow, not names

RENAMED_CACHE = re.sub(r"\bpast_keys\b", "k_cache", re.sub(r"\bpast_values\b", "v_cache",
                       re.sub(r"\bnew_keys\b", "k_out", re.sub(r"\bnew_values\b", "v_out", NANOGPT))))


def test_caches_are_found_by_data_flow_not_by_name(tmp_path):
    caches = plans_of(RENAMED_CACHE).caches
    assert [(c.input, c.output) for c in caches.caches] == [("k_cache", "k_out"), ("v_cache", "v_out")]
    assert caches.preallocated is not None
    mod = load(tmp_path, RENAMED_CACHE, "renamed_cache")
    torch.manual_seed(0)
    model = mod.Model(**SMALL).eval()
    prompt = torch.randint(0, 31, (2, 4))
    out = model.generate(prompt, 4, temperature=0)
    seq = prompt
    with torch.no_grad():
        for _ in range(4):
            seq = torch.cat([seq, model(seq).logits[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(out, seq)
    # and names alone make no cache: `past_x` / `new_x` that are not fed back
    fake = """\
input:
  x : Tensor([B, T], float32)
  past_x : Tensor([B, T], float32)?
output:
  new_x : Tensor([B, T], float32)
let new_x = x + past_x if past_x exists else x
"""
    assert plans_of(fake).caches.caches == ()


# ------------------------------------------------------------------ (7) no cache in training

def test_a_training_forward_builds_no_cache():
    import generated.nanogpt as ng
    from torch.utils._python_dispatch import TorchDispatchMode

    class Calls(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    model = ng.Model(**SMALL)
    idx = torch.randint(0, 31, (2, 8))
    for training, use_cache in ((True, None), (False, False)):
        model.train(training)
        with Calls() as calls:
            out = model(idx, use_cache=use_cache)
        assert out.new_keys is None and out.new_values is None
        assert not [op for op in calls.ops if "full" in op or "copy" in op], calls.ops  # no cache allocated or filled
    model.train()
    assert model(idx, use_cache=True).new_keys.shape == (2, 2, 8, 2, 8)
    model.eval()
    assert model(idx).new_keys.shape == (2, 2, 8, 2, 8)  # eval: the caches by default


# ------------------------------------------------------------------ standard tooling, no wrappers

def test_linear_layers_are_nn_linear_and_named_for_weight_decay():
    import generated.gpt_decoder as gd
    model = gd.Model(vocab_size=31, block_size=16, n_layer=2, n_head=2, n_embd=16, mlp_hidden=24)
    linears = {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert linears == {f"layers.{i}.{m}" for i in range(2) for m in ("q", "k", "v", "o", "gate", "up", "down")}
    norms = {n for n, m in model.named_modules() if isinstance(m, torch.nn.RMSNorm)}
    assert norms == {"norm"} | {f"layers.{i}.{m}" for i in range(2) for m in ("attn_norm", "mlp_norm")}
    # minGPT's rule: decay the weights of linear layers, not norms, embeddings or biases
    decay = {f"{m}.weight" for m in linears}
    named = dict(model.named_parameters())
    assert decay < set(named) and all(named[n].dim() == 2 for n in decay)
    assert set(named) - decay == {"token_embedding.weight", "norm.weight"} | \
        {f"layers.{i}.{m}.weight" for i in range(2) for m in ("attn_norm", "mlp_norm")}


def test_peft_lora_wraps_the_linear_layers():
    peft = pytest.importorskip("peft")
    import generated.nanogpt as ng
    torch.manual_seed(0)
    model = ng.Model(**SMALL).eval()
    idx = torch.randint(0, 31, (2, 8))
    with torch.no_grad():
        base = model(idx).logits
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["attn_q", "attn_k", "attn_v", "attn_proj", "mlp_fc",
                                                                 "mlp_proj"])
    lora = peft.get_peft_model(model, config)
    trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert len(trainable) == 2 * 6 * SMALL["n_layer"]  # A and B of 6 linear layers per block
    with torch.no_grad():
        assert (lora(idx).logits - base).abs().max() == 0  # LoRA's B starts at zero
    lora.train()
    loss = lora(idx).logits.square().mean()
    loss.backward()
    assert all(p.grad is not None for n, p in lora.named_parameters() if p.requires_grad)


def test_torchao_quantizes_the_linear_layers():
    torchao = pytest.importorskip("torchao")
    from torchao.quantization import Int8WeightOnlyConfig, quantize_
    import generated.nanogpt as ng
    torch.manual_seed(0)
    model = ng.Model(**SMALL).eval()
    idx = torch.randint(0, 31, (2, 8))
    with torch.no_grad():
        base = model(idx).logits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_(model, Int8WeightOnlyConfig())
    weight = model.layers[0].attn_q.weight
    assert type(weight).__name__ != "Parameter" or type(weight.data).__name__ != "Tensor"  # a quantized tensor
    assert "Int8" in type(weight).__name__ or "Affine" in type(weight).__name__, type(weight)
    with torch.no_grad():
        quantized = model(idx).logits
    assert (quantized - base).abs().max() < 0.05 * base.abs().max()  # int8 weights: close, not equal


def test_check_v_says_what_the_cache_plan_decided(tmp_path):
    from conftest import snfc
    code, out, err = snfc("check", "-v", str(write_spec(tmp_path, LENGTH_DEPENDENT, "lendep.snf")),
                          "specs/gpt_decoder.snf")
    err = out + err
    assert code == 0
    assert "note: `past_keys` is a KV cache: it grows along axis 2 (`T_past`) and comes back as the output " \
           "`new_keys`  [cache-plan]" in err
    assert "note: generate concatenates its caches (no preallocated buffers): `k_full` holds a value computed " \
           "from a grown cache, not the cache itself  [cache-plan]" in err
    assert "gpt_decoder.snf:31:3: note: generate decodes with preallocated caches of block_size slots" in err
    code, out, err = snfc("check", "specs/gpt_decoder.snf")
    assert "cache-plan" not in out + err  # notes only with -v


# ------------------------------------------------------------------ issue 18: found by the session property

DEAD_WRITE_INTO_A_CACHE_VALUE = """\
param:
  n_layer : int = 1
  D : int = 4
input:
  x : Tensor([B, T, D], float32)
  past : Tensor([n_layer, B, T_past, D], float32)?
output:
  y : Tensor([B, T, D], float32)
  new : Tensor([n_layer, B, T_past + T, D], float32)
let new = full([n_layer, B, T_past + T, D], 0.0, float32)
let y = x
for l in 0..n_layer-1:
    let k = concat([past[l], x], axis=1) if past exists else x
    new[l] = k
    let a = k * 2.0
    a[:, 0:1, :] = full([B, 1, D], 0.0, float32)
    let b = a + 1.0
    y = y + x
"""


def test_a_write_into_a_value_only_the_cache_defines_does_not_define_it(tmp_path):
    """`a` is computed from the cache's value only, so a training forward (no cache asked for) skips
    it; the write `a[...] = ...` did not make it exist, so `b`, which reads it, must be skipped too.
    The session property found this: it was an UnboundLocalError in training with a cache given."""
    mod = load(tmp_path, DEAD_WRITE_INTO_A_CACHE_VALUE, "dead_write")
    model = mod.Model().train()
    x, past = torch.randn(2, 3, 4), torch.randn(1, 2, 5, 4)
    out = model(x, past=past)
    assert out.new is None and torch.equal(out.y, 2 * x)
    out = model.eval()(x, past=past)
    assert out.new.shape == (1, 2, 8, 4) and torch.equal(out.new[0, :, :5], past[0])


CARRIED_VALUE_OF_A_CACHE = """\
param:
  n_layer : int = 2
  D : int = 4
  flag : bool = True
input:
  x : Tensor([B, T, D], float32)
  past : Tensor([n_layer, B, T_past, D], float32)?
output:
  y : Tensor([B, T, D], float32)
  new : Tensor([n_layer, B, T_past + T, D], float32)
let new = full([n_layer, B, T_past + T, D], 0.0, float32)
let v = new * 2.0
let y = x
for l in 0..n_layer-1:
    let k = concat([past[l], x], axis=1) if past exists else x
    new[l] = k
    v = v + 1.0 if flag
    y = y + x
"""


def test_a_loop_carries_a_value_only_the_cache_defines_as_none_without_it(tmp_path):
    """`v` is computed from the cache output only; the layer loop carries it. Without the cache
    (training) the caller passed `v`, never bound: an UnboundLocalError the session property found."""
    mod = load(tmp_path, CARRIED_VALUE_OF_A_CACHE, "carried_cache_value")
    model = mod.Model().train()
    x = torch.randn(2, 3, 4)
    out = model(x)
    assert out.new is None and torch.equal(out.y, 3 * x)
    assert model.eval()(x).new.shape == (2, 2, 3, 4)


# ------------------------------------------------------------------ issue 18: which output is the logits

TWO_OUTPUTS = """\
param:
  V : int = 11
  D : int = 8
input:
  idx : Tensor([B, T], int64)
parameter:
  emb : Tensor([V, D], float32)
  head : Tensor([V, D], float32)
output:
  probs : Tensor([B, T, V], float32)
  scores : Tensor([B, T, V], float32)
let x = gather(emb, idx)
let q = reshape(x, [B, T, 1, D])
let a = reshape(flash_attention(q, q, q, causal=True), [B, T, D])
let scores = linear(a, weight=head)
let probs = softmax(scores)
"""


def test_generate_samples_from_the_logits_not_a_softmax_declared_before_them(tmp_path):
    """Issue 18: `probs = softmax(scores)`, declared before `scores`, was taken for the logits (the
    first [B, T, V] output), so generate sampled from softmax(probs). The softmax is not the
    logits; `snfc check -v` says which output generate samples from."""
    from conftest import snfc
    model = load(tmp_path, TWO_OUTPUTS, "probs")
    assert plans_of(TWO_OUTPUTS).decode.logits == "scores"
    torch.manual_seed(0)
    model = model.Model().eval()
    prompt = torch.randint(0, 11, (2, 3))
    out = model.generate(prompt, 4, temperature=0)
    seq = prompt
    with torch.no_grad():  # greedy by hand, on the scores
        for _ in range(4):
            seq = torch.cat([seq, model(seq).scores[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(out, seq)
    code, out, err = snfc("check", "-v", str(tmp_path / "probs.snf"))
    err = out + err
    assert code == 0 and "probs.snf:11:3: note: generate samples from the output `scores`: `probs` is a softmax " \
                         "of the scores  [generate-plan]" in err


def test_generate_is_refused_when_no_rule_tells_which_output_is_the_logits(tmp_path):
    from conftest import snfc
    both = TWO_OUTPUTS.replace("let probs = softmax(scores)", "let probs = scores * 2.0")
    assert plans_of(both).decode is None
    assert not hasattr(load(tmp_path, both, "both").Model, "generate")
    code, out, err = snfc("check", "-v", str(tmp_path / "both.snf"))
    err = out + err
    assert code == 0 and "note: no generate: `probs`, `scores` could each be the logits; name the one to sample " \
                         "from `logits`" in err
    named = both.replace("probs", "logits")  # the rule's first choice: the output named `logits`
    assert plans_of(named).decode.logits == "logits"


def test_check_v_says_why_a_spec_gets_no_generate():
    """Each refusal of `generate` is a note naming its reason (passes/decode.py no_generate)."""
    from conftest import snfc
    want = {"tiny_transformer": "an attention is not causal",
            "bert": "`last_hidden_state` is over `n_embd`, not the `vocab_size` rows of the table",
            "nanogpt": "generate samples from the output `logits`"}
    for name, note in want.items():
        code, out, err = snfc("check", "-v", str(REPO / "specs" / f"{name}.snf"))
        assert code == 0 and note in out + err, (name, out + err)


CONDITIONAL_DTYPE_SOURCE = """\
param:
  n_layer : int = 2
  D : int = 4
  use_bias : bool = False
input:
  x : Tensor([B, T, D], float32)
parameter:
  g : Tensor([D], float32) if use_bias else None
  w : Tensor([D, D], float32)
output:
  y : Tensor([B, T, D], float32)
let y = x @ w
for l in 0..n_layer-1:
    y = layer_norm(y, weight=g) + full([B, T, D], 1.0, float32)
"""


def test_a_block_takes_the_model_dtype_from_no_parameter_that_may_be_none(tmp_path):
    """The session property (seed 1287): a block that holds no floating tensor took the model's dtype
    from a parameter it reads, `g`, which is None without `use_bias` (AttributeError). A conditional
    parameter is never the source; the caller passes the dtype."""
    mod = load(tmp_path, CONDITIONAL_DTYPE_SOURCE, "conditional_dtype")
    for use_bias in (False, True):
        model = mod.Model(use_bias=use_bias).eval()
        x = torch.randn(2, 3, 4)
        with torch.no_grad():
            assert model(x).shape == (2, 3, 4)  # one output: the tensor itself
            assert model.to(torch.bfloat16)(x).dtype == torch.bfloat16
    import linecache
    assert "g: Optional[torch.Tensor]" in "".join(linecache.getlines(mod.__file__))


NO_TENSOR_IN_THE_BLOCK = """\
param:
  n_layer : int = 2
  F : int = 6
  D : int = 4
  use_bias : bool = False
input:
  x : Tensor([B, D], float32)
parameter:
  g : Tensor([D], float32) if use_bias else None
output:
  y : Tensor([B, D], float32)
let y = rms_norm(x, weight=g)
for l in 0..n_layer-1:
    let v = arange(1, F + 1, dtype=float32)
"""


def test_a_block_that_holds_no_tensor_takes_the_callers_device_compiled(tmp_path, monkeypatch):
    """The session long mode (seed 3099): a layer block with no tensor of its own made `arange` on
    torch.get_default_device(), which dynamo cannot put in a graph, so the compiled block fell
    back to eager. The caller passes its device, as it passes the model's dtype."""
    import warnings
    monkeypatch.setenv("SNF_COMPILE", "1")
    mod = load(tmp_path, NO_TENSOR_IN_THE_BLOCK, "no_tensor_block")
    model = mod.Model().eval()
    model.compile_units = {"cpu": {"train": "none", "eval": "block"}}  # compile the block on a CPU
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a fallback to eager fails here
        with torch.no_grad():
            assert model(torch.randn(2, 4)).shape == (2, 4)
