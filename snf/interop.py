"""Loading foreign checkpoints through the mapping a spec declares (`checkpoint FMT:` sections).

The generated module carries `SPEC_PARAMETERS` (spec name -> state-dict key) and `CHECKPOINTS`
(format -> spec name -> source expression, as plain tuples). This module evaluates those
expressions against a foreign state dict, checks every shape first, and only then copies.
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


def _layers(model: torch.nn.Module) -> int:
    return len(model.layers) if hasattr(model, "layers") else 0


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


def convert_state_dict(model: torch.nn.Module, state_dict: dict, fmt: str) -> dict:
    """The foreign `state_dict` as the model's own state dict; raises CheckpointError before any copy."""
    mod = _module_of(model)
    formats = getattr(mod, "CHECKPOINTS", {})
    if fmt not in formats:
        raise ValueError(f"the spec declares no checkpoint format {fmt!r}; it has: "
                         + (", ".join(sorted(formats)) or "none"))
    mapping, params = formats[fmt], mod.SPEC_PARAMETERS
    own = model.state_dict()
    out, used, missing, mismatched = {}, set(), [], []
    n_layers = _layers(model)
    for name, (path, stacked) in params.items():
        layers = range(n_layers) if stacked else [None]
        for layer in layers:
            key = path.replace("{l}", str(layer)) if layer is not None else path
            if key not in own:
                continue  # a conditional parameter that is off in this config
            if name not in mapping:
                missing.append(f"{key} (the spec gives no {fmt!r} source for `{name}`)")
                continue
            tensor = _eval(mapping[name], state_dict, layer, used, missing)
            if tensor is None:
                continue
            if tuple(tensor.shape) != tuple(own[key].shape):
                mismatched.append((key, tuple(own[key].shape), tuple(tensor.shape)))
                continue
            out[key] = tensor
    ignored = _key_patterns(mapping.get("_ignore", ()))
    unexpected = sorted(k for k in state_dict if k not in used and not ignored.fullmatch(k))
    if missing or unexpected or mismatched:
        raise CheckpointError(fmt, missing, unexpected, mismatched)
    return out


def _key_patterns(keys) -> re.Pattern:
    """The spec's `_ <- "key"` entries as one pattern; `{l}` in a key stands for any layer index."""
    alternatives = [re.escape(k).replace(re.escape("{l}"), r"\d+") for k in keys]
    return re.compile("|".join(alternatives) if alternatives else r"(?!)")


def load_state_dict(model: torch.nn.Module, state_dict: dict, fmt: str = "spec") -> torch.nn.Module:
    """Load a foreign checkpoint into a generated model through the spec's declared mapping.

    `fmt="spec"` takes the model's own names (`model.state_dict()` keys). Shapes are checked
    for every key before any tensor is copied.
    """
    if fmt == "spec":
        own = model.state_dict()
        missing = sorted(k for k in own if k not in state_dict)
        unexpected = sorted(k for k in state_dict if k not in own)
        mismatched = [(k, tuple(own[k].shape), tuple(v.shape)) for k, v in state_dict.items()
                      if k in own and tuple(v.shape) != tuple(own[k].shape)]
        if missing or unexpected or mismatched:
            raise CheckpointError(fmt, missing, unexpected, mismatched)
        converted = dict(state_dict)
    else:
        converted = convert_state_dict(model, state_dict, fmt)
    with torch.no_grad():
        model.load_state_dict({k: v.detach().to(model.state_dict()[k].dtype) for k, v in converted.items()},
                              strict=True)
    return model


def spec_state(model: torch.nn.Module) -> dict:
    """The model's parameters under the spec's names, per-layer ones stacked on axis 0."""
    mod = _module_of(model)
    own = model.state_dict()
    out = {}
    for name, (path, stacked) in mod.SPEC_PARAMETERS.items():
        if stacked:
            keys = [path.replace("{l}", str(i)) for i in range(_layers(model))]
            if all(k in own for k in keys):
                out[name] = torch.stack([own[k] for k in keys])
        elif path in own:
            out[name] = own[path]
    return out
