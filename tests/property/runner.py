"""Runs one spec the way a user would, and checks every promise `snfc check` makes about it.

`run(text, hints, rng)`: when the checker accepts the spec, the generated module must, for
random valid configs and input shapes,

* run its forward in the declared dtypes, with every output present or `None` as declared
  (an output may be `None` only when declared `?`), of the declared shape and dtype;
* agree with `snf.interpret` (the NumPy float64 reference) in a float64 twin of the checked
  model (every float dtype read as float64: `float64_model`), to rtol = atol = 1e-5, in
  forward, in cached forward (the input in chunks, each chunk fed the caches the previous one
  returned, as the module's cache plan pairs them), and in `generate` where the module has it
  (greedy: each token must be a best one by the interpreter's logits, within the tolerance,
  with the interpreter fed the same tokens and caches as the decode plan says);
* refuse inputs or configs that break the spec's own checks (asserts, slice bounds,
  divisibility) with a ValueError, and run every input that meets them.

"Valid" is decided here, from the checked model's constraints and checks evaluated on the
concrete sizes, not by the module: a module that rejects a valid input fails too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import linecache
import math
import re
import sys
import traceback
import types
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from snf import ir
from snf.compiler import analyze, generate_source
from snf.interop import spec_state
from snf.interpret import ConfigError, Interpreter, interpret
from snf.source import Source

RTOL = ATOL = 1e-5  # float64 module against the float64 interpreter: ~1e-12 apart in practice
TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
                "float64": torch.float64, "int32": torch.int32, "int64": torch.int64, "bool": torch.bool}
_FLOAT_NAMES = re.compile(r"\b(float16|bfloat16|float32)\b")
_FLOATS = ("float16", "bfloat16", "float32")


class Unsound(AssertionError):
    """An accepted spec whose module broke a promise: a bug in snfc."""


class NoValidInput(Exception):
    """These sizes leave an input no valid value (ids into a table of 0 rows): nothing to call."""


@dataclass
class Outcome:
    accepted: bool
    runs: int = 0  # forward calls compared
    refused: int = 0  # inputs or configs refused with a ValueError, rightly
    notes: list = field(default_factory=list)


def float64_twin(text: str) -> str:
    return _FLOAT_NAMES.sub("float64", text)


def float64_model(node):
    """The checked model with every float dtype read as float64: what checking `float64_twin` of
    its text gives (test_property checks that), without parsing and checking it again."""
    if isinstance(node, ir.TensorT):
        return dataclasses.replace(node, dtype="float64") if node.dtype in _FLOATS else node
    if isinstance(node, ir.Lit) and node.ty == ir.ScalarT("dtype") and node.value in _FLOATS:
        return dataclasses.replace(node, value="float64")
    if isinstance(node, tuple):
        return tuple(float64_model(x) for x in node)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        changes = {f.name: float64_model(getattr(node, f.name)) for f in dataclasses.fields(node)}
        if isinstance(node, ir.Model) and node.float_dtype in _FLOATS:
            changes["float_dtype"] = "float64"
        if any(changes[k] is not getattr(node, k) for k in changes):
            return dataclasses.replace(node, **changes)
    return node


def compile_eval_blocks(model) -> None:
    """Eval compiles per layer block on every device: a unit users may choose, and more compiling to
    test than either device's default, which evaluates eagerly (see Model.compile_units)."""
    if hasattr(model, "compile_units"):
        model.compile_units = {d: dict(units, eval="block") for d, units in type(model).compile_units.items()}


def checked(text: str, name: str = "prop.snf"):
    result = analyze(Source.from_bytes(name, text.encode("utf-8")))
    return result


def load_module(result, name: str) -> types.ModuleType:
    code = generate_source(result, "prop.snf")
    # named by content: Hypothesis replays a failure and must see it come from the same place
    modname = f"snf_property_{name}_{hashlib.sha256(code.encode()).hexdigest()[:12]}"
    module = types.ModuleType(modname)
    sys.modules[modname] = module  # interop finds the module through the model's class
    # its source where tracebacks and torch look for it, as snf.load does: without it torch 2.11's
    # dynamo keeps the graphs elsewhere than the code object, where graph_counts reads them
    module.__file__ = f"<{modname}>"
    linecache.cache[module.__file__] = (len(code), None, code.splitlines(True), module.__file__)
    exec(compile(code, module.__file__, "exec"), module.__dict__)
    module.__snf_source__ = code
    return module


