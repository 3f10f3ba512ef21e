"""Quantized releases (snf/quantized.py): each format's values against transformers' own
dequantization, bit for bit, on random codes; folders in each release's layout (tiny sizes, the
releases' keys, dtypes and config.json) through snf.from_pretrained against transformers; what a
save writes; and the refusals, each naming the setting or the key.

The folders are built here: a transformers model of the family on random weights, saved in
bfloat16, the tensors the release quantizes replaced by their pair (snf.quantized's `quantize`).
Both sides dequantize to bfloat16 and run in float32 (tolerance: test_from_pretrained's `_close`,
1e-5 of the largest logit). Nothing is downloaded.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

transformers = pytest.importorskip("transformers")

import snf  # noqa: E402
from snf.interop import CheckpointError  # noqa: E402
from snf.pretrained import PretrainedError  # noqa: E402
from snf.quantized import FORMATS  # noqa: E402
from test_from_pretrained import _close, edit_config, hf_model, tokens  # noqa: E402

BITS = {2: torch.int16, 4: torch.int32}
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and torch.equal(a.view(BITS[a.element_size()]), b.view(BITS[b.element_size()]))


def _dequantized(method: str, codes, scales, dtype, settings) -> torch.Tensor:
    fmt = FORMATS[method]
    out = fmt.empty(fmt.shape("w", codes, scales, settings), dtype)  # as the loader lays it out
    fmt.dequantize(codes, scales, out, settings)
    return out


# ----------------------------------------------------------------------------- the formats, bit for bit

@pytest.mark.parametrize("dtype", DTYPES)
def test_mxfp4_is_transformers_bit_for_bit(dtype):
    """Every code and every exponent (255 included: transformers' ldexp keeps 0.5 * 2**128 finite in
    float32 and bfloat16, and overflows in float16)."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    g = torch.Generator().manual_seed(0)
    blocks = torch.randint(0, 256, (3, 40, 4, 16), generator=g, dtype=torch.uint8)
    scales = torch.randint(0, 256, (3, 40, 4), generator=g, dtype=torch.uint8)
    scales[0, 0] = torch.tensor([0, 1, 254, 255], dtype=torch.uint8)
    want = convert_moe_packed_tensors(blocks, scales, dtype=dtype)
    assert _same_bits(_dequantized("mxfp4", blocks, scales, dtype, {}), want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale_dtype", [torch.float32, torch.uint8])
def test_fp8_is_transformers_bit_for_bit(dtype, scale_dtype):
    """Random codes (NaN's two included) and scales, per-expert stacks; uint8 scales as E8M0 exponents."""
    from transformers.integrations.finegrained_fp8 import Fp8Dequantize
    g = torch.Generator().manual_seed(1)
    codes = torch.randint(0, 256, (2, 64, 48), generator=g, dtype=torch.uint8).view(torch.float8_e4m3fn)
    scales = (torch.rand(2, 4, 3, generator=g) * 4 if scale_dtype == torch.float32
              else torch.randint(100, 150, (2, 4, 3), generator=g, dtype=torch.uint8))
    want = Fp8Dequantize(None)._dequantize_one(codes, scales, output_dtype=dtype)
    assert _same_bits(_dequantized("fp8", codes, scales, dtype, {"block": (16, 16)}), want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fp8_edge_blocks_are_cut_short(dtype):
    """DeepSeek-V3's 576-row kv_a_proj_with_mqa at 128 x 128 is 4.5 blocks: the grid rounds up and the
    last block is cut short. transformers' FP8 linear dequantizes it so (`_dequantize_fp8_weight`, in
    float32 here, then the model's dtype); its load-time Fp8Dequantize derives the block from the grid
    instead, and refuses the shape."""
    from transformers.integrations.finegrained_fp8 import _dequantize_fp8_weight
    g = torch.Generator().manual_seed(2)
    codes = torch.randint(0, 256, (2, 24, 40), generator=g, dtype=torch.uint8).view(torch.float8_e4m3fn)
    scales = torch.rand(2, 2, 3, generator=g)
    want = _dequantize_fp8_weight(codes, scales, [16, 16], torch.float32).to(dtype)
    assert _same_bits(_dequantized("fp8", codes, scales, dtype, {"block": (16, 16)}), want)


@pytest.mark.parametrize("method, shape, settings", [("mxfp4", (3, 64, 40), {}), ("fp8", (2, 24, 40), {"block": (16, 16)}),
                                                     ("fp8", (24, 40), {"block": None})])
def test_quantize_then_dequantize_is_close(method, shape, settings):
    """The tests' and benchmarks' quantizer: within each format's step of the values."""
    w = torch.randn(shape, generator=torch.Generator().manual_seed(3))
    codes, scales = FORMATS[method].quantize(w, settings)
    back = _dequantized(method, codes, scales, torch.float32, settings)
    assert back.shape == w.shape and (back - w).abs().max() <= (0.25 if method == "mxfp4" else 0.07) * w.abs().max()


# ----------------------------------------------------------------------------- folders in a release's layout

GPT_OSS = dict(intermediate_size=32)  # MXFP4 blocks are 32 inputs: the down projection's 32, not 24
MXFP4_CONFIG = {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                           "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"}
# DeepSeek-V3's own, at a block that divides every size of FAMILIES' tiny config (24, 32, 40, 48, 80, 88)
FP8_CONFIG = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [8, 8]}
QWEN3_FP8 = {**FP8_CONFIG, "weight_block_size": [16, 16], "modules_to_not_convert": ["lm_head"]}
# what each release keeps unquantized: embeddings, norms, routers, the head
PLAIN = ("embed_tokens", "lm_head", "norm", "mlp.gate.weight", "mlp.router", "self_attn.sinks")


def _quantizes(method: str, key: str, tensor: torch.Tensor) -> bool:
    if method == "mxfp4":
        return key.endswith(("experts.gate_up_proj", "experts.down_proj"))
    return key.endswith(".weight") and tensor.dim() == 2 and not any(p in key for p in PLAIN)


def release(folder, family: str, quantization: dict, **overrides):
    """The family's transformers model (random weights), saved as its release is: bfloat16, the tensors
    the release quantizes as their pairs, config.json with its quantization_config. Returns the model
    and the folder."""
    from safetensors.torch import load_file, save_file
    hf = hf_model(family, **overrides)
    hf.save_pretrained(folder)
    fmt = FORMATS[quantization["quant_method"]]
    settings = fmt.settings(quantization, "test")
    tensors = {}
    for key, tensor in load_file(str(folder / "model.safetensors")).items():
        if _quantizes(fmt.method, key, tensor):
            plain = tensor.to(torch.bfloat16)  # quantized from the bfloat16 weights, as the releases were
            tensors[fmt.codes_key(key)], tensors[fmt.scales_key(key)] = fmt.quantize(plain, settings)
        else:
            tensors[key] = tensor.to(torch.bfloat16)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    edit_config(folder, quantization_config=quantization, dtype="bfloat16")
    return hf, folder


@pytest.fixture
def qwen3_fp8(tmp_path):
    return release(tmp_path / "qwen3", "qwen3", QWEN3_FP8, tie_word_embeddings=False)[1]


@pytest.fixture
def gpt_oss_mxfp4(tmp_path):
    return release(tmp_path / "gpt-oss", "gpt_oss", MXFP4_CONFIG, **GPT_OSS)[1]


def _refused(folder, error, match: str) -> None:
    with pytest.raises(error, match=match):
        snf.from_pretrained(folder)


def _against_transformers(folder, reference=None):
    """snfc's model of the folder and transformers' (of `reference`, else of the folder itself), both
    dequantized to bfloat16 and run in float32: the logits agree and greedy generate gives the same tokens."""
    model = snf.from_pretrained(folder)
    assert next(model.parameters()).dtype == torch.bfloat16
    hf = transformers.AutoModelForCausalLM.from_pretrained(reference or folder, dtype=torch.bfloat16).float().eval()
    model = model.float()
    idx = tokens(hf.config.vocab_size)
    with torch.no_grad():
        want, got = hf(idx).logits, model(idx).logits
    assert got.shape == want.shape and _close(got, want), (got - want).abs().max()
    prompt = idx[:, :7]
    assert torch.equal(model.generate(prompt, 8, temperature=0),
                       hf.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0))
    return model


