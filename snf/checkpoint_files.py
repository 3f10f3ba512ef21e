"""Reading checkpoint files: a `.safetensors` file (its header parsed here, its data memory-mapped),
a `torch.save` state dict, or a `save_pretrained` folder of either (one file, or shards listed in an
index), as a lazy mapping of key -> tensor (`open_checkpoint`). `snf.interop` maps the tensors onto a
model; `snf.quantized` sees a quantized release's tensors through it.
"""

from __future__ import annotations

import contextlib
import json
import math
import mmap
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch

SAFETENSORS_INDEX, SAFETENSORS = "model.safetensors.index.json", "model.safetensors"
TORCH_INDEX, TORCH = "pytorch_model.bin.index.json", "pytorch_model.bin"


class _KeysOf(Mapping):
    """A mapping whose keys are those of `self._keys` (another mapping)."""

    _keys: Mapping

    def __contains__(self, key) -> bool:
        return key in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


class MetaView(_KeysOf):
    """A checkpoint's tensors as meta tensors of their shapes and dtypes, its other values as they
    are: shapes and transforms are checked on it without reading any tensor's data."""

    def __init__(self, sd: Mapping):
        self._keys = sd

    def __getitem__(self, key: str):
        if hasattr(self._keys, "meta"):
            return self._keys.meta(key)
        value = self._keys[key]
        return torch.empty(value.shape, dtype=value.dtype, device="meta") if isinstance(value, torch.Tensor) else value


class _LazyTensors(_KeysOf):
    """A checkpoint's tensors by key (`self._keys`: key -> its file); each is read from its file
    when asked for, and the last one read is kept (the pieces that read one tensor are loaded one
    after another), its file's pages handed back once the next is asked for. `metadata`: a single
    safetensors file's own (save_checkpoint writes the config there), else None."""

    def __init__(self, where: dict, open_file, metadata=None):
        self._keys, self._open, self._last = where, open_file, (None, None)
        self.metadata = metadata

    def __getitem__(self, key: str):
        if self._last[0] != key:
            done = self._last[0]
            self._last = (None, None)  # the previous tensor goes before the next is read
            if done is not None:
                getattr(self._file(done), "release", lambda key: None)(done)
            self._last = (key, self._file(key)[key])
        return self._last[1]

    def meta(self, key: str):
        file = self._file(key)
        return file.meta(key) if hasattr(file, "meta") else MetaView(file)[key]

    def read_into(self, key: str, out: torch.Tensor) -> bool:
        """Read `key` straight into `out` where its file can (a safetensors file's tensor of out's
        shape and dtype); False where it cannot, and `out` is untouched."""
        file = self._file(key)
        return hasattr(file, "read_into") and file.read_into(key, out)

    def part(self, key: str, index: tuple) -> torch.Tensor:
        """`self[key][index]`, where its file can without reading the rest of it (a safetensors file's,
        or a torch.save file's memory-mapped tensor, indexed: only the pages of the entries are read)."""
        file = self._file(key)
        return file.part(key, index) if hasattr(file, "part") else file[key][index]

    def mapped(self, key: str) -> torch.Tensor | None:
        """`key` over its file's pages, to keep (a safetensors file's); None where it cannot be."""
        file = self._file(key)
        return file.mapped(key) if hasattr(file, "mapped") else None

    def _file(self, key: str) -> Mapping:
        """The open file that holds `key`; ValueError where a shard index lists it in a file that lacks it."""
        file = self._open(self._keys[key])
        if key not in file:
            raise ValueError(f"the shard index lists `{key}` in {self._keys[key]}, which has no such tensor")
        return file


@contextlib.contextmanager
def open_checkpoint(path: Path) -> Iterator[Mapping]:
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
        if not isinstance(where, Path):
            yield _LazyTensors(where, open_file)
            return
        single = open_file(where)  # one file: its own keys, and a safetensors file's metadata
        yield _LazyTensors(dict.fromkeys(single.keys(), where), open_file, getattr(single, "metadata", None))


