"""Whether a per-layer checkpoint key is sound for the defaults: every layer's (and expert's) key is
computed, none negative, none divides by zero and no two are alike.

Proved, at a cost that does not grow with the layer and expert counts, where every field is
quasi-affine: built from `l`, `e`, numbers and config ints with + - *, and // and % by a number
(`{l // 2}`, `{2*(l // 3) + e % 4}`). Such a field repeats a pattern every P layers and Q experts:
on each class l = r + P*u, e = s + Q*v (0 <= r < P, 0 <= s < Q) it is c + A*u + B*v, with A and B
the same for every class. So its least value on a class is at a corner, and two alike keys are an
integer solution of one linear system per pair of classes. Other keys are listed in row-major
order, the first LISTED of them; past those, a key is not proved ("unproved")."""

from __future__ import annotations

from fractions import Fraction
from itertools import islice, product
from math import gcd, lcm

from ..weight_mapping import eval_field, field_names, key_parts, parse_field

LISTED = 100_000  # keys listed at most where the proof does not apply: above it, the key is "unproved"
CLASSES = 10_000  # classes of (l, e) the proof computes the fields on, at most (a few evaluations each)
PAIRS = 100_000  # pairs of classes whose keys can meet that the proof compares, at most
DIGITS = frozenset("0123456789")
VARIABLES = frozenset({"l", "e"})


class _Unproved(Exception):
    """Why the proof does not apply to a key: a clause naming the field."""


def key_problem(key: str, values: dict, layers: int, experts: int):
    """The first (l, e) in row-major order (0 <= l < layers, 0 <= e < experts) at which the key
    fails, as listing its keys in that order finds it: ("zero", at), ("missing", name),
    ("negative", at) or ("twice", earlier, at); None when there is none; ("unproved", why) when
    the proof does not apply, there are more than LISTED keys and none of the first LISTED fails."""
    parts = key_parts(key)
    fields = [parse_field(text) for text in parts[1::2]]
    if not fields or layers < 1 or experts < 1:
        return None
    # a missing name or a constant divisor of 0 fails at every (l, e): (0, 0) finds it first
    problem = _listed(parts, fields, values, 1, 1)
    if problem is not None:
        return problem
    try:
        return _proved(parts, fields, values, layers, experts)
    except _Unproved as why:
        problem = _listed(parts, fields, values, layers, experts)
        if problem is not None or layers * experts <= LISTED:
            return problem
        return ("unproved", f"{why}, and its {layers * experts:,} keys are too many to list (the first {LISTED:,} are sound)")


def _proved(parts: list[str], fields: list, values: dict, layers: int, experts: int):
    """key_problem from the fields' form on each class of (l, e); _Unproved where they have none, or
    where the classes (or the pairs of them to compare) are too many."""
    texts = parts[1::2]
    touching = _touching(parts)
    if touching is not None:
        raise _Unproved(f"its field `{{{texts[touching]}}}` touches a digit or another field, so keys with "
                        f"different numbers can be alike")
    forms = [_quasi_affine(text, tree, values) for text, tree in zip(texts, fields)]
    period = (lcm(*(f[0] for f in forms)), lcm(*(f[1] for f in forms)))
    count = min(period[0], layers) * min(period[1], experts)
    if count > CLASSES:
        raise _Unproved(_too_many(texts, forms, period, count, layers, experts))
    slopes = [(int(a * period[0]), int(b * period[1])) for _, _, a, b in forms]  # whole: see _quasi_affine
    classes = product(range(min(period[0], layers)), range(min(period[1], experts)))
    constants = _constants(texts, fields, values, period, slopes, classes)
    gens, moves, kernel = _lattice(slopes)
    groups = _groups(constants, gens)
    if sum(len(group) ** 2 for group in groups) > PAIRS:
        raise _Unproved(_too_many(texts, forms, period, count, layers, experts))
    negatives = (_class_negative(k, c, slopes, period, layers, experts) for k, c in constants.items())
    negative = min(filter(None, negatives), default=None)
    return _earlier(negative, _first_repeat(groups, moves, kernel, period, layers, experts))


def _touching(parts: list[str]):
    """The index of the first field whose number cannot be read back from the key (a digit beside it,
    or a field beside it), None where there is none: then two keys are alike exactly when their
    field values are."""
    literals = parts[::2]
    last = len(literals) - 1
    for i, text in enumerate(literals):
        if i > 0 and (i < last and not text or text[:1] in DIGITS):
            return i - 1
        if i < last and text[-1:] in DIGITS:
            return i
    return None


def _quasi_affine(text: str, tree, values: dict):
    """(P, Q, a, b) of a field that is a*l + b*e plus a part repeating every P layers and Q experts,
    a*P and b*Q whole numbers; _Unproved, naming the field, where it is not such a field."""
    try:
        return _periodic(tree, values)
    except _Unproved as why:
        raise _Unproved(f"its field `{{{text}}}` {why}") from None


