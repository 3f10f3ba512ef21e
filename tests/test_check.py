"""The checker: located errors with exact text, seed 001's known errors, Config constraints, snf.load."""

from __future__ import annotations

import json
import re
import shutil
import textwrap

import pytest

from conftest import REPO, SEEDS_REL, seed_path, snfc, write_spec
from snf.compiler import analyze
from snf.source import Source

HEADER = textwrap.dedent("""\
    param:
      D : int = 4

    input:
      x : Tensor([B, D], float32)
      m : Tensor([B, D], float32)?

    """)


def check_text(tmp_path, body: str) -> tuple[int, list[str], str]:
    write_spec(tmp_path, HEADER + textwrap.dedent(body), "t.snf")
    rc, out, err = snfc("check", "t.snf", cwd=tmp_path)
    assert "internal error" not in err and "Traceback" not in out + err
    return rc, out.splitlines(), err


def test_linear_weight_stored_in_out(tmp_path):
    rc, lines, err = check_text(tmp_path, """\
        parameter:
          w : Tensor([D, 2*D], float32)

        output:
          y : Tensor([B, 2*D], float32)

        let y = linear(x + m if m exists else x, weight=w)
        """)
    assert rc == 1
    assert lines == [
        "t.snf:14:42: error: `w` is [D, 2*D] but `linear` takes [out, in] = [2*D, D] for the input "
        "`x + m if m exists else x` [B, D]  [shape-mismatch]",
        "  14 | let y = linear(x + m if m exists else x, weight=w)",
        "     |                                          ^~~~~~~~",
        "t.snf:9:3: note: `w` declared as [D, 2*D] here",
        "   9 |   w : Tensor([D, 2*D], float32)",
        "  hint: declare the weight transposed as [2*D, D], or use `matmul(x, weight)` for a plain x @ W",
    ]
    assert err.strip() == "Found 1 error in 1 file"


def test_optional_input_used_unguarded(tmp_path):
    rc, lines, _ = check_text(tmp_path, """\
        output:
          y : Tensor([B, D], float32)

        let y = x + m
        """)
    assert rc == 1
    assert lines == [
        "t.snf:11:13: error: `m` is an optional input and may be absent here  [optional-unguarded]",
        "  11 | let y = x + m",
        "     |             ^",
        "t.snf:6:3: note: `m` declared optional here",
        "   6 |   m : Tensor([B, D], float32)?",
        "  hint: guard this use with `if m exists:`",
    ]


def test_guards_make_optional_uses_legal(tmp_path):
    rc, lines, err = check_text(tmp_path, """\
        output:
          y : Tensor([B, D], float32)

        let y = x
        y = y + m if m exists
        if m exists:
            y = y * m
        let z = if m exists:
            m
        else: x
        y = y + z
        """)
    assert (rc, lines) == (0, []), lines
    assert err.strip() == "Success: 1 spec checked"


def test_unknown_name_with_suggestion(tmp_path):
    rc, lines, _ = check_text(tmp_path, """\
        output:
          y : Tensor([B, D], float32)

        let y = relu(xx)
        """)
    assert rc == 1
    assert "t.snf:11:14: error: `xx` is not defined  [unknown-name]" in lines
    i = lines.index("t.snf:11:14: error: `xx` is not defined  [unknown-name]")
    assert lines[i + 1:i + 4] == ["  11 | let y = relu(xx)", "     |              ^~", "  hint: did you mean `x`?"]


def test_stacked_parameter_with_wrong_leading_axis(tmp_path):
    rc, lines, _ = check_text(tmp_path, """\
        parameter:
          w : Tensor([3, D, D], float32)

        output:
          y : Tensor([B, D], float32)

        let y = x + m if m exists else x
        for l in 0..D-1:
            y = linear(y, weight=w[l])
        """)
    assert rc == 1
    assert lines[:5] == [
        "t.snf:16:26: error: `w` is [3, D, D], but the loop over `l` runs D times: a stacked parameter's "
        "first axis must match  [stacked-index]",
        "  16 |     y = linear(y, weight=w[l])",
        "     |                          ^~~~",
        "t.snf:9:3: note: `w` declared here",
        "   9 |   w : Tensor([3, D, D], float32)",
    ]


