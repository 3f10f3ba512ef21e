"""`snfc stats`: what a model costs, from the typed IR alone (no model is built, torch is never
imported): the lowered IR and its plans, as the compiler builds them, so the numbers are those of
the module it generates (fused linears run as one, attention over a latent as `latent_attention`).
Parameters, FLOPs per token (forward, and forward + backward), KV-cache bytes per token and
activation bytes per token, each as a formula in the spec's dims and as a number for a config.
The definitions, and what the numbers do not count, are in docs/stats.md. In short:

* the forward is the plain one: every optional input absent (so no cache: `T_past = 0`), the
  config's switches as the config sets them, dropout applied, and the cache outputs not built
  (a generated module's forward in training, `use_cache=False`);
* FLOPs are those of matrix products (`linear`, `@`, attention), 2 per multiply-add, the
  quantity `torch.utils.flop_counter.FlopCounterMode` counts; the registry gives each op's
  (`OpDef.flops`);
* the backward computes the gradient of every operand that depends on a parameter;
* KV-cache bytes are those of the caches the cache plan finds, per cached token (states: per
  sequence); activation bytes are the bytes of every tensor an op of the forward returns, views excepted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction

from .. import ir
from ..dims import Dim, DimError, FloorDiv
from ..interpret import ConfigError, Interpreter
from ..ir import ScalarT, TensorT
from ..language import GRADIENT_CHECKPOINTING
from ..ops import all_ops, holds
from ..ops.shapes import product
from ..passes import Plans
from .caches import DTYPE_BYTES, cache_bytes
from .experts import expert_quantities, note_experts


class StatsError(ValueError):
    """A config or dim value `snfc stats` cannot use (exit 1, with the message)."""


@dataclass(frozen=True)
class Quantity:
    key: str  # "parameters", "flops_forward", ...
    label: str
    formula: Dim  # in the spec's dims; per token where the label says so
    value: Fraction  # for the config
    unit: str  # "", "FLOPs", "bytes"
    note: str = ""  # why it is 0, when it is; what its formula holds for


@dataclass(frozen=True)
class Stats:
    model: ir.Model
    config: dict  # every config field's value
    dims: dict  # run-time dim -> (value, why)
    tokens: Dim  # what "per token" divides by (B*T)
    absent: tuple[str, ...]  # optional inputs left out of the plain forward
    quantities: tuple[Quantity, ...]

    def render(self, fmt: str = "text") -> str:
        return render_json(self) if fmt == "json" else render_text(self)


# ------------------------------------------------------------------------------- config

def parse_overrides(model: ir.Model, pairs: list[str]) -> dict:
    """`name=value` strings -> config values and run-time dims, typed as the spec declares them."""
    kinds = {c.name: c.kind for c in model.config}
    runtime = {d for d, _, _ in model.dim_sources}
    out: dict = {}
    for pair in pairs:
        name, eq, text = pair.partition("=")
        name, text = name.strip(), text.strip()
        if not eq or not name:
            raise StatsError(f"--set takes name=value, got {pair!r}")
        if name not in kinds and name not in runtime:
            known = ", ".join(list(kinds) + sorted(runtime))
            raise StatsError(f"--set {name}: the spec has no config field or run-time dim `{name}` (it has {known})")
        kind = kinds.get(name, "int")
        try:
            out[name] = _typed(kind, text)
        except ValueError:
            raise StatsError(f"--set {name}={text}: `{name}` is {'an' if kind == 'int' else 'a'} {kind}") from None
    return out


def _typed(kind: str, text: str):
    if kind.startswith("list["):  # `[1.0, 2.0]` or `1.0,2.0`: each item as the list's kind
        inner = text.strip().removeprefix("[").removesuffix("]").strip()
        return tuple(_typed(kind[5:-1], item.strip().strip("'\"")) for item in inner.split(",")) if inner else ()
    if kind == "int":
        return int(text, 10)
    if kind == "float":
        return float(text)
    if kind == "bool":
        if text.lower() not in ("true", "false"):
            raise ValueError(text)
        return text.lower() == "true"
    return text


def config_values(model: ir.Model, overrides: dict) -> tuple[dict, dict]:
    """The defaults with `overrides`, validated as the generated `Config` validates them (by the
    interpreter, which checks what Config checks); and the config's ints, the computed ones
    (`E = int(D * frac)`) included."""
    cfg = {}
    for c in model.config:
        if c.name in overrides:
            cfg[c.name] = overrides[c.name]
        elif c.default is not ir.MISSING:
            cfg[c.name] = c.default
        else:
            raise StatsError(f"config field `{c.name}` has no default: give it with --set {c.name}=...")
    try:
        ints = Interpreter(model, cfg).ints
    except ConfigError as e:
        raise StatsError(str(e)) from None
    try:
        for t in model.params + model.buffers + model.inputs:
            for d in t.ty.shape:
                if d.symbols() <= set(ints) and d.evaluate(ints) < 0:
                    raise StatsError(f"`{t.name}` would have a negative size {_text(model, d)} = {d.evaluate(ints)}")
    except (DimError, ZeroDivisionError) as e:
        problem = "division by zero" if isinstance(e, ZeroDivisionError) else str(e)
        raise StatsError(f"{problem}; got {', '.join(f'{k}={v}' for k, v in ints.items())}") from None
    return cfg, ints


def _fields(a: Dim, b: Dim, ints: dict) -> str:
    return ", ".join(f"{n}={ints[n]}" for n in sorted(a.symbols() | b.symbols()) if n in ints)


class _Walk:
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


# ------------------------------------------------------------------------------- stats

def stats(plans: Plans, overrides: dict | None = None) -> Stats:
    """The costs of the plain forward of `plans.model` (the lowered IR: `snf.compiler.planned`), as
    formulas and as numbers for the config (`overrides` are config fields and run-time dims, as
    `parse_overrides` returns them)."""
    model = plans.model
    overrides = dict(overrides or {})
    cfg, ints = config_values(model, {k: v for k, v in overrides.items() if k in {c.name for c in model.config}})
    absent = _absent_dims(model)
    tokens_dims = _token_dims(model)
    dims = _runtime_values(model, overrides, ints, absent, tokens_dims)
    env = {**ints, **{d: v for d, (v, _) in dims.items()}}

    walk = _Walk(plans, cfg, set(absent), {d: v for d, (v, _) in dims.items()})
    backward = walk.run()
    params = Dim()
    for t in model.params:
        if t.layer_var is not None or t.condition is None or walk.conds.eval(t.condition, {}):
            params += walk.param_numel(t)
    tokens = Dim.const(1)
    for d in tokens_dims:
        tokens = tokens * Dim.sym(d)
    n_tokens = tokens.evaluate(env)

    def per_token(key, label, total, unit):
        total = _simplify(total, model)
        value = Fraction(total.evaluate(env), n_tokens) if n_tokens else Fraction(0)
        return Quantity(key, label, _divide(total, tokens_dims), value, unit, "; ".join(walk.by_layer))

    per = "token" if tokens_dims else "call"  # an input without run-time axes: per forward call
    quantities = [
        Quantity("parameters", "parameters", _simplify(params, model), Fraction(params.evaluate(env)), ""),
        per_token("flops_forward", f"FLOPs per {per}, forward", walk.forward, "FLOPs"),
        per_token("flops_training", f"FLOPs per {per}, forward + backward", walk.forward + backward, "FLOPs"),
        per_token("activation_bytes", f"activation bytes per {per}", walk.activations, "bytes"),
    ]
    cache, state, expanded = cache_bytes(model, tokens_dims, plans.caches)
    quantities.insert(3, Quantity("kv_cache_bytes", "KV-cache bytes per token", _simplify(cache, model),
                                  Fraction(cache.evaluate(env)), "bytes", "" if cache.terms else "the spec has no KV cache"))
    if expanded.terms:  # latent caches: what the keys and values expanded from them would hold instead
        quantities.insert(4, Quantity("kv_cache_bytes_expanded", "KV-cache bytes per token, if expanded",
                                      _simplify(expanded, model), Fraction(expanded.evaluate(env)), "bytes",
                                      "the keys and values latent_attention expands, were they cached instead"))
    if state.terms:  # recurrent states: the same size at every position
        quantities.insert(4, Quantity("state_bytes", "recurrent state bytes per sequence", _simplify(state, model),
                                      Fraction(state.evaluate(env)), "bytes", "constant: it does not grow"))
    if cfg.get(GRADIENT_CHECKPOINTING) is True and walk.layer_forward.terms:
        # the recognised switch (docs/language.md 10.1): the backward runs each layer again, up
        # to the last tensor it needs; model FLOPs above leave it out, as MFU does
        quantities.insert(3, per_token("flops_recompute", f"FLOPs per {per}, checkpoint recompute",
                                       walk.layer_forward, "FLOPs"))
    expert_quantities(quantities, model, walk, params, env, per_token, per, simplify=_simplify, quantity=Quantity)
    names = tuple(i.name for i in model.inputs if i.optional)
    return Stats(model, cfg, dims, tokens, names, tuple(quantities))


_ABSENT = "its inputs are absent"


def _absent_dims(model: ir.Model) -> list[str]:
    """Run-time dims that only optional inputs bring: 0 in the plain forward (`T_past`)."""
    present = {d.as_symbol() for i in model.inputs if not i.optional for d in i.ty.shape}
    return [d for d, _, _ in model.dim_sources if d not in present]


def _token_dims(model: ir.Model) -> list[str]:
    """The run-time axes of the first required input with a length besides the batch: a token's (B, T)."""
    runtime = {d for d, _, _ in model.dim_sources}
    axes = [[d.as_symbol() for d in i.ty.shape if d.as_symbol() in runtime] for i in model.inputs if not i.optional]
    return next((a for a in axes if len(a) > 1), axes[0] if axes else [])


