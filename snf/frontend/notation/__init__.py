"""Stage 1 for the SNF_MODEL notation (docs/notation.md): text -> the DSL's syntax IR (`ir.Spec`).

The notation describes a model as a dynamical system: `Domain:` names the sizes, `State:` the
tensors that evolve (`h[L+1] ∈ ℝ[B,T,D]`), `Parameters:` groups of weights whose shapes are left
implicit, `Operator`s and `Transition`s that are inlined where they are used, a depth recurrence
`For l in [0 .. L-1]: apply Layer_l`, and a `Loss:`.

Lowering happens in three steps:

1. Lark parses the text (grammars/snf_model.lark) and `ToNotation` (syntax.py) builds small
   notation nodes; expressions reuse the DSL's syntax nodes (`ir.Name`, `ir.Call`, ...).
2. `Lowering` (lower.py) walks the program in execution order, inlining operators and
   transitions, and emits DSL statements (`ir.Let`, `ir.Assign`, `ir.For`) that call registry
   ops (states.py, expressions.py, builtins.py, attention.py). While it walks, it gives every tensor a shape
   whose unknown sizes are unification variables (sizes.py): a parameter's shape is whatever its
   uses force.
3. Sizes nothing forces get a documented default with an `ambiguous` warning; every parameter's
   inferred shape is reported once (`implicit-shape`), and the declarations are emitted
   (declarations.py). The checker then types the result exactly like a DSL spec.

Every syntax node carries a span into the notation text, so the checker's diagnostics point at
the notation.
"""

from __future__ import annotations

from ... import ir
from ...diagnostics import Reporter
from ...dims import DimError
from ...source import Source, Span
from ..lark_common import parse_items
from .lower import Lowering
from .syntax import ToNotation

# Keywords of the DSL that the notation does not have, where they start a line.
MISPLACED = {kw: (f"`{kw}`: the notation has no conditionals", "write a conditional model in the SNF DSL "
                  "(docs/language.md)") for kw in ("if", "else", "elif")}


def parse_model_notation(src: Source, r: Reporter) -> ir.Spec | None:
    """Parse and lower an SNF_MODEL text; on failure report and return None."""
    items = parse_items(src, r, "snf_model.lark", MISPLACED, ToNotation)
    if items is None or r.has_errors:
        return None
    try:
        spec = Lowering(src, r, items).run()
    except RecursionError:
        r.error("too-large", "the model nests too deeply", Span(1, 1, 1, 2))
        return None
    except DimError as e:
        r.error("too-large", str(e), Span(1, 1, 1, 2))
        return None
    return None if r.has_errors else spec
