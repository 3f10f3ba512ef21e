"""A session: one model used the way people use one, on the default path (torch.compile on), call
after call, checked against the same model run eagerly.

`run_session(text, hints, seed)` builds the spec's module once and one model of a valid config,
whose eval forward compiles per layer block on every device (a unit users may choose; both devices'
defaults evaluate eagerly, and compile generate's decode step; `eval_blocks=False`: the device's
default), then runs, in order:

* eval forwards with varied batch and lengths, optional inputs given or not, and chained calls
  that feed a call's caches to the next (as `generate` and chat loops do); the first is also
  checked against `snf.interpret` (runner.Runner.forward_pair, in the float64 twin);
* two training steps (forward, a loss, backward, an SGD update) on the model's own training unit,
  and, with `whole_training`, two more compiled whole (`compile_units` "model": the CUDA
  default; on the CPU traced as CUDA's compile traces it, not lowered: _as_cuda_traces), gradients
  against an eager twin;
* eval again, at the first call's sizes (the switch back must not break what was compiled);
* `generate` at two batch sizes, greedy, against eager `generate`;
* the model cast to bfloat16 (`.to(torch.bfloat16)`), and a float32 model under autocast:
  forward (and `generate`) run, with the declared shapes, in the dtypes docs/language.md 3.2
  gives, and agree with eager loosely.

Every call must run: an error, or a warning that compiling fell back to eager, fails the
session. `Session.graphs` counts the graphs each compiled function keeps at the end.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import sys
import time
import traceback
import warnings

import numpy as np
import torch

import runner
import specgen
from runner import Unsound, broken_checks, evaluate
from snf.runtime.compiling import _eagerly

# float32 compiled and eager round differently (inductor fuses and reorders reductions), so they
# agree to a few ulps of the largest value, not 1e-5 of each; both are held to the float64
# interpreter at 1e-5 elsewhere (runner.py). bfloat16 has 8 bits of mantissa.
RTOL = {torch.float32: 1e-4, torch.float64: 1e-7, torch.bfloat16: 0.1, torch.float16: 0.05}


@dataclasses.dataclass
class SessionOutcome:
    accepted: bool
    calls: int = 0
    skipped: int = 0  # sizes the spec refuses, or no valid input: nothing to call with
    graphs: dict = dataclasses.field(default_factory=dict)  # compiled function -> graphs it keeps
    notes: list = dataclasses.field(default_factory=list)


def graph_counts(module) -> dict:
    """Graphs dynamo keeps per compiled function of `module`: each block's forward and Model.forward
    (the whole-forward unit and the decode step share its code)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    out = {}
    for name, value in vars(module).items():
        if isinstance(value, type) and issubclass(value, torch.nn.Module) and value.__module__ == module.__name__:
            forward = value.__dict__.get("forward")
            code = getattr(getattr(forward, "__wrapped__", forward), "__code__", None)
            if code is not None:
                count = len(_debug_get_cache_entry_list(code))
                if count:
                    out[f"{name}.forward"] = count
    return out


