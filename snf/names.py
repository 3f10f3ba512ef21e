"""Hygienic names for generated code (after torch.fx's `_Namespace`).

A spec name becomes a Python identifier that is never a keyword, never a builtin or a name the
generated module imports or defines, and never an `nn.Module` attribute. It never starts with an
underscore either: the generated module's own helpers and private attributes all do (`_linear_t`,
`self._stored`), so no spec name can shadow one, present or future. Clashes get a trailing
underscore (`self` -> `self_`, `_x` -> `x_`); each namespace maps a spec name to one identifier,
and two spec names never share one.
"""

from __future__ import annotations

import builtins
import keyword
import re
import unicodedata

# Names the generated file itself binds at module level or in every method.
MODULE_NAMES = frozenset({
    "annotations", "dataclasses", "dataclass", "field", "functools", "math", "os", "warnings", "torch", "F", "nn",
    "NamedTuple", "Optional", "Config", "Model", "Output", "spec_parameters", "CHECKPOINTS",
    "RECOMPUTED_BUFFERS",
    "self", "cfg", "layer", "config",
})
BUILTINS = frozenset(dir(builtins))
# Attributes the generated modules set themselves (Model.compile_units: what torch.compile compiles), and
# snf.from_pretrained on the models it loads (`loaded_from`: the folder, its config, its generation config).
GENERATED_ATTRIBUTES = frozenset({"config", "compile_units", "loaded_from"})
# Names a generated `forward` needs for itself: no input may be called so (it is a forward argument; `encoded`
# and `decode` carry the state generate hands each step).
FORWARD_RESERVED = frozenset({"self", "torch", "F", "nn", "math", "Output", "Config", "Model", "enumerate",
                              "use_cache", "return_logits", "encoded", "decode"})
_IDENT = re.compile(r"^[^\W\d]\w*$")


# dir(torch.nn.Module) in torch 2.13, so `check`/`compile` never import torch; a test keeps it a
# superset of the installed torch's list.
MODULE_ATTRIBUTES = frozenset({
    'T_destination', '__annotations__', '__call__', '__class__', '__delattr__', '__dict__',
    '__dir__', '__doc__', '__eq__', '__format__', '__ge__', '__getattr__',
    '__getattribute__', '__getstate__', '__gt__', '__hash__', '__init__', '__init_subclass__',
    '__le__', '__lt__', '__module__', '__ne__', '__new__', '__reduce__',
    '__reduce_ex__', '__repr__', '__setattr__', '__setstate__', '__sizeof__', '__str__',
    '__subclasshook__', '__weakref__', '_apply', '_call_impl', '_compiled_call_impl', '_get_backward_hooks',
    '_get_backward_pre_hooks', '_get_name', '_load_from_state_dict', '_maybe_warn_non_full_backward_hook', '_named_members', '_register_load_state_dict_pre_hook',
    '_register_state_dict_hook', '_replicate_for_data_parallel', '_save_to_state_dict', '_slow_forward', '_version', '_wrapped_call_impl',
    'add_module', 'apply', 'bfloat16', 'buffers', 'call_super_init', 'children',
    'compile', 'cpu', 'cuda', 'double', 'dump_patches', 'eval',
    'extra_repr', 'float', 'forward', 'get_buffer', 'get_extra_state', 'get_parameter',
    'get_submodule', 'half', 'ipu', 'load_state_dict', 'modules', 'mtia',
    'named_buffers', 'named_children', 'named_modules', 'named_parameters', 'parameters', 'register_backward_hook',
    'register_buffer', 'register_forward_hook', 'register_forward_pre_hook', 'register_full_backward_hook', 'register_full_backward_pre_hook', 'register_load_state_dict_post_hook',
    'register_load_state_dict_pre_hook', 'register_module', 'register_parameter', 'register_state_dict_post_hook', 'register_state_dict_pre_hook', 'requires_grad_',
    'set_extra_state', 'set_submodule', 'share_memory', 'state_dict', 'to', 'to_empty',
    'train', 'type', 'xpu', 'zero_grad',
})


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
        while cand in self.reserved or cand in self.used or cand.startswith("_"):
            if cand.startswith("_"):
                rest = cand.lstrip("_")  # "_x", "__x": "x_"; "_", "__": "v_"; "_1": "v1_"
                cand = (rest if rest[:1].isalpha() else "v" + rest) + "_"
            else:
                cand = cand + "_"
        self.map[spec_name] = cand
        self.used.add(cand)
        return cand

    def keep(self, spec_name: str, forbidden: frozenset = frozenset()) -> str:
        """Map a name a user types (a forward argument, an output field) to itself: it is never
        renamed. The checker refuses names that could not work (`reserved-name`), so a clash here
        is a bug in snfc."""
        if self.map.get(spec_name, spec_name) != spec_name or spec_name in self.used - {spec_name} \
                or not spec_name.isidentifier() or keyword.iskeyword(spec_name) or spec_name.startswith("_") \
                or spec_name in forbidden:
            raise ValueError(f"{spec_name!r} cannot be kept as a name in generated code")
        self.map[spec_name] = spec_name
        self.used.add(spec_name)
        return spec_name

    def fresh(self, base: str) -> str:
        """A new identifier no spec name maps to (for temporaries the generator introduces)."""
        cand, i = safe_identifier(base), 2
        while cand in self.reserved or cand in self.used or cand in self.map:
            cand, i = f"{safe_identifier(base)}_{i}", i + 1
        self.used.add(cand)
        return cand


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
    return MODULE_ATTRIBUTES