def unload(module) -> None:
    sys.modules.pop(module.__name__, None)
    linecache.cache.pop(module.__file__, None)


# ----------------------------------------------------------------------------- sizes and checks

def evaluate(d, env: dict) -> int:
    return d.evaluate(env)


def holds(op: str, a: int, b: int) -> bool:
    return {"<=": a <= b, "<": a < b, ">=": a >= b, ">": a > b, "==": a == b}[op]


def broken_checks(m: ir.Model, env: dict, config_only: bool = False, given=None) -> list[str]:
    """The spec's constraints and checks that `env` violates. `given`, the optional inputs given
    (when known): a check that arose under `if X exists` applies only when X is given."""
    out = []
    for c in m.constraints:
        try:
            den = c.cond.den.evaluate(env)
            if den == 0 or c.cond.num.evaluate(env) % den:
                out.append(c.why)
        except KeyError:
            pass
    fields = {f.name for f in m.config}
    for c in m.checks:
        if config_only and (c.lhs.symbols() | c.rhs.symbols()) - fields:
            continue
        if given is not None and not set(c.given) <= set(given):
            continue
        try:
            if not holds(c.op, c.lhs.evaluate(env), c.rhs.evaluate(env)):
                out.append(f"{c.lhs} {c.op} {c.rhs} (line {c.span.line})")
        except KeyError:
            pass
    return out


def config_ints(values: dict, m=None) -> dict:
    """The config's ints; with the model `m`, the ints Config computes too (`n_layer =
    len(layer_types)`), where this config computes them."""
    env = {k: v for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool)}
    if m is not None and any(d.opaque for d in m.derived):
        try:
            env.update(Interpreter(m, values).ints)
        except (ConfigError, ArithmeticError, ValueError, KeyError):
            pass  # a config Config refuses: its checks say so
    return env


# ----------------------------------------------------------------------------- the run

