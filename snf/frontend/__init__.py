"""Stage 1: text -> syntax IR (`ir.Spec`). A spec is in the SNF DSL (dsl.py) unless its first line
of code starts with `SNF_MODEL`, the abstract model notation (notation/). Both share lark_common.py;
their parse errors become diagnostics, never exceptions."""

from __future__ import annotations

from .. import ir
from ..diagnostics import Reporter
from ..source import Source, Span
from .dsl import MAX_NODE_DEPTH, parse_dsl, too_deep
from .lark_common import nesting_too_deep

MAX_DEPTH = 48  # bracket nesting; deeper specs are refused, not crashed on
MAX_BYTES = 2_000_000


def parse(src: Source, r: Reporter) -> ir.Spec | None:
    """Parse one spec in either notation; on failure report and return None."""
    text = src.text
    if len(text) > MAX_BYTES:
        r.error("too-large", f"the spec is larger than {MAX_BYTES} bytes", Span(1, 1, 1, 2))
        return None
    deep = nesting_too_deep(text, MAX_DEPTH)
    if deep:
        r.error("too-large", f"brackets nest more than {MAX_DEPTH} deep", Span(deep[0], deep[1], deep[0], deep[1] + 1))
        return None
    if first_code_line(text).startswith("SNF_MODEL"):
        from .notation import parse_model_notation  # a large package: imported for notation specs only
        spec = parse_model_notation(src, r)
    else:
        spec = parse_dsl(src, r)
    deep = too_deep(list(spec.decls + spec.body + spec.mappings + spec.config_maps)) if spec is not None else None
    if deep is not None:  # either notation: later stages recurse over the syntax IR
        r.error("too-large", f"expressions and blocks nest more than {MAX_NODE_DEPTH} deep here", deep.span,
                "split the expression with `let` values")
        return None
    return spec


def first_code_line(text: str) -> str:
    """The first line that is neither blank nor a comment (which notation a file is in)."""
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return stripped
    return ""