def _files_of(path: Path) -> dict | Path:
    """The file that holds each key (a folder's shard index), or the one file that holds them all.
    In a folder, transformers' order (5.23's modeling_utils): model.safetensors, its shard index,
    pytorch_model.bin, its shard index; the first there is the checkpoint, the others are ignored."""
    if not path.is_dir():
        return path
    for name in (SAFETENSORS, SAFETENSORS_INDEX, TORCH, TORCH_INDEX):
        if not (path / name).is_file():
            continue
        if name in (SAFETENSORS, TORCH):
            return path / name
        try:
            weight_map = json.loads((path / name).read_text(encoding="utf-8"))["weight_map"]
            return {key: _shard(path, name, file) for key, file in weight_map.items()}
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:
            raise ValueError(f"{path / name} is not a shard index ({type(err).__name__}: {err})") from None
    raise FileNotFoundError(f"{path} is a folder without a checkpoint: expected {SAFETENSORS_INDEX}, "
                            f"{SAFETENSORS}, {TORCH_INDEX} or {TORCH} in it")


def _shard(folder: Path, index: str, name) -> Path:
    """A shard file an index names: a relative path inside the folder (the hub's layout)."""
    if not isinstance(name, str) or not name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise ValueError(f"a shard must be a file name inside the folder, got {name!r}")
    return folder / name


def _open_file(file: Path, stack: contextlib.ExitStack) -> Mapping:
    """One checkpoint file, by its first bytes: safetensors (read lazily), or a torch.save state dict
    (memory-mapped when it is in the zip format). `stack` closes a safetensors file."""
    if not file.is_file():
        raise FileNotFoundError(f"no checkpoint file {file}")
    with open(file, "rb") as f:
        head = f.read(9)
    if len(head) == 9 and head[8:9] == b"{":  # 8-byte header length, then the JSON header
        opened = SafetensorsFile(file)
        stack.callback(opened.close)
        return opened
    if head[:2] == b"PK" or head[:1] == b"\x80":  # torch.save's zip format, or its legacy pickle
        try:
            data = torch.load(file, map_location="cpu", weights_only=True, mmap=head[:2] == b"PK")
        except Exception as err:
            raise ValueError(f"{file} is not a state dict that torch.load(weights_only=True) reads "
                             f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})") from None
        if not isinstance(data, Mapping):
            raise ValueError(f"{file} holds a {type(data).__name__}, not a state dict (a mapping of names to tensors)")
        return _state_dict_of(data)
    raise ValueError(f"{file} is not a checkpoint: expected a safetensors file or a torch.save state dict")


def _state_dict_of(data: Mapping) -> Mapping:
    """The state dict in what torch.load gave: the mapping itself, or a training checkpoint's under
    "model" (nanoGPT's train.py: beside the optimizer, model_args, iter_num). torch.compile's
    `_orig_mod.` prefix, which a compiled module's state dict puts on every key, is taken off. A
    state dict's values are tensors, so a mapping under "model" marks a training checkpoint, whatever
    else it holds (nanoGPT saves `best_val_loss` as a 0-d tensor)."""
    if isinstance(data.get("model"), Mapping):
        data = data["model"]
    prefix = "_orig_mod."
    if data and all(isinstance(k, str) and k.startswith(prefix) for k in data):
        data = {k[len(prefix):]: v for k, v in data.items()}
    return data


_SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                       "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,  # quantized releases' codes
                       "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                       "U8": torch.uint8, "BOOL": torch.bool}
FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)  # codes that mean nothing without their scales