# what each kind of name a user types becomes in generated code
_PUBLIC = {"config": "a `Config` field", "dim": "a `Config` property", "input": "an argument of `forward`",
           "output": "a field of the output", "param": "a state-dict key", "buffer": "a state-dict key"}


def public_name_problem(kind: str, name: str) -> str | None:
    """Why `name` cannot be the name of a `kind` (config, dim, input, output, param, buffer), or
    None. These names appear in generated code exactly as written, since users type them
    (`Config(head_dim=64)`, `model(idx=...)`, `out.logits`, state-dict keys): where one cannot
    work, it is an error in the spec, never a silent rename."""
    what = _PUBLIC.get(kind)
    if what is None:
        return None
    if unicodedata.normalize("NFKC", name) != name:
        return f"`{name}` becomes {what}, and Python would read it as `{unicodedata.normalize('NFKC', name)}`"
    if keyword.iskeyword(name):
        return f"`{name}` is a Python keyword and cannot be {what}"
    if name.startswith("_"):
        return f"`{name}` starts with `_`, which generated code keeps for its own names; it cannot be {what}"
    if kind in ("config", "dim") and name in ("self", "property"):
        return f"`{name}` is a name the generated `Config` class uses itself; it cannot be {what}"
    if kind == "input" and name in FORWARD_RESERVED:
        return f"`{name}` would shadow a name the generated `forward` uses; it cannot be {what}"
    if kind in ("param", "buffer") and (name in MODULE_ATTRIBUTES or name in GENERATED_ATTRIBUTES | {"training"}
                                        or re.fullmatch(r"layers\d*", name)):
        return f"`{name}` is an attribute of every generated module (`nn.Module.{name}`); it cannot be {what}" \
            if name in MODULE_ATTRIBUTES | {"training"} else \
               f"`{name}` is an attribute the generated module sets itself; it cannot be {what}"
    return None



def close_name(name: str, candidates) -> str | None:
    """The one candidate close enough to `name` to be what was meant, for a "did you mean" hint;
    None when none is: a letter left out, doubled or swapped (`xx` for `x`, `sigmod` for
    `sigmoid`), or a ratio of 0.75 (difflib's default 0.6 suggested `sub` for `sum`, `mod` for
    `sigmoid`, `int` for `sin`: another letter is another word)."""
    import difflib
    candidates = list(candidates)
    typo = next((c for c in candidates if _one_slip(name, c)), None)
    if typo is not None:
        return typo
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
    return close[0] if close else None


def _one_slip(a: str, b: str) -> bool:
    """`b` is `a` with one letter inserted or deleted, or two neighbours swapped."""
    if abs(len(a) - len(b)) == 1:
        short, long = sorted((a, b), key=len)
        return any(long[:i] + long[i + 1:] == short for i in range(len(long)))
    return len(a) == len(b) and len(a) > 1 and any(
        a[:i] + a[i + 1] + a[i] + a[i + 2:] == b for i in range(len(a) - 1))
