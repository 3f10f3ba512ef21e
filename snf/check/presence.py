"""Optional-presence analysis: which optional inputs and conditional parameters are known to exist
at each point (`if past exists:`, `... if flag else None`), and the error where one may be absent."""

from __future__ import annotations

from .. import ir
from ..diagnostics import Related
from ..ir import ErrorT, TensorT
from ..source import Span
from .messages import article
from .conditions import expr_key


class Presence:
    """Mixed into `Checker`. The set known to exist is `self.present`, kept per scope."""

    def group(self, name: str) -> frozenset:
        """Optional inputs that share a run-time dim one of them introduces (`past_keys` and
        `past_values` share T_past) are given together or not at all: one `exists` covers all."""
        group, changed = {name}, True
        while changed:
            changed = False
            for i in self.inputs:
                if i.optional and i.name not in group:
                    dims = {s for d in i.ty.shape for s in d.symbols()}
                    member_dims = {s for member in group for t in self.inputs if t.name == member
                                   for d in t.ty.shape for s in d.symbols()}
                    if any(self.owner.get(s) in group or self.owner.get(s) == i.name for s in dims & member_dims):
                        group.add(i.name)
                        changed = True
        return frozenset(group)

    def presence(self, test: ir.TExpr) -> frozenset:
        """Optional inputs known to exist where `test` holds; after a broken test, all of them
        (so one mistake in a guard is not reported again at every use it guards)."""
        if isinstance(test, ir.IsPresent):
            return self.group(test.name)
        if isinstance(test.ty, ErrorT):
            return frozenset(i.name for i in self.inputs if i.optional)
        if _flag(test) is not None:  # parameters declared `if flag else None` (or `if not flag`)
            return frozenset(t.name for t in self.params + self.buffers if _flag(t.condition) == _flag(test)) \
                | self.declared_under(test)
        if isinstance(test, ir.Op) and test.op == "and":  # each side's, and the tensors declared under both
            return self.presence(test.arg("a")) | self.presence(test.arg("b")) | self.layer_presence(test) \
                | self.declared_under(test)
        return self.layer_presence(test) | self.declared_under(test)

    def else_presence(self, test: ir.TExpr) -> frozenset:
        """What is known to exist where `test` fails (an `else`): parameters declared under the
        opposite flag (`if not flag` for a test `flag`), or under the layer condition's negation."""
        flag = _flag(test)
        if flag is not None:
            return frozenset(t.name for t in self.params + self.buffers if _flag(t.condition) == (flag[0], not flag[1])) \
                | self.declared_under(test, negate=True)
        return self.layer_presence(test, negate=True) | self.declared_under(test, negate=True)

    def declared_under(self, test: ir.TExpr, negate: bool = False) -> frozenset:
        """Tensors of every layer declared `name : ... if cond else None` whose condition is `test`
        (with `negate`, its opposite: an `else`), a derived bool read as what it computes (`has_p =
        P > 0` and `P > 0` are one condition)."""
        key = _normal(expr_key(self.unfolded(test)), negate)
        return frozenset(t.name for t in self.params + self.buffers if t.condition is not None and t.layer_var is None
                         and _normal(expr_key(self.unfolded(t.condition))) == key)

    def unfolded(self, e: ir.TExpr) -> ir.TExpr:
        """`e` with each derived value that is no dim (a bool, a float) replaced by its expression."""
        values = {d.name: d.value for d in self.derived if d.dim is None}
        return ir.rewrite(e, lambda x: self.unfolded(values[x.name]) if isinstance(x, ir.Ref) and x.name in values
                          else None)

    def layer_presence(self, test: ir.TExpr, negate: bool = False) -> frozenset:
        """Tensors declared `name[l] : ... if cond else None` whose condition is `test` (with
        `negate`, `not test`: an `else`), written with the loop's variable for `l`: they exist on the
        layers where it holds. `not (a == b)` is `a != b`, and so on for each comparison."""
        if not self.loops:
            return frozenset()
        var, key = self.loops[-1]["var"], _normal(expr_key(test), negate)
        return frozenset(t.name for t in self.params + self.buffers
                         if t.layer_var is not None and _normal(expr_key(t.condition, {t.layer_var: var})) == key)

    def must_exist(self, t: ir.TExpr, span: Span) -> bool:
        """Report a use of a value that may be absent here; False when it may be."""
        if isinstance(t, ir.Ref) and t.kind in ("param", "buffer") and any(
                p.name == t.name and p.layer_var for p in self.params + self.buffers):
            return False  # a tensor of some layers read whole: `stacked-index` reports it (loops.py)
        if isinstance(t.ty, TensorT) and t.ty.maybe_none:
            name = t.name if isinstance(t, ir.Ref) else getattr(t, "name", "value")
            ref_kind = t.kind if isinstance(t, ir.Ref) else ""
            kind = {"input": "optional input", "param": "conditional parameter", "buffer": "conditional buffer",
                    "layer_param": "conditional parameter"}.get(ref_kind, "conditional value")
            guard = f"`if {name} exists:`" if kind == "optional input" else "the condition it is declared under"
            layered = next((p for p in self.params + self.buffers if p.name == name and p.layer_var), None)
            if layered is not None and isinstance(t, ir.Ref) and t.kind == "layer_param" and self.loops:
                kind = "parameter that exists on some layers only"
                guard = (f"`if {self.source_text(layered.condition.span)}:` (its declared condition, with "
                         f"`{self.loops[-1]['var']}` for `{layered.layer_var}`)")
            related = ()
            if isinstance(t, ir.Ref) and t.name in self.decl_spans:
                how = "optional" if kind == "optional input" else "conditional"
                related = (Related(self.decl_spans[t.name], f"`{name}` declared {how} here"),)
            hint = f"guard this use with {guard}"
            if self.present:
                hint += f"; only {', '.join(f'`{p}`' for p in sorted(self.present))} is known to exist here"
            self.r.error("optional-unguarded", f"`{name}` is {article(kind)} {kind} and may be absent here", span,
                         hint=hint, related=related)
            return False
        return True

    def input_groups(self) -> tuple:
        """Optional inputs given together or not at all, each group in declaration order."""
        order = [i.name for i in self.inputs]
        return tuple(sorted({tuple(sorted(self.group(i.name), key=order.index))
                             for i in self.inputs if i.optional and len(self.group(i.name)) > 1}))


_NEGATED = {"eq": "ne", "ne": "eq", "lt": "ge", "ge": "lt", "gt": "le", "le": "gt"}


def _normal(key: tuple, negate: bool = False) -> tuple:
    """A condition's key (conditions.expr_key) with its `not`s taken into comparisons: `not (a == b)` is
    `a != b`, `not not c` is `c`."""
    while key and key[0] == "not":
        key, negate = key[1][1], not negate
    if not negate:
        return key
    if key and key[0] in _NEGATED:
        return (_NEGATED[key[0]],) + key[1:]
    return ("not", ("a", key))


def _flag(test) -> tuple[str, bool] | None:
    """(field, negated) for a test that is a config field (`flag`) or its negation (`not flag`)."""
    negated = isinstance(test, ir.Op) and test.op == "not"
    inner = test.arg("a") if negated else test
    return (inner.name, negated) if isinstance(inner, ir.Ref) and inner.kind == "config" else None
