"""The compile machinery of generated modules: the decorators of Block.forward and Model.forward
(`_hot_path`, `_by_compile_unit`), the compiled unit they make of a function (`_CompiledUnit`), and
what it calls: SNF_COMPILE's modes, dynamo's settings, the arguments a compiled call takes, what
tells a failed compile from the model's own error. policy.py says when a unit compiles a shape where
SNF_COMPILE leaves it to the unit.

Real Python, imported and tested as it is (tests/test_runtime.py, tests/test_compile_policy.py).
Generated modules import the decorators from here. A `--standalone` one holds a copy of them and of
the unit before its classes (which they wrap as they are defined), the rest of what they call at its
end, and no policy: there a unit compiles where SNF_COMPILE=1 (or generate(compile=True)) asks,
never by itself (snf/runtime/__init__.py). Edit here, then regenerate generated/; a change modules
generated before cannot use raises snf.runtime.ABI.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import warnings
from typing import Optional

import torch
import torch.utils.checkpoint
from torch import nn

from .policy import _Payoff  # noqa: F401 (read through globals(): see _CompiledUnit)
from .writes import _DecodeState


def _hot_path(fn, *, dynamic: bool = True, cpu_options: Optional[dict] = None, cuda_mode: Optional[str] = None,
              unit: str = "block"):
    """Block.forward's decorator, and what makes Model._decode_step: `fn` run as a _CompiledUnit of its
    `unit` ("block", "model": a whole forward, "decode": generate's decode step); traced, `fn` itself."""
    compiled_unit = _CompiledUnit(fn, unit, dynamic, cpu_options, cuda_mode)

    @functools.wraps(fn)
    def run(*args, **kwargs):
        if torch.compiler.is_compiling():
            return fn(*args, **kwargs)
        return compiled_unit(args, kwargs)
    run.unit = compiled_unit
    return run


def _by_compile_unit(forward=None, *, decodes: bool = False):
    """Model.forward's decorator: forward run as the model's `compile_units` say (_by_unit); with
    `decodes`, a decode step of generate (`decode=` given, see _decode) as Model._decode_step."""
    if forward is None:
        return functools.partial(_by_compile_unit, decodes=decodes)
    whole = _hot_path(forward, dynamic=False, unit="model")

    @functools.wraps(forward)
    def run(self, *args, **kwargs):
        if decodes and kwargs.get("decode") is not None:
            return self._decode_step(*args, **kwargs)
        return _by_unit(self, forward, whole, args, kwargs)
    run.whole = whole
    return run


class _CompiledUnit:
    """`fn` run through torch.compile(fullgraph=True) where compiling is on (_compile_mode): always with
    SNF_COMPILE=1, never with 0, by default once it pays for the shape at hand (policy.py's _Payoff; a
    --standalone module has none: there it compiles only where asked). `dynamic`: sizes symbolic from the
    first compile (one graph for every size but 0 and 1, which torch compiles apart); inductor's
    `cpu_options` on the CPU, torch.compile's `cuda_mode` on CUDA. A call handed an empty tensor runs
    eagerly (_has_empty), and a failed compile never breaks a call (fall_back)."""

    def __init__(self, fn, unit: str, dynamic: bool, cpu_options: Optional[dict], cuda_mode: Optional[str]):
        self.fn, self.unit, self.dynamic, self.cpu_options, self.cuda_mode = fn, unit, dynamic, cpu_options, cuda_mode
        self.graphs: dict = {}  # device -> fn compiled for it
        self.broken = self.full = False  # compiling has failed; past the graph budget
        payoff = globals().get("_Payoff")  # the compile policy, which a --standalone module leaves out
        self.payoff = payoff(fn, unit, dynamic) if payoff is not None else None

    def __call__(self, args: tuple, kwargs: dict):
        mode = _compile_mode()
        if mode == "never" or self.broken:
            return self.fn(*args, **kwargs)
        payoff = self.payoff
        if _has_empty(args, kwargs) or mode == "auto" and (payoff is None or not payoff.may_pay):
            return self.eagerly(args, kwargs)  # nothing to compile, nor to measure
        loop = _DecodeLoop.current() if self.unit == "decode" else None
        seen = payoff.seen(args, kwargs, loop) if payoff is not None else None
        if mode == "auto" and not payoff.pays(seen, loop.ahead if loop is not None else 0):
            return payoff.timed(seen, self.eagerly, args, kwargs)
        return self.run_compiled(args, kwargs, seen, loop)

    def eagerly(self, args: tuple, kwargs: dict):
        """`fn`, with nothing compiled inside it (as _eagerly(), without its generator's cost)."""
        before, _EAGER.on = getattr(_EAGER, "on", False), True
        try:
            return self.fn(*args, **kwargs)
        finally:
            _EAGER.on = before

    def run_compiled(self, args: tuple, kwargs: dict, seen, loop):
        """`fn` compiled for the device of the first tensor (compiling it on its first call there)."""
        device = next((a.device.type for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), "cpu")
        if device not in self.graphs:
            self.graphs[device] = torch.compile(self.fn, fullgraph=True, dynamic=self.dynamic,
                                                options=self.cpu_options if device == "cpu" else None,
                                                mode=self.cuda_mode if device == "cuda" else None)
        if self.dynamic:
            args, kwargs = _unaliased(args, kwargs)
        if self.unit == "decode":
            _ready_for_decode(args, kwargs, loop)
        timer = self.payoff.announce(seen, args, kwargs) if seen is not None else None
        start = time.perf_counter()
        try:
            with _CompileSettings():
                out = self.graphs[device](*args, **kwargs)
        except Exception as err:
            if not _is_compile_error(err):
                raise
            return self.fall_back(err, args, kwargs)
        finally:
            if timer is not None:
                timer.cancel()
        if seen is not None:
            self.payoff.compiled(seen, time.perf_counter() - start)
        return out

    def fall_back(self, err: Exception, args: tuple, kwargs: dict):
        """A compile failed (an unsupported construct, a missing compiler, an error inside torch's
        compiler): this call runs eagerly (the model's own error is raised there), and with one warning
        so does every later call, or past _GRAPH_BUDGET graphs every call of a shape not compiled yet."""
        from torch._dynamo.exc import FailOnRecompileLimitHit
        with _eagerly():
            out = self.fn(*args, **kwargs)
        if isinstance(err, FailOnRecompileLimitHit):
            if not self.full:
                self.full = True
                warnings.warn(f"{self.fn.__qualname__} has compiled {_GRAPH_BUDGET} graphs; calls with shapes not "
                              "compiled for yet run eagerly", RuntimeWarning, stacklevel=5)
        else:
            self.broken = True
            reason = (str(err).strip().splitlines() or [""])[0][:200]
            warnings.warn(f"torch.compile is unavailable here ({type(err).__name__}: {reason}); running eager",
                          RuntimeWarning, stacklevel=5)
        return out


def _by_unit(model: nn.Module, forward, whole, args: tuple, kwargs: dict):
    """forward as the model's `compile_units` say for the device of its first tensor argument (else of
    the model's tensors) and the model's mode: compiled as one graph ("model", `whole`; its shapes
    fixed, as the fused loss's chunks are a loop over rows), each layer block compiled on its own
    ("block"), or nothing compiled ("none"); as it is while compiling is off, has failed for the
    whole forward, or torch.compile traces it already."""
    if torch.compiler.is_compiling() or not _compile_enabled() or whole.unit.broken:
        return forward(model, *args, **kwargs)
    x = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
    if x is None:  # no tensor argument: the model's own tensors tell the device
        x = next((t for t in (*model.parameters(), *model.buffers())), None)
    units = model.compile_units.get(x.device.type, {}) if x is not None else {}
    unit = units.get("train" if model.training else "eval", "block")
    if unit == "model":
        return whole(model, *args, **kwargs)
    if unit == "none":
        with _eagerly():
            return forward(model, *args, **kwargs)
    return forward(model, *args, **kwargs)


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


class _CompileSettings:
    """Dynamo's settings while compiled functions run (they matter when one compiles): this file's
    graph budget as the recompile limit, and no duck shaping, which would give a batch of 2 and a head
    count of 2 one symbol and then fix both. Set as the first of the calls running in any thread (or
    of generate's decode loops, which hold them for their steps) enters, restored as the last leaves,
    so that torch's settings for other code stay as they are."""

    inside = 0  # the calls and decode loops inside, over all threads
    lock = threading.Lock()
    saved: tuple = ()

    def __enter__(self) -> None:
        with _CompileSettings.lock:
            if _CompileSettings.inside == 0:
                import torch._dynamo
                import torch.fx.experimental._config as shapes
                _CompileSettings.saved = (shapes.use_duck_shape, torch._dynamo.config.recompile_limit)
                shapes.use_duck_shape = False
                torch._dynamo.config.recompile_limit = max(_GRAPH_BUDGET, _CompileSettings.saved[1])
            _CompileSettings.inside += 1

    def __exit__(self, *exc) -> None:
        with _CompileSettings.lock:
            _CompileSettings.inside -= 1
            if _CompileSettings.inside == 0:
                import torch._dynamo
                import torch.fx.experimental._config as shapes
                shapes.use_duck_shape, torch._dynamo.config.recompile_limit = _CompileSettings.saved


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


class _DecodeLoop:
    """generate's decode loop while it runs in this thread (`with`, in _decoding): the steps left, and
    the compile settings, entered by the first compiled step and kept on for the rest of the loop
    (setting them per step would cost 5% of a compiled step at batch 1 on a CPU)."""

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
        if self.settings is None:
            self.settings = _CompileSettings()
            self.settings.__enter__()

    def close(self) -> None:
        if self.settings is not None:
            self.settings.__exit__(None, None, None)
            self.settings = None


def _ready_for_decode(args: tuple, kwargs: dict, loop: Optional[_DecodeLoop] = None) -> None:
    """Before a compiled decode step: above a batch of one, the batch axis of the token and the cache
    buffers is symbolic (one graph for every batch above 1; a batch of 1 compiles apart, its one-row
    matmuls taking another path). On CUDA, where the step is a CUDA graph reading its inputs at fixed
    addresses, the buffers are static (as transformers' StaticCache marks them), and a step begins.
    In generate's decode loop (`loop`) the compile settings are entered once, for the loop's rest."""
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
    if loop is not None:
        loop.compile_settings()
