"""snf/runtime: the helpers generated modules call, imported and tested as Python, and the copy of
them code generation puts into each module (only what it calls, byte for byte the package's)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import types

import pytest
import torch
import torch.nn.functional as F

from conftest import REPO
from snf import runtime
from snf.runtime import checks, compiling, generate, loss, rope, writes


def test_what_a_call_needs_comes_with_it():
    need = runtime.needed("_check_input('x', x, 2, '[B, T]', 'int64')")
    assert {"_check_input", "_fits", "_described"} <= need and "_attention" not in need
    assert "_CompileSettings" in runtime.needed("for step in _decoding(4): pass")  # across the two files
    assert runtime.needed("x = y + 1  # no helper") == frozenset()


def test_every_generated_module_imports_exactly_the_runtime_it_calls():
    """A generated module imports, from snf.runtime, each definition its own code names and nothing
    else, after checking the runtime's ABI."""
    by_name = {d.name for d in runtime.definitions()}
    for path in sorted((REPO / "generated").glob("[!_]*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {a.name for node in tree.body if isinstance(node, ast.ImportFrom)
                    and (node.module or "").startswith("snf.runtime.") for a in node.names}
        used = {n.id for node in tree.body if not isinstance(node, (ast.Import, ast.ImportFrom))
                for n in ast.walk(node) if isinstance(n, ast.Name)}
        assert imported == used & by_name, path.name
        assert f"_require_runtime({runtime.ABI}, __name__)" in path.read_text(encoding="utf-8"), path.name


def _standalone(spec: str) -> str:
    from snf.compiler import analyze, generate_source
    from snf.source import Source
    return generate_source(analyze(Source.read(REPO / "specs" / spec)), f"specs/{spec}", standalone=True)


@pytest.mark.parametrize("spec", ["nanogpt.snf", "qwen3_next.snf"])  # (qwen3_next: the recurrent ops and kernels.py)
def test_a_standalone_module_holds_exactly_the_runtime_it_calls(spec):
    """Each definition in a standalone module's runtime part is the package's text, and each one the
    module's own code calls is there; nothing else is."""
    by_name = {d.name: d for d in runtime.definitions()}
    text = _standalone(spec)
    assert "snf" not in {n.module.split(".")[0] for n in ast.parse(text).body if isinstance(n, ast.ImportFrom)
                         and n.module}
    defined = {n for node in ast.parse(text).body for n in runtime._defined(node) if n in by_name}
    for name in defined:
        assert by_name[name].source in text, name
    rest = text
    for name in defined:
        rest = rest.replace(by_name[name].source, "")
    assert defined == runtime.needed(rest)


def test_rope_scaling_comes_only_with_a_spec_that_scales():
    """A spec without RoPE scaling references no scaling helper, even with the runtime copied in."""
    scaling = {"_scaled_rope", "_rope_frequencies", "_yarn_frequencies", "_yarn_mscale"}
    plain, scaled = (ast.parse(_standalone(spec)) for spec in ("mistral.snf", "llama3.snf"))
    names = [{n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} for tree in (plain, scaled)]
    assert "_rope" in names[0] and not scaling & names[0] and scaling <= names[1]


def test_a_standalone_module_runs_where_snf_cannot_be_imported(tmp_path):
    """`--standalone`: the file needs only torch (snf blocked in a fresh interpreter)."""
    (tmp_path / "model.py").write_text(_standalone("nanogpt.snf"), encoding="utf-8")
    (tmp_path / "snf.py").write_text("raise ImportError('snf must not be imported')\n", encoding="utf-8")
    code = ("import sys; sys.modules['snf'] = None; import torch, model; m = model.Model(n_layer=1, n_head=2, "
            "n_embd=8, vocab_size=11, block_size=8); out = m(torch.zeros(1, 4, dtype=torch.long)); "
            "print(tuple(out.logits.shape), [k for k, v in sys.modules.items() if k.split('.')[0] == 'snf' and v])")
    e = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**e, "SNF_COMPILE": "0"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["(1,", "4,", "11)", "[]"]


@pytest.mark.parametrize("spec", ["nanogpt.snf", "gpt_decoder.snf", "t5.snf"])
def test_a_standalone_module_starts_its_model_within_150_lines(spec):
    """The compile decorators and the unit they make come before the classes they wrap, and the rest
    of the runtime after the model: a reader meets `class Config` within the first 150 lines."""
    lines = _standalone(spec).splitlines()
    assert lines.index("class Config:") < 150
    assert lines.index("# ---------------------------------------------------------------------------- runtime") > \
        lines.index("class Model(nn.Module):")


def test_a_standalone_module_compiles_only_where_asked(tmp_path, monkeypatch):
    """A standalone module carries no compile policy: with SNF_COMPILE unset nothing compiles, even a
    decode step that would pay at once; with SNF_COMPILE=1 it does (torch.compile stood in for)."""
    from conftest import fresh_module
    from snf.runtime import policy
    text = _standalone("nanogpt.snf")
    assert "class _Payoff" not in text and "_FIGURES" not in text and "class _Record" not in text
    (tmp_path / "standalone_nanogpt.py").write_text(text, encoding="utf-8")
    mod = fresh_module(tmp_path / "standalone_nanogpt.py", "standalone_nanogpt")
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda fn, **options: compiled.append(fn) or fn)
    monkeypatch.setitem(policy._FIGURES, ("cpu", "decode", "eval"), policy._Figures(0.0, 0.0, (1.0, 1.0), 0.3))
    monkeypatch.delenv("SNF_COMPILE", raising=False)
    model = mod.Model(n_layer=1, n_head=2, n_embd=8, vocab_size=11, block_size=16).eval()
    prompt = torch.zeros(1, 2, dtype=torch.long)
    eager = model.generate(prompt, 6, temperature=0)
    assert compiled == [] and mod.Model._decode_step.unit.payoff is None
    monkeypatch.setenv("SNF_COMPILE", "1")
    assert torch.equal(model.generate(prompt, 6, temperature=0), eager) and compiled


