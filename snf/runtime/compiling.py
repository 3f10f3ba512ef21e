"""The compile machinery of generated modules (`_hot_path`, `_by_compile_unit`, which the module's last
lines wire onto Block.forward and Model.forward) and Config's field check (`_check_fields`).

Real Python, imported and tested as it is (tests/test_runtime.py). Generated modules import the
definitions they call from here (a `--standalone` one holds a copy of them and what they call:
snf/runtime/__init__.py). Edit here, then regenerate generated/; a change modules generated before
cannot use raises snf.runtime.ABI.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import threading
import warnings
from typing import NamedTuple, Optional

import torch
import torch.utils.checkpoint
from torch import nn


def _check_fields(config) -> None:
    """Each Config field holds its declared type: an int for `int` (not a bool), a bool for `bool`,
    a str for `str`, and a number for `float` (kept as a float)."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if field.type == "float" and isinstance(value, int) and not isinstance(value, bool):
            object.__setattr__(config, field.name, float(value))  # frozen: only while it is being made
            continue
        ok = {"int": isinstance(value, int) and not isinstance(value, bool), "bool": isinstance(value, bool),
              "float": isinstance(value, float), "str": isinstance(value, str)}[field.type]
        if not ok:
            raise TypeError(f"Config.{field.name} must be {'a' if field.type[0] in 'bfs' else 'an'} "
                            f"{field.type}, got {value!r}")


_EAGER = threading.local()  # `on` inside _eagerly()


def _compile_enabled() -> bool:
    return os.environ.get("SNF_COMPILE", "1") != "0" and not getattr(_EAGER, "on", False)


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


def _hot_path(fn, *, dynamic: Optional[bool] = True, cpu_options: Optional[dict] = None,
              cuda_mode: Optional[str] = None):
    """Run `fn` through torch.compile(fullgraph=True); eagerly when SNF_COMPILE=0. Sizes are symbolic
    from the first compile (`dynamic=True`: one graph serves every batch and length, but for the
    sizes 0 and 1, which torch compiles apart). `cpu_options` are inductor options used on the CPU
    only; `cuda_mode` is torch.compile's mode on CUDA ("reduce-overhead": CUDA graphs).

    A call handed an empty tensor runs eagerly (_has_empty). Compiling never breaks a call: when it
    fails (an unsupported construct, a missing compiler, an error inside torch's compiler) the call
    runs eagerly, as does every later one, with one warning; past _GRAPH_BUDGET graphs, calls with
    new shapes run eagerly, with one warning."""
    state: dict = {}  # device -> the compiled fn; "broken" once compiling has failed; "full" past the budget

    def warn_once(key: str, message: str) -> None:
        if key not in state:
            state[key] = True
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if torch.compiler.is_compiling() or "broken" in state or not _compile_enabled():
            return fn(*args, **kwargs)
        if _has_empty(args, kwargs):
            with _eagerly():
                return fn(*args, **kwargs)
        device = next((a.device.type for a in args if isinstance(a, torch.Tensor)), "cpu")
        compiled = state.get(device)
        if compiled is None:
            options = cpu_options if device == "cpu" else None
            mode = cuda_mode if device == "cuda" else None
            compiled = state[device] = torch.compile(fn, fullgraph=True, dynamic=dynamic, options=options, mode=mode)
        from torch._dynamo.exc import FailOnRecompileLimitHit
        if dynamic:
            args, kwargs = _unaliased(args, kwargs)
        try:
            if _CompileSettings.active:
                return compiled(*args, **kwargs)
            with _CompileSettings():
                return compiled(*args, **kwargs)
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

    wrapper.compiled = state
    return wrapper


def _by_compile_unit(forward, decodes: bool = False):
    """Model.forward, run as the model's `compile_units` say for the device of its first tensor
    argument (else of the model's tensors) and the model's mode: compiled as one graph ("model"; its
    shapes fixed, as the fused loss's chunks are a loop over rows), each layer block compiled on its
    own ("block"), or nothing compiled ("none"); as it is while compiling is off, has failed for the
    whole forward, or torch.compile traces it already. With `decodes`, a decode step of generate
    (self._decode_state set, see _decode) runs as Model._decode_step, whatever compile_units say."""
    whole = _hot_path(forward, dynamic=False)

    @functools.wraps(forward)
    def run(self, *args, **kwargs):
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