def test_gpt_oss_mxfp4_release_matches_transformers(gpt_oss_mxfp4):
    model = _against_transformers(gpt_oss_mxfp4)
    assert model.config.mlp_hidden == 32


def test_deepseek_v3_fp8_release_matches_transformers(tmp_path):
    _, folder = release(tmp_path / "deepseek", "deepseek_v3", FP8_CONFIG)
    _against_transformers(folder)


def test_qwen3_fp8_release_matches_transformers(qwen3_fp8):
    """Qwen3's FP8 layout: its linears quantized, the head kept (modules_to_not_convert) and untied."""
    _against_transformers(qwen3_fp8)


def test_deepseek_v3_edge_blocks_match_transformers_fp8_linear(tmp_path):
    """DeepSeek-V3's grid at 16 x 16, which 24 (kv_a_proj_with_mqa), 88 (kv_b_proj) and 40 (o_proj) do
    not divide. transformers' load-time dequantization derives the block from the grid, so it cannot
    load this folder (88 rows in a grid of 6; nor the release: 576 rows in 5), and would give 24 rows in
    a grid of 2 blocks of 12; its FP8 linear cuts the edge blocks short, as the release means. The
    reference is transformers on the weights that linear dequantizes."""
    from safetensors.torch import load_file, save_file
    from transformers.integrations.finegrained_fp8 import _dequantize_fp8_weight
    _, folder = release(tmp_path / "deepseek", "deepseek_v3", {**FP8_CONFIG, "weight_block_size": [16, 16]})
    packed = load_file(str(folder / "model.safetensors"))
    plain = {k: v for k, v in packed.items() if not k.endswith("_scale_inv")}
    for key, codes in plain.items():
        if codes.dtype == torch.float8_e4m3fn:
            plain[key] = _dequantize_fp8_weight(codes, packed[key + "_scale_inv"], [16, 16], torch.float32).bfloat16()
    reference = tmp_path / "reference"
    reference.mkdir()
    save_file(plain, str(reference / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    del config["quantization_config"]
    (reference / "config.json").write_text(json.dumps(config))
    _against_transformers(folder, reference)


def test_the_view_reads_a_pair_into_a_cpu_tensor_or_gives_it(qwen3_fp8):
    """Straight into a contiguous CPU tensor of the model's dtype; another device's (CUDA) copies what
    `[key]` gives, dequantized on the CPU."""
    from snf.checkpoint_files import open_checkpoint
    from snf.quantized import Dequantized, scheme_of
    with open_checkpoint(qwen3_fp8) as raw:
        view = Dequantized(raw, scheme_of({"quantization_config": QWEN3_FP8}, "test"), torch.bfloat16)
        assert Q in view and Q + "_scale_inv" not in view and view.meta(Q).dtype == torch.bfloat16
        whole = view[Q].clone()
        into = torch.empty(whole.shape, dtype=torch.bfloat16)
        assert view.read_into(Q, into) and _same_bits(into, whole)
        assert not view.read_into(Q, torch.empty(whole.shape, dtype=torch.bfloat16, device="meta"))
        assert not view.read_into(Q, torch.empty(whole.shape, dtype=torch.float32))


def test_a_sharded_release_loads_the_same(qwen3_fp8):
    """The releases are sharded (DeepSeek-V3's 163 files): a pair's codes and scales in two shards."""
    from safetensors.torch import load_file, save_file
    whole = snf.from_pretrained(qwen3_fp8).state_dict()
    tensors = load_file(str(qwen3_fp8 / "model.safetensors"))
    shards = {"model-00001-of-00002.safetensors": {}, "model-00002-of-00002.safetensors": {}}
    for key, tensor in tensors.items():
        shards[sorted(shards)[key.endswith("_scale_inv")]][key] = tensor
    for name, part in shards.items():
        save_file(part, str(qwen3_fp8 / name), metadata={"format": "pt"})
    (qwen3_fp8 / "model.safetensors").unlink()
    index = {"weight_map": {key: name for name, part in shards.items() for key in part}}
    (qwen3_fp8 / "model.safetensors.index.json").write_text(json.dumps(index))
    sharded = snf.from_pretrained(qwen3_fp8).state_dict()
    assert all(torch.equal(whole[k], sharded[k]) for k in whole)


def test_a_save_is_plain_and_transformers_loads_it_as_ordinary(tmp_path, gpt_oss_mxfp4):
    model = snf.from_pretrained(gpt_oss_mxfp4)
    snf.save_pretrained(model, tmp_path / "saved")
    written = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert "quantization_config" not in written and written["dtype"] == "bfloat16"
    from safetensors.torch import load_file
    saved = load_file(str(tmp_path / "saved" / "model.safetensors"))
    assert {t.dtype for t in saved.values()} == {torch.bfloat16} and not any(k.endswith("_blocks") for k in saved)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "saved")
    assert getattr(hf.config, "quantization_config", None) is None
    back = snf.from_pretrained(tmp_path / "saved")
    mine, theirs = model.state_dict(), back.state_dict()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_a_quantized_release_loads_in_the_dtype_asked_for(qwen3_fp8):
    edit_config(qwen3_fp8, dtype=...)
    model = snf.from_pretrained(qwen3_fp8, dtype=torch.float32)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert {p.dtype for p in snf.from_pretrained(qwen3_fp8).parameters()} == {torch.bfloat16}  # none named


# ----------------------------------------------------------------------------- refusals, each by name

@pytest.mark.parametrize("config, named", [
    ({"quant_method": "gptq", "bits": 4}, 'quant_method = "gptq"'),
    ({"quant_method": "awq", "bits": 4}, 'quant_method = "awq"'),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, 'quant_method = "bitsandbytes"'),
    ({"quant_method": "compressed-tensors"}, 'quant_method = "compressed-tensors"'),
    ({"load_in_8bit": True}, "no quant_method"),
    ("fp8", 'quantization_config = "fp8"'),
])
def test_another_quantization_is_refused_by_name(qwen3_fp8, config, named):
    edit_config(qwen3_fp8, quantization_config=config)
    with pytest.raises(PretrainedError, match="config.json") as err:
        snf.from_pretrained(qwen3_fp8)
    assert named in str(err.value) and 'snfc reads "mxfp4" and "fp8" releases' in str(err.value)