def _periodic(tree, values: dict):
    """_quasi_affine of a subtree. Over its period a part grows by a whole number (a*P), so `// d`
    and `% d` of it repeat once that growth is a multiple of d: after d / gcd(d, a*P) periods."""
    if tree[0] != "op":
        return 1, 1, Fraction(tree == ("name", "l")), Fraction(tree == ("name", "e"))
    op, left, right = tree[1:]
    if op in ("+", "-"):
        (p, q, a, b), (p2, q2, a2, b2) = _periodic(left, values), _periodic(right, values)
        sign = 1 if op == "+" else -1
        return lcm(p, p2), lcm(q, q2), a + sign * a2, b + sign * b2
    reads = [bool(field_names(side) & VARIABLES) for side in (left, right)]
    if op == "*":
        if all(reads):
            raise _Unproved("multiplies two numbers computed from `l` or `e`")
        inner, k = (right, eval_field(left, values)) if reads[1] else (left, eval_field(right, values))
        p, q, a, b = _periodic(inner, values)
        return p, q, a * k, b * k
    if reads[1]:
        raise _Unproved(f"{'divides' if op == '//' else 'takes `%`'} by a number computed from `l` or `e`")
    d = eval_field(right, values)  # not 0: key_problem has computed the field at (0, 0)
    p, q, a, b = _periodic(left, values)
    p, q = p * abs(d) // gcd(d, int(a * p)), q * abs(d) // gcd(d, int(b * q))
    return (p, q, a / d, b / d) if op == "//" else (p, q, Fraction(0), Fraction(0))


def _too_many(texts: list[str], forms: list, period: tuple, count: int, layers: int, experts: int) -> str:
    """Why there are too many classes to compare, naming the field with the most classes of its own."""
    i = max(range(len(forms)), key=lambda i: min(forms[i][0], layers) * min(forms[i][1], experts))
    mods = " and ".join(f"`{name}` mod {m}" for name, m in zip("le", period) if m > 1)
    return (f"its field `{{{texts[i]}}}` is affine in `l` and `e` only on each of {count:,} classes ({mods}): "
            f"too many to compare")


def _constants(texts: list[str], fields: list, values: dict, period: tuple, slopes: list, classes) -> dict:
    """{(r, s): c}: field i is c_i + A_i*u + B_i*v at l = r + P*u, e = s + Q*v; checked one period
    along l and one along e from every class (_Unproved where a check fails, which the form forbids)."""
    (p, q), at, out = period, dict(values), {}

    def value(tree, layer, expert):
        at["l"], at["e"] = layer, expert
        return eval_field(tree, at)

    for r, s in classes:
        c = tuple(value(f, r, s) for f in fields)
        for text, f, ci, (a, b) in zip(texts, fields, c, slopes):
            if value(f, r + p, s) != ci + a or value(f, r, s + q) != ci + b:
                raise _Unproved(f"its field `{{{text}}}` does not follow the form check computed for it")
        out[r, s] = c
    return out


