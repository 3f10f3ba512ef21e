"""Checkpoints: foreign ones through the mapping a spec declares (`checkpoint FMT:` sections), and
files in the spec's own names.

The generated module carries `spec_parameters(config)` (spec name -> where it lives, a
`_SpecParameter` row: a state-dict key, the shape and dtype of its piece, the rows of that tensor,
the layer loop and its layers) and
`CHECKPOINTS` (format -> spec name -> source expression, as plain tuples). This module evaluates
those expressions against a foreign state dict, checks every shape first, and only then copies. `load_checkpoint` and
`save_checkpoint` do the same from and to files: safetensors (one file, or a transformers
`save_pretrained` folder, sharded or not) and `torch.save` state dicts.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import re
import sys
import time
import warnings
from collections.abc import Mapping
from pathlib import Path

import torch

from .checkpoint_files import FLOAT8, MetaView, open_checkpoint
from .weight_mapping import Reading, key_of, read_part, read_tensor, stored_keys


class CheckpointError(ValueError):
    """A state dict does not fit the model; lists every missing, unexpected, mis-shaped or non-tensor
    key, and each config setting the checkpoint says it was saved with that the model's differs from."""

    def __init__(self, fmt: str, missing: list, unexpected: list, mismatched: list, invalid: list = (),
                 where: str = "", config: list = (), notes: list = ()):
        self.fmt, self.missing, self.unexpected, self.mismatched = fmt, missing, unexpected, mismatched
        self.invalid, self.config, self.notes = list(invalid), list(config), list(notes)
        lines = [f"{where + ': ' if where else ''}checkpoint does not fit the model (format {fmt!r}):"]
        if missing:
            lines.append("  missing keys: " + ", ".join(missing))
        if unexpected:
            lines.append("  unexpected keys: " + ", ".join(unexpected))
        for key, want, got in mismatched:
            lines.append(f"  {key}: expected shape {list(want)}, got {list(got)}")
        for key, got in self.invalid:
            lines.append(f"  {key}: expected a tensor, got {got}" if " tensor" not in got else f"  {key}: {got}")
        lines += [f"  config: {problem}" for problem in self.config]
        if self.config:
            lines.append("  build the model with the checkpoint's config, or load it with strict=False to take its "
                         "weights into this config")
        lines += [f"  ({note})" for note in self.notes]
        super().__init__("\n".join(lines))

    def keys(self) -> list[str]:
        """What its lines name: the keys, each as its line starts."""
        return [*self.missing, *self.unexpected, *(m[0] for m in self.mismatched), *(i[0] for i in self.invalid)]

    def at(self, where, notes: list = ()) -> "CheckpointError":
        """The same error, naming the file or folder it is about, with `notes` on its keys."""
        return CheckpointError(self.fmt, self.missing, self.unexpected, self.mismatched, self.invalid, str(where),
                               self.config, [*self.notes, *notes])


class CheckpointWarning(UserWarning):
    """`load_state_dict(strict=False)` left tensors the checkpoint does not give, or ignored keys."""


def module_of(model: torch.nn.Module):
    """The generated module a model's class comes from: its tables (`spec_parameters`, `CHECKPOINTS`).
    A class made over it at run time (FSDP2's `fully_shard` makes one, in torch's module) is passed by."""
    for cls in type(model).__mro__:
        module = sys.modules.get(cls.__module__)
        if hasattr(module, "spec_parameters"):
            return module
    return sys.modules[type(model).__module__]


def _pieces(model: torch.nn.Module) -> list[tuple[str, int | None, str, tuple | None]]:
    """Every stored piece of every spec parameter: (spec name, layer or None, state-dict key, rows
    of that tensor or None), as the generated module's `spec_parameters` places them."""
    out = []
    for name, p in module_of(model).spec_parameters(model.config).items():
        for layer in (p.layer_numbers() if p.loop is not None else [None]):
            out.append((name, layer, p.key.replace("{l}", str(layer)) if layer is not None else p.key, p.rows))
    return out


def checkpoint_formats(model: torch.nn.Module) -> dict:
    """The checkpoint formats the model's spec declares (its module's `CHECKPOINTS`): format -> its data."""
    return getattr(module_of(model), "CHECKPOINTS", {})


