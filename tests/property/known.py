"""Open findings the property test steps around until they are fixed.

Each id names a spec in findings.py whose test is xfail(strict=True) while the id is here.
While a finding is open, the generator does not build the construct that triggers it
(`specgen` reads `OPEN`), and a mutant that trips it anyway is recognised by `classify` and
counted as that finding instead of failing the run. Fixing one: delete it here; its test in
test_findings.py then must pass, and the generator builds the construct again.
"""

from __future__ import annotations

import re

OPEN: dict[str, str] = {
    # code generation (the lead's, issue 9 and the Config/codegen items of issue 10)
    "loop-device": "(property) full() in a layer loop that reads no outer tensor: no device to take",
    "loop-reads-written-slice": "a layer-loop Block reads a value the loop writes per layer",
    "per-layer-write-late": "a per-layer write stores the value's last state in the layer",
    "write-through-view": "an indexed write changes earlier views of the value",
    "write-through-alias": "an indexed write through an alias changes the caller's input",
    "static-cache-reassigned": "generate's preallocated cache path breaks when the cache value is "
                               "re-assigned or written outside the per-layer write",
    "generate-token-range": "(property) generate is emitted though the logits have more classes than the token "
                            "table has rows",
    "fully-masked-rows": "fully masked attention rows: NaN in the interpreter, finite in torch (issue 12)",
}

# What a failure looks like for each open finding: a pattern over the failure message
# (the traceback's last lines included) and, optionally, one over the spec text.
_SIGNS: list[tuple[str, str, str | None]] = [
    ("loop-whole-param", r"'Model' object has no attribute", None),
    ("loop-reads-written-slice", r"NameError: name '\w+' is not defined", None),
    ("param-dtype", r"parameter \w+ is torch\.\w+, declared", None),
    ("param-dtype", r"requires gradients must be floating point", None),
    ("static-cache-reassigned", r"generate failed(?s:.*)(list indices|'list' object|not list|'list' and 'list')", None),
    ("cache-length", r"generate failed(?s:.*)is invalid for input of size", None),
    ("cache-pairing", r"generate failed(?s:.*)ValueError: input past_\w+ must be", None),
    ("generate-token-range", r"generate failed: its logits have \d+ classes", None),
    ("generate-required-input", r"generate failed(?s:.*)missing \d+ required positional argument", None),
    ("loop-device", r"no tensor in scope to take a device from", None),
    ("write-through-alias", r"modified its input", None),
    ("index-past-end", r"IndexError: index -?\d+ is out of bounds", None),
    ("index-past-end", r"IndexError: index out of range in self", None),
    ("negative-full-dim", r"negative dimension|negative size|has a negative size|must be \[[^\]]*-\w|"
                          r"invalid shape dimension -", None),
    ("negative-std", r"normal expects std >= 0", None),
    ("interpreter-empty-batch", r"the interpreter failed on valid inputs", None),
    ("literal-overflow", r"OverflowError|cannot be converted to type \w+ without overflow|Numerical result out of range",
     None),
    ("int-negative-power", r"Integers to negative integer powers", None),
    ("gather-3d", r"'weight' must be 2-D", None),
    ("int-div", r"is torch\.(float32|int64), declared (int64|int32|bool|float32)", None),
    ("int-targets", r"expected target dtype to be Long", None),
    ("bool-arithmetic", r"Subtraction, the `-` operator, with two bool tensors|Negation, the `-` operator, on a bool",
     None),
    ("full-scalar", r"SyntaxError", r"full\(\[\]"),
    ("literal-div-zero", r"ZeroDivisionError|float division by zero", None),
    ("sqrt-negative", r"math domain error", None),
    ("bare-shape", r"cannot lower _ShapeOf", None),
    ("runtime-divisibility", r"shape '\[.*\]' is invalid for input of size", None),
    ("empty-slice", r"has shape \[.*\]; declared axis \d+ is .* = -\d+", None),
    ("optional-leak", r"is None but not declared optional", None),
    ("negative-slice", r"has shape \[.*\]; declared axis", r"\[-?\w*:-|\[[^\]]*-\d+:"),
    ("loopvar-slice", r"has shape \[.*\]; declared axis", r"\b(l|i|layer)( \+ \d+)?[:\]]|:(l|i|layer)\b"),
    ("loopvar-index-local", r"index -?\d+ is out of bounds|out of range", r"\[(l|i|layer)\]"),
    ("fully-masked-rows", r"NaN in one and not the other", r"flash_attention"),
]

# Only mutants are matched on these: a number that differs is too broad a sign for the specs
# the generator builds, which avoid the construct instead.
_MUTANT_SIGNS: list[tuple[str, str, str | None]] = [
    ("write-through-view", r"differs from the interpreter", r"^\s*\w+\[[^\]]*\] = "),
    ("per-layer-write-late", r"differs from the interpreter", r"^\s+\w+\[(l|i|layer)\] = "),
    ("full-dtype-value", r"differs from the interpreter", r"full\(.*(int32|int64|bool)\)"),
]


def classify(message: str, text: str, mutant: bool = False) -> str | None:
    """The open finding a failure shows, or None for a failure nobody knows about yet."""
    for fid, pattern, spec_pattern in _SIGNS + (_MUTANT_SIGNS if mutant else []):
        if fid not in OPEN:
            continue
        if re.search(pattern, message) and (spec_pattern is None or re.search(spec_pattern, text, re.M)):
            return fid
    return None


def is_open(fid: str) -> bool:
    return fid in OPEN
