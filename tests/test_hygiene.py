"""Name hygiene and injection safety of generated code.

Hygiene: specs whose params, dims, tensors, locals, loop variables and outputs are named like
what the generated module binds (`torch`, `F`, `nn`, `self`, `cfg`, `layer`, `property`, ...),
like Python keywords and dunders, or with Unicode that NFKC folds onto another name, either
compile to correct code, proved by running the module (eagerly) against the NumPy interpreter
on the same weights, or are refused with a located error.

Injection: a payload that would create a sentinel file, put in every place spec text can go
(comments, string defaults, checkpoint keys, op string arguments, the spec's display path), must
never run: the generated code parses, imports, builds and runs, and the sentinel stays absent.
Finally, snfc itself never `eval`s or `exec`s anything but the code it generated.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from snf.compiler import analyze, generate_source
from snf.diagnostics import render_text
from snf.interop import convert_state_dict, spec_state
from snf.interpret import interpret
from snf.source import Source

ROOT = Path(__file__).resolve().parent.parent
_counter = itertools.count()


# ------------------------------------------------------------------------------ helpers

@contextlib.contextmanager
def imported(text: str, name: str = "spec", display: str | None = None):
    """Analyze, generate and import `text`; yields (result, module, code). The module is in
    sys.modules while the block runs (interop finds modules there) and removed afterwards."""
    source = Source.from_text(f"{name}.snf", text)
    result = analyze(source)
    assert result.ok, render_text(result.diagnostics, {source.path: source})
    code = generate_source(result, display if display is not None else source.path)
    ast.parse(code)
    mod_name = f"snf_hygiene_{next(_counter)}"
    module = types.ModuleType(mod_name)
    sys.modules[mod_name] = module
    try:
        exec(compile(code, f"<{mod_name}>", "exec"), module.__dict__)
        yield result, module, code
    finally:
        sys.modules.pop(mod_name, None)


def randomise(model: torch.nn.Module, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.3)


def make_inputs(model_ir, sizes: dict, int_high: int, present: bool, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    ints = {c.name: c.default for c in model_ir.config
            if isinstance(c.default, int) and not isinstance(c.default, bool)}
    ints.update(sizes)
    out = {}
    for i in model_ir.inputs:
        if i.optional and not present:
            out[i.name] = None
            continue
        shape = tuple(d.evaluate(ints) for d in i.ty.shape)
        out[i.name] = (rng.integers(0, int_high, size=shape) if i.ty.dtype.startswith("int")
                       else rng.standard_normal(shape))
    return out


def run_against_interpreter(text: str, sizes: dict, int_high: int = 2, name: str = "spec") -> None:
    """Generated module (float64, eager) vs snf.interpret on the same weights and inputs."""
    with imported(text, name) as (result, module, _):
        model = module.Model().double().eval()
        randomise(model)
        params = {k: v.detach().numpy() for k, v in spec_state(model).items()}
        m = result.model
        declared = {t.name for t in m.params + m.buffers}
        assert set(params) <= declared, (set(params), declared)
        for present in (True, False):
            inputs = make_inputs(m, sizes, int_high, present)
            args = [None if inputs[i.name] is None else torch.from_numpy(inputs[i.name]) for i in m.inputs]
            with torch.no_grad():
                out = model(*args)
            got = [out] if len(m.outputs) == 1 else list(out)
            want = interpret(m, params, inputs)
            assert len(got) == len(m.outputs)
            for o, g in zip(m.outputs, got):
                w = want[o.name]
                assert g.shape == w.shape, (o.name, g.shape, w.shape)
                assert np.abs(w).max() > 0 or o.name == "zero"
                np.testing.assert_allclose(g.numpy(), w, rtol=1e-7, atol=1e-9, err_msg=o.name)
            if not any(i.optional for i in m.inputs):
                break


# ------------------------------------------------------------------------------ hygiene

CONFIG_NAMES = """\
param:
  torch : int = 2
  F : int = 6
  nn : bool = True
  math : float = 0.5
  cls : int = 7
  super = 2 * F
  x = F
input:
  idx : Tensor([class, T], int64)
parameter:
  cfg : Tensor([cls, F], float32)
  layer : Tensor([torch, super, x], float32)
  nn_bias : Tensor([torch, super], float32) if nn else None
  torch_weight : Tensor([torch, F, super], float32)
  norm_weight : Tensor([F], float32)
  norm_bias : Tensor([F], float32)
  Model : Tensor([cls, F], float32)
