"""Quantized releases, dequantized as they load.

A release whose config.json has a `quantization_config` stores some tensors as a pair: codes and
their scales, which together stand for one plain tensor under transformers' name for it (MXFP4's
`gate_up_proj_blocks` and `gate_up_proj_scales` for `gate_up_proj`, FP8's `q_proj.weight` and
`q_proj.weight_scale_inv` for `q_proj.weight`). `Dequantized` shows a checkpoint with each pair as
that plain tensor, in the model's dtype, read one at a time: the spec's `checkpoint hf:` mapping
reads it as it reads an unquantized release, so a spec says nothing new to load a quantized one.

`FORMATS` holds the formats snfc reads, one entry each, by `quant_method`: how its pairs are named,
what shapes they must have, and the dequantization, whose values are transformers' bit for bit
(integrations/mxfp4.py, integrations/finegrained_fp8.py): the float32 product of a code and its
block's scale, rounded once to the model's dtype. Each entry's `quantize` writes a pair the other
way (the tests and benchmarks build release-shaped folders with it); snfc never saves quantized.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping

import torch

from .checkpoint_files import FLOAT8, MetaView

CHUNK = 1 << 22  # values dequantized at a time: the float32 temporaries stay 16 MB whatever the tensor


class QuantizedError(ValueError):
    """A quantization_config snfc cannot read, or quantized tensors that do not fit their format:
    the message names the setting or the keys."""


def _shape(t) -> list:
    return list(t.shape)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class Format:
    """One quantized format. A pair's scales key names the plain tensor (`plain_of`); `codes_key`
    and `scales_key` name the pair of a plain key. Subclasses give the rest."""

    method = ""  # config.json's quantization_config.quant_method
    settings_keys: tuple = ()  # the keys of quantization_config it reads, beside quant_method
    scales_suffix = ""

    def settings(self, config: dict, where: str) -> dict:
        """quantization_config's settings, checked: each key one this format reads, each value one
        it honours (QuantizedError naming it)."""
        unknown = sorted(set(config) - {"quant_method", *self.settings_keys})
        if unknown:
            raise QuantizedError(f"{where}: quantization_config." + ", quantization_config.".join(unknown)
                                 + f": snfc does not read {'this setting' if len(unknown) == 1 else 'these settings'}"
                                 f" of a {self.method} release")
        patterns = config.get("modules_to_not_convert") or []
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            raise QuantizedError(f"{where}: quantization_config.modules_to_not_convert = {json.dumps(patterns)}: "
                                 "expected a list of module names")
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as err:
                raise QuantizedError(f"{where}: quantization_config.modules_to_not_convert: {pattern!r} is not a "
                                     f"pattern transformers reads ({err})") from None
        return {"modules_to_not_convert": patterns}

    def plain_of(self, scales_key: str) -> str | None:
        return scales_key[:-len(self.scales_suffix)] if scales_key.endswith(self.scales_suffix) else None

    def scales_key(self, plain: str) -> str:
        return plain + self.scales_suffix

    def codes_key(self, plain: str) -> str:
        raise NotImplementedError

    def shape(self, plain: str, codes, scales, settings: dict) -> tuple:
        """The plain tensor's shape, from the pair's shapes and dtypes (meta tensors); QuantizedError
        naming the keys where they do not fit the format."""
        raise NotImplementedError

    def stray(self, key: str, tensor) -> str | None:
        """The plain key `key` would be the codes of (`tensor` its meta tensor), or None where it is no
        codes of this format's: codes without their scales are an error."""
        raise NotImplementedError

    def empty(self, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
        """A plain tensor to dequantize into, laid out as the codes are (so they are written in order)."""
        return torch.empty(shape, dtype=dtype)

    def dequantize(self, codes: torch.Tensor, scales: torch.Tensor, out: torch.Tensor, settings: dict) -> None:
        raise NotImplementedError

    def quantize(self, tensor: torch.Tensor, settings: dict) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)  # e2m1, by code


