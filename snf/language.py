"""Words SNF itself defines: dtypes, scalar kinds, reserved names, and the config switches snfc acts on.

The checker, both front ends and code generation read them from here, so the language has one
vocabulary (docs/language.md).
"""

from __future__ import annotations

DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64", "bool")
SCALAR_KINDS = ("int", "float", "bool", "str")

# Names a spec cannot declare: they mean something in every spec.
RESERVED = frozenset({"Tensor", "exists", "None", "True", "False"} | set(DTYPES))

# Config values the code generator acts on (docs/language.md, "Recognised params"), with the
# scalar kind a spec must declare each as: a switch, and the tokens an encoder-decoder's
# `generate` starts, stops and pads with.
GRADIENT_CHECKPOINTING = "gradient_checkpointing"
GENERATE_TOKENS = ("decoder_start_token_id", "eos_token_id", "pad_token_id")
RECOGNISED_CONFIG = {GRADIENT_CHECKPOINTING: "bool", **{name: "int" for name in GENERATE_TOKENS}}