output:
  logits : Tensor([class, T, cls], float32)
let h = gather(cfg, idx, axis=0)
for l in 0..torch-1:
    let u = gelu(linear(h, weight=layer[l], bias=nn_bias[l])) * math
    h = h + linear(u, weight=torch_weight[l])
let logits = linear(layer_norm(h, weight=norm_weight, bias=norm_bias), weight=Model)
"""

# Names the Config class body itself uses (`property` decorates derived dims, so it is refused; these
# are not), a builtin type as a field, and a divisibility constraint whose message names them.
CLASS_BODY_NAMES = """\
param:
  classmethod : int = 4
  staticmethod : int = 2
  int : int = 3
  dataclass : bool = True
  field : float = 1.5
  wide = classmethod * staticmethod
  head = classmethod // staticmethod
input:
  x : Tensor([B, classmethod, staticmethod], float32)
output:
  z : Tensor([B, head, staticmethod * staticmethod], float32)
let w = reshape(x, [B, wide]) * field if dataclass else reshape(x, [B, wide])
let z = reshape(w, [B, head, staticmethod * staticmethod]) * int
"""

LOCAL_NAMES = """\
param:
  n_layer : int = 2
  D : int = 6
input:
  x : Tensor([B, T, D], float32)
  cfg : Tensor([B, T, D], float32)?
parameter:
  w : Tensor([n_layer, D, D], float32)
  F : Tensor([D], float32)
output:
  torch : Tensor([B, T, D], float32)
  nn : Tensor([B, T, D], float32)
let self = x * 2.0
let layer = relu(self) + F
let nn = layer + cfg if cfg exists else layer
let math = nn
let super = math
let __import__ = super * 0.5
let __builtins__ = __import__ + 1.0
let for = __builtins__
let _ = for
let __ = _ * 3.0
for l in 0..n_layer-1:
    let F_ = linear(_, weight=w[l])
    let cfg_ = F_ + self
    _ = gelu(cfg_) + __
let torch = _
let class = torch - x
nn = class + nn
"""

LOOP_VAR_LAYER = """\
param:
  n_layer : int = 3
  D : int = 4
input:
  x : Tensor([B, D], float32)
parameter:
  w : Tensor([n_layer, D, D], float32)
  b : Tensor([n_layer, D], float32)
output:
  y : Tensor([B, D], float32)
let y = x
for layer in 0..n_layer-1:
    let l = linear(y, weight=w[layer], bias=b[layer])
    y = y + gelu(l)
"""

LOOP_VAR_SELF = LOOP_VAR_LAYER.replace("layer", "self").replace("n_self", "n_layer")

# Names that differ only by NFKC normalisation: Python would fold them onto one identifier,
# so generated code must keep them apart (the differential test fails if two share a variable).
UNICODE_NAMES = """\
param:
  D : int = 4
  H : int = 2
input:
  x : Tensor([B, D], float32)
output:
  y : Tensor([B, D], float32)
let \u210c = 3.0
let \uff58 = x * 2.0
let _uff58 = x * 5.0
let \U0001d431 = x * 3.0
let \ufb01 = x * 7.0
let fi = x * 11.0
let \u00e9 = x * 13.0
let \u0394\u03b4 = x * 17.0
let y = \uff58 + x + \U0001d431 * H + \u210c * _uff58 + \ufb01 + fi + \u00e9 + \u0394\u03b4
"""

# Several outputs become fields of a NamedTuple, named exactly as in the spec.
OUTPUT_NAMES = """\
param:
  D : int = 4
input:
  x : Tensor([B, D], float32)
output:
  cfg : Tensor([B, D], float32)
  torch : Tensor([B, D], float32)
  index : Tensor([B, D], float32)
  count : Tensor([B, D], float32)
  self : Tensor([B, D], float32)
  private : Tensor([B, D], float32)