def test_every_error_is_reported_not_just_the_first(tmp_path):
    rc, lines, err = check_text(tmp_path, """\
        output:
          y : Tensor([B, D], float32)

        let y = x + m if m exists else x
        y = reshape(x, [B, D, 1])
        let y = x
        z = x
        """)
    assert rc == 1
    firsts = [ln for ln in lines if ": error: " in ln]
    assert firsts == [
        "t.snf:12:1: error: `y` was [B, D] float32 and is re-assigned [B, D, 1] float32  [reassign-type]",
        "t.snf:13:5: error: `y` is already declared  [redefinition]",
        "t.snf:14:1: error: `z` is assigned but was never declared  [assign-undeclared]",
    ]
    assert err.strip() == "Found 3 errors in 1 file"


def test_output_shape_mismatch_and_divisibility(tmp_path):
    write_spec(tmp_path, textwrap.dedent("""\
        param:
          D : int = 4
          H : int = 2

        input:
          x : Tensor([B, T, D], float32)

        output:
          y : Tensor([B, T, H, D], float32)

        let y = reshape(x, [B, T, H, D // H])
        """), "t.snf")
    rc, out, _ = snfc("check", "t.snf", cwd=tmp_path)
    assert rc == 1
    assert out.splitlines()[0] == ("t.snf:9:3: error: output `y` is declared [B, T, H, D] float32 but computed as "
                                   "[B, T, H, (D // H)] float32  [output-mismatch]")


def test_reshape_records_the_divisibility_constraint():
    text = textwrap.dedent("""\
        param:
          D : int = 4
          H : int = 2
          hd = D // H

        input:
          x : Tensor([B, T, D], float32)

        output:
          y : Tensor([B, T, H, hd], float32)

        let y = reshape(x, [B, T, H, hd])
        """)
    result = analyze(Source.from_text("t.snf", text))
    assert result.ok, result.diagnostics
    (c,) = result.model.constraints
    assert str(c.cond) == "D % H == 0" and c.span.line == 12


# ------------------------------------------------------------------------ seed 001

SEED_001 = "001_c5e4031d01631893.txt"


def test_seed_001_as_written_has_exactly_its_known_errors():
    seed_path(SEED_001)
    rc, out, err = snfc("check", "--format", "json", f"{SEEDS_REL}/{SEED_001}")
    assert rc == 1
    rows = json.loads(out)
    errors = {(r["code"], r["line"], r["column"]) for r in rows if r["severity"] == "error"}
    warnings = {(r["code"], r["line"], r["column"]) for r in rows if r["severity"] == "warning"}
    # past_keys and past_values share T_past, so they are given together: `if past_keys exists:`
    # covers both (line 87 is fine); the cache layout conflict is reported at each concat. The
    # writes at 114-115 are wrong on their own: without a cache the value is the else branch,
    # [B, T, H, head_dim], and the slot is [B, H, T_total, head_dim] (issue 10: an error in one
    # branch does not hide one after it).
    assert errors == {
        ("shape-mismatch", 107, 16),
        ("shape-mismatch", 110, 16),
        ("shape-mismatch", 114, 5),
        ("shape-mismatch", 115, 5),
        ("shape-mismatch", 142, 28),
        ("shape-mismatch", 146, 25),
    }
    assert ("fixed-length", 23, 20) in warnings
    assert len([r for r in rows if r["severity"] == "error"]) == 6  # one error per root cause


def test_seed_001_text_output_has_no_traceback():
    seed_path(SEED_001)
    rc, out, err = snfc("check", f"{SEEDS_REL}/{SEED_001}")
    assert rc == 1
    assert out.startswith(f"{SEEDS_REL}/{SEED_001}:23:20: warning: ")
    assert "Traceback" not in out + err and "internal error" not in err
    assert err.strip() == "Found 6 errors and 1 warning in 1 file"


# ------------------------------------------------------------------------ Config constraints

def test_config_divisibility_names_the_spec_line():
    import generated.nanogpt as ng
    with pytest.raises(ValueError, match=r"nanogpt\.snf:\d+") as info:
        ng.Config(n_embd=50, n_head=3)
    msg = str(info.value)
    assert "divisible" in msg and "n_embd=50" in msg and "n_head=3" in msg
    ng.Config(n_embd=48, n_head=3)  # fine