class SafetensorsFile(Mapping):
    """An open safetensors file as a mapping: its header read once and its data memory-mapped, `[key]`
    a tensor over the mapping (nothing copied), `read_into` one copy of it into a tensor of its shape
    and dtype. The mapping is private (a write to a tensor never reaches the file), and the pages a
    tensor was read through are handed back once it is copied (`release`): the file's pages do not
    stay in the process's memory, so loading peaks at about the weights."""

    def __init__(self, file: Path):
        self._file = file
        with open(file, "rb") as f:
            try:
                size = os.fstat(f.fileno()).st_size
                length = int.from_bytes(f.read(8), "little")
                if not 2 <= length <= size - 8:
                    raise ValueError(f"a header of {length} bytes in a file of {size}")
                header = json.loads(f.read(length))
                if not isinstance(header, dict):
                    raise ValueError("the header is no JSON object")
                self.metadata = header.pop("__metadata__", None)
                self._start = 8 + length
                self._entries = {key: _entry(key, value, size - self._start) for key, value in header.items()}
            except (ValueError, TypeError, KeyError, RecursionError) as err:
                raise ValueError(f"{file} is not a readable safetensors file ({err})") from None
            # the tensors over the mapping keep it alive; it is unmapped when the last of them goes
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        self._keys = list(self._entries)

    def close(self) -> None:
        self._map = None

    def __contains__(self, key) -> bool:  # Mapping's would read the tensor
        return key in self._entries

    def __getitem__(self, key: str) -> torch.Tensor:
        return self._tensor(key)

    def _tensor(self, key: str) -> torch.Tensor:
        dtype, shape, begin, end = self._known(key)
        if begin == end:
            return torch.empty(shape, dtype=dtype)
        offset = self._start + begin
        if offset % dtype.itemsize:  # a tensor's data where its type cannot be read in place: copied
            raw = torch.frombuffer(self._map, dtype=torch.uint8, count=end - begin, offset=offset)
            return raw.clone().view(dtype).view(shape)
        return torch.frombuffer(self._map, dtype=dtype, count=math.prod(shape), offset=offset).view(shape)

    def read_into(self, key: str, out: torch.Tensor) -> bool:
        """Copy `key` straight into `out` where it is a tensor of its shape and dtype."""
        dtype, shape, _, _ = self._known(key)
        if out.dtype != dtype or tuple(out.shape) != shape:
            return False
        out.copy_(self._tensor(key))
        self.release(key)
        return True

    def part(self, key: str, index: tuple) -> torch.Tensor:
        """A copy of the entries `index` (a slice per leading axis) of `key`: only their bytes are read
        from the file (a rank's slice of a sharded load), and the pages handed back."""
        out = self._tensor(key)[index].clone()
        self.release(key)
        return out

    def mapped(self, key: str) -> torch.Tensor | None:
        """`key` over the file's pages, for a model to keep as its own tensor: nothing is read until it
        is used, and a write copies the page it touches (the file never changes). None where its data
        cannot be read in place."""
        dtype, _, begin, end = self._known(key)
        return None if begin == end or (self._start + begin) % dtype.itemsize else self._tensor(key)

    def release(self, key: str) -> None:
        """Hand back the pages `key` was read through: the file's bytes stay on disk (and in the page
        cache), not in this process. A tensor over them reads them again from the file if it is read (what
        was written into one is lost: the loader only reads them)."""
        _, _, begin, end = self._entries[key]
        first = (self._start + begin) // mmap.PAGESIZE * mmap.PAGESIZE
        if self._map is not None and end > begin and hasattr(self._map, "madvise"):
            self._map.madvise(mmap.MADV_DONTNEED, first, self._start + end - first)

    def meta(self, key: str) -> torch.Tensor:
        """The tensor's shape and dtype, from the file's header: no data is read."""
        dtype, shape, _, _ = self._known(key)
        return torch.empty(shape, dtype=dtype, device="meta")

    def _known(self, key: str) -> tuple:
        dtype, shape, begin, end = self._entries[key]
        if dtype not in _SAFETENSORS_DTYPES:
            raise ValueError(f"`{key}` is a {dtype} tensor, which snfc does not load")
        return _SAFETENSORS_DTYPES[dtype], shape, begin, end

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def _entry(key: str, value, room: int) -> tuple:
    """(dtype name, shape, begin, end) of a header entry, checked against the data's `room` bytes."""
    dtype, shape, (begin, end) = value["dtype"], tuple(value["shape"]), value["data_offsets"]
    if not all(isinstance(n, int) and n >= 0 for n in (*shape, begin, end)) or not begin <= end <= room:
        raise ValueError(f"`{key}` has a bad shape or data offsets")
    if dtype in _SAFETENSORS_DTYPES:
        count = math.prod(shape)
        if (end - begin) != count * _SAFETENSORS_DTYPES[dtype].itemsize:
            raise ValueError(f"`{key}`'s {end - begin} bytes are not a {dtype} tensor of shape {list(shape)}")
    return dtype, shape, begin, end