class Session(runner.Runner):
    """runner.Runner's sampling of configs, sizes and inputs, driving one model through a session."""

    def __init__(self, text, hints, rng, *, calls: int = 8, whole_training: bool = False, casts: bool = True,
                 config: dict | None = None, device: str = "cpu", after=None, all_casts: bool = True,
                 batches: tuple | None = None, cast_generate_compiled: bool = True, eval_blocks: bool = True,
                 lower_whole_training: bool = False):
        super().__init__(text, hints, rng, compiled=True)
        self.n_calls, self.whole_training, self.casts, self.config = calls, whole_training, casts, config
        # the cast's and autocast's forwards compiled per block and autocast's generate compiled; else
        # they run on the model's own units (the cast's generate compiles, autocast runs eagerly)
        self.all_casts = all_casts
        self.after = after  # after(model): more calls on the session's compiled model, before it goes
        self.batches = batches  # generate's batch sizes (two drawn when None): a decode step compiles per size
        self.cast_generate_compiled = cast_generate_compiled  # False: the bfloat16 cast's generate runs eagerly
        self.eval_blocks = eval_blocks  # the eval forward compiled per block; False: on the device's default unit
        self.lower_whole_training = lower_whole_training  # on the CPU too, inductor lowers it (else _as_cuda_traces)
        self.device = torch.device(device)
        self.session = SessionOutcome(False)
        self.first_sizes = None  # (presence, sizes) of the first eval call that ran

    # ------------------------------------------------------------------ set-up
    def go(self, configs: int = 1) -> SessionOutcome:  # noqa: ARG002 - one config per session
        result = runner.checked(self.text)
        if not result.ok:
            return self.session
        self.session.accepted = True
        self.m = result.model
        twin = dataclasses.replace(result, model=runner.float64_model(result.model))
        self.m64 = twin.model
        self.mod = runner.load_module(result, "session")
        self.mod64 = runner.load_module(twin, "session64")
        try:
            if self.setup():
                self.steps()
                if self.after is not None:
                    self.after(self.model)
            self.session.graphs = graph_counts(self.mod)
        finally:
            runner.unload(self.mod)
            runner.unload(self.mod64)
        return self.session

    def setup(self) -> bool:
        for _ in range(20):  # a config the spec accepts
            values = self.sample_config() if self.config is None else self.full_config(self.config)
            if not broken_checks(self.m, runner.config_ints(values, self.m), config_only=True):
                break
        else:
            return False
        self.values = values
        torch.manual_seed(int(self.rng.integers(1 << 30)))
        try:
            self.model = self.mod.Model(self.mod.Config(**values)).eval()
            self.model64 = self.mod64.Model(self.mod64.Config(**values)).eval().double()
        except Exception:
            self.fail(f"Model({values}) crashed", traceback.format_exc())
        self.randomise(self.model)
        with torch.no_grad():  # the twin holds the same weights, widened
            for a, b in zip(self.model64.state_dict().values(), self.model.state_dict().values()):
                a.copy_(b)
        self.model.to(self.device)
        if self.eval_blocks:
            runner.compile_eval_blocks(self.model)
        from snf.interop import spec_state
        self.params = {k: v.detach().double().numpy() for k, v in spec_state(self.model64).items()}
        return True

    def full_config(self, given: dict) -> dict:
        values = {f.name: f.default for f in self.m.config if f.default is not runner.ir.MISSING}
        values.update(given)
        return values

    def randomise(self, model) -> None:
        """Weights of a trained model's size (std 0.5 would make deep random specs overflow in bfloat16)."""
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn(p.shape, dtype=torch.float64) * 0.3)
            for p in model.buffers():
                if p.is_floating_point():
                    p.copy_(torch.randn(p.shape, dtype=torch.float64) * 0.3)

    # ------------------------------------------------------------------ running both ways
    def eager(self, module=None):
        """Nothing compiles inside: a module's own _eagerly (a --standalone one), else the runtime's,
        which every module that imports it shares."""
        return getattr(module or self.mod, "_eagerly", _eagerly)()

    def run(self, model, kwargs: dict, what: str, *, eager: bool = False, grad: bool = False):
        """Call `model(**kwargs)` (compiled, or eagerly); a fallback to eager fails the session."""
        module = sys.modules[type(model).__module__]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with torch.set_grad_enabled(grad), (self.eager(module) if eager else _nothing()):
                    out = model(**kwargs)
            except Exception:
                self.fail(f"{what}{' (eager)' if eager else ''} failed {self.where(kwargs)}",
                          traceback.format_exc(limit=-6))
        for w in caught:
            text = str(w.message)
            if "running eager" in text or "run eagerly" in text:
                self.fail(f"{what}: compiling fell back to eager: {text} {self.where(kwargs)}")
        names = [o.name for o in self.m.outputs]
        return {names[0]: out} if len(names) == 1 else {n: getattr(out, n) for n in names}

    def where(self, kwargs: dict) -> str:
        given = ", ".join(f"{k}{list(v.shape)}" if isinstance(v, torch.Tensor) else f"{k}={v!r}"
                          for k, v in kwargs.items() if v is not None)
        return f"(config {self.values}; {given})"

    def both(self, model, kwargs: dict, what: str, rtol: float | None = None, dtypes: dict | None = None) -> dict:
        """The call compiled and eagerly, compared; the eager outputs."""
        got = self.run(model, kwargs, what)
        want = self.run(model, self.kwargs(kwargs), what, eager=True)
        self.compare(got, want, what, kwargs, rtol, dtypes)
        return want

    def compare(self, got: dict, want: dict, what: str, kwargs: dict, rtol: float | None = None,
                dtypes: dict | None = None) -> None:
        for name, w in want.items():
            g = got.get(name)
            if (g is None) != (w is None):
                self.fail(f"{what}: output {name} is {'None' if g is None else 'given'} compiled, "
                          f"{'None' if w is None else 'given'} eagerly {self.where(kwargs)}")
            if g is None:
                continue
            if g.shape != w.shape or g.dtype != w.dtype:
                self.fail(f"{what}: output {name} is {list(g.shape)} {g.dtype} compiled, {list(w.shape)} {w.dtype} "
                          f"eagerly {self.where(kwargs)}")
            if dtypes is not None and name in dtypes and g.dtype != dtypes[name]:
                self.fail(f"{what}: output {name} is {g.dtype}, where the model's dtype makes it {dtypes[name]} "
                          f"{self.where(kwargs)}")
            if not g.is_floating_point():
                if rtol is None and not torch.equal(g, w):
                    self.fail(f"{what}: output {name} differs compiled and eagerly {self.where(kwargs)}")
                continue
            tol = RTOL.get(g.dtype, 1e-4) if rtol is None else rtol
            g64, w64 = g.detach().double(), w.detach().double()
            finite = torch.isfinite(w64) & torch.isfinite(g64)
            if not torch.equal(torch.isnan(g64), torch.isnan(w64)) and rtol is None:
                self.fail(f"{what}: output {name} is NaN compiled in other places than eagerly {self.where(kwargs)}")
            if finite.any():
                scale = max(1.0, w64[finite].abs().max().item())
                err = (g64[finite] - w64[finite]).abs().max().item()
                if err > tol * scale:
                    self.fail(f"{what}: output {name} differs compiled and eagerly by {err:.3g} (scale {scale:.3g}, "
                              f"tolerance {tol:g}) {self.where(kwargs)}")
        self.session.calls += 1

    # ------------------------------------------------------------------ inputs
    def valid_inputs(self, env: dict, present: dict, fixed: dict | None = None):
        """Inputs for the sizes in env, or None when the spec would rightly refuse them."""
        given = {n for n, p in present.items() if p} | self.required()
        if broken_checks(self.m, env, given=given) or self.negative_sizes(env, present):
            return None
        try:
            native, wide = self.make_inputs(env, present, fixed)
        except runner.NoValidInput:
            return None
        return native, wide

    def kwargs(self, inputs: dict) -> dict:
        return {k: v.to(self.device, copy=True) for k, v in inputs.items() if v is not None}

    # ------------------------------------------------------------------ the session
    def steps(self) -> None:
        first = True
        for n in range(self.n_calls):
            if n % 3 == 2 and self.cache_pairs() and self.time_dims():
                self.chained_call()
            else:
                self.eval_call(check_reference=first)
                first = False
        self.training_step(self.model, "training step")
        if self.whole_training:
            self.training_step(self.model, "training step compiled whole", unit="model")
        self.model.eval()
        # back in eval mode, at the first call's sizes: the switch back to graphs compiled already, not a
        # new class of sizes to compile (the calls before drew those)
        self.eval_call(again=True)
        if hasattr(self.model, "generate"):
            for batch in self.generate_batches():
                self.generate(self.model, batch, "generate")
        if self.casts and self.m.float_dtype is not None:
            self.cast_calls()

    def eval_call(self, check_reference: bool = False, model=None, what: str = "eval forward",
                  rtol: float | None = None, dtypes: dict | None = None, again: bool = False) -> None:
        """A forward compiled against eager; `again`: at the sizes of the first one that ran."""
        model = model or self.model
        if again and self.first_sizes is not None:
            present, env = self.first_sizes
        else:
            present = self.presence()
            env = self.env_for(present, self.sample_dims())
        made = self.valid_inputs(env, present)
        if made is None:
            self.session.skipped += 1
            return
        if self.first_sizes is None:
            self.first_sizes = present, env
        native, wide = made
        if check_reference and self.device.type == "cpu":  # the eager result against the interpreter (float64 twin)
            with self.eager(self.mod), self.eager(self.mod64):
                if self.forward_pair(env, native, wide, "eval forward against the interpreter") is None:
                    return
        kwargs = self.kwargs(native)
        if model is not self.model:  # a cast model: its floating inputs in its dtype
            kwargs = {k: v.to(self.cast_dtype) if v.is_floating_point() else v for k, v in kwargs.items()}
        self.both(model, kwargs, what, rtol, dtypes)

    def chained_call(self) -> None:
        """A prefix, then the rest fed the prefix's caches (as a chat's next turn is)."""
        t_name, past_name = self.time_dims()
        pairs = self.cache_pairs()
        env = self.sample_dims()
        prefix, rest = int(self.rng.integers(1, 5)), int(self.rng.integers(1, 4))
        present = self.presence()
        together = {p for p, _ in pairs} | {n for g in self.m.input_groups if set(g) & {p for p, _ in pairs} for n in g}
        for p in together:
            present[p] = False
        grows = {past_name: 0} if past_name is not None else {}
        env1 = dict(env, **{t_name: prefix}, **grows)
        made = self.valid_inputs(env1, present)
        if made is None:
            self.session.skipped += 1
            return
        want = self.both(self.model, self.kwargs(made[0]), "chained forward, first part")
        if any(want[q] is None for _, q in pairs):
            return
        for p in together:
            present[p] = True
        env2 = dict(env, **{t_name: rest}, **({past_name: prefix} if past_name is not None else {}))
        fixed = {p: (want[q], want[q]) for p, q in pairs}
        declared = {i.name: i.ty.shape for i in self.m.inputs}
        if any(list(t.shape) != [evaluate(d, env2) for d in declared[p]] for p, (t, _) in fixed.items()):
            return  # the returned cache is no input of this spec's
        made = self.valid_inputs(env2, present, fixed)
        if made is None:
            self.session.skipped += 1
            return
        self.both(self.model, self.kwargs(made[0]), "chained forward, fed the caches")

    def training_step(self, model, what: str, unit: str | None = None, steps: int = 2) -> None:
        """`steps` SGD steps: forward, a loss (the spec's own, else the mean of every float output),
        backward, an update. The gradients compiled (on the default unit, or `unit`) against an
        eager twin that started from the same weights; later steps read the updated weights."""
        present = self.presence()
        env = self.env_for(present, self.sample_dims())
        made = self.valid_inputs(env, present)
        if made is None:
            self.session.skipped += 1
            return
        kwargs = self.kwargs(made[0])
        twin = copy.deepcopy(model)
        saved = model.compile_units
        for m in (model, twin):
            m.train()
            if unit is not None:
                m.compile_units = {d: dict(units, train=unit) for d, units in saved.items()}
        import torch._inductor.config as inductor_config
        try:
            for step in range(steps):
                traced = unit == "model" and self.device.type == "cpu" and not self.lower_whole_training
                with (_as_cuda_traces() if traced else _nothing()), \
                        inductor_config.patch(fallback_random=True):  # dropout: the same masks compiled
                    grads = [self.gradients(m, kwargs, f"{what} {step + 1}", eager)
                             for m, eager in ((model, False), (twin, True))]
                if grads[0] is None:
                    return
                got, want = grads
                # a graph compiled whole gives the parameters of an output the loss does not read (BERT's
                # pooler) zero gradients, where eager autograd leaves them None
                for name in set(got) - set(want):
                    want[name] = torch.zeros_like(got[name])
                self.compare(got, want, f"{what} {step + 1}: gradients", kwargs)
                with torch.no_grad():
                    for m in (model, twin):
                        for p in m.parameters():
                            if p.grad is not None:
                                p -= 0.05 * p.grad
        finally:
            model.compile_units = saved

    def gradients(self, m, kwargs: dict, what: str, eager: bool) -> dict | None:
        torch.manual_seed(7)  # dropout draws the same masks in both
        for p in m.parameters():
            p.grad = None
        out = self.run(m, self.kwargs(kwargs), what, eager=eager, grad=True)
        loss = _loss(out)
        if loss is None or not loss.requires_grad:
            return None
        try:
            loss.backward()
        except Exception:
            self.fail(f"{what}: backward failed{' (eager)' if eager else ''} {self.where(kwargs)}",
                      traceback.format_exc(limit=-6))
        return {n: p.grad for n, p in m.named_parameters() if p.grad is not None}

    def generate_batches(self) -> list[int]:  # the sizes the session was given, else two drawn
        if self.batches is not None:
            return list(self.batches)
        first = int(self.rng.integers(1, 4))
        return [first, first % 3 + 1]

    def generate(self, model, batch: int, what: str) -> None:
        decode = self.plans().decode
        tokens = next(i for i in self.m.inputs if i.name == decode.tokens)
        env = self.sample_dims()
        high = self.int_high(tokens.name, env)
        if high <= 0:
            return
        prompt = torch.from_numpy(self.rng.integers(0, high, (batch, int(self.rng.integers(1, 5)))))
        prompt = prompt.to(runner.TORCH_DTYPES[tokens.ty.dtype]).to(self.device)
        steps = int(self.rng.integers(1, 6))
        for step in range(steps + 1):  # the longest run the spec accepts (a cache bound may stop it)
            seq_env = dict(env, **{tokens.ty.shape[1].as_symbol() or "_": prompt.size(1) + step})
            seq_env[tokens.ty.shape[0].as_symbol() or "_"] = batch
            for c in self.plans().caches.caches:
                seq_env[c.dim] = 0
            if broken_checks(self.m, seq_env, given=self.required()):
                steps = step - 1
                break
        if steps < 1:
            return
        kwargs = {"idx": prompt, "steps": steps}
        first = self.generate_input(model, prompt)  # the same for the compiled and the eager run
        outs = []
        for eager in (False, True):
            module = sys.modules[type(model).__module__]
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    with self.eager(module) if eager else _nothing():
                        outs.append(model.generate(first.clone(), steps, temperature=0))
                except Exception:
                    self.fail(f"{what} at batch {batch}{' (eager)' if eager else ''} failed {self.where(kwargs)}",
                              traceback.format_exc(limit=-6))
            for w in caught:
                if not eager and ("running eager" in str(w.message) or "run eagerly" in str(w.message)):
                    self.fail(f"{what}: compiling fell back to eager: {w.message}")
        got, want = outs
        if decode.encoder is not None:  # an encoder-decoder: the decoder's tokens, from its start token
            if got.size(0) != batch or not 1 < got.size(1) <= 1 + steps or not torch.equal(got, want):
                self.fail(f"{what} at batch {batch} returned {got.tolist()}, eager {want.tolist()}, for an "
                          f"input {list(prompt.shape)} and {steps} new tokens")
            self.session.calls += 1
            return
        if got.shape != (batch, prompt.size(1) + steps):
            self.fail(f"{what} at batch {batch} returned {list(got.shape)} for a prompt {list(prompt.shape)} and "
                      f"{steps} new tokens")
        if not torch.equal(got, want):
            self.near_tie(model, got, want, prompt.size(1), what)
        self.session.calls += 1

    def generate_input(self, model, prompt):
        """What generate takes first: the prompt; for an encoder-decoder, its encoder's first input,
        which is the prompt where that is token ids too (T5's) and else drawn at the prompt's batch
        (Whisper's features), in the model's floating dtype."""
        encoder = self.plans().decode.encoder
        first = next((i for i in self.m.inputs if encoder is not None and i.name == encoder.inputs[0]), None)
        if first is None or first.ty.dtype.startswith("int"):
            return prompt.clone()
        env = dict(self.sample_dims(), **{first.ty.shape[0].as_symbol(): prompt.size(0)})
        drawn = self.make_inputs(env, {i.name: i is first for i in self.m.inputs})[0][first.name]
        dtype = next(p.dtype for p in model.parameters() if p.is_floating_point())
        return drawn.to(self.device, dtype)

    def near_tie(self, model, got, want, start: int, what: str) -> None:
        """Compiled and eager greedy decoding may part where two tokens score the same (within float
        rounding): fine there, nowhere else."""
        column = next(c for c in range(start, got.size(1)) if not torch.equal(got[:, c], want[:, c]))
        decode = self.plans().decode
        with self.eager(sys.modules[type(model).__module__]), torch.no_grad():
            out = model(want[:, :column])
        logits = (out if len(self.m.outputs) == 1 else getattr(out, decode.logits))[:, -1, :].double()
        best = logits.max(-1).values
        picked = logits.gather(-1, got[:, column:column + 1]).squeeze(-1)
        tol = RTOL.get(logits.dtype, 1e-4) * max(1.0, best.abs().max().item()) * 10
        if (best - picked).max().item() > tol:
            self.fail(f"{what}: compiled greedy decoding chose {got[:, column].tolist()} at position {column}, eager "
                      f"{want[:, column].tolist()}, and the compiled choice is no best token there "
                      f"(best {best.tolist()}, picked {picked.tolist()})")

    def cast_calls(self) -> None:
        """The model cast to bfloat16, then the float32 model under autocast: they run, in the
        dtypes the rule gives (the model's floating dtype becomes the cast's), and agree loosely."""
        self.cast_dtype = torch.bfloat16
        cast = copy.deepcopy(self.model).to(torch.bfloat16).eval()
        if not self.all_casts and hasattr(cast, "compile_units"):
            del cast.compile_units  # the class's table: generate's decode steps compile, the forward runs eagerly
        model_dtype = self.m.float_dtype
        # a model holding no floating tensor (its parameters all off, by their flags) has nothing a
        # cast changes: its dtype stays the spec's (docs/language.md 3.2)
        holds = any(t.is_floating_point() for t in (*cast.parameters(), *cast.buffers()))
        dtypes = {o.name: (torch.bfloat16 if o.ty.dtype == model_dtype and holds else runner.TORCH_DTYPES[o.ty.dtype])
                  for o in self.m.outputs}
        self.eval_call(model=cast, what="bfloat16 model, forward", rtol=float("inf"), dtypes=dtypes)
        if hasattr(cast, "generate"):
            with _nothing() if self.cast_generate_compiled else self.eager():
                self.generate_runs(cast, "bfloat16 model, generate")
        if model_dtype != "float32":
            return  # autocast is for float32 models: torch's CPU autocast refuses a float16 tensor in `cat`
        with torch.autocast(self.device.type, dtype=torch.bfloat16), (_nothing() if self.all_casts else self.eager()):
            self.eval_call(what="autocast forward", rtol=float("inf"))
            if hasattr(self.model, "generate"):
                self.generate_runs(self.model, "autocast generate")

    def generate_runs(self, model, what: str) -> None:
        """generate in a lower precision: it runs and returns valid tokens (rounding may part it from eager)."""
        decode = self.plans().decode
        tokens = next(i for i in self.m.inputs if i.name == decode.tokens)
        high = self.int_high(tokens.name, self.sample_dims())
        if high <= 0:
            return
        prompt = torch.from_numpy(self.rng.integers(0, high, (2, 2))).to(runner.TORCH_DTYPES[tokens.ty.dtype])
        prompt = prompt.to(self.device)
        env = dict(self.sample_dims(), **{tokens.ty.shape[1].as_symbol() or "_": 4})
        for c in self.plans().caches.caches:
            env[c.dim] = 0
        if broken_checks(self.m, env, given=self.required()):
            return
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                out = model.generate(self.generate_input(model, prompt), 2, temperature=0)
            except Exception:
                self.fail(f"{what} failed (config {self.values})", traceback.format_exc(limit=-6))
        for w in caught:
            if "running eager" in str(w.message) or "run eagerly" in str(w.message):
                self.fail(f"{what}: compiling fell back to eager: {w.message}")
        if decode.encoder is not None and out.size(1) <= 3:  # the decoder's tokens: start, at most 2 more
            out = torch.cat([out, prompt[:, :4 - out.size(1)]], dim=1)  # shape-checked as the rest below
        if out.shape != (2, 4) or out.min() < 0 or out.max() >= max(high, 1):
            self.fail(f"{what} returned {out.tolist()}")
        self.session.calls += 1


