"""Checkpoints: foreign ones through the mapping a spec declares (`checkpoint FMT:` sections), and
files in the spec's own names.

The generated module carries `SPEC_PARAMETERS` (spec name -> state-dict key) and `CHECKPOINTS`
(format -> spec name -> source expression, as plain tuples). This module evaluates those
expressions against a foreign state dict, checks every shape first, and only then copies.
`load_checkpoint` and `save_checkpoint` do the same from and to files: safetensors (one file, or a
transformers `save_pretrained` folder, sharded or not) and `torch.save` state dicts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import linecache
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch


class CheckpointError(ValueError):
    """A state dict does not fit the model; lists every missing, unexpected, mis-shaped or non-tensor key."""

    def __init__(self, fmt: str, missing: list, unexpected: list, mismatched: list, invalid: list = ()):
        self.missing, self.unexpected, self.mismatched = missing, unexpected, mismatched
        self.invalid = list(invalid)
        lines = [f"checkpoint does not fit the model (format {fmt!r}):"]
        if missing:
            lines.append("  missing keys: " + ", ".join(missing))
        if unexpected:
            lines.append("  unexpected keys: " + ", ".join(unexpected))
        for key, want, got in mismatched:
            lines.append(f"  {key}: expected shape {list(want)}, got {list(got)}")
        for key, got in self.invalid:
            lines.append(f"  {key}: expected a tensor, got {got}")
        super().__init__("\n".join(lines))


def _module_of(model: torch.nn.Module):
    return sys.modules[type(model).__module__]


def _layers(model: torch.nn.Module) -> int:
    return len(model.layers) if hasattr(model, "layers") else 0


def _tensor(sd: Mapping, key: str, invalid: list):
    """sd[key] when it is a tensor; otherwise None, and the key is listed as invalid."""
    value = sd[key]
    if isinstance(value, torch.Tensor):
        return value
    invalid.append((key, "None" if value is None else type(value).__name__))
    return None


def _eval(src, sd: Mapping, layer: int | None, used: set, missing: list, invalid: list):
    kind = src[0]
    if kind == "key":
        key = src[1].replace("{l}", str(layer)) if layer is not None else src[1]
        if key not in sd:
            missing.append(key)
            return None
        used.add(key)
        return _tensor(sd, key, invalid)
    if kind == "or":
        trial_missing: list = []
        first = _eval(src[1], sd, layer, used, trial_missing, invalid)
        return first if first is not None else _eval(src[2], sd, layer, used, missing, invalid)
    inner = _eval(src[1], sd, layer, used, missing, invalid)
    if inner is None:
        return None
    if kind == "T":
        return inner.t() if inner.dim() == 2 else inner.transpose(-1, -2)
    if kind == "split":
        _, _, n, axis, index = src
        return inner.chunk(n, dim=axis)[index]
    if kind == "reshape":
        return inner.reshape(*src[2:])
    raise ValueError(f"unknown checkpoint expression {kind!r}")


def convert_state_dict(model: torch.nn.Module, state_dict: Mapping, fmt: str) -> dict:
    """The foreign `state_dict` as the model's own state dict; raises CheckpointError before any copy.

    `state_dict` may be any mapping: only the keys the spec's mapping reads are looked up.
    """
    mod = _module_of(model)
    formats = getattr(mod, "CHECKPOINTS", {})
    if fmt not in formats:
        raise ValueError(f"the spec declares no checkpoint format {fmt!r}; it has: "
                         + (", ".join(sorted(formats)) or "none"))
    mapping, params = formats[fmt], mod.SPEC_PARAMETERS
    own = model.state_dict()
    out, used, missing, mismatched, invalid = {}, set(), [], [], []
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
            tensor = _eval(mapping[name], state_dict, layer, used, missing, invalid)
            if tensor is None:
                continue
            if tuple(tensor.shape) != tuple(own[key].shape):
                mismatched.append((key, tuple(own[key].shape), tuple(tensor.shape)))
                continue
            out[key] = tensor
    ignored = _key_patterns(mapping.get("_ignore", ()))
    unexpected = sorted(k for k in state_dict if k not in used and not ignored.fullmatch(k))
    if missing or unexpected or mismatched or invalid:
        raise CheckpointError(fmt, missing, unexpected, mismatched, invalid)
    return out


def _key_patterns(keys) -> re.Pattern:
    """The spec's `_ <- "key"` entries as one pattern; `{l}` in a key stands for any layer index."""
    alternatives = [re.escape(k).replace(re.escape("{l}"), r"\d+") for k in keys]
    return re.compile("|".join(alternatives) if alternatives else r"(?!)")


