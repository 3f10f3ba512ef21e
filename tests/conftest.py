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


def write_spec(tmp_path: Path, text: str, name: str = "spec.snf") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def repo() -> Path:
    return REPO


# Seconds the slowest tests took on the 2-core development machine with a cold inductor cache (most
# of it torch.compile): the suite runs them first, longest first, so that the two test workers
# (scripts/test.sh) finish together instead of one waiting on a long test started last. Only the
# order depends on these figures; a test missing here runs after them, in collection order.
SLOWEST = {
    "test_every_spec_survives_a_session[deepseek_v3-cpu]": 121,
    "test_every_spec_survives_a_session[qwen3_next-cpu]": 108, "test_every_spec_survives_a_session[gpt_oss-cpu]": 82,
    "test_every_spec_survives_a_session[llama4_text-cpu]": 74, "test_every_spec_survives_a_session[t5-cpu]": 67,
    "test_every_spec_survives_a_session[gemma2-cpu]": 59, "test_every_spec_survives_a_session[nemotron_h-cpu]": 52,
    "test_every_spec_survives_a_session[gemma3_text-cpu]": 52,
    "test_every_spec_survives_a_session[qwen2_moe-cpu]": 46, "test_every_spec_survives_a_session[falcon_h1-cpu]": 45,
    "test_every_spec_survives_a_session[mixtral-cpu]": 41, "test_every_spec_survives_a_session[mamba2-cpu]": 41,
    "test_random_specs_survive_sessions": 40, "test_every_spec_survives_a_session[phi3-cpu]": 40,
    "test_every_spec_survives_a_session[gptj-cpu]": 38, "test_every_spec_survives_a_session[gpt_neox-cpu]": 32,
    "test_long_mode_findings_stay_fixed": 28, "test_every_spec_survives_a_session[qwen3_moe-cpu]": 26,
    "test_every_spec_survives_a_session[llama3-cpu]": 25, "test_every_spec_survives_a_session[phi-cpu]": 24,
    "test_every_spec_survives_a_session[nanogpt-cpu]": 24, "test_every_spec_survives_a_session[qwen3-cpu]": 23,
    "test_every_spec_survives_a_session[olmoe-cpu]": 23, "test_every_spec_survives_a_session[bert-cpu]": 23,
    "test_bench_tiering_runs": 22, "test_every_spec_survives_a_session[snowflake_core-cpu]": 21,
    "test_a_varied_session_keeps_a_bounded_number_of_graphs[cpu]": 21,
    "test_every_spec_survives_a_session[olmo2-cpu]": 20, "test_every_spec_survives_a_session[cohere-cpu]": 20,
    "test_the_compiled_path_generates_what_transformers_does": 19,
    "test_every_spec_survives_a_session[gpt_decoder-cpu]": 19, "test_blocks_run[docs/training.md]": 19,
    "test_every_spec_survives_a_session[mistral-cpu]": 18, "test_a_sample_compiled": 18,
    "test_fixed_shape_decode_compiles_once_per_bucket": 17, "test_random_specs_are_sound": 15,
    "test_qwen2_moe_compiled[step3]": 13, "test_bench_load_runs": 13, "test_bench_generate_runs[gpt2]": 13,
    "test_a_block_handed_a_view_of_its_other_argument_compiles_on_a_cold_cache": 13, "test_bench_gpt2_runs": 12,
    "test_bench_generate_runs[llama]": 12, "test_bench_first_runs[cpu]": 12,
    "test_quickstart_all_trains_every_spec_and_says_what_its_numbers_are": 11,
    "test_every_spec_survives_a_session[qwen2-cpu]": 11, "test_every_spec_survives_a_session[nanogpt_model-cpu]": 11,
    "test_train_resume_and_sample": 10, "test_blocks_run[examples/README.md]": 10, "test_bench_pretrained_runs": 10
}


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: -SLOWEST.get(item.name, 0))  # stable: the rest keep their order