let cfg = x * 2.0
let torch = x * 3.0
let index = x * 7.0
let count = x * 11.0
let self = x * 13.0
let private = x * 17.0
"""


def _private_names() -> list[str]:
    """Names generated code relies on that a spec could also write: the module-level helpers and
    private attributes (`self._decode_step`) of the committed files."""
    names = set()
    for path in sorted((ROOT / "generated").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        names |= {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names
                  if (a.asname or a.name).startswith("_")}  # the runtime's helpers it imports
        owners = {"self"} | {c.name for c in tree.body if isinstance(c, ast.ClassDef)}  # Model._decode_step
        names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr.startswith("_")
                  and isinstance(n.value, ast.Name) and n.value.id in owners and not n.attr.startswith("__")}
        names |= {t.id for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body
                  if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    return sorted(names)


PRIVATE = _private_names()
_SPEC_HEAD = ["param:", "  n_layer : int = 2", "  D : int = 4", "input:", "  x : Tensor([B, D], float32)",
              "output:", "  y : Tensor([B, D], float32)", "parameter:"]
# Every helper and private attribute name as a spec's local (a local `_linear_t` once shadowed the
# helper of that name: UnboundLocalError at the first `linear`), as a parameter, and as a loop variable.
PRIVATE_LOCALS = "\n".join([
    *_SPEC_HEAD, "  v : Tensor([D, D], float32)", "  w : Tensor([n_layer, D, D], float32)", "let h = x",
    *(f"let {n} = linear(h, weight=v) * {i + 2}.0\nh = h + tanh({n})" for i, n in enumerate(PRIVATE)),
    f"for {PRIVATE[0]} in 0..n_layer-1:", f"    h = h + tanh(linear(h, weight=w[{PRIVATE[0]}]))",
    "let y = h",
]) + "\n"
PRIVATE_PARAMS = "\n".join([
    *_SPEC_HEAD, *(f"  {n} : Tensor([n_layer, D, D], float32)" for n in PRIVATE[1:]), "let h = x",
    f"for {PRIVATE[0]} in 0..n_layer-1:", *(f"    h = h + tanh(linear(h, weight={n}[{PRIVATE[0]}]))" for n in PRIVATE[1:]),
    "let y = h",
]) + "\n"


@pytest.mark.parametrize("name,text,sizes,int_high", [
    ("config_names", CONFIG_NAMES, {"class": 2, "T": 3}, 7),
    ("class_body_names", CLASS_BODY_NAMES, {"B": 2}, 2),
    ("local_names", LOCAL_NAMES, {"B": 2, "T": 3}, 2),
    ("loop_var_layer", LOOP_VAR_LAYER, {"B": 3}, 2),
    ("loop_var_self", LOOP_VAR_SELF, {"B": 3}, 2),
    ("unicode_names", UNICODE_NAMES, {"B": 2}, 2),
    ("output_names", OUTPUT_NAMES, {"B": 2}, 2),
    ("private_locals", PRIVATE_LOCALS, {"B": 2}, 2),
], ids=["config", "class-body", "locals", "loop-var-layer", "loop-var-self", "unicode-nfkc", "outputs",
        "private-locals"])
def test_colliding_names_compile_to_correct_code(name, text, sizes, int_high):
    run_against_interpreter(text, sizes, int_high, name)


def test_names_users_type_are_kept_as_written():
    """Config fields, forward's arguments, output fields: never renamed (`Config(head_dim=64)` must
    work). Locals are remapped around the names generated code relies on."""
    with imported(CONFIG_NAMES) as (_, module, code):
        tree = ast.parse(code)
        model_cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
        fwd = next(n for n in model_cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
        params = [a.arg for a in fwd.args.args]
        assert params == ["self", "idx"]
        # the module-level names generated code relies on are never rebound by spec names
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef):
                bound = {t.id for n in ast.walk(fn) if isinstance(n, ast.Assign) for t in n.targets
                         if isinstance(t, ast.Name)}
                assert not bound & {"torch", "F", "nn", "math", "super", "self"}, (fn.name, bound)
        config = module.Config(torch=3, F=4, cls=5)
        assert (config.torch, config.F, config.cls, config.super) == (3, 4, 5, 8)
        model = module.Model(config)
        assert set(spec_state(model)) == {"cfg", "layer", "nn_bias", "torch_weight", "norm_weight", "norm_bias",
                                          "Model"}
    for name in ("head_dim", "input", "class_", "cfg", "dtype"):
        text = f"param:\n  {name} : int = 4\ninput:\n  x : Tensor([B, {name}], float32)\noutput:\n" \
               f"  y : Tensor([B, {name}], float32)\nlet y = x * {name}\n"
        with imported(text) as (_, module, _code):
            assert getattr(module.Config(**{name: 3}), name) == 3
            assert module.Model()(x=torch.ones(1, 4)).shape == (1, 4)


PUBLIC_REFUSED = [
    ("param:\n  self : int = 2\n", "a name the generated `Config` class uses itself"),
    ("param:\n  property : int = 2\n", "a name the generated `Config` class uses itself"),
    ("param:\n  \u210c : int = 2\n", "Python would read it as `H`"),
    ("param:\n  n : int = 2\n  _half = n // 2\n", "starts with `_`"),
    ("input:\n  self : Tensor([B], float32)?\n", "would shadow a name the generated `forward` uses"),
    ("input:\n  torch : Tensor([B], float32)?\n", "would shadow a name the generated `forward` uses"),
    ("input:\n  use_cache : Tensor([B], float32)?\n", "would shadow a name the generated `forward` uses"),
    ("input:\n  decode : Tensor([B], float32)?\n", "would shadow a name the generated `forward` uses"),
    ("input:\n  encoded : Tensor([B], float32)?\n", "would shadow a name the generated `forward` uses"),
    ("input:\n  _mask : Tensor([B], float32)?\n", "starts with `_`"),
    ("output:\n  _extra : Tensor([B], float32)?\n", "starts with `_`"),
    ("parameter:\n  forward : Tensor([4], float32)\n", "`nn.Module.forward`"),
    ("parameter:\n  state_dict : Tensor([4], float32)\n", "`nn.Module.state_dict`"),
    ("parameter:\n  training : Tensor([4], float32)\n", "`nn.Module.training`"),
    ("parameter:\n  config : Tensor([4], float32)\n", "an attribute the generated module sets itself"),
    ("parameter:\n  layers : Tensor([4], float32)\n", "an attribute the generated module sets itself"),
    ("parameter:\n  loaded_from : Tensor([4], float32)\n", "an attribute the generated module sets itself"),
    ("buffer:\n  _stored : Tensor([4], float32)\n", "starts with `_`"),
]


@pytest.mark.parametrize("section,message", PUBLIC_REFUSED, ids=[s.split("\n")[1].strip() for s, _ in PUBLIC_REFUSED])
def test_names_that_cannot_be_kept_are_refused(section, message):
    text = "input:\n  x : Tensor([B], float32)\noutput:\n  y : Tensor([B], float32)\n" + section + "let y = x\n"
    result = analyze(Source.from_text("r.snf", text))
    errors = [d for d in result.diagnostics if d.severity == "error"]
    refused = [d for d in errors if d.code == "reserved-name"]
    assert not result.ok and len(refused) == 1, errors
    assert message in refused[0].message, refused[0].message
    assert refused[0].span.line == len(section.splitlines()) + 4


def test_private_names_are_never_bound_by_a_spec():
    assert {"_attention", "_check_input", "_hot_path", "_decode_step"} <= set(PRIVATE)
    with imported(PRIVATE_LOCALS) as (_, _module, code):
        tree = ast.parse(code)
        functions = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)]  # the class bodies are the template's
        bound = {n.id for f in functions for n in ast.walk(f) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        bound |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments) for a in n.args}
        attrs = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)}
        helpers = {n for n in PRIVATE if n.startswith("_")}  # compile_units is only read as an attribute
        assert not bound & helpers, bound & helpers
        assert not {a for a in attrs if a.startswith("_")}, attrs
    result = analyze(Source.from_text("p.snf", PRIVATE_PARAMS))  # as parameters: refused, one error each
    errors = [d for d in result.diagnostics if d.severity == "error"]
    reserved = [n for n in PRIVATE[1:] if n.startswith("_") or n == "compile_units"]  # an attribute the Model sets
    assert len(errors) == len(reserved) and {d.code for d in errors} == {"reserved-name"}


def test_inputs_named_like_generates_locals(monkeypatch):
    """The token input of a causal spec is also `generate`'s argument: named `temperature` (or
    `position`, ...) it must not clash with generate's own names."""
    monkeypatch.setenv("SNF_COMPILE", "0")
    text = (ROOT / "specs" / "nanogpt.snf").read_text(encoding="utf-8")
    for name in ("temperature", "position", "step", "token"):
        renamed = re.sub(r"\bidx\b", name, text)
        with imported(renamed) as (_, module, _code):
            torch.manual_seed(0)
            model = module.Model(vocab_size=11, block_size=16, n_layer=1, n_head=2, n_embd=8).eval()
            prompt = torch.randint(0, 11, (1, 3))
            out = model.generate(prompt, 5, temperature=0)
            seq = prompt
            with torch.no_grad():
                for _ in range(5):
                    seq = torch.cat([seq, model(seq).logits[:, -1:].argmax(-1)], dim=1)
            assert torch.equal(out, seq), name


