"""The generated `Config`: its fields, their types, the conditions on them, and derived dims."""

from __future__ import annotations

from .. import ir
from ..ir import ScalarT
from ..names import Namespace
from .emit import Emitter


def field_rows(gen) -> list[dict]:
    rows = []
    for c in gen.model.config:
        default = None if c.default is ir.MISSING else repr(c.default)
        kind = f"tuple[{c.item_kind}, ...]" if c.item_kind else c.kind  # a list field holds a tuple
        rows.append({"name": c.name, "type": kind, "default": default,
                     "comment": f"{gen.spec_file}:{c.span.line}"})
    return sorted(rows, key=lambda r: r["default"] is not None)  # fields without defaults come first


def derived_rows(gen) -> list[dict]:
    rows = []
    em = Emitter(gen, "config", Namespace(), cfg="self")
    for d in gen.model.derived:
        if d.alias_of is not None:
            continue
        code = em.code(d.value)
        if d.dim is not None and not d.opaque:  # its canonical form, so `D // H` reads as n_embd // n_head
            other = gen.derived_by_dim.get(d.dim)
            code = em.dim(d.dim) if other not in (None, d.name) else \
                d.dim.render(Emitter(gen, "config", Namespace(), cfg="self", defining=d.dim).atom)
            if code.startswith("(") and code.endswith(")") and code.count("(") == 1:
                code = code[1:-1]
        kind = "int" if d.dim is not None else \
            ("float" if isinstance(d.value.ty, ScalarT) and d.value.ty.kind == "float" else "bool")
        rows.append({"name": d.name, "type": kind, "code": code, "line": d.span.line})
    return rows


def condition_rows(gen) -> list[dict]:
    """What `Config.__post_init__` checks, in the order `ir.Model.config_conditions` gives (each
    can be evaluated once those before it hold): a row is an `if cond: raise ValueError(message)`,
    or a `call` of `_check_number` for a number computed from the config."""
    em = Emitter(gen, "config", Namespace(), cfg="self")
    rows = []
    for c in gen.model.config:  # a list field's declared length, first: the checks after may read its items
        if c.length is not None:
            where = f"{gen.spec_file}:{c.span.line}"
            want, code = gen.show((c.length,))[1:-1], em.dim(c.length, 5)
            want = want[1:-1] if want.startswith("(") and want.endswith(")") else want
            count = want if want.isdigit() else f"{want} = {{{code}}}"
            rows.append({"cond": f"len(self.{c.name}) != {code}",
                         "error": _raise(f"`{c.name}` must have {count} items ({where}); ",
                                         f"got {{len(self.{c.name})}}")})
    for c in gen.model.config_conditions():
        where = f"{gen.spec_file}:{c.span.line}"
        if isinstance(c, ir.ValueCheck):
            shown = ", ".join(f"{f}={{self.{f}}}" for f in c.fields)
            bounds = f"{c.low!r}, {c.high!r}, {c.low_open!r}"
            call = (f"_check_number(lambda: {em.code(c.value)}, {bounds}, {c.what!r}, {where!r}, "
                    f"f{shown!r})")
            if c.when:  # computed only under these conditions
                call = f"if {' and '.join(em.code(w, 3) for w in c.when)}:\n            {call}"
            rows.append({"call": call})
            continue
        if isinstance(c, ir.Constraint):
            num, den = em.dim(c.cond.num, 21), em.dim(c.cond.den, 21)
            fields = sorted(c.cond.num.symbols() | c.cond.den.symbols())
            shown = ", ".join(f"{f}={{self.{f}}}" for f in fields if f in gen.config_fields)
            rows.append({"cond": f"{num} % {den} != 0", "error": _raise(f"{c.why} ({where}); ", f"got {shown}")})
            continue
        shown = ", ".join(f"{f}={{self.{f}}}" for f in c.fields)
        # the checker's own sentence or the comparison (spec names, numbers and backticks: safe in an f-string)
        rows.append({"cond": f"not {em.dim(c.lhs, 5)} {c.op} {em.dim(c.rhs, 5)}",
                     "error": _raise(f"{c.message(gen.model.display)} ({where}); ", f"got {shown}")})
    return rows


_RAISE = " " * 12 + "raise ValueError("  # as the template indents it, in __post_init__


def _raise(what: str, got: str) -> str:
    """`raise ValueError(f'...')` of the message `what + got`, the two on their own lines when one
    line would be too long."""
    one = f"raise ValueError(f{what + got!r})"
    if len(_RAISE) + len(one) - len("raise ValueError(") <= 120:
        return one
    return f"raise ValueError(f{what!r}\n{' ' * len(_RAISE)}f{got!r})"
