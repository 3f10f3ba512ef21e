"""`snfc`: check, compile, ir, stats, graph, explain. Exit 0 clean, 1 spec errors (or a path or setting
snfc cannot use), 2 internal error."""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import sys
from pathlib import Path

from .diagnostics import CODES, Diagnostic, printable, render_github, render_json, render_text, use_color
from .source import Source
from .version import __version__

EXIT_OK, EXIT_SPEC, EXIT_INTERNAL = 0, 1, 2
# pyproject.toml's dependencies, by import name: one missing is this Python's setup, not a bug
DEPENDENCIES = ("lark", "jinja2", "numpy", "safetensors", "torch")
SPEC_SUFFIXES = (".snf",)


class FileProblem(Exception):
    """A file the environment will not let snfc read or write (a folder in the way, no permission,
    a full disk, a file-size limit). The user's to fix, not a bug: `main` prints it and exits 1."""


def _os_problem(err: OSError, action: str, path: Path | str) -> FileProblem:
    reason = err.strerror or type(err).__name__
    return FileProblem(f"snfc: error: cannot {action} {printable(str(path))}: {reason}")


def _is_pattern(p: str) -> bool:
    return any(ch in p for ch in "*?[")


def _specs(paths: list[str]) -> tuple[list[Path], list[str]]:
    """Files named, spec files found under folders named (sorted), and files a quoted glob
    (`'specs/**/*.snf'`) matches. A folder or glob with no spec in it is a problem: a wrong
    path in CI must not pass as "0 specs checked"."""
    found, problems = [], []
    for p in paths:
        path = Path(p)
        try:
            if path.is_dir():
                here = sorted(q for q in path.rglob("*") if q.suffix in SPEC_SUFFIXES and q.is_file())
                if not here:
                    problems.append(f"snfc: error: no specs (*.snf) in folder {printable(p)}")
            elif path.is_file():
                here = [path]
            elif _is_pattern(p):
                here = sorted(q for q in map(Path, glob.glob(p, recursive=True))
                              if q.suffix in SPEC_SUFFIXES and q.is_file())
                if not here:
                    problems.append(f"snfc: error: no specs (*.snf) match {printable(p)}")
            else:
                here = []
                problems.append(f"snfc: error: no such file or folder: {printable(p)}")
        except OSError as e:
            raise _os_problem(e, "read", p) from e
        found += here
    return found, problems


def _display(path: Path) -> str:
    """The path as written in messages and headers: relative to the working folder when inside it."""
    try:
        rel = path.resolve().relative_to(Path.cwd().resolve())
        return rel.as_posix()
    except ValueError:
        return path.as_posix()


def _read(path: Path) -> Source:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise _os_problem(e, "read", _display(path)) from e
    return Source.from_bytes(_display(path), data)


def _emit(diags: list[Diagnostic], sources: dict, fmt: str, verbose: bool = False) -> None:
    if not verbose:  # notes say what snfc inferred: on request only, in every format
        diags = [d for d in diags if d.severity != "note"]
    if fmt == "json":
        print(render_json(diags))
    elif fmt == "github":
        if diags:
            print(render_github(diags))
    elif diags:
        print(render_text(diags, sources, color=use_color(sys.stdout)))


def _summary(diags: list[Diagnostic], n_files: int, fmt: str, verbose: bool = False) -> None:
    if fmt != "text":
        return
    errors = sum(d.severity == "error" for d in diags)
    warnings = sum(d.severity == "warning" for d in diags)
    notes = sum(d.severity == "note" for d in diags)
    if notes and not verbose:
        print(f"({notes} note{'s' * (notes != 1)} on what was inferred; `snfc check -v` shows them)", file=sys.stderr)
    if errors:
        print(f"Found {errors} error{'s' * (errors != 1)}"
              f"{f' and {warnings} warning' + 's' * (warnings != 1) if warnings else ''} "
              f"in {n_files} file{'s' * (n_files != 1)}", file=sys.stderr)
    else:
        print(f"Success: {n_files} spec{'s' * (n_files != 1)} checked"
              f"{f', {warnings} warning' + 's' * (warnings != 1) if warnings else ''}", file=sys.stderr)


