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
from ..language import GRADIENT_CHECKPOINTING
from ..ops import holds
from ..passes import Plans
from .caches import cache_bytes
from .experts import expert_quantities
from .walk import StatsError, Walk


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

    walk = Walk(plans, cfg, set(absent), {d: v for d, (v, _) in dims.items()})
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
