"""When a unit of a generated module compiles: what compiling and a compiled call cost on each
device (`_FIGURES`), what one function has seen of one shape in this process (`_Seen`), what
compiling it cost on this machine before (`_Record`, a file beside torch's inductor cache), and that
cache's folder, made usable as the runtime is imported. compiling.py applies the rule.

Real Python, imported and tested as it is (tests/test_compile_policy.py); copied into a
`--standalone` module as the rest of the runtime is (snf/runtime/__init__.py).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from typing import NamedTuple, Optional


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
    """What one compiled function has seen of one shape (_signature) in this process, and what is
    known of that shape before any call: its figures (None: compiling it never pays), the tensors its
    graph reads, its batch, and this machine's _Record of it."""

    __slots__ = ("eager_calls", "best_s", "compiled", "record", "figures", "tensors", "batch", "device", "mode")

    def __init__(self, record: "_Record", figures: Optional[_Figures], tensors: int, batch: int, device: str,
                 mode: str):
        self.eager_calls, self.best_s, self.record = 0, math.inf, record
        self.figures, self.tensors, self.batch, self.device, self.mode = figures, tensors, batch, device, mode
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
    gives (_hot_path), if any."""
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
