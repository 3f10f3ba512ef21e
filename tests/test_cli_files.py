"""`snfc` and the file system: spec sets, output names, environment errors, symlinks, modes, CI formats."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest

from conftest import REPO, python_subprocess, snfc, write_spec
from test_cli import BAD, GOOD

UNUSED = GOOD.replace("output:", "parameter:\n  w : Tensor([D, D], float32)\n\noutput:")  # `w` is unused


@pytest.fixture
def specs(tmp_path):
    (tmp_path / "specs").mkdir()
    write_spec(tmp_path / "specs", GOOD, "good.snf")
    return tmp_path


# ------------------------------------------------------------------------ spec sets

@pytest.mark.parametrize("command", ["check", "compile"])
def test_an_empty_spec_set_is_an_error(tmp_path, command):
    (tmp_path / "empty").mkdir()
    write_spec(tmp_path / "empty", "not a spec", "notes.txt")
    rc, out, err = snfc(command, "empty", cwd=tmp_path)
    assert rc == 1 and "no specs (*.snf) in folder empty" in err and "Success" not in err
    rc, _, err = snfc(command, "empty/*.snf", cwd=tmp_path)  # a quoted glob that matches nothing
    assert rc == 1 and "no specs (*.snf) match empty/*.snf" in err
    assert not (tmp_path / "generated").exists()


def test_a_quoted_glob_is_expanded(specs):
    write_spec(specs / "specs", GOOD, "other.snf")
    rc, _, err = snfc("check", "specs/*.snf", cwd=specs)
    assert rc == 0 and err.strip() == "Success: 2 specs checked"
    rc, _, err = snfc("check", "specs", "specs/nothing*.snf", cwd=specs)  # one empty part fails the run
    assert rc == 1 and "match specs/nothing*.snf" in err


def test_an_unreadable_spec_exits_1_with_a_message(specs):
    (specs / "specs" / "dir.snf").mkdir()  # a folder named like a spec is skipped by the folder walk
    assert snfc("check", "specs", cwd=specs)[0] == 0
    if sys.platform == "linux":  # a file that exists but cannot be read, even by root
        rc, _, err = snfc("check", "/proc/self/mem", cwd=specs)
        assert rc == 1 and "cannot read /proc/self/mem" in err and "bug in snfc" not in err


# ------------------------------------------------------------------------ output names

@pytest.mark.parametrize("names", [("a.snf", "a.b.snf"), ("a.snf", "sub/a.snf"), ("a-b.snf", "a_b.snf"),
                                   ("a.snf", "A.snf")])
def test_two_specs_never_write_one_file(tmp_path, names):
    (tmp_path / "specs" / "sub").mkdir(parents=True)
    for n in names:
        write_spec(tmp_path / "specs", GOOD, n)
    rc, _, err = snfc("compile", "specs", cwd=tmp_path)
    assert rc == 1
    first, second = sorted(f"specs/{n}" for n in names)
    assert f"{first} and {second} both compile to generated/" in err, err
    assert not (tmp_path / "generated").exists()  # nothing written: the clash is found first
    # the same spec named twice is compiled once, not a clash
    rc, _, err = snfc("compile", f"specs/{names[0]}", f"./specs/{names[0]}", cwd=tmp_path)
    assert rc == 0 and err.count(" -> ") == 1


def test_a_spec_never_replaces_the_package_init(specs):
    write_spec(specs / "specs", GOOD, "__init__.snf")
    (specs / "generated").mkdir()
    (specs / "generated" / "__init__.py").write_text("# mine\n")
    rc, _, err = snfc("compile", "specs", cwd=specs)
    assert rc == 1 and "specs/__init__.snf would compile to generated/__init__.py" in err
    assert (specs / "generated" / "__init__.py").read_text() == "# mine\n"


@pytest.mark.parametrize("target", ["gen2/", "existing"])
def test_o_folder_writes_folder_name_py(specs, target):
    (specs / "existing").mkdir()
    write_spec(specs / "specs", GOOD, "other.snf")
    rc, _, err = snfc("compile", "specs/good.snf", "-o", target, cwd=specs)
    folder = specs / target.rstrip("/")
    assert rc == 0 and (folder / "good.py").is_file(), err
    rc, _, _ = snfc("compile", "specs", "-o", target, cwd=specs)  # a folder takes several specs
    assert rc == 0 and sorted(p.name for p in folder.iterdir()) == ["good.py", "other.py"]


# ------------------------------------------------------------------------ environment errors

def _fails_cleanly(result, *words):
    rc, _, err = result
    assert rc == 1, err
    assert "bug in snfc" not in err and all(w in err for w in words), err


def test_environment_errors_exit_1(specs):
    (specs / "afile").write_text("")
    _fails_cleanly(snfc("compile", "specs/good.snf", "-o", "afile/x.py", cwd=specs), "cannot write afile/x.py",
                   "a file is in the way")
    (specs / "out" / "good.py").mkdir(parents=True)  # the output name is taken by a folder
    _fails_cleanly(snfc("compile", "specs/good.snf", "-o", "out", cwd=specs), "cannot write out/good.py")
    assert [p.name for p in (specs / "out").iterdir()] == ["good.py"]  # no temporary file left behind
    if os.path.isdir("/sys") and sys.platform == "linux":  # unwritable even for root
        _fails_cleanly(snfc("compile", "specs/good.snf", "-o", "/sys/x.py", cwd=specs), "cannot write /sys/x.py",
                       "Permission denied")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root may write anywhere")
def test_an_unwritable_folder_exits_1(specs):
    ro = specs / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        _fails_cleanly(snfc("compile", "specs/good.snf", "-o", "ro/x.py", cwd=specs), "Permission denied")
    finally:
        ro.chmod(0o700)


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE as Linux applies it")
def test_a_file_size_limit_exits_1(specs):
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000)); "
            "from snf.cli import main; sys.exit(main(['compile', 'specs/good.snf', '-o', 'big.py']))")
    p = python_subprocess(code, cwd=specs)
    assert p.returncode == 1, p.stderr
    assert "cannot write big.py: File too large" in p.stderr and "bug in snfc" not in p.stderr
    assert not (specs / "big.py").exists() and not list(specs.glob(".big.py*"))


# ------------------------------------------------------------------------ symlinks and modes

@pytest.mark.skipif(os.name != "posix", reason="symlinks")
def test_o_onto_a_symlink_writes_through(specs):
    (specs / "real").mkdir()
    (specs / "real" / "m.py").write_text("old\n")
    (specs / "link.py").symlink_to("real/m.py")
    rc, _, err = snfc("compile", "specs/good.snf", "-o", "link.py", cwd=specs)
    assert rc == 0, err
    assert (specs / "link.py").is_symlink() and os.readlink(specs / "link.py") == "real/m.py"
    assert (specs / "real" / "m.py").read_text().startswith("# Generated by snfc")
    # issue 18: writing through is what cp and a shell's > do; snfc says so, naming the target
    target = os.path.realpath(specs / "real" / "m.py")
    assert f"specs/good.snf -> link.py (a symlink: wrote its target, {target})" in err
    rc, _, err = snfc("compile", "specs/good.snf", "-o", "real/m.py", cwd=specs)
    assert rc == 0 and "symlink" not in err


@pytest.mark.skipif(os.name != "posix", reason="file modes")
@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_generated_files_follow_the_umask(specs, umask, mode):
    old = os.umask(umask)
    try:
        rc, _, _ = snfc("compile", "specs/good.snf", cwd=specs)
    finally:
        os.umask(old)
    assert rc == 0
    for name in ("good.py", "__init__.py"):
        assert stat.S_IMODE((specs / "generated" / name).stat().st_mode) == mode, name


# ------------------------------------------------------------------------ CI formats

def test_ci_formats_carry_warnings_and_notes_only_with_v(specs):
    write_spec(specs / "specs", UNUSED, "w.snf")
    inferred = str(REPO / "specs" / "nanogpt_model.snf")  # the notation infers shapes: notes
    for fmt in ("github", "json"):
        rc, out, _ = snfc("check", "--format", fmt, "specs/w.snf", inferred, cwd=specs)
        assert rc == 0 and ("[unused]" in out or '"unused"' in out)  # warnings always
        assert "::notice" not in out and '"note"' not in out
        rc, out, _ = snfc("check", "--format", fmt, "-v", inferred, cwd=specs)
        assert ("::notice" in out) if fmt == "github" else {r["severity"] for r in json.loads(out)} == {"note"}


def test_github_format_escapes_control_bytes_in_file_names(tmp_path):
    name = "e\x1b[31mvil%,:\x9b\x07.snf"
    write_spec(tmp_path, BAD, name)
    rc, out, _ = snfc("check", "--format", "github", name, cwd=tmp_path)
    assert rc == 1
    assert "file=e%1B[31mvil%25%2C%3A%9B%07.snf," in out
    assert not any(ch < " " or "\x7f" <= ch <= "\x9f" for ch in out.rstrip("\n")), repr(out)
    rc, out, _ = snfc("check", name, cwd=tmp_path)  # text: control characters shown as ?
    assert out.startswith("e?[31mvil%,:??.snf:10:19: error:")


# ------------------------------------------------------------------------ the parser cache

CHECK = "import sys, snf.cli; sys.exit(snf.cli.main(['check', 'specs']))"


def _check_with_cache(folder) -> tuple:
    p = python_subprocess(CHECK, env={"SNFC_CACHE_DIR": str(folder)})
    return p.returncode, p.stdout, p.stderr


def test_the_grammars_tables_are_cached_and_reused(tmp_path):
    cache = tmp_path / "cache"
    first = _check_with_cache(cache)
    files = sorted(cache.iterdir())
    assert first[0] == 0 and [f.name.split(".")[0] for f in files] == ["lark-snf", "lark-snf_model"]
    stamps = [f.stat().st_mtime_ns for f in files]
    assert _check_with_cache(cache) == first  # the same answer from the cached tables
    assert [f.stat().st_mtime_ns for f in files] == stamps  # read, not rebuilt
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700


def test_a_damaged_cache_is_rebuilt(tmp_path):
    cache = tmp_path / "cache"
    good = _check_with_cache(cache)
    for f in cache.iterdir():
        f.write_bytes(f.read_bytes()[:100])  # cut short, as by a full disk
    assert _check_with_cache(cache) == good
    assert all(f.stat().st_size > 1000 for f in cache.iterdir())


@pytest.mark.skipif(os.name != "posix", reason="file modes")
def test_no_cache_in_a_folder_others_may_write(tmp_path):
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    assert _check_with_cache(cache)[0] == 0
    assert list(cache.iterdir()) == []  # a pickle there could be anyone's
    (tmp_path / "afile").write_text("")
    assert _check_with_cache(tmp_path / "afile" / "cache")[0] == 0  # no cache, still checks
