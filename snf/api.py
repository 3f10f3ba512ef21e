"""The Python API: `snf.load(path)` compiles a spec in process and imports it."""

from __future__ import annotations

import copyreg
import linecache
import sys
import types
from pathlib import Path

from . import spec_cache
from .source import Source

_CACHE: dict[str, types.ModuleType] = {}
_PACKAGE = "snf_generated"


def load(path: str | Path) -> types.ModuleType:
    """Compile the spec at `path` and return the imported module (`Config`, `Model`).

    Modules are cached by the spec's sha256, so loading an unchanged spec twice returns the
    same module, and the code compiling it produces is kept in the user's cache folder
    (snf/spec_cache.py), so another process loading it does not compile it again. Raises
    `SpecError` (with every diagnostic) when the spec has errors.
    Instances of its classes pickle (and `torch.save`) with the spec's text, so that
    unpickling, in this process or another, compiles the spec again (once) instead of importing
    a module that exists only here.
    """
    return _load(Source.read(path), str(path))


def _load(source: Source, path: str, key: str | None = None) -> types.ModuleType:
    key = key or source.sha256
    if key in _CACHE:
        return _CACHE[key]
    model_name, code = _compiled(source, path)
    name = f"{_PACKAGE}.{model_name}_{key[:12]}"
    filename = f"<snfc {Path(path).name} {key[:12]}>"
    module = types.ModuleType(name)
    module.__file__ = filename
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    # importable by name (interop finds the module through the model's class; pickle finds its
    # functions, such as hooks, by name), once the package above it exists
    package = sys.modules.setdefault(_PACKAGE, types.ModuleType(_PACKAGE, "modules compiled by snf.load"))
    package.__path__ = []
    sys.modules[name] = module
    setattr(package, name.rpartition(".")[2], module)
    exec(compile(code, filename, "exec"), module.__dict__)
    for value in vars(module).values():
        if isinstance(value, type) and value.__module__ == name:
            copyreg.pickle(value, _Reducer(source.text, path, key, value.__qualname__))
    _CACHE[key] = module
    return module


def _compiled(source: Source, path: str) -> tuple[str, str]:
    """The spec's model name and its module's code: kept from a process that compiled it before, else
    compiled now (and kept). A spec with errors is never kept: it raises SpecError each time."""
    kept = spec_cache.get("module", (path, source.text))
    if kept is not None and isinstance(kept.get("name"), str) and isinstance(kept.get("code"), str):
        return kept["name"], kept["code"]
    from .compiler import analyze, generate_source  # the compiler, imported only where a spec is compiled
    from .diagnostics import SpecError
    result = analyze(source)
    if not result.ok:
        raise SpecError(result.diagnostics, {source.path: source})
    code = generate_source(result, path)
    spec_cache.put("module", (path, source.text), {"name": result.model.name, "code": code})
    return result.model.name, code


class _Reducer:
    """Pickles an instance of a class of a loaded spec as: compile the spec (cached by its
    sha256), then rebuild the instance from that module's class as pickle would by default."""

    def __init__(self, text: str, path: str, key: str, qualname: str):
        self.text, self.path, self.key, self.qualname = text, path, key, qualname

    def __call__(self, obj):
        func, args, *rest = obj.__reduce_ex__(2)  # (copyreg.__newobj__, (cls, *args), state, ...)
        if func is not copyreg.__newobj__:
            raise TypeError(f"cannot pickle {type(obj).__qualname__}: unexpected reduction {func!r}")
        return (_rebuild, (self.text, self.path, self.key, self.qualname, args[1:]), *rest)


def _rebuild(text: str, path: str, key: str, qualname: str, args: tuple):
    cls = getattr(_load(Source.from_text(path, text), path, key), qualname)
    return cls.__new__(cls, *args)