def test_unicode_names_stay_apart_in_code():
    with imported(UNICODE_NAMES) as (_, module, code):
        idents = {n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)}
        assert "\uff58" not in idents and "x" in idents  # the fullwidth x is escaped, not folded
        assert all(i.isascii() or __import__("unicodedata").normalize("NFKC", i) == i for i in idents)


REFUSED = [
    ("let True = x\n", "reserved-name"),
    ("let None = x\n", "reserved-name"),
    ("let Tensor = x\n", "reserved-name"),
    ("let float32 = x\n", "reserved-name"),
    ("let e\u0301 = x\n", "syntax"),  # a combining accent is not an identifier character
    ("let a.b = x\n", "syntax"),
    ("let y\u200b = x\n", "syntax"),  # zero-width space
]


@pytest.mark.parametrize("stmt,code", REFUSED, ids=[c[0].strip() for c in REFUSED])
def test_unusable_names_are_refused_with_a_located_error(stmt, code):
    text = "input:\n  x : Tensor([B], float32)\noutput:\n  y : Tensor([B], float32)\n" + stmt + "let y = x\n"
    result = analyze(Source.from_text("r.snf", text))
    errors = [d for d in result.diagnostics if d.severity == "error"]
    assert errors and not result.ok
    assert errors[0].code == code, errors
    assert errors[0].span.line == 5 and errors[0].span.col >= 1


