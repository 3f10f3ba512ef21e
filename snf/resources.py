"""Grammars, templates and the bundled specs: package data when installed, the repo's top-level folders otherwise;
and the user's cache folder."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def resource_dir(kind: str) -> Path:
    """`grammars`, `templates` or `specs` (the bundled specs): inside the package (wheel) or beside it
    (source tree)."""
    for candidate in (_PKG / kind, _PKG.parent / kind):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"snfc resource folder {kind!r} is missing from the installation")


def read_resource(kind: str, name: str) -> str:
    return (resource_dir(kind) / name).read_text(encoding="utf-8")


def cache_folder() -> str | None:
    """The user's cache folder (`$SNFC_CACHE_DIR`, else `$XDG_CACHE_HOME/snfc`, else `~/.cache/snfc`),
    made where it is not; None where it cannot be made or is not the user's own: what it holds is
    run (a pickle, a compiled spec's code), so no one else may write there."""
    root = os.environ.get("SNFC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "snfc")
    if not os.path.isabs(root):
        return None  # no home folder: not a folder relative to wherever snfc runs
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
        st = os.stat(root)
    except OSError:
        return None
    if hasattr(os, "getuid") and (st.st_uid != os.getuid() or st.st_mode & 0o022):
        return None  # someone else could plant a file there
    return root


def cache_file(name: str, text: str) -> str | bool:
    """Where to keep something built from `text` (a grammar's parse tables) between runs, for
    Lark's `cache=`: a file named by `text`'s hash in the user's cache folder. Lark also checks the
    file against a hash of the grammar and its options, and rebuilds a stale or damaged one. False
    (no cache) where there is no usable cache folder."""
    root = cache_folder()
    if root is None:
        return False
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    return os.path.join(root, f"{name}.{digest}.cache")
