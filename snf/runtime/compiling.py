"""The compile machinery of generated modules (`_hot_path`, `_by_compile_unit`: the decorators of
Block.forward and Model.forward) and Config's field check (`_check_fields`).

Real Python, imported and tested as it is (tests/test_runtime.py). Generated modules import the
definitions they call from here (a `--standalone` one holds a copy of them and what they call:
snf/runtime/__init__.py). Edit here, then regenerate generated/; a change modules generated before
cannot use raises snf.runtime.ABI.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import sys
import threading
import time
import warnings
import weakref
from typing import NamedTuple, Optional

import torch
import torch.utils.checkpoint
from torch import nn

from .policy import _CACHE_MOVED, _FIGURES, _Record, _Seen, _STEP


def _check_fields(config) -> None:
    """Each Config field holds its declared type: an int for `int` (not a bool), a bool for `bool`,
    a str for `str`, and a number for `float` (kept as a float); a list field (`tuple[str, ...]`) a
    list or tuple of them, kept as a tuple."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        kind = field.type[6:-6] if field.type.startswith("tuple[") else None  # tuple[str, ...] -> str
        if kind is not None:
            if not isinstance(value, (list, tuple)):
                raise TypeError(f"Config.{field.name} must be a list of {kind}, got {value!r}")
            items = tuple(_field_value(field.name, kind, v, f"[{i}]") for i, v in enumerate(value))
            object.__setattr__(config, field.name, items)  # frozen: only while it is being made
            continue
        checked = _field_value(field.name, field.type, value, "")
        if checked is not value:  # an int given for a float
            object.__setattr__(config, field.name, checked)


def _field_value(name: str, kind: str, value, where: str):
    """`value` as a field (or a list field's item) of this kind holds it; TypeError if it is none."""
    if kind == "float" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    ok = {"int": isinstance(value, int) and not isinstance(value, bool), "bool": isinstance(value, bool),
          "float": isinstance(value, float), "str": isinstance(value, str)}[kind]
    if not ok:
        raise TypeError(f"Config.{name}{where} must be {'a' if kind[0] in 'bfs' else 'an'} {kind}, got {value!r}")
    return value


_EAGER = threading.local()  # `on` inside _eagerly(); `asked`: generate(compile=...) while it runs


# SNF_COMPILE's values (any case, spaces around ignored); empty is as unset, as a shell's `SNF_COMPILE=` means
_MODES = {"0": "never", "false": "never", "off": "never", "no": "never", "1": "always", "true": "always",
          "on": "always", "yes": "always", "auto": "auto", "": "auto"}


def _compile_mode() -> str:
    """"never" (SNF_COMPILE=0, `compile=False`, or inside _eagerly), "always" (SNF_COMPILE=1, `compile=True`)
    or "auto" (SNF_COMPILE unset, empty or auto: each unit compiles once it pays, _Payoff). Another value
    is refused, not read as unset: a typo (`ture`) would silently not do what it says."""
    if getattr(_EAGER, "on", False):
        return "never"
    asked = getattr(_EAGER, "asked", None)
    if asked is not None:
        return "always" if asked else "never"
    value = os.environ.get("SNF_COMPILE", "")
    mode = _MODES.get(value.strip().lower())
    if mode is None:
        raise ValueError(f"SNF_COMPILE={value!r} is not a setting snf knows: 1 (or true, on, yes) always compiles, "
                         "0 (or false, off, no) never does, auto (or unset, or empty) compiles where it pays")
    return mode


def _compile_enabled() -> bool:
    return _compile_mode() != "never"


@contextlib.contextmanager
def _compile_asked(asked: Optional[bool]):
    """generate(compile=...): True compiles its decode step whatever it costs, False never compiles,
    None leaves it to SNF_COMPILE."""
    before = getattr(_EAGER, "asked", None)
    if asked is not None:
        _EAGER.asked = bool(asked)
    try:
        yield
    finally:
        _EAGER.asked = before


@contextlib.contextmanager
def _eagerly():
    """Nothing compiles inside: the compile unit "none" (see Model.compile_units)."""
    before = getattr(_EAGER, "on", False)
    _EAGER.on = True
    try:
        yield
    finally:
        _EAGER.on = before


def _checkpoint_options() -> dict:
    """torch.utils.checkpoint's options for a layer: where forward runs eagerly (under _eagerly, which
    has ended by the time backward recomputes the layer), the recomputation runs eagerly too, so it
    saves the tensors the forward saved. Compiled, there is nothing to add."""
    if torch.compiler.is_compiling() or not getattr(_EAGER, "on", False):
        return {}
    return {"context_fn": lambda: (contextlib.nullcontext(), _eagerly())}


# Where torch's compiler lives: an error raised there (or in the code inductor writes) is a failed
# compile, whatever its type; the eager run that follows tells it from the model's own error.
_COMPILER_FILES = ("torch/_dynamo/", "torch/_inductor/", "torch/_functorch/", "torch/fx/", "torch/_subclasses/",
                   "torch/utils/_sympy/", "torch/_guards", "torchinductor_")

# The most graphs one compiled function keeps, over every model of this file in the process (dynamo's
# own recompile limit is 8). A session's count is far lower (docs/language.md, section 10); past it,
# calls with shapes not seen yet run eagerly.
_GRAPH_BUDGET = 64


def _is_compile_error(err: Exception) -> bool:
    """What a failed compile raises: dynamo's and inductor's errors, the C++ compiler's, dynamo's
    recompile limit, and anything raised inside torch's compiler. The model's own errors, and
    exceptions torch uses for control flow (gradient checkpointing stops its recomputation with
    one), are not."""
    import torch._dynamo.exc
    import torch._inductor.exc
    if isinstance(err, (torch._dynamo.exc.TorchDynamoException, torch._dynamo.exc.FailOnRecompileLimitHit,
                        torch._inductor.exc.CppCompileError, torch._inductor.exc.InvalidCxxCompiler)):
        return True
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = tb.tb_frame.f_code.co_filename.replace(os.sep, "/") if tb is not None else ""
    return any(part in where for part in _COMPILER_FILES)


class _DecodeState(NamedTuple):
    """A decode step of generate, as Model.forward reads it (self._decode_state, set by _decode):
    the caches are buffers of preallocated slots, `position` (a 0-d tensor) of them filled; the
    step's keys and values are written there in place, and attention reads the first `length`."""
    position: torch.Tensor
    length: int


class _CompileSettings:
    """Dynamo's settings while compiled functions run (they matter when one compiles): this file's
    graph budget as the recompile limit, and no duck shaping, which would give a batch of 2 and a head
    count of 2 one symbol and then fix both. Set and restored around a call (or around generate's
    decode loop, whose steps then skip it), so that torch's settings for other code stay as they are."""

    active = False

    def __enter__(self) -> None:
        import torch._dynamo
        import torch.fx.experimental._config as shapes
        self.saved = (_CompileSettings.active, shapes, shapes.use_duck_shape, torch._dynamo.config.recompile_limit)
        shapes.use_duck_shape = False
        torch._dynamo.config.recompile_limit = max(_GRAPH_BUDGET, self.saved[3])
        _CompileSettings.active = True

    def __exit__(self, *exc) -> None:
        _CompileSettings.active, shapes, duck, limit = self.saved
        shapes.use_duck_shape = duck
        torch._dynamo.config.recompile_limit = limit


_PLAIN = (torch.Tensor, nn.Parameter)  # tensor types whose memory _unaliased compares (not subclasses)


def _unaliased(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The arguments, each tensor that shares memory with an earlier one copied. Handed a view along
    with its base (a loop-carried `v = x[:, 0]` beside `x`), dynamo (torch 2.13) can fail to build the
    shape guards of a dynamic graph ("sources must not be empty for symbol", long-mode seed 28826).
    A block writes no argument in place, so the copy computes the same, but in generate's decode
    step, which writes the cache buffers it is handed: there they are left as they are."""
    values = (*args, *kwargs.values())
    if sum(type(a) in _PLAIN for a in values) < 2 or any(type(a) is _DecodeState for a in values):
        return args, kwargs
    seen, out = set(), []
    for a in values:
        dense = type(a) in _PLAIN and a.layout == torch.strided and not a.is_nested
        memory = a.untyped_storage().data_ptr() if dense else 0  # 0: none (or an empty tensor's)
        if memory in seen:
            a = a.clone()
        elif memory:
            seen.add(memory)
        out.append(a)
    return tuple(out[:len(args)]), dict(zip(kwargs, out[len(args):]))


def _has_empty(args: tuple, kwargs: dict) -> bool:
    """Whether a tensor argument holds no elements (an empty batch, sequence or cache). Such a call
    runs eagerly: there is next to nothing to compute, and inductor gives the empty buffers of its
    graph zero strides, which CUDA's attention kernels refuse ("query: last dimension must be
    contiguous", torch 2.11 on an H200)."""
    return any(type(a) in _PLAIN and a.numel() == 0 for a in (*args, *kwargs.values()))


# ------------------------------------------------------------------ when compiling pays
# With SNF_COMPILE unset, a unit compiles for a shape once the time compiling saves beats what it
# costs: (the eager calls of that shape so far + the calls known to be coming, such as the rest of a
# decode loop in this cache bucket) x the seconds a compiled call saves, against the compile's
# expected seconds. So a call never waits for a compile its own work cannot repay, and work that
# recurs (chat turns, a training run) compiles once its eager calls would have paid for it.
# What compiling saves is per-op overhead (Python, dispatch, kernel launches, unfused passes over
# memory), which grows with the tensors a graph reads, not with its arithmetic; what it costs grows
# with the graph too. The figures were measured by `benchmarks/bench_compile.py --decode` and
# bench_compile.py's unit rows (benchmarks/README.md gives the tables); once a shape has compiled on
# this machine, its _Record's figures replace them.


_ANNOUNCE_S = 2.0  # a compile that takes longer says what it waits for, once


def _signature(args: tuple, kwargs: dict, dims: str) -> tuple:
    """What tells one compiled graph from another, as far as the call shows it: each tensor's dtype and
    shape, where symbolic sizes (`dims` "all"; "batch": only the batch axis) count only as 0, 1 or more,
    and the other arguments' values. The module (args[0]) adds its mode and its decode step's slots."""
    def of(v):
        if isinstance(v, torch.Tensor):
            shape = tuple(v.shape)
            if dims == "all":
                shape = tuple(min(n, 2) for n in shape)
            elif dims == "batch" and shape:
                shape = (min(shape[0], 2),) + shape[1:]
            return (v.dtype, shape)
        if isinstance(v, (list, tuple)):
            return tuple(of(x) for x in v)
        if isinstance(v, nn.Module):  # its mode, and in a decode step the cache slots read (a graph each)
            state = getattr(v, "_decode_state", None)
            return v.training, state.length if isinstance(state, _DecodeState) else None
        return min(v, 2) if dims == "all" and type(v) is int else v if isinstance(v, (int, float, str, bool)) \
            else type(v).__name__
    return tuple(of(a) for a in args) + tuple((k, of(v)) for k, v in kwargs.items())


def _size(module) -> int:
    """The parameter and buffer tensors a unit's graph reads: what its compile time grows with."""
    return sum(1 for _ in module.parameters()) + sum(1 for _ in module.buffers()) if isinstance(module, nn.Module) \
        else 1


def _named(fn, args: tuple, kwargs: dict, unit: str, dims: str) -> str:
    """The unit and shape a compile is for, as its wait message names them."""
    owner = args[0] if args and isinstance(args[0], nn.Module) else None
    spec = getattr(sys.modules.get(fn.__module__), "SPEC", {}).get("path", fn.__module__)
    first = next((a for a in (*args[1:], *kwargs.values()) if isinstance(a, torch.Tensor)), None)
    if unit == "decode":
        state = getattr(owner, "_decode_state", None)
        slots = f", {state.length} cache slots read" if isinstance(state, _DecodeState) and state.length else ""
        return f"the decode step of {spec}'s generate (batch {first.size(0) if first is not None else '?'}{slots})"
    mode = "training" if owner is not None and owner.training else "evaluation"
    what = "each layer block" if unit == "block" else "the whole forward"
    shape = f" at {list(first.shape)}" if first is not None and dims != "all" else ""
    return f"{what} of {spec} ({mode}{shape})"


def _say(message: str) -> None:
    """Through the `snf` logger, at warning level: printed to stderr where logging is not set up
    (Python's last-resort handler), and silenced like any logger's where it is."""
    import logging
    logging.getLogger("snf").warning(message)


class _DecodeLoop:
    """generate's decode loop while it runs in this thread (`with`, in _decoding): the steps left, and
    the compile settings, entered by the first compiled step and kept on for the rest of the loop
    (entering them per step would cost 5% of a compiled step at batch 1 on a CPU)."""

    def __init__(self, count: int):
        self.left, self.ahead, self.settings, self.before = count, 0, None, None
        self.seen: dict = {}  # cache slots read -> the step's _Seen: within a loop only they change

    @staticmethod
    def current() -> Optional["_DecodeLoop"]:
        return getattr(_EAGER, "loop", None)

    def __enter__(self) -> "_DecodeLoop":
        self.before, _EAGER.loop = _DecodeLoop.current(), self
        return self

    def __exit__(self, *exc) -> None:
        _EAGER.loop = self.before
        self.close()

    def compile_settings(self) -> None:
        if self.settings is None and not _CompileSettings.active:
            self.settings = _CompileSettings()
            self.settings.__enter__()

    def close(self) -> None:
        if self.settings is not None:
            self.settings.__exit__(None, None, None)
            self.settings = None


def _ready_for_decode(args: tuple, kwargs: dict) -> None:
    """Before a compiled decode step: above a batch of one, the batch axis of the token and the cache
    buffers is symbolic (one graph for every batch above 1; a batch of 1 compiles apart, its one-row
    matmuls taking another path). On CUDA, where the step is a CUDA graph reading its inputs at fixed
    addresses, the buffers are static (as transformers' StaticCache marks them), and a step begins."""
    import torch._dynamo
    cuda = False
    for value in (*args[1:], *kwargs.values()):
        for t in value if isinstance(value, (list, tuple)) else (value,):
            if not isinstance(t, torch.Tensor) or t.dim() == 0:
                continue
            cuda = cuda or t.is_cuda
            if t.size(0) > 1 and 0 not in getattr(t, "_dynamo_dynamic_indices", ()):
                torch._dynamo.mark_dynamic(t, 0)
            if t.is_cuda and t.dim() > 2 and not hasattr(t, "_dynamo_static_input_type"):
                torch._dynamo.mark_static_address(t)
    if cuda:
        torch.compiler.cudagraph_mark_step_begin()


def _hot_path(fn, *, dynamic: Optional[bool] = True, cpu_options: Optional[dict] = None,
              cuda_mode: Optional[str] = None, unit: str = "block"):
    """Run `fn` through torch.compile(fullgraph=True) where compiling is on (_compile_mode): always with
    SNF_COMPILE=1, never with SNF_COMPILE=0, and by default once it pays for the shape at hand (_pays).
    Sizes are symbolic from the first compile (`dynamic=True`: one graph serves every batch and length,
    but for the sizes 0 and 1, which torch compiles apart). `cpu_options` are inductor options used on
    the CPU only; `cuda_mode` is torch.compile's mode on CUDA ("reduce-overhead": CUDA graphs). `unit`
    is "block", "model" (a whole forward) or "decode" (generate's decode step).

    A call handed an empty tensor runs eagerly (_has_empty). Compiling never breaks a call: when it
    fails (an unsupported construct, a missing compiler, an error inside torch's compiler) the call
    runs eagerly, as does every later one, with one warning; past _GRAPH_BUDGET graphs, calls with
    new shapes run eagerly, with one warning."""
    state: dict = {}  # device -> the compiled fn; "broken" once compiling has failed; "full" past the budget
    seen: dict = {}  # _signature -> _Seen
    dims = "all" if dynamic else "batch" if unit == "decode" else "none"
    paying = {(device, mode) for device, of, mode in _FIGURES if of == unit}  # where compiling this unit may pay

    def eagerly(args, kwargs):
        before, _EAGER.on = getattr(_EAGER, "on", False), True  # _eagerly(), without its generator's cost
        try:
            return fn(*args, **kwargs)
        finally:
            _EAGER.on = before

    def warn_once(key: str, message: str) -> None:
        if key not in state:
            state[key] = True
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    def shape(args, kwargs) -> _Seen:
        first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        key = (first.device.type if first is not None else "cpu", _signature(args, kwargs, dims))
        got = seen.get(key)
        if got is None:
            owner = args[0] if args and isinstance(args[0], nn.Module) else None
            mode = "train" if owner is not None and owner.training else "eval"
            spec = getattr(sys.modules.get(fn.__module__), "SPEC", {}).get("sha256", fn.__module__)
            record = _Record(repr((spec, fn.__qualname__, unit, mode, repr(getattr(owner, "config", None)), key,
                                   torch.__version__)))
            batch = first.size(0) if first is not None and first.dim() else 1
            got = seen[key] = _Seen(record, _FIGURES.get((key[0], unit, mode)), _size(owner), batch, key[0], mode)
        return got

    def pays(entry: _Seen) -> bool:
        """Whether compiling this shape now saves more than it costs (see the figures above)."""
        figures = entry.figures
        if figures is None or entry.best_s == math.inf:  # never pays, or no eager call measured yet
            return False
        step = _STEP[entry.mode]  # a call's forward is timed; its saving counts the whole step
        measured = entry.record.saving()
        saving = measured * step if measured is not None else \
            min(entry.best_s * step * (1 - figures.floor), figures.saved_s[entry.batch > 1] * entry.tensors)
        cost = entry.record.cost()
        if cost is None:
            cost = figures.cold_s + figures.per_tensor_s * entry.tensors
        loop = _DecodeLoop.current() if unit == "decode" else None
        ahead = loop.ahead if loop is not None else 0
        return (entry.eager_calls + ahead) * saving > cost

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if torch.compiler.is_compiling() or "broken" in state:
            return fn(*args, **kwargs)
        how = _compile_mode()
        if how == "never":
            return fn(*args, **kwargs)
        if _has_empty(args, kwargs):
            with _eagerly():
                return fn(*args, **kwargs)
        if how == "auto" and not paying:
            return eagerly(args, kwargs)  # this unit never pays on any device: no shape to keep, no timing
        loop = _DecodeLoop.current() if unit == "decode" else None
        slots = getattr(getattr(args[0], "_decode_state", None), "length", None) if loop is not None else None
        entry = loop.seen.get(slots) if slots is not None else None
        if entry is None:
            entry = shape(args, kwargs)
            if slots is not None:
                loop.seen[slots] = entry
        if not entry.compiled and how == "auto" and not pays(entry):
            start = time.perf_counter()
            out = eagerly(args, kwargs)
            entry.eager_calls += 1
            entry.best_s = min(entry.best_s, time.perf_counter() - start)
            return out
        device = entry.device
        compiled = state.get(device)
        if compiled is None:
            if _CACHE_MOVED:
                warnings.warn(_CACHE_MOVED.pop(), RuntimeWarning, stacklevel=2)
            options = cpu_options if device == "cpu" else None
            compile_mode = cuda_mode if device == "cuda" else None
            compiled = state[device] = torch.compile(fn, fullgraph=True, dynamic=dynamic, options=options,
                                                     mode=compile_mode)
        from torch._dynamo.exc import FailOnRecompileLimitHit
        if dynamic:
            args, kwargs = _unaliased(args, kwargs)
        if unit == "decode":
            _ready_for_decode(args, kwargs)
            if loop is not None:
                loop.compile_settings()
        timer = None
        if not entry.compiled:
            expected = entry.record.cost()
            note = f"; about {expected:.0f} s, as it took here before" if expected and expected >= 1 else ""
            timer = threading.Timer(_ANNOUNCE_S, _say, (
                f"snf: torch.compile is compiling {_named(fn, args, kwargs, unit, dims)}, the first call at these "
                f"sizes{note}; later calls reuse it (SNF_COMPILE=0 never compiles)",))
            timer.daemon = True
            timer.start()
        start = time.perf_counter()
        try:
            if _CompileSettings.active:
                out = compiled(*args, **kwargs)
            else:
                with _CompileSettings():
                    out = compiled(*args, **kwargs)
        except Exception as err:
            if not _is_compile_error(err):
                raise
            with _eagerly():  # nothing compiles inside
                out = fn(*args, **kwargs)  # the model's own error is raised here
            if isinstance(err, FailOnRecompileLimitHit):
                warn_once("full", f"{fn.__qualname__} has compiled {_GRAPH_BUDGET} graphs; calls with shapes "
                                  "not compiled for yet run eagerly")
            else:
                state["broken"] = True
                reason = (str(err).strip().splitlines() or [""])[0][:200]
                warnings.warn(f"torch.compile is unavailable here ({type(err).__name__}: {reason}); running eager",
                              RuntimeWarning, stacklevel=2)
            return out
        finally:
            if timer is not None:
                timer.cancel()
        spent = time.perf_counter() - start
        if not entry.compiled:  # what it cost, and what an eager call took, for this machine's next estimate
            entry.compiled = 1
            eager = {"eager_s": entry.best_s} if entry.best_s < math.inf else {}
            entry.record.note(compile_s=round(spent, 3), **eager)
        elif entry.compiled == 1:  # the first call that only ran
            entry.compiled = 2
            entry.record.note(compiled_s=spent)
        return out

    wrapper.compiled = state
    wrapper.seen = seen
    return wrapper


_MODEL_LOCKS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> its _model_lock
_MODEL_LOCKS_GUARD = threading.Lock()


def _model_lock(model: nn.Module):
    """The lock a model's generate holds while it runs, and its forward (_by_compile_unit) too: the
    decode state a step reads (model._decode_state, model._encoded) and the eval mode generate sets
    are the model's own, so a forward or generate of another thread waits for a generate to end and
    sees none of it. Reentrant: generate's own forwards pass. (So forwards of one model in several
    threads run one at a time, until the decode state is an argument of forward, issue 53.)"""
    lock = _MODEL_LOCKS.get(model)
    if lock is None:
        with _MODEL_LOCKS_GUARD:
            lock = _MODEL_LOCKS.setdefault(model, threading.RLock())
    return lock


def _by_compile_unit(forward=None, *, decodes: bool = False):
    """Model.forward's decorator (`@_by_compile_unit`, or `@_by_compile_unit(decodes=True)`): forward
    run as the model's `compile_units` say for the device of its first tensor argument (else of the
    model's tensors) and the model's mode: compiled as one graph ("model"; its shapes fixed, as the
    fused loss's chunks are a loop over rows), each layer block compiled on its own ("block"), or
    nothing compiled ("none"); as it is while compiling is off, has failed for the whole forward, or
    torch.compile traces it already. With `decodes`, a decode step of generate (self._decode_state
    set, see _decode) runs as Model._decode_step, whatever compile_units say. A call holds the
    model's _model_lock: it never runs amid another thread's generate."""
    if forward is None:
        return functools.partial(_by_compile_unit, decodes=decodes)
    whole = _hot_path(forward, dynamic=False, unit="model")

    @functools.wraps(forward)
    def run(self, *args, **kwargs):
        if torch.compiler.is_compiling():  # traced (torch.compile of the model): no lock in its graph
            return chosen(self, *args, **kwargs)
        with _model_lock(self):
            return chosen(self, *args, **kwargs)

    def chosen(self, *args, **kwargs):
        if decodes and self._decode_state is not None:
            return self._decode_step(*args, **kwargs)
        if torch.compiler.is_compiling() or not _compile_enabled() or "broken" in whole.compiled:
            return forward(self, *args, **kwargs)
        x = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        if x is None:  # no tensor argument: the model's own tensors tell the device
            x = next((t for t in (*self.parameters(), *self.buffers())), None)
        units = self.compile_units.get(x.device.type, {}) if x is not None else {}
        unit = units.get("train" if self.training else "eval", "block")
        if unit == "model":
            return whole(self, *args, **kwargs)
        if unit == "none":
            with _eagerly():
                return forward(self, *args, **kwargs)
        return forward(self, *args, **kwargs)

    run.whole = whole
    return run