# ------------------------------------------------------------------------------ injection

def payload(sentinel: Path) -> str:
    return f"__import__('os').system('touch {sentinel}')"


BASE = """\
param:
  n_layer : int = 2
  D : int = 4
  H : int = 2
  hd = D // H
  max_len : int = 8
input:
  x : Tensor([B, T, D], float32)
parameter:
  w : Tensor([n_layer, D, D], float32)
  pos : Tensor([max_len, D], float32)
output:
  y : Tensor([B, T, H, hd], float32)
let h = x + slice(pos, [0:T, :])
for l in 0..n_layer-1:
    h = h + gelu(linear(h, weight=w[l]), approximate="tanh")
let y = reshape(h, [B, T, H, hd])
"""


def exercise(module) -> None:
    """Build and run the model, and trip both kinds of generated error message."""
    model = module.Model().eval()
    model(torch.randn(2, 3, 4))
    with pytest.raises(ValueError):
        module.Config(D=5, H=2)  # D % H != 0: the Config's constraint message
    with pytest.raises((ValueError, RuntimeError, IndexError)):
        model(torch.randn(1, 9, 4))  # T > max_len: the run-time check message


@pytest.fixture
def sentinel(tmp_path):
    path = tmp_path / "SENTINEL"
    yield path
    assert not path.exists(), "injected code ran"


def test_payload_in_comments(sentinel):
    p = payload(sentinel)
    lines = BASE.split("\n")
    hostile = [f"# {p}", f'# """ {p} """', "# '''\n# " + p, f"#\\\n# {p}", f"# \x0c{p}", f"# {{{p}}}"]
    out = []
    for n, line in enumerate(lines):
        c = hostile[n % len(hostile)]
        out.append(line + ("  " + c.split("\n")[0] if line.strip() else ""))
        out.append(c)
    text = "\n".join(out)
    with imported(text) as (_, module, code):
        assert "__import__" not in code and "touch" not in code  # comments never reach the code
        exercise(module)


STRINGS = [
    "'); __import__('os').system('touch SENTINEL'); ('",
    '\\"); __import__(\'os\').system(\'touch SENTINEL\'); (\\"',
    '\\"\\"\\" + __import__(\'os\').system(\'touch SENTINEL\') + \\"\\"\\"',
    "{__import__('os').system('touch SENTINEL')}",
    "\\n__import__('os').system('touch SENTINEL')\\n#",
    "\\u0027); __import__(\\u0027os\\u0027).system(\\u0027touch SENTINEL\\u0027)#",
    "\\x27\\x29; __import__('os').system('touch SENTINEL')",
    "\\\\'); __import__('os').system('touch SENTINEL') #",
]