def _runtime_values(model: ir.Model, overrides: dict, ints: dict, absent: list, tokens_dims: list) -> dict:
    """A value, and why, for every run-time dim of the plain forward: --set, else the largest the
    spec's checks allow, else 1 for a batch axis."""
    out = {d: (0, _ABSENT) for d in absent}
    zero = {d: Dim.const(0) for d in absent}
    batch = tokens_dims[0] if len(tokens_dims) > 1 else None
    for d, _, _ in model.dim_sources:
        if d in overrides:
            out[d] = (overrides[d], "--set")
            continue
        if d in out:
            continue
        bounds = []
        for c in (c for c in model.checks if not c.tested):  # (one under a config's test may not be made)
            lhs, rhs = c.lhs.subs(zero), c.rhs.subs(zero)
            if c.op in ("<=", "<") and lhs == Dim.sym(d) and rhs.symbols() <= set(ints):
                why = f"the most `{c.text(model.display)}` allows, line {c.span.line}"
                bounds.append((rhs.evaluate(ints) - (c.op == "<"), why))
        if bounds:
            out[d] = min(bounds)
        elif d == batch:
            out[d] = (1, "the batch size cancels out")
        else:
            raise StatsError(f"the spec does not bound the run-time dim `{d}`: give its value with --set {d}=N")
    env = {**ints, **{d: v for d, (v, _) in out.items()}}
    for d, (v, why) in out.items():
        if v < 0:
            raise StatsError(f"--set {d}={v}: a size cannot be negative")
    for c in model.checks:  # as forward would check them
        if set(c.fields) <= set(env) and not c.tested and not holds(c, env):
            raise StatsError(f"the spec requires {c.text(model.display)} (line {c.span.line}); "
                             f"got {_fields(c.lhs, c.rhs, env)}")
    return {d: out[d] for d, _, _ in model.dim_sources}


