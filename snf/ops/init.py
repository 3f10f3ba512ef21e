"""Parameter and buffer initialisers a spec may declare (`w : Tensor(...) = normal(std=0.02)`).

The checker validates a declared initialiser against this table (snf/check/inits.py); code
generation emits it.
"""

from __future__ import annotations

# name -> its keyword arguments with their defaults
INITS: dict[str, dict] = {
    "normal": {"mean": 0.0, "std": 0.02},
    "zeros": {},
    "ones": {},
    "constant": {"value": 0.0},
    "sinusoidal": {"base": 10000.0},
}

# (initialiser, argument) -> (low, high, low_open): the range the argument must lie in
INIT_RANGES: dict[tuple[str, str], tuple] = {
    ("normal", "std"): (0.0, None, False),
    ("sinusoidal", "base"): (0.0, None, True),
}
