"""Long lines of generated modules are wrapped (snf/codegen/wrap.py) without changing the code: the
syntax tree is the one of the unwrapped text, no line of generated/ is over 160 characters, and
wrapping twice changes nothing."""

from __future__ import annotations

import ast

import pytest

from conftest import REPO
from snf.codegen import model as codegen_model
from snf.codegen.wrap import DATA_LIMIT, LIMIT, wrap
from snf.compiler import analyze, generate_source
from snf.source import Source
import specgen


def test_no_line_of_a_generated_module_is_over_160_characters():
    for path in sorted((REPO / "generated").glob("*.py")):
        longest = max(len(line) for line in path.read_text(encoding="utf-8").splitlines())
        assert longest <= 160, (path.name, longest)


def test_a_trailing_comment_goes_above_and_a_call_breaks_after_its_commas():
    line = "        y = torch.full((B, T, D), 0.0, dtype=self.weight.dtype, device=x.device)  # [B, T, D]  m.snf:9"
    assert wrap(line, limit=80).split("\n") == [
        "        # [B, T, D]  m.snf:9",
        "        y = torch.full((B, T, D), 0.0, dtype=self.weight.dtype, device=x.device)"]
    assert wrap(line, limit=64).split("\n") == [
        "        # [B, T, D]  m.snf:9",
        "        y = torch.full((B, T, D), 0.0, dtype=self.weight.dtype,",
        "                       device=x.device)"]


def test_a_statement_over_several_lines_and_strings_stay_as_they_are():
    text = 'f(a,\n  b)\ns = "' + "x" * 200 + '"\n'
    assert wrap(text, limit=40) == text


def test_a_long_line_inside_a_statement_over_several_lines_breaks_after_its_commas():
    """A table's long row (spec_parameters, CHECKPOINTS) wraps inside the brackets it continues."""
    row = "    'k_weight': ('layers.{l}.qkv.weight', (cfg.q_dim, cfg.head_dim*cfg.n_head), cfg.n_layer),"
    text = "return {\n" + row + "\n}\n"
    out = wrap(text, limit=60)
    assert out.split("\n")[1:4] == ["    'k_weight': ('layers.{l}.qkv.weight',",
                                     "                 (cfg.q_dim, cfg.head_dim*cfg.n_head),",
                                     "                 cfg.n_layer),"]
    assert ast.dump(ast.parse(out)) == ast.dump(ast.parse(text)) and wrap(out, limit=60) == out


@pytest.mark.parametrize("seed", range(0, 120, 3))
def test_wrapping_keeps_the_syntax_tree(seed, monkeypatch):
    """The raw text of a random spec's module and its wrapped text parse to the same tree."""
    text = specgen.build(specgen.RandomChooser(seed)).text
    result = analyze(Source.from_bytes("p.snf", text.encode()))
    if not result.ok:
        pytest.skip("rejected spec")
    made = generate_source(result, "p.snf")  # CHECKPOINTS wrapped at DATA_LIMIT, the rest at LIMIT
    monkeypatch.setattr(codegen_model, "wrap", lambda code, limit=LIMIT: code)
    raw = generate_source(result, "p.snf")
    wrapped = wrap(raw)
    assert ast.dump(ast.parse(raw)) == ast.dump(ast.parse(wrapped)) == ast.dump(ast.parse(made))
    assert wrap(wrapped) == wrapped
    assert max(len(line) for line in wrapped.splitlines()) <= max(LIMIT, 160)
    assert max(len(line) for line in made.splitlines()) <= max(LIMIT, DATA_LIMIT) <= 160
