"""Hostile input: snfc must answer every byte string with diagnostics, never with a crash.

Property-based (hypothesis, derandomized so CI is reproducible): valid specs are damaged by
truncation, byte flips, token deletion and duplication, indentation damage and line splicing,
and arbitrary bytes are thrown at it. For every input:

* no exception escapes `analyze` (nor `generate_source` when the spec is clean);
* every error is located (line >= 1, col >= 1, inside the file) and renders with a caret;
* a spec that comes out clean generates code that compiles and imports as a fresh module.

Hand-written extremes (deep nesting, huge numbers, invalid UTF-8, BOM + CRLF, empty files) are
checked the same way, and a few hostile files go through `python -m snf check` in a subprocess:
exit code 1 (never 2), no traceback.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snf.compiler import analyze, generate_source
from snf.diagnostics import CODES, render_one
from snf.source import Source

ROOT = Path(__file__).resolve().parent.parent

SMALL_MLP = """\
param:
  n_layer : int = 2
  D : int = 8
  use_bias : bool = True
  hidden = 4 * D
input:
  x : Tensor([B, T, D], float32)
  extra : Tensor([B, T, D], float32)?
parameter:
  up : Tensor([n_layer, hidden, D], float32)
  up_b : Tensor([n_layer, hidden], float32) if use_bias else None
  down : Tensor([n_layer, D, hidden], float32) = normal(std=0.01)
  norm : Tensor([D], float32)
output:
  y : Tensor([B, T, D], float32)
let h = x + extra if extra exists else x
for l in 0..n_layer-1:
    let u = gelu(linear(h, weight=up[l], bias=up_b[l]), approximate="tanh")
    h = h + linear(u, weight=down[l])
let y = rms_norm(h, weight=norm)
"""

SMALL_ATTN = """\
param:
  H : int = 2
  hd : int = 4
  D = H * hd
  max_len : int = 16
input:
  x : Tensor([B, T, D], float32)
  past : Tensor([B, P, H, hd], float32)?
parameter:
  wq : Tensor([D, D], float32)
  wkv : Tensor([2*D, D], float32)
buffer:
  pos : Tensor([max_len, D], float32) = sinusoidal
output:
  y : Tensor([B, T, D], float32)
  keys : Tensor([B, N, H, hd], float32)
    where N = P + T
let h = x + slice(pos, [0:T, :])
let q = reshape(linear(h, weight=wq), [B, T, H, hd])
let kv = linear(h, weight=wkv)
let k = reshape(kv[:, :, 0:D], [B, T, H, hd])
let keys = if past exists:
    concat([past, k], axis=1)
else: k
let a = flash_attention(q, keys, keys, causal=True)
let y = reshape(a, [B, T, D])

checkpoint hf:
  wq <- "attn.q.weight"
  wkv <- "attn.kv.weight".T