class _as_cuda_traces:
    """CUDA's default training unit (the whole model) on the CPU: torch.compile's `aot_eager_decomp_partition`
    backend, which runs what inductor does before it lowers (dynamo's capture, AOTAutograd's joint
    graph, inductor's decompositions and partitioner) and the partitioned graphs eagerly. CUDA lowers
    them to Triton, which no CPU runs; lowering them to C++ instead, a unit no CPU default compiles,
    was a fifth of the suite's time (issue 53). The CUDA sessions lower it (scripts/gpu_checks.sh)."""

    def __enter__(self):
        self.compile = torch.compile
        torch.compile = functools.partial(self.compile, backend="aot_eager_decomp_partition")

    def __exit__(self, *exc):
        torch.compile = self.compile


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _loss(out: dict):
    loss = out.get("loss")
    if isinstance(loss, torch.Tensor) and loss.requires_grad:
        return loss
    parts = [v.float().mean() for v in out.values()
             if isinstance(v, torch.Tensor) and v.is_floating_point() and v.requires_grad and v.numel()]
    parts = [p for p in parts if math.isfinite(p.item())]
    return sum(parts) if parts else None


def run_session(text: str, hints=None, seed: int = 0, **options) -> SessionOutcome:
    """One session of one spec; raises runner.Unsound with the details when a call breaks."""
    return Session(text, hints, np.random.default_rng(seed), **options).go()



