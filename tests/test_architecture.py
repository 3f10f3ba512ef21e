"""The package's shape: snf's import graph has no cycle, files and classes stay small enough to read
in one sitting, every subpackage ships in the wheel, and one module turns Lark's parse errors into
diagnostics.

Print the import graph with `python tests/test_architecture.py` (`--dot` for Graphviz:
`python tests/test_architecture.py --dot | dot -Tsvg -o imports.svg`).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SNF = REPO / "snf"

MAX_FILE_LINES = 600
MAX_CLASS_LINES = 400
# Files allowed past the limits, with the reason.
EXEMPT: dict = {}


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (packages by their __init__)."""
    out = {}
    for path in sorted(SNF.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that `name` imports, at module level or inside functions."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            # `from . import ir` imports the module snf.ir; `from .ir import Let` the module snf.ir
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports(name, path, known) for name, path in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    assert "snf.check" in graph and "snf.frontend.lark_common" in graph["snf.frontend.dsl"]  # the walk sees
    assert cycles(graph) == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles(graph))


def test_a_cycle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_data_flows_one_way_through_the_stages():
    """Front ends, checker, passes and code generation each import only earlier stages."""
    graph = import_graph()
    later = {"snf.frontend": ("snf.check", "snf.passes", "snf.codegen", "snf.compiler"),
             "snf.check": ("snf.frontend", "snf.passes", "snf.codegen", "snf.compiler"),
             "snf.ops": ("snf.check", "snf.frontend", "snf.passes", "snf.codegen", "snf.compiler"),
             "snf.ir": ("snf.frontend", "snf.check", "snf.ops", "snf.passes", "snf.codegen", "snf.compiler")}
    for module, deps in graph.items():
        for stage, forbidden in later.items():
            if module == stage or module.startswith(stage + "."):
                bad = [d for d in deps if any(d == f or d.startswith(f + ".") for f in forbidden)]
                assert not bad, f"{module} imports a later stage: {bad}"


def test_files_and_classes_are_small():
    too_big = []
    for path in sorted(SNF.rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel in EXEMPT:
            continue
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        if lines > MAX_FILE_LINES:
            too_big.append(f"{rel}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                too_big.append(f"{rel}: class {node.name} has {node.end_lineno - node.lineno + 1} lines")
    assert not too_big, too_big


def test_every_subpackage_ships_in_the_wheel():
    tomllib = __import__("tomllib")
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    packages = {".".join(p.parent.relative_to(REPO).parts) for p in SNF.rglob("__init__.py")}
    assert packages <= listed, f"add to pyproject.toml's packages: {sorted(packages - listed)}"


def test_one_module_reports_parse_errors():
    """Only the front ends' shared module handles Lark's parse errors, so both notations report alike."""
    handlers = []
    for path in sorted(SNF.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "lark.exceptions" and \
                    any(alias.name.startswith("Unexpected") for alias in node.names):
                handlers.append(path.relative_to(REPO).as_posix())
    assert handlers == ["snf/frontend/lark_common.py"]


def _operator_tables(source: str, name: str, ops: dict) -> list[str]:
    """The literals in `source` (the file `name`) that hold operator facts the registry's `OpDef`s
    give (`symbol`, `prec`, `scalar`): a dict pairing op names with their symbols (`{"add": "+"}`,
    `{"+": "add"}`), a dict keyed by symbols or op names that computes (`{"<=": a <= b}`,
    `{"div": _div}`), a collection of three or more operators' names (`{"add", "sub", "mul"}`)."""
    symbols = {op.symbol for op in ops.values() if op.symbol}
    named = {name for name, op in ops.items() if op.symbol}

    def text(node) -> str | None:
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None

    def strings(node) -> set:
        return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}

    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Dict):
            pairs = [(text(k), v) for k, v in zip(node.keys, node.values) if k is not None]
            spelled = [k for k, v in pairs if k in named and ops[k].symbol in strings(v)
                       or k in symbols and text(v) in named and ops[text(v)].symbol == k]
            computed = [k for k, v in pairs if (k in symbols or k in named) and text(v) is None]
            if len(spelled) >= 2 or len(computed) >= 2:
                found.append(f"{where}: {{{', '.join(repr(k) for k, _ in pairs[:4])}, ...}}")
        elif isinstance(node, (ast.Set, ast.Tuple, ast.List)):
            names = [text(e) for e in node.elts if text(e) in named]
            if len(names) >= 3:
                found.append(f"{where}: {names}")
    return found


def test_operator_facts_live_in_the_registry():
    """An operator's symbol, precedence and meaning on numbers are its `OpDef`'s (snf/ops/): no other
    module keeps a table of them. The generated runtime keeps its own comparison (a standalone
    module imports no snf)."""
    from snf.ops import all_ops
    ops = all_ops()
    tables = []
    for path in sorted(SNF.rglob("*.py")):
        rel = path.relative_to(SNF).as_posix()
        if rel.startswith(("ops/", "runtime/")):
            continue
        tables += _operator_tables(path.read_text(encoding="utf-8"), f"snf/{rel}", ops)
    assert not tables, "read these from the registry (snf.ops.by_symbol, OpDef.symbol/prec/scalar): " + \
        "; ".join(tables)


def test_an_operator_table_is_found():
    from snf.ops import all_ops
    source = ('A = {"add": ("+", 10), "mul": ("*", 20)}\nB = {"<=": a <= b, "<": a < b}\n'
              'C = {"+": "add", "-": "sub"}\nD = ("div", "mod", "pow")\nE = {">=": "<=", ">": "<"}\n'
              'F = ("add", "sub")\nG = {"div": _div, "mod": lambda a, b: a % b}\nH = {"eq": "ne", "ne": "eq"}\n')
    assert [t.split(":")[1] for t in _operator_tables(source, "probe.py", all_ops())] == ["1", "2", "3", "4", "7"]


def main(argv: list[str]) -> None:
    graph = import_graph()
    if "--dot" in argv:
        print("digraph snf {\n  rankdir=LR;\n  node [shape=box, fontname=Helvetica];")
        for module in sorted(graph):
            for dep in sorted(graph[module]):
                print(f'  "{module}" -> "{dep}";')
        print("}")
        return
    for module in sorted(graph):
        print(f"{module} -> {', '.join(sorted(graph[module])) or '-'}")


if __name__ == "__main__":
    main(sys.argv[1:])