def cmd_check(args) -> int:
    from .compiler import analyze, plan_notes, tensor_parallel
    files, problems = _specs(args.paths)
    for p in problems:
        print(p, file=sys.stderr)
    all_diags, sources = [], {}
    for f in files:
        src = _read(f)
        sources[src.path] = src
        result = analyze(src)
        all_diags += result.diagnostics + (plan_notes(result) if args.verbose else [])
        if args.tp is not None:
            all_diags += tensor_parallel(result, args.tp, args.format == "text")
    _emit(all_diags, sources, args.format, args.verbose)
    if not problems:
        _summary(all_diags, len(files), args.format, args.verbose)
    if problems or any(d.severity == "error" for d in all_diags):
        return EXIT_SPEC
    return EXIT_OK


def _tp_degree(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"--tp takes a number of ranks >= 1, not {text!r}")
    return n


def module_name(spec: Path) -> str:
    stem = spec.name.split(".")[0]
    name = "".join(ch if ch.isalnum() and ch.isascii() or ch == "_" else "_" for ch in stem) or "model"
    return name if not name[0].isdigit() else "_" + name


def _outputs(files: list[Path], output: str | None) -> tuple[dict[Path, Path], list[str]]:
    """Each spec's output file. `-o DIR/` or an existing folder holds DIR/<name>.py per spec; two
    specs never write one file (`a.snf`, `a.b.snf`, `sub/a.snf` and `a-b.snf`/`a_b.snf` share a
    module name), and no spec replaces a package's own `__init__.py`."""
    to_folder = output is None or output.endswith(("/", os.sep)) or Path(output).is_dir()
    outs: dict[Path, Path] = {}
    owner: dict[str, Path] = {}
    problems = []
    if not to_folder and len({os.path.realpath(f) for f in files}) > 1:
        return {}, ["snfc compile: error: -o FILE takes exactly one spec; give a folder (-o DIR/) for several"]
    for f in files:
        name = module_name(f)
        out = Path(output or "generated") / f"{name}.py" if to_folder else Path(output)
        if to_folder and name.startswith("__") and name.endswith("__"):
            problems.append(f"snfc compile: error: {printable(_display(f))} would compile to {printable(out.as_posix())}, "
                            "a file Python reserves for the package itself; rename the spec")
            continue
        key = os.path.normcase(os.path.realpath(out)).casefold()  # a.snf and A.snf clash on macOS and Windows
        first = owner.setdefault(key, f)
        if first is f:
            outs[f] = out
        elif os.path.realpath(first) != os.path.realpath(f):  # (a spec named twice is compiled once)
            problems.append(f"snfc compile: error: {printable(_display(first))} and {printable(_display(f))} both compile "
                            f"to {printable(out.as_posix())}\n  hint: a module is named after the file name up to its "
                            "first dot, with other characters as `_`; rename one spec, or compile it with -o")
    return outs, problems


def write_atomic(path: Path, text: str | bytes) -> str:
    """Write `text` to `path` at once: a temporary file beside it, then a rename, so no reader sees
    half a file. A symlink is written through (its target is replaced, the link stays, as `cp` and a
    shell's `>` do); the return value says so, for the caller's progress line ("" otherwise). The
    file gets mode 0666 less the umask (0644 with the usual umask 022), as `open(path, "w")` would give."""
    through = ""
    if path.is_symlink():
        path = Path(os.path.realpath(path))
        through = f" (a symlink: wrote its target, {printable(path.as_posix())})"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError as e:  # a file where a folder is needed
        raise FileProblem(f"snfc: error: cannot write {printable(str(path))}: a file is in the way of its folder") from e
    except OSError as e:
        raise _os_problem(e, "write", path) from e
    tmp = path.parent / f".{path.name}.{os.urandom(6).hex()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode("utf-8") if isinstance(text, str) else text)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise _os_problem(e, "write", path) from e
        raise
    return through


