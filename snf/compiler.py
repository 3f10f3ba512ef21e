"""The pipeline: read -> parse -> check -> passes -> generate. One function per stage."""

from __future__ import annotations

import contextlib
import gc
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import ir
from .check import check
from .diagnostics import Diagnostic, Reporter
from .frontend import parse
from .source import Source, Span

if TYPE_CHECKING:
    from .passes import Plans


@dataclass
class Result:
    source: Source
    diagnostics: list[Diagnostic]
    spec: ir.Spec | None = None
    model: ir.Model | None = None

    @property
    def ok(self) -> bool:
        return self.model is not None and not any(d.severity == "error" for d in self.diagnostics)


@contextlib.contextmanager
def no_cycle_collection():
    """Python's cyclic garbage collector off inside. Parsing and checking build a syntax tree and an
    IR of hundreds of thousands of objects that live to the end, and each of the collector's full
    passes walks all of them: with it on, the time grows faster than the spec (a 60,000-`let` spec
    took 15.4 s to check, 9.4 s without it; tests/test_hostile.py bounds the growth). What they
    leave unreachable is collected once it is back on."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def analyze(source: Source) -> Result:
    """Parse and check one spec; diagnostics are sorted and de-duplicated. Never raises on bad input."""
    r = Reporter(source)
    with no_cycle_collection():
        spec = parse(source, r)
        model = None
        if spec is not None and not r.has_errors:
            try:
                model = check(spec, r)
            except RecursionError:
                r.error("too-large", "the spec nests too deeply", spec.body[0].span if spec.body else Span(1, 1, 1, 2))
                model = None
    return Result(source, r.sorted(), spec, model if not r.has_errors else None)


def lower(model: ir.Model) -> ir.Model:
    from .passes import run_passes
    return run_passes(model)


def planned(model: ir.Model) -> Plans:
    """The lowered model's `Plans` (its `.model`): what the generated module runs, planned once for
    codegen, `snfc check -v` and `snfc stats` alike."""
    from .passes import plan
    return plan(lower(model))


def generate_source(result: Result, spec_path: str | None = None, standalone: bool = False) -> str:
    """The module's text. It imports the helpers it calls from `snf.runtime`; with `standalone`, they
    are copied in, and the file needs only torch."""
    from .codegen import generate
    assert result.model is not None
    with no_cycle_collection():
        return generate(planned(result.model), spec_path or result.source.path, standalone)


def plan_notes(result: Result) -> list[Diagnostic]:
    """Notes on what the planning passes decided for a checked spec (`snfc check -v`): its KV
    caches, and whether `generate` decodes with preallocated buffers."""
    from .dims import show_dim
    from .passes.decode import NO_LOGITS, choose_logits, no_generate, token_input
    if not result.ok:
        return []
    plans = planned(result.model)
    r = Reporter(result.source)
    spans = {t.name: t.span for t in result.model.inputs}
    for c in plans.caches.caches:
        r.note("cache-plan", f"`{c.input}` is a recurrent state: it comes back, the same size, as the output "
                             f"`{c.output}`" if c.state else
               f"`{c.input}` is a KV cache: it grows along axis {c.axis} (`{c.dim}`) and comes back as the output "
               f"`{c.output}`", spans[c.input])
    if plans.decode is None:
        refusal = no_generate(result.model)
        tokens = token_input(result.model) or (result.model.inputs[0] if result.model.inputs else None)
        # a model without logits (an encoder's hidden states) is not an LM: said only where its caches
        # would otherwise leave the question open
        if tokens is not None and (refusal != NO_LOGITS or plans.caches.caches):
            r.note("generate-plan", f"no generate: {refusal}", spans[tokens.name])
        return r.sorted()
    # an encoder-decoder's tokens are the decoder's
    tokens = next(i for i in result.model.inputs if i.name == plans.decode.tokens)
    logits, why = choose_logits(result.model, tokens)
    outputs = {o.name: o.span for o in result.model.outputs}
    r.note("generate-plan", f"generate samples from the output `{logits.name}`: {why}", outputs[logits.name])
    encoder = plans.decode.encoder
    if encoder is not None:
        r.note("generate-plan", f"an encoder-decoder: generate runs what does not read `{tokens.name}` once "
                                f"(from {', '.join(encoder.inputs)}; hands each decode step "
                                f"{', '.join(encoder.values)}), then decodes with the self-attention cache",
               spans[tokens.name])
        for name, span in encoder.recomputed:
            r.note("generate-plan", f"`{name}` reads only the encoder's side but is computed in the decoder's "
                                    "loop, so each decode step computes it again: compute it in a loop of its "
                                    "own, before that one, to compute it once per generate", span)
    if plans.caches.caches:
        first = spans[plans.caches.caches[0].input]
        pre = plans.caches.preallocated if encoder is None else None  # an encoder-decoder's decode concatenates
        reason = plans.caches.reason if pre is None and encoder is None else "an encoder-decoder's decode does"
        states = " (its recurrent states updated in place)" if any(c.state for c in plans.caches.caches) else ""
        if pre is not None and pre.size is None:
            r.note("cache-plan", "generate keeps the recurrent states in buffers allocated once per call, each "
                                 "decode step writing a layer's new state over its old one", first)
        elif pre is not None:
            size = show_dim(pre.size, dict(result.model.display))
            r.note("cache-plan", f"generate decodes with preallocated caches of {size} slots, written in "
                                 f"place{states}", first)
        else:
            how = ("feeds back the caches each step returns" if any(c.state for c in plans.caches.caches)
                   else "concatenates its caches")
            r.note("cache-plan", f"generate {how} (no preallocated buffers): {reason}", first)
    return r.sorted()


def tensor_parallel(result: Result, tp: int, show: bool = True) -> list[Diagnostic]:
    """`snfc check --tp N`: prints the plan (with `show`) and returns an error for each requirement the
    default config breaks at `tp` (tp does not divide n_kv_head), at the line that names the dim."""
    from .dims import show_dim
    from .passes.show import show_tensor_parallel
    from .passes.tp_plan import defaults, refusals
    if not result.ok:
        return []
    plans = planned(result.model)
    if show:
        print("\n".join(show_tensor_parallel(plans, tp)))
    r = Reporter(result.source)
    display, env = dict(result.model.display), defaults(result.model)
    for req in refusals(plans.tp, result.model, tp):
        n = req.units.evaluate(env)
        r.error("tensor-parallel", f"tp={tp} does not divide {req.dim(display)} = {n} in the default config: "
                                   f"{req.what}, which each rank holds an equal part of", req.span,
                hint=f"choose a tp that divides {n}, or a config where {show_dim(req.units)} divides by {tp}")
    return r.sorted()