@pytest.mark.parametrize("raw", STRINGS, ids=range(len(STRINGS)))
def test_payload_in_string_default(raw, sentinel):
    raw = raw.replace("SENTINEL", str(sentinel))
    text = BASE.replace("  max_len : int = 8\n", f'  max_len : int = 8\n  label : str = "{raw}"\n')
    with imported(text) as (result, module, code):
        expected = next(c.default for c in result.model.config if c.name == "label")
        assert module.Config().label == expected  # the value round-trips, as data
        assert module.Config(label="x").label == "x"
        exercise(module)


@pytest.mark.parametrize("raw", STRINGS, ids=range(len(STRINGS)))
def test_payload_in_checkpoint_keys(raw, sentinel):
    raw = raw.replace("SENTINEL", str(sentinel))
    text = BASE + f'checkpoint hf:\n  pos <- "{raw}"\n  w[l] <- "h.{{l}}.{raw}".T\n'
    if re.search(r"\{(?!l\})", raw):  # a `{...}` field other than {l}: refused, as data, before any code is made
        result = analyze(Source.from_text("spec.snf", text))
        assert not result.ok and {d.code for d in result.diagnostics} == {"bad-checkpoint"}
        assert not sentinel.exists()
        return
    with imported(text) as (result, module, code):
        key = module.CHECKPOINTS["hf"]["params"]["pos"][1]
        exercise(module)
        model = module.Model()
        layer_keys = [module.CHECKPOINTS["hf"]["params"]["w"][1][1].replace("{l}", str(i)) for i in range(2)]
        sd = {key: torch.zeros(8, 4), **{k: torch.ones(4, 4) for k in layer_keys}}
        converted = convert_state_dict(model, sd, "hf")
        assert set(converted) == set(model.state_dict())


@pytest.mark.parametrize("raw", STRINGS[:4], ids=range(4))
def test_payload_in_op_string_is_refused(raw, sentinel):
    raw = raw.replace("SENTINEL", str(sentinel))
    text = BASE.replace('approximate="tanh"', f'approximate="{raw}"')
    result = analyze(Source.from_text("g.snf", text))
    assert not result.ok
    [err] = [d for d in result.diagnostics if d.severity == "error"]
    assert err.code == "arg-kind" and err.span.line == 16 and err.span.col > 1


DISPLAY_PATHS = [
    'evil"""\n__import__(\'os\').system(\'touch SENTINEL\')\n""".snf',
    "evil'''\n__import__('os').system('touch SENTINEL')\n'''.snf",
    "{__import__('os').system('touch SENTINEL')}.snf",
    "dir/{__import__('os').system('touch SENTINEL')}/x.snf",
    "a\\\n__import__('os').system('touch SENTINEL')#.snf",
    "a\r__import__('os').system('touch SENTINEL')\r.snf",
    "a\u2028__import__('os').system('touch SENTINEL').snf",
    "a\x00\x1b[31m.snf",
    "'; __import__('os').system('touch SENTINEL'); '.snf",
]


@pytest.mark.parametrize("path", DISPLAY_PATHS, ids=range(len(DISPLAY_PATHS)))
def test_payload_in_spec_path(path, sentinel, monkeypatch):
    # a relative sentinel: the payload must survive `PurePosixPath(path).name`, so it has no "/"
    monkeypatch.chdir(sentinel.parent)
    with imported(BASE, display=path) as (_, module, code):
        exercise(module)
    # the same path as the name of a spec with errors: diagnostics stay one line per location
    bad = Source.from_text(path, BASE.replace("let y =", "let y = nope +"))
    text = render_text(analyze(bad).diagnostics, {path: bad})
    assert "\x1b" not in text and "\r" not in text
    assert text.split("\n")[0].endswith("[unknown-name]")


def test_spec_text_is_never_evaluated():
    """snfc never eval/exec/compile's anything but generated code (only in snf/api.py)."""
    offenders = []
    for path in sorted((ROOT / "snf").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) and \
                    isinstance(fn.value, ast.Name) and fn.value.id == "builtins" else None
                if name in ("eval", "exec", "compile", "__import__"):
                    offenders.append((path.relative_to(ROOT).as_posix(), node.lineno, name))
            if isinstance(node, ast.Attribute) and node.attr in ("literal_eval",):
                offenders.append((path.relative_to(ROOT).as_posix(), node.lineno, node.attr))
    allowed = {("snf/api.py", "exec"), ("snf/api.py", "compile")}
    assert [o for o in offenders if (o[0], o[2]) not in allowed] == []
    api = (ROOT / "snf" / "api.py").read_text(encoding="utf-8")
    assert "exec(compile(code" in api  # what it runs is the generated code
