"""Issue 10's "Config", "Inputs at run time" and "Library" findings about the generated module:
Config validates itself and stays valid, overrides apply, run-time inputs get errors that name
the input and the bound, and dtypes are what the spec declares."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import generated.gpt_decoder as gd
import generated.nanogpt as ng
import snf
from conftest import REPO, write_spec
from snf.compiler import analyze
from snf.diagnostics import SpecError
from snf.source import Source

SMALL = dict(vocab_size=31, block_size=16, n_layer=2, n_head=2, n_embd=16)


@pytest.mark.parametrize("field,value,message", [
    ("n_embd", "8", "Config.n_embd must be an int, got '8'"),
    ("n_layer", 2.0, "Config.n_layer must be an int, got 2.0"),
    ("n_layer", True, "Config.n_layer must be an int, got True"),
    ("bias", "no", "Config.bias must be a bool, got 'no'"),
    ("bias", 1, "Config.bias must be a bool, got 1"),
    ("dropout", "0.1", "Config.dropout must be a float, got '0.1'"),
])
def test_config_fields_have_their_types(field, value, message):
    with pytest.raises(TypeError, match=message):
        ng.Config(**{**SMALL, field: value})


def test_an_int_is_a_float_fields_float():
    config = ng.Config(**SMALL, dropout=0)
    assert config.dropout == 0.0 and type(config.dropout) is float


def test_config_is_frozen_and_a_changed_copy_is_checked_again():
    config = ng.Config(**SMALL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.n_layer = 3
    with pytest.raises(ValueError, match="must be divisible"):
        dataclasses.replace(config, n_embd=15)
    assert dataclasses.replace(config, n_layer=3).n_layer == 3


def test_overrides_apply_to_a_given_config():
    model = ng.Model(ng.Config(**SMALL), n_layer=1, bias=False)
    assert model.config.n_layer == 1 and len(model.layers) == 1 and model.layers[0].attn_proj.bias is None
    with pytest.raises(TypeError):
        ng.Model(ng.Config(**SMALL), n_layers=1)  # a misspelt override is an error, not ignored


def test_token_ids_outside_the_table_name_the_input_and_the_bound():
    model = ng.Model(**SMALL)
    for bad in (31, -1):
        idx = torch.tensor([[1, 2, bad]])
        with pytest.raises(ValueError, match=rf"input idx must hold ids in \[0, vocab_size\) = \[0, 31\), got {bad}"):
            model(idx)


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train-fused"])
def test_class_indices_outside_the_vocabulary_name_the_input_and_the_range(training):
    """Issue 18: a target >= V or negative (not ignore_index) was torch's `IndexError: Target 11
    is out of bounds`; it is checked as token ids are, in the plain loss and in the fused head +
    loss of a training step; ignore_index (-1 in nanoGPT) is still skipped."""
    model = ng.Model(**SMALL).train(training)
    idx = torch.tensor([[1, 2, 3]])
    for bad in (31, -2, -100):
        targets = torch.tensor([[1, bad, -1]])
        with pytest.raises(ValueError, match=rf"input targets must hold class indices in \[0, vocab_size\) = "
                                             rf"\[0, 31\) or -1 \(ignore_index\), got {bad}"):
            model(idx, targets=targets)
    assert model(idx, targets=torch.tensor([[1, 30, -1]])).loss.isfinite()


def test_class_indices_are_checked_by_the_interpreter_too():
    from snf.interpret import interpret
    from snf.interop import spec_state
    model = ng.Model(**SMALL).eval()
    params = {k: v.double().numpy() for k, v in spec_state(model).items()}
    with pytest.raises(ValueError, match=r"class indices in \[0, 31\) or -1 \(ignore_index\), got 31"):
        interpret(analyze(Source.read(REPO / "specs" / "nanogpt.snf")).model, params,
                  {"idx": np.array([[1, 2]]), "targets": np.array([[31, 1]])}, SMALL)


def test_a_decode_position_past_the_slots_is_a_clear_error():
    model = ng.Model(**SMALL).eval()
    layers = [torch.zeros(1, 16, 2, 8)] * 2
    for state, message in [(ng._DecodeState(torch.tensor(16), 16), "the decode position 16 is outside the 16 cache slots read"),
                           (ng._DecodeState(torch.tensor(3), 17), r"the decode length must be an int in \[1, 16\], got 17")]:
        with pytest.raises(ValueError, match=message):  # as generate's decode step passes it (ng._decode)
            model(torch.zeros(1, 1, dtype=torch.long), past_keys=layers, past_values=layers, decode=state)


def test_generate_needs_a_prompt():
    model = ng.Model(**SMALL).eval()
    with pytest.raises(ValueError, match=r"generate needs a prompt of at least one token, \[B, T\] with T >= 1, "
                                         r"got \[2, 0\] int64"):
        model.generate(torch.zeros(2, 0, dtype=torch.long), 3)


def test_parameters_have_the_spec_dtype(tmp_path):
    text = """\
param:
  D : int = 8
  V : int = 11
input:
  x : Tensor([B, T], int64)
parameter:
  table : Tensor([V, D], float16)
  w_weight : Tensor([D, D], float16)
  norm_weight : Tensor([D], float16)
  extra : Tensor([D], float16)
output:
  y : Tensor([B, T, D], float16)
let h = layer_norm(gather(table, x), weight=norm_weight)
let y = linear(h, weight=w_weight) + extra
"""
    mod = snf.load(write_spec(tmp_path, text, "halves.snf"))
    model = mod.Model()
    assert {n: p.dtype for n, p in model.named_parameters()} == {
        "table.weight": torch.float16, "w.weight": torch.float16, "norm.weight": torch.float16,
        "extra": torch.float16}
    assert model(torch.tensor([[1, 2]])).dtype == torch.float16  # the first matmul runs


def test_a_parameter_cannot_be_named_like_the_checkpoint_tables_entries(tmp_path):
    """`_ignore` once clobbered CHECKPOINTS' reserved entry: spec names never start with `_` now,
    and a format's ignored keys live apart from its parameters."""
    assert set(gd.CHECKPOINTS["hf"]) == {"params", "ignore"}
    assert gd.CHECKPOINTS["hf"]["ignore"] == ("lm_head.weight",)
    text = "input:\n  x : Tensor([B], float32)\nparameter:\n  _ignore : Tensor([4], float32)\n" \
           "output:\n  y : Tensor([B], float32)\nlet y = x\n"
    with pytest.raises(SpecError) as info:
        snf.load(write_spec(tmp_path, text, "clobber.snf"))
    assert "starts with `_`" in str(info.value)


CONFIG_VALUES = """\
param:
  D : int = 8
  H : int = 2
  n_head : int = 2
  p : float = 0.1
  frac : float = 0.5
  hd = D // H
  E = int(D * frac)
input:
  x : Tensor([B, T, D], float32)
parameter:
  W : Tensor([D, D], float32) = normal(std=1.0 / (D - 3))
  V : Tensor([n_head, D], float32)
  U : Tensor([E, D], float32)
output:
  y : Tensor([B, T, H, hd], float32)
  z : Tensor([B, T, E], float32)
  v : Tensor([B, T, n_head], float32)
let y = reshape(dropout(linear(x, weight=W), rate=p), [B, T, H, hd])
let a = flash_attention(y, y, y, dropout=p)
let z = linear(reshape(a, [B, T, D]), weight=U)
let v = linear(x, weight=V)
"""


@pytest.mark.parametrize("field,value,message", [
    ("H", 0, r"the divisor H must be at least 1 \(spec.snf:\d+\); got H=0"),
    ("D", 3, r"`std` of `normal` = 1.0 / \(D - 3\) cannot be computed \(.*by zero.*\) .*got D=3"),
    ("D", 2, r"`std` of `normal` = 1.0 / \(D - 3\) must be >= 0, got -1.0 .*got D=2"),
    ("p", 1.5, r"`rate` of `dropout` must be in \[0, 1\], got 1.5 .*got p=1.5"),
    ("p", -0.5, r"`rate` of `dropout` must be in \[0, 1\], got -0.5 .*got p=-0.5"),
    ("p", float("nan"), r"`rate` of `dropout` must be in \[0, 1\], got nan .*got p=nan"),
    ("n_head", -2, r"`n_head` is a size: it must not be negative .*got n_head=-2"),
    ("frac", float("inf"), r"`E` = int\(D \* frac\) cannot be computed .*got D=8, frac=inf"),
    ("frac", -1.0, r"must not be negative .*got E=-8"),
])
def test_every_condition_an_op_or_initialiser_needs_is_a_config_check(tmp_path, field, value, message):
    """Issue 18: each of these raised inside torch, or in Config's own checks (ZeroDivisionError),
    or ran; now `Config` refuses it naming the field, and the interpreter refuses it too."""
    from snf.interpret import ConfigError, Interpreter
    path = write_spec(tmp_path, CONFIG_VALUES)
    mod = snf.load(path)
    with pytest.raises(ValueError, match=message):
        mod.Config(**{field: value})
    with pytest.raises(ConfigError, match=message):
        Interpreter(analyze(Source.read(path)).model, {field: value})
    model = mod.Model().train()  # the defaults run, in training too
    model(torch.randn(2, 3, 8))


def test_a_number_checked_under_a_flag_and_its_negation_is_checked_once_unguarded():
    """`rope`'s base under `if flag` and `if not flag`: one check, with no `flag or not flag` guard
    (generated/phi3.py had `if self.n_layer >= 1 and (self.longrope or not self.longrope)`)."""
    from snf.compiler import generate_source
    text = ("param:\n  base : float = 100.0\n  flag : bool = True\n"
            "input:\n  x : Tensor([B, T, 2, 4], float32)\noutput:\n  y : Tensor([B, T, 2, 4], float32)\n"
            "let y = rope(x, base=base, scaling=\"linear\", factor=2.0) if flag else rope(x, base=base)\n")
    code = generate_source(analyze(Source.from_text("flag.snf", text)))
    assert code.count("(lambda c: c.base, ") == 1 and "or not c.flag" not in code
    with pytest.raises(ValueError, match="base"):
        ns: dict = {}
        exec(compile(code, "<flag>", "exec"), ns)
        ns["Config"](base=-1.0, flag=False)


@pytest.mark.parametrize("spec, layer_types, bad", [
    ("gemma3_text", ["sliding_attention", "full", "sliding_attention"], "full"),
    ("gemma3_text", ["sliding_attention", "Full_Attention"], "Full_Attention"),
    ("gemma3_text", ["sliding_attention", ""], ""),
    ("nemotron_h", ["moe", "attention"], "attention"),
    ("nemotron_h", ["mamba", "mlp"], "mamba"),
])
def test_config_refuses_a_layer_kind_the_spec_does_not_know(spec, layer_types, bad):
    """`Config(...)` checks a list of strings' items as `config hf:` does: an unknown kind would
    otherwise run as none of the spec's kinds. The interpreter's Config says the same."""
    import importlib

    from snf.interpret import ConfigError, Interpreter
    module = importlib.import_module(f"generated.{spec}")
    with pytest.raises(ValueError, match=f"each item of `layer_types` must be .*{spec}.snf.*got layer_types=.*'{bad}'"):
        module.Config(layer_types=layer_types)
    model = analyze(Source.read(REPO / "specs" / f"{spec}.snf")).model
    values = {**dataclasses.asdict(module.Config()), "layer_types": tuple(layer_types)}
    with pytest.raises(ConfigError, match="each item of `layer_types` must be"):
        Interpreter(model, values)
    module.Config(layer_types=[k for k in layer_types if k != bad] or list(module.Config().layer_types[:1]))


def test_a_config_of_width_0_the_checker_approves_runs():
    """n_embd = 0 passes every check of Config (a size, divisible by n_head): forward runs. A split into
    heads names its count (`unflatten(2, (cfg.n_head, cfg.head_dim))`): with -1 and a head width of 0,
    torch cannot tell the count and raised."""
    import warnings

    import generated.llama3 as llama3
    import generated.nanogpt as nanogpt
    for mod, config in ((llama3, dict(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_kv_head=1, n_embd=0,
                                      mlp_hidden=4, rope_scaling=0)),
                        (nanogpt, dict(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=0))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch: initializing zero-element tensors is a no-op
            model = mod.Model(**config).eval()
        with torch.no_grad():
            out = model(torch.randint(0, 16, (2, 3)))
        assert out.logits.shape == (2, 3, 16) and torch.equal(out.logits, torch.zeros(2, 3, 16)), mod.__name__
