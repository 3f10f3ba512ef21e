"""Facts about sizes: a condition on dims (an index within its axis, a size that is not
negative, a divisibility) is proved here, or becomes a check that the generated module makes.

`need(lhs, op, rhs, ...)` decides where each condition goes:

* proved for every value of the dims: nothing to do. Dims are sizes, so every symbol (a config
  field used as a size, a run-time dim, the loop variable) is >= 0, and so is a polynomial with
  no negative coefficient;
* about config fields only: a check `Config` makes when it is built, and it must hold for the
  config's defaults, or the spec is wrong (reported by the caller, where the condition arose);
* about run-time dims: a check on entry to `forward`, raising `ValueError` with the spec line.

The loop variable `l` of `for l in 0..n-1` is the dim symbol `l` inside the loop body, so
`pos[l:l + 1, :]` is `[1, D]`; a condition linear in `l` holds for every layer when it holds for
`l = 0` and `l = n - 1`, so those two are checked. A condition that is not linear in `l` (`l // 2`,
`l * l`) is refused: the endpoints would not cover the layers between them.
"""

from __future__ import annotations

from .. import ir
from ..dims import Dim, DimError, Divides, FloorDiv
from ..source import Span
from .conditions import conjuncts, expr_key, fewest
from .fold import FoldError

_FLIP = {">=": "<=", ">": "<"}


def nonneg(d: Dim, signed: frozenset = frozenset()) -> bool:
    """Whether `d` >= 0 for every value >= 0 of its symbols (those in `signed` may be negative)."""
    for mono, coeff in d.terms:
        if coeff < 0:
            return False
        for atom, power in mono:
            if power < 0 or atom in signed or (isinstance(atom, FloorDiv) and not (
                    nonneg(atom.num, signed) and nonneg(atom.den, signed))):
                return False
    return True


def _linear_in(d: Dim, var: str) -> bool:
    """Whether `d` is a + b * var with `var` in neither a nor b's floor divisions or powers."""
    for mono, _ in d.terms:
        for atom, power in mono:
            if atom == var and power != 1 or isinstance(atom, FloorDiv) and var in atom.num.symbols() | atom.den.symbols():
                return False
    return True