def _simplify(d: Dim, model: ir.Model) -> Dim:
    """`H * (D // H)` -> `D` where the Config guarantees the division is exact."""
    exact, conds = d.exact()
    guaranteed = {c.cond for c in model.constraints if not c.when}
    clean = all(e > 0 for m, _ in exact.terms for _, e in m) and all(
        isinstance(c, int) for _, c in exact.terms)
    return exact if clean and set(conds) <= guaranteed else d


def _divide(d: Dim, names: list[str]) -> Dim:
    """d / (product of `names`), as a polynomial (a term without them gets a negative power)."""
    per = Dim({tuple(sorted(((n, -1) for n in names))): 1}) if names else Dim.const(1)
    return d * per


# ------------------------------------------------------------------------------- rendering

def _text(model: ir.Model, d: Dim, loop: str | None = None) -> str:
    """`d` in the spec's names, powers as `D^2`, the layer count factored out: `n_layer*(12*D^2 + 13*D)`."""
    display = dict(model.display)
    if d in display:
        return display[d]
    if loop is not None:
        inner = Dim([(m[:i] + ((a, e - 1),) + m[i + 1:] if e > 1 else m[:i] + m[i + 1:], c)
                     for m, c in d.terms for i, (a, e) in enumerate(m) if a == loop])
        rest = Dim([(m, c) for m, c in d.terms if all(a != loop for a, _ in m)])
        if len(inner.terms) > 1:
            head = f"{display.get(loop, loop)}*({_text(model, inner)})"
            return head + ("" if not rest.terms else _signed(_text(model, rest)))
    out = ""
    for mono, coeff in d.terms:
        mono = sorted(mono, key=lambda ae: ae[0] != loop)  # the layer count first: 80*n_layer*D
        num = [_atom(model, a, display) + (f"^{e}" if e > 1 else "") for a, e in mono if e > 0]
        den = [_atom(model, a, display) + (f"^{-e}" if e < -1 else "") for a, e in mono if e < 0]
        text = "*".join(([str(abs(coeff))] if abs(coeff) != 1 or not num else []) + num)
        if den:
            text += "/" + ("*".join(den) if len(den) == 1 else "(" + "*".join(den) + ")")
        out += ("-" if coeff < 0 else "") + text if not out else (" - " if coeff < 0 else " + ") + text
    return out or "0"


