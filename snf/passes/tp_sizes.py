"""The sizes the tensor-parallel pass reads off ops (snf/passes/tensor_parallel.py): the config sizes an
op reads for a value, the bounds of a slice, how a size grows with the sizes a rank divides."""

from __future__ import annotations

from .. import ir
from ..dims import Dim
from .caches import dim_of


def _sizes_read(model: ir.Model, e: ir.Op) -> list[Dim]:
    """The sizes `e` reads from the config: its arguments that are not tensors (shapes, bounds, counts)."""
    derived = {d.name: d.dim for d in model.derived if d.dim is not None and not d.opaque}
    out, stack = [], [a for _, a in e.args]
    while stack:
        a = stack.pop()
        if isinstance(getattr(a, "ty", None), ir.TensorT):
            continue
        if isinstance(a, ir.DimVal):
            out.append(a.dim)
        elif isinstance(a, ir.Ref) and a.kind in ("config", "dim"):
            out.append(derived.get(a.name) or Dim.sym(a.name))
        elif isinstance(a, ir.Op):
            stack += [x for _, x in a.args]
        elif isinstance(a, ir.TList):
            stack += list(a.items)
        elif isinstance(a, ir.TSlice):
            stack += [x for x in (a.lo, a.hi) if x is not None]
    return out


def _fields_read(d: Dim, derived: frozenset) -> set[str]:
    """The config names the generated code reads for `d`: a derived dim is read as its own property
    (`cfg.head_dim`, whole on every rank), any other atom by its field."""
    if d in derived:
        return set()
    out: set[str] = set()
    for a in d.atoms():
        if isinstance(a, str):
            out.add(a)
        elif Dim({((a, 1),): 1}) not in derived:
            out |= _fields_read(a.num, derived) | _fields_read(a.den, derived)
    return out


def _slice_bounds(e: ir.Op, axis: int, size: Dim) -> tuple[Dim | None, Dim | None, Dim]:
    """(start, stop, size) of `e`'s slice along `axis` (None: an open end, or a bound of no known value)."""
    it = e.arg("index").items[axis]
    lo = dim_of(it.lo) if it.lo is not None else Dim.const(0)
    return lo, dim_of(it.hi) if it.hi is not None else None, size


def _dims_read(e):
    """The dims an int expression reads (config fields, derived dims), as its code reads them."""
    if isinstance(e, ir.DimVal):
        yield e.dim
    elif isinstance(e, ir.Ref) and dim_of(e) is not None:
        yield dim_of(e)
    elif isinstance(e, ir.Op):
        for _, a in e.args:
            yield from _dims_read(a)


def degree(d: Dim, fields: set) -> int | None:
    """0 where `d` reads none of `fields` (a rank's sizes: each 1/tp of the whole), 1 where it is
    proportional to them (H * head_dim + G * N: a rank's value is 1/tp of it), None otherwise."""
    t = Dim.sym("__tp__")
    scaled = d.subs({f: Dim.sym(f) * t for f in fields})
    return 0 if scaled == d else 1 if scaled == d * t else None


def _tiling(slices, width: Dim) -> list | None:
    """The slices (start, stop, size, ...) in the order they cut [0, width) into consecutive pieces, each
    once; None where they do not."""
    at, out, left = Dim.const(0), [], list(slices)
    while left:
        nxt = next((s for s in left if s[0] is not None and s[0] == at), None)
        if nxt is None:
            return None
        left.remove(nxt)
        out.append(nxt)
        at = nxt[0] + nxt[2]
    return out if out and at == width else None


__all__ = ["degree"]
