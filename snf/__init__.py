"""snfc: compile SNF transformer specs to readable PyTorch modules.

Importing `snf` does not import torch; `snf.load` and `snf.interop` do.
"""

from __future__ import annotations

from .version import __version__

__all__ = ["__version__", "load"]


def load(path):
    """Compile a spec in process and return its module (`Config`, `Model`); cached by spec hash."""
    from .api import load as _load
    return _load(path)


def __getattr__(name):
    if name in ("interop", "interpret"):
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(name)
