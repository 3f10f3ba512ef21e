"""`snfc check`'s proof that a per-layer checkpoint key is sound for the defaults (snf/check/key_proof.py):
the same verdict and the same witness as listing every key in row-major order, which the reference
below does as check did before the proof; the proof's cost does not depend on the sizes, so a
1000-layer, 1024-expert spec is checked, and its errors located, like a small one, for affine and
quasi-affine fields (`{l // 2}`, `{e % 4}`) alike; and a key it cannot prove with more keys than
check lists is an error that says so, never a silent pass."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPO, snfc, write_spec
from snf.check.key_proof import key_problem
from snf.check.key_proof import LISTED
from snf.weight_mapping import eval_field, format_key, key_fields, parse_field

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


def quasi_field(draw, depth: int = 2) -> str:
    """A quasi-affine field: `l`, `e`, numbers and config ints with + and -, `*` by a number, and `//`
    and `%` by a nonzero number (a negative one sometimes); numbers large enough to put a repeat or a
    negative number far into a large box."""
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(["l", "e", "0", "1", "3", "n", "k", "40", "300"]))
    op = draw(st.sampled_from(["+", "-", "*", "//", "%"]))
    inner = quasi_field(draw, depth - 1)
    if op in "+-":
        return f"({inner} {op} {quasi_field(draw, depth - 1)})"
    number = draw(st.sampled_from(["2", "3", "5", "k", "n", "(0 - 2)", "(n - 7)", "50"]))
    return f"({number} * {inner})" if op == "*" and draw(st.booleans()) else f"({inner} {op} {number})"


LITERALS = ["", ".", "h.", ".w", "1", "0.", ".2", "a"]  # with digits and empties: keys not always delimited


@st.composite
def keys(draw, field):
    n = draw(st.integers(1, 3))
    parts = [draw(st.sampled_from(LITERALS)) for _ in range(n + 1)]
    return "".join(p + "{" + field(draw) + "}" for p in parts[:-1]) + parts[-1]


@st.composite
def delimited_keys(draw, field):
    """1 to 3 fields, each between dots: keys alike exactly when their fields are."""
    return "x." + ".".join("{" + field(draw) + "}" for _ in range(draw(st.integers(1, 3))))


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


@settings(max_examples=600, **COMMON)
@given(keys(quasi_field), st.integers(0, 12), st.integers(0, 12))
def test_quasi_affine_keys_agree_with_the_listing(key, layers, experts):
    assert key_problem(key, VALUES, layers, experts) == reference(key, VALUES, layers, experts)


def found_there(key: str, problem, layers: int, experts: int) -> bool:
    """Whether a problem is what it says: two (l, e) in the box, in row-major order, with one key, or
    a negative number at one."""
    def inside(at):
        return 0 <= at[0] < layers and 0 <= at[1] < experts

    at = {**VALUES, "l": problem[-1][0], "e": problem[-1][1]}
    if problem[0] == "negative":
        return inside(problem[1]) and any(eval_field(parse_field(f), at) < 0 for f in key_fields(key))
    earlier = {**VALUES, "l": problem[1][0], "e": problem[1][1]}
    return (problem[0] == "twice" and inside(problem[1]) and inside(problem[2]) and problem[1] < problem[2]
            and format_key(key, earlier) == format_key(key, at))


def far_field(draw) -> str:
    """A field that keeps keys apart far into a box, and then may not: `l` up to a large modulus (a
    repeat after it), a large number less a slow quotient (a negative number once it runs out), or
    any quasi-affine field."""
    m = draw(st.sampled_from(["50", "300", "997"]))
    return draw(st.sampled_from([f"l % {m}", f"e % {m}", f"l // {m}", "e", "l", f"(l % {m}) * 8 + e", f"l // 2 + {m} * e",
                                 f"{m} * 3 - l // 3 - e % 5", f"{m} - l // 2 + e", quasi_field(draw)]))


@settings(max_examples=150, **COMMON)
@given(st.one_of(delimited_keys(quasi_field), delimited_keys(far_field)), st.integers(1, 10**6), st.integers(1, 8))
def test_quasi_affine_keys_in_large_boxes(key, layers, experts):
    """Up to 8 * 10^6 keys: the problem found is there, the listing of the box's first rows (as many
    as 2,000 keys allow) finds the same problem where it lies in them and none where it does not,
    and the listing up to the problem's row finds it where that is at most 6,000 keys."""
    problem = key_problem(key, VALUES, layers, experts)
    assert problem is None or problem[0] != "unproved", problem  # proved, however large the box
    assert problem is None or found_there(key, problem, layers, experts), problem
    rows = max(1, min(layers, 2000 // experts))
    assert reference(key, VALUES, rows, experts) == (problem if problem and problem[-1][0] < rows else None)
    if problem is not None and rows <= problem[-1][0] and (problem[-1][0] + 1) * experts <= 6_000:
        assert reference(key, VALUES, problem[-1][0] + 1, experts) == problem


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
    ("x.{l // 2}", 3, 1, ("twice", (0, 0), (1, 0))),    # quasi-affine: proved on l mod 2
    ("x.{l // 2}.{l % 2}", 9, 1, None),
    ("x.{2 * (l // 3) + e % 4}", 9, 9, ("twice", (0, 0), (0, 4))),
    ("x.{(l + 1) // 2}.{e}", 4, 3, ("twice", (1, 0), (2, 0))),
    ("x.{e // 2}", 3, 5, ("twice", (0, 0), (0, 1))),
    ("x.{9 - l // 2}.{e % 3}", 30, 4, ("twice", (0, 0), (0, 3))),
    ("x.{9 - l // 2}.{l % 2}.{e % 3}.{e // 3}", 30, 4, ("negative", (20, 0))),
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


@pytest.mark.parametrize("key, layers, experts, want", [
    ("h.{l // 2}.{l % 2}", 2000, 1, None),
    ("h.{l // 2}.{l % 2}", 10**9, 1, None),
    ("h.{l // 2}.{l % 2}.{e // 3}.{e % 3}", 10**6, 10**6, None),
    ("x.{l}.experts.{e // 2}", 1000, 1024, ("twice", (0, 0), (0, 1))),
    ("x.{(l % 997) * 64 + e}", 10**6, 64, ("twice", (0, 0), (997, 0))),   # l mod 997: first back at 997
    ("x.{l % 2}.{l // 2 + 1000*e}", 10**6, 10**6, ("twice", (0, 1), (2000, 0))),  # (l // 2) < 1000 before
    ("x.{999999 - l // 2}.{l % 2}.{e}", 3 * 10**6, 10**6, ("negative", (2000000, 0))),
    # 500 - l // 7 - e % 9 first < 0 in the row where l // 7 = 493, at its first e with e % 9 = 8
    ("x.{500 - l // 7 - e % 9}.{l}.{e}", 10**6, 10**6, ("negative", (3451, 8))),
])
def test_quasi_affine_keys_of_large_boxes(key, layers, experts, want):
    """Answers known by hand, past what the listing reaches."""
    assert key_problem(key, {}, layers, experts) == want


@pytest.mark.parametrize("key, layers, experts, why", [
    ("x.{l}.{e}.{l * e}", 1000, 1024, "its field `{l * e}` multiplies two numbers computed from `l` or `e`, and "
     "its 1,024,000 keys are too many to list (the first 100,000 are sound)"),
    ("x.{l}.{e // (l + 1)}.{e % (l + 1)}", 10**6, 2, "its field `{e // (l + 1)}` divides by a number computed "
     "from `l` or `e`"),
    ("x.{l}0.{e}", 10**6, 2, "its field `{l}` touches a digit or another field, so keys with different numbers "
     "can be alike"),
    ("x.{l % 20000}.{l // 20000}", 10**6, 1, "its field `{l % 20000}` is affine in `l` and `e` only on each of "
     "20,000 classes (`l` mod 20000): too many to compare"),
])
def test_keys_the_proof_cannot_reach_are_unproved_above_the_listing(key, layers, experts, why):
    """Sound for their first LISTED keys, and too many keys to list all: not proved, and said why."""
    problem = key_problem(key, {}, layers, experts)
    assert problem[0] == "unproved" and problem[1].startswith(why), problem
    assert layers * experts > LISTED


def test_the_listing_still_finds_an_early_problem_above_its_limit():
    """A key the proof cannot reach, past LISTED keys, whose problem lies in its first LISTED."""
    assert key_problem("x.{l * e}", {}, 10**6, 10**6) == ("twice", (0, 0), (0, 1))
    assert key_problem("x.{l}{e}", {}, 1000, 1024) == ("twice", (1, 10), (11, 0))


UP = "model.layers.{l}.mlp.experts.{e}.up_proj.weight"


def big_qwen(tmp_path, key: str | None = None, layers: int = 1000, old: str = UP):
    """specs/qwen3_moe.snf at `layers` layers (every one sparse: `dense_layers` all zeros) and 1024 experts, its
    key `old` (up_proj's) replaced by `key`."""
    text = (REPO / "specs" / "qwen3_moe.snf").read_text()
    text = re.sub(r"(?m)^(  n_layer : int = )\d+", rf"\g<1>{layers}", text)
    text = re.sub(r"(?m)^(  dense_layers : list\[int, n_layer\] = )\[[^\]]*\]", rf"\g<1>{[0] * layers}", text)
    text = re.sub(r"(?m)^(  n_expert : int = )\d+", r"\g<1>1024", text)
    if key is not None:
        assert f'"{old}"' in text
        text = text.replace(f'"{old}"', f'"{key}"')
    return write_spec(tmp_path, text, "big.snf")


def test_a_1000_layer_1024_expert_spec_checks(tmp_path):
    rc, out, err = snfc("check", str(big_qwen(tmp_path)))
    assert rc == 0, out + err


def test_two_layers_per_key_index_check_at_2000_layers(tmp_path):
    """`{l // 2}` with `{l % 2}` beside it: each layer's key its own, proved on l mod 2."""
    key = "model.layers.{l // 2}.self_attn.{l % 2}.q_proj.weight"
    rc, out, err = snfc("check", str(big_qwen(tmp_path, key, 2000, "model.layers.{l}.self_attn.q_proj.weight")))
    assert rc == 0, out + err


@pytest.mark.parametrize("key, says", [
    ("model.mlp.experts.{l + e}.up", "gives `model.mlp.experts.1.up` at l = 0, e = 1 and at l = 1, e = 0"),
    ("model.layers.{l}.experts.{1000 + l - e}.up",
     "gives a negative number at l = 0, e = 1001 (for the defaults): model.layers.0.experts.-1.up"),
    ("model.layers.{l}.mlp.experts.{e // 2}.up_proj.weight",  # two experts to a key
     "gives `model.layers.0.mlp.experts.0.up_proj.weight` at l = 0, e = 0 and at l = 0, e = 1"),
])
def test_a_bad_key_of_a_1000_layer_spec_is_located(tmp_path, key, says):
    path = big_qwen(tmp_path, key)
    rc, out, err = snfc("check", str(path))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if key in text)
    assert rc == 1 and f"big.snf:{line}:22: error: the key `{key}` {says}" in out + err, out + err


def test_a_key_check_cannot_prove_is_a_located_error(tmp_path):
    """Not quasi-affine, with 1,024,000 keys: more than check lists, so an error, not a pass."""
    key = "model.layers.{l}.mlp.experts.{e}.scale.{l * e}.up_proj.weight"
    path = big_qwen(tmp_path, key)
    rc, out, err = snfc("check", str(path))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if key in text)
    says = (f"big.snf:{line}:22: error: check cannot prove the key `{key}` sound for the defaults: its field "
            f"`{{l * e}}` multiplies two numbers computed from `l` or `e`, and its 1,024,000 keys are too many to "
            f"list (the first 100,000 are sound)")
    assert rc == 1 and says in out + err, out + err
