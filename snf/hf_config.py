"""transformers' config.json and a spec's Config, through the spec's `config hf:` section
(docs/language.md 7.1): which bundled spec reads a model_type (`bundled_specs`, `spec_for`), the Config
a config.json gives (`config_from_hf`) and the config.json a Config writes back (`config_to_hf`).
snf.pretrained reads and writes whole folders with them. The section is data (the generated module's
`CHECKPOINTS["hf"]["config"]`), evaluated here (snf.config_mapping), never as code. Every key config.json
holds must be read, required (an `assert`) or listed as harmless by the spec: nothing is silently
ignored.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from .config_mapping import ConfigEval, config_keys, invert, put, section_keys, show, unknown_keys, written_key
from .interop import module_of

CONFIG_FILE = "config.json"


class PretrainedError(ValueError):
    """A `save_pretrained` folder the spec cannot honour: no spec for its model_type, a config.json
    setting the spec does not map or requires otherwise, or a value it cannot write back. The
    message names the setting."""


# ----------------------------------------------------------------------------- bundled specs

@functools.cache
def _claims() -> list[tuple[str, tuple, Path]]:
    """(model_type, the architectures the section writes back, spec) for each bundled spec whose
    `config hf:` section requires a model_type (`assert hf.model_type == "..."`), from the checked
    specs shipped with snfc; kept in the user's cache folder (snf/spec_cache.py), so that only the
    first process checks them all."""
    from . import spec_cache
    from .resources import resource_dir
    from .source import Source

    sources = {path: Source.read(path) for path in sorted(resource_dir("specs").glob("*.snf"))}
    made_from = tuple(f"{path.name}\0{source.sha256}" for path, source in sources.items())
    kept = spec_cache.get("claims", made_from)
    try:
        return [(model_type, tuple(architectures), resource_dir("specs") / name)
                for model_type, architectures, name in kept["claims"]]
    except (TypeError, KeyError, ValueError):  # none kept, or not this shape: made again
        claims = [claim for path, source in sources.items() for claim in _claims_of(path, source)]
    spec_cache.put("claims", made_from, {"claims": [(t, list(a), path.name) for t, a, path in claims]})
    return claims


def _claims_of(path: Path, source) -> list[tuple[str, tuple, Path]]:
    from .compiler import analyze
    from .config_mapping import encode_config_section

    result = analyze(source)
    if not (result.ok and any(e.fmt == "hf" for e in result.model.config_maps)):
        return []
    section = encode_config_section(result.model, "hf")
    written = section["writes"].get("architectures", ("list", ()))
    architectures = tuple(v[1] for v in written[1] if v[0] == "const") if written[0] == "list" else ()
    return [(model_type, architectures, path) for model_type in _model_types(section)]


def _model_types(section: dict) -> list:
    """The model_type a `config hf:` section requires (`assert hf.model_type == "..."`), as a list."""
    return [test[3][1] for test, _ in section["asserts"]
            if test[:3] == ("cmp", "==", ("key", "model_type")) and test[3][0] == "const"]


def bundled_specs() -> dict[str, Path]:
    """model_type -> the bundled spec whose `config hf:` section requires it (the first, by file
    name, where several do: `spec_for` chooses among them by architecture)."""
    out: dict[str, Path] = {}
    for model_type, _, path in _claims():
        out.setdefault(model_type, path)
    return out


def spec_for(model_type, folder: Path, architectures=None) -> Path:
    """The bundled spec for a model_type; where several claim it (T5: `t5.snf` for
    T5ForConditionalGeneration, `t5_encoder.snf` for T5EncoderModel), the one whose section writes
    config.json's first architecture back."""
    specs = bundled_specs()
    if not isinstance(model_type, str) or model_type not in specs:
        raise PretrainedError(f"{folder / CONFIG_FILE}: no bundled spec for model_type {model_type!r}; snfc bundles "
                              + ", ".join(f"{t!r} ({p.name})" for t, p in sorted(specs.items()))
                              + ". Pass spec= a spec with `checkpoint hf:` and `config hf:` sections")
    first = architectures[0] if isinstance(architectures, list) and architectures else None
    return next((path for t, written, path in _claims() if t == model_type and first in written), specs[model_type])


# ----------------------------------------------------------------------------- reading `config hf:`

def _section(module, where: str) -> dict:
    section = getattr(module, "CHECKPOINTS", {}).get("hf", {})
    if "config" not in section:
        raise PretrainedError(f"{where}: the spec {_spec_name(module)} has no `config hf:` section (with "
                              "`checkpoint hf:`), so it cannot read or write a transformers config.json")
    return section


