"""`snfc check`'s proof that a per-layer checkpoint key is sound for the defaults (snf/check/key_proof.py):
the same verdict and the same witness as listing every key in row-major order, which the reference
below does as check did before the proof; and the proof's cost does not depend on the sizes, so a
1000-layer, 1024-expert spec is checked, and its errors located, like a small one."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPO, snfc, write_spec
from snf.check.key_proof import key_problem
from snf.checkpoints import eval_field, format_key, key_fields, parse_field

COMMON = dict(deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
VALUES = {"n": 3, "z": 0, "k": 2}  # config ints at their defaults; `m` has no default


def reference(key: str, values: dict, layers: int, experts: int):
    """Every key listed in row-major order, as check did before the proof (the first problem wins)."""
    if not key_fields(key):
        return None
    seen: dict = {}
    for layer in range(layers):
        for expert in range(experts):
            at = {**values, "l": layer, "e": expert}
            try:
                fields = [eval_field(parse_field(f), at) for f in key_fields(key)]
            except ZeroDivisionError:
                return ("zero", (layer, expert))
            except KeyError as err:
                return ("missing", err.args[0])
            if any(f < 0 for f in fields):
                return ("negative", (layer, expert))
            name = format_key(key, at)
            if name in seen:
                return ("twice", seen[name], (layer, expert))
            seen[name] = (layer, expert)
    return None


def affine_field(draw) -> str:
    """c + a*l + b*e, with a sign per term (a field has no unary minus), and a config int sometimes."""
    text = str(draw(st.integers(0, 6)))
    for var in ("l", "e", "n", "k"):
        coef = draw(st.integers(-4, 4))
        if coef:
            text += f" {'-' if coef < 0 else '+'} {abs(coef)}*{var}" if var in "le" else f" {'-+'[coef > 0]} {var}"
    return text


def any_field(draw, depth: int = 2) -> str:
    """Any field of the grammar: affine or not, dividing by zero or reading a missing name sometimes."""
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(["l", "e", "0", "1", "2", "5", "n", "z", "k", "m"]))
    op = draw(st.sampled_from(["+", "-", "*", "//", "%"]))
    return f"({any_field(draw, depth - 1)} {op} {any_field(draw, depth - 1)})"


LITERALS = ["", ".", "h.", ".w", "1", "0.", ".2", "a"]  # with digits and empties: keys not always delimited


@st.composite
def keys(draw, field):
    n = draw(st.integers(1, 3))
    parts = [draw(st.sampled_from(LITERALS)) for _ in range(n + 1)]
    return "".join(p + "{" + field(draw) + "}" for p in parts[:-1]) + parts[-1]


@settings(max_examples=600, **COMMON)
@given(keys(affine_field), st.integers(0, 9), st.integers(0, 9))
def test_affine_keys_agree_with_the_listing(key, layers, experts):
    assert key_problem(key, VALUES, layers, experts) == reference(key, VALUES, layers, experts)


@settings(max_examples=400, **COMMON)
@given(st.integers(-3, 5), st.integers(-3, 5), st.integers(0, 30), st.integers(1, 3), st.integers(0, 9),
       st.integers(0, 9))
def test_rank_one_keys_agree_with_the_listing(a, b, c, copies, layers, experts):
    """Fields that are multiples of one a*l + b*e: repeats wherever the box has room for the step."""
    key = ".".join(f"{{{c} + {k}*({a}*l + {b}*e)}}".replace("+ -", "- ") for k in range(1, copies + 1))
    key = key.replace("*(-", "*(0 - ")  # the grammar has no unary minus
    assert key_problem(key, VALUES, layers, experts) == reference(key, VALUES, layers, experts)


@settings(max_examples=400, **COMMON)
@given(keys(any_field), st.integers(0, 6), st.integers(0, 6))
def test_any_keys_agree_with_the_listing(key, layers, experts):
    assert key_problem(key, VALUES, layers, experts) == reference(key, VALUES, layers, experts)


@pytest.mark.parametrize("key, layers, experts, want", [
    ("x.{l}.{e}", 9, 7, None),
    ("x.{l + e}", 3, 4, ("twice", (0, 1), (1, 0))),
    ("x.{2*l + e}", 3, 2, None),                       # rank 1, step (1, -2): no room for it
    ("x.{2*l + e}", 3, 3, ("twice", (0, 2), (1, 0))),
    ("x.{3}", 1, 1, None),
    ("x.{3}.{0*e}", 2, 1, ("twice", (0, 0), (1, 0))),  # rank 0: the second key repeats the first
    ("x.{l - e}.{l - e + 1}", 2, 2, ("negative", (0, 1))),
    ("x.{20 - 3*l - 2*e}", 9, 9, ("twice", (0, 3), (2, 0))),  # before the negative number at (2, 8)
    ("x.{20 - 3*l - 2*e}.{l}", 9, 9, ("negative", (2, 8))),
    ("x.{l}{e}", 12, 11, ("twice", (1, 10), (11, 0))),  # not delimited: listed ("110" twice)
    ("x.{l // 2}", 3, 1, ("twice", (0, 0), (1, 0))),    # not affine: listed
    ("x.{l // z}", 3, 1, ("zero", (0, 0))),
    ("x.{l + m}", 3, 1, ("missing", "m")),
])
def test_witnesses(key, layers, experts, want):
    assert key_problem(key, VALUES, layers, experts) == want == reference(key, VALUES, layers, experts)


def test_large_boxes_are_proved():
    """Without listing: 10^12 keys, a repeat and a negative number far into the box."""
    assert key_problem("x.{l}.{e}", {}, 10**6, 10**6) is None
    assert key_problem("x.{l + 1000*e}", {}, 10**6, 10**6) == ("twice", (0, 1), (1000, 0))
    assert key_problem("x.{999999 - l}.{3000000 - 5*l - e}", {}, 10**6, 10**6) == ("negative", (400001, 999996))
    assert key_problem("x.{l * e}", {}, 10**6, 10**6) is None  # not affine, and too many to list


def big_qwen(tmp_path, key: str | None = None):
    """specs/qwen3_moe.snf at 1000 layers and 1024 experts, its up_proj key replaced by `key`."""
    text = (REPO / "specs" / "qwen3_moe.snf").read_text()
    text = re.sub(r"(?m)^(  n_layer : int = )\d+", r"\g<1>1000", text)
    text = re.sub(r"(?m)^(  n_expert : int = )\d+", r"\g<1>1024", text)
    if key is not None:
        text = text.replace('"model.layers.{l}.mlp.experts.{e}.up_proj.weight"', f'"{key}"')
    return write_spec(tmp_path, text, "big.snf")


def test_a_1000_layer_1024_expert_spec_checks(tmp_path):
    rc, out, err = snfc("check", str(big_qwen(tmp_path)))
    assert rc == 0, out + err


@pytest.mark.parametrize("key, says", [
    ("model.mlp.experts.{l + e}.up", "gives `model.mlp.experts.1.up` at l = 0, e = 1 and at l = 1, e = 0"),
    ("model.layers.{l}.experts.{1000 + l - e}.up",
     "gives a negative number at l = 0, e = 1001 (for the defaults): model.layers.0.experts.-1.up"),
])
def test_a_bad_key_of_a_1000_layer_spec_is_located(tmp_path, key, says):
    path = big_qwen(tmp_path, key)
    rc, out, err = snfc("check", str(path))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if key in text)
    assert rc == 1 and f"big.snf:{line}:22: error: the key `{key}` {says}" in out + err, out + err