def convert_state_dict(model: torch.nn.Module, state_dict: Mapping, fmt: str, strict: bool = True) -> dict:
    """The foreign `state_dict` as the model's own state dict; raises CheckpointError before any copy.

    `fmt` is a format the spec declares (`checkpoint FMT:`), or "spec": the spec's own names, with
    per-layer parameters stacked on axis 0 (what `spec_state` returns). `state_dict` may be any
    mapping: only the keys the mapping reads are looked up. A buffer the config decides
    (`RECOMPUTED_BUFFERS`) needs no source. With `strict=False`, what has no source, or whose key is
    absent, is left out of the result instead of being an error, and keys nothing uses are allowed;
    a shape that does not fit is an error either way."""
    found, _, _ = _convert(model, state_dict, fmt, strict)
    return _assemble(model.state_dict(), [(key, rows, get(state_dict)) for key, rows, get, _, _ in found])


def _convert(model: torch.nn.Module, state_dict: Mapping, fmt: str, strict: bool) -> tuple[list, list, list]:
    """How to get each piece of the model the checkpoint gives: (state-dict key, rows or None,
    get(state_dict) -> tensor, the first checkpoint key it reads, the keys that hold it as it is
    stored (weight_mapping.stored_keys)); the pieces left as they are; and
    the keys nothing used. Every shape is checked here (CheckpointError): on a `MetaView` of the
    checkpoint, without reading a tensor's data."""
    formats = checkpoint_formats(model)
    if fmt != "spec" and fmt not in formats:
        raise ValueError(f"the spec declares no checkpoint format {fmt!r}; it has: "
                         + (", ".join(sorted(formats)) or "none") + " (and 'spec', the spec's own names)")
    own = model.state_dict()
    pieces = [(name, layer, key, rows) for name, layer, key, rows in _pieces(model) if key in own]  # present here
    recomputed = set(getattr(module_of(model), "RECOMPUTED_BUFFERS", ()))
    if fmt == "spec":
        shapes = _spec_shapes(model)
        values, unexpected = _checked(fmt, state_dict, shapes, strict, optional=recomputed)
        table = module_of(model).spec_parameters(model.config)
        # the index of a layer's slice: its place among the layers that have the parameter
        at = {(name, layer): i for name, p in table.items() for i, layer in enumerate(p.layer_numbers())}
        found = [(key, rows, (lambda sd, index=None, name=name: read_part(sd, name, index)) if layer is None else
                  (lambda sd, index=None, name=name, i=at[name, layer]: read_part(sd, name, (i, *(index or ())))),
                  name,
                  [(None, name)] if layer is None else [])
                 for name, layer, key, rows in pieces if name in values]
        left = [_shown(key, rows) for name, layer, key, rows in pieces if name not in values]
        return found, left, unexpected
    mapping = formats[fmt]["params"]
    found, left = [], []
    config = model.config  # the whole model's: a sharded load reads after snf.parallelize gave the model a rank's
    r = Reading(state_dict, config)
    for name, layer, key, rows in pieces:
        shown = _shown(key, rows)
        want = tuple(_piece(own, key, rows).shape)
        tensor = None
        start = len(r.trace)
        if name in mapping:
            tensor = read_tensor(mapping[name], want, layer, r, shown)
        elif name not in recomputed:  # a buffer the config decides keeps its value
            r.missing.append(f"{shown} (the spec gives no {fmt!r} source for `{name}`)")
        if tensor is None:
            left.append(shown)
            continue
        first = r.trace[start] if len(r.trace) > start else ""
        if tuple(tensor.shape) != want:
            r.mismatched.append((f"{first} (for {shown})" if first else shown, want, tuple(tensor.shape)))
            continue
        found.append((key, rows, lambda sd, index=None, src=mapping[name], want=want, layer=layer, shown=shown:
                      read_tensor(src, want, layer, Reading(sd, config), shown, index=index), first,
                      stored_keys(mapping[name], want, layer, config)))
    missing, mismatched, invalid = r.missing, r.mismatched, r.invalid
    ignored = _key_patterns(formats[fmt]["ignore"])
    unexpected = sorted(k for k in state_dict if k not in r.used and not ignored.fullmatch(k))
    if mismatched or invalid or strict and (missing or unexpected):
        raise CheckpointError(fmt, sorted(set(missing), key=missing.index), unexpected, mismatched, invalid)
    return found, left, unexpected


def _spec_shapes(model: torch.nn.Module) -> dict:
    """The shape of each spec parameter as `spec_state` gives it (per-layer ones stacked on axis 0),
    from `spec_parameters`' shapes: nothing is read or stacked."""
    shapes: dict = {}
    for name, p in module_of(model).spec_parameters(model.config).items():
        numbers = p.layer_numbers()
        if p.shape is None or p.loop is not None and not numbers and p.layers != 0:  # off, or on no layer it has
            continue
        shapes[name] = p.shape if p.loop is None else (len(numbers), *p.shape)
    return shapes