def config_from_hf(module, hf: dict, where: str = "config.json"):
    """The spec's Config for a transformers config.json (a dict), through its `config hf:` section;
    PretrainedError names each setting the spec cannot honour."""
    section = _section(module, where)["config"]
    _check_family(module, section, hf, where)
    where = f"{where} (for {_spec_name(module)})"
    fields: dict = {}
    ev = ConfigEval(hf, fields, where, PretrainedError,
                    sources={field: config_keys(source) for field, source in section["reads"].items()})
    for field, source in section["reads"].items():
        fields[field] = ev.value(source)
    try:
        config = module.Config(**fields)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError) as err:
        named = [f for f in fields if re.search(rf"\b{re.escape(f)}\b", str(err)) and ev.sources[f]]
        raise PretrainedError(f"{where}: config.json gives a Config the spec refuses ("
                              + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + f"): {err}"
                              + "".join(f"\n  {ev.settings(('name', f))}" for f in named)) from None
    ev.names = config
    problems = []
    for test, message in section["asserts"]:
        if not ev.value(test):
            why = f" ({message})" if message else ""
            problems.append(f"{ev.settings(test)}: the spec requires `{show(test)}`{why}")
    problems += [f"{key} = {json.dumps(value)}: the spec does not map it"
                 for key, value in unknown_keys(hf, section_keys(section))]
    if problems:
        raise PretrainedError(f"{where}: settings the spec cannot honour:\n  " + "\n  ".join(problems))
    return config


def _spec_name(module) -> str:
    return Path(getattr(module, "SPEC", {}).get("path", "?")).name


def _check_family(module, section: dict, hf: dict, where: str) -> None:
    """A folder of another model_type than the spec reads is refused as that, before any setting is
    read (a gpt2 folder read with llama3.snf lacks llama's keys first), naming the specs that fit."""
    wanted = _model_types(section)
    given = hf.get("model_type")
    if not wanted or given in wanted:
        return
    held = (f"a {given} model" if isinstance(given, str) else "no model_type" if given is None
            else f"model_type {json.dumps(given)}")
    fits = [path.name for model_type, _, path in _claims() if model_type == given]
    raise PretrainedError(f"{where}: this folder holds {held}; {_spec_name(module)} reads {wanted[0]} folders "
                          f"(model_type \"{wanted[0]}\"). "
                          + (f"For {given}, use {' or '.join(fits)} (or leave spec= out)" if fits
                             else "snfc bundles no spec for it: give a spec whose `config hf:` section reads it"))


# ----------------------------------------------------------------------------- writing `config hf:` back

def config_to_hf(model) -> dict:
    """The transformers config.json for a generated model's Config: the inverse of the `config hf:` section,
    over the config.json the model was loaded from (`model.loaded_from.config`, which from_pretrained keeps),
    so that the keys the spec lists as harmless (`_ <-`: token ids, generation settings) keep their
    values. Each field read from a key (`f <- hf.k`, with `or` defaults, or through `match`) is
    written to that key; a field computed from other fields only is not written (reading back
    computes it again); each `assert hf.k == value` writes the value (but null, which reads as
    absent); `hf.k <- value` entries are written as they say, last (a None value leaves the key
    out, or null where the file has it null). A read or an assert that the kept config.json already
    satisfies is left as it is, so a loaded model writes back the file it came from, key for key. Reading the result back must give
    the same Config (checked)."""
    module = module_of(model)
    where = f"save_pretrained({_spec_name(module)})"
    section = _section(module, where)["config"]
    config = model.config
    ev = ConfigEval({}, config, where, PretrainedError)
    kept = getattr(getattr(model, "loaded_from", None), "config", None)
    out: dict = json.loads(json.dumps(kept)) if isinstance(kept, dict) else {}
    kept_ev = ConfigEval(out, config, where, PretrainedError)
    for field, source in section["reads"].items():
        value = getattr(config, field)
        if _gives(kept_ev, source, value):
            continue  # what was read still reads as this value: keep it as it was written
        if not invert(source, value, out) and written_key(source) is not None:
            raise PretrainedError(f"{where}: no value of `{show(source)}` gives {field} = {value!r}")
    for test, _ in section["asserts"]:
        if (test[:2] == ("cmp", "==") and not config_keys(test[3]) and ev.value(test[3]) is not None
                and not _gives(kept_ev, test, True)):
            invert(test[2], ev.value(test[3]), out)  # null: as if absent
    for key, value in section["writes"].items():
        value = ev.value(value)
        if value is not None or not _null(out, key):  # None leaves the key out; a null the file has stays
            put(out, key, value)
    if "dtype" in section_keys(section):  # what transformers loads it in, where the spec reads the key
        out["dtype"] = str(next(iter(model.parameters())).dtype).removeprefix("torch.")
    back = config_from_hf(module, out, where)
    if back != config:
        raise PretrainedError(f"{where}: the config.json written back reads as {back}, not {config}")
    return out


def _null(out: dict, key: str) -> bool:
    """Whether `key` (into nested objects) is in `out` with a null value, which reads as absent."""
    *outer, last = key.split(".")
    for part in outer:
        out = out.get(part)
        if not isinstance(out, dict):
            return False
    return last in out and out[last] is None


def _gives(ev: ConfigEval, source, value) -> bool:
    """Whether `source` already reads as `value` (of the same type) from the config being written."""
    try:
        got = ev(source)
    except PretrainedError:
        return False
    if isinstance(value, tuple) and isinstance(got, list):  # a list field holds a tuple
        got = tuple(got)
    return type(got) is type(value) and got == value
