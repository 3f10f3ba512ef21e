"""The NumPy reference interpreter: evaluates the typed IR in float64.

It shares nothing with the torch lowering but the IR and the registry's NumPy references, so
it serves as the oracle for differential tests of generated modules. It refuses the configs a
generated `Config` refuses (`ConfigError`): it checks the same conditions, in the same order.
"""

from __future__ import annotations

from pathlib import PurePath

import numpy as np

from . import ir
from .dims import Dim, DimError
from .ir import ScalarT
from .ops import all_ops, holds


class ConfigError(ValueError):
    """A config the generated `Config` refuses too (docs/language.md 3.1)."""


class Interpreter:
    def __init__(self, model: ir.Model, config: dict | None = None):
        self.m = model
        cfg = {c.name: c.default for c in model.config if c.default is not ir.MISSING}
        cfg.update(config or {})
        missing = [c.name for c in model.config if c.name not in cfg]
        if missing:
            raise ValueError("config values missing: " + ", ".join(missing))
        self.cfg = cfg
        self.ints = {k: v for k, v in cfg.items() if isinstance(v, int) and not isinstance(v, bool)}
        self.checking = False
        self.check_config()

    def check_config(self) -> None:
        """What `Config.__post_init__` checks (`ir.Model.config_conditions`): a ConfigError naming the
        condition, the spec line and the config values, at the first that fails."""
        self.derive()
        for c in self.m.config:
            if c.length is not None and len(self.cfg[c.name]) != self.dim(c.length):
                raise ConfigError(f"`{c.name}` must have {self.dim(c.length)} items "
                                  f"({PurePath(self.m.path).name}:{c.span.line}); got {len(self.cfg[c.name])}")
            if c.choices and not set(self.cfg[c.name]) <= set(c.choices):
                raise ConfigError(f"{c.choices_message()} ({PurePath(self.m.path).name}:{c.span.line}); got "
                                  f"{c.name}={self.cfg[c.name]}")
        for c in self.m.config_conditions():
            where = f"{PurePath(self.m.path).name}:{c.span.line}"
            if isinstance(c, ir.ValueCheck):
                fields = c.fields
                try:
                    self.checking = True
                    if not all(self.eval(w, {}) for w in c.when):
                        continue  # a config that never computes it
                    value = self.eval(c.value, {})
                except (ArithmeticError, ValueError, DimError, KeyError) as err:
                    raise ConfigError(f"{c.what} cannot be computed ({err}) ({where}); got {self._got(fields)}") \
                        from None
                finally:
                    self.checking = False
                if not c.holds(value):
                    raise ConfigError(f"{c.what} must be {c.range_text()}, got {value} ({where}); got "
                                      f"{self._got(fields)}")
                continue
            if not all(self.eval(w, {}) for w in c.when):
                continue  # its statement never runs for this config
            if isinstance(c, ir.Constraint):
                fields, why = sorted(c.cond.num.symbols() | c.cond.den.symbols()), c.why
            else:
                fields, why = c.fields, c.message(self.m.display)
            try:
                ok = self.dim(c.cond.num) % self.dim(c.cond.den) == 0 if isinstance(c, ir.Constraint) \
                    else holds(c, self.ints)
            except (ArithmeticError, DimError, KeyError):
                ok = False
            if not ok:
                raise ConfigError(f"{why} ({where}); got {self._got(fields)}")

    def _got(self, fields) -> str:
        return ", ".join(f"{f}={self.cfg.get(f, self.ints.get(f, '?'))}" for f in fields)

    def dim(self, d: Dim) -> int:
        return d.evaluate(self.ints)

    def at_sizes(self, dims: dict, given: frozenset = frozenset()) -> "Interpreter":
        """Ready to evaluate conditions without running the model: the run-time dims' values, and
        which inputs are given (`X exists`); the derived values for them. `snfc stats` walks the
        plain forward this way."""
        self.inputs = {i.name: (True if i.name in given else None) for i in self.m.inputs}
        self.ints.update(dims)
        self.derive()
        return self

    def run(self, params: dict, inputs: dict) -> dict:
        m = self.m
        self.params = {k: (np.asarray(v, dtype=np.float64) if v is not None else None) for k, v in params.items()}
        self.inputs = {}
        for i in m.inputs:
            v = inputs.get(i.name)
            if v is None and not i.optional:
                raise ValueError(f"input {i.name} is required")
            self.inputs[i.name] = None if v is None else np.asarray(v) if np.asarray(v).dtype.kind in "iub" \
                else np.asarray(v, dtype=np.float64)
        for i in m.inputs:  # run-time dims from input shapes; an absent optional input's dims are 0
            for axis, d in enumerate(i.ty.shape):
                s = d.as_symbol()
                if s is not None and s not in self.ints:
                    v = self.inputs[i.name]
                    if v is not None:
                        self.ints[s] = int(v.shape[axis])
        for i in m.inputs:
            for d in i.ty.shape:
                s = d.as_symbol()
                if s is not None and s not in self.ints:
                    self.ints[s] = 0
        self.derive()
        for t in m.params + m.buffers:
            if t.layer_var is None and t.condition is not None and not self.eval(t.condition, {}):
                self.params[t.name] = None
            elif t.layer_var is not None and t.name not in self.params and not self.layers_with(t):
                self.params[t.name] = None  # on no layer of this config: spec_state leaves it out
        env: dict = {}
        self.block(m.body, env)
        return {o.name: env.get(o.name) for o in m.outputs}

    def layers_with(self, t: ir.Tensor) -> list[int]:
        """The layers a tensor declared `name[l] : ... if cond else None` exists on."""
        saved = self.ints.get(t.layer_var)
        out = []
        for layer in range(self.dim(t.ty.shape[0])):
            self.ints[t.layer_var] = layer
            if self.eval(t.condition, {t.layer_var: layer}):
                out.append(layer)
        if saved is None:
            self.ints.pop(t.layer_var, None)
        else:
            self.ints[t.layer_var] = saved
        return out

    def layer_slice(self, t: ir.Tensor, p):
        """This layer's slice of a tensor of some layers only, None on the others. It is given stacked
        over the layers that have it (snf.interop.spec_state), or over every layer."""
        have = self.layers_with(t)
        if self.layer not in have:
            return None
        return p[self.layer] if len(p) != len(have) else p[have.index(self.layer)]

    def derive(self) -> None:
        """The derived values, in order: each may use the config and the ones before it. One that
        does not compute for this config is left out (an error where it is used): the checks of
        `check_config` refuse such a config first."""
        self.derived = {}
        for d in self.m.derived:
            try:
                with np.errstate(all="ignore"):
                    if d.opaque:  # `int(x)` of a float: computed, then a dim like any other
                        self.derived[d.name] = self.ints[d.name] = int(self.eval(d.value, {}))
                    else:
                        self.derived[d.name] = self.dim(d.dim) if d.dim is not None else self.eval(d.value, {})
            except (ArithmeticError, ValueError, DimError, KeyError):
                self.ints.pop(d.name, None)

    # ------------------------------------------------------------------ statements
    def block(self, stmts, env: dict) -> None:
        for s in stmts:
            if isinstance(s, ir.Bind):
                env[s.name] = self.eval(s.value, env)
            elif isinstance(s, ir.SetItem):
                target = np.array(env[s.name], copy=True)
                target[tuple(self.eval(i, env) for i in s.index)] = self.eval(s.value, env)
                env[s.name] = target
            elif isinstance(s, ir.TIf):
                self.block(s.body if self.eval(s.test, env) else s.orelse, env)
            elif isinstance(s, ir.Loop):
                for layer in range(self.dim(s.count)):
                    env[s.var] = self.layer = self.ints[s.var] = layer  # a value, and a dim in shapes
                    self.block(s.body, env)
            else:
                raise TypeError(f"the interpreter runs before fusion passes, got {type(s).__name__}")

    # ------------------------------------------------------------------ expressions
    def eval(self, e, env: dict):
        if isinstance(e, ir.Lit):
            return e.value
        if isinstance(e, ir.DimVal):
            return self.dim(e.dim)
        if isinstance(e, ir.IsPresent):
            return self.inputs.get(e.name) is not None
        if isinstance(e, ir.Ref):
            return self.ref(e, env)
        if isinstance(e, ir.TCond):
            return self.eval(e.body if self.eval(e.test, env) else e.orelse, env)
        if isinstance(e, ir.TList):
            return [self.eval(i, env) for i in e.items]
        if isinstance(e, ir.TSlice):
            return slice(self.eval(e.lo, env) if e.lo is not None else None,
                         self.eval(e.hi, env) if e.hi is not None else None)
        if isinstance(e, ir.Op):
            if isinstance(e.ty, ScalarT) and e.ty.kind == "int" and e.ty.dim is not None and e.op != "size":
                return self.dim(e.ty.dim)
            op = all_ops()[e.op]
            kwargs = {}
            for name, a in e.args:
                v = self.eval(a, env)
                kind = op.param(name).kind
                if kind in ("dims", "slices"):
                    v = tuple(v)
                kwargs[name] = v
            # log(0) = -inf and the like, silently, as in torch; an error in a number Config checks
            with np.errstate(all="raise" if self.checking else "ignore"):
                return op.numpy(**kwargs)
        raise TypeError(type(e).__name__)

    def ref(self, e: ir.Ref, env: dict):
        if e.kind == "config":
            return self.cfg[e.name]
        if e.kind == "dim":
            if e.name in self.ints:
                return self.ints[e.name]
            return self.derived[e.name]
        if e.kind == "input":
            return self.inputs[e.name]
        if e.kind in ("param", "buffer"):
            return self.params[e.name]
        if e.kind in ("layer_param", "layer_input"):
            p = self.params[e.name] if e.kind == "layer_param" else self.inputs[e.name]
            t = self.m.param(e.name) if e.kind == "layer_param" else None
            if p is not None and t is not None and t.layer_var is not None:
                return self.layer_slice(t, p)
            return None if p is None else p[self.layer]
        return env[e.name]


def interpret(model: ir.Model, params: dict, inputs: dict, config: dict | None = None) -> dict:
    """Evaluate `model` on spec-named `params` (stacked per layer) and `inputs`; float64 outputs."""
    return Interpreter(model, config).run(params, inputs)