class Runner:
    def __init__(self, text: str, hints, rng: np.random.Generator, compiled: bool = False):
        self.text, self.hints, self.rng, self.compiled = text, hints, rng, compiled
        self.outcome = Outcome(False)

    def fail(self, what: str, detail: str = "") -> None:
        raise Unsound(f"{what}\n{detail}".rstrip())

    def go(self, configs: int = 2) -> Outcome:
        try:
            result = checked(self.text)
        except Exception:  # analyze must never raise
            self.fail("the checker crashed", traceback.format_exc())
        if not result.ok:
            return self.outcome
        self.outcome.accepted = True
        self.m = result.model
        twin = dataclasses.replace(result, model=float64_model(result.model))
        self.m64 = twin.model
        try:
            self.mod = load_module(result, "native")
            self.mod64 = load_module(twin, "twin")
        except Exception:
            self.fail("compiling an accepted spec failed", traceback.format_exc())
        try:
            for _ in range(configs):
                self.one_config()
        finally:
            unload(self.mod)
            unload(self.mod64)
        return self.outcome

    # ------------------------------------------------------------------ configs
    def sample_config(self) -> dict:
        values = {}
        for f in self.m.config:
            domain = self.hints.domains.get(f.name) if self.hints else None
            if domain and (f.default is ir.MISSING or self.rng.random() < 0.8):
                values[f.name] = domain[self.rng.integers(len(domain))]
            elif f.default is not ir.MISSING:
                values[f.name] = f.default
            else:
                values[f.name] = 2
            if f.kind == "float":
                values[f.name] = float(values[f.name])
        return values

    def one_config(self) -> None:
        values = self.sample_config()
        env = config_ints(values, self.m)
        broken = broken_checks(self.m, env, config_only=True)
        try:  # the interpreter refuses what Config refuses: the checks above, and the numbers it computes
            Interpreter(self.m, values)
        except ConfigError as e:
            broken = broken or [str(e)]
        except Exception:
            self.fail(f"the interpreter crashed on the config {values}", traceback.format_exc())
        else:
            if broken:
                self.fail(f"the interpreter accepted {values}, which breaks {broken}")
        made = []
        for mod in (self.mod, self.mod64):
            try:
                made.append(mod.Config(**values))
            except ValueError as e:
                if not broken:
                    self.fail(f"Config rejected a valid config {values}", str(e))
                self.outcome.refused += 1
                return
            except Exception:
                self.fail(f"Config({values}) crashed", traceback.format_exc())
        if broken:
            self.fail(f"Config accepted {values}, which breaks {broken}")
        torch.manual_seed(int(self.rng.integers(1 << 30)))
        try:
            model = self.mod.Model(made[0]).eval()
            model64 = self.mod64.Model(made[1]).eval()
        except Exception:
            self.fail(f"Model({values}) crashed", traceback.format_exc())
        self.declared_dtypes(model, self.m)
        if self.compiled:
            compile_eval_blocks(model)
        model64.double()  # the float64 twin is a device of this test: every float is float64
        self.randomise(model)
        self.randomise(model64)
        self.values, self.model, self.model64 = values, model, model64
        try:
            self.params = {k: v.detach().double().numpy() for k, v in spec_state(model64).items()}
        except Exception:
            self.fail("spec_state failed", traceback.format_exc())
        self.forward_once()
        if self.cache_pairs():
            self.cached_forward()
        if hasattr(model, "generate"):
            self.generate()

    def declared_dtypes(self, model, m: ir.Model) -> None:
        """Parameters and buffers have their declared dtypes."""
        want = {t.name: TORCH_DTYPES[t.ty.dtype] for t in m.params + m.buffers}
        for name, tensor in spec_state(model).items():
            if tensor.dtype != want[name]:
                self.fail(f"parameter {name} is {tensor.dtype}, declared {want[name]}")

    def randomise(self, model) -> None:
        with torch.no_grad():
            for p in itertools.chain(model.parameters(), model.buffers()):
                if p.is_floating_point():
                    p.copy_(torch.randn(p.shape, dtype=torch.float64) * 0.5)

    # ------------------------------------------------------------------ inputs
    def sample_dims(self, fixed: dict | None = None) -> dict:
        env = config_ints(self.values, self.m)
        domains = self.hints.domains if self.hints else {}
        for d, _, _ in self.m.dim_sources:
            dom = domains.get(d, [1, 2, 3])
            env[d] = int(dom[self.rng.integers(len(dom))])
            if self.rng.random() < 0.05:
                env[d] = 0  # an empty batch or sequence is a valid size too
        env.update(fixed or {})
        return env

    def make_inputs(self, env: dict, present: dict, fixed: dict | None = None) -> tuple[dict, dict]:
        """Native-dtype and float64 inputs for the sizes in env; absent optional inputs are None."""
        native, wide = {}, {}
        for i in self.m.inputs:
            if not present.get(i.name, True):
                native[i.name] = wide[i.name] = None
                continue
            if fixed and i.name in fixed:
                native[i.name], wide[i.name] = fixed[i.name]
                continue
            shape = tuple(evaluate(d, env) for d in i.ty.shape)
            if any(n < 0 for n in shape):
                self.fail(f"input {i.name} {i.ty.shape} has a negative size {list(shape)} for sizes {env}")
            dt = i.ty.dtype
            if dt in ("int32", "int64", "bool"):
                high = self.int_high(i.name, env)
                if high <= 0 and dt != "bool" and math.prod(shape):
                    raise NoValidInput(f"{i.name} indexes a table of {high} rows")
                if dt == "bool":
                    t = torch.from_numpy(self.rng.random(shape) < 0.7)
                else:
                    t = torch.from_numpy(self.rng.integers(0, max(high, 1), shape)).to(TORCH_DTYPES[dt])
                if self.hints and i.name in self.hints.masks and t.dim() >= 1 and t.numel():
                    t[..., 0] = 1  # key 0 is visible to every query: no fully masked rows
                native[i.name], wide[i.name] = t, t.clone()
            else:
                t = torch.from_numpy(self.rng.standard_normal(shape))
                native[i.name], wide[i.name] = t.to(TORCH_DTYPES[dt]), t.clone()
        return native, wide

    def required(self) -> set:
        return {i.name for i in self.m.inputs if not i.optional}

    def negative_sizes(self, env: dict, present: dict) -> bool:
        return any(evaluate(d, env) < 0 for i in self.m.inputs if present.get(i.name, True) for d in i.ty.shape)

    def int_high(self, name: str, env: dict) -> int:
        """Integer inputs hold valid indices: below the rows of every table they index (gather)
        and the classes of cross_entropy; else the generator's hint, else 4."""
        highs = []
        for e in ir.walk_exprs(self.m.body):
            if not isinstance(e, ir.Op) or e.op not in ("gather", "cross_entropy"):
                continue
            index, table = (e.arg("index"), e.arg("table")) if e.op == "gather" else (e.arg("targets"), e.arg("logits"))
            if isinstance(index, ir.Ref) and index.name == name and isinstance(table.ty, ir.TensorT):
                axis = 0 if e.op == "gather" else -1
                try:
                    highs.append(evaluate(table.ty.shape[axis], env))
                except (KeyError, IndexError):
                    pass
        if highs:
            return min(highs)
        if self.hints and name in self.hints.int_high:
            h = self.hints.int_high[name]
            return env[h] if isinstance(h, str) else h
        return 4

    def presence(self) -> dict:
        present = {}
        for i in self.m.inputs:
            if i.optional:
                present[i.name] = bool(self.rng.random() < 0.6)
        for group in self.m.input_groups + ((self.plans().caches.together,) if self.plans().caches.together else ()):
            first = present[group[0]]
            for n in group:
                present[n] = first
        return present

    def env_for(self, present: dict, env: dict) -> dict:
        """Run-time dims owned by absent optional inputs are 0."""
        env = dict(env)
        for d, inp, _ in self.m.dim_sources:
            if not present.get(inp, True):
                owner_dims = [x for x, i2, _ in self.m.dim_sources if i2 == inp]
                for x in owner_dims:
                    env[x] = 0
        return env

    # ------------------------------------------------------------------ one forward
    def call(self, model, inputs: dict, what: str):
        """forward on copies of `inputs`; a module that writes into its inputs fails."""
        kwargs = {k: v.clone() for k, v in inputs.items() if v is not None}
        with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = model(**kwargs)
        self.no_eager_fallback(caught, what)
        for k, v in kwargs.items():
            if not torch.equal(v, inputs[k]) and not (v.is_floating_point() and torch.equal(v.isnan(), inputs[k].isnan())
                                                        and torch.equal(v.nan_to_num(), inputs[k].nan_to_num())):
                self.fail(f"{what}: forward modified its input {k}")
        names = [o.name for o in self.m.outputs]
        if len(names) == 1:
            return {names[0]: out}
        return {n: getattr(out, n) for n in names}

    def expect_refusal(self, model, inputs: dict, broken: list, what: str) -> None:
        try:
            self.call(model, inputs, what)
        except ValueError:
            self.outcome.refused += 1
            return
        except Exception:
            self.fail(f"{what}: inputs breaking {broken} gave a crash instead of a ValueError",
                      traceback.format_exc(limit=-3))
        self.fail(f"{what}: inputs breaking {broken} were not refused")

    def forward_pair(self, env: dict, native: dict, wide: dict, what: str) -> dict | None:
        """Runs both modules; checks outputs against declarations and the interpreter. Returns
        the float64 outputs, or None when the inputs are rightly refused."""
        broken = broken_checks(self.m, env, given={n for n, v in native.items() if v is not None})
        if broken:
            self.expect_refusal(self.model, native, broken, what)
            self.expect_refusal(self.model64, wide, broken, what + " (float64)")
            return None
        shapes = self.describe(env, native)
        try:
            got = self.call(self.model, native, what)
        except Exception:
            self.fail(f"{what}: the module failed on valid inputs {shapes}", traceback.format_exc(limit=-4))
        self.check_declared(got, env, what, self.m, shapes)
        try:
            got64 = self.call(self.model64, wide, what)
        except Exception:
            self.fail(f"{what} (float64): the module failed on valid inputs {shapes}", traceback.format_exc(limit=-4))
        self.check_declared(got64, env, what + " (float64)", self.m64, shapes)
        want = self.reference(wide, what, shapes)
        for name, w in want.items():
            g = got64[name]
            if (g is None) != (w is None):
                self.fail(f"{what}: output {name} is {'None' if g is None else 'present'} but the interpreter's "
                          f"is {'None' if w is None else 'present'} {shapes}")
            if g is None:
                continue
            g = g.detach().double().numpy() if isinstance(g, torch.Tensor) else np.asarray(g, dtype=np.float64)
            w = np.asarray(w, dtype=np.float64)
            if g.shape != w.shape:
                self.fail(f"{what}: output {name} has shape {g.shape}, the interpreter's {w.shape} {shapes}")
            if not np.array_equal(np.isnan(g), np.isnan(w)):
                self.fail(f"{what}: output {name} is NaN in one and not the other (module {int(np.isnan(g).sum())}, "
                          f"interpreter {int(np.isnan(w).sum())} NaNs) {shapes}")
            if not np.allclose(g, w, rtol=RTOL, atol=ATOL, equal_nan=True):
                err = np.nanmax(np.abs(g - w)) if g.size else 0.0
                self.fail(f"{what}: output {name} differs from the interpreter by {err:.3g} {shapes}")
        self.outcome.runs += 1
        return got, got64

    def reference(self, wide: dict, what: str, shapes: str) -> dict:
        inputs = {k: (v.numpy() if v is not None else None) for k, v in wide.items()}
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return interpret(self.m64, self.params, inputs, self.values)
        except Exception:
            self.fail(f"{what}: the interpreter failed on valid inputs {shapes}", traceback.format_exc(limit=-3))

    def describe(self, env: dict, inputs: dict) -> str:
        sizes = ", ".join(f"{k}={v}" for k, v in sorted(env.items()))
        given = ", ".join(f"{k}{list(v.shape)}" for k, v in inputs.items() if v is not None)
        return f"(config {self.values}; sizes {sizes}; inputs {given})"

    def check_declared(self, got: dict, env: dict, what: str, m: ir.Model, shapes: str) -> None:
        bound: dict = {}
        for o in m.outputs:
            v = got[o.name]
            if v is None:
                if not o.optional:
                    self.fail(f"{what}: output {o.name} is None but not declared optional {shapes}")
                continue
            if not isinstance(v, torch.Tensor):
                self.fail(f"{what}: output {o.name} is a {type(v).__name__}, not a tensor")
            if v.dtype != TORCH_DTYPES[o.ty.dtype]:
                self.fail(f"{what}: output {o.name} is {v.dtype}, declared {o.ty.dtype} {shapes}")
            if v.dim() != o.ty.rank:
                self.fail(f"{what}: output {o.name} has shape {list(v.shape)}, declared rank {o.ty.rank} {shapes}")
            for axis, d in enumerate(o.ty.shape):
                n = v.shape[axis]
                unknown = d.symbols() - set(env)
                if not unknown:
                    want = evaluate(d, env)
                elif len(unknown) == 1 and d.as_symbol():
                    want = bound.setdefault(d.as_symbol(), n)
                else:
                    continue
                if n != want:
                    self.fail(f"{what}: output {o.name} has shape {list(v.shape)}; declared axis {axis} is {d} = "
                              f"{want} {shapes}")

    # ------------------------------------------------------------------ protocols
    def forward_once(self) -> None:
        present = self.presence()
        env = self.env_for(present, self.sample_dims())
        if broken_checks(self.m, env, given={n for n, p in present.items() if p} | self.required()) \
                and self.negative_sizes(env, present):
            self.outcome.refused += 1  # invalid sizes no tensor can have: nothing to call with
            return
        try:
            native, wide = self.make_inputs(env, present)
        except NoValidInput:
            self.outcome.refused += 1
            return
        self.forward_pair(env, native, wide, "forward")

    def plans(self):
        """The module's own plans (snf/passes): which inputs and outputs are a cache, and what
        `generate` feeds back. They say what the module promises; this test checks it keeps it."""
        if not hasattr(self, "_plans"):
            from snf.passes import plan, run_passes
            self._plans = plan(run_passes(self.m))
        return self._plans

    def cache_pairs(self) -> list[tuple[str, str]]:
        """The spec's KV caches (the cache plan, from data flow): (input fed back, output)."""
        return [(c.input, c.output) for c in self.plans().caches.caches]

    def time_dims(self) -> tuple[str, str | None] | None:
        """(T, T_past): the dim the first input grows along, and the caches' own dim (None when they
        are all recurrent states, which do not grow)."""
        caches = self.plans().caches.caches
        first = self.m.inputs[0]
        runtime = set(self.m.run_time_dims)
        if first.ty.rank >= 2 and first.ty.shape[1].as_symbol() not in runtime:  # sized by the config (Whisper's
            # features): the tokens that grow are a later input's, the decoder's
            first = next((i for i in self.m.inputs if i.ty.rank >= 2 and i.ty.shape[1].as_symbol() in runtime), first)
        grown = {c.dim for c in caches if not c.state}
        if first.ty.rank < 2 or not caches or len(grown) > 1:
            return None
        t = first.ty.shape[1].as_symbol()
        return (t, next(iter(grown), None)) if t is not None else None

    def cached_forward(self) -> None:
        dims = self.time_dims()
        if dims is None:
            return
        t_name, past_name = dims
        pairs = self.cache_pairs()
        env0 = self.sample_dims()
        total = int(self.rng.integers(2, 7))
        cuts = sorted(set(int(c) for c in self.rng.integers(1, total, size=2)))
        chunks = [b - a for a, b in zip([0] + cuts, cuts + [total])]
        past_native = past_wide = None
        done = 0
        present = self.presence()
        together = {p for p, _ in pairs} | {n for g in self.m.input_groups if set(g) & {p for p, _ in pairs} for n in g}
        for p in together:
            present[p] = False
        for n, length in enumerate(chunks):
            env = dict(env0)
            env[t_name] = length
            if past_name is not None:
                env[past_name] = done
            if n:
                for p in together:
                    present[p] = True
            fixed = None
            if n:
                fixed = {p: (past_native[q], past_wide[q]) for p, q in pairs}
                declared = {i.name: i.ty.shape for i in self.m.inputs}
                for p, (t, _) in fixed.items():
                    want = [evaluate(d, env) for d in declared[p]]
                    if list(t.shape) != want:  # this spec's new_X is no past_X: nothing to feed back
                        self.outcome.notes.append(f"{p}: the returned cache does not fit the input")
                        return
            try:
                native, wide = self.make_inputs(env, present, fixed)
            except NoValidInput:
                self.outcome.refused += 1
                return
            outs = self.forward_pair(env, native, wide, f"cached forward, chunk {n + 1} of {len(chunks)}")
            if outs is None:
                return
            past_native = {q: outs[0][q] for _, q in pairs}
            past_wide = {q: outs[1][q] for _, q in pairs}
            if any(v is None for v in list(past_native.values()) + list(past_wide.values())):
                return  # an optional cache output that is absent: nothing to feed back
            done += length

    def generate(self) -> None:
        """Greedy `generate` against the interpreter run the way generate is documented to run:
        the prompt once, then the newest token with each cache `new_X` fed back as `past_X`
        (docs/language.md 10.2), or the whole sequence each step when another optional input
        shares the cache's dim. Each token must be the interpreter's argmax, within tolerance."""
        decode = self.plans().decode
        if decode is None:
            self.fail("the module has generate, but its decode plan says it is no causal language model")
        first = next(i for i in self.m.inputs if i.name == decode.tokens)
        required = [i.name for i in self.m.inputs if not i.optional and i.name != first.name]
        if required:
            self.fail(f"generate failed: the module has generate, which cannot pass the required input "
                      f"{required[0]}: missing 1 required positional argument")
        pairs = [(c.input, c.output) for c in decode.caches]
        env = self.sample_dims()
        B = env.get(first.ty.shape[0].as_symbol(), 2)
        prompt_len = int(self.rng.integers(1, 4))
        steps = int(self.rng.integers(1, 4))
        high = self.int_high(first.name, env)
        if high <= 0:
            return  # no valid token id for these sizes
        prompt = torch.from_numpy(self.rng.integers(0, high, (B, prompt_len))).to(TORCH_DTYPES[first.ty.dtype])
        # the interpreter first: it tells whether every step's sizes are valid
        logits_name = decode.logits
        seq, caches, reference = prompt.numpy(), None, []
        for step in range(steps):
            inputs = {i.name: None for i in self.m.inputs}
            inputs[first.name] = seq if caches is None else seq[:, -1:]
            inputs.update(caches or {})
            broken = broken_checks(self.m, self.env_of(inputs), given={n for n, v in inputs.items() if v is not None})
            if broken:
                if step == 0:
                    return  # this prompt is invalid for the spec: nothing to compare
                steps = step
                break
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = interpret(self.m64, self.params, inputs, self.values)
            last = np.asarray(ref[logits_name], dtype=np.float64)[:, -1, :]
            reference.append(last)
            if last.shape[-1] > high and step + 1 < steps:
                self.fail(f"generate failed: its logits have {last.shape[-1]} classes but `{first.name}` takes ids "
                          f"below {high} (config {self.values}): a sampled token can be out of range")
            choice = last.argmax(-1)[:, None].astype(seq.dtype)
            seq = np.concatenate([seq, choice], axis=1)
            if pairs:
                caches = {p: (None if ref[q] is None else np.asarray(ref[q])) for p, q in pairs}
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out64 = self.model64.generate(prompt.clone(), steps, temperature=0)
                out = self.model.generate(prompt.clone(), steps, temperature=0)
        except Exception:
            self.fail(f"generate failed (prompt {list(prompt.shape)}, {steps} tokens, config {self.values})",
                      traceback.format_exc(limit=-4))
        self.no_eager_fallback(caught, "generate")
        for got in (out, out64):
            if tuple(got.shape) != (B, prompt_len + steps) or not torch.equal(got[:, :prompt_len], prompt):
                self.fail(f"generate returned {list(got.shape)}, expected the prompt and {steps} tokens")
        # each token greedy generate picked must be a best one by the interpreter (ties allowed);
        # when it picked another of equal score than the interpreter, the runs part there
        for step, last in enumerate(reference):
            chosen = out64[:, prompt_len + step].numpy()
            best = last.max(axis=-1)
            picked = last[np.arange(B), chosen]
            if np.any(picked < best - (ATOL + RTOL * np.abs(best))):
                self.fail(f"generate step {step + 1}: token {chosen.tolist()} is not the argmax of the "
                          f"interpreter's logits (best {best.tolist()}, picked {picked.tolist()}) "
                          f"(config {self.values}, prompt {prompt.tolist()})")
            if not np.array_equal(chosen, last.argmax(-1)):
                break
        self.outcome.runs += 1

    def no_eager_fallback(self, caught, what: str) -> None:
        """Compiled runs must stay compiled: the module's fallback to eager is a failure here."""
        if self.compiled:
            for w in caught:
                if "running eager" in str(w.message):
                    self.fail(f"{what}: torch.compile fell back to eager: {w.message}")

    def env_of(self, inputs: dict) -> dict:
        """Config values and the run-time dims the given inputs bind (absent ones bind 0)."""
        env = config_ints(self.values, self.m)
        for d, name, axis in self.m.dim_sources:
            v = inputs.get(name)
            env[d] = int(np.asarray(v).shape[axis]) if v is not None else 0
        for i in self.m.inputs:  # dims first bound elsewhere, by expressions, are checked by broken_checks
            v = inputs.get(i.name)
            for axis, d in enumerate(i.ty.shape):
                s = d.as_symbol()
                if s and s not in env and v is not None:
                    env[s] = int(np.asarray(v).shape[axis])
        return env


def run(text: str, hints=None, seed: int = 0, configs: int = 2, compiled: bool = False) -> Outcome:
    """Check one spec; raises Unsound with the details when an accepted spec misbehaves.
    `compiled`: the caller turned torch.compile on; falling back to eager fails."""
    return Runner(text, hints, np.random.default_rng(seed), compiled).go(configs)
