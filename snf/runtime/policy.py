"""When a unit of a generated module compiles, where SNF_COMPILE leaves it to the unit: the rule
(`_Payoff`, one per compiled unit), what compiling and a compiled call cost on each device
(`_FIGURES`), what one unit has seen of one shape in this process (`_Seen`), what compiling it cost
on this machine before (`_Record`, a file beside torch's inductor cache), and that cache's folder,
made usable as the runtime is imported. compiling.py's _CompiledUnit asks it.

Real Python, imported and tested as it is (tests/test_compile_policy.py). A `--standalone` module
carries none of it: its units compile where SNF_COMPILE=1 (or generate(compile=True)) asks, never by
themselves (snf/runtime/__init__.py).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import threading
import time
import warnings
from typing import NamedTuple, Optional

import torch
from torch import nn

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


class _Figures(NamedTuple):
    cold_s: float  # a compile on an empty cache takes cold_s + per_tensor_s * tensors
    per_tensor_s: float
    saved_s: tuple  # what a compiled call (a training call: its whole step) saves per tensor, at batch 1 and more
    floor: float  # and it takes at least this share of the eager call's time


# by (device, unit, "train"/"eval"); a unit absent here never pays on that device (the CPU's forward
# and training step measured no faster compiled, CUDA's per-block graphs slower)
_FIGURES = {("cpu", "decode", "eval"): _Figures(10.0, 0.08, (20e-6, 4e-6), 0.3),
            ("cuda", "decode", "eval"): _Figures(5.0, 0.05, (10e-6, 10e-6), 0.3),  # not measured yet
            ("cuda", "model", "train"): _Figures(6.0, 0.1, (50e-6, 50e-6), 0.5),
            ("cuda", "model", "eval"): _Figures(3.0, 0.05, (5e-6, 5e-6), 0.7)}
_WARM = 0.25  # a compile whose artifacts torch's caches hold already, over a cold one
_STEP = {"train": 3.0, "eval": 1.0}  # a training call's whole step (its backward about twice its forward)


class _Seen:
    """What one compiled unit has seen of one shape (_signature) in this process, and what is
    known of that shape before any call: its figures (None: compiling it never pays), the tensors its
    graph reads, its batch, and this machine's _Record of it."""

    __slots__ = ("eager_calls", "best_s", "compiled", "record", "figures", "tensors", "batch", "mode")

    def __init__(self, record: "_Record", figures: Optional[_Figures], tensors: int, batch: int, mode: str):
        self.eager_calls, self.best_s, self.record = 0, math.inf, record
        self.figures, self.tensors, self.batch, self.mode = figures, tensors, batch, mode
        self.compiled = 0  # its calls compiled so far, counted to 2: the first compiles, the second only runs


class _Record:
    """What compiling one shape of one model cost on this machine, kept beside torch's inductor cache
    (so it goes with it: an emptied cache is a cold one again): the compile's seconds, each time it
    ran, and the fastest eager and compiled calls. A JSON file per shape; never required to exist."""

    def __init__(self, key: str):
        import hashlib
        self.path = os.path.join(_torch_cache_folder(), "snf", hashlib.sha256(key.encode()).hexdigest()[:24] + ".json")
        self.data = _figures_in(self.path)

    def saving(self) -> Optional[float]:
        eager, compiled = self.data.get("eager_s"), self.data.get("compiled_s")
        return max(0.0, eager - compiled) if eager and compiled else None

    def cost(self) -> Optional[float]:
        """The next compile's expected seconds: the last one's once it ran warm, else the cold one's share."""
        times = self.data.get("compile_s") or []
        return None if not times else times[-1] if len(times) > 1 else times[0] * _WARM

    def note(self, **values) -> None:
        for name, value in values.items():
            if name == "compile_s":
                self.data["compile_s"] = (self.data.get("compile_s") or [])[-4:] + [value]
            else:
                self.data[name] = min(value, self.data.get(name) or math.inf)
        temp = f"{self.path}.{os.getpid()}.tmp"
        try:  # best effort: a read-only or full disk, or a folder in the record's place, only loses the record
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(temp, "w", encoding="utf-8") as f:
                json.dump(self.data, f)
            os.replace(temp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                os.remove(temp)


def _figures_in(path: str) -> dict:
    """A _Record's file, read: what of it is well formed (compile_s a list of seconds, eager_s and
    compiled_s seconds). A damaged file (cut short, not JSON, other types, a folder) reads as
    no record, and the next compile writes a new one."""
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > 1 << 16:  # a FIFO would block, a huge file fill memory
            return {}
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError, RecursionError):  # (ValueError: not JSON, or not UTF-8)
        return {}
    if not isinstance(data, dict):
        return {}
    kept = {name: data[name] for name in ("eager_s", "compiled_s") if _seconds(data.get(name))}
    times = data.get("compile_s")
    if isinstance(times, list) and times and all(_seconds(t) for t in times):
        kept["compile_s"] = times[-5:]
    return kept


