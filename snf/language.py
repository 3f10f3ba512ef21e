"""Words SNF itself defines: dtypes, scalar kinds, reserved names, and the config switches snfc acts on.

The checker, both front ends and code generation read them from here, so the language has one
vocabulary (docs/language.md).
"""

from __future__ import annotations

DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64", "bool")
SCALAR_KINDS = ("int", "float", "bool", "str")

# Names a spec cannot declare: they mean something in every spec.
RESERVED = frozenset({"Tensor", "exists", "None", "True", "False"} | set(DTYPES))

# Config switches the code generator acts on (docs/language.md, "Recognised params"); a spec that
# declares one must declare it `bool`.
GRADIENT_CHECKPOINTING = "gradient_checkpointing"
RECOGNISED_CONFIG = (GRADIENT_CHECKPOINTING,)
