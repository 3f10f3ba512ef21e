"""numpy, imported on first use.

The ops' NumPy references run in `snf.interpret` only; `snfc check`, which runs on every commit,
never calls them and so never pays numpy's import time.
"""

from __future__ import annotations

import importlib


class _Numpy:
    def __getattr__(self, name: str):
        return getattr(importlib.import_module("numpy"), name)


np = _Numpy()
