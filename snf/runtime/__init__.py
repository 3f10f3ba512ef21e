"""The runtime of generated modules, as an importable package, and what copies it into them.

`compiling.py` holds the compile machinery: the decorators of a generated module's classes
(`_hot_path`, `_by_compile_unit`) and the unit they make (`_CompiledUnit`), which a standalone module
has before its classes (`DECORATORS`: they wrap them as they are defined), and what the unit calls;
`policy.py`, when a unit compiles where SNF_COMPILE leaves it to the unit. What the model
calls as it runs is in `checks.py` (of the config, the inputs, the dims), `writes.py` (in place, into
caches, at a decode step's position), `attention.py`, `rope.py`, `experts.py`,
`recurrent.py` (with `kernels.py`, the libraries' kernels it runs on CUDA where they are installed)
and `loss.py`; `generate.py` is a decoder's generate; `tables.py` holds the row types of the module's
tables. A generated module imports the names its code calls (`imports`) after checking that this
runtime is the one it was generated for (`_require_runtime(ABI)`). A standalone one (`snfc compile --standalone`) has them copied in
instead, with the ones those call, each with the comment lines right above it, in the order they
have here (`copy`), but no compile policy: the unit reads policy.py's `_Payoff` through its module's
globals, not by name, so a standalone module's units compile where SNF_COMPILE=1 (or
generate(compile=True)) asks, never by themselves. What a module calls is read from
its text, so no stage keeps a list of the helpers an op needs. Only the standard library is imported
here: `snf.runtime` never pulls in the compiler.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

from ..version import __version__

# The runtime's interface version, which generated modules check as they are imported: raise it when
# a helper's name, signature or meaning changes in a way modules generated before cannot use.
# 2: the losses moved to snf.runtime.loss; 3: generate(compile=) (_decoding) and one generate at a time per model
# (_start_generate); 4: a decoder's generate is snf.runtime.generate._generate (end tokens, padded batches);
# 5: Config checks as a table (_check_config), the compile wiring as decorators, attention and RoPE in
# attention.py and rope.py, _latent_attention; 6: _Generation(buffer_axes=): recurrent states in buffers
# written in place; 7: helpers.py split into checks.py and writes.py, spec_parameters rows end with the
# piece's shape and dtype (snf.interop reads them); 8: generate's state passed, not set on the model:
# forward takes `decode=` (a decode step's _DecodeState, now in writes.py) and `encoded=` (an
# encoder-decoder's values), the decorators make a _CompiledUnit, _check_fields is in checks.py, and
# nothing locks a model; 9: spec_parameters' rows are _SpecParameter (tables.py), read by field name, with
# the layer loop each per-layer parameter is in
ABI = 9

# The files a generated module imports from, in the order a standalone module holds them; not policy.py,
# which only compiling.py reads (through its globals: see above).
PARTS = ("compiling", "checks", "writes", "attention", "rope", "generate", "experts", "kernels", "recurrent", "loss",
         "tables")

# What a module's classes need as they are defined: a standalone module holds these before them, the rest
# of the runtime after them.
DECORATORS = frozenset({"_hot_path", "_by_compile_unit", "_CompiledUnit"})


@dataclass(frozen=True)
class Definition:
    name: str
    part: str  # the file it is in
    source: str  # its text, with the comment lines right above it
    calls: frozenset  # the names of other definitions it reads


@functools.lru_cache(maxsize=None)
def definitions() -> tuple[Definition, ...]:
    """Every top-level def, class and assignment of the runtime files, in order."""
    found = []
    for part in PARTS:
        text = (Path(__file__).parent / f"{part}.py").read_text(encoding="utf-8")
        lines = text.splitlines(keepends=True)
        for node in ast.parse(text).body:
            names = _defined(node)
            if not names:
                continue
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())]) - 1
            while first > 0 and lines[first - 1].startswith("#"):
                first -= 1
            source = "".join(lines[first:node.end_lineno])
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            found += [Definition(name, part, source, frozenset(used - {name})) for name in names]
    return tuple(found)


def _defined(node) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [t.id for t in targets if isinstance(t, ast.Name)]
    return []


def recurrent_kernels() -> dict:
    """Which implementation the last call of each recurrent op ran, by op name: "torch" or a
    library's kernel with its version (snf/runtime/kernels.py); empty before any ran. Imports torch."""
    from .kernels import recurrent_kernels as ran
    return ran()


def compile_mode() -> str:
    """How generated modules compile as this process is set: "never", "always" or "auto" (SNF_COMPILE;
    docs/language.md 10); a ValueError names a setting it does not know. Imports torch."""
    from .compiling import _compile_mode
    return _compile_mode()


def _require_runtime(abi: int, module: str = "a generated module") -> None:
    """The first call of a generated module: refuse, as it is imported, a runtime other than the
    one it was generated for, rather than fail later on a helper that changed."""
    if abi != ABI:
        raise ImportError(f"{module} was generated for snf runtime ABI {abi}, but the installed snf "
                          f"{__version__} has runtime ABI {ABI}: regenerate it with this snfc, or "
                          "compile it with `snfc compile --standalone` (a file that needs only torch)")


def called(code: str) -> frozenset:
    """The definitions the Python `code` itself names (what a generated module imports); a name in a
    comment or a string is not one."""
    by_name = {d.name for d in definitions()}
    return frozenset(n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name) and n.id in by_name)


def needed(code: str) -> frozenset:
    """The definitions `code` calls, and the ones those call."""
    by_name = {d.name: d for d in definitions()}
    todo = list(called(code))
    seen: set = set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += [n for n in by_name[name].calls if n in by_name]
    return frozenset(seen)


def copy(*parts: str, names: frozenset) -> str:
    """The text of the named definitions of the runtime files `parts`, in their order, two blank lines
    apart."""
    sources = [d.source for p in parts for d in definitions() if d.part == p and d.name in names]
    return "\n\n".join(dict.fromkeys(sources)).rstrip("\n")  # an assignment of two names once


def imports(names: frozenset, limit: int) -> list[str]:
    """`from snf.runtime.<part> import ...` of the named definitions, one statement per file, the
    names sorted; in brackets when over `limit` characters (for codegen's wrap pass to break)."""
    lines = []
    for part in PARTS:
        mine = ", ".join(sorted({d.name for d in definitions() if d.part == part and d.name in names}))
        if mine:
            line = f"from {__name__}.{part} import {mine}"
            lines.append(line if len(line) <= limit else f"from {__name__}.{part} import ({mine})")
    return lines
