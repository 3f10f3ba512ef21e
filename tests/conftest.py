"""Shared test helpers: repo paths, seed lookup, golden files, running the CLI.

Generated modules run eagerly in tests (`SNF_COMPILE=0`, set here for this process and every
subprocess it starts); only tests/test_compile.py turns torch.compile on, for itself.

Golden files live in tests/golden/. When output changes on purpose, regenerate them with

    SNF_ACCEPT=1 python -m pytest tests/test_golden.py

and review the diff; never edit a golden file by hand.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ["SNF_COMPILE"] = "0"
os.environ["NO_COLOR"] = "1"

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
GOLDEN = TESTS / "golden"
SEEDS = REPO.parent / "shared" / "seeds"
SEEDS_REL = "../shared/seeds"  # as written on the command line, with cwd = REPO

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
if str(TESTS / "property") not in sys.path:  # the property tests' runner, session and specgen, for every test
    sys.path.insert(0, str(TESTS / "property"))


def seed_absent(name: str) -> str:
    """Why a test that reads a seed document skips: a clone does not have them."""
    return (f"needs {SEEDS_REL}/{name}, one of the spec documents snfc was developed against; they sit "
            "beside the development checkout and are not distributed with snfc")


def seed_path(name: str) -> Path:
    """The seed document `name`, or skip the calling test with the reason."""
    path = SEEDS / name
    if not path.is_file():
        pytest.skip(seed_absent(name))
    return path


def assert_golden(name: str, text: str, golden_dir: Path | None = None) -> None:
    """Compare `text` with tests/golden/<name>; with SNF_ACCEPT=1, (re)write the golden instead."""
    path = (golden_dir or GOLDEN) / name
    if os.environ.get("SNF_ACCEPT") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))
        return
    if not path.exists():
        pytest.fail(f"golden file {path.name} is missing; create it with SNF_ACCEPT=1", pytrace=False)
    expected = path.read_bytes().decode("utf-8")
    if expected != text:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                            f"golden/{name}", "actual"))
        pytest.fail(f"output differs from golden/{name} (rerun with SNF_ACCEPT=1 if the change is "
                    f"intended):\n{diff}", pytrace=False)


@contextlib.contextmanager
def chdir(path: Path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def snfc(*args: str, cwd: Path = REPO) -> tuple[int, str, str]:
    """Run `snfc ARGS` in process with the working folder `cwd`; returns (exit code, stdout, stderr)."""
    from snf.cli import main
    out, err = io.StringIO(), io.StringIO()
    with chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    return rc, out.getvalue(), err.getvalue()


def snfc_subprocess(*args: str, cwd: Path = REPO, env: dict | None = None,
                    timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `python -m snf ARGS` in a fresh interpreter."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "snf", *args], cwd=cwd, env=e, capture_output=True,
                          text=True, timeout=timeout)


def python_subprocess(code: str, cwd: Path = REPO, env: dict | None = None,
                      timeout: float = 120) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=e, capture_output=True, text=True,
                          timeout=timeout)


def fresh_module(path: Path, name: str):
    """Import the file at `path` as a new module `name` (its own torch.compile state)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def unwrapped(code: str) -> str:
    """Generated code with each statement wrapped over several lines (snf/codegen/wrap.py) on one
    line again, for tests that look for a statement's text."""
    import re
    return re.sub(r"([,(\[{])\n\s+", r"\1 ", re.sub(r"\n\s+([-+*/%@]|if |else |and |or )", r" \1", code))


def once_per_run(tmp_path_factory, name: str, make) -> Path:
    """A folder that `make(folder)` fills once in the whole run, whichever test worker asks first; a
    module-scoped fixture runs once per worker that runs one of its tests (a 4-process launch twice).
    The others wait for it (the launches it is for keep both cores busy) and read what it wrote; if it
    failed, they fail with its error instead of running it again."""
    import fcntl
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the workers' folders share a parent
        base = base.parent
    folder, done, failed = base / name, base / f"{name}.done", base / f"{name}.failed"
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if failed.exists():
            pytest.fail(failed.read_text(encoding="utf-8"), pytrace=False)
        if not done.exists():
            folder.mkdir(exist_ok=True)
            try:
                make(folder)
            except BaseException as error:  # pytest.fail's exception too
                failed.write_text(f"{name}, made once for the run, failed in another test: {error}", encoding="utf-8")
                raise
            done.touch()
    return folder


def write_spec(tmp_path: Path, text: str, name: str = "spec.snf") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def repo() -> Path:
    return REPO


# The order tests run in: the slow ones (`@pytest.mark.slow`: they compile, export or train) first, each
# group longest first by the durations pytest's cache recorded on the last run that had it (the
# controller's, below; .pytest_cache). The test workers of scripts/test.sh take tests one at a time, so
# they finish together instead of one waiting on a long test started last: the fast tests, many and
# short, fill the end. Only the order depends on the record; a test it lacks (a fresh clone, CI) runs
# after those of its group it has, in collection order. Workers must collect the same order: each
# reads the record before any test runs, and only the controller (or a run without workers) writes it.
DURATIONS = "snf/durations"


def pytest_collection_modifyitems(config, items):
    seen = config.cache.get(DURATIONS, {}) if getattr(config, "cache", None) else {}
    items.sort(key=lambda item: (item.get_closest_marker("slow") is None, -seen.get(item.nodeid, 0)))


_TOOK: dict = {}  # test id -> seconds (setup, call and teardown) in this run


def pytest_runtest_logreport(report):
    _TOOK[report.nodeid] = _TOOK.get(report.nodeid, 0) + report.duration


def pytest_sessionfinish(session):
    config = session.config
    if _TOOK and getattr(config, "cache", None) and not hasattr(config, "workerinput"):
        took = {test: round(seconds, 2) for test, seconds in _TOOK.items()}
        config.cache.set(DURATIONS, {**config.cache.get(DURATIONS, {}), **took})
