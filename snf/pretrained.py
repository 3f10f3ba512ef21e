"""transformers' `save_pretrained` folders: `from_pretrained` builds a model of a bundled spec (or of
a spec it is given) from one, `save_pretrained` writes one that transformers loads.

A spec says how through two sections of the same format name (docs/language.md 7.1):
`checkpoint hf:` maps the weights, `config hf:` maps config.json to the spec's Config. The
generated module carries both as data (`CHECKPOINTS["hf"]`, with `"config"`); this module
evaluates that data, never as code. Every key config.json holds must be read, required (an
`assert`) or listed as harmless by the spec: nothing is silently ignored.
"""

from __future__ import annotations

import functools
import json
import operator
from pathlib import Path

import torch

from . import interop
from .checkpoints import key_of

CONFIG_FILE = "config.json"

_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
        "%": operator.mod, "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge}
_ABSENT = object()


class PretrainedError(ValueError):
    """A `save_pretrained` folder the spec cannot honour: no spec for its model_type, a config.json
    setting the spec does not map or requires otherwise, or a value it cannot write back. The
    message names the setting."""


# ----------------------------------------------------------------------------- bundled specs

@functools.cache
def _claims() -> list[tuple[str, tuple, Path]]:
    """(model_type, the architectures the section writes back, spec) for each bundled spec whose
    `config hf:` section requires a model_type (`assert hf.model_type == "..."`), from the checked
    specs shipped with snfc."""
    from .checkpoints import encode_config_section
    from .compiler import analyze
    from .resources import resource_dir
    from .source import Source

    out = []
    for path in sorted(resource_dir("specs").glob("*.snf")):
        result = analyze(Source.read(path))
        if result.ok and any(e.fmt == "hf" for e in result.model.config_maps):
            section = encode_config_section(result.model, "hf")
            written = section["writes"].get("architectures", ("list", ()))
            architectures = tuple(v[1] for v in written[1] if v[0] == "const") if written[0] == "list" else ()
            for test, _ in section["asserts"]:
                if test[:3] == ("cmp", "==", ("key", "model_type")) and test[3][0] == "const":
                    out.append((test[3][1], architectures, path))
    return out


def bundled_specs() -> dict[str, Path]:
    """model_type -> the bundled spec whose `config hf:` section requires it (the first, by file
    name, where several do: `_spec_for` chooses among them by architecture)."""
    out: dict[str, Path] = {}
    for model_type, _, path in _claims():
        out.setdefault(model_type, path)
    return out


def _spec_for(model_type, folder: Path, architectures=None) -> Path:
    """The bundled spec for a model_type; where several claim it (T5: `t5.snf` for
    T5ForConditionalGeneration, `t5_encoder.snf` for T5EncoderModel), the one whose section writes
    config.json's first architecture back."""
    specs = bundled_specs()
    if model_type not in specs:
        raise PretrainedError(f"{folder / CONFIG_FILE}: no bundled spec for model_type {model_type!r}; snfc bundles "
                              + ", ".join(f"{t!r} ({p.name})" for t, p in sorted(specs.items()))
                              + ". Pass spec= a spec with `checkpoint hf:` and `config hf:` sections")
    first = architectures[0] if isinstance(architectures, list) and architectures else None
    return next((path for t, written, path in _claims() if t == model_type and first in written), specs[model_type])


# ----------------------------------------------------------------------------- evaluating `config hf:`

