"""`join([...], axis=i, sizes=[...])` in a `checkpoint FMT:` section (docs/language.md 7): one parameter
read from several keys of unequal size joined on an axis, and saved back split. OLMo hybrid's released
checkpoints keep its q, k and v short convolutions as three keys (key_dim, key_dim and value_dim
channels); transformers' own save_pretrained keeps the one joined `conv1d.weight`: both load."""

from __future__ import annotations

import pytest
import torch

import snf
from conftest import snfc, write_spec
from snf.interop import CheckpointError, load_state_dict, spec_state
from snf.pretrained import hf_state_dict

SPEC = """\
param:
  n_layer : int = 2
  key_dim : int = 2
  value_dim : int = 3
  K : int = 4
  C = 2 * key_dim + value_dim
input:
  x : Tensor([B, C], float32)
parameter:
  conv : Tensor([n_layer, C, K], float32)
output:
  y : Tensor([B, K], float32)
let y = full([B, K], 0.0, float32)
for l in 0..n_layer-1:
    y = y + matmul(x, conv[l])
checkpoint hf:
  conv[l] <- (join(["layers.{l}.q_conv1d.weight", "layers.{l}.k_conv1d.weight", "layers.{l}.v_conv1d.weight"],
                   axis=0, sizes=[key_dim, key_dim, value_dim])
              or "layers.{l}.conv1d.weight")
"""


def test_a_parameter_joined_from_keys_of_unequal_size_loads_and_saves_back_split(tmp_path):
    spec = write_spec(tmp_path, SPEC, "joined.snf")
    assert snfc("check", str(spec))[0] == 0
    model = snf.load(spec).Model()
    g = torch.Generator().manual_seed(0)
    released = {f"layers.{l}.{p}_conv1d.weight": torch.randn(n, 4, generator=g)
                for l in range(2) for p, n in (("q", 2), ("k", 2), ("v", 3))}
    load_state_dict(model, released, "hf")
    joined = [torch.cat([released[f"layers.{l}.{p}_conv1d.weight"] for p in "qkv"]) for l in range(2)]
    assert torch.equal(spec_state(model)["conv"], torch.stack(joined))
    # saved back split, each key its own size
    back = hf_state_dict(model)
    assert back.keys() == released.keys() and all(torch.equal(back[k], released[k]) for k in released)
    # transformers' own layout, the joined key, loads too
    fresh = snf.load(spec).Model()
    load_state_dict(fresh, {f"layers.{l}.conv1d.weight": joined[l] for l in range(2)}, "hf")
    assert torch.equal(spec_state(fresh)["conv"], spec_state(model)["conv"])
    # a part of another size is named with the shape it must have, before anything is joined
    with pytest.raises(CheckpointError, match=r"layers.0.v_conv1d.weight \(for layers.0.conv\): expected shape "
                                              r"\[3, 4\], got \[2, 4\]"):
        load_state_dict(fresh, {**released, "layers.0.v_conv1d.weight": torch.zeros(2, 4)}, "hf")


def test_a_join_size_that_divides_by_zero_at_the_config_is_named(tmp_path):
    """A size of the join the config makes impossible (`(value_dim * d) // d` with d = 0, which nothing else
    in the spec divides by) is an error naming the parameter and the size, not a bare division error."""
    from snf.weight_mapping import MappingError
    spec = write_spec(tmp_path, SPEC.replace("  K : int = 4\n", "  K : int = 4\n  d : int = 1\n")
                      .replace("sizes=[key_dim, key_dim, value_dim]", "sizes=[key_dim, key_dim, (value_dim * d) // d]"),
                      "joined.snf")
    model = snf.load(spec).Model(d=0)
    parts = {f"layers.{l}.{p}_conv1d.weight": torch.zeros(n, 4) for l in range(2) for p, n in (("q", 2), ("k", 2),
                                                                                                ("v", 3))}
    with pytest.raises(MappingError, match=r"layers.0.conv: a size of join\(...\) divides by zero at this config "
                                           r"\(value_dim \* d // d\)"):
        load_state_dict(model, parts, "hf")
