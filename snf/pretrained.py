"""transformers' `save_pretrained` folders: `from_pretrained` builds a model of a bundled spec (or of
a spec it is given) from one, `save_pretrained` writes one that transformers loads.

A spec says how through two sections of the same format name (docs/language.md 7.1):
`checkpoint hf:` maps the weights (read through snf.interop, written back here), `config hf:` maps
config.json to the spec's Config (snf.hf_config, both ways). The generated module carries both as
data (`CHECKPOINTS["hf"]`, with `"config"`), evaluated, never run as code.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from . import interop, quantized
from .checkpoint_files import SAFETENSORS_INDEX, TORCH_INDEX, open_checkpoint
from .runtime.generate import GenerationConfig
from .config_mapping import show
from .hf_config import CONFIG_FILE, PretrainedError, config_from_hf, config_to_hf, spec_for
from .hf_config import bundled_specs  # noqa: F401  (snf.pretrained.bundled_specs(), as docs/porting.md says)
from .weight_mapping import join_parts, source_keys, unmap_tensor

# the dtypes snfc's models run in (its kernels and torch's CPU ops); a float8 one loads, then no forward runs
RUNNABLE_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


# ----------------------------------------------------------------------------- from_pretrained

def from_pretrained(path, *, spec=None, dtype: torch.dtype | None = None, device=None,
                    mmap: bool = True, device_mesh=None, tp_plan=None, tp_local=None) -> torch.nn.Module:
    """A model built from a transformers `save_pretrained` folder (config.json, and model.safetensors
    or its shards): the bundled spec for config.json's `model_type` (or `spec`, a spec path),
    its Config from config.json through the spec's `config hf:` section, and the weights streamed
    into the parameters through its `checkpoint hf:` section (the model is built on the meta
    device first, and each tensor read straight into its parameter: memory peaks at about the
    weights). In eval mode, in `dtype` (by default config.json's `dtype` or `torch_dtype`, the
    checkpoint's own, else float32) on `device` (the CPU by default); a load that takes a while
    shows its progress on stderr. A quantized release (config.json's `quantization_config`: MXFP4,
    block-scaled FP8; snf.quantized) is dequantized as it loads, into `dtype` (by default the
    checkpoint's, else bfloat16). A safetensors tensor the model takes whole as it is stored (its
    dtype, on the CPU) stays on the file's pages, as transformers keeps it: read when first used,
    private to the process (a write copies the page it touches; the folder never changes); with
    `mmap=False` every tensor is copied into memory of the model's own, so the folder's files may
    then change or go. A setting the spec cannot honour is a PretrainedError that names it; a
    checkpoint that does not fit is interop.CheckpointError.

    With `device_mesh` (under torchrun) the model is returned sharded by snf.parallelize (`tp_plan`,
    `tp_local` its plan= and local=), on the mesh's device type by default; a config the plan cannot
    shard at that mesh is refused before any weight is read. No rank holds the whole model: the
    meta model is sharded first (each parameter's placement, as parallelize gives it), and each rank
    reads only the entries it holds of each tensor (snf.parallel.local_runs), through the spec's
    mapping (`.T`, `split`, `join`, experts' keys: each key reads its own part). A tensor a mapping
    cannot read in part is read whole and sliced: a quantized release's (dequantized whole), a
    torch.save file's (memory-mapped: only the pages of the slice are touched). Over a ("dp", "tp")
    mesh each rank reads its "tp" slice, and FSDP2 then keeps its "dp" part of it."""
    from .api import load

    folder = local_folder(path)
    config_file = folder / CONFIG_FILE
    if not config_file.is_file():
        raise FileNotFoundError(f"{folder} is not a save_pretrained folder: it has no {CONFIG_FILE}")
    device = _device(device if device is not None or device_mesh is None else device_mesh.device_type)
    try:
        hf = json.loads(config_file.read_text(encoding="utf-8"), object_hook=_special_float)
    except (ValueError, RecursionError) as err:
        raise PretrainedError(f"{config_file} is not JSON ({type(err).__name__}: {err})") from None
    except OSError as err:
        raise PretrainedError(f"cannot read {config_file}: {err.strerror or err}") from None
    if not isinstance(hf, dict):
        raise PretrainedError(f"{config_file} holds a {type(hf).__name__}, not a JSON object")
    try:
        scheme = quantized.scheme_of(hf, str(config_file))
    except quantized.QuantizedError as err:
        raise PretrainedError(str(err)) from None
    if scheme is not None:  # how the file stores the weights, not the model: the spec reads the rest, and a save
        hf = {key: value for key, value in hf.items() if key != "quantization_config"}  # writes them plain
    dtype = _dtype(dtype) if dtype is not None else _saved_dtype(hf, config_file, scheme is not None)
    module = load(spec if spec is not None else spec_for(hf.get("model_type"), folder, hf.get("architectures")))
    config = config_from_hf(module, hf, str(config_file))
    if device_mesh is not None:
        from .parallel import check_shardable, data_parallel, local_runs, parallelize, tp_mesh
        check_shardable(module.Model, config, device_mesh)

    def held(key: str, tensor):  # what this rank holds of a tensor, once allocate has sharded the model
        return local_runs(model, key, tensor)

    def allocate() -> None:  # once every key, shape and dtype is checked on the meta device
        if device_mesh is not None:  # each parameter's placement, on the meta device: no rank holds the whole
            parallelize(model, tp_mesh(device_mesh), plan=tp_plan, local=tp_local)
        _allocate(model, dtype, device)
        if getattr(module, "RECOMPUTED_BUFFERS", ()):
            model.reset_parameters()  # the buffers the config decides; the checkpoint gives the rest

    try:
        with open_checkpoint(folder) as tensors:
            if scheme is not None:
                tensors = quantized.Dequantized(tensors, scheme, dtype)
            _check_layers(module, config, tensors, str(config_file))
            with torch.device("meta"), _NoInitOnMeta():  # built without memory
                model = module.Model(config)
            interop.load_opened(model, tensors, folder, "hf", before_copy=allocate, progress=f"loading {folder.name}",
                                keep=mmap, part_of=held if device_mesh is not None else None)
    except (ValueError, FileNotFoundError) as err:
        if isinstance(err, (PretrainedError, interop.CheckpointError)):
            raise
        raise PretrainedError(f"{folder}: {err}") from None
    model.loaded_from = LoadedFrom(str(folder.resolve()), hf, generation_config(folder, hf))
    if device_mesh is not None and device_mesh.ndim == 2:
        data_parallel(model, device_mesh)
    return model.eval()


@dataclass(frozen=True)
class LoadedFrom:
    """Where from_pretrained loaded a model from (its `loaded_from`): the folder, whose tokenizer and
    generation config save_pretrained copies beside a save; its config.json as read, which
    save_pretrained writes back, keeping what the spec lists as harmless; and the end and padding
    tokens generate uses by default."""

    folder: str
    config: dict
    generation_config: GenerationConfig


class _NoInitOnMeta(torch.overrides.TorchFunctionMode):
    """nn.init's functions (and random fills) skip meta tensors, whose values are nothing: every weight
    comes from the checkpoint, and initialising one on the meta device makes torch import its compiler
    (2 s of a load). A mode is the calling thread's own: another thread's model initialises as ever."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensor = args[0] if args else kwargs.get("tensor")  # nn.init passes it by name
        if (getattr(func, "__module__", None) == "torch.nn.init" or func in (torch.Tensor.normal_, torch.Tensor.uniform_)) \
                and isinstance(tensor, torch.Tensor) and tensor.is_meta:
            return tensor
        return func(*args, **kwargs)


def _allocate(model: torch.nn.Module, dtype: torch.dtype, device: torch.device) -> None:
    """The meta model's parameters and buffers made real, uninitialised, on `device`, the floating ones
    in `dtype`: Module.to_empty's work, without its empty_like of a meta tensor, which imports torch's
    symbolic shapes (sympy: half a second of a load)."""
    made: dict = {}  # a tensor two modules hold stays one
    for module in model.modules():
        for name, t in [*module.named_parameters(recurse=False, remove_duplicate=False),
                        *module.named_buffers(recurse=False, remove_duplicate=False)]:
            if id(t) not in made:
                kind = dtype if t.is_floating_point() else t.dtype
                if hasattr(t, "device_mesh"):  # a DTensor (a sharded load): this rank's part of it
                    from torch.distributed.tensor import DTensor
                    empty = DTensor.from_local(torch.empty(t.to_local().shape, dtype=kind, device=device),
                                               t.device_mesh, t.placements, run_check=False, shape=t.shape,
                                               stride=t.stride())
                else:
                    empty = torch.empty(t.shape, dtype=kind, device=device)
                made[id(t)] = torch.nn.Parameter(empty, t.requires_grad) if isinstance(t, torch.nn.Parameter) else empty
            setattr(module, name, made[id(t)])  # a buffer stays one, persistent or not, as nn.Module sets it


def generation_config(folder: Path, hf: dict) -> GenerationConfig:
    """The end and padding tokens generate uses by default: generation_config.json's where the folder
    has one, else config.json's (transformers' order). An integral float is its int, as transformers
    reads it; a negative id (old Llama configs' pad_token_id = -1) is left out; a value that is no
    token id at all is a PretrainedError naming the file and key."""
    files = dict.fromkeys(hf, CONFIG_FILE)
    settings = hf
    try:
        given = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
        if isinstance(given, dict):
            settings = {**hf, **given}
            files.update(dict.fromkeys(given, "generation_config.json"))
    except (OSError, ValueError, RecursionError):
        pass  # none, or not JSON: config.json's

    def tokens(key: str) -> list:
        value = settings.get(key)
        items = value if isinstance(value, list) else [] if value is None else [value]
        if not all(isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer()
                   for v in items):
            raise PretrainedError(f"{folder / files[key]}: {key} = {json.dumps(value)} is not a token id (an int) "
                                  "or a list of them")
        return [int(v) for v in items if v >= 0]
    pad = tokens("pad_token_id")
    return GenerationConfig(tuple(tokens("eos_token_id")), pad[0] if pad else None)



# transformers writes the floats JSON has no number for as {"__float__": "Infinity"} (Mamba2's
# time_step_limit is [0.0, inf]): read as the float, and written back the same way
_FLOAT_TAGS = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}


def _special_float(obj: dict):
    tag = obj.get("__float__") if len(obj) == 1 else None
    return _FLOAT_TAGS[tag] if isinstance(tag, str) and tag in _FLOAT_TAGS else obj


def _tagged_floats(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return {"__float__": "NaN" if math.isnan(obj) else "Infinity" if obj > 0 else "-Infinity"}
    if isinstance(obj, dict):
        return {k: _tagged_floats(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_tagged_floats(v) for v in obj]
    return obj


def _saved_dtype(hf: dict, config_file: Path, is_quantized: bool = False) -> torch.dtype:
    """The floating dtype config.json says the checkpoint holds (`dtype`, transformers 4's
    `torch_dtype`); where it names none, or names no floating dtype, float32 (bfloat16 for a
    quantized release, as transformers dequantizes it). One snfc cannot run (float8) is refused by
    name."""
    for key in ("dtype", "torch_dtype"):
        named = getattr(torch, str(hf.get(key)).removeprefix("torch."), None) if isinstance(hf.get(key), str) else None
        if isinstance(named, torch.dtype) and named.is_floating_point:
            if named not in RUNNABLE_DTYPES:
                raise PretrainedError(f"{config_file}: {key} = {json.dumps(hf[key])}: snfc cannot run a model in "
                                      f"{_dtype_name(named)}; load it in {_runnable()} (dtype=, snfc generate "
                                      "--dtype)")
            return named
    return torch.bfloat16 if is_quantized else torch.float32


def _dtype(dtype) -> torch.dtype:
    """from_pretrained's `dtype=`: one of RUNNABLE_DTYPES, or its name ("bfloat16")."""
    named = getattr(torch, dtype.removeprefix("torch."), None) if isinstance(dtype, str) else dtype
    if not isinstance(named, torch.dtype) or named not in RUNNABLE_DTYPES:
        raise PretrainedError(f"from_pretrained: dtype= must be a dtype snfc runs ({_runnable()}), as a torch.dtype "
                              f"or its name; got {dtype!r}")
    return named


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _runnable() -> str:
    return ", ".join(map(_dtype_name, RUNNABLE_DTYPES))


def local_folder(path) -> Path:
    """`path` as a folder on this machine (`~` expanded); FileNotFoundError where there is none. snfc
    reads local folders only: a name that is none is never looked up on the Hub (transformers asks
    the Hub for a name that is no folder, for a minute where the network is slow, and then speaks of
    the internet). A name shaped like a Hub repo id is told how to download it."""
    folder = Path(path).expanduser()
    if folder.is_dir():
        return folder
    if folder.exists():
        raise FileNotFoundError(f"{path} is a file, not a save_pretrained folder")
    hub = re.fullmatch(r"[\w.-]+/[\w.-]+", str(path)) and not str(path).startswith(".")
    raise FileNotFoundError(f"{path} does not exist" + (
        f" here (snfc reads local folders only: for the Hub's {path}, download it first, `hf download {path} "
        "--local-dir DIR`, and give DIR)" if hub else ""))


def _device(device) -> torch.device:
    """from_pretrained's `device=`: one this torch has (the CPU by default)."""
    try:
        where = torch.device(device if device is not None else "cpu")
    except (RuntimeError, TypeError, ValueError):
        raise PretrainedError(f"from_pretrained: device= must name a device (\"cpu\", \"cuda\", \"cuda:1\"), "
                              f"got {device!r}") from None
    count = {"cpu": 1, "meta": 1, "cuda": torch.cuda.device_count() if torch.cuda.is_available() else 0,
             "mps": int(torch.backends.mps.is_available())}.get(where.type)
    if count is None or (where.index or 0) >= count:
        raise PretrainedError(f"from_pretrained: device={device!r} is not here (this torch sees "
                              f"{count or 0} {where.type} device(s))")
    return where


def _check_layers(module, config, tensors, where: str) -> None:
    """Each layer loop's last layer is in the checkpoint (some weight of it, by any of its keys),
    before any layer is built: a config asking for 20,000 layers against weights of 2 is refused at
    once, not after building them. (A weight the config turns off is not told apart here: one
    present weight of the loop's last layer suffices.)"""
    params = module.CHECKPOINTS["hf"]["params"]
    loops: dict = {}  # the loop's module list -> (layer count, the keys of its last layer's weights)
    for name, p in module.spec_parameters(config).items():
        numbers = p.layer_numbers() if name in params else ()
        if numbers:
            count, keys = loops.setdefault(p.loop, (len(numbers), []))
            keys += source_keys(params[name], numbers[-1], config)
    for loop, (count, keys) in loops.items():
        if keys and not any(key in tensors for key in keys):
            raise PretrainedError(f"{where}: the config gives `{loop}` {count} layers, but the checkpoint has "
                                  f"no `{keys[0]}` (nor any other weight of layer {count - 1}): config.json "
                                  "does not describe these weights")


# ----------------------------------------------------------------------------- save_pretrained

def hf_state_dict(model: torch.nn.Module) -> dict:
    """The model's weights in the `checkpoint hf:` section's names: the inverse of each source
    (`.T` transposes back, the parts of a `split` are concatenated, or interleaved, an `a or b` writes `a`)."""
    module = interop.module_of(model)
    params = interop.checkpoint_formats(model)["hf"]["params"]
    table = module.spec_parameters(model.config)
    parts: dict = {}
    out: dict = {}
    config = model.config  # what keys' `{...}` fields read beside the layer and expert numbers
    recomputed = set(getattr(module, "RECOMPUTED_BUFFERS", ()))
    for name, tensor in interop.spec_state(model).items():
        if name not in params and name in recomputed:
            continue  # the config decides it: no checkpoint holds it
        source = params[name]
        if table[name].loop is None:
            unmap_tensor(source, tensor, None, out, parts, config)
        for i, layer in enumerate(table[name].layer_numbers()):
            unmap_tensor(source, tensor[i], layer, out, parts, config)  # the i-th layer that has it
    for (inner, layer, n, axis, interleaved), pieces in parts.items():
        if len(pieces) != n:
            raise PretrainedError(f"save_pretrained: only parts {sorted(pieces)} of {n} of `{show(inner)}` are mapped")
        unmap_tensor(inner, join_parts([pieces[i] for i in range(n)], axis, interleaved), layer, out, parts, config)
    return out


def save_pretrained(model: torch.nn.Module, folder) -> Path:
    """Write the model as transformers' `save_pretrained` does: config.json (`config_to_hf`) and
    model.safetensors in the `checkpoint hf:` names (`hf_state_dict`), which transformers'
    `from_pretrained` (and `snf.from_pretrained`) load, with the tokenizer and generation-config
    files of the folder the model was loaded from (`_companions`).

    Into an existing folder without losing it: every file is written beside its final name first,
    and renamed over it once all are written, config.json last, so that a save that fails or is
    interrupted while writing (a full disk) leaves the folder as it was. A shard index left by an
    earlier save (which would outlive the new model.safetensors) is removed with the shards it lists.

    A parallelized model (snf.parallelize, from_pretrained's device_mesh=) is saved whole, as one
    process would save it: every rank calls save_pretrained (it gathers each weight, whole_tensor),
    rank 0 writes the whole model's config and weights, and every rank returns once it has, or
    raises what failed there."""
    from .parallel import is_parallelized
    if is_parallelized(model):
        return _save_gathered(model, folder)
    config = config_to_hf(model)
    weights = hf_state_dict(model)
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise PretrainedError(f"save_pretrained: {folder} is a file; it must name a folder")
    companions = _companions(getattr(getattr(model, "loaded_from", None), "folder", None), folder)
    staged = {name: folder / f".{name}.partial" for name in (*companions, "model.safetensors", CONFIG_FILE)}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        interop.write_safetensors(weights, staged["model.safetensors"], {"format": "pt"})
        staged[CONFIG_FILE].write_text(json.dumps(_tagged_floats(config), indent=2, sort_keys=True) + "\n",
                                       encoding="utf-8")
        for name, source in companions.items():
            shutil.copyfile(source, staged[name])
        stale = _stale_shards(folder, staged)
        for name, path in staged.items():
            if name == CONFIG_FILE:
                for old in stale:
                    old.unlink(missing_ok=True)
            os.replace(path, folder / name)
    except BaseException as err:
        for path in staged.values():
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise PretrainedError(f"save_pretrained: cannot write {getattr(err, 'filename', None) or folder}: "
                                  f"{err.strerror or err}; the folder is as it was") from None
        raise
    return folder


def _save_gathered(model: torch.nn.Module, folder) -> Path:
    """save_pretrained of a parallelized model: its weights gathered one at a time (only rank 0 keeps
    them) into a plain model of the whole config on rank 0, which saves it; the outcome broadcast."""
    import torch.distributed as dist

    from .parallel import whole_config, whole_tensor
    rank0 = dist.get_rank() == 0
    state = {}
    for key, tensor in model.state_dict().items():
        whole = whole_tensor(model, key, tensor.detach())  # a collective: every rank takes part
        if rank0:
            state[key] = whole
    failed = None
    if rank0:
        try:
            with torch.device("meta"), _NoInitOnMeta():
                plain = interop.module_of(model).Model(whole_config(model.config))
            plain.load_state_dict(state, assign=True)
            for name, buffer in model.named_buffers():  # the ones no state dict holds: whole on every rank
                if name not in state:
                    owner, _, attr = name.rpartition(".")
                    plain.get_submodule(owner)._buffers[attr] = buffer
            plain.loaded_from = getattr(model, "loaded_from", None)
            save_pretrained(plain, folder)
        except BaseException as err:
            failed = err
    outcome = [None if failed is None else f"{type(failed).__name__}: {failed}"]
    dist.broadcast_object_list(outcome, src=0)
    if failed is not None:
        raise failed
    if outcome[0] is not None:
        raise PretrainedError(f"save_pretrained of a parallelized model: rank 0 failed ({outcome[0]})")
    return Path(folder)


# what a save_pretrained folder holds beside the weights and config.json that describes the model too:
# its tokenizer (files named tokenizer*, and the older formats' vocabularies) and generation settings
COMPANIONS = ("generation_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json", "vocab.txt",
              "merges.txt", "spiece.model", "sentencepiece.bpe.model")
COMPANION_PATTERNS = ("tokenizer*", "chat_template*")


def _companions(source, folder: Path) -> dict[str, Path]:
    """The tokenizer and generation-config files of the folder the model was loaded from, by name,
    to copy into `folder`, so that the saved folder works as the original did: transformers'
    pipelines and `generate` read them. None for a model not loaded from a folder, or saved back into
    its own. Only the folder's own files: a link to a file outside it (but for the hub cache's links
    into its repo's blobs) is refused by name, before anything is written, as its bytes are not the
    folder's to copy (a `tokenizer.model` linked to a private file would land in the save)."""
    if source is None or not Path(source).is_dir():
        return {}
    source = Path(source)
    with contextlib.suppress(OSError):
        if source.samefile(folder):
            return {}
    names = {p.name for pattern in COMPANION_PATTERNS for p in source.glob(pattern)}
    names |= {name for name in COMPANIONS if (source / name).exists()}
    out = {}
    for name in sorted(names):
        path = source / name
        if not path.is_file():
            continue
        if not _inside(path, source):
            raise PretrainedError(f"save_pretrained: {path} is a link to {path.resolve()}, outside the folder the "
                                  "model was loaded from; snfc copies only the folder's own files beside a save. "
                                  "If that file is the model's, put a copy of it in place of the link; nothing was "
                                  "written")
        out[name] = path
    return out


def _inside(path: Path, folder: Path) -> bool:
    """Whether `path`, its links followed, is a file of `folder`, or of the blobs of the hub cache's
    repo whose snapshot `folder` is (models--org--name/snapshots/REV/x links to ../../blobs/HASH)."""
    real, root = path.resolve(), folder.resolve()
    roots = [root] + [root.parent.parent / "blobs"] * (root.parent.name == "snapshots")
    return any(real.is_relative_to(r) for r in roots)


def _stale_shards(folder: Path, keep) -> list[Path]:
    """The shard indexes in `folder` and the shard files they list (in the folder), which would
    outlive a new model.safetensors; never one of the files named in `keep` (the save's own)."""
    stale = []
    for index in (SAFETENSORS_INDEX, TORCH_INDEX):
        if not (folder / index).is_file():
            continue
        try:
            files = set(json.loads((folder / index).read_text(encoding="utf-8"))["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            files = set()
        stale += [folder / name for name in sorted(f for f in files if isinstance(f, str))
                  if Path(name).name == name and name not in keep]
        stale.append(folder / index)
    return stale