"""


def _seeds() -> list[bytes]:
    seeds = [SMALL_MLP.encode(), SMALL_ATTN.encode(), (ROOT / "specs" / "nanogpt.snf").read_bytes()]
    return seeds


SEEDS = _seeds()
TOKEN = re.compile(rb"\w+|\s+|.", re.S)


def _fresh_module(code: str, name: str = "snf_hostile_probe") -> types.ModuleType:
    module = types.ModuleType(name)
    sys.modules[name] = module  # dataclasses look their module up while the class body runs
    try:
        exec(compile(code, f"<{name}>", "exec"), module.__dict__)
    finally:
        del sys.modules[name]
    return module


def check_robust(data: bytes, path: str = "hostile.snf") -> None:
    """The property every input must satisfy."""
    src = Source.from_bytes(path, data)
    result = analyze(src)  # must not raise
    errors = [d for d in result.diagnostics if d.severity == "error"]
    for d in result.diagnostics:
        assert d.code in CODES and d.code != "internal", d
    for d in errors:
        assert d.span.line >= 1 and d.span.col >= 1, d
        assert d.span.line <= max(len(src.lines), 1), d
        rendered = render_one(d, src).split("\n")
        assert rendered[0].startswith(f"{path}:{d.span.line}:{d.span.col}: error: "), rendered[0]
        assert rendered[0].endswith(f"  [{d.code}]")
        assert "^" in rendered[2], rendered
    if result.ok:
        code = generate_source(result, path)
        ast.parse(code)
        module = _fresh_module(code)
        assert hasattr(module, "Model") and hasattr(module, "Config")
    else:
        assert errors, "not ok, yet no error was reported"


COMMON = dict(deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.filter_too_much])

seed_index = st.integers(0, len(SEEDS) - 1)


# ------------------------------------------------------------------------------ mutations

@settings(max_examples=150, **COMMON)
@given(seed_index, st.floats(0, 1))
def test_truncation_at_any_byte(i, frac):
    data = SEEDS[i]
    check_robust(data[:int(len(data) * frac)])


@settings(max_examples=250, **COMMON)
@given(seed_index, st.lists(st.tuples(st.floats(0, 1, exclude_max=True),
                                      st.one_of(st.integers(0x20, 0x7e), st.integers(0, 255))), min_size=1, max_size=6))
def test_random_byte_flips(i, flips):
    data = bytearray(SEEDS[i])
    for frac, byte in flips:
        data[int(len(data) * frac)] = byte
    check_robust(bytes(data))


@settings(max_examples=250, **COMMON)
@given(seed_index, st.lists(st.tuples(st.sampled_from(["delete", "duplicate", "swap"]), st.floats(0, 1, exclude_max=True),
                                      st.integers(1, 3)), min_size=1, max_size=4))
def test_token_deletion_and_duplication(i, edits):
    tokens = TOKEN.findall(SEEDS[i])
    for kind, frac, n in edits:
        at = int(len(tokens) * frac)
        if kind == "delete":
            del tokens[at:at + n]
        elif kind == "duplicate":
            tokens[at:at] = tokens[at:at + n]
        elif at + 1 < len(tokens):
            tokens[at], tokens[at + 1] = tokens[at + 1], tokens[at]
    check_robust(b"".join(tokens))


@settings(max_examples=150, **COMMON)
@given(seed_index, st.lists(st.tuples(st.floats(0, 1, exclude_max=True),
                                      st.sampled_from([b"", b" ", b"  ", b"    ", b"\t", b" \t", b"        ", b"   "])),
                            min_size=1, max_size=5))
def test_indentation_damage(i, edits):
    lines = SEEDS[i].split(b"\n")
    for frac, indent in edits:
        at = int(len(lines) * frac)
        lines[at] = indent + lines[at].lstrip(b" \t")
    check_robust(b"\n".join(lines))


@settings(max_examples=100, **COMMON)
@given(seed_index, seed_index, st.floats(0, 1), st.floats(0, 1), st.floats(0, 1))
def test_line_splicing(i, j, a, b, c):
    """Lines of one spec pasted into another (duplicate sections, stray statements)."""
    x, y = SEEDS[i].split(b"\n"), SEEDS[j].split(b"\n")
    lo, hi = sorted((int(len(y) * a), int(len(y) * b)))
    at = int(len(x) * c)
    check_robust(b"\n".join(x[:at] + y[lo:hi] + x[at:]))


# Names that collide with what generated code binds or with Python/SNF keywords, and Unicode
# look-alikes; renaming a spec's identifier to one of them must give a clean refusal or clean code.
HOSTILE_NAMES = ["torch", "F", "nn", "self", "math", "super", "class", "def", "lambda", "return", "import", "cfg",
                 "layer", "config", "x", "Model", "Config", "Output", "forward", "training", "__init__", "__class__",
                 "_", "__", "print", "eval", "exec", "os", "sys", "layers", "blocks", "_fused", "SPEC", "ℌ", "ｘ",
                 "_u210c", "Ⅸ", "dtype", "float32", "Tensor", "let", "for", "if", "in", "where", "exists", "param",
                 "output", "state_dict", "register_buffer", "B", "T", "D", "None", "True", "and", "match", "case",
                 "annotations", "dataclass", "Optional", "_check_input", "_hot_path", "l", "e", "__builtins__"]
IDENT = re.compile(rb"(?<![\w.])[A-Za-z_]\w*")


@settings(max_examples=150, **COMMON)
@given(seed_index, st.floats(0, 1, exclude_max=True), st.sampled_from(HOSTILE_NAMES))
def test_identifier_renaming(i, frac, new):
    data = SEEDS[i]
    names = sorted(set(IDENT.findall(data)))
    old = names[int(len(names) * frac)]
    check_robust(re.sub(rb"(?<![\w.])" + re.escape(old) + rb"(?!\w)", new.encode(), data))


NUMBERS = [b"0", b"1", b"2", b"3", b"7", b"64", b"0.0", b"1e-30", b"1e30", b"4611686018427387903",
           b"999999999999999999", b"-1", b"1.5"]


@settings(max_examples=100, **COMMON)
@given(seed_index, st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.sampled_from(NUMBERS)), min_size=1,
                            max_size=3))
def test_number_mutations(i, edits):
    data = SEEDS[i]
    spots = [m.span() for m in re.finditer(rb"(?<![\w.])\d+(\.\d+)?(?![\w.])", data)]
    for frac, number in edits:
        lo, hi = spots[int(len(spots) * frac)]
        data = data[:lo] + number.ljust(hi - lo)[:max(hi - lo, len(number))] + data[hi:]
        spots = [m.span() for m in re.finditer(rb"(?<![\w.])\d+(\.\d+)?(?![\w.])", data)]
    check_robust(data)


@settings(max_examples=100, **COMMON)
@given(st.binary(max_size=600))
def test_binary_junk(data):
    check_robust(data)


SNF_WORDS = ["param", "input", "parameter", "buffer", "output", "checkpoint", "let", "for", "in", "if", "else",
             "exists", "where", "Tensor", "int", "float", "bool", "float32", "int64", "linear", "reshape",
             "concat", "gelu", "x", "y", "D", "B", "T", "n_layer", "0", "1", "2.5", "..", ":", "=", "?", "(", ")",
             "[", "]", ",", "+", "-", "*", "/", "//", "@", "**", "<-", "\"k\"", "#c", ".", "\n", "\n  ", "\n    ",
             " ", "not", "and", "or", "True", "None", "==", "<="]


@settings(max_examples=150, **COMMON)
@given(st.lists(st.sampled_from(SNF_WORDS), max_size=80))
def test_token_soup(words):
    check_robust(" ".join(words).encode())


# ------------------------------------------------------------------------------ extremes

HEADER = "param:\n  D : int = 8\ninput:\n  x : Tensor([B, D], float32)\noutput:\n  y : Tensor([B, D], float32)\n"

EXTREMES = {
    "empty": b"",
    "only-newlines": b"\n\n\n",
    "only-comment": b"# nothing here\n",
    "nul-bytes": b"\x00" * 64,
    "bom-crlf": b"\xef\xbb\xbf" + SMALL_MLP.replace("\n", "\r\n").encode(),
    "bom-only": b"\xef\xbb\xbf",
    "cr-only": SMALL_MLP.replace("\n", "\r").encode(),
    "invalid-utf8": SMALL_MLP.encode().replace(b"gelu", b"g\xff\xfelu"),
    "invalid-utf8-in-comment": b"# \xc3\x28 bad\n" + SMALL_MLP.encode(),
    "lone-surrogate-bytes": b"param:\n  D : int = \xed\xa0\x80\n",
    "utf16": SMALL_MLP.encode("utf-16"),
    "10k-parens": (HEADER + "let y = " + "(" * 10_000 + "x" + ")" * 10_000 + "\n").encode(),
    "10k-open-parens": (HEADER + "let y = " + "(" * 10_000 + "\n").encode(),
    "10k-close-parens": (HEADER + "let y = x" + ")" * 10_000 + "\n").encode(),
    "10k-brackets": (HEADER + "let y = reshape(x, " + "[" * 10_000 + "\n").encode(),
    "parens-in-comment": (HEADER + "let y = x  # " + "(" * 10_000 + "\n").encode(),
    "a+a+...": (HEADER + "let y = " + " + ".join(["x"] * 10_000) + "\n").encode(),
    "a**a**...": (HEADER + "let y = " + " ** ".join(["x"] * 5_000) + "\n").encode(),
    "- - - x": (HEADER + "let y = " + "- " * 10_000 + "x\n").encode(),
    "not not": (HEADER + "let y = x if " + "not " * 10_000 + "True else x\n").encode(),
    "long-dim-sum": ("param:\n  D : int = 8\n  E = " + " + ".join(["D"] * 5_000) + "\n" + HEADER[7:]
                     + "let y = x\n").encode(),
    "long-line": (HEADER + "let y = x" + " " * 100_000 + "\n").encode(),
    "many-lines": (HEADER + "let y = x\n" + "y = y + 1.0\n" * 3_000).encode(),
    "many-lets": (HEADER + "".join(f"let v{i} = x\n" for i in range(2_000)) + "let y = x\n").encode(),
    "deep-indent": (HEADER + "let y = x\n" + "".join(" " * (4 * k) + "if True:\n" for k in range(200))
                    + " " * 800 + "y = y + 1.0\n").encode(),
    "huge-int-default": b"param:\n  D : int = " + b"9" * 5_000 + b"\n",
    "huge-int-shape": (HEADER.replace("[B, D]", "[B, " + "9" * 400 + "]", 1) + "let y = x\n").encode(),
    "int-just-too-big": b"param:\n  D : int = 9223372036854775808\n",
    "huge-float": b"param:\n  p : float = 1e999999\n",
    "huge-float-digits": b"param:\n  p : float = " + b"9" * 5_000 + b".5\n",
    "big-dim-product": ("param:\n" + "".join(f"  d{i} : int = 1000000\n" for i in range(12))
                        + "input:\n  x : Tensor([" + ", ".join(f"d{i}" for i in range(12)) + "], float32)\n"
                        + "output:\n  y : Tensor([" + "*".join(f"d{i}" for i in range(12)) + "], float32)\n"
                        + "let y = reshape(x, [" + "*".join(f"d{i}" for i in range(12)) + "])\n").encode(),
    "poly-blowup": ("param:\n" + "".join(f"  d{i} : int = 2\n" for i in range(6))
                    + "  E = " + "*".join("(" + "+".join(f"d{i}" for i in range(6)) + ")" for _ in range(8)) + "\n"
                    + HEADER[7:] + "let y = x\n").encode(),
    "zero-dims": (HEADER.replace("D : int = 8", "D : int = 0") + "let y = x\n").encode(),
    "division-by-zero-dim": (HEADER.replace("D : int = 8", "D : int = 8\n  E = D // 0\n  F2 = D % 0")
                             + "let y = x\n").encode(),
    "negative-range": (HEADER + "let y = x\nfor l in 0..-5:\n    y = y + 1.0\n").encode(),
    "unicode-names": (HEADER + "let ⅅ = x\nlet 𝔁 = x\nlet ｘ = x\nlet y = ⅅ + 𝔁\n").encode(),
    "control-chars": (HEADER + "let y = x\x0b\x0c\x1b[31m\n").encode(),
    "tabs-and-spaces": (HEADER + "let y = x\nif True:\n\ty = y + 1.0\n        y = y + 2.0\n").encode(),
    "stray-dedent-eof": (HEADER + "let y = x\nif True:\n    y = y + 1.0\n  ").encode(),
    "backslash-continuation": (HEADER + "let y = x + \\\n  x\\\n").encode(),
    "string-escapes": (HEADER + 'let y = gelu(x, approximate="\\x00\\N{BOGUS}\\u12")\n').encode(),
    "only-sections": b"param:\ninput:\noutput:\n",
    "checkpoint-only": b"checkpoint hf:\n  x <- \"a\"\n",
    "many-errors": (HEADER + "".join(f"let v{i} = nope{i}\n" for i in range(3_000)) + "let y = x\n").encode(),
}


@pytest.mark.parametrize("name", list(EXTREMES))
def test_extreme_inputs(name):
    check_robust(EXTREMES[name], f"{name}.snf")


def test_bom_and_crlf_change_nothing():
    plain = analyze(Source.from_bytes("m.snf", SMALL_MLP.encode()))
    damaged = analyze(Source.from_bytes("m.snf", EXTREMES["bom-crlf"]))
    assert plain.ok and damaged.ok
    def without_hash(code: str) -> list[str]:  # the spec's sha256 is of its bytes (header and SPEC table)
        return [line for line in code.split("\n")[2:] if "'sha256'" not in line]
    assert without_hash(generate_source(plain)) == without_hash(generate_source(damaged))


def test_seeds_are_valid():
    for data in SEEDS:
        result = analyze(Source.from_bytes("seed.snf", data))
        assert result.ok, result.diagnostics
    check_robust(SEEDS[0])


# ------------------------------------------------------------------------------ the CLI

CLI_CASES = ["10k-parens", "invalid-utf8", "nul-bytes", "utf16", "a+a+...", "huge-int-default", "many-errors",
             "control-chars", "10k-open-parens"]


def test_cli_never_crashes_on_hostile_files(tmp_path):
    """Three runs of `python -m snf check` over a folder of hostile files, one per output format."""
    for name in CLI_CASES:
        (tmp_path / f"{name.replace('+', 'p').replace('.', '_')}.snf").write_bytes(EXTREMES[name])
    (tmp_path / "truncated.snf").write_bytes(SEEDS[2][: len(SEEDS[2]) // 3])
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1")
    files = sorted(tmp_path.glob("*.snf"))
    for fmt in ("text", "json", "github"):
        proc = subprocess.run([sys.executable, "-m", "snf", "check", "--format", fmt, str(tmp_path)], cwd=ROOT,
                              env=env, capture_output=True, timeout=300)
        out = proc.stdout.decode("utf-8", "replace") + proc.stderr.decode("utf-8", "replace")
        assert proc.returncode == 1, f"{fmt}: exit {proc.returncode}\n{out[-3000:]}"
        assert "Traceback" not in out, out[-3000:]
        assert "\x1b" not in out
        for f in files:  # every file got its diagnostics
            assert f.name in out, f"{fmt}: nothing reported for {f.name}"
