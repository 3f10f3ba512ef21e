"""The Python API: `snf.load(path)` compiles a spec in process and imports it."""

from __future__ import annotations

import linecache
import sys
import types
from pathlib import Path

from .compiler import analyze, generate_source
from .diagnostics import SpecError
from .source import Source

_CACHE: dict[str, types.ModuleType] = {}


def load(path: str | Path) -> types.ModuleType:
    """Compile the spec at `path` and return the imported module (`Config`, `Model`).

    Modules are cached by the spec's sha256, so loading an unchanged spec twice returns the
    same module. Raises `SpecError` (with every diagnostic) when the spec has errors.
    """
    source = Source.read(path)
    key = source.sha256
    if key in _CACHE:
        return _CACHE[key]
    result = analyze(source)
    if not result.ok:
        raise SpecError(result.diagnostics, {source.path: source})
    code = generate_source(result, str(path))
    name = f"snf_generated.{result.model.name}_{key[:12]}"
    filename = f"<snfc {Path(path).name} {key[:12]}>"
    module = types.ModuleType(name)
    module.__file__ = filename
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    sys.modules[name] = module  # interop and pickling find the module through the model's class
    exec(compile(code, filename, "exec"), module.__dict__)
    _CACHE[key] = module
    return module