def test_a_generated_module_imports_the_runtime_not_the_compiler():
    code = ("import sys, generated.nanogpt; print(sorted(m for m in ('lark', 'jinja2', 'snf.compiler', "
            "'snf.codegen', 'snf.check') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_a_module_for_another_runtime_abi_fails_at_import_saying_both():
    text = (REPO / "generated" / "tiny_transformer.py").read_text(encoding="utf-8")
    other = text.replace(f"_require_runtime({runtime.ABI}, __name__)", f"_require_runtime({runtime.ABI + 1}, __name__)")
    assert other != text
    module = types.ModuleType("old_generated")
    with pytest.raises(ImportError, match=rf"old_generated was generated for snf runtime ABI {runtime.ABI + 1}, "
                                          rf"but the installed snf .* has runtime ABI {runtime.ABI}: regenerate"):
        exec(compile(other, "<old_generated>", "exec"), module.__dict__)


def test_check_dims_says_why_with_the_sizes():
    checks._check_dims("T", 3, "<=", "block_size", 4, "m.snf:9")
    with pytest.raises(ValueError, match=r"expected T <= block_size, got T = 5 and block_size = 4 \(m.snf:9\)"):
        checks._check_dims("T", 5, "<=", "block_size", 4, "m.snf:9")
    with pytest.raises(ValueError, match=r"the cache is full, got T = 5 \(m.snf:9\)"):
        checks._check_dims("T", 5, "<=", "block_size", 4, "m.snf:9", "the cache is full", {"T": 5})


def test_check_number_refuses_what_cannot_be_computed_or_is_out_of_range():
    checks._check_number(lambda: 0.5, 0.0, 1.0, False, "rate", "m.snf:3", "p=0.5")
    with pytest.raises(ValueError, match="cannot be computed"):
        checks._check_number(lambda: 1.0 / 0, 0.0, None, False, "std", "m.snf:3", "D=3")
    with pytest.raises(ValueError, match=r"rate must be in \[0, 1\], got 1.5"):
        checks._check_number(lambda: 1.5, 0.0, 1.0, False, "rate", "m.snf:3", "p=1.5")


def test_bucket_is_a_power_of_two_from_128_up_to_the_size():
    assert [generate._bucket(n, 1024) for n in (1, 128, 129, 600, 1024)] == [128, 128, 256, 1024, 1024]
    assert generate._bucket(300, 200) == 200


def test_cross_entropy_matches_torch_and_ignores_the_ignore_index():
    torch.manual_seed(0)
    logits, targets = torch.randn(2, 5, 11), torch.randint(0, 11, (2, 5))
    targets[0, 1] = -100
    got = loss._cross_entropy(logits, targets, -100, torch.float32, "targets", "V")
    want = F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="targets"):
        loss._cross_entropy(logits, torch.full((2, 5), 11), -100, torch.float32, "targets", "V")