def _shown(key: str, rows) -> str:
    return key if rows is None else f"{key}[{rows[0]}:{rows[1]}]"


def _piece(own: dict, key: str, rows) -> torch.Tensor:
    return own[key] if rows is None else own[key][rows[0]:rows[1]]


def _assemble(own: dict, found: list) -> dict:
    """(state-dict key, rows or None, tensor) pieces as whole state-dict entries."""
    out: dict = {}
    for key, rows, tensor in found:
        if rows is None:
            out[key] = tensor
        else:
            # rows of a fused tensor; rows a non-strict load leaves out keep their values
            out.setdefault(key, own[key].to(tensor.dtype, copy=True))[rows[0]:rows[1]] = tensor
    return out


def _key_patterns(keys) -> re.Pattern:
    """The spec's `_ <- "key"` entries as one pattern; a `{...}` field (`{l}`) stands for any number."""
    alternatives = [r"\d+".join(re.escape(part) for part in re.split(r"\{[^{}]*\}", k)) for k in keys]
    return re.compile("|".join(alternatives) if alternatives else r"(?!)")


_PROGRESS_AFTER_S = 2.0  # a load that has taken this long shows its progress


class _Progress:
    """What a long load has read so far, on stderr once it has taken `_PROGRESS_AFTER_S`: one line
    updated in place on a terminal, else a line every tenth. A stderr that cannot be written stops
    the showing, never the load."""

    def __init__(self, label: str, total: int):
        self.label, self.total, self.done, self.shown = label, max(total, 1), 0, -1
        self.start = time.perf_counter()

    def add(self, nbytes: int) -> None:
        self.done += nbytes
        seconds = time.perf_counter() - self.start
        if seconds < _PROGRESS_AFTER_S:
            return
        tenth = 10 * self.done // self.total
        try:
            tty = sys.stderr.isatty()
            if tty or tenth > self.shown:
                self.shown = tenth
                lead, end = ("\r", "\n" if self.done >= self.total else "") if tty else ("", "\n")
                sys.stderr.write(f"{lead}{self.label}: {100 * self.done // self.total}% of "
                                 f"{self.total / 2**30:.2f} GiB, {seconds:.0f} s{end}")
                sys.stderr.flush()
        except (OSError, ValueError, AttributeError):  # stderr closed, None or a broken pipe: the load goes on,
            self.start = math.inf  # and shows no more


def load_state_dict(model: torch.nn.Module, state_dict: Mapping, fmt: str = "spec", strict: bool = True,
                    before_copy=None, progress: str | None = None, keep: bool = False,
                    part_of=None) -> torch.nn.Module:
    """Load a checkpoint into a generated model through the spec's declared mapping.

    `fmt="spec"` takes the spec's own names, per-layer parameters stacked on axis 0 (what
    `spec_state` gives and `save_checkpoint` writes), or the model's own state-dict keys
    (`model.state_dict()`): the layout whose keys the state dict shares more of is meant. Any
    other `fmt` is a `checkpoint FMT:` section of the spec. Shapes are checked for every key
    before any tensor is copied. With `strict=False`, what the checkpoint does not give keeps its
    value (its initial one, on a fresh model) and unused keys are allowed: a `CheckpointWarning`
    names both. `before_copy()`, when given, runs once everything is checked and before the first
    copy: from_pretrained checks a model built on the meta device, then allocates it there. With
    `progress` (a label), a load that takes a while says how far it is on stderr. With `keep`, a
    tensor the model takes whole as it is stored (its dtype and shape, on the CPU) from a
    memory-mapped file (`state_dict.mapped`) is not copied: the model's tensor is the file's pages,
    read when first used, private to the process (a write copies the page it touches). With
    `part_of` (a sharded load: snf.parallel.local_runs of a key and its tensor, once `before_copy` has
    sharded the model), a tensor this process holds part of is filled with only the entries it holds, each read
    alone from the checkpoint (`weight_mapping.read_part`).
    """
    found = _plan(model, model.state_dict(), state_dict, fmt, strict)
    if before_copy is not None:
        before_copy()
    own = model.state_dict()
    # one tensor at a time, straight into the model's own: the pieces that read one checkpoint
    # tensor (q, k and v of one c_attn) one after another, so a file's tensor is read once; a
    # tensor taken as it is stored (a whole parameter, or one expert's entry of it) read from a
    # safetensors file straight into the parameter (no copy held)
    read_into = getattr(state_dict, "read_into", None)
    mapped = getattr(state_dict, "mapped", None) if keep else None
    # key -> (this process's tensor of it, the runs of the whole tensor it holds): a sharded load's
    shards = {k: held for k in dict.fromkeys(k for k, *_ in found)
              if part_of is not None and (held := part_of(k, own[k])) is not None}
    shown = _Progress(progress, sum(_piece(own, k, r).nbytes for k, r, *_ in found if k not in shards)
                      + sum(local.nbytes for local, _ in shards.values())) if progress else None
    counted: set = set()  # the held tensors shown as read (at their first piece)
    with torch.no_grad():
        for key, rows, get, first, stored in sorted(found, key=lambda piece: piece[3]):
            if key in shards:
                local, runs = shards[key]
                _copy_held(local, runs, rows, get, state_dict)
                if shown is not None and key not in counted:
                    counted.add(key)
                    shown.add(local.nbytes)
                continue
            piece = _piece(own, key, rows)
            kept = mapped is not None and rows is None and stored == [(None, first)] and _kept(model, key, piece,
                                                                                              mapped(first))
            if not kept and not (stored and read_into is not None
                                 and all(read_into(k, piece if i is None else piece[i]) for i, k in stored)):
                piece.copy_(get(state_dict).detach())
            if shown is not None:
                shown.add(piece.nbytes)
    return model


