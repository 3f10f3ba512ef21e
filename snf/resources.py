"""Grammars and templates: package data when installed, the repo's top-level folders otherwise."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def resource_dir(kind: str) -> Path:
    """`grammars` or `templates`: inside the package (wheel) or beside it (source tree)."""
    for candidate in (_PKG / kind, _PKG.parent / kind):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"snfc resource folder {kind!r} is missing from the installation")


def read_resource(kind: str, name: str) -> str:
    return (resource_dir(kind) / name).read_text(encoding="utf-8")
