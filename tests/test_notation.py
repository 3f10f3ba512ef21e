"""The SNF_MODEL notation (docs/notation.md): seed 000 read as written, and specs/nanogpt_model.snf.

Covers: the seed checks with exactly the documented warnings; the inferred parameter shapes;
the compiled modules run, train (loss falls over a few AdamW steps) and agree with the NumPy
interpreter; every syntax node the lowering builds points into the text; malformed notation
gives located diagnostics and exit 1, never a traceback.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import torch

from conftest import REPO, SEEDS_REL, seed_path, snfc, snfc_subprocess, unwrapped, write_spec
from snf import ir
from snf.api import load
from snf.compiler import analyze, generate_source
from snf.diagnostics import Reporter
from snf.interop import spec_state
from snf.interpret import interpret
from snf.frontend.notation import parse_model_notation
from snf.source import NO_SPAN, Source, Span

SEED = "000_a68dacb7665edf3e.txt"
SPEC = REPO / "specs" / "nanogpt_model.snf"
TINY = {"D": 32, "H": 4, "L": 2, "V": 29}


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    monkeypatch.setenv("SNF_COMPILE", "0")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: threads only contend (10x slower on a busy 2-core box)
    yield
    torch.set_num_threads(threads)


# (line, col, code, text in the message) for every diagnostic `snfc check` gives on seed 000
SEED_WARNINGS = {
    (11, 5, "unused", "param `H` is declared but never used"),
    (31, 12, "ambiguous", "no position embedding"),
    (31, 23, "implicit-shape", "`θ_embed` [V, D]"),
    (39, 19, "implicit-shape", "`θ_attn_Wq` [D, D], stacked over L layers as [L, D, D]"),
    (40, 19, "implicit-shape", "`θ_attn_Wk` [D, D]"),
    (41, 19, "implicit-shape", "`θ_attn_Wv` [D, D]"),
    (43, 9, "ambiguous", "attention is single-headed as written"),
    (53, 9, "ambiguous", "using 4*D"),
    (53, 19, "implicit-shape", "`θ_mlp_W1` [4*D, D]"),
    (55, 19, "implicit-shape", "`θ_mlp_W2` [D, 4*D]"),
    (67, 22, "ambiguous", "using LayerNorm with a weight and a bias"),
    (67, 30, "implicit-shape", "`θ_norm_attn_weight`, `θ_norm_attn_bias` [D] each"),
    (70, 16, "ambiguous", "using LayerNorm with a weight and a bias"),
    (70, 25, "implicit-shape", "`θ_norm_mlp_weight`, `θ_norm_mlp_bias` [D] each"),
    (86, 23, "implicit-shape", "`θ_unembed` [V, D]"),
}

# the shapes docs/notation.md gives for seed 000
SEED_SHAPES = {
    "θ_embed": "[V, D]", "θ_unembed": "[V, D]",
    "θ_attn_Wq": "[L, D, D]", "θ_attn_Wk": "[L, D, D]", "θ_attn_Wv": "[L, D, D]",
    "θ_mlp_W1": "[L, 4*D, D]", "θ_mlp_W2": "[L, D, 4*D]",
    "θ_norm_attn_weight": "[L, D]", "θ_norm_attn_bias": "[L, D]",
    "θ_norm_mlp_weight": "[L, D]", "θ_norm_mlp_bias": "[L, D]",
}


def _analyze_seed():
    path = seed_path(SEED)
    return analyze(Source.read(path))


def _shapes(model: ir.Model) -> dict:
    return {p.name: "[" + ", ".join(str(d) for d in p.ty.shape) + "]" for p in model.params}


# ------------------------------------------------------------------------------ seed 000 as written

def test_seed_000_checks_with_the_documented_warnings():
    seed_path(SEED)
    rc, out, err = snfc("check", f"{SEEDS_REL}/{SEED}")
    assert rc == 0, out + err
    assert "Success: 1 spec checked, 6 warnings" in err and "9 notes" in err
    result = _analyze_seed()
    assert all(d.severity == ("note" if d.code == "implicit-shape" else "warning") for d in result.diagnostics)
    got = {(d.span.line, d.span.col, d.code) for d in result.diagnostics}
    assert got == {w[:3] for w in SEED_WARNINGS}
    for line, col, code, text in SEED_WARNINGS:
        d = next(d for d in result.diagnostics if (d.span.line, d.span.col, d.code) == (line, col, code))
        assert text in d.message, (text, d.message)


def test_seed_000_inferred_shapes():
    result = _analyze_seed()
    assert result.ok
    m = result.model
    assert _shapes(m) == SEED_SHAPES
    assert {c.name: c.default for c in m.config} == {"D": 384, "H": 6, "L": 6, "V": 65}
    assert [(i.name, str(i.ty.shape[0]), str(i.ty.shape[1]), i.ty.dtype) for i in m.inputs] == \
        [("tok", "B", "T", "int64")]
    outs = {o.name: ("[" + ", ".join(map(str, o.ty.shape)) + "]", o.ty.dtype) for o in m.outputs}
    assert outs == {"logits": ("[B, T, V]", "float32"), "loss": ("[]", "float32")}


def test_seed_000_lowering_keeps_the_text_semantics():
    """Single-headed attention scaled by 1/√D, causal; no bias; loss on tokens shifted by one."""
    path = seed_path(SEED)
    code = unwrapped(generate_source(analyze(Source.read(path))))
    assert "scaled_dot_product_attention(" in code and "is_causal=True" in code
    assert "scale=1 / math.sqrt(cfg.D)" in code
    assert ".reshape(B, T, 1, cfg.D)" in code
    assert "dtype = self.θ_embed.weight.dtype" in code
    assert "_cross_entropy(logits, _next_tokens(tok, -100), -100, dtype, 'input tok', " in code  # fused in training:
    assert "_linear_cross_entropy(h, self.θ_unembed.weight, None, _next_tokens(tok, -100), -100, dtype, " \
           "'input tok', " in code
    model_code = code[code.index("class Block("):code.index("\ndef spec_parameters(")]  # the model, not the helpers
    model_code = re.sub(r"'[^'\n]*'", "''", model_code)  # its code, not its messages (tp_no_sequence's reason)
    assert "position" not in model_code and "_bias" not in model_code.replace("θ_norm_attn_bias", "").replace(
        "θ_norm_mlp_bias", "")


def test_every_syntax_node_points_into_the_text():
    path = seed_path(SEED)
    src = Source.read(path)
    r = Reporter(src)
    spec = parse_model_notation(src, r)
    assert spec is not None and spec.notation == "model"
    n_lines = len(src.lines)
    count = 0

    def walk(node):
        nonlocal count
        if isinstance(node, tuple):
            for n in node:
                walk(n)
            return
        if not dataclasses.is_dataclass(node):
            return
        for f in dataclasses.fields(node):
            v = getattr(node, f.name)
            if isinstance(v, Span):
                assert v != NO_SPAN and 1 <= v.line <= v.end_line <= n_lines, (type(node).__name__, f.name, v)
                count += 1
            else:
                walk(v)

    walk(spec.decls)
    walk(spec.body)
    assert count > 200


# ------------------------------------------------------------------------------ the modules run and train

def _train(mod, steps: int = 25) -> tuple[float, float]:
    torch.manual_seed(0)
    model = mod.Model(**TINY)
    tok = torch.randint(0, TINY["V"], (4, 16))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(steps):
        out = model(tok)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(out.loss.item())
    assert out.logits is None  # training: the loss fused with the head, no logits (docs/language.md 10.3)
    assert model(tok, return_logits=True).logits.shape == (4, 16, TINY["V"])
    assert all(np.isfinite(losses))
    return losses[0], losses[-1]


def test_seed_000_compiles_runs_and_trains(tmp_path):
    seed_path(SEED)
    out = tmp_path / "seed000.py"
    rc, _, err = snfc("compile", f"{SEEDS_REL}/{SEED}", "-o", str(out))
    assert rc == 0, err
    from conftest import fresh_module
    mod = fresh_module(out, "snf_test_seed000")
    first, last = _train(mod)
    assert last < 0.7 * first, (first, last)


def test_nanogpt_model_spec_trains():
    first, last = _train(load(SPEC))
    assert last < 0.7 * first, (first, last)


@pytest.mark.parametrize("which", ["seed", "spec"])
def test_matches_the_numpy_interpreter(which):
    path = seed_path(SEED) if which == "seed" else SPEC
    result = analyze(Source.read(path))
    assert result.ok
    mod = load(path)
    torch.manual_seed(1)
    model = mod.Model(**TINY).eval()
    with torch.no_grad():
        for p in model.parameters():  # larger than the default init, so the check has teeth
            p.normal_(0.0, 0.3)
    tok = torch.randint(0, TINY["V"], (2, 7))
    with torch.no_grad():
        got = model(tok)
    params = {k: v.detach().double().numpy() for k, v in spec_state(model).items()}
    want = interpret(result.model, params, {"tok": tok.numpy()}, config=TINY)
    np.testing.assert_allclose(got.logits.double().numpy(), want["logits"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.loss.item(), want["loss"], rtol=1e-5, atol=1e-5)


def test_nanogpt_model_spec_is_multi_head_and_checks():
    rc, out, err = snfc("check", "specs/nanogpt_model.snf")
    assert rc == 0, out + err
    result = analyze(Source.read(SPEC))
    assert not [d for d in result.diagnostics if d.code == "ambiguous"]
    shapes = _shapes(result.model)
    assert shapes["θ_attn_Wq"] == "[L, D, D]" and shapes["θ_attn_Wo"] == "[L, D, D]"
    assert shapes["θ_mlp_W_proj"] == "[L, D, 4*D]" and shapes["θ_pos"] == "[P, D]"
    assert "θ_unembed" not in shapes  # the head is tied to θ_embed
    code = generate_source(result, "specs/nanogpt_model.snf")
    assert ".unflatten(2, (cfg.H, cfg.D // cfg.H))" in code  # heads split
    assert "scale=1 / math.sqrt(cfg.D // cfg.H)" in code


def test_generated_nanogpt_model_is_current():
    result = analyze(Source.read(SPEC))
    want = generate_source(result, "specs/nanogpt_model.snf")
    assert (REPO / "generated" / "nanogpt_model.py").read_text(encoding="utf-8") == want, \
        "run `python -m snf compile specs/nanogpt_model.snf`"


# ------------------------------------------------------------------------------ malformed notation

HEADER = "SNF_MODEL tiny\n\nDomain:\n    B : batch\n    T : sequence_position\n    D : embedding_dim\n" \
         "    V : vocab\n\nState:\n    h ∈ ℝ[B, T, D]\n    tok ∈ ℕ[B, T]\n\nParameters:\n    θ_e\n    θ_u\n\n"
BODY = "Init:\n    h = Embed(tok, θ_e)\n\nlogits = Linear(h, θ_u)\n"

BAD = {
    # name: (text, [(line, col, code, text in message)])
    "missing-colon": ("SNF_MODEL m\n\nDomain\n    B : batch\n", [(3, 7, "syntax", "expected ':'")]),
    "unclosed-call": (HEADER + "Init:\n    h = Embed(tok, θ_e\n\nlogits = Linear(h, θ_u)\n",
                      [(18, 14, "syntax", "`(` is never closed")],
                      "add the matching `)`; the parser gave up at 'logits' (line 20)"),
    "bad-character": (HEADER + BODY.replace("Linear(h, θ_u)", "Linear(h, θ_u) $"), [(20, 25, "syntax", "'$'")]),
    "bad-indent": (HEADER + "Init:\n        h = Embed(tok, θ_e)\n      h = h\n", [(19, 1, "indent", "unindent")]),
    "unknown-op": (HEADER + BODY.replace("Linear(h", "Linaer(h"), [(20, 10, "unknown-op", "`Linaer`")]),
    "unknown-set": (HEADER.replace("ℝ[B, T, D]", "ℚ[B, T, D]") + BODY, [(10, 9, "bad-type", "unknown set")]),
    "role-clash": (HEADER + BODY.replace("Linear(h, θ_u)", "Linear(Norm(h, θ_e), θ_u)"),
                   [(20, 25, "arg-kind", "used as a norm's weight and bias here but as an embedding table")]),
    "shape-clash": (HEADER + BODY.replace("Linear(h, θ_u)", "Linear(h, θ_e) + h"),
                    [(20, 10, "shape-mismatch", "cannot combine [B, T, V] with [B, T, D]")]),
    "wrong-state-step": (HEADER.replace("h ∈", "h[2] ∈") + "Init:\n    h[1] = Embed(tok, θ_e)\n",
                         [(18, 5, "syntax", "must be `h[0]`")]),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_malformed_notation_gives_located_errors(name, tmp_path):
    text, want, *hint = BAD[name]
    path = write_spec(tmp_path, text, f"{name}.snf")
    result = analyze(Source.read(path))
    errors = [d for d in result.diagnostics if d.severity == "error"]
    got = {(d.span.line, d.span.col, d.code) for d in errors}
    assert got == {w[:3] for w in want}, [(d.span.line, d.span.col, d.code, d.message) for d in errors]
    for line, col, code, msg in want:
        d = next(d for d in errors if (d.span.line, d.span.col, d.code) == (line, col, code))
        assert msg in d.message, (msg, d.message)
    if hint:
        assert errors[0].hint == hint[0]
    rc, out, err = snfc("check", str(path))
    assert rc == 1 and f"{path.name}:{want[0][0]}:{want[0][1]}: error:" in out


def test_malformed_notation_never_tracebacks(tmp_path):
    """In a fresh interpreter: exit 1, a located message, no traceback, for every bad input."""
    for name, (text, want, *_) in sorted(BAD.items())[:3]:
        path = write_spec(tmp_path, text, f"{name}.snf")
        proc = snfc_subprocess("check", str(path))
        assert proc.returncode == 1, proc.stderr
        assert "Traceback" not in proc.stdout + proc.stderr
        assert f":{want[0][0]}:{want[0][1]}: error:" in proc.stdout


def test_small_valid_notation_and_its_defaults(tmp_path):
    """Without a loss nothing says logits range over V: the head defaults to square, with a warning."""
    path = write_spec(tmp_path, HEADER + BODY)
    result = analyze(Source.read(path))
    assert result.ok, result.diagnostics
    assert _shapes(result.model) == {"θ_e": "[V, D]", "θ_u": "[D, D]"}
    assert [o.name for o in result.model.outputs] == ["logits"]
    amb = [d for d in result.diagnostics if d.code == "ambiguous"]
    assert [(d.span.line, d.span.col) for d in amb] == [(20, 10)]
    assert "output width of `Linear(h, θ_u)` is not determined by the text: using D" in amb[0].message

    with_loss = HEADER + BODY + "\nLoss:\n    CrossEntropy(logits, tok shifted by 1)\n"
    result = analyze(Source.read(write_spec(tmp_path, with_loss)))
    assert result.ok and _shapes(result.model) == {"θ_e": "[V, D]", "θ_u": "[V, D]"}
    assert not [d for d in result.diagnostics if d.code == "ambiguous"]


def test_declared_shapes_are_used_and_checked(tmp_path):
    text = HEADER.replace("    θ_u\n", "    θ_u ∈ ℝ[V, D]\n") + BODY
    result = analyze(Source.read(write_spec(tmp_path, text)))
    assert result.ok and _shapes(result.model)["θ_u"] == "[V, D]"
    assert not [d for d in result.diagnostics if "θ_u" in d.message]
    bad = HEADER.replace("    θ_u\n", "    θ_u ∈ ℝ[V, V]\n") + BODY
    result = analyze(Source.read(write_spec(tmp_path, bad)))
    errors = [(d.span.line, d.span.col, d.code) for d in result.diagnostics if d.severity == "error"]
    assert errors == [(20, 20, "shape-mismatch")], result.diagnostics
