"""Checkpoint mappings (`checkpoint FMT:` sections) as plain data: checked by `check`, emitted by `codegen`,
evaluated by `interop`. Nothing in a mapping is ever evaluated as code."""

from __future__ import annotations

from . import ir


class MappingError(ValueError):
    def __init__(self, message: str, span=None):
        super().__init__(message)
        self.span = span


def _int(e: ir.Expr, what: str) -> int:
    neg = isinstance(e, ir.Unary) and e.op == "-"
    base = e.operand if neg else e
    if isinstance(base, ir.Num) and isinstance(base.value, int):
        return -base.value if neg else base.value
    raise MappingError(f"{what} must be an integer literal", getattr(e, "span", None))


def encode_mapping(e: ir.Expr, rank: int | None = None):
    """A checkpoint source expression as nested tuples; nothing in it is ever evaluated as code.
    `rank`, when known, is the rank of the parameter it fills (one layer's), which a `split`'s
    axis must lie within."""
    if isinstance(e, ir.Str):
        return ("key", e.value)
    if isinstance(e, ir.Attribute) and e.attr == "T":
        if rank is not None and rank < 2:
            raise MappingError(f"`.T` swaps the last two axes, and the tensor this fills has {rank} "
                               f"axis{'es' * (rank != 1)}", e.span)
        return ("T", encode_mapping(e.value, rank))
    if isinstance(e, ir.BoolOp) and e.op == "or":
        return ("or", encode_mapping(e.left, rank), encode_mapping(e.right, rank))
    if isinstance(e, ir.Call) and e.func == "split":
        kw = {k.name: k.value for k in e.kwargs}
        if len(e.args) != 2 or set(kw) != {"axis", "index"}:
            raise MappingError('write split("key", n, axis=i, index=j)', e.span)
        n, axis, index = _int(e.args[1], "n"), _int(kw["axis"], "axis"), _int(kw["index"], "index")
        if n < 1:
            raise MappingError(f"split into {n} parts: n must be at least 1", e.args[1].span)
        if not 0 <= index < n:
            raise MappingError(f"index={index} is not one of the {n} parts (0 to {n - 1})", kw["index"].span)
        if rank is not None and not -rank <= axis < rank:
            raise MappingError(f"axis={axis} is out of range for the rank-{rank} tensor this fills", kw["axis"].span)
        return ("split", encode_mapping(e.args[0], rank), n, axis, index)
    raise MappingError("unsupported checkpoint source expression", getattr(e, "span", None))


def mapping_keys(e: ir.Expr) -> list[str]:
    if isinstance(e, ir.Str):
        return [e.value]
    if isinstance(e, ir.BoolOp):
        return mapping_keys(e.left) + mapping_keys(e.right)
    return []
