"""Loading foreign checkpoints through the mapping a spec declares (`checkpoint FMT:` sections).

The generated module carries `spec_parameters(config)` (spec name -> where it lives: a state-dict
key, the rows of that tensor, the number of layers) and `CHECKPOINTS` (format -> spec name ->
source expression, as plain tuples). This module evaluates those expressions against a foreign
state dict, checks every shape first, and only then copies.
"""

from __future__ import annotations

import re
import sys

import torch


class CheckpointError(ValueError):
    """A foreign state dict does not fit the model; lists every missing, unexpected or mis-shaped key."""

    def __init__(self, fmt: str, missing: list, unexpected: list, mismatched: list):
        self.missing, self.unexpected, self.mismatched = missing, unexpected, mismatched
        lines = [f"checkpoint does not fit the model (format {fmt!r}):"]
        if missing:
            lines.append("  missing keys: " + ", ".join(missing))
        if unexpected:
            lines.append("  unexpected keys: " + ", ".join(unexpected))
        for key, want, got in mismatched:
            lines.append(f"  {key}: expected shape {list(want)}, got {list(got)}")
        super().__init__("\n".join(lines))


def _module_of(model: torch.nn.Module):
    return sys.modules[type(model).__module__]


def _pieces(model: torch.nn.Module) -> list[tuple[str, int | None, str, tuple | None]]:
    """Every stored piece of every spec parameter: (spec name, layer or None, state-dict key, rows
    of that tensor or None), as the generated module's `spec_parameters` places them."""
    out = []
    for name, (key, rows, layers) in _module_of(model).spec_parameters(model.config).items():
        for layer in (range(layers) if layers is not None else [None]):
            out.append((name, layer, key.replace("{l}", str(layer)) if layer is not None else key, rows))
    return out


def _eval(src, sd: dict, layer: int | None, used: set, missing: list):
    kind = src[0]
    if kind == "key":
        key = src[1].replace("{l}", str(layer)) if layer is not None else src[1]
        if key not in sd:
            missing.append(key)
            return None
        used.add(key)
        return sd[key]
    if kind == "or":
        trial_missing: list = []
        first = _eval(src[1], sd, layer, used, trial_missing)
        return first if first is not None else _eval(src[2], sd, layer, used, missing)
    inner = _eval(src[1], sd, layer, used, missing)
    if inner is None:
        return None
    if kind == "T":
        return inner.t() if inner.dim() == 2 else inner.transpose(-1, -2)
    if kind == "split":
        _, _, n, axis, index = src
        return inner.chunk(n, dim=axis)[index]
    raise ValueError(f"unknown checkpoint expression {kind!r}")


def _formats(model: torch.nn.Module) -> dict:
    return getattr(_module_of(model), "CHECKPOINTS", {})


def convert_state_dict(model: torch.nn.Module, state_dict: dict, fmt: str) -> dict:
    """The foreign `state_dict` as the model's own state dict; raises CheckpointError before any copy.

    `fmt` is a format the spec declares (`checkpoint FMT:`), or "spec": the spec's own names, with
    per-layer parameters stacked on axis 0 (what `spec_state` returns)."""
    formats = _formats(model)
    if fmt != "spec" and fmt not in formats:
        raise ValueError(f"the spec declares no checkpoint format {fmt!r}; it has: "
                         + (", ".join(sorted(formats)) or "none") + " (and 'spec', the spec's own names)")
    mapping = formats[fmt]["params"] if fmt != "spec" else None
    own = model.state_dict()
    assembled: dict = {}
    used, missing, mismatched = set(), [], []
    for name, layer, key, rows in _pieces(model):
        if key not in own:
            continue  # a conditional parameter that is off in this config
        target = own[key] if rows is None else own[key][rows[0]:rows[1]]
        shown = key if rows is None else f"{key}[{rows[0]}:{rows[1]}]"
        if fmt == "spec":
            tensor = _spec_source(state_dict, name, layer, used, missing)
        elif name not in mapping:
            missing.append(f"{shown} (the spec gives no {fmt!r} source for `{name}`)")
            continue
        else:
            tensor = _eval(mapping[name], state_dict, layer, used, missing)
        if tensor is None:
            continue
        if tuple(tensor.shape) != tuple(target.shape):
            mismatched.append((shown if fmt != "spec" else name, tuple(target.shape), tuple(tensor.shape)))
            continue
        if rows is None:
            assembled[key] = tensor
        else:
            assembled.setdefault(key, torch.empty_like(own[key], dtype=tensor.dtype))[rows[0]:rows[1]] = tensor
    ignored = _key_patterns(formats[fmt]["ignore"] if fmt != "spec" else ())
    unexpected = sorted(k for k in state_dict if k not in used and not ignored.fullmatch(k))
    if missing or unexpected or mismatched:
        raise CheckpointError(fmt, sorted(set(missing), key=missing.index), unexpected, mismatched)
    return assembled


def _spec_source(state_dict: dict, name: str, layer: int | None, used: set, missing: list):
    if name not in state_dict:
        if name not in missing:
            missing.append(name)
        return None
    used.add(name)
    tensor = state_dict[name]
    if layer is None:
        return tensor
    if not isinstance(tensor, torch.Tensor) or tensor.dim() == 0 or layer >= tensor.size(0):
        missing.append(f"{name}[{layer}] (per-layer parameters are stacked on axis 0)")
        return None
    return tensor[layer]


def _key_patterns(keys) -> re.Pattern:
    """The spec's `_ <- "key"` entries as one pattern; `{l}` in a key stands for any layer index."""
    alternatives = [re.escape(k).replace(re.escape("{l}"), r"\d+") for k in keys]
    return re.compile("|".join(alternatives) if alternatives else r"(?!)")


def load_state_dict(model: torch.nn.Module, state_dict: dict, fmt: str = "spec") -> torch.nn.Module:
    """Load a foreign checkpoint into a generated model through the spec's declared mapping.

    `fmt="spec"` takes the spec's own names (per-layer parameters stacked, as `spec_state` gives
    them). Shapes are checked for every key before any tensor is copied. The model's own
    `model.state_dict()` loads back with plain `model.load_state_dict`."""
    converted = convert_state_dict(model, state_dict, fmt)
    own = model.state_dict()
    with torch.no_grad():
        model.load_state_dict({k: v.detach().to(own[k].dtype) for k, v in converted.items()}, strict=True)
    return model


def spec_state(model: torch.nn.Module) -> dict:
    """The model's parameters under the spec's names, per-layer ones stacked on axis 0."""
    own = model.state_dict()
    layers: dict[str, list] = {}
    out = {}
    for name, layer, key, rows in _pieces(model):
        if key not in own:
            continue
        tensor = own[key] if rows is None else own[key][rows[0]:rows[1]]
        if layer is None:
            out[name] = tensor
        else:
            layers.setdefault(name, []).append(tensor)
    for name, parts in layers.items():
        out[name] = torch.stack(parts)
    return {name: out[name] for name, *_ in _pieces(model) if name in out}
