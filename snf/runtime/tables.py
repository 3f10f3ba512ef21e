"""The row types of a generated module's tables, which snf's loaders (snf.interop, snf.pretrained) read
by field name: `_SpecParameter`, a row of `spec_parameters`.

Real Python, imported and tested as it is (tests/test_runtime.py); copied into a `--standalone`
module as the checks are (snf/runtime/checks.py).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch


class _SpecParameter(NamedTuple):
    """Where one spec parameter lives in the model's state dict (a row of `spec_parameters`), as the
    compiler's layout plan placed it."""
    key: str  # its state-dict key, `{l}` for the layer of a per-layer one
    shape: Optional[tuple]  # the shape of its piece (one layer's); None where the config leaves it out
    dtype: torch.dtype
    rows: Optional[tuple] = None  # the rows [lo, hi) of a fused tensor that are this parameter; None: all of it
    loop: Optional[str] = None  # a per-layer one's layer loop: the Model's module list of its Blocks (`layers`)
    layers: object = None  # that loop's layer count, or the numbers of the layers that have it (one of some
    # layers only); None when it is not per layer

    def layer_numbers(self) -> tuple:
        """The layers that have it, in order (none where it is not per layer)."""
        if self.layers is None:
            return ()
        return tuple(range(self.layers)) if isinstance(self.layers, int) else tuple(self.layers)