def _copy_held(local: torch.Tensor, runs: list, rows, get, state_dict: Mapping) -> None:
    """Fill what `local` holds of a tensor, as `runs` say ((axis, start, stop, at): local's entries
    `at` on along `axis` are the whole tensor's `start:stop`; axis None: all of it), from the piece
    `get` reads (the tensor's `rows`, or all of it): only the entries held are read."""
    r0, r1 = rows if rows is not None else (0, None)
    for axis, start, stop, at in runs:
        if axis == 0 and rows is not None:  # the rows held that are this piece's
            lo, hi = max(start, r0), min(stop, r1)
            if lo < hi:
                local[at + lo - start:at + hi - start].copy_(get(state_dict, (slice(lo - r0, hi - r0),)))
            continue
        out = local if rows is None else local[r0:r1]
        if axis is None:
            out.copy_(get(state_dict))
        else:
            out.narrow(axis, at, stop - start).copy_(get(state_dict, (slice(None),) * axis + (slice(start, stop),)))


def _kept(model: torch.nn.Module, key: str, piece: torch.Tensor, tensor: torch.Tensor | None) -> bool:
    """Make the model's tensor `key` the checkpoint's `tensor` itself, where it is what a copy would
    give (`piece`'s shape and dtype, on the CPU)."""
    if tensor is None or tensor.dtype != piece.dtype or tensor.shape != piece.shape or piece.device.type != "cpu":
        return False
    owner, _, name = key.rpartition(".")
    module = model.get_submodule(owner)
    if name in module._parameters:
        module._parameters[name].data = tensor
    else:
        module._buffers[name] = tensor
    return True


def _plan(model: torch.nn.Module, own: dict, state_dict: Mapping, fmt: str, strict: bool) -> list:
    """load_state_dict's pieces (as _convert gives them), every key, shape and dtype checked on a
    MetaView of the checkpoint (CheckpointError): no tensor's data is read."""
    shapes_only = MetaView(state_dict)  # everything is checked before a tensor is read or copied
    if fmt == "spec" and sum(k in own for k in state_dict) > sum(k in _spec_names(model) for k in state_dict):
        recomputed = set(getattr(module_of(model), "RECOMPUTED_BUFFERS", ()))
        optional = {key for name, _, key, _ in _pieces(model) if name in recomputed}
        checked, unexpected = _checked(fmt, shapes_only, {k: tuple(v.shape) for k, v in own.items()}, strict,
                                       optional)
        found = [(k, None, lambda sd, index=None, k=k: read_part(sd, k, index), k, [(None, k)]) for k in own
                 if k in checked]
        left = [k for k in own if k not in checked]
    else:
        found, left, unexpected = _convert(model, shapes_only, fmt, strict)
    if not strict and (left or unexpected):
        parts = [f"left as they were: {', '.join(left)}"] if left else []
        parts += [f"unused checkpoint keys: {', '.join(unexpected)}"] if unexpected else []
        warnings.warn(f"load_state_dict(strict=False, format {fmt!r}): " + "; ".join(parts), CheckpointWarning,
                      stacklevel=3)
    # a bool or integer tensor is no weight: copying it would turn True into 1.0 without a word; float8
    # codes without their scales are a quantized release's, which config.json's quantization_config reads
    kinds = [(f"{first} (for {_shown(key, rows)})" if first else _shown(key, rows),
              f"a {str(t.dtype).removeprefix('torch.')} tensor, not floating point" if t.dtype not in FLOAT8 else
              f"a {str(t.dtype).removeprefix('torch.')} tensor: quantized codes, which snfc reads only with their "
              "scales, as a quantization_config says")
             for key, rows, get, first, _ in found if _piece(own, key, rows).dtype.is_floating_point
             and (not (t := get(shapes_only)).dtype.is_floating_point or t.dtype in FLOAT8)]
    if kinds:
        raise CheckpointError(fmt, [], [], [], kinds)
    return found