def load_state_dict(model: torch.nn.Module, state_dict: Mapping, fmt: str = "spec") -> torch.nn.Module:
    """Load a checkpoint into a generated model through the spec's declared mapping.

    `fmt="spec"` takes the spec's names: either the model's own state-dict keys
    (`model.state_dict()`) or `spec_state`'s layout, per-layer parameters stacked on axis 0
    (what `save_checkpoint` writes); the layout whose keys the state dict shares more of is meant.
    Any other `fmt` is a `checkpoint FMT:` section of the spec. Shapes are checked for every key
    before any tensor is copied.
    """
    own = model.state_dict()
    if fmt == "spec":
        entries = _spec_entries(model)
        if sum(k in entries for k in state_dict) > sum(k in own for k in state_dict):
            converted = _from_spec_state(model, state_dict, entries)
        else:
            converted = _checked(fmt, state_dict, {k: tuple(v.shape) for k, v in own.items()})
    else:
        converted = convert_state_dict(model, state_dict, fmt)
    with torch.no_grad():
        model.load_state_dict({k: v.detach().to(own[k].dtype) for k, v in converted.items()}, strict=True)
    return model


def _checked(fmt: str, state_dict: Mapping, shapes: dict) -> dict:
    """`state_dict` when its keys are exactly those of `shapes` and its values tensors of those shapes."""
    missing = sorted(k for k in shapes if k not in state_dict)
    unexpected = sorted(k for k in state_dict if k not in shapes)
    invalid: list = []
    values = {k: _tensor(state_dict, k, invalid) for k in shapes if k in state_dict}
    mismatched = [(k, shapes[k], tuple(v.shape)) for k, v in values.items()
                  if v is not None and tuple(v.shape) != shapes[k]]
    if missing or unexpected or mismatched or invalid:
        raise CheckpointError(fmt, missing, unexpected, mismatched, invalid)
    return values


def _spec_entries(model: torch.nn.Module) -> dict:
    """Each spec parameter this config has -> (its state-dict keys, one per layer for a stacked
    one; stacked?; its shape and dtype under the spec's name)."""
    mod = _module_of(model)
    own = model.state_dict()
    n_layers = _layers(model)
    no_layer = _empty_layer(model) if n_layers == 0 else {}
    out = {}
    for name, (path, stacked) in mod.SPEC_PARAMETERS.items():
        if not stacked:
            if path in own:
                out[name] = ([path], False, tuple(own[path].shape), own[path].dtype)
        elif n_layers:
            keys = [path.replace("{l}", str(i)) for i in range(n_layers)]
            if keys[0] in own:
                out[name] = (keys, True, (n_layers, *own[keys[0]].shape), own[keys[0]].dtype)
        elif path.split("{l}.", 1)[-1] in no_layer:
            like = no_layer[path.split("{l}.", 1)[-1]]
            out[name] = ([], True, (0, *like.shape), like.dtype)
    return out


def _empty_layer(model: torch.nn.Module) -> dict:
    """With no layers, what one layer's state dict would hold (on the meta device: no memory)."""
    block = getattr(_module_of(model), "Block", None)
    if block is None:
        return {}
    with torch.device("meta"):
        return block(model.config).state_dict()


def spec_state(model: torch.nn.Module) -> dict:
    """The model's parameters under the spec's names, per-layer ones stacked on axis 0."""
    own = model.state_dict()
    device = next(iter(own.values())).device if own else torch.device("cpu")
    out = {}
    for name, (keys, stacked, shape, dtype) in _spec_entries(model).items():
        if not stacked:
            out[name] = own[keys[0]]
        elif keys:
            out[name] = torch.stack([own[k] for k in keys])
        else:
            out[name] = torch.empty(shape, dtype=dtype, device=device)
    return out


def _from_spec_state(model: torch.nn.Module, tensors: Mapping, entries: dict) -> dict:
    """`spec_state`'s layout (spec names, per-layer parameters stacked) as the model's own state dict."""
    values = _checked("spec", tensors, {name: entry[2] for name, entry in entries.items()})
    out = {}
    for name, (keys, stacked, _, _) in entries.items():
        out.update(zip(keys, values[name].unbind(0) if stacked else (values[name],)))
    return out


# ----------------------------------------------------------------------------- files

_SAFETENSORS_INDEX, _SAFETENSORS = "model.safetensors.index.json", "model.safetensors"
_TORCH_INDEX, _TORCH = "pytorch_model.bin.index.json", "pytorch_model.bin"


def load_checkpoint(model: torch.nn.Module, path: str | Path, fmt: str = "spec") -> torch.nn.Module:
    """Load a checkpoint file or folder into a generated model through the spec's mapping `fmt`.

    `path` is a `.safetensors` file, a `torch.save` state dict (read with `weights_only=True`), or
    a folder written by transformers' `save_pretrained` (`model.safetensors`, or shards listed in
    `model.safetensors.index.json`; `pytorch_model.bin` and its index too). Tensors are read from
    disk only when the mapping needs them, and every key and shape is checked (CheckpointError)
    before anything is copied into the model. `fmt="spec"` reads what `save_checkpoint` writes.
    """
    with _open_checkpoint(Path(path)) as tensors:
        return load_state_dict(model, tensors, fmt)


