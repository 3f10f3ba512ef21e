"""The walk `snfc stats` makes over the plain forward of the lowered IR: FLOPs (forward and backward)
and activation bytes as polynomials in the spec's dims (the package's `stats` turns them into its
quantities)."""

from __future__ import annotations

from .. import ir
from ..dims import Dim
from ..interpret import Interpreter
from ..ir import ScalarT, TensorT
from ..ops import all_ops
from ..passes import Plans
from .caches import DTYPE_BYTES
from .experts import note_experts


class StatsError(ValueError):
    """A config or dim value `snfc stats` cannot use (exit 1, with the message)."""


class Walk:
    """One pass over the plain forward: FLOPs and activation bytes as polynomials, with a layer
    loop's body counted once and multiplied by its trip count.

    For the backward, every value carries the set of products whose gradients flow through it
    (empty: it needs no gradient, like a token id or a mask). A product's backward counts when
    its value reaches an output; it takes the gradient of each operand that needs one."""

    PARAM = 0  # the "product" a parameter stands for: it needs a gradient and costs nothing

    def __init__(self, plans: Plans, cfg: dict, absent: set, runtime: dict):
        self.m = model = plans.model
        # what only the caches need is not computed (as a generated module's training forward)
        self.skip = plans.outputs.only_for("use_cache")
        self.ops = all_ops()
        self.zero = {d: Dim.const(0) for d in absent}  # dims of absent inputs (and the layer, per layer)
        self.layer: dict = {}  # the loop variable's value, while layers are walked one kind at a time
        self.by_layer: list[str] = []  # the loops counted layer by layer, for the note
        self.forward = self.layer_forward = self.activations = Dim()
        self.backward: list[Dim] = [Dim()]  # per product, by id
        self.experts, self.dense_extra = {}, Dim()  # mixtures of experts: see experts.py
        # evaluates the config's switches and `X exists` (the plain forward: no optional input given)
        self.conds = Interpreter(model, cfg).at_sizes(runtime)

    def dim(self, d: Dim) -> Dim:
        return d.subs(self.zero) if self.zero else d

    def test(self, e) -> bool:
        """A condition (the config's switches, `X exists`, and the layer where one is walked)."""
        return bool(self.conds.eval(e, self.layer))

    def numel(self, ty) -> Dim:
        n = Dim.const(1)
        for d in ty.shape:
            n = n * self.dim(d)
        return n

    def param_numel(self, t: ir.Tensor) -> Dim:
        """Its entries; one of some layers (`name[l]`) on this config's layers that have it (a number)."""
        have = () if t.layer_var is None else (Dim.const(len(self.conds.layers_with(t))),)
        return self.numel(TensorT(have + tuple(t.ty.shape[len(have):]), t.ty.dtype))

    def size(self, ty) -> Dim:
        return DTYPE_BYTES[ty.dtype] * self.numel(ty)

    def run(self) -> Dim:
        """Walk the body; the backward FLOPs of the products that reach an output."""
        env: dict = {}
        self.block(self.m.body, Dim.const(1), env, in_loop=False)
        live = frozenset().union(*(env.get(o.name, frozenset()) for o in self.m.outputs))
        total = Dim()
        for i in sorted(live):
            total += self.backward[i]
        return total

    # statements; `env` maps each local to the products its gradient flows to
    def block(self, stmts, times: Dim, env: dict, in_loop: bool) -> None:
        for s in stmts:
            if s in self.skip:
                continue
            if isinstance(s, ir.Bind):
                env[s.name] = self.expr(s.value, times, env, in_loop)
            elif isinstance(s, ir.SetItem):
                for i in s.index:
                    self.expr(i, times, env, in_loop)
                env[s.name] = env.get(s.name, frozenset()) | self.expr(s.value, times, env, in_loop)
            elif isinstance(s, ir.TIf):
                self.block(s.body if self.test(s.test) else s.orelse, times, env, in_loop)
            elif isinstance(s, ir.Loop):
                self.loop(s, times, env)
            elif isinstance(s, ir.FusedLinear):  # the module's one linear of the pieces' total width, split
                env.update(dict.fromkeys(s.targets, self.expr(_fused_call(s), times, env, in_loop)))
            else:
                raise TypeError(f"stats reads no {type(s).__name__}")

    def loop(self, s: ir.Loop, times: Dim, env: dict) -> None:
        """Layers one at a time while the set of locals needing a gradient changes (a carried value
        may start without one and get one in the first layer), then the rest at once. A body that
        branches on the layer, or whose sizes grow with it, is counted per kind of layer (`kinds`)."""
        kinds = self.kinds(s)
        if kinds is not None:
            self.by_layer.append(f"the layers of the loop at line {s.span.line} differ: counted for this config's "
                                 f"{len(kinds)}")
            return self.loop_by_kind(s, times, env, kinds)
        alone = 0
        while alone <= len(s.carried):
            trial = dict(env)
            self._dry(s.body, trial)
            if _needing(trial) == _needing(env):
                break
            self.block(s.body, times, env, in_loop=True)
            alone += 1
        self.block(s.body, times * (self.dim(s.count) - alone), env, in_loop=True)

    def kinds(self, s: ir.Loop) -> list | None:
        """None when every layer costs the same (no condition reads the layer and no size grows with
        it); else each layer's kind: the values the body's conditions take there (and the layer
        itself where a size depends on it). Layers of one kind cost the same."""
        tests = [t for t in _tests(s.body) if _mentions(t, s.var)]
        sized = any(isinstance(e.ty, TensorT) and any(s.var in d.symbols() for d in e.ty.shape)
                    for e in ir.walk_exprs(s.body))
        if not tests and not sized:
            return None
        count = self.dim(s.count).evaluate(self.conds.ints)
        if count > MAX_LAYERS:
            raise StatsError(f"the loop at line {s.span.line} branches on `{s.var}` (or grows with it), so stats "
                             f"count its layers one by one, up to {MAX_LAYERS:,}; this config has {count:,}")
        out = []
        for layer in range(count):
            at = {s.var: layer}
            self.conds.ints[s.var] = layer
            out.append((layer if sized else None,) + tuple(bool(self.conds.eval(t, at)) for t in tests))
        return out

    def loop_by_kind(self, s: ir.Loop, times: Dim, env: dict, kinds: list) -> None:
        """The first layers alone while the set of locals needing a gradient changes, as `loop`
        does; then one walk per kind of layer, times the number of layers of that kind."""
        alone = 0
        while alone < len(kinds) and alone <= len(s.carried):
            some = {kind: layer for layer, kind in enumerate(kinds) if layer >= alone}  # a layer of each kind left
            if all(self._stable(s, env, layer) for layer in some.values()):
                break
            self.at_layer(s, alone, lambda: self.block(s.body, times, env, in_loop=True))
            alone += 1
        counts: dict = {}
        for kind in kinds[alone:]:
            counts[kind] = counts.get(kind, 0) + 1
        for kind, n in counts.items():
            layer = next(i for i in range(alone, len(kinds)) if kinds[i] == kind)
            self.at_layer(s, layer, lambda: self.block(s.body, times * n, env, in_loop=True))

    def _stable(self, s: ir.Loop, env: dict, layer: int) -> bool:
        trial = dict(env)
        self.at_layer(s, layer, lambda: self._dry(s.body, trial))
        return _needing(trial) == _needing(env)

    def at_layer(self, s: ir.Loop, layer: int, walk) -> None:
        """`walk()` with the loop variable at `layer`: in conditions and in sizes."""
        self.layer, self.conds.ints[s.var] = {s.var: layer}, layer
        self.zero[s.var] = Dim.const(layer)
        try:
            walk()
        finally:
            self.layer = {}
            del self.zero[s.var]

    def _dry(self, stmts, env: dict) -> None:
        saved = (self.forward, self.layer_forward, self.activations, self.dense_extra, len(self.backward))
        self.block(stmts, Dim.const(1), env, in_loop=True)
        self.forward, self.layer_forward, self.activations, self.dense_extra, n = saved
        del self.backward[n:]

    def expr(self, e, times: Dim, env: dict, in_loop: bool) -> frozenset:
        """Count `e`'s products and results; the products its gradient flows to."""
        if isinstance(e, ir.Ref):
            if e.kind in ("param", "layer_param"):
                return frozenset((self.PARAM,))
            return env.get(e.name, frozenset()) if e.kind == "local" else frozenset()
        if isinstance(e, ir.TCond):
            return self.expr(e.body if self.test(e.test) else e.orelse, times, env, in_loop)
        if isinstance(e, ir.TList):
            return frozenset().union(*(self.expr(i, times, env, in_loop) for i in e.items))
        if isinstance(e, ir.TSlice):
            for part in (e.lo, e.hi):
                if part is not None:
                    self.expr(part, times, env, in_loop)
            return frozenset()
        if not isinstance(e, ir.Op):
            return frozenset()  # literals, dims, `X exists`
        flows = {name: self.expr(a, times, env, in_loop) for name, a in e.args}
        if not isinstance(e.ty, TensorT):
            return frozenset()
        out = frozenset().union(*flows.values())
        op = self.ops.get(e.op)
        types = {name: self._shape(a.ty) for name, a in e.args}
        if op is not None and op.flops is not None:
            fwd, bwd = op.flops(types, self._shape(e.ty), {name for name, f in flows.items() if f})
            self.forward += times * fwd
            if e.op == "moe_experts":
                note_experts(self, e, types, times * fwd)
            if in_loop:
                self.layer_forward += times * fwd
            self.backward.append(times * bwd)
            out |= {len(self.backward) - 1}
        if op is None or not op.view:
            self.activations += times * self.size(e.ty)
        if op is not None and op.makes is not None:
            self.activations += times * DTYPE_BYTES[e.ty.dtype] * op.makes(types, self._shape(e.ty))
        return out if e.ty.dtype.startswith(("float", "bfloat")) else frozenset()

    def _shape(self, ty):
        return TensorT(tuple(self.dim(d) for d in ty.shape), ty.dtype) if isinstance(ty, TensorT) else ty


MAX_LAYERS = 100_000  # a loop counted layer by layer (it branches on the layer): at most this many


def _fused_call(s: ir.FusedLinear) -> ir.Op:
    width = sum(s.sizes, Dim())
    x = s.input.ty
    weight = ir.Ref(s.fused_weight, "layer_param", TensorT((width, x.shape[-1]), x.dtype))
    return ir.Op("linear", (("x", s.input), ("weight", weight)), TensorT(x.shape[:-1] + (width,), s.tys[0].dtype))


def _needing(env: dict) -> set:
    """The locals that need a gradient."""
    return {n for n, r in env.items() if r}


def _tests(stmts) -> list:
    """Every condition in a body: of `if` blocks and of conditional values."""
    out = [s.test for s in ir.walk_stmts(stmts) if isinstance(s, ir.TIf)]
    return out + [e.test for e in ir.walk_exprs(stmts) if isinstance(e, ir.TCond)]


def _mentions(e, var: str) -> bool:
    """Whether the expression `e` reads the dim `var` (the loop variable)."""
    return any(isinstance(x, ir.Ref) and x.name == var or isinstance(getattr(x, "ty", None), ScalarT)
               and x.ty.dim is not None and var in x.ty.dim.symbols() for x in ir.subexprs((e,)))