def _seconds(value) -> bool:
    return type(value) in (int, float) and 0 <= value < math.inf


class _Payoff:
    """The rule above for one compiled unit (its function `fn` and kind `unit`): what it has seen of
    each shape (by device and _signature), whether compiling one pays now, and, whatever SNF_COMPILE
    says, each compile's cost noted in this machine's _Record and, past _ANNOUNCE_S, said as it waits."""

    def __init__(self, fn, unit: str, dynamic: bool):
        self.fn, self.unit = fn, unit
        self.dims = "all" if dynamic else "batch" if unit == "decode" else "none"  # how _signature counts sizes
        self.shapes: dict = {}  # (device, _signature) -> _Seen
        self.may_pay = any(of == unit for _, of, _ in _FIGURES)  # on some device; else nothing to measure

    def seen(self, args: tuple, kwargs: dict, loop=None) -> _Seen:
        """What the unit has seen of this call's shape. Within generate's decode loop (`loop`, a
        compiling._DecodeLoop) only the cache slots read change from step to step: known by those,
        the shape is not worked out again each step."""
        slots = getattr(kwargs.get("decode"), "length", None) if loop is not None else None
        got = loop.seen.get(slots) if slots is not None else None
        if got is None:
            got = self._shape(args, kwargs)
            if slots is not None:
                loop.seen[slots] = got
        return got

    def _shape(self, args: tuple, kwargs: dict) -> _Seen:
        first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        key = (first.device.type if first is not None else "cpu", _signature(args, kwargs, self.dims))
        got = self.shapes.get(key)
        if got is None:
            owner = args[0] if args and isinstance(args[0], nn.Module) else None
            mode = "train" if owner is not None and owner.training else "eval"
            spec = getattr(sys.modules.get(self.fn.__module__), "SPEC", {}).get("sha256", self.fn.__module__)
            record = _Record(repr((spec, self.fn.__qualname__, self.unit, mode, repr(getattr(owner, "config", None)),
                                   key, torch.__version__)))
            batch = first.size(0) if first is not None and first.dim() else 1
            got = self.shapes[key] = _Seen(record, _FIGURES.get((key[0], self.unit, mode)), _size(owner), batch, mode)
        return got

    def pays(self, seen: _Seen, ahead: int) -> bool:
        """Whether this shape runs compiled: it has compiled already, or compiling it now saves more
        than it costs, over its eager calls so far and the `ahead` known to be coming."""
        if seen.compiled:
            return True
        figures = seen.figures
        if figures is None or seen.best_s == math.inf:  # never pays, or no eager call measured yet
            return False
        step = _STEP[seen.mode]  # a call's forward is timed; its saving counts the whole step
        measured = seen.record.saving()
        saving = measured * step if measured is not None else \
            min(seen.best_s * step * (1 - figures.floor), figures.saved_s[seen.batch > 1] * seen.tensors)
        cost = seen.record.cost()
        if cost is None:
            cost = figures.cold_s + figures.per_tensor_s * seen.tensors
        return (seen.eager_calls + ahead) * saving > cost

    def announce(self, seen: _Seen, args: tuple, kwargs: dict) -> Optional[threading.Timer]:
        """Before a compiled call: where it compiles (its shape's first), a started timer that says
        what it waits for once it takes over _ANNOUNCE_S (cancel it as the call returns). The first
        compile of the process also says where torch's cache folder moved to, if it did."""
        if _CACHE_MOVED:
            warnings.warn(_CACHE_MOVED.pop(), RuntimeWarning, stacklevel=5)
        if seen.compiled:
            return None
        expected = seen.record.cost()
        note = f"; about {expected:.0f} s, as it took here before" if expected and expected >= 1 else ""
        timer = threading.Timer(_ANNOUNCE_S, _say, (
            f"snf: torch.compile is compiling {_named(self.fn, args, kwargs, self.unit, self.dims)}, the first call "
            f"at these sizes{note}; later calls reuse it (SNF_COMPILE=0 never compiles)",))
        timer.daemon = True
        timer.start()
        return timer

    def timed(self, seen: _Seen, run, args: tuple, kwargs: dict):
        """run(args, kwargs), an eager call of this shape, timed: its fastest is what compiling saves from."""
        start = time.perf_counter()
        out = run(args, kwargs)
        seen.eager_calls += 1
        seen.best_s = min(seen.best_s, time.perf_counter() - start)
        return out

    def compiled(self, seen: _Seen, seconds: float) -> None:
        """A compiled call of this shape took `seconds`: for this machine's next estimate, what the
        compile cost (its first call) and what a compiled call takes (its second)."""
        if not seen.compiled:
            seen.compiled = 1
            eager = {"eager_s": seen.best_s} if seen.best_s < math.inf else {}
            seen.record.note(compile_s=round(seconds, 3), **eager)
        elif seen.compiled == 1:  # the first call that only ran
            seen.compiled = 2
            seen.record.note(compiled_s=seconds)