@pytest.mark.parametrize("changes, named", [
    (dict(activation_scheme="static"), 'quantization_config.activation_scheme = "static"'),
    (dict(fmt="e5m2"), 'quantization_config.fmt = "e5m2"'),
    (dict(weight_block_size=[16]), "quantization_config.weight_block_size = [16]"),
    (dict(modules_to_not_convert="lm_head"), 'quantization_config.modules_to_not_convert = "lm_head"'),
    (dict(group_size=128), "quantization_config.group_size: snfc does not read this setting of a fp8 release"),
])
def test_an_fp8_setting_snfc_cannot_honour_is_named(qwen3_fp8, changes, named):
    edit_config(qwen3_fp8, quantization_config={**QWEN3_FP8, **changes})
    _refused(qwen3_fp8, PretrainedError, "config.json: " + re.escape(named))


def _rewrite(folder, change) -> None:
    """The folder's model.safetensors with `change(tensors)` applied."""
    from safetensors.torch import load_file, save_file
    tensors = load_file(str(folder / "model.safetensors"))
    change(tensors)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"), metadata={"format": "pt"})


GATE_UP = "model.layers.0.mlp.experts.gate_up_proj"
Q = "model.layers.0.self_attn.q_proj.weight"


def _mxfp4_more_blocks(t):  # one block more in both: their shapes agree, the dequantized tensor is too wide
    t[GATE_UP + "_blocks"] = torch.cat([t[GATE_UP + "_blocks"]] * 2, dim=2)
    t[GATE_UP + "_scales"] = torch.cat([t[GATE_UP + "_scales"]] * 2, dim=2)


