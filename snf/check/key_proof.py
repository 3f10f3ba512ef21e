"""Whether a per-layer checkpoint key is sound for the defaults: every layer's (and expert's) key is
computed, none negative, none divides by zero and no two are alike. Proved from the fields' affine
form (a*l + b*e + c) where every field has one, at a cost that does not grow with the layer and
expert counts; listed key by key otherwise, up to LISTED keys."""

from __future__ import annotations

from math import gcd

from ..checkpoints import eval_field, is_affine, key_parts, parse_field

LISTED = 100_000  # keys listed at most where a field is not affine: above it, nothing is proved
DIGITS = frozenset("0123456789")


def key_problem(key: str, values: dict, layers: int, experts: int):
    """The first (l, e) in row-major order (0 <= l < layers, 0 <= e < experts) at which the key
    fails, as listing its keys in that order finds it: ("zero", at), ("missing", name),
    ("negative", at) or ("twice", earlier, at); None when there is none (or too many to list)."""
    parts = key_parts(key)
    fields = [parse_field(text) for text in parts[1::2]]
    if not fields or layers < 1 or experts < 1:
        return None
    # a missing name or a constant divisor of 0 fails at every (l, e): (0, 0) finds it first
    problem = _listed(parts, fields, values, 1, 1)
    if problem is not None:
        return problem
    if all(map(is_affine, fields)) and _delimited(parts):
        rows = [_coefficients(f, values) for f in fields]
        return _earlier(_first_negative(rows, layers, experts), _first_repeat(rows, layers, experts))
    return None if layers * experts > LISTED else _listed(parts, fields, values, layers, experts)


def _delimited(parts: list[str]) -> bool:
    """Whether each field's number can be read back from the key (no digit beside a field, no two
    fields side by side), so two keys are alike exactly when their field values are."""
    literals = parts[::2]
    last = len(literals) - 1
    for i, text in enumerate(literals):
        if (0 < i < last and not text) or (i > 0 and text[:1] in DIGITS) or (i < last and text[-1:] in DIGITS):
            return False
    return True


def _coefficients(tree, values: dict) -> tuple[int, int, int]:
    """(a, b, c) of an affine field a*l + b*e + c, from its values at three points."""
    c = eval_field(tree, {**values, "l": 0, "e": 0})
    return eval_field(tree, {**values, "l": 1, "e": 0}) - c, eval_field(tree, {**values, "l": 0, "e": 1}) - c, c


def _first_negative(rows, layers: int, experts: int):
    """The first (l, e) at which some a*l + b*e + c is negative: for each field, the first row whose
    minimum (at e = 0 or e = experts - 1) is negative, then the first e in it."""
    found = []
    for a, b, c in rows:
        low = c + min(0, b * (experts - 1))
        layer = 0 if low < 0 else low // -a + 1 if a < 0 else layers
        if layer < layers:
            start = a * layer + c
            found.append((layer, 0 if start < 0 else start // -b + 1))
    return min(found, default=None)


def _first_repeat(rows, layers: int, experts: int):
    """(earlier, at): the first (l, e) whose field values an earlier one has, and that one. They
    differ by a step (p, q) with a*p + b*q = 0 for every field: none but 0 when the rows have rank
    2; any when all are 0; else the multiples of one primitive step, forward in row-major order."""
    row = next(((a, b) for a, b, _ in rows if a or b), None)
    if row is None:
        return None if layers * experts < 2 else ((0, 0), (0, 1) if experts > 1 else (1, 0))
    g = gcd(*row)
    p, q = -row[1] // g, row[0] // g
    if (p, q) < (0, 0):
        p, q = -p, -q
    if any(a * p + b * q for a, b, _ in rows) or p >= layers or abs(q) >= experts:
        return None
    # the first l with l - p in range is p, the first e with e - q in range max(0, q)
    return (0, max(0, -q)), (p, max(0, q))


def _earlier(negative, repeat):
    """The problem listing meets first; at one (l, e) a negative number is found before a repeat."""
    if negative is not None and (repeat is None or negative <= repeat[1]):
        return ("negative", negative)
    return None if repeat is None else ("twice", *repeat)


def _listed(parts: list[str], fields: list, values: dict, layers: int, experts: int):
    """key_problem by listing the keys in row-major order (each field parsed once, by the caller)."""
    seen: dict[str, tuple] = {}
    at = dict(values)
    for layer in range(layers):
        for expert in range(experts):
            at["l"], at["e"] = layer, expert
            try:
                numbers = [eval_field(f, at) for f in fields]
            except ZeroDivisionError:
                return ("zero", (layer, expert))
            except KeyError as err:  # a param without a default
                return ("missing", err.args[0])
            if any(n < 0 for n in numbers):
                return ("negative", (layer, expert))
            name = "".join(text + str(n) for text, n in zip(parts[::2], numbers)) + parts[-1]
            if name in seen:
                return ("twice", seen[name], (layer, expert))
            seen[name] = (layer, expert)
    return None
