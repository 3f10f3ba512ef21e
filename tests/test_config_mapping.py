"""The `config hf:` language's meaning, one test per bug it had (issue 36), on a toy spec:

- `and`, `or`, `not` between values mean what they say; `hf.key or default` is "the key, or else
  the default where the key is absent (or null)";
- a field computed from other fields (`both <- a and b`) is read, and not written back;
- which keys count as read is what the mapping mentions, not what one evaluation reached;
- a field computed from keys that nothing writes back is refused by `check`;
- and the list functions' meaning: range, a list repeated, flags and positions (issue 38's
  mlp_only_layers), in both directions.
"""

from __future__ import annotations

import json

import pytest
import torch

import snf
from conftest import snfc, write_spec
from snf.interop import write_safetensors
from snf.pretrained import PretrainedError

SPEC = """\
param:
  D : int = 4
  a : bool = False
  b : bool = False
  either : bool = False
  both : bool = False
  scale : float = 1.0
input:
  x : Tensor([B, D], float32)
parameter:
  weight : Tensor([D, D], float32)
output:
  y : Tensor([B, D], float32)
let y = linear(x, weight=weight) * scale
checkpoint hf:
  weight <- "w"
config hf:
  assert hf.model_type == "toy"
  D <- hf.hidden_size
  a <- hf.flag_a or False
  b <- hf.flag_b or False
  either <- a or b
  both <- a and not b or b and a
  scale <- hf.new_scale or hf.old_scale or 1.0
  assert a or b, "one flag at least"
  assert hf.mode == "x" if a else hf.other_mode == "y", "the mode of the flag"
  _ <- hf.bos_token_id or hf.eos_token_id
"""


def _folder(tmp_path, **config):
    folder = tmp_path / "toy"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "toy", "hidden_size": 4, **config}))
    write_safetensors({"w": torch.eye(4)}, folder / "model.safetensors", {"format": "pt"})
    return folder


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    return write_spec(tmp_path_factory.mktemp("spec"), SPEC, "toy.snf")


def test_the_toy_spec_checks(spec):
    code, out, err = snfc("check", str(spec))
    assert code == 0, err


def test_or_and_not_are_logical_between_values(tmp_path, spec):
    # bug 1: with a = false, b = true, `assert a or b` failed and `either <- a or b` gave False
    model = snf.from_pretrained(_folder(tmp_path, flag_a=False, flag_b=True, other_mode="y"), spec=spec)
    assert (model.config.a, model.config.b, model.config.either, model.config.both) == (False, True, True, False)
    model = snf.from_pretrained(_folder(tmp_path, flag_a=True, flag_b=True, mode="x"), spec=spec)
    assert (model.config.either, model.config.both) == (True, True)
    with pytest.raises(PretrainedError, match=r"the spec requires `a or b` \(one flag at least\)"):
        snf.from_pretrained(_folder(tmp_path, flag_a=False, other_mode="y"), spec=spec)


def test_or_after_a_key_is_or_else_where_absent(tmp_path, spec):
    # hf.new_scale or hf.old_scale or 1.0: the first key present, null counting as absent; a false
    # or zero value is a value
    for config, scale in (({}, 1.0), ({"old_scale": 2.0}, 2.0), ({"new_scale": 3.0, "old_scale": 2.0}, 3.0),
                          ({"new_scale": None, "old_scale": 2.0}, 2.0), ({"new_scale": 0.0, "old_scale": 2.0}, 0.0)):
        model = snf.from_pretrained(_folder(tmp_path, flag_b=True, other_mode="y", **config), spec=spec)
        assert model.config.scale == scale, config


def test_a_field_computed_from_fields_saves(tmp_path, spec):
    # bug 2: `both <- a and not b or b and a` passed check and from_pretrained, then save_pretrained
    # said it "cannot be written back"
    folder = _folder(tmp_path, flag_a=True, flag_b=True, mode="x", bos_token_id=5, eos_token_id=6)
    model = snf.from_pretrained(folder, spec=spec)
    snf.save_pretrained(model, tmp_path / "out")
    assert json.loads((tmp_path / "out" / "config.json").read_text()) == json.loads((folder / "config.json").read_text())
    back = snf.from_pretrained(tmp_path / "out", spec=spec)
    assert back.config == model.config


def test_every_key_the_mapping_mentions_is_read(tmp_path, spec):
    # bug 4: a key reached only after an earlier `or` key was found (old_scale, eos_token_id), or in
    # an `if` branch not taken (mode), was "not mapped by the spec"
    folder = _folder(tmp_path, flag_a=False, flag_b=True, other_mode="y", mode="z", new_scale=2.0, old_scale=1.0,
                     bos_token_id=1, eos_token_id=2)
    assert snf.from_pretrained(folder, spec=spec).config.scale == 2.0
    with pytest.raises(PretrainedError, match=r"surprise = 1: the spec does not map it"):
        snf.from_pretrained(_folder(tmp_path, flag_b=True, other_mode="y", surprise=1), spec=spec)