def _signed(text: str) -> str:
    return " - " + text[1:] if text.startswith("-") else " + " + text


def _atom(model: ir.Model, a, display: dict) -> str:
    if a in display:
        return display[a]
    if isinstance(a, FloorDiv):
        return f"({_text(model, a.num)} // {_text(model, a.den)})"
    return a


def _layer_symbol(model: ir.Model) -> str | None:
    counts = [s.count.as_symbol() for s in model.body if isinstance(s, ir.Loop)]
    return counts[0] if len(counts) == 1 else None


def formula(s: Stats, q: Quantity) -> str:
    return _text(s.model, q.formula, _layer_symbol(s.model))


def _number(v: Fraction) -> str:
    if v.denominator == 1:
        return f"{v.numerator:,}"
    return f"{float(v):,.1f}"


def _short(v: Fraction, unit: str) -> str:
    """124,439,808 -> 124.4 M; bytes in KiB / MiB."""
    x = float(v)
    if unit == "bytes":
        for suffix, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if x >= size:
                return f"{x / size:.1f} {suffix}"
        return ""
    for suffix, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= size:
            return f"{x / size:.1f} {suffix}"
    return ""


def _names(tokens: Dim) -> list[str]:
    return [a for m, _ in tokens.terms for a, _ in m]


def _aliases(s: Stats) -> list[str]:
    """`D = n_embd`: the spec's short names the formulas use."""
    out = []
    for d in s.model.derived:
        if d.dim is not None and d.dim.as_symbol() != d.name and d.name in {
                v for _, v in s.model.display}:
            spelled = d.dim.render(lambda a: a if isinstance(a, str) else f"{a.num.render()} // {a.den.render()}")
            out.append(f"{d.name} = {spelled}")
    return out


def render_text(s: Stats) -> str:
    m = s.model
    lines = [f"{m.name} ({m.path})", "config: " + ", ".join(f"{k}={v}" for k, v in s.config.items())]
    tokens = _names(s.tokens)
    given = [f"{d} = {v} ({why})" for d, (v, why) in s.dims.items() if d not in s.dims or why != _ABSENT]
    if tokens:
        lines.append(f"per token: divided by {'*'.join(tokens)}, with " + "; ".join(given))
    else:
        lines.append("per call: the first input has no run-time axes" + (", with " + "; ".join(given) if given else ""))
    if s.absent:
        zero = [d for d, (_, why) in s.dims.items() if why == _ABSENT]
        lines.append("absent: " + ", ".join(s.absent) + (f" (so {', '.join(zero)} = 0)" if zero else ""))
    if _aliases(s):
        lines.append("where " + ", ".join(_aliases(s)))
    lines.append("")
    width = max(len(q.label) for q in s.quantities)
    for q in s.quantities:
        short = _short(q.value, q.unit)
        number = _number(q.value) + (f" {q.unit}" if q.unit else "") + (f"  ({short})" if short else "")
        lines.append(f"{q.label:<{width}}  {number}")
        lines.append(f"{'':<{width}}  = {formula(s, q)}" + (f"  ({q.note})" if q.note else ""))
    lines.append("")
    lines.append("FLOPs count matrix products, 2 per multiply-add, attention over every query-key pair;")
    lines.append("activation bytes count every tensor the forward makes, views excepted (docs/stats.md).")
    return "\n".join(lines) + "\n"


def render_json(s: Stats) -> str:
    def num(v: Fraction):
        return v.numerator if v.denominator == 1 else float(v)
    doc = {
        "model": s.model.name, "spec": s.model.path, "config": s.config,
        "dims": {d: {"value": v, "why": why} for d, (v, why) in s.dims.items()},
        "absent_inputs": list(s.absent), "per_token": _names(s.tokens),
        "aliases": _aliases(s),
        "stats": {q.key: {"label": q.label, "value": num(q.value), "unit": q.unit, "formula": formula(s, q),
                          "note": q.note} for q in s.quantities},
    }
    return json.dumps(doc, indent=2) + "\n"


__all__ = ["Stats", "Quantity", "StatsError", "stats", "parse_overrides", "config_values", "formula"]