@pytest.mark.parametrize("change, error, named", [
    (_mxfp4_more_blocks, CheckpointError, rf"{GATE_UP} \(for .*\): expected shape \[4, 32, 64\], got \[4, 64, 64\]"
                                          rf"(.|\n)*`{GATE_UP}` is dequantized \(mxfp4\) from `{GATE_UP}_blocks` "
                                          r"\[4, 64, 2, 16\]"),
    (lambda t: t.update({GATE_UP + "_scales": t[GATE_UP + "_scales"][:, :, :0]}), PretrainedError,
     rf"`{GATE_UP}_scales` has shape \[4, 64, 0\], `{GATE_UP}_blocks` \[4, 64, 1, 16\]"),
    (lambda t: t.update({GATE_UP + "_blocks": t[GATE_UP + "_blocks"][..., :8]}), PretrainedError,
     rf"`{GATE_UP}_blocks` has shape \[4, 64, 1, 8\]: MXFP4 blocks are"),
    (lambda t: t.pop(GATE_UP + "_scales"), PretrainedError,
     rf"`{GATE_UP}_blocks` has no `{GATE_UP}_scales` beside it"),
    (lambda t: t.pop(GATE_UP + "_blocks"), PretrainedError, rf"`{GATE_UP}_scales` has no `{GATE_UP}_blocks` beside it"),
    (lambda t: t.update({GATE_UP + "_scales": t[GATE_UP + "_scales"].float()}), PretrainedError,
     rf"`{GATE_UP}_blocks` \(uint8\) and `{GATE_UP}_scales` \(float32\) must both be uint8"),
])
def test_mislabelled_mxfp4_tensors_are_named(gpt_oss_mxfp4, change, error, named):
    _rewrite(gpt_oss_mxfp4, change)
    _refused(gpt_oss_mxfp4, error, named)