class _Eval:
    """Evaluates a `config FMT:` expression (snf.checkpoints.encode_config) against config.json
    (`hf`) and the Config names known so far (`names`: a dict, or the Config itself); notes each
    key it reads."""

    def __init__(self, hf: dict, names, where: str):
        self.hf, self.names, self.where, self.used = hf, names, where, set()

    def key(self, key: str, absent_ok: bool):
        self.used.add(key)
        node = self.hf
        parts = key.split(".")
        for i, part in enumerate(parts):
            if isinstance(node, dict) and part in node and node[part] is None and i < len(parts) - 1:
                self.used.add(".".join(parts[:i + 1]))  # a null object (`"rope_scaling": null`): read, as absent
            node = node.get(part) if isinstance(node, dict) else None
            if node is None:
                if absent_ok:
                    return _ABSENT
                raise PretrainedError(f"{self.where}: config.json has no `{key}` (and the spec gives no default "
                                      "for it)")
        return node

    def name(self, name: str):
        return self.names[name] if isinstance(self.names, dict) else getattr(self.names, name)

    def __call__(self, e, absent_ok: bool = False):
        kind = e[0]
        if kind == "key":
            return self.key(e[1], absent_ok)
        if kind == "name":
            return self.name(e[1])
        if kind == "const":
            return e[1]
        if kind == "list":
            return [self(x) for x in e[1]]
        if kind == "or":
            first = self(e[1], absent_ok=True)
            return self(e[2], absent_ok) if first is _ABSENT else first
        if kind == "any":
            return bool(self(e[1])) or bool(self(e[2]))
        if kind == "all":
            return bool(self(e[1])) and bool(self(e[2]))
        if kind == "not":
            return not self(e[1])
        if kind == "neg":
            return -self(e[1])
        if kind in ("op", "cmp"):
            left, right = self(e[2]), self(e[3])
            try:
                return _OPS[e[1]](left, right)
            except (TypeError, ZeroDivisionError) as err:
                raise PretrainedError(f"{self.where}: cannot compute `{show(e)}` with {_settings(self, e)}: {err}") \
                    from None
        if kind == "if":
            return self(e[2]) if self(e[1]) else self(e[3])
        if kind == "match":
            value = self(e[1])
            for case, result in e[2]:
                if value == case:
                    return result
            raise PretrainedError(f"{self.where}: {_settings(self, e[1])}: the spec supports "
                                  + ", ".join(repr(c) for c, _ in e[2]))
        raise ValueError(f"unknown config expression {kind!r}")


def _keys(e) -> list[str]:
    from .checkpoints import config_keys
    return config_keys(e)


def _settings(ev: _Eval, e) -> str:
    """`key = value` for each key `e` reads, as config.json gives it."""
    shown = []
    for key in dict.fromkeys(_keys(e)):
        value = ev.key(key, absent_ok=True)
        shown.append(f"{key} = " + ("(absent)" if value is _ABSENT else json.dumps(value)))
    return ", ".join(shown) or "these settings"


def show(e) -> str:
    """An encoded config expression as the spec writes it (for messages)."""
    kind = e[0]
    if kind == "key":
        return f"hf.{e[1]}"
    if kind == "name":
        return e[1]
    if kind == "const":
        return json.dumps(e[1]) if isinstance(e[1], str) else repr(e[1])
    if kind == "list":
        return "[" + ", ".join(show(x) for x in e[1]) + "]"
    if kind in ("or", "any", "all"):
        return f"({show(e[1])} {'and' if kind == 'all' else 'or'} {show(e[2])})"
    if kind in ("not", "neg"):
        return ("not " if kind == "not" else "-") + show(e[1])
    if kind in ("op", "cmp"):
        return f"{show(e[2])} {e[1]} {show(e[3])}"
    if kind == "if":
        return f"({show(e[2])} if {show(e[1])} else {show(e[3])})"
    return "match(" + show(e[1]) + ", " + ", ".join(f"{c}={r!r}" for c, r in e[2]) + ")"


def _section(module, where: str) -> dict:
    section = getattr(module, "CHECKPOINTS", {}).get("hf", {})
    if "config" not in section:
        raise PretrainedError(f"{where}: the spec {_spec_name(module)} has no `config hf:` section (with "
                              "`checkpoint hf:`), so it cannot read or write a transformers config.json")
    return section


def config_from_hf(module, hf: dict, where: str = "config.json"):
    """The spec's Config for a transformers config.json (a dict), through its `config hf:` section;
    PretrainedError names each setting the spec cannot honour."""
    mapping = _section(module, where)["config"]
    where = f"{where} (for {_spec_name(module)})"
    fields: dict = {}
    ev = _Eval(hf, fields, where)
    for field, source in mapping["reads"].items():
        fields[field] = ev(source)
    try:
        config = module.Config(**fields)
    except (TypeError, ValueError) as err:
        raise PretrainedError(f"{where}: config.json gives a Config the spec refuses ("
                              + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + f"): {err}") from None
    ev.names = config
    problems = []
    for test, message in mapping["asserts"]:
        if not ev(test):
            why = f" ({message})" if message else ""
            problems.append(f"{_settings(ev, test)}: the spec requires `{show(test)}`{why}")
    problems += [f"{key} = {json.dumps(value)}: the spec does not map it" for key, value in
                 _unknown(hf, ev.used | set(mapping["ignore"]))]
    if problems:
        raise PretrainedError(f"{where}: settings the spec cannot honour:\n  " + "\n  ".join(problems))
    return config


