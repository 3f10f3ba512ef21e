"""The generated `Config`: its fields, their types, the conditions on them, and derived dims."""

from __future__ import annotations

from .. import ir
from ..dims import Dim
from ..ir import ScalarT
from ..names import Namespace
from .emit import Emitter


def field_rows(gen) -> list[dict]:
    rows = []
    for c in gen.model.config:
        default = None if c.default is ir.MISSING else repr(c.default)
        rows.append({"name": gen.config_name(c.name), "type": c.kind, "default": default,
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
            code = em.dim(d.dim) if other not in (None, d.name) else _without_self_alias(gen, d.dim, em)
            if code.startswith("(") and code.endswith(")") and code.count("(") == 1:
                code = code[1:-1]
        kind = "int" if d.dim is not None else \
            ("float" if isinstance(d.value.ty, ScalarT) and d.value.ty.kind == "float" else "bool")
        rows.append({"name": gen.config_name(d.name), "type": kind, "code": code, "line": d.span.line})
    return rows


def condition_rows(gen) -> list[dict]:
    """What `Config.__post_init__` checks, in an order where each check can be evaluated: lower
    bounds first (a divisor must not be 0 when a divisibility is checked), then the rest."""
    em = Emitter(gen, "config", Namespace(), cfg="self")
    bounds, rest = [], []
    for c in gen.model.checks:
        if gen.is_runtime_check(c):
            continue
        fields = sorted(c.lhs.symbols() | c.rhs.symbols())
        shown = ", ".join(f"{f}={{self.{f}}}" for f in fields)
        msg = (f"expected {gen.show((c.lhs,))[1:-1]} {c.op} {gen.show((c.rhs,))[1:-1]} "
               f"({gen.spec_file}:{c.span.line}); got {shown}")
        if c.why:  # the checker's own sentence (spec names, numbers and backticks: safe in an f-string)
            msg = f"{c.why} ({gen.spec_file}:{c.span.line}); got {shown}"
        row = {"cond": f"not {em.dim(c.lhs, 5)} {c.op} {em.dim(c.rhs, 5)}", "message": msg}
        (bounds if c.op in (">=", ">") and c.rhs.value is not None else rest).append(row)
    for c in gen.model.constraints:
        num, den = em.dim(c.cond.num, 21), em.dim(c.cond.den, 21)
        fields = sorted(c.cond.num.symbols() | c.cond.den.symbols())
        shown = ", ".join(f"{f}={{self.{f}}}" for f in fields if f in gen.config_fields)
        rest.append({"cond": f"{num} % {den} != 0", "message": f"{c.why} ({gen.spec_file}:{c.span.line}); got {shown}"})
    return bounds + rest


def _without_self_alias(gen, d: Dim, em: Emitter) -> str:
    """A derived dim's own definition (its property must not refer to itself)."""
    saved = gen.derived_by_dim
    gen.derived_by_dim = {k: v for k, v in saved.items() if k != d}
    try:
        return d.render(em.atom)
    finally:
        gen.derived_by_dim = saved