def test_sequence_longer_than_block_size_is_a_clear_error():
    import torch
    import generated.nanogpt as ng
    m = ng.Model(vocab_size=11, block_size=4, n_layer=1, n_head=1, n_embd=8)
    m(torch.zeros(1, 4, dtype=torch.long))  # T == block_size is fine
    with pytest.raises(ValueError) as info:
        m(torch.zeros(1, 5, dtype=torch.long))
    msg = str(info.value)
    assert "T_total = 5" in msg and "block_size = 4" in msg
    assert re.search(r"\(nanogpt\.snf:\d+\)$", msg), msg


def test_input_of_wrong_rank_is_a_clear_error():
    import torch
    import generated.nanogpt as ng
    m = ng.Model(vocab_size=11, block_size=4, n_layer=1, n_head=1, n_embd=8)
    with pytest.raises(ValueError, match=r"input idx must be \[B, T\] int64, got \[4\] int64"):
        m(torch.zeros(4, dtype=torch.long))


def test_input_of_wrong_dtype_is_a_clear_error():
    import torch
    import generated.nanogpt as ng
    m = ng.Model(vocab_size=11, block_size=4, n_layer=1, n_head=1, n_embd=8).eval()  # eval: caches by default
    for wrong in (torch.float32, torch.int32, torch.bool):
        name = str(wrong).replace("torch.", "")
        with pytest.raises(ValueError, match=rf"input idx must be \[B, T\] int64, got \[1, 4\] {name}$"):
            m(torch.zeros(1, 4, dtype=wrong))
    out = m(torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"input past_keys must be .* float32, got \[1, 1, 3, 1, 8\] int64"):
        m(torch.zeros(1, 1, dtype=torch.long), past_keys=out.new_keys.long(), past_values=out.new_values)
    m.double()  # a floating input takes any floating dtype: the model's own, after a cast
    double = m(torch.zeros(1, 1, dtype=torch.long), past_keys=out.new_keys.double(), past_values=out.new_values.double())
    assert double.logits.dtype == torch.float64


# ------------------------------------------------------------------------ snf.load

def test_load_returns_a_cached_module():
    import snf
    mod = snf.load(REPO / "specs" / "nanogpt.snf")
    assert hasattr(mod, "Config") and hasattr(mod, "Model")
    assert snf.load(str(REPO / "specs" / "nanogpt.snf")) is mod
    cfg = mod.Config(vocab_size=13, block_size=4, n_layer=1, n_head=2, n_embd=8)
    model = mod.Model(cfg)
    assert model(__import__("torch").zeros(2, 3, dtype=__import__("torch").long)).logits.shape == (2, 3, 13)


def test_load_compiles_a_changed_spec_anew(tmp_path):
    import snf
    path = tmp_path / "tiny.snf"
    shutil.copy(REPO / "tests" / "specs" / "tiny_mlp.snf", path)
    first = snf.load(path)
    path.write_text(path.read_text().replace("width : int = 8", "width : int = 6"))
    second = snf.load(path)
    assert second is not first
    assert (first.Config().width, second.Config().width) == (8, 6)


def test_load_of_a_bad_spec_raises_spec_error(tmp_path):
    import snf
    from snf.diagnostics import SpecError
    path = write_spec(tmp_path, HEADER + "output:\n  y : Tensor([B, D], float32)\n\nlet y = x + m\n", "bad.snf")
    with pytest.raises(SpecError) as info:
        snf.load(path)
    assert [d.code for d in info.value.diagnostics if d.severity == "error"] == ["optional-unguarded"]
    assert ":11:13: error: `m` is an optional input" in str(info.value)


def test_gqa_heads_that_do_not_divide_get_a_hint(tmp_path):
    rc, lines, _ = check_text(tmp_path, """\
        output:
          y : Tensor([B, 1, 6, 4], float32)

        let q = full([B, 1, 6, 4], 1.0)
        let k = full([B, 1, 4, 4], 1.0)
        let y = flash_attention(q, k, k)
        """)
    assert rc == 1
    assert ("t.snf:13:28: error: `k` has 4 heads and `q` 6: in grouped-query attention each key/value "
                        "head serves the same number of query heads, so 4 must divide 6  [shape-mismatch]") in lines
    assert "  hint: with 6 query heads, the key/value heads can be 1, 2, 3, 6; the layout is [B, T, H, head_dim] " \
           "for q and [B, T, KVH, head_dim] for k and v" in lines