def test_check_refuses_a_field_nothing_writes_back(tmp_path):
    # a field computed from keys (not read straight from one) is one-way: save_pretrained could not
    # write its key back, so check says so before any model is loaded
    text = SPEC.replace("  b <- hf.flag_b or False\n", "  b <- hf.flag_b and hf.flag_c\n")
    code, out, err = snfc("check", str(write_spec(tmp_path, text, "one_way.snf")))
    assert code == 1 and "[bad-config-map]" in out and "flag_b" in out, out


RANGE_SPEC = SPEC.replace('  _ <- hf.bos_token_id or hf.eos_token_id\n', '''\
  assert (hf.sparse or range(1, D, 2)) == range(1, D, 2), "every other layer sparse"
  assert (hf.pattern or [0] * D) == [0] * D, "no pattern"
  _ <- hf.bos_token_id or hf.eos_token_id
''')


def test_range_lists_numbers_and_no_list_grows_past_the_limit(tmp_path):
    # range(start, stop[, step]) is Python's, as a list (Llama 4's moe_layers); a list that config.json's
    # sizes would make longer than LONGEST_LIST items is refused before it is built, naming the keys
    spec = write_spec(tmp_path, RANGE_SPEC, "ranged.snf")
    assert snfc("check", str(spec))[0] == 0
    base = dict(flag_b=True, other_mode="y")
    assert snf.from_pretrained(_folder(tmp_path, sparse=[1, 3], **base), spec=spec).config.D == 4
    with pytest.raises(PretrainedError, match=r"sparse = \[0, 2\].*requires `\(hf.sparse or range\(1, D, 2\)\)"):
        snf.from_pretrained(_folder(tmp_path, sparse=[0, 2], **base), spec=spec)
    with pytest.raises(PretrainedError, match=r"`\[0\] \* D` would make a list of 2000000 items with D = 2000000"):
        snf.from_pretrained(_folder(tmp_path, hidden_size=2_000_000, **base), spec=spec)


LIST_SPEC = """\
param:
  n_layer : int = 3
  marks : list[int, n_layer] = [0, 0, 0]
  D : int = 4
input:
  x : Tensor([B, D], float32)
parameter:
  w : Tensor([n_layer, D, D], float32)
output:
  y : Tensor([B, D], float32)
let y = x
for l in 0..n_layer-1:
    if marks[l] == 1:
        y = linear(y, weight=w[l])
checkpoint hf:
  w[l] <- "layers.{l}.w"
config hf:
  assert hf.model_type == "toy"
  n_layer <- hf.num_layers
  marks <- flags(hf.listed or [], n_layer)
  hf.listed <- positions(marks, 1)
"""


def _layers_folder(tmp_path, layers: int = 3, **config):
    folder = tmp_path / "layers"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "toy", "num_layers": layers, **config}))
    write_safetensors({f"layers.{i}.w": torch.eye(4) for i in range(min(layers, 3))}, folder / "model.safetensors",
                      {"format": "pt"})
    return folder


def test_flags_and_positions_turn_layer_numbers_into_a_list_per_layer_and_back(tmp_path):
    # Qwen2-MoE's mlp_only_layers: flags(numbers, length) reads the layer numbers as one item per layer,
    # positions(list, 1) writes them back, in increasing order, once each
    spec = write_spec(tmp_path, LIST_SPEC, "listed.snf")
    assert snfc("check", str(spec))[0] == 0
    for listed, marks, back in (([0, 2], (1, 0, 1), [0, 2]), ([2, 0, 2], (1, 0, 1), [0, 2]), (None, (0, 0, 0), [])):
        folder = _layers_folder(tmp_path, **({} if listed is None else {"listed": listed}))
        model = snf.from_pretrained(folder, spec=spec)
        assert model.config.marks == marks
        snf.save_pretrained(model, tmp_path / "out")
        written = json.loads((tmp_path / "out" / "config.json").read_text())
        assert written == {**json.loads((folder / "config.json").read_text()), "listed": back}
        assert snf.from_pretrained(tmp_path / "out", spec=spec).config == model.config


@pytest.mark.parametrize("config, says", [
    (dict(listed=[3]), r"`flags\(hf.listed or \[\], n_layer\)` needs a list of numbers from 0 to 2; listed = \[3\], "
                       r"n_layer = 3 \(in the Config\)"),
    (dict(listed=[-1]), r"needs a list of numbers from 0 to 2; listed = \[-1\]"),
    (dict(listed=[True]), r"needs a list of numbers from 0 to 2; listed = \[true\]"),
    (dict(listed="0, 2"), r"needs a list of numbers from 0 to 2; listed = \"0, 2\""),
    (dict(layers=2_000_000), r"`flags\(hf.listed or \[\], n_layer\)` would make a list of 2000000 items"),
])
def test_flags_refuses_what_is_no_layer_number_naming_the_key(tmp_path, config, says):
    spec = write_spec(tmp_path, LIST_SPEC, "listed.snf")
    with pytest.raises(PretrainedError, match=says):
        snf.from_pretrained(_layers_folder(tmp_path, **config), spec=spec)


