"""List-valued config fields (`layer_types : list[str]`): their length and one item. The checker
proves an index is in range (check/expressions.py, `e_Subscript`); these ops type and lower it.
"""

from __future__ import annotations

from ..ir import ScalarT, SeqT
from .registry import OpDef, OpError, Param, registrar

OPS: dict[str, OpDef] = {}
register = registrar(OPS)


def _seq(args) -> SeqT:
    if not isinstance(args["x"], SeqT):
        raise OpError("`x` must be a list-valued param (`name : list[K]`)", "x", code="arg-kind")
    return args["x"]


def _len_rule(ctx, args):
    return ScalarT("int", _seq(args).length)


def _item_rule(ctx, args):
    kind = _seq(args).kind
    return ScalarT(kind)


def _lower_item(call):
    """`cfg.layer_types[l]`; in a layer block, indexed by its own layer, the entry the block read when
    it was made (Emitter.layer_entry): a constant of its compiled graph, where an index by the layer
    number would compile a graph per layer."""
    entry = call.em.layer_entry(call.op)
    return entry if entry is not None else f"{call.code('x', 50)}[{call.code('i')}]"


register(OpDef("len", (Param("x", "list"),), _len_rule, numpy=lambda x: len(x),
               torch=lambda call: f"len({call.code('x')})",
               doc="The length of a list-valued param."))
register(OpDef("item", (Param("x", "list"), Param("i", "int")), _item_rule, numpy=lambda x, i: x[i],
               torch=_lower_item,
               doc="`xs[i]`: an item of a list-valued param, `i` a layer's number or a constant (the checker "
                   "proves it is in range)."))