def _generate(f: Path, sources: dict, diags: list, standalone: bool = False) -> str | None:
    from .compiler import analyze, generate_source
    src = _read(f)
    sources[src.path] = src
    result = analyze(src)
    diags += result.diagnostics
    if not result.ok:
        return None
    return generate_source(result, src.path, standalone)


def cmd_compile(args) -> int:
    paths = args.paths or (["specs"] if args.check else [])
    if not paths:
        print("snfc compile: error: name at least one spec", file=sys.stderr)
        return EXIT_SPEC
    files, problems = _specs(paths)
    outs, clashes = _outputs(files, args.output)
    for p in problems + clashes:
        print(p, file=sys.stderr)
    if clashes:
        return EXIT_SPEC
    diags, sources, stale, status = [], {}, [], EXIT_SPEC if problems else EXIT_OK
    for f, out in outs.items():
        code = _generate(f, sources, diags, args.standalone)
        if code is None:
            status = EXIT_SPEC
            continue
        if args.check:
            try:
                old = out.read_text(encoding="utf-8") if out.exists() else ""
            except (OSError, UnicodeDecodeError):
                old = None  # unreadable counts as stale
            if old != code:
                stale.append(out)
                import difflib
                sys.stdout.writelines(difflib.unified_diff(
                    (old or "").splitlines(True), code.splitlines(True), f"{out.as_posix()} (committed)",
                    f"{out.as_posix()} (from {_display(f)})"))
            continue
        through = write_atomic(out, code)
        init = out.parent / "__init__.py"
        if out.parent.name == "generated" and not init.exists():
            write_atomic(init, '"""Modules generated by snfc from specs/ (do not edit)."""\n')
        if not args.quiet:
            print(printable(f"{_display(f)} -> {out.as_posix()}") + through, file=sys.stderr)
    _emit(diags, sources, "text")
    if stale:
        print(f"snfc: {len(stale)} generated file(s) are stale: " + ", ".join(printable(p.as_posix()) for p in stale)
              + "\n  run `snfc compile specs/*.snf` and commit the result", file=sys.stderr)
        return EXIT_SPEC
    return status


def _one_spec(path: str):
    """The checked model of one spec file, or None after printing why."""
    from .compiler import analyze
    if not Path(path).is_file():
        print(f"snfc: error: no such file: {printable(path)}", file=sys.stderr)
        return None
    src = _read(Path(path))
    result = analyze(src)
    _emit(result.diagnostics, {src.path: src}, "text")
    return result.model if result.ok else None


def cmd_ir(args) -> int:
    from .irdump import dump
    model = _one_spec(args.spec)
    if model is None:
        return EXIT_SPEC
    if args.lowered:
        from .compiler import lower
        model = lower(model)
    sys.stdout.write(dump(model))
    return EXIT_OK


def cmd_stats(args) -> int:
    from .compiler import planned
    from .stats import StatsError, parse_overrides, stats
    model = _one_spec(args.spec)
    if model is None:
        return EXIT_SPEC
    try:
        result = stats(planned(model), parse_overrides(model, args.set))
    except StatsError as e:
        print(f"snfc stats: error: {e}", file=sys.stderr)
        return EXIT_SPEC
    sys.stdout.write(result.render(args.format))
    return EXIT_OK


GRAPH_FORMATS = {".dot": None, ".gv": None, ".svg": "svg", ".png": "png"}  # suffix -> Graphviz format


