"""Hygienic names for generated code (after torch.fx's `_Namespace`).

A spec name becomes a Python identifier that is never a keyword, never a builtin or a name the
generated module imports or defines, and never an `nn.Module` attribute. Clashes get a
trailing underscore (`self` -> `self_`); each namespace maps a spec name to one identifier,
and two spec names never share one.
"""

from __future__ import annotations

import builtins
import keyword
import re
import unicodedata

# Names the generated file itself binds at module level or in every method.
MODULE_NAMES = frozenset({
    "annotations", "dataclass", "field", "functools", "math", "os", "warnings", "torch", "F", "nn",
    "NamedTuple", "Optional", "Config", "Model", "Output", "SPEC", "SPEC_PARAMETERS", "CHECKPOINTS",
    "self", "cfg", "layer", "config", "_hot_path", "_attention", "_rope", "_assign", "_compile_enabled",
    "_split_fused", "_join_fused", "_init", "_check_input", "_sinusoidal",
})
BUILTINS = frozenset(dir(builtins))
_IDENT = re.compile(r"^[^\W\d]\w*$")


def _module_attributes() -> frozenset:
    try:
        import torch.nn as nn  # only for the list of names; check does not import this module
        return frozenset(dir(nn.Module))
    except ImportError:  # pragma: no cover
        return frozenset()


class Namespace:
    """Maps spec names to unique, safe identifiers. `kind` picks the extra reserved set."""

    def __init__(self, reserved: frozenset | set = frozenset(), attribute: bool = False):
        self.attribute = attribute
        self.reserved = set(reserved) | set(keyword.kwlist) | set(keyword.softkwlist) | {"self"}
        if not attribute:
            self.reserved |= MODULE_NAMES | BUILTINS
        self.map: dict[str, str] = {}
        self.used: set[str] = set()

    def name(self, spec_name: str) -> str:
        if spec_name in self.map:
            return self.map[spec_name]
        base = safe_identifier(spec_name)
        cand = base
        while cand in self.reserved or cand in self.used or cand.startswith("__"):
            cand = cand.lstrip("_") + "_" if cand.startswith("__") else cand + "_"
        self.map[spec_name] = cand
        self.used.add(cand)
        return cand

    def reserve(self, *names: str) -> None:
        self.reserved.update(names)


def safe_identifier(name: str) -> str:
    """An ASCII-stable identifier: NFKC-normal Unicode is kept, anything else is escaped."""
    norm = unicodedata.normalize("NFKC", name)
    if norm == name and _IDENT.match(name) and name.isidentifier():
        return name
    out = []
    for ch in name:
        out.append(ch if (ch.isascii() and (ch.isalnum() or ch == "_")) else f"_u{ord(ch):04x}")
    s = "".join(out)
    return s if s and not s[0].isdigit() else "_" + s


def module_attribute_names() -> frozenset:
    return _module_attributes()