def _unknown(hf: dict, known: set, prefix: str = "") -> list:
    """(key, value) for each setting of config.json that no key in `known` covers: a key is covered
    by itself or an enclosing object; an object some of whose keys are known is looked into."""
    out = []
    for key, value in hf.items():
        path = prefix + key
        if path in known:
            continue
        inner = isinstance(value, dict) and any(k.startswith(path + ".") for k in known)
        out += _unknown(value, known, path + ".") if inner else [(path, value)]
    return out


def _spec_name(module) -> str:
    return Path(getattr(module, "SPEC", {}).get("path", "?")).name


# ----------------------------------------------------------------------------- from_pretrained

def from_pretrained(path, *, spec=None, dtype: torch.dtype | None = None, device=None) -> torch.nn.Module:
    """A model built from a transformers `save_pretrained` folder (config.json, and model.safetensors
    or its shards): the bundled spec for config.json's `model_type` (or `spec`, a spec path),
    its Config from config.json through the spec's `config hf:` section, and the weights streamed
    into the parameters through its `checkpoint hf:` section (the model is built on the meta
    device first: memory peaks at about the weights). In eval mode, in `dtype` (float32 by
    default, whatever config.json's dtype says: the tests compare with transformers in float32)
    on `device` (the CPU by default). A setting the spec cannot honour is a PretrainedError that
    names it; a checkpoint that does not fit is interop.CheckpointError."""
    from .api import load

    folder = Path(path)
    config_file = folder / CONFIG_FILE
    if not config_file.is_file():
        raise FileNotFoundError(f"{folder} is not a save_pretrained folder: it has no {CONFIG_FILE}")
    try:
        hf = json.loads(config_file.read_text(encoding="utf-8"))
    except ValueError as err:
        raise PretrainedError(f"{config_file} is not JSON ({err})") from None
    if not isinstance(hf, dict):
        raise PretrainedError(f"{config_file} holds a {type(hf).__name__}, not a JSON object")
    module = load(spec if spec is not None else _spec_for(hf.get("model_type"), folder, hf.get("architectures")))
    config = config_from_hf(module, hf, str(config_file))
    with torch.device("meta"):
        model = module.Model(config)
    model.to(dtype or torch.float32)
    model.to_empty(device=device if device is not None else "cpu")
    if getattr(module, "RECOMPUTED_BUFFERS", ()):
        model.reset_parameters()  # the buffers the config decides; the checkpoint gives the rest
    interop.load_checkpoint(model, folder, "hf")
    return model.eval()


# ----------------------------------------------------------------------------- save_pretrained

def config_to_hf(model: torch.nn.Module) -> dict:
    """The transformers config.json for the model's Config: the inverse of the `config hf:`
    section. Each field read from a key (`f <- hf.k`, with `or` defaults, or through `match`) is
    written to that key; each `assert hf.k == value` writes the value (but null, which reads as
    an absent key); `hf.k <- value` entries are written as they say, after the fields (a None
    value leaves the key out). Reading the result back must give the same Config (checked)."""
    module = interop._module_of(model)
    where = f"save_pretrained({_spec_name(module)})"
    mapping = _section(module, where)["config"]
    config = model.config
    ev = _Eval({}, config, where)
    out: dict = {}
    for field, source in mapping["reads"].items():
        if not _invert(source, getattr(config, field), out):
            raise PretrainedError(f"{where}: `{field} <- {show(source)}` cannot be written back: read it from a key "
                                  "(`hf.key`, with `or` defaults, or through match(...))")
    for test, _ in mapping["asserts"]:
        if test[:2] == ("cmp", "==") and not _keys(test[3]) and ev(test[3]) is not None:  # null: as if absent
            _invert(test[2], ev(test[3]), out)
    for key, value in mapping["writes"].items():
        _put(out, key, ev(value))  # None leaves the key out (a null reads as absent)
    out.setdefault("dtype", str(next(iter(model.parameters())).dtype).removeprefix("torch."))
    back = config_from_hf(module, out, where)
    if back != config:
        raise PretrainedError(f"{where}: the config.json written back reads as {back}, not {config}")
    return out