def cmd_graph(args) -> int:
    from .graph import to_dot
    out = Path(args.output) if args.output else None
    suffix = out.suffix.lower() if out else ".dot"
    if suffix not in GRAPH_FORMATS:
        print(f"snfc graph: error: -o {printable(args.output)}: write .dot or .gv (DOT text), .svg or .png "
              "(drawn by Graphviz)", file=sys.stderr)
        return EXIT_SPEC
    model = _one_spec(args.spec)
    if model is None:
        return EXIT_SPEC
    dot = to_dot(model)
    if out is None:
        sys.stdout.write(dot)
        return EXIT_OK
    data: str | bytes = dot
    if GRAPH_FORMATS[suffix]:
        data = _graphviz(dot, GRAPH_FORMATS[suffix], out)
        if data is None:
            return EXIT_SPEC
    through = write_atomic(out, data)
    if not args.quiet:
        print(f"{printable(_display(Path(args.spec)))} -> {printable(out.as_posix())}{through}", file=sys.stderr)
    return EXIT_OK


def _graphviz(dot: str, fmt: str, out: Path) -> bytes | None:
    """DOT text drawn by Graphviz's `dot`, or None after saying why not."""
    import shutil
    import subprocess
    exe = shutil.which("dot")
    if exe is None:
        print(f"snfc graph: error: drawing {printable(out.as_posix())} needs Graphviz's `dot`, which is not installed "
              "(Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz)\n"
              f"  hint: `-o {printable(out.with_suffix('.dot').as_posix())}` writes the DOT text without it",
              file=sys.stderr)
        return None
    run = subprocess.run([exe, f"-T{fmt}"], input=dot.encode("utf-8"), capture_output=True)
    if run.returncode != 0:
        reason = run.stderr.decode("utf-8", "replace").strip()
        print(f"snfc graph: error: Graphviz's dot failed: {printable(reason)}", file=sys.stderr)
        return None
    return run.stdout


def cmd_explain(args) -> int:
    code = args.code
    if code not in CODES:
        import difflib
        close = difflib.get_close_matches(code, list(CODES), n=3)
        print(f"snfc: unknown error code {code!r}" + (f"; did you mean {', '.join(close)}?" if close else ""),
              file=sys.stderr)
        return EXIT_SPEC
    print(f"{code}: {CODES[code]}")
    from .explain import EXAMPLES
    if code in EXAMPLES:
        print()
        print(EXAMPLES[code])
    return EXIT_OK