def _class_negative(k: tuple, c: tuple, slopes: list, period: tuple, layers: int, experts: int):
    """The first (l, e) of class k at which some field is negative, from the class's own (u, v) box."""
    (r, s), (p, q) = k, period
    rows = [(a, b, ci) for (a, b), ci in zip(slopes, c)]
    uv = _first_negative(rows, (layers - r + p - 1) // p, (experts - s + q - 1) // q)
    return None if uv is None else (r + p * uv[0], s + q * uv[1])


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


def _lattice(slopes: list):
    """The lattice of the vectors A*du + B*dv (A, B: the fields' slopes) in echelon form: generators,
    each with the row of its first nonzero entry (positive, and 0 in the generators after it), the
    (du, dv) giving each, and the (du, dv) giving 0 (none for rank 2, one step for rank 1, any for 0)."""
    i = next((k for k, (a, b) in enumerate(slopes) if a or b), None)
    if i is None:
        return [], [], [(1, 0), (0, 1)]
    a, b = slopes[i]
    g, x, y = _bezout(a, b)
    moves = [(x, y), (-b // g, a // g)]  # determinant 1: together they give every (du, dv)
    gens = [tuple(sa * m + sb * n for sa, sb in slopes) for m, n in moves]
    j = next((k for k, v in enumerate(gens[1]) if v), None)
    if j is None:
        return [(i, gens[0])], moves[:1], moves[1:]
    if gens[1][j] < 0:
        gens[1], moves[1] = tuple(-v for v in gens[1]), (-moves[1][0], -moves[1][1])
    return [(i, gens[0]), (j, gens[1])], moves, []


def _bezout(a: int, b: int) -> tuple[int, int, int]:
    """(g, x, y) with x*a + y*b = g = gcd(a, b) > 0 (a, b not both 0)."""
    x0, y0, x1, y1 = 1, 0, 0, 1
    while b:
        k = a // b
        a, b, x0, x1, y0, y1 = b, a - k * b, x1, x0 - k * x1, y1, y0 - k * y1
    return (a, x0, y0) if a > 0 else (-a, -x0, -y0)


def _groups(constants: dict, gens: list) -> list[list]:
    """The classes as [(class, ys)] by their constants less whole multiples ys of the generators:
    two classes' keys can meet only where these remainders are equal (their constants then differ
    by a lattice vector, so the fields' slopes can make up the difference)."""
    out: dict[tuple, list] = {}
    for k, c in constants.items():
        ys = []
        for row, g in gens:
            ys.append(y := c[row] // g[row])
            c = tuple(x - y * h for x, h in zip(c, g))
        out.setdefault(c, []).append((k, ys))
    return list(out.values())


def _first_repeat(groups: list, moves: list, kernel: list, period: tuple, layers: int, experts: int):
    """(earlier, at): the first (l, e) whose field values an earlier one has, and that one: the
    earliest meeting of any two classes of one group (a class with itself included). Before that
    `at`, every key is new, so only one earlier (l, e) has its key."""
    found = None
    for group in groups:
        for first, y1 in group:
            for second, y2 in group:
                # c(first) - c(second) = A*du + B*dv for this (du, dv), and for it plus any kernel step
                move = [sum((u - v) * m[axis] for u, v, m in zip(y1, y2, moves)) for axis in (0, 1)]
                meeting = _meeting(first, second, move, kernel, period, layers, experts)
                if meeting is not None and (found is None or meeting[1] < found[1]):
                    found = meeting
    return found


def _meeting(first: tuple, second: tuple, move: list, kernel: list, period: tuple, layers: int, experts: int):
    """The earliest point of class `second` whose key a point of class `first` before it has, and
    that point: they differ by D = (r2 - r1 + P*du, s2 - s1 + Q*dv), (du, dv) being `move` plus any
    whole combination of the kernel's steps."""
    (r1, s1), (r2, s2), (p, q) = first, second, period
    base = (r2 - r1 + p * move[0], s2 - s1 + q * move[1])
    if not kernel:
        return _apart(first, second, base, layers, experts)
    if len(kernel) == 2:  # any D of the classes: the first point of `first` and the next of `second`
        ways = (_apart(first, second, d, layers, experts)
                for d in (base, (base[0], base[1] + q), (base[0] + p, base[1])))
        return min(filter(None, ways), key=lambda way: way[1], default=None)
    step = (p * kernel[0][0], q * kernel[0][1])
    step = max(step, (-step[0], -step[1]))  # forward in row-major order
    t = _first_step(first, second, base, step, experts)
    return None if t is None else _apart(first, second, (base[0] + t * step[0], base[1] + t * step[1]), layers, experts)


def _first_step(first: tuple, second: tuple, base: tuple, step: tuple, experts: int):
    """The least t at which D = base + t*step is forward (past (0, 0) in row-major order) and keeps
    both points' e below `experts`, None where no t is forward. The t that meet every bound are a
    range, and the later point moves forward with t (strictly, where the step moves l: the l of
    two points of fixed classes differ by l2 - l1 = D's first entry), so its least is the meeting."""
    (dl, de), (a, b) = base, step
    bounds = []
    if a > 0:  # forward: the first t with dl + a*t > 0, or the t with dl + a*t == 0 where de + b*t > 0
        t = _above(dl, a)
        bounds.append(t - 1 if dl + a * (t - 1) == 0 and de + b * (t - 1) > 0 else t)
    elif dl == 0:  # a == 0 and b > 0: forward where de + b*t > 0
        bounds.append(_above(de, b))
    elif dl < 0:
        return None
    if b > 0:  # the earlier point's e = e2 - de, at least s2 - de, is below experts
        bounds.append(_above(experts - second[1] + de, b))
    elif b < 0:  # the later point's e, at least s1 + de, is below experts
        bounds.append(_above(experts - first[1] - de, -b))
    return max(bounds)


def _above(x: int, k: int) -> int:
    """The least t with x + k*t > 0 (k > 0)."""
    return -x // k + 1


def _apart(first: tuple, second: tuple, d: tuple, layers: int, experts: int):
    """(earlier, at): points of classes `first` and `second` that differ by d (at - earlier), `at`
    as early as can be (at least the class's first point, and d past the other's); None where d is
    not forward or the points do not fit in the box."""
    (r1, s1), (r2, s2), (dl, de) = first, second, d
    if (dl, de) <= (0, 0):
        return None
    at = (max(r2, r1 + dl), max(s2, s1 + de))
    earlier = (at[0] - dl, at[1] - de)
    return (earlier, at) if at[0] < layers and max(at[1], earlier[1]) < experts else None


def _earlier(negative, repeat):
    """The problem listing meets first; at one (l, e) a negative number is found before a repeat."""
    if negative is not None and (repeat is None or negative <= repeat[1]):
        return ("negative", negative)
    return None if repeat is None else ("twice", *repeat)


def _listed(parts: list[str], fields: list, values: dict, layers: int, experts: int):
    """key_problem by listing the first LISTED keys in row-major order (each field parsed once, by
    the caller): None where none of them fails."""
    seen: dict[str, tuple] = {}
    at = dict(values)
    for layer, expert in islice(product(range(layers), range(experts)), LISTED):
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