def _signature(args: tuple, kwargs: dict, dims: str) -> tuple:
    """What tells one compiled graph from another, as far as the call shows it: each tensor's dtype and
    shape, where symbolic sizes (`dims` "all"; "batch": only the batch axis) count only as 0, 1 or more,
    and the other arguments' values (a decode step's cache slots read among them). The module (args[0])
    adds its mode."""
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
        if isinstance(v, nn.Module):
            return v.training
        return min(v, 2) if dims == "all" and type(v) is int else v if isinstance(v, (int, float, str, bool)) \
            else type(v).__name__
    return tuple(of(a) for a in args) + tuple((k, of(v)) for k, v in kwargs.items())


def _size(module) -> int:
    """The parameter and buffer tensors a unit's graph reads: what its compile time grows with."""
    return sum(1 for _ in module.parameters()) + sum(1 for _ in module.buffers()) if isinstance(module, nn.Module) \
        else 1


_ANNOUNCE_S = 2.0  # a compile that takes longer says what it waits for, once


def _named(fn, args: tuple, kwargs: dict, unit: str, dims: str) -> str:
    """The unit and shape a compile is for, as its wait message names them."""
    owner = args[0] if args and isinstance(args[0], nn.Module) else None
    spec = getattr(sys.modules.get(fn.__module__), "SPEC", {}).get("path", fn.__module__)
    first = next((a for a in (*args[1:], *kwargs.values()) if isinstance(a, torch.Tensor)), None)
    if unit == "decode":
        length = getattr(kwargs.get("decode"), "length", None)
        slots = f", {length} cache slots read" if length else ""
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


def _user() -> str:
    """The user name in torch's default inductor cache folder (torch._inductor.runtime.cache_dir_utils)."""
    import getpass
    import re
    try:
        name = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        name = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
    return re.sub(r'[\\/:*?"<>|]', "_", name)


def _torch_cache_folder() -> str:
    """The folder of torch's inductor cache, as torch finds it (torch._inductor.runtime.cache_dir_utils)."""
    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    return os.path.abspath(folder) if folder is not None else _default_cache_folder()


def _default_cache_folder() -> str:
    import tempfile
    return os.path.join(tempfile.gettempdir(), f"torchinductor_{_user()}")


def _unusable(folder: str) -> Optional[str]:
    """Why os.makedirs cannot make `folder` or nothing can be written in it (the nearest path that
    exists is no folder, or one not writable); None where it can."""
    path = folder
    while not os.path.lexists(path):
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        return f"{path} is not a folder"
    return None if os.access(path, os.W_OK | os.X_OK) else f"{path} is not writable"


def _usable_cache() -> list:
    """torch's compile cache folder made usable for this process, as snf's runtime is imported: torch
    makes it as its compiler is imported, which a weight init on the meta device does too (even with
    SNF_COMPILE=0), and an unusable one (a path under a regular file) fails that import. It is replaced
    by torch's default folder, else by a new temporary one. Returns the warning the first compile
    gives (_Payoff.announce), if any."""
    import tempfile
    folder = _torch_cache_folder()
    why = _unusable(folder)
    if why is None:
        return []
    instead = _default_cache_folder()
    try:
        if instead == folder or _unusable(instead) is not None:
            instead = tempfile.mkdtemp(prefix="torchinductor_")
    except OSError:  # no temporary folder either: torch's compiler cannot be imported, whatever snf does
        return []
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = instead
    return [f"torch's compile cache folder {folder} cannot be used ({why}); this process caches compiles in "
            f"{instead} instead: set TORCHINDUCTOR_CACHE_DIR to a folder you can write in, or unset it"]


_CACHE_MOVED = _usable_cache()  # said by the first compile (then emptied)