def test_linear_cross_entropy_matches_the_unfused_loss_and_its_gradients():
    torch.manual_seed(0)
    x = torch.randn(3, 4, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(13, 8, dtype=torch.float64, requires_grad=True)
    b = torch.randn(13, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 13, (3, 4))
    fused = loss._linear_cross_entropy(x, w, b, targets, -100, torch.float64, "targets", "V")
    plain = F.cross_entropy(F.linear(x, w, b).reshape(-1, 13), targets.reshape(-1))
    torch.testing.assert_close(fused, plain, rtol=1e-12, atol=1e-12)
    got = torch.autograd.grad(fused, (x, w, b))
    want = torch.autograd.grad(plain, (x, w, b))
    for g, h in zip(got, want):
        torch.testing.assert_close(g, h, rtol=1e-10, atol=1e-12)


def test_next_tokens_shifts_left_and_ignores_the_last():
    t = torch.tensor([[1, 2, 3], [4, 5, 6]])
    assert loss._next_tokens(t, -100).tolist() == [[2, 3, -100], [5, 6, -100]]


def test_a_compile_error_is_told_from_the_models_own():
    assert not compiling._is_compile_error(ValueError("input x must be [B, T] int64"))
    assert compiling._is_compile_error(torch._dynamo.exc.Unsupported("a construct dynamo cannot trace"))


def test_eagerly_turns_compiling_off_inside_and_back_on(monkeypatch):
    monkeypatch.setenv("SNF_COMPILE", "1")
    assert compiling._compile_enabled()
    with compiling._eagerly():
        assert not compiling._compile_enabled()
    assert compiling._compile_enabled()



def test_a_compiled_block_is_handed_no_two_arguments_sharing_memory():
    """Dynamo can fail on a view handed beside its base (session seed 28826): the later of two
    arguments sharing memory is copied; other arguments, and a decode step's, whose cache buffers
    are written in place, pass as they are."""
    x = torch.randn(2, 3, 4, requires_grad=True)
    other, empty = torch.randn(4), torch.empty(0)
    args, kwargs = compiling._unaliased((x, x[:, 0], torch.float32), {"y": x.view(6, 4), "z": other})
    assert args[0] is x and args[2] is torch.float32 and kwargs["z"] is other
    for copy, of in ((args[1], x[:, 0]), (kwargs["y"], x.view(6, 4))):
        assert torch.equal(copy, of) and copy.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    args[1].sum().backward()  # the copy is part of the graph: the gradient reaches x
    assert x.grad[:, 0].eq(1).all() and x.grad[:, 1:].eq(0).all()
    alone = (x, other, empty, empty, None)
    args, kwargs = compiling._unaliased(alone, {})
    assert all(a is b for a, b in zip(args, alone, strict=True)) and kwargs == {}
    decode = writes._DecodeState(position=torch.tensor(0), length=1)
    assert compiling._unaliased((x, x[0], decode), {})[0][1]._base is x


def test_a_call_handed_an_empty_tensor_runs_eagerly(monkeypatch):
    """An empty batch, sequence or cache: nothing worth compiling, and inductor's empty buffers have
    zero strides, which CUDA's attention kernels refuse (the CUDA session of every spec with a
    batch of 0, on an H200). Other calls compile; nothing compiles inside the eager one."""
    monkeypatch.setenv("SNF_COMPILE", "1")
    compiled_calls, inside = [], []

    def fake_compile(fn, **options):
        def run(*args, **kwargs):
            compiled_calls.append(args[0].shape)
            return fn(*args, **kwargs)
        return run

    monkeypatch.setattr(torch, "compile", fake_compile)

    def block(x, past=None):
        inside.append(compiling._compile_enabled())
        return x * 2

    hot = compiling._hot_path(block)
    assert hot(torch.ones(2, 3)).eq(2).all() and compiled_calls == [(2, 3)] and inside == [True]
    for args, kwargs in (((torch.ones(0, 3),), {}), ((torch.ones(2, 3),), {"past": torch.ones(2, 0, 3)})):
        assert hot(*args, **kwargs).shape == args[0].shape
    assert compiled_calls == [(2, 3)] and inside == [True, False, False]
    assert compiling._has_empty((torch.ones(1), None, 3), {"y": torch.ones(0)})
    assert not compiling._has_empty((torch.ones(1), [torch.ones(0)], 3), {"y": None})


def _half_under_autocast(x, past):
    """concat, rope and a cache update of tensors in a half dtype other than autocast's, as a spec's
    own float16 values are under CPU bfloat16 autocast, whose rule for torch.cat, torch.stack and
    index_copy refuses them (session seed 8303); on CUDA, bfloat16 values under float16 autocast."""
    decode = writes._DecodeState(position=torch.tensor(2, device=x.device), length=3)
    return (writes._cat([x, x], dim=1), rope._rope(x, 1, 10000.0),
            rope._rope(x, 1, 10000.0, rotary_dim=2, interleaved=True),
            writes._cache_cat(past[:, :2], x), writes._cache_cat(past.clone(), x[:, :1], decode))


_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("device, autocast, half", [
    ("cpu", torch.bfloat16, torch.float16),
    pytest.param("cuda", torch.float16, torch.bfloat16, marks=_CUDA)])
@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_half_dtypes_of_a_spec_run_under_autocast(compiled, device, autocast, half):
    if device == "cpu":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with pytest.raises(RuntimeError, match="prioritize"):  # what torch does, which the helpers step around
                torch.cat([torch.ones(2, dtype=torch.float16)] * 2)
    x = torch.randn(2, 3, 2, 4, dtype=half, device=device)
    past = torch.randn(2, 5, 2, 4, dtype=half, device=device)
    want = _half_under_autocast(x, past)  # outside autocast
    fn = torch.compile(_half_under_autocast, fullgraph=True) if compiled else _half_under_autocast
    with torch.autocast(device, dtype=autocast):
        got = fn(x, past)
    tol = 2e-3 if half == torch.float16 else 1e-2  # a few ulps: bfloat16 has 8 bits of mantissa
    for g, w in zip(got, want):  # compiled, inductor rounds rope's half dtype once where eager rounds each op
        assert g.dtype == half and (torch.allclose(g, w, rtol=tol, atol=tol) if compiled else torch.equal(g, w))