class Facts:
    """Mixed into `Checker`. `self.pending` holds the checks as they arose (`ir.Check`), each with
    where, the sentence its error says and what its statement runs under; `checks()` keeps each
    once."""

    def need(self, lhs: Dim, op: str, rhs: Dim, span: Span, why: str = "", prove: bool = True) -> bool:
        """Make `lhs op rhs` (op one of <= < >= > ==) hold: proved, or checked by the module.
        False when it is false for every value, or for the config's defaults: the caller
        reports that, where the condition comes from. Without `prove`, an `assert`, it is checked
        unless it holds for every value of its dims, negative ones included (it may be what keeps
        a config value that sizes nothing >= 0)."""
        lo, hi, rel = _flipped(lhs, op, rhs)
        gap = hi - lo if rel != "==" or self.loops else None
        proved = lo == hi if rel == "==" else prove and nonneg(gap - (1 if rel == "<" else 0), self.computed_ints())
        bent = next((loop["var"] for loop in self.loops if not _linear_in(gap, loop["var"])), None)
        if bent is not None and not proved:
            if span not in self.nonlinear_spans:
                self.nonlinear_spans.add(span)
                self.r.error("bad-constraint", f"this size or index depends on the layer `{bent}` other than "
                             f"linearly ({self.show_dim(lhs)} {op} {self.show_dim(rhs)} must hold), so snfc cannot "
                             f"check it for every layer", span,
                             hint=f"use `{bent}` only added or scaled (`{bent} + 1`, `2 * {bent}`)")
            return True  # reported here, once per place
        ok = True
        for a, b in self.over_layers(lhs, rhs):
            ok = self.need_one(a, op, b, span, why, prove) and ok
        return ok

    def over_layers(self, lhs: Dim, rhs: Dim) -> list[tuple[Dim, Dim]]:
        """The condition at the first and at the last layer, for each loop variable in it."""
        pairs = [(lhs, rhs)]
        for loop in self.loops:
            var = loop["var"]
            if var in lhs.symbols() | rhs.symbols():
                last = {var: loop["count"] - 1}
                first = {var: Dim.const(0)}
                pairs = [(a.subs(env), b.subs(env)) for a, b in pairs for env in (first, last)]
        return pairs

    def in_loop(self) -> dict:
        """What holds inside the open loops' bodies: each runs at least once there, so a count
        that is one symbol (n_layer) is >= 1 (read as n_layer + 1 with n_layer >= 0)."""
        return {loop["count"].as_symbol(): loop["count"] + 1 for loop in self.loops if loop["count"].as_symbol()}

    def need_one(self, lhs: Dim, op: str, rhs: Dim, span: Span, why: str, prove: bool = True) -> bool:
        """One condition, at one layer: proved, or pending as written (`T >= 2` says so)."""
        lo, hi, rel = _flipped(lhs, op, rhs)
        if rel == "==":
            if lo == hi:  # canonical equality: `2 * (T // 2) == T` is not proved by reading // as exact
                return True
            diff = hi - lo
            if diff.value is not None:
                return False
        else:
            diff = hi - lo - (1 if rel == "<" else 0)
            if diff.value is not None:
                return diff.value >= 0
            if prove and (nonneg(diff, self.computed_ints()) or nonneg(diff.subs(self.in_loop()),
                                                                        self.computed_ints())):
                return True
        symbols = lhs.symbols() | rhs.symbols()
        when = self.conditions()
        if not symbols - self.config_names() and self.may_run_at_defaults(when):
            value = self.at_defaults(diff)
            if value is not None and not (value == 0 if op == "==" else value >= 0):
                return False
        self.pending.append(ir.Check(lhs, rhs, span, op, why, when))
        return True

    def conditions(self) -> tuple:
        """What the statement being checked runs under, as a check can test it where it is made:
        the optional inputs known given (`if past exists`), then each part of the ifs' tests that
        reads config values, the inputs' sizes and presence only. A test of anything else (a
        local, the layer variable) is left out, and so is a loop's `n_layer >= 1` (the checks in
        its body are read at its first and last layer, and stats take them as holding): such a
        check is made more often than its statement runs, never less."""
        out = [ir.IsPresent(n) for n in sorted(frozenset(self.present) & self.optional_inputs())]
        seen = {expr_key(w) for w in out} | {expr_key(self.layers_guard(loop["count"])) for loop in self.loops}
        for test in self.guards:
            for c in conjuncts(test) if test is not None else ():
                if isinstance(c, ir.IsPresent) or isinstance(c.ty, ir.ErrorT) or expr_key(c) in seen \
                        or self.config_sources(c, on_entry=True) is None:
                    continue
                seen.add(expr_key(c))
                out.append(c)
        return tuple(out)

    def may_run_at_defaults(self, when: tuple) -> bool:
        """Whether a statement run under `when` may run with the config's defaults: none of its
        conditions on config values alone is false for them."""
        for w in when:
            if self.config_sources(w) is None:
                continue  # decided by the call: the inputs given, their sizes
            try:
                value, _ = self.number(w)
            except FoldError:
                continue
            if value is not None and not value:
                return False
        return True

    def optional_inputs(self) -> frozenset:
        return frozenset(i.name for i in self.inputs if i.optional)

    def checks(self) -> tuple:
        """The checks, each once under the fewest conditions (conditions.fewest), less those
        another one implies where it is made (`T_past <= block_size` beside `T_past + T <=
        block_size`): one error per failing condition, and fewer lines."""
        kept = fewest(self.pending, lambda c: (c.lhs, c.rhs, c.op))

        def implied(c: ir.Check) -> bool:
            when = {expr_key(w) for w in c.when}
            return c.op == "<=" and any(o is not c and o.op == "<=" and o.rhs == c.rhs and nonneg(o.lhs - c.lhs)
                                        and {expr_key(w) for w in o.when} <= when for o in kept)
        return tuple(c for c in kept if not implied(c))

    def computed_ints(self) -> frozenset:
        """Config ints that are computed (`h = int(D * r)`), not sizes given: they may be negative."""
        return frozenset(d.name for d in self.derived if d.opaque)

    def config_names(self) -> set:
        """The names a `Config` holds: its fields, and the ints it computes (`h = int(D * r)`)."""
        return {c.name for c in self.config} | self.computed_ints()

    def defaults(self) -> dict:
        """The int config names' values for the defaults, the computed ones included."""
        values = {c.name: c.default for c in self.config
                  if isinstance(c.default, int) and not isinstance(c.default, bool)}
        for d in self.derived:  # a computed int's number, folded once as it was declared (Folding.remember)
            value = self.folded.get(d.name, (None, False))[0] if d.opaque else None
            if isinstance(value, int) and not isinstance(value, bool):
                values[d.name] = value
        return values

    def at_defaults(self, d: Dim) -> int | None:
        """`d` for the config's defaults; None when a field has no default (or it does not compute)."""
        try:
            return d.evaluate(self.defaults())
        except (KeyError, DimError, ZeroDivisionError):
            return None

    def size(self, d: Dim, span: Span, what: str) -> bool:
        """`d` is the size of an axis: it must not be negative. False (and reported) when it is,
        always or for the config's defaults."""
        if self.need(Dim.const(0), "<=", d, span, f"{what} must not be negative"):
            return True
        shown = self.show_dim(d) if d.value is not None else f"{self.show_dim(d)} = {self.at_defaults(d)} with the " \
                                                              f"default config"
        self.r.error("bad-constraint", f"{what} is {shown}: a size cannot be negative", span,
                     hint="sizes are dims >= 0; change the expression, or the defaults in `param:`")
        return False

    def require(self, cond: Divides, span: Span) -> None:
        """`cond.num` divisible by `cond.den`: a check when a Config is built (config fields) or on
        entry to forward (run-time dims), written as `den * (num // den) == num`."""
        if cond.den.value is not None and cond.num.value is not None:
            return
        runtime = cond.num.symbols() | cond.den.symbols()
        why = f"{self.show_dim(cond.num)} must be divisible by {self.show_dim(cond.den)}"
        if runtime - self.config_names():
            self.need(cond.den * (cond.num // cond.den), "==", cond.num, span, why)
            return
        # under its config conditions only: Config cannot see the inputs a call gives
        when = tuple(w for w in self.conditions() if self.config_sources(w) is not None)
        keys = {expr_key(w) for w in when}
        if any(c.cond == cond and {expr_key(w) for w in c.when} <= keys for c in self.constraints):
            return
        num, den = self.at_defaults(cond.num), self.at_defaults(cond.den)
        if num is not None and den is not None and (den == 0 or num % den) and self.may_run_at_defaults(when):
            self.r.error("bad-constraint", f"{why}, but with the default config it is {num} and {den}", span,
                         hint="change the defaults in `param:`, or the shape")
        self.constraints.append(ir.Constraint(cond, span, why, when))

    def assumed(self, body: tuple) -> None:
        """What the proofs above assumed of the config, made checks (docs/language.md 3.1): every
        int field that sizes something (a shape, a slice bound, a loop count) is >= 0, and every
        divisor in a dim (`D // H`) is >= 1, checked when a Config is built (or on entry to
        forward, for a run-time divisor). Their defaults must satisfy them."""
        fields = {c.name: c for c in self.config if c.kind == "int"}
        dims = _dims(self, body)
        sized: dict[str, Span] = {}
        for d, (span, _, size) in dims.items():
            for s in sorted(d[0].symbols() & set(fields)) if size else ():
                sized.setdefault(s, span)
        for name in [n for n in fields if n in sized]:  # in the order `param:` declares them
            c, span = fields[name], sized[name]
            if isinstance(c.default, int) and c.default < 0:
                self.r.error("bad-constraint", f"`{name}` sizes a tensor (line {span.line}), so it must not be "
                             f"negative, but its default is {c.default}", c.span,
                             hint="sizes are dims >= 0; change the default, or the shape")
            else:
                self.pending.append(ir.Check(Dim.const(0), Dim.sym(name), c.span, "<=",
                                             f"`{name}` is a size: it must not be negative"))
        others = [(d, p.span, None) for p in self.pending for d in (p.lhs, p.rhs)]
        others += [(d, c.span, None) for c in self.constraints for d in (c.cond.num, c.cond.den)]
        seen: set = set()
        divisors = [(den, span, loop) for d, span, loop in [(d, span, loop) for (d, _), (span, loop, _) in dims.items()]
                    + others for den in _divisors(d)]
        divisors += [(c.cond.den, c.span, None) for c in self.constraints]  # `n % 0` is no answer either
        for den, span, loop in divisors:
            if den.value is not None or (den, loop is None) in seen:
                continue
            seen.add((den, loop is None))
            self.loops = [loop] if loop is not None else []
            try:
                ok = self.need(Dim.const(1), "<=", den, span, f"the divisor {self.show_dim(den)} must be at least 1")
            finally:
                self.loops = []
            if not ok:
                self.r.error("bad-constraint", f"`{self.show_dim(den)}` divides a dim here, so it must be at "
                             f"least 1, but with the default config it is {self.at_defaults(den)}", span,
                             hint="change the defaults in `param:`, or the expression")


def _flipped(lhs: Dim, op: str, rhs: Dim) -> tuple[Dim, Dim, str]:
    """`a >= b` as `b <= a`: the condition with op one of <= < ==."""
    return (rhs, lhs, _FLIP[op]) if op in _FLIP else (lhs, rhs, op)


def _divisors(d: Dim) -> list[Dim]:
    """The divisors of the floor divisions in `d`, inner ones first."""
    out = []
    for atom in d.atoms():
        if isinstance(atom, FloorDiv):
            out += _divisors(atom.num) + _divisors(atom.den) + [atom.den]
    return out


def _dims(checker, body: tuple) -> dict:
    """Every distinct dim of the checked spec, in the loop it is in: (dim, loop var) -> (where it
    first is, the loop, whether it is a size somewhere: in a declared or computed shape, a slice
    bound or a loop count; else an int, a derived dim)."""
    out: dict = {}

    def add(d: Dim, span: Span, loop: dict | None, size: bool) -> None:
        key = (d, loop["var"] if loop else None)
        first = out.setdefault(key, (span, loop, size))
        if size and not first[2]:
            out[key] = (first[0], loop, True)

    for t in checker.inputs + checker.params + checker.buffers + checker.outputs:
        for d in t.ty.shape:
            add(d, t.span, None, True)

    def visit(stmts, loop):
        for s in stmts:
            if isinstance(s, ir.Loop):
                add(s.count, s.span, None, True)
                visit(s.body, {"var": s.var, "count": s.count})
                continue
            if isinstance(s, ir.TIf):
                visit(s.body, loop)
                visit(s.orelse, loop)
            stack = [x for x in (getattr(s, "value", None), getattr(s, "test", None), getattr(s, "input", None))
                     if x is not None] + list(getattr(s, "index", None) or ())
            while stack:
                e = stack.pop()
                stack.extend(ir.children(e))
                ty = e.ty
                if isinstance(ty, ir.TensorT):
                    for d in ty.shape:
                        add(d, e.span, loop, True)
                elif isinstance(ty, ir.SliceT):
                    for d in (ty.lo, ty.hi):
                        if d is not None:
                            add(d, e.span, loop, True)
                elif isinstance(ty, ir.ScalarT) and ty.dim is not None:
                    add(ty.dim, e.span, loop, False)
    visit(body, None)
    for t in checker.params + checker.buffers:  # `w[i] : ... if cond`: Block.__init__ computes cond per layer
        if getattr(t, "layer_var", None) and t.condition is not None:
            visit((ir.TIf(t.condition, (), (), t.span),), {"var": t.layer_var, "count": t.ty.shape[0]})
    for d in checker.derived:
        if d.dim is not None and not d.opaque:
            add(d.dim, d.span, None, False)
    return out