def _invert(source, value, out: dict) -> bool:
    """Write `value` where `source` reads it from (its first key); False where it cannot."""
    kind = source[0]
    if kind == "key":
        _put(out, source[1], value)
        return True
    if kind == "or":
        return _invert(source[1], value, out)
    if kind == "match":
        case = next((c for c, result in source[2] if result == value and type(result) is type(value)), _ABSENT)
        return case is not _ABSENT and _invert(source[1], case, out)
    return False


def _put(out: dict, key: str, value) -> None:
    """out[key] = value, `key` going into nested objects; a None value removes the key instead
    (and the objects it leaves empty)."""
    *outer, last = key.split(".")
    if value is None:
        path = [out]
        for part in outer:
            if not isinstance(path[-1].get(part), dict):
                return
            path.append(path[-1][part])
        path[-1].pop(last, None)
        for parent, part in zip(reversed(path[:-1]), reversed(outer)):
            if not parent[part]:
                del parent[part]
        return
    for part in outer:
        out = out.setdefault(part, {})
    out[last] = value


def hf_state_dict(model: torch.nn.Module) -> dict:
    """The model's weights in the `checkpoint hf:` section's names: the inverse of each source
    (`.T` transposes back, the parts of a `split` are concatenated, an `a or b` writes `a`)."""
    module = interop._module_of(model)
    params = interop._formats(model)["hf"]["params"]
    layers_of = {name: layers for name, (_, _, layers) in module.spec_parameters(model.config).items()}
    parts: dict = {}
    out: dict = {}
    config = model.config  # what keys' `{...}` fields read beside the layer and expert numbers
    recomputed = set(getattr(module, "RECOMPUTED_BUFFERS", ()))
    for name, tensor in interop.spec_state(model).items():
        if name not in params and name in recomputed:
            continue  # the config decides it: no checkpoint holds it
        source = params[name]
        if layers_of[name] is None:
            _unmap(source, tensor, None, out, parts, config)
        for i, layer in enumerate(interop.layer_numbers(layers_of[name]) if layers_of[name] is not None else ()):
            _unmap(source, tensor[i], layer, out, parts, config)  # the i-th layer that has it
    for (inner, layer, n, axis), pieces in parts.items():
        if len(pieces) != n:
            raise PretrainedError(f"save_pretrained: only parts {sorted(pieces)} of {n} of `{show(inner)}` are mapped")
        _unmap(inner, torch.cat([pieces[i] for i in range(n)], dim=axis), layer, out, parts, config)
    return out


def _unmap(source, tensor, layer, out: dict, parts: dict, config=None) -> None:
    kind = source[0]
    if kind == "key":
        out[key_of(source, layer, config)] = tensor
    elif kind == "T":
        _unmap(source[1], tensor.transpose(-1, -2), layer, out, parts, config)
    elif kind == "or":
        _unmap(source[1], tensor, layer, out, parts, config)
    elif kind == "experts":  # one key per expert
        for e in range(tensor.shape[0]):
            _unmap(interop._for_expert(source[1], e), tensor[e], layer, out, parts, config)
    elif kind == "split":
        _, inner, n, axis, index = source
        parts.setdefault((inner, layer, n, axis), {})[index] = tensor
    else:
        raise ValueError(f"unknown checkpoint expression {kind!r}")


def save_pretrained(model: torch.nn.Module, folder) -> Path:
    """Write the model as transformers' `save_pretrained` does: config.json (`config_to_hf`) and
    model.safetensors in the `checkpoint hf:` names (`hf_state_dict`), which transformers'
    `from_pretrained` (and `snf.from_pretrained`) load."""
    config = config_to_hf(model)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    interop.write_safetensors(hf_state_dict(model), folder / "model.safetensors", {"format": "pt"})
    return folder
