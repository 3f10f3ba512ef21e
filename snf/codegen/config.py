"""The generated `Config`: its fields, their types, the conditions on them, and derived dims."""

from __future__ import annotations

from .. import ir
from ..ir import ScalarT
from ..names import Namespace
from .emit import Emitter


def field_rows(gen) -> list[dict]:
    rows = []
    for c in gen.model.config:
        default = None if c.default is ir.MISSING else _literal(c.default)
        kind = f"tuple[{c.item_kind}, ...]" if c.item_kind else c.kind  # a list field holds a tuple
        rows.append({"name": c.name, "type": kind, "default": default,
                     "comment": f"{gen.spec_file}:{c.span.line}"})
    return sorted(rows, key=lambda r: r["default"] is not None)  # fields without defaults come first


def _literal(value) -> str:
    """A default as Python: a list field's one value repeated as `(v,) * n`, not n items."""
    if isinstance(value, tuple) and len(value) > 4 and len(set(map(repr, value))) == 1:
        return f"({value[0]!r},) * {len(value)}"
    return repr(value)


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


def condition_rows(gen) -> list[str]:
    """The rows of `_CONFIG_CHECKS`, which `Config.__post_init__` checks (`_check_config`) in the
    order `ir.Model.config_conditions` gives (each can be evaluated once those before it hold): a
    condition `(holds, message, fields)`, or a number computed from the config `(number, bounds,
    what, where, fields)`, None where its condition does not hold."""
    em = Emitter(gen, "config", Namespace(), cfg="c")
    rows = []
    for c in gen.model.config:  # a list field's declared length, first: the checks after may read its items
        if c.length is not None:
            where = f"{gen.spec_file}:{c.span.line}"
            want, code = gen.show((c.length,))[1:-1], em.dim(c.length, 5)
            want = want[1:-1] if want.startswith("(") and want.endswith(")") else want
            count = want if want.isdigit() else f"{want} = {{{code}}}"
            message = f"`{c.name}` must have {count} items ({where}); got {{len(c.{c.name})}}"
            rows.append(f"(lambda c: len(c.{c.name}) == {code}, lambda c: f{message!r}, ()),")
        if c.choices:  # an item the spec does not know would be taken for none of its kinds
            where = f"{gen.spec_file}:{c.span.line}"
            known = "{" + ", ".join(map(repr, c.choices)) + "}"
            rows.append(f"(lambda c: set(c.{c.name}) <= {known}, {c.choices_message() + ' (' + where + ')'!r}, "
                        f"({c.name!r},)),")
    for c in gen.model.config_conditions():
        where = f"{gen.spec_file}:{c.span.line}"
        if isinstance(c, ir.ValueCheck):
            number = em.code(c.value)
            if c.when:  # computed only under these conditions
                number = f"{em.code(c.value, 1)} if {' and '.join(em.code(w, 3) for w in c.when)} else None"
            bounds = (c.low, c.high, c.low_open)
            rows.append(f"(lambda c: {number}, {bounds!r}, {c.what!r}, {where!r}, {tuple(c.fields)!r}),")
            continue
        if isinstance(c, ir.Constraint):
            num, den = em.dim(c.cond.num, 21), em.dim(c.cond.den, 21)
            fields = sorted(c.cond.num.symbols() | c.cond.den.symbols())
            shown = tuple(f for f in fields if f in gen.config_fields)
            rows.append(f"(lambda c: {_under(em, f'{num} % {den} == 0', c.when)}, {c.why + ' (' + where + ')'!r}, "
                        f"{shown!r}),")
            continue
        # the checker's own sentence or the comparison
        rows.append(f"(lambda c: {_under(em, f'{em.dim(c.lhs, 5)} {c.op} {em.dim(c.rhs, 5)}', c.when)}, "
                    f"{c.message(gen.model.display) + ' (' + where + ')'!r}, {tuple(c.fields)!r}),")
    return rows


def _under(em: Emitter, condition: str, when: tuple) -> str:
    """`condition`, required only where its statement runs (`when`, config conditions)."""
    return f"{condition} if {' and '.join(em.code(w, 3) for w in when)} else True" if when else condition