@pytest.mark.parametrize("change, named", [
    (lambda t: t.update({Q + "_scale_inv": t[Q + "_scale_inv"][:1]}),
     rf"`{Q}_scale_inv` has shape \[1, 2\]; `{Q}` \[64, 32\] in blocks of \[16, 16\] has \[4, 2\]"),
    (lambda t: t.pop(Q + "_scale_inv"), rf"`{Q}` has no `{Q}_scale_inv` beside it"),
    (lambda t: t.update({Q: t[Q].bfloat16()}), rf"`{Q}` is bfloat16 beside its `{Q}_scale_inv`: fp8 codes are"),
    (lambda t: t.update({Q + "_scale_inv": t[Q + "_scale_inv"].to(torch.int32)}), rf"`{Q}_scale_inv` is int32"),
])
def test_mislabelled_fp8_tensors_are_named(qwen3_fp8, change, named):
    _rewrite(qwen3_fp8, change)
    _refused(qwen3_fp8, PretrainedError, named)


def test_quantized_modules_the_config_keeps_plain_are_named(qwen3_fp8):
    edit_config(qwen3_fp8, quantization_config={**QWEN3_FP8, "modules_to_not_convert": ["lm_head", "self_attn.q_proj"]})
    _refused(qwen3_fp8, PretrainedError, rf"`{Q}` is fp8, but quantization_config.modules_to_not_convert keeps its "
                                         r"module unquantized \('self_attn.q_proj'\)")


def test_a_config_that_says_quantized_over_plain_weights_is_named(tmp_path):
    from test_from_pretrained import saved
    _, folder = saved(tmp_path, "gpt_oss")
    edit_config(folder, quantization_config=MXFP4_CONFIG)
    _refused(folder, PretrainedError, r"it holds no mxfp4 tensor \(no pair of codes and `..._scales`\)")


def test_float8_codes_in_a_folder_that_says_nothing_are_refused(qwen3_fp8):
    """Codes without the quantization_config that says how to scale them: never cast as if plain."""
    edit_config(qwen3_fp8, quantization_config=...)
    _rewrite(qwen3_fp8, lambda t: [t.pop(k) for k in list(t) if k.endswith("_scale_inv")])
    _refused(qwen3_fp8, CheckpointError, rf"{Q} \(for layers.0.q.weight\): a float8_e4m3fn tensor: quantized codes, "
                                         "which snfc reads only with their scales")


def test_a_truncated_quantized_file_names_the_key(gpt_oss_mxfp4):
    path = gpt_oss_mxfp4 / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:len(data) - 64])
    _refused(gpt_oss_mxfp4, PretrainedError, r"model.safetensors is not a readable safetensors file \(`[\w.]+` has a "
                                             r"bad shape or data offsets\)")