@functools.cache
def _mxfp4_tables() -> tuple[torch.Tensor, torch.Tensor]:
    """By byte: its two codes' values, the low nibble's first ([256, 2]); and the power of two an
    E8M0 exponent stands for, 2 ** (byte - 127), in float32 ([256]), but 2 ** 127 for 255: float32
    has no 2 ** 128, so the codes of those blocks are doubled first (ldexp keeps 0.5 * 2 ** 128 finite)."""
    lut = torch.tensor(FP4_VALUES)
    powers = torch.exp2((torch.arange(256) - 127).clamp(max=127).float())
    return torch.stack((lut.repeat(16), lut.repeat_interleave(16)), -1), powers


class Mxfp4(Format):
    """OCP MXFP4 (gpt-oss's experts): `X_blocks`, uint8 [E, rows, in/32, 16], two e2m1 codes a byte
    (the low nibble first), and `X_scales`, uint8 E8M0 exponents [E, rows, in/32], one per block of 32
    codes; they stand for `X` [E, in, rows], transformers' `x @ W` layout (the rows last)."""

    method = "mxfp4"
    settings_keys = ("modules_to_not_convert", "dequantize")
    scales_suffix = "_scales"

    def codes_key(self, plain: str) -> str:
        return plain + "_blocks"

    def shape(self, plain, codes, scales, settings):
        blocks, exps = self.codes_key(plain), self.scales_key(plain)
        if codes.dtype != torch.uint8 or scales.dtype != torch.uint8:
            raise QuantizedError(f"`{blocks}` ({_dtype_name(codes.dtype)}) and `{exps}` ({_dtype_name(scales.dtype)}) "
                                 "must both be uint8 (MXFP4 codes, two a byte, and E8M0 exponents)")
        if codes.dim() != 4 or codes.shape[-1] != 16:
            raise QuantizedError(f"`{blocks}` has shape {_shape(codes)}: MXFP4 blocks are [experts, rows, blocks, 16] "
                                 "(16 bytes: 32 codes a block)")
        if tuple(scales.shape) != tuple(codes.shape[:-1]):
            raise QuantizedError(f"`{exps}` has shape {_shape(scales)}, `{blocks}` {_shape(codes)}: one scale per "
                                 f"block of 32 codes is {_shape(codes)[:-1]}")
        experts, rows, count, _ = codes.shape
        return (experts, count * 32, rows)

    def stray(self, key, tensor):
        return key.removesuffix("_blocks") if key.endswith("_blocks") else None

    def empty(self, shape, dtype):
        experts, count, rows = shape
        return torch.empty(experts, rows, count, dtype=dtype).transpose(-1, -2)  # a row's values together

    def dequantize(self, codes, scales, out, settings):
        pairs, powers = _mxfp4_tables()
        experts, rows, count, _ = codes.shape
        by_row = out.transpose(-1, -2)  # [E, rows, in]: contiguous where `empty` made out
        step = max(1, CHUNK // (count * 32))
        for e in range(experts):
            for r in range(0, rows, step):
                b, exponents = codes[e, r:r + step], scales[e, r:r + step]
                values = pairs.index_select(0, b.reshape(-1).int()).view(*exponents.shape, 32)
                if (exponents == 255).any():  # (OCP's NaN; transformers reads it as 2 ** 128)
                    values.mul_(torch.where(exponents == 255, 2.0, 1.0).unsqueeze(-1))
                # code * 2 ** (byte - 127) is exact in float32 (two significant bits): rounded once into
                # out's dtype, as transformers' ldexp rounds it
                torch.mul(values, powers.index_select(0, exponents.reshape(-1).int()).view(*exponents.shape, 1),
                          out=by_row[e, r:r + step].unflatten(-1, (count, 32)))

    def quantize(self, tensor, settings):
        """[E, in, rows] as MXFP4: per block of 32 inputs of a row, the power of two that brings its
        largest value within e2m1's 6, and each value's nearest code."""
        w = tensor.detach().to(torch.float32).transpose(-1, -2).contiguous()
        groups = w.unflatten(-1, (w.shape[-1] // 32, 32))
        top = groups.abs().amax(-1, keepdim=True).clamp(min=2.0 ** -126)
        exponent = torch.ceil(torch.log2(top / 6.0)).clamp(-127, 127)
        magnitudes = torch.tensor(FP4_VALUES[:8])
        scaled = groups / torch.exp2(exponent)
        codes = torch.bucketize(scaled.abs(), (magnitudes[1:] + magnitudes[:-1]) / 2) + 8 * (scaled < 0)
        pairs = codes.to(torch.uint8).unflatten(-1, (16, 2))
        return pairs[..., 0] | (pairs[..., 1] << 4), (exponent.squeeze(-1) + 127).to(torch.uint8)


class Fp8(Format):
    """Block-scaled FP8 (DeepSeek-V3, the Qwen3 FP8 releases): a float8_e4m3fn `X` (`....weight`, or
    a fused experts' `gate_up_proj`) [..., rows, cols] beside `X_scale_inv` [..., ceil(rows / m),
    ceil(cols / n)], one float32 scale per `weight_block_size` [m, n] block (the blocks at the edges cut
    short where a size does not divide); uint8 scales are E8M0 exponents (`scale_fmt` "ue8m0")."""

    method = "fp8"
    settings_keys = ("modules_to_not_convert", "modules_to_convert", "activation_scheme", "weight_block_size",
                     "dequantize", "scale_fmt", "expert_dtype", "fmt")
    scales_suffix = "_scale_inv"
    HONOURED = {"activation_scheme": ("dynamic",), "fmt": ("e4m3",), "scale_fmt": ("float", "ue8m0"),
                "expert_dtype": ("fp8",), "modules_to_convert": ([],)}

    def settings(self, config, where):
        out = super().settings(config, where)
        for key, values in self.HONOURED.items():
            if config.get(key) is not None and config[key] not in values:
                raise QuantizedError(f"{where}: quantization_config.{key} = {json.dumps(config[key])}: snfc reads "
                                     f"fp8 releases with {key} " + " or ".join(map(json.dumps, values))
                                     + (" (static activation scales are not read)" if key == "activation_scheme"
                                        else ""))
        block = config.get("weight_block_size")
        if block is not None and not (isinstance(block, list) and len(block) == 2
                                      and all(type(n) is int and n > 0 for n in block)):
            raise QuantizedError(f"{where}: quantization_config.weight_block_size = {json.dumps(block)}: expected "
                                 "two positive ints, [rows, columns], or null (one scale per tensor)")
        return {**out, "block": tuple(block) if block is not None else None}

    def codes_key(self, plain):
        return plain

    def _block(self, shape, settings) -> tuple:
        return settings["block"] or tuple(shape[-2:])

    def shape(self, plain, codes, scales, settings):
        exps = self.scales_key(plain)
        if codes.dtype != torch.float8_e4m3fn:
            raise QuantizedError(f"`{plain}` is {_dtype_name(codes.dtype)} beside its `{exps}`: fp8 codes are "
                                 "float8_e4m3fn")
        if not (scales.dtype.is_floating_point and scales.dtype not in FLOAT8 or scales.dtype == torch.uint8):
            raise QuantizedError(f"`{exps}` is {_dtype_name(scales.dtype)}: fp8 scales are float32 (or uint8 E8M0)")
        if codes.dim() < 2:
            raise QuantizedError(f"`{plain}` has shape {_shape(codes)}: fp8 codes are a matrix (or a stack of them)")
        m, n = self._block(codes.shape, settings)
        *lead, rows, cols = codes.shape
        grid = [*lead, -(-rows // m), -(-cols // n)]
        if _shape(scales) != grid:
            raise QuantizedError(f"`{exps}` has shape {_shape(scales)}; `{plain}` {_shape(codes)} in blocks of "
                                 f"{[m, n]} has {grid} (the edge blocks rounded up)")
        return tuple(codes.shape)

    def stray(self, key, tensor):
        return key if tensor.dtype in FLOAT8 else None

    def dequantize(self, codes, scales, out, settings):
        m, n = self._block(codes.shape, settings)
        rows, cols = codes.shape[-2:]
        whole = cols // n * n  # the columns in whole blocks; the rest share the last block's scale
        codes, out = codes.reshape(-1, rows, cols), out.view(-1, rows, cols)
        # E8M0 scales as transformers' Fp8Dequantize reads them: 2 ** (byte - 127) in float32
        scales = scales.reshape(-1, *scales.shape[-2:])
        scales = torch.exp2(scales.float() - 127.0) if scales.dtype == torch.uint8 else scales.float()
        step = max(1, CHUNK // (m * cols)) * m  # whole blocks of rows at a time
        for i in range(codes.shape[0]):
            for r in range(0, rows, step):
                values, dest = codes[i, r:r + step].float(), out[i, r:r + step]
                grid = scales[i, r // m:(r + step) // m].repeat_interleave(m, 0)[:values.shape[0]]  # a scale a row
                # the float32 product, rounded once into out's dtype
                torch.mul(values[:, :whole].unflatten(1, (whole // n, n)), grid[:, :whole // n, None],
                          out=dest[:, :whole].unflatten(1, (whole // n, n)))
                torch.mul(values[:, whole:], grid[:, whole // n:], out=dest[:, whole:])

    def quantize(self, tensor, settings):
        """[..., rows, cols] as FP8: per block, the scale that brings its largest value to e4m3's 448."""
        m, n = self._block(tensor.shape, settings)
        rows, cols = tensor.shape[-2:]
        grid = (-(-rows // m), -(-cols // n))
        w = tensor.detach().to(torch.float32)
        padded = torch.nn.functional.pad(w, (0, grid[1] * n - cols, 0, grid[0] * m - rows))
        blocks = padded.unflatten(-1, (grid[1], n)).unflatten(-3, (grid[0], m))
        scale = (blocks.abs().amax((-3, -1)) / 448.0).clamp(min=2.0 ** -120)
        full = scale.repeat_interleave(m, -2)[..., :rows, :].repeat_interleave(n, -1)[..., :cols]
        return (w / full).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), scale


FORMATS: dict[str, Format] = {f.method: f for f in (Mxfp4(), Fp8())}


def scheme_of(hf: dict, where: str) -> tuple[Format, dict] | None:
    """The format and settings config.json's quantization_config names, or None for an unquantized
    folder; QuantizedError naming a method or setting snfc cannot read."""
    config = hf.get("quantization_config")
    if config is None:
        return None
    supported = " and ".join(f'"{m}"' for m in FORMATS)
    if not isinstance(config, dict):
        raise QuantizedError(f"{where}: quantization_config = {json.dumps(config)[:80]}: expected an object with a "
                             f"quant_method (snfc reads {supported} releases)")
    method = config.get("quant_method")
    if method not in FORMATS:
        held = "no quant_method" if method is None else f"quant_method = {json.dumps(method)}"
        raise QuantizedError(f"{where}: quantization_config has {held}: snfc reads {supported} releases, "
                             "dequantized as they load; dequantize this one with the tool that made it and save it "
                             "unquantized")
    return FORMATS[method], FORMATS[method].settings(config, where)


def _kept(module: str, patterns: list) -> str | None:
    """The pattern of modules_to_not_convert that names `module`, as transformers matches them: from
    the start to a module boundary, as a regex to one, or as a suffix."""
    for pattern in patterns:
        if re.match(rf"(?:{pattern})(?:(?<=\.)|(?=\.|$))", module) or module.endswith(pattern):
            return pattern
    return None


class Dequantized(Mapping):
    """A checkpoint (a lazy mapping of its tensors) through a quantized format: each pair shown as
    the plain tensor it stands for, in `dtype`, dequantized when it is read (straight into its
    parameter by `read_into`); every other tensor as it is. Every pair's keys, dtypes and shapes are
    checked as it is built, from the files' headers: a pair that does not fit, codes without scales,
    scales without codes, or codes in a module quantization_config keeps unquantized are a
    QuantizedError naming every such key."""

    def __init__(self, raw: Mapping, scheme: tuple[Format, dict], dtype: torch.dtype):
        self._raw, (self.format, self.settings), self.dtype = raw, scheme, dtype
        self.metadata = getattr(raw, "metadata", None)
        meta = MetaView(raw)
        fmt, problems = self.format, []
        self._pairs: dict = {}  # plain key -> the plain tensor's shape
        for key in raw:
            plain = fmt.plain_of(key)
            if plain is None:
                continue
            if fmt.codes_key(plain) not in raw:
                problems.append(f"`{key}` has no `{fmt.codes_key(plain)}` beside it to scale")
                continue
            try:
                self._pairs[plain] = fmt.shape(plain, meta[fmt.codes_key(plain)], meta[key], self.settings)
            except QuantizedError as err:
                problems.append(str(err))
                continue
            pattern = _kept(plain.rpartition(".")[0], self.settings["modules_to_not_convert"])
            if pattern is not None:
                problems.append(f"`{fmt.codes_key(plain)}` is {fmt.method}, but quantization_config."
                                f"modules_to_not_convert keeps its module unquantized ({pattern!r})")
        hidden = {k for plain in self._pairs for k in (fmt.codes_key(plain), fmt.scales_key(plain))}
        problems += [f"`{key}` has no `{fmt.scales_key(plain)}` beside it: {fmt.method} codes are read with their "
                     "scales" for key in raw if key not in hidden and fmt.plain_of(key) is None
                     and (plain := fmt.stray(key, meta[key])) is not None]
        if not problems and not self._pairs:
            problems.append(f"it holds no {fmt.method} tensor (no pair of codes and `..." + fmt.scales_suffix
                            + "`), as config.json's quantization_config says it does")
        if problems:
            raise QuantizedError(f"the checkpoint's {fmt.method} tensors do not fit their format:\n  "
                                 + "\n  ".join(problems))
        self._hidden = hidden - set(self._pairs)  # the pairs' keys, but for FP8's codes, named as the plain tensor
        self._keys = [k for k in raw if k not in self._hidden] + [p for p in self._pairs if p not in raw]
        self._last: tuple = (None, None)

    def __contains__(self, key) -> bool:
        return key in self._pairs or key in self._raw and key not in self._hidden

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __getitem__(self, key: str):
        if key not in self._pairs:
            if key not in self:
                raise KeyError(key)
            return self._raw[key]
        if self._last[0] != key:  # the pieces that read one tensor (gate and up of gate_up_proj) come in turn
            self._last = (None, None)
            out = self.format.empty(self._pairs[key], self.dtype)
            self._dequantize(key, out)
            self._last = (key, out)
        return self._last[1]

    def meta(self, key: str):
        if key in self._pairs:
            return torch.empty(self._pairs[key], dtype=self.dtype, device="meta")
        return MetaView(self._raw)[key]

    def read_into(self, key: str, out: torch.Tensor) -> bool:
        """Dequantize `key` straight into `out` where it is a contiguous CPU tensor of its shape in the
        model's dtype (on another device, the loader copies what `[key]` gives)."""
        if key not in self._pairs:
            read_into = getattr(self._raw, "read_into", None)
            return read_into is not None and read_into(key, out)
        if (out.dtype != self.dtype or tuple(out.shape) != self._pairs[key] or not out.is_contiguous()
                or out.device.type != "cpu"):
            return False
        self._dequantize(key, out)
        return True

    def mapped(self, key: str):
        """An unquantized tensor over its file's pages, to keep (a pair is made, never kept)."""
        return None if key in self._pairs else getattr(self._raw, "mapped", lambda key: None)(key)

    def _dequantize(self, plain: str, out: torch.Tensor) -> None:
        fmt = self.format
        scales = self._raw[fmt.scales_key(plain)].clone()  # small; the codes are read in place, last
        with torch.no_grad():
            fmt.dequantize(self._raw[fmt.codes_key(plain)], scales, out, self.settings)

    def notes(self, texts) -> list[str]:
        """For an error's lines that name a plain key of a pair: which tensors it is read from."""
        named = {t.split(" ")[0] for t in texts}
        fmt, meta = self.format, MetaView(self._raw)
        return [f"`{plain}` is dequantized ({fmt.method}) from `{fmt.codes_key(plain)}` "
                f"{_shape(meta[fmt.codes_key(plain)])} and `{fmt.scales_key(plain)}` "
                f"{_shape(meta[fmt.scales_key(plain)])}, which make it {list(shape)}"
                for plain, shape in self._pairs.items() if plain in named]
