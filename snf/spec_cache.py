"""What compiling a spec produces, kept in the user's cache folder (resources.cache_folder, beside
the parsers' tables) so that another process does not compile it again: a module's code
(`snf.load`) and which bundled spec reads each model_type (`snf.from_pretrained`).

An entry is keyed by what it was made from and by snfc itself: its version and the text of every
file that makes a compiled spec, so an edited checkout makes entries of its own. It is written
beside its name and renamed into place, so a process never reads one half written by another, and
carries its own key and digest: one that is damaged (cut short, edited, not JSON) reads as absent,
and is made again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from pathlib import Path

from .resources import cache_folder, resource_dir
from .version import __version__

_LARGEST = 1 << 24  # bytes: an entry past this is no entry of ours (and is not read into memory)
KEPT = 256  # entries of a kind; the least recently used go past that (specs in temporary folders add up)


@functools.cache
def snfc_key() -> str:
    """snfc's version and the text of the files that make a compiled spec: the package's Python, its
    grammars and its templates."""
    digest = hashlib.sha256(__version__.encode())
    for folder in (Path(__file__).resolve().parent, resource_dir("grammars"), resource_dir("templates")):
        suffixes = (".py",) if folder.name == "snf" else (".lark", ".j2")
        for path in sorted(p for p in folder.rglob("*") if p.suffix in suffixes):
            digest.update(f"{folder.name}/{path.relative_to(folder).as_posix()}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _where(kind: str, parts: tuple) -> tuple[str, str] | None:
    """The entry's file and its full key; None where there is no cache folder to keep it in."""
    root = cache_folder()
    if root is None:
        return None
    key = hashlib.sha256("\0".join((snfc_key(), kind, *parts)).encode()).hexdigest()
    return os.path.join(root, f"{kind}.{key[:32]}.json"), key


def _digest(data: dict) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def get(kind: str, parts: tuple) -> dict | None:
    """The entry of `kind` made from `parts` (strings), or None where there is none, or it is damaged."""
    where = _where(kind, parts)
    if where is None:
        return None
    path, key = where
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > _LARGEST:  # a FIFO would block
            return None
        with open(path, encoding="utf-8") as f:
            entry = json.load(f)
    except (OSError, ValueError, RecursionError):  # (ValueError: not JSON, or not UTF-8)
        return None
    if not isinstance(entry, dict) or entry.get("key") != key or not isinstance(entry.get("data"), dict):
        return None
    if entry.get("sha256") != _digest(entry["data"]):
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # used: the last to go
    return entry["data"]


def put(kind: str, parts: tuple, data: dict) -> None:
    """Keep `data` (JSON) as the entry of `kind` made from `parts`. Best effort: a cache that cannot
    be written (a full or read-only disk) only means the next process compiles again."""
    where = _where(kind, parts)
    if where is None:
        return
    path, key = where
    temp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temp, "w", encoding="utf-8") as f:
            json.dump({"key": key, "sha256": _digest(data), "data": data}, f)
        os.replace(temp, path)
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            os.remove(temp)
    _prune(os.path.dirname(path), kind)


def _prune(root: str, kind: str) -> None:
    """Remove the least recently used entries of `kind` past KEPT (best effort: another process may
    be removing them too)."""
    with contextlib.suppress(OSError):
        entries = [e for e in os.scandir(root) if e.name.startswith(f"{kind}.") and e.name.endswith(".json")]
        if len(entries) <= KEPT:
            return
        entries.sort(key=lambda e: e.stat().st_mtime_ns)
        for old in entries[:len(entries) - KEPT]:
            with contextlib.suppress(OSError):
                os.remove(old.path)