def save_checkpoint(model: torch.nn.Module, path: str | Path) -> Path:
    """Write the model's parameters in the spec's names (`spec_state`: per-layer ones stacked on
    axis 0) as one safetensors file, with the spec's file name, sha256 and the config as metadata.
    `load_checkpoint(model, path)` reads it back."""
    from safetensors.torch import save_file

    tensors, storages = {}, set()
    for name, tensor in spec_state(model).items():
        tensor = tensor.detach().cpu()
        if tensor.untyped_storage().data_ptr() in storages or not tensor.is_contiguous():
            tensor = tensor.clone(memory_format=torch.contiguous_format)  # safetensors refuses shared memory
        storages.add(tensor.untyped_storage().data_ptr())
        tensors[name] = tensor
    path = Path(path)
    save_file(tensors, str(path), metadata=_metadata(model))
    return path


def _metadata(model: torch.nn.Module) -> dict:
    """The generated module's header facts (spec file, sha256) and the config, as strings."""
    meta = {"format": "pt", "snfc.layout": "spec_state"}
    header = "".join(linecache.getline(getattr(_module_of(model), "__file__", "") or "", n) for n in (1, 2))
    if found := re.search(r"from '(.*?)'", header):
        meta["snfc.spec_file"] = found.group(1)
    if found := re.search(r"spec sha256: ([0-9a-f]{64})", header):
        meta["snfc.spec_sha256"] = found.group(1)
    if dataclasses.is_dataclass(getattr(model, "config", None)):
        meta["snfc.config"] = json.dumps(dataclasses.asdict(model.config), sort_keys=True)
    return meta


class _LazyTensors(Mapping):
    """A checkpoint's tensors by key; each is read from its file when first asked for."""

    def __init__(self, where: dict, open_file):
        self._where, self._open, self._read = where, open_file, {}

    def __getitem__(self, key: str):
        if key not in self._read:
            self._read[key] = self._open(self._where[key])[key]
        return self._read[key]

    def __contains__(self, key) -> bool:
        return key in self._where

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


@contextlib.contextmanager
def _open_checkpoint(path: Path) -> Iterator[Mapping]:
    """The tensors of a checkpoint file or `save_pretrained` folder, as a lazy mapping."""
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    with contextlib.ExitStack() as stack:
        opened: dict = {}

        def open_file(file: Path) -> Mapping:
            if file not in opened:
                opened[file] = _open_file(file, stack)
            return opened[file]

        where = _files_of(path)
        if isinstance(where, Path):  # one file: its own keys
            where = dict.fromkeys(open_file(where).keys(), where)
        yield _LazyTensors(where, open_file)


def _files_of(path: Path) -> dict | Path:
    """The file that holds each key (a folder's shard index), or the one file that holds them all."""
    if not path.is_dir():
        return path
    for index in (_SAFETENSORS_INDEX, _TORCH_INDEX):
        if (path / index).is_file():
            try:
                weight_map = json.loads((path / index).read_text(encoding="utf-8"))["weight_map"]
                return {key: path / file for key, file in weight_map.items()}
            except (ValueError, KeyError, TypeError, AttributeError) as err:
                raise ValueError(f"{path / index} is not a shard index ({type(err).__name__}: {err})") from None
    for single in (_SAFETENSORS, _TORCH):
        if (path / single).is_file():
            return path / single
    raise FileNotFoundError(f"{path} is a folder without a checkpoint: expected {_SAFETENSORS_INDEX}, "
                            f"{_SAFETENSORS}, {_TORCH_INDEX} or {_TORCH} in it")


def _open_file(file: Path, stack: contextlib.ExitStack) -> Mapping:
    """One checkpoint file, by its first bytes: safetensors (read lazily), or a torch.save state dict
    (memory-mapped when it is in the zip format). `stack` closes a safetensors file."""
    if not file.is_file():
        raise FileNotFoundError(f"no checkpoint file {file}")
    with open(file, "rb") as f:
        head = f.read(9)
    if len(head) == 9 and head[8:9] == b"{":  # 8-byte header length, then the JSON header
        from safetensors import safe_open
        try:
            handle = safe_open(str(file), framework="pt")
        except Exception as err:  # safetensors raises its own SafetensorError
            raise ValueError(f"{file} is not a readable safetensors file ({err})") from None
        stack.callback(handle.__exit__, None, None, None)
        return _SafetensorsFile(handle)
    if head[:2] == b"PK" or head[:1] == b"\x80":  # torch.save's zip format, or its legacy pickle
        try:
            data = torch.load(file, map_location="cpu", weights_only=True, mmap=head[:2] == b"PK")
        except Exception as err:
            raise ValueError(f"{file} is not a state dict that torch.load(weights_only=True) reads "
                             f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})") from None
        if not isinstance(data, Mapping):
            raise ValueError(f"{file} holds a {type(data).__name__}, not a state dict (a mapping of names to tensors)")
        return data
    raise ValueError(f"{file} is not a checkpoint: expected a safetensors file or a torch.save state dict")


class _SafetensorsFile(Mapping):
    """An open safetensors file as a mapping; `[key]` reads one tensor."""

    def __init__(self, handle):
        self._handle, self._keys = handle, list(handle.keys())

    def __getitem__(self, key: str) -> torch.Tensor:
        return self._handle.get_tensor(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)