def _spec_names(model: torch.nn.Module) -> set:
    return set(module_of(model).spec_parameters(model.config))


def _checked(fmt: str, state_dict: Mapping, shapes: dict, strict: bool = True,
             optional: set = frozenset()) -> tuple[dict, list]:
    """The tensors of `state_dict` for the keys of `shapes`, checked against those shapes, and the
    keys it has beyond them. Every key of `shapes` but the `optional` ones must be there, and no
    other, unless not `strict`."""
    missing = sorted(k for k in shapes if k not in state_dict and k not in optional)
    unexpected = sorted(k for k in state_dict if k not in shapes)
    r = Reading(state_dict)
    values = {k: r.tensor(k) for k in shapes if k in state_dict}
    invalid = r.invalid
    mismatched = [(k, shapes[k], tuple(v.shape)) for k, v in values.items()
                  if v is not None and tuple(v.shape) != shapes[k]]
    if mismatched or invalid or strict and (missing or unexpected):
        raise CheckpointError(fmt, missing, unexpected, mismatched, invalid)
    return values, unexpected


def spec_state(model: torch.nn.Module) -> dict:
    """The model's parameters under the spec's names, per-layer ones stacked on axis 0 (a model
    with no layers gives them with a first axis of 0)."""
    own = model.state_dict()
    layers: dict[str, list] = {}
    out = {}
    for name, layer, key, rows in _pieces(model):
        if key not in own:
            continue
        tensor = _piece(own, key, rows)
        if layer is None:
            out[name] = tensor
        else:
            layers.setdefault(name, []).append(tensor)
    for name, parts in layers.items():
        out[name] = torch.stack(parts)
    out.update(_empty_layers(model, own))
    return {name: out[name] for name in module_of(model).spec_parameters(model.config) if name in out}


def _empty_layers(model: torch.nn.Module, own: dict) -> dict:
    """Per-layer parameters of layer loops that run no layer: [0, ...] tensors of one layer's shape,
    as `spec_parameters` gives it (one of some layers, on none, is absent, as one the config leaves out)."""
    device = next(iter(own.values())).device if own else torch.device("cpu")
    return {name: torch.empty((0, *p.shape), dtype=p.dtype, device=device)
            for name, p in module_of(model).spec_parameters(model.config).items()
            if p.layers == 0 and p.shape is not None}


# ----------------------------------------------------------------------------- files



def load_checkpoint(model: torch.nn.Module, path: str | Path, fmt: str = "spec",
                    strict: bool = True, before_copy=None, progress: str | None = None) -> torch.nn.Module:
    """Load a checkpoint file or folder into a generated model through the spec's mapping `fmt`.

    `path` is a `.safetensors` file, a `torch.save` state dict (read with `weights_only=True`; a
    training checkpoint holding it under "model", as nanoGPT's `ckpt.pt`, and torch.compile's
    `_orig_mod.` key prefixes are read too), or
    a folder written by transformers' `save_pretrained` (`model.safetensors`, or shards listed in
    `model.safetensors.index.json`; `pytorch_model.bin` and its index too). Tensors are read from
    disk only when the mapping needs them, and every key and shape is checked (CheckpointError)
    before anything is copied into the model. `fmt="spec"` reads what `save_checkpoint` writes; a
    file that says which config it was saved with (its `snfc.config` metadata) is refused where a
    field of the model's config differs (a CheckpointWarning with `strict=False`).
    `strict`, `before_copy` and `progress` are `load_state_dict`'s.
    """
    with open_checkpoint(Path(path)) as tensors:
        return load_opened(model, tensors, path, fmt, strict, before_copy, progress)