def cmd_generate(args) -> int:
    """A prompt's continuation from a `save_pretrained` folder, streamed to stdout as it is made.
    Everything that can be refused is refused before the prompt is shown."""
    from .pretrained import from_pretrained
    from .text import TokenizerMissing, check_continues, check_prompt, generate_text, load_tokenizer

    try:
        check_prompt(args.prompt)
        tokenizer = load_tokenizer(args.folder)
        model = from_pretrained(args.folder, dtype=args.dtype)
        check_continues(model)
    except (TokenizerMissing, ValueError, FileNotFoundError) as err:  # PretrainedError, CheckpointError too
        print(f"snfc generate: error: {printable(str(err))}", file=sys.stderr)
        return EXIT_SPEC
    sys.stdout.write(args.prompt)
    sys.stdout.flush()

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()
    try:
        generate_text(model, args.prompt, tokenizer=tokenizer, max_new_tokens=args.max_new_tokens,
                      temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed, stream=write)
    except ValueError as err:  # an argument generate refuses (a negative temperature, an empty prompt)
        print(f"\nsnfc generate: error: {printable(str(err))}", file=sys.stderr)
        return EXIT_SPEC
    sys.stdout.write("\n")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="snfc", description="Compile SNF transformer specs to PyTorch modules.")
    p.add_argument("--version", action="version", version=f"snfc {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="parse and shape-check specs (files or folders)")
    c.add_argument("paths", nargs="+")
    c.add_argument("--format", choices=("text", "json", "github"), default="text")
    c.add_argument("-v", "--verbose", action="store_true", help="also show notes (shapes snfc inferred)")
    c.add_argument("--tp", type=_tp_degree, metavar="N",
                   help="print the tensor-parallel plan at N ranks (each parameter's placement, and what keeps "
                        "one whole); exit 1 where the default config cannot shard at N")
    c.set_defaults(fn=cmd_check)
    c = sub.add_parser("compile", help="generate PyTorch modules (generated/<stem>.py by default)")
    c.add_argument("paths", nargs="*")
    c.add_argument("-o", "--output", help="output file (one spec), or folder (`DIR/` or an existing one)")
    c.add_argument("--check", action="store_true", help="exit 1 with a diff when a generated file is stale")
    c.add_argument("--standalone", action="store_true",
                   help="copy the runtime helpers into the file (it then needs only torch, not snf)")
    c.add_argument("-q", "--quiet", action="store_true")
    c.set_defaults(fn=cmd_compile)
    c = sub.add_parser("ir", help="print the typed IR with every value's symbolic shape")
    c.add_argument("spec")
    c.add_argument("--lowered", action="store_true", help="after the optimisation passes")
    c.set_defaults(fn=cmd_ir)
    c = sub.add_parser("stats", help="parameters, FLOPs and memory per token, as formulas and numbers")
    c.add_argument("spec")
    c.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a config field or run-time dim (T, B) for the numbers; repeatable")
    c.add_argument("--format", choices=("text", "json"), default="text")
    c.set_defaults(fn=cmd_stats)
    c = sub.add_parser("graph", help="the dataflow graph as Graphviz DOT (or SVG/PNG through Graphviz's dot)")
    c.add_argument("spec")
    c.add_argument("-o", "--output", help="FILE.dot / .gv (DOT text), .svg or .png; DOT on stdout without -o")
    c.add_argument("-q", "--quiet", action="store_true")
    c.set_defaults(fn=cmd_graph)
    c = sub.add_parser("generate", help="continue a prompt with a save_pretrained folder's model and tokenizer")
    c.add_argument("folder")
    c.add_argument("--prompt", required=True)
    c.add_argument("--max-new-tokens", type=int, default=64)
    c.add_argument("--temperature", type=float, default=0.0, help="0 (the default) is greedy")
    c.add_argument("--top-k", type=int)
    c.add_argument("--top-p", type=float)
    c.add_argument("--seed", type=int, help="makes sampling reproducible")
    c.add_argument("--dtype", help="float32, bfloat16, ...: by default the checkpoint's own")
    c.set_defaults(fn=cmd_generate)
    c = sub.add_parser("explain", help="explain an error code")
    c.add_argument("code")
    c.set_defaults(fn=cmd_explain)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits 2 on usage errors; a usage error is the user's, so 1
        return EXIT_SPEC if e.code not in (0, None) else EXIT_OK
    try:
        return args.fn(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except FileProblem as e:
        print(e, file=sys.stderr)
        return EXIT_SPEC
    except OSError as e:  # a path the system refuses (too long, not a folder, ...) where nothing more precise said so
        print(_os_problem(e, "use", e.filename or ""), file=sys.stderr)
        return EXIT_SPEC
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] not in DEPENDENCIES:
            return _internal_error(e)
        print(f"snfc: this Python ({sys.executable}) lacks the package {e.name!r}, which snfc needs here\n"
              f"  install it (`pip install {e.name}`), or in a checkout run `bash scripts/setup.sh` and use "
              f".venv/bin/snfc", file=sys.stderr)
        return EXIT_INTERNAL
    except Exception as e:
        return _internal_error(e)


def _internal_error(e: Exception) -> int:
    """An snfc bug: say so, and how to report it."""
    print(f"snfc: internal error: {type(e).__name__}: {e}\n"
          "  This is a bug in snfc, not in your spec; please report it with the spec that caused it.",
          file=sys.stderr)
    if os.environ.get("SNFC_TRACEBACK"):
        import traceback
        traceback.print_exc()
    return EXIT_INTERNAL