def test_gqa_heads_of_config_values_are_a_config_constraint(tmp_path):
    write_spec(tmp_path, textwrap.dedent("""\
        param:
          H : int = 6
          KVH : int = 2
        input:
          q : Tensor([B, T, H, 4], float32)
          k : Tensor([B, T, KVH, 4], float32)
        output:
          y : Tensor([B, T, H, 4], float32)
        let y = flash_attention(q, k, k, causal=True)
        """), "gqa.snf")
    import snf
    mod = snf.load(tmp_path / "gqa.snf")
    assert mod.Config(H=6, KVH=3).H == 6
    with pytest.raises(ValueError, match=r"H must be divisible by KVH \(gqa.snf:9\); got H=6, KVH=4"):
        mod.Config(H=6, KVH=4)


def test_did_you_mean_suggests_only_a_close_name():
    """Another letter is another word: `sum` is not `sub`, `sigmoid` not `mod`, `sin` not `int` (the
    suggestions before sum, sigmoid and sin were ops); a letter left out, doubled or swapped, or a close
    spelling, is suggested (snf.names.close_name)."""
    from snf.names import close_name
    from snf.ops import all_ops
    ops = [op for op in all_ops() if op not in ("sum", "sigmoid", "sin")]
    assert [close_name(n, ops) for n in ("sum", "sigmoid", "sin", "zzz")] == [None] * 4
    assert [close_name(n, list(all_ops())) for n in ("summ", "sigmiod", "cso")] == ["sum", "sigmoid", "cos"]
    assert [close_name(n, ops) for n in ("softmux", "relue", "lienar", "gelu_")] == ["softmax", "relu", "linear", "gelu"]
    assert close_name("xx", ["x", "y"]) == "x"


CONDITIONAL = """\
param:
  D : int = 4
  P : int = 2
  has_p = P > 0

input:
  x : Tensor([B, D], float32)

parameter:
  W : Tensor([D, D], float32)
  E : Tensor([P, D], float32) if P > 0 else None

output:
  y : Tensor([B, D], float32)

let y = x @ W
"""


@pytest.mark.parametrize("body, error", [
    ("if P > 0:\n    y = y + sum(E, axis=0)\n", False),  # the parameter's own condition
    ("if has_p:\n    y = y + sum(E, axis=0)\n", False),  # a bool derived from it
    ("if P > 0 and D > 1:\n    y = y + sum(E, axis=0)\n", False),  # it and more
    ("if not (P > 0):\n    y = y * 2.0\nelse:\n    y = y + sum(E, axis=0)\n", False),  # the else of its negation
    ("if P <= 0:\n    y = y * 2.0\nelse:\n    y = y + sum(E, axis=0)\n", False),
    ("y = y + sum(E, axis=0) if has_p else y\n", False),
    ("if P > 0:\n    y = y * 2.0\nelse:\n    y = y + sum(E, axis=0)\n", True),  # where it is absent
    ("if D > 0:\n    y = y + sum(E, axis=0)\n", True),  # another condition
    ("if P > 0 or D > 1:\n    y = y + sum(E, axis=0)\n", True),
])
def test_a_conditional_parameter_under_a_guard_that_implies_its_condition(body, error, tmp_path):
    """`E : ... if P > 0 else None` used under `if P > 0:` (or a bool derived from it, or a
    conjunction with it) is present there, as under a bare flag; anywhere else it is refused."""
    path = write_spec(tmp_path, CONDITIONAL + body, "cond.snf")
    result = analyze(Source.read(path))
    codes = [d.code for d in result.diagnostics if d.severity == "error"]
    assert codes == (["optional-unguarded"] if error else []), codes
    if not error:  # and the module runs with the parameter and without it
        import snf
        import torch
        module = snf.load(path)
        for p in (0, 2):
            model = module.Model(module.Config(P=p))
            assert model(torch.ones(3, 4)).shape == (3, 4)