def load_opened(model: torch.nn.Module, tensors: Mapping, path, fmt: str = "spec", strict: bool = True,
                before_copy=None, progress: str | None = None, keep: bool = False, part_of=None) -> torch.nn.Module:
    """load_checkpoint of a checkpoint already open (`open_checkpoint`, or a view of one such as
    snf.quantized's), `path` where it is: an error names it, with what the view notes on its keys.
    `keep` and `part_of` are load_state_dict's."""
    try:
        _check_saved_config(model, getattr(tensors, "metadata", None), fmt, strict)
        return load_state_dict(model, tensors, fmt, strict, before_copy, progress, keep, part_of)
    except CheckpointError as err:
        raise err.at(path, tensors.notes(err.keys()) if hasattr(tensors, "notes") else ()) from None


def _check_saved_config(model: torch.nn.Module, metadata, fmt: str, strict: bool) -> None:
    """The config a checkpoint says it was saved with (save_checkpoint's `snfc.config` metadata)
    against the model's, field by field (those both have): the weights' shapes cannot tell
    n_head = 2 from 4, so a field that differs is a CheckpointError naming it (with `strict=False`, a
    CheckpointWarning)."""
    saved = metadata.get("snfc.config") if isinstance(metadata, dict) else None
    config = getattr(model, "config", None)
    if saved is None or not dataclasses.is_dataclass(config):
        return
    try:
        saved = json.loads(saved)
    except (TypeError, ValueError, RecursionError):
        saved = None
    if not isinstance(saved, dict):
        problems = ["its snfc.config metadata is not a JSON object of config fields"]
    else:
        own = json.loads(json.dumps(dataclasses.asdict(config), default=repr))
        problems = [f"{name} = {json.dumps(saved[name])} in the checkpoint (its snfc.config metadata), "
                    f"{json.dumps(own[name])} in the model" for name in own
                    if name in saved and json.dumps(saved[name]) != json.dumps(own[name])]
    if problems and strict:
        raise CheckpointError(fmt, [], [], [], config=problems)
    if problems:
        warnings.warn("load_checkpoint(strict=False): the checkpoint was saved with another config: "
                      + "; ".join(problems), CheckpointWarning, stacklevel=3)


def save_checkpoint(model: torch.nn.Module, path: str | Path) -> Path:
    """Write the model's parameters in the spec's names (`spec_state`: per-layer ones stacked on
    axis 0) as one safetensors file, with the spec's file name, sha256 and the config as metadata.
    `load_checkpoint(model, path)` reads it back."""
    return write_safetensors(spec_state(model), Path(path), _metadata(model))


def write_safetensors(tensors: dict, path: Path, metadata: dict) -> Path:
    """One safetensors file of `tensors`: on the CPU, each contiguous and none sharing memory with
    another (safetensors refuses shared memory; a tensor is copied only where it has to be), with
    an ordinary file's mode. A write that fails is an OSError naming the file."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    out, storages = {}, set()
    for name, tensor in tensors.items():
        tensor = tensor.detach().cpu()
        if tensor.untyped_storage().data_ptr() in storages or not tensor.is_contiguous():
            tensor = tensor.clone(memory_format=torch.contiguous_format)
        storages.add(tensor.untyped_storage().data_ptr())
        out[name] = tensor
    try:
        save_file(out, str(path), metadata=metadata)
    except SafetensorError as err:  # an I/O failure as safetensors reports it: as Python's own writes do
        code = re.search(r"os error (\d+)", str(err))
        number = int(code[1]) if code else errno.EIO
        raise OSError(number, os.strerror(number) if code else f"safetensors: {err}", str(path)) from None
    mask = os.umask(0)  # safetensors writes 0600; a checkpoint is an ordinary file (umask's mode)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)
    return path


def _metadata(model: torch.nn.Module) -> dict:
    """The spec the generated module comes from (its `SPEC` table) and the config, as strings."""
    meta = {"format": "pt", "snfc.layout": "spec_state"}
    spec = getattr(module_of(model), "SPEC", {})
    if "path" in spec:
        meta["snfc.spec_file"] = spec["path"]
    if "sha256" in spec:
        meta["snfc.spec_sha256"] = spec["sha256"]
    if dataclasses.is_dataclass(getattr(model, "config", None)):
        meta["snfc.config"] = json.dumps(dataclasses.asdict(model.config), sort_keys=True)
    return meta