def test_positions_of_what_is_no_list_is_named(tmp_path):
    spec = write_spec(tmp_path, LIST_SPEC.replace("positions(marks, 1)", "positions(n_layer, 1)"), "unlisted.snf")
    model = snf.from_pretrained(_layers_folder(tmp_path, listed=[1]), spec=spec)
    with pytest.raises(PretrainedError, match=r"`positions\(n_layer, 1\)` lists the positions in a list; n_layer = 3"):
        snf.save_pretrained(model, tmp_path / "out")


# LIST_SPEC's marked layers are wide: their width read from an object keyed by layer number
KEYED_SPEC = LIST_SPEC.replace("  D : int = 4\n",
                               "  D : int = 4\n  wide : int = 4\n  widths : list[int, n_layer] = [4, 4, 4]\n") + """\
  wide <- hf.per_layer[positions(marks, 1)[-1]].width or 4
  widths <- per_layer(hf.per_layer, "width", n_layer, 4)
  assert (hf.per_layer or keyed([], width=0)) == keyed(positions(marks, 1), width=wide), "the wide layers' width"
  hf.per_layer <- keyed(positions(marks, 1), width=wide)
"""


def test_an_object_keyed_by_layer_number_reads_and_writes_back(tmp_path):
    # Gemma 4's per_layer_config, {"1": {"head_dim": 512}}: `hf.obj[number].field` reads one layer's entry (a
    # number computed from the Config; JSON keys it by its digits), per_layer(...) every layer's as a list, and
    # keyed(numbers, field=value) is the object written back (and required, whole, by the assert)
    spec = write_spec(tmp_path, KEYED_SPEC, "keyed.snf")
    assert snfc("check", str(spec))[0] == 0
    folder = _layers_folder(tmp_path, listed=[1], per_layer={"1": {"width": 8}})
    model = snf.from_pretrained(folder, spec=spec)
    assert (model.config.marks, model.config.wide, model.config.widths) == ((0, 1, 0), 8, (4, 8, 4))
    snf.save_pretrained(model, tmp_path / "out")
    read = json.loads((folder / "config.json").read_text())
    assert json.loads((tmp_path / "out" / "config.json").read_text()) == read
    # a fresh model's Config writes the object, which reads back as the same Config
    fresh = type(model)(model.config.__class__(n_layer=3, marks=[1, 0, 1], wide=6, widths=[6, 4, 6]))
    snf.save_pretrained(fresh, tmp_path / "fresh")
    written = json.loads((tmp_path / "fresh" / "config.json").read_text())
    assert written["per_layer"] == {"0": {"width": 6}, "2": {"width": 6}} and written["listed"] == [0, 2]
    # an entry of another field, or for another layer, is what the assert refuses, naming the object
    for per_layer, says in (({"1": {"width": 8, "heads": 2}}, "the wide layers' width"),
                            ({"0": {"width": 8}, "1": {"width": 8}}, "the wide layers' width"),
                            ("1: 8", r"`hf.per_layer\[positions\(marks, 1\)\[-1\]\].width` needs an object keyed by "
                                     r"layer number \(or a list\).*per_layer = \"1: 8\""),
                            ([8, 8], r"`hf.per_layer\[positions\(marks, 1\)\[-1\]\].width` needs an object at "
                                     r"`width`'s place; per_layer = \[8, 8\]")):
        with pytest.raises(PretrainedError, match=says):
            snf.from_pretrained(_layers_folder(tmp_path, listed=[1], per_layer=per_layer), spec=spec)


def test_an_entry_read_by_layer_number_leaves_no_other_setting_unread(tmp_path):
    # without the assert on the whole object, a field of an entry the spec does not read is still named:
    # `hf.obj[n].width` reads `obj.*.width` of every layer's entry, nothing more
    text = KEYED_SPEC.replace("  assert (hf.per_layer or", "  # assert (hf.per_layer or")
    spec = write_spec(tmp_path, text, "keyed_open.snf")
    folder = _layers_folder(tmp_path, listed=[1], per_layer={"1": {"width": 8, "heads": 2}})
    with pytest.raises(PretrainedError, match=r"per_layer.1.heads = 2: the spec does not map it"):
        snf.from_pretrained(folder, spec=spec)
    # an entry keyed by anything but a layer number is no layer's: named too, not read as one
    folder = _layers_folder(tmp_path, listed=[1], per_layer={"1": {"width": 8}, "wide": {"width": 8}})
    with pytest.raises(PretrainedError, match=r"per_layer.wide = \{\"width\": 8\}: the spec does not map it"):
        snf.from_pretrained(folder, spec=spec)
    # a field read from an entry is one-way: without `hf.per_layer <- keyed(...)` nothing writes the object back
    unwritten = text.replace("  hf.per_layer <- keyed(positions(marks, 1), width=wide)\n", "")
    code, out, _ = snfc("check", str(write_spec(tmp_path, unwritten, "keyed_unwritten.snf")))
    assert code == 1 and "`wide` is computed from `hf.per_layer.*.width`, which nothing writes back" in out, out