def new_stats() -> dict:
    """The counts random_sessions adds to, and summary_line reads."""
    return dict.fromkeys(("sessions", "rejected", "failures", "calls", "skipped", "graphs"), 0)


def random_sessions(count: int, stats: dict, seed0: int = 0, progress=None, keep_going: bool = False,
                    report_failure=None, device: str = "cpu", deadline: float | None = None,
                    lower_whole_training: bool = False) -> int:
    """Sessions of the first `count` accepted random specs from seed0 on (a third also train
    compiled whole: `lower_whole_training`, Session's), on `device`, starting none after the time.time()
    `deadline`; `progress(seed)` is called after each hundredth session. Returns the first seed not tried."""
    seed = seed0
    while stats["sessions"] < count and (deadline is None or time.time() < deadline):
        spec = specgen.build(specgen.RandomChooser(seed))
        try:
            out = run_session(spec.text, spec, seed, calls=6, whole_training=seed % 3 == 0, device=device,
                              lower_whole_training=lower_whole_training)
        except Unsound as err:
            stats["failures"] += 1
            report = f"a session broke (seed {seed}): {err}\n--- spec ---\n{spec.text}"
            if not keep_going:
                raise AssertionError(report) from None
            report_failure(report)  # long mode: every failure, then the summary
            seed += 1
            continue
        finally:
            torch._dynamo.reset()  # each spec is its own module: keep the process's graphs few
        seed += 1
        if out.accepted:
            stats["sessions"] += 1
            if progress and stats["sessions"] % 100 == 0:
                progress(seed)
            stats["calls"] += out.calls
            stats["skipped"] += out.skipped
            stats["graphs"] += sum(out.graphs.values())
        else:
            stats["rejected"] += 1
    return seed


def summary_line(stats: dict, seed0: int, seconds: float) -> str:
    """A run's summary (scripts/long_sessions.sh adds these up)."""
    return (f"seeds from {seed0}: {stats['sessions']} sessions of random specs, {stats['failures']} failures "
            f"({stats['calls']} calls compared compiled against eager, {stats['skipped']} sizes refused, "
            f"{stats['rejected']} specs rejected, {stats['graphs']} graphs compiled) in {seconds:.0f} s")


__all__ = ["Session", "SessionOutcome", "run_session", "graph_counts", "Unsound", "new_stats", "random_sessions",
           "summary_line"]
