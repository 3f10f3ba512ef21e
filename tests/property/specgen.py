"""Random well-typed SNF specs, built from the op registry, and near-miss mutants of them.

`build(chooser)` writes one spec as text, tracking symbolic shapes with its own polynomial
model (`poly.Poly`), and returns it with the hints the runner needs: each config field's and
run-time dim's sampling domain, and the value range of integer inputs. Every choice goes
through a `Chooser`, so Hypothesis can drive (and shrink) it, or a seeded `random.Random`.

What it covers (issue 10's list): layer loops with carried values and per-layer writes, `full`
inside loops, KV caches (`past_X` optional inputs concatenated per layer, `new_X` outputs) with
and without `assert T_past + T <= max_len`, optional inputs and conditional parameters,
reshape, concat, slice (negative and symbolic bounds), indexing and broadcasting, every dtype
the language names, and each op in `snf/ops/core.py` (`OP_COVERAGE` says where).

`mutants(text, chooser)` makes near misses of a spec: a dim swapped or renamed, a guard dropped,
a slice bound off by one, a dtype changed, an index moved, an assert dropped, a line deleted.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

import known
from poly import Poly

FLOATS = ("float32", "float64", "float16", "bfloat16")


def activations() -> list[str]:
    """The registry's activations, in its order (gelu, relu, silu): its elementwise ops of one float
    tensor `x` whose other params are static with defaults, called here with `x` alone. Read from the
    registry so that a new activation is drawn with no change here (docs/architecture.md)."""
    from snf.ops import all_ops
    from snf.ops.registry import REQUIRED
    return [name for name, op in all_ops().items()
            if op.elementwise and (op.params[0].name, op.params[0].kind) == ("x", "tensor")
            and all(p.static and p.default is not REQUIRED for p in op.params[1:])]
INTS = ("int64", "int32")
DTYPES = FLOATS + INTS + ("bool",)


# ----------------------------------------------------------------------------- choosers

class RandomChooser:
    def __init__(self, seed: int):
        self.r = random.Random(seed)

    def int(self, lo: int, hi: int) -> int:
        return self.r.randint(lo, hi)

    def coin(self, p: float) -> bool:
        return self.r.random() < p

    def pick(self, seq):
        seq = list(seq)
        return seq[self.r.randrange(len(seq))]


class HypothesisChooser:
    """Choices drawn from Hypothesis' `data`, so failing specs shrink: towards small integers,
    coins that come up False, and the first item of each list (put the simplest first)."""

    def __init__(self, data):
        from hypothesis import strategies as st
        self.data, self.st = data, st

    def int(self, lo: int, hi: int) -> int:
        return self.data.draw(self.st.integers(lo, hi))

    def coin(self, p: float) -> bool:
        return self.data.draw(self.st.integers(0, 99)) >= 100 - round(p * 100)

    def pick(self, seq):
        seq = list(seq)
        return seq[self.data.draw(self.st.integers(0, len(seq) - 1))]


# ----------------------------------------------------------------------------- types

@dataclass(frozen=True)
class T:
    shape: tuple
    dtype: str

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOATS


@dataclass
class E:
    """An expression: text, precedence of its outermost operator, and type."""

    text: str
    prec: int
    ty: T | None = None
    scalar: str | None = None  # int | float | bool, for scalar expressions

    def at(self, prec: int) -> str:
        return self.text if self.prec >= prec else f"({self.text})"


@dataclass
class Local:
    ty: T
    kind: str  # local | input | param
    optional: bool = False  # may be None: an optional input, or a conditional value
    cond: str | None = None  # the config flag under which a conditional parameter exists
    group: str | None = None  # the optional inputs that come together (share a run-time dim)
    fresh: bool = True  # holds storage of its own (not a view or alias of another value)
    read: bool = False  # read since it was last bound
    hidden: bool = False  # not to be read for now (written per layer in the open loop)
    frozen: bool = False  # not to be re-assigned for now (written per layer as it is)


@dataclass
class Spec:
    text: str
    domains: dict  # config field or run-time dim -> the values to sample
    int_high: dict  # integer input -> exclusive upper bound of its values (a dim text or an int)
    features: frozenset
    masks: frozenset = frozenset()  # inputs that are padding masks (key 0 always visible)
    name: str = "prop"


# precedence levels, as grammars/snf.lark parses them
COND, OR, AND, NOT, CMP, ADD, MUL, UNARY, POW, ATOM = 0, 1, 2, 3, 4, 10, 20, 30, 40, 50


def binop(a: E, op: str, b: E, ty: T | None, scalar: str | None = None) -> E:
    if op == "**":
        return E(f"{a.at(ATOM)} ** {b.at(UNARY)}", POW, ty, scalar)
    prec = ADD if op in "+-" else MUL
    return E(f"{a.at(prec)} {op} {b.at(prec + 1)}", prec, ty, scalar)


def call(name: str, *args: str, ty: T | None = None, scalar: str | None = None, **kw: str) -> E:
    parts = list(args) + [f"{k}={v}" for k, v in kw.items()]
    return E(f"{name}({', '.join(parts)})", ATOM, ty, scalar)


def lit(x) -> E:
    if isinstance(x, float):
        return E(repr(x), ATOM, scalar="float")
    return E(str(x), ATOM if x >= 0 else UNARY, scalar="int")


# ----------------------------------------------------------------------------- the generator

class Gen:
    def __init__(self, ch, avoid=None):
        self.ch = ch
        # open findings (known.OPEN) whose constructs are not built
        self.avoid = set(known.OPEN if avoid is None else avoid)
        self.fields: list[str] = []  # param: lines
        self.derived: list[str] = []
        self.inputs: list[str] = []
        self.params: list[str] = []
        self.buffers: list[str] = []
        self.outputs: list[str] = []
        self.asserts: list[str] = []
        self.body: list[str] = []
        self.indent = 0
        self.scopes: list[dict] = [{}]
        self.present: set = set()  # optional values known to exist here
        self.flags_true: set = set()  # config flags known true here
        self.loop: dict | None = None
        self.counter = 0
        self.domains: dict = {}
        self.lows: dict = {}
        self.int_high: dict = {}
        self.masks: set = set()
        self.features: set = set()
        self.factor: dict = {}  # Poly -> (a, b): a known factorisation (D = H * hd)
        self.dims: list[Poly] = []  # dims worth reusing in new shapes
        self.used_names: set = set()
        self.after_loop: list = []
        self.runtime_names: set = set()

    # ------------------------------------------------------------------ helpers
    def fresh(self, stem: str) -> str:
        self.counter += 1
        name = f"{stem}{self.counter}"
        self.used_names.add(name)
        return name

    def emit(self, line: str) -> None:
        self.body.append("    " * self.indent + line)

    def lookup(self, name: str) -> Local | None:
        for s in reversed(self.scopes):
            if name in s:
                return s[name]
        return None

    def bind(self, name: str, e: E, optional: bool = False, fresh: bool = True) -> str:
        self.reads(e.text)
        self.emit(f"let {name} = {e.text}")
        self.scopes[-1][name] = Local(e.ty, "local", optional, fresh=fresh)
        return name

    def let(self, e: E, stem: str = "v", fresh: bool = True) -> str:
        return self.bind(self.fresh(stem), e, fresh=fresh)

    def reassigned(self, name: str, certain: bool = True) -> None:
        """`name = ...`: fresh storage, unread, when the assignment surely runs."""
        v = self.lookup(name)
        if certain:
            v.fresh, v.read = True, False
        self.note_write(name)

    def visible(self, pred=lambda n, v: True, allow_optional: bool = False) -> list[str]:
        out = []
        for scope in self.scopes:
            for n, v in scope.items():
                if v.ty is None:
                    continue
                usable = not v.optional or n in self.present or (v.cond and v.cond in self.flags_true)
                if v.hidden:
                    continue
                if (usable or allow_optional) and pred(n, v):
                    out.append(n)
        return list(dict.fromkeys(out))

    def reads(self, text: str) -> None:
        """Every value `text` names is read (a view of it may exist from here on)."""
        for name in set(re.findall(r"[A-Za-z_]\w*", text)):
            v = self.lookup(name)
            if v is not None and v.ty is not None:
                self.ref(name)

    def ref(self, name: str) -> E:
        v = self.lookup(name)
        v.read = True
        if self.loop is not None:
            self.loop["reads"].add(name)
            if v.kind in ("local", "input") and name in self.scopes[0]:
                self.loop["outer_reads"] = True
        return E(name, ATOM, v.ty)

    def floats(self, pred=lambda t: True) -> list[str]:
        return self.visible(lambda n, v: v.ty.is_float and pred(v.ty))

    def pick_float(self, pred=lambda t: True) -> E | None:
        names = self.floats(pred)
        if not names:
            return None
        recent = names[-4:]
        return self.ref(self.ch.pick(recent if self.ch.coin(0.6) else names))

    def render(self, d: Poly) -> str:
        return d.render()

    def shape_text(self, shape) -> str:
        return "[" + ", ".join(self.render(d) for d in shape) + "]"

    def low(self, d: Poly) -> int:
        return d.minimum(self.lows)

    def static(self, *dims) -> bool:
        """Whether dims use params only (a parameter's shape may not use run-time dims)."""
        return not any(d.names() & self.runtime_names for d in dims)

    def param(self, shape, dtype: str, stem: str = "w", cond: str | None = None, init: str | None = None,
              stacked: bool = False, buffer: bool = False) -> E:
        """A new parameter (per layer inside a loop: declared [n_layer, ...], read as w[l]). The
        model's floating tensors share one dtype (`self.fdt`): one of another floating dtype is
        declared in it and read through a `cast`."""
        name = self.fresh(stem)
        buffer = buffer or dtype not in FLOATS  # a parameter is trained, so it is floating
        wanted, dtype = dtype, (self.fdt if dtype in FLOATS else dtype)
        decl_shape = ((Poly.of("n_layer"),) if stacked else ()) + tuple(shape)
        line = f"  {name} : Tensor({self.shape_text(decl_shape)}, {dtype})"
        if cond:
            line += f" if {cond} else None"
        if init:
            line += f" = {init}"
        (self.buffers if buffer else self.params).append(line)
        self.scopes[0][name] = Local(T(decl_shape, dtype), "param", bool(cond), cond, hidden=stacked)
        ref = f"{name}[{self.loop['var']}]" if stacked else name
        if wanted != dtype:
            return E(f"cast({ref}, {wanted})", ATOM, T(tuple(shape), wanted))
        return E(ref, ATOM, T(tuple(shape), dtype))

    def weight(self, shape, dtype, **kw) -> E:
        stacked = self.loop is not None and self.ch.coin(0.8)
        return self.param(shape, dtype, stacked=stacked, **kw)

    def config(self, name: str, kind: str, default, domain=None) -> None:
        self.fields.append(f"  {name} : {kind} = {default!r}")
        if domain is not None:
            self.domains[name] = list(domain)
            if kind == "int":
                self.lows[name] = min(domain)
        self.scopes[0][name] = Local(None, "config")

    def runtime(self, name: str, domain) -> Poly:
        self.runtime_names.add(name)
        self.domains[name] = list(domain)
        self.lows[name] = min(domain)
        return Poly.of(name)

    # ------------------------------------------------------------------ config and inputs
    def setup(self) -> None:
        ch = self.ch
        self.fdt = ch.pick(["float32"] * 6 + ["float64", "float16", "bfloat16"])
        self.features.add(f"dtype:{self.fdt}")
        self.idt = ch.pick(["int64", "int64", "int32"])
        self.config("n_layer", "int", ch.int(1, 3), [1, 2, 3])
        if ch.coin(0.5):  # D = H * hd: divisible by construction
            self.config("H", "int", ch.pick([2, 1, 3]), [1, 2, 3])
            self.config("hd", "int", ch.pick([4, 2]), [2, 4])
            self.derived.append("  D = H * hd")
            self.D = Poly.of("H") * Poly.of("hd")
            self.lows["D"] = 2
        else:  # hd = D // H: a constraint D % H == 0 that some sampled configs break
            self.config("D", "int", 8, [4, 6, 8])
            self.config("H", "int", 2, [1, 2])
            self.derived.append("  hd = D // H")
            self.D = Poly.of("D")
            self.lows["hd"] = 2
            self.factor[self.D] = (Poly.of("H"), Poly.of("hd"))
            self.features.add("op:floordiv")
        self.H, self.hd = Poly.of("H"), Poly.of("hd")
        self.config("V", "int", ch.pick([11, 7]), [5, 7, 11])
        self.config("F", "int", ch.pick([6, 3]), [1, 3, 6])
        self.config("max_len", "int", 10, [8, 10, 12])
        self.config("use_bias", "bool", ch.coin(0.5), [True, False])
        self.config("flag", "bool", ch.coin(0.5), [True, False])
        self.config("scale", "float", 0.5)
        self.config("rate", "float", 0.0)
        self.config("W", "int", ch.pick([2, 1, 3]), [1, 2, 3])  # an attention window
        self.derived.append("  inv = 1.0 / sqrt(hd)")
        # integers from floats: a dim computed with int / floor / ceil / round
        fn = ch.pick(["int", "floor", "ceil", "round"])
        self.derived.append(f"  Q = {fn}(F * 0.5) + 1")
        self.features.add(f"op:{fn}")
        self.lows["Q"] = 1
        self.scopes[0]["inv"] = Local(None, "config")
        self.B = self.runtime("B", [1, 2, 3])
        self.T = self.runtime("T", [1, 2, 3, 4])
        self.dims = [self.D, self.H, self.hd, Poly.of("F"), Poly.of("V"), self.T, self.B, Poly.of("Q")]
        for atom, tag in (("(hd % 3 + 1)", "op:mod"), ("(F // 2 + 1)", "op:floordiv")):  # dims with % and //
            if ch.coin(0.3):
                self.lows[atom] = 1
                self.dims.append(Poly.of(atom))
                self.features.add(tag)

    def add_input(self, name: str, shape, dtype: str, optional: bool = False, group: str | None = None) -> None:
        self.inputs.append(f"  {name} : Tensor({self.shape_text(shape)}, {dtype}){'?' if optional else ''}")
        self.scopes[0][name] = Local(T(tuple(shape), dtype), "input", optional, group=group)

    def main_input(self) -> None:
        ch = self.ch
        self.lm = ch.coin(0.5)
        self.cache = self.lm and ch.coin(0.6)
        if self.cache:
            self.Tp = self.runtime("T_past", [0, 1, 2, 3])
            self.features.add("cache")
        if self.lm:
            self.add_input("idx", (self.B, self.T), self.idt)
            self.int_high["idx"] = "V"
            emb = self.param((Poly.of("V"), self.D), self.fdt, stem="emb")
            x = call("gather", emb.text, "idx", ty=T((self.B, self.T, self.D), self.fdt),
                     **({"axis": "0"} if ch.coin(0.5) else {}))
            self.features.add("lm")
        else:
            self.add_input("x0", (self.B, self.T, self.D), self.fdt)
            x = self.ref("x0")
        if ch.coin(0.6):  # positions: a table sliced to the tokens' positions
            table = self.param((Poly.of("max_len"), self.D), self.fdt, stem="pos",
                               buffer=ch.coin(0.5), init=ch.pick([None, "sinusoidal", "normal(std=0.1)"]))
            start = self.Tp if self.cache else Poly.of(0)
            lo = start.render() if self.cache else ch.pick(["", "0"])
            hi = (start + self.T).render()
            pos = E(f"{table.text}[{lo}:{hi}, :]" if ch.coin(0.7) else f"slice({table.text}, [{lo}:{hi}, :])",
                    ATOM, T((self.T, self.D), self.fdt))
            x = binop(x, "+", pos, x.ty)
            self.features.add("positions")
            if self.cache and ch.coin(0.6):
                self.asserts.append("assert T_past + T <= max_len")
                self.features.add("assert-cache-bound")
        self.x = self.bind("x", x, fresh=x.text != "x0")

    def optional_inputs(self) -> None:
        ch = self.ch
        if ch.coin(0.35):
            self.add_input("extra", (self.B, self.T, self.D), self.fdt, optional=True)
            self.features.add("optional-input")
        if ch.coin(0.25):
            self.S = self.runtime("S", [1, 2, 3])
            self.add_input("mem", (self.B, self.S, self.D), self.fdt, optional=ch.coin(0.5))
            self.features.add("second-length")
        if ch.coin(0.2) and not self.cache:
            dt = ch.pick(["bool", "int64"])
            self.add_input("mask", (self.B, self.T), dt, optional=True)
            self.masks.add("mask")
            if dt != "bool":
                self.int_high["mask"] = 2
            self.features.add("mask")
        if self.lm and ch.coin(0.3):
            self.add_input("targets", (self.B, self.T), "int64", optional=True)  # class indices are int64
            self.int_high["targets"] = "V"

    # ------------------------------------------------------------------ statements
    def statement(self) -> None:
        kinds = [
            (self.s_unary, 3), (self.s_binary, 4), (self.s_linear, 3), (self.s_matmul, 1), (self.s_norm, 2),
            (self.s_reshape, 2), (self.s_transpose, 1), (self.s_concat, 2), (self.s_slice, 3), (self.s_index, 2),
            (self.s_full, 2), (self.s_setitem, 2), (self.s_assign, 1), (self.s_argmax, 1), (self.s_attention, 2),
            (self.s_int_math, 1), (self.s_cond_value, 2), (self.s_guarded, 2), (self.s_if_block, 1),
            (self.s_shape_of, 1), (self.s_gather, 1), (self.s_update, 2), (self.s_softmax, 1),
            (self.s_compare, 2), (self.s_elementwise, 2), (self.s_cast, 1), (self.s_arange, 1), (self.s_expand, 1),
            (self.s_repeat, 1), (self.s_reduce, 2), (self.s_routing, 1), (self.s_recurrent, 1),
        ]
        for _ in range(4):
            fn = self.ch.pick([f for f, w in kinds for _ in range(w)])
            if fn() is not False:
                return

    def s_unary(self):
        v = self.pick_float()
        if v is None:
            return False
        f = self.ch.pick(activations() + ["tanh", "neg", "exp", "sqrt", "log", "dropout", "gelu_tanh",
                                          "pow", "swiglu", "sigmoid", "sin", "cos", "softcap"])
        self.features.add(f"op:{f}")
        if f == "gelu_tanh":
            self.features.add("op:gelu")
            e = call("gelu", v.text, ty=v.ty, approximate='"tanh"')
        elif f == "neg":
            e = E(f"-{v.at(UNARY)}", UNARY, v.ty)
        elif f == "exp":
            e = call("exp", binop(v, "*", lit(0.5), v.ty).text, ty=v.ty)
        elif f == "sqrt":
            e = call("sqrt", binop(binop(v, "*", v, v.ty), "+", lit(1.0), v.ty).text, ty=v.ty)
        elif f == "log":
            e = call("log", binop(call("exp", v.text, ty=v.ty), "+", lit(1.0), v.ty).text, ty=v.ty)
        elif f == "dropout":
            e = call("dropout", v.text, ty=v.ty, **{self.ch.pick(["rate", "p"]): "rate"})
        elif f == "pow":
            e = binop(v, "**", lit(self.ch.pick([2, 2.0, 3])), v.ty)
        elif f == "softcap":
            e = call("softcap", v.text, self.ch.pick(["2.0", "30.0", "inv"]), ty=v.ty)
        elif f == "swiglu":
            names = self.visible(lambda n, x: x.ty == v.ty)
            e = call("swiglu", v.text, self.ref(self.ch.pick(names)).text if names else v.text, ty=v.ty)
        else:
            e = call(f, v.text, ty=v.ty)
        self.let(e, fresh=f != "dropout")  # dropout outside training returns its input

    def other_operand(self, v: E) -> E:
        """Something `v` may be combined with elementwise: equal shape, broadcast, or a number."""
        ch = self.ch
        t = v.ty
        options = ["scalar", "config", "same", "bias", "full"]
        kind = ch.pick(options)
        if kind == "same":
            names = self.visible(lambda n, x: x.ty == t)
            if names:
                return self.ref(ch.pick(names))
            kind = "bias"
        if kind == "bias" and t.rank >= 1 and t.is_float and self.static(t.shape[-1]):
            self.features.add("broadcast")
            return self.weight((t.shape[-1],), t.dtype, stem="b", init=ch.pick([None, "ones", "zeros",
                                                                                "constant(value=0.5)"]))
        if kind == "full" and t.rank >= 1 and self.full_ok():
            self.features.add("broadcast")
            self.features.add("op:full")
            shape = tuple(d if ch.coin(0.5) else Poly.of(1) for d in t.shape)
            if ch.coin(0.3):
                shape = shape[1:]
            return call("full", self.shape_text(shape), self.fill_value(t.dtype, [0.5, 2.0, 1.0]),
                        *( [t.dtype] if ch.coin(0.7) or t.dtype != "float32" else []), ty=T(shape, t.dtype))
        if kind == "config" and t.is_float:
            return E(ch.pick(["scale", "inv"]), ATOM, scalar="float")
        return lit(ch.pick([2, 3, 0.5, 1.5]) if t.is_float else ch.pick([2, 3, 1]))

    def fill_value(self, dtype: str, options) -> str:
        if dtype not in FLOATS:  # a value the dtype holds exactly (the rule of `full`)
            options = [float(int(o)) for o in options] if dtype != "bool" else [0.0, 1.0]
        return repr(float(self.ch.pick(options)))

    def full_ok(self) -> bool:
        """`full` inside a loop that writes per layer reads a written value (issue 9 #3)."""
        if self.loop is None:
            return True
        return self.loop.get("outer_reads") or "loop-device" not in self.avoid

    def s_binary(self):
        ch = self.ch
        names = self.visible(lambda n, x: x.ty.rank > 0 and (x.ty.is_float or x.ty.dtype in INTS))
        if not names:
            return False
        v = self.ref(ch.pick(names[-4:] if ch.coin(0.7) else names))
        w = self.other_operand(v)
        op = ch.pick(["+", "-", "*", "/"] if v.ty.is_float else ["+", "*", "-"])
        if ch.coin(0.5):
            v, w = w, v
        # keep the divisor away from 0, after the swap: a quotient of a near-0 bf16 value amplifies
        # compiled-against-eager rounding past any tolerance (long-mode seed 51243)
        if op == "/" and w.ty is not None:
            w = binop(binop(w, "*", w, w.ty), "+", lit(1.0), w.ty)
        self.features.add(f"op:{ {'+': 'add', '-': 'sub', '*': 'mul', '/': 'div'}[op]}")
        ty = v.ty if v.ty is not None else w.ty
        if v.ty is not None and w.ty is not None:
            ty = T(broadcast(v.ty.shape, w.ty.shape), ty.dtype)
        if not ty.is_float:
            self.features.add(f"int-math:{ty.dtype}")
        self.let(binop(v, op, w, ty))

    def s_linear(self):
        ch = self.ch
        v = self.pick_float(lambda t: t.rank >= 1 and self.static(t.shape[-1]))
        if v is None:
            return False
        d_in = v.ty.shape[-1]
        d_out = ch.pick([d_in, self.D, Poly.of("F"), 2 * self.D, self.hd])
        w = self.weight((d_out, d_in), v.ty.dtype, init=ch.pick([None, None, "normal(std=0.2)", "zeros"]))
        kw = {"weight": w.text}
        b = ch.pick(["none", "plain", "cond"])
        if b != "none":
            bias = self.weight((d_out,), v.ty.dtype, stem="bias", cond="use_bias" if b == "cond" else None)
            kw["bias"] = bias.text
            if b == "cond":
                self.features.add("conditional-param")
        args = [v.text] if ch.coin(0.7) else []
        if not args:
            kw = {"x": v.text, **kw}
        self.features.add("op:linear")
        self.let(call("linear", *args, ty=T(v.ty.shape[:-1] + (d_out,), v.ty.dtype), **kw))

    def s_matmul(self):
        ch = self.ch
        v = self.pick_float(lambda t: t.rank >= 2)
        if v is None:
            return False
        self.features.add("op:matmul")
        if ch.coin(0.5) and self.static(v.ty.shape[-1]):
            m = ch.pick([self.D, Poly.of("F"), Poly.of(3)])
            w = self.weight((v.ty.shape[-1], m), v.ty.dtype)
            ty = T(v.ty.shape[:-1] + (m,), v.ty.dtype)
        else:
            r = v.ty.rank
            w = call("transpose", v.text, ty=T(v.ty.shape[:-2] + (v.ty.shape[-1], v.ty.shape[-2]), v.ty.dtype),
                     **({"a": str(r - 2), "b": str(r - 1)} if ch.coin(0.5) else {}))
            ty = T(v.ty.shape[:-1] + (v.ty.shape[-2],), v.ty.dtype)
        e = binop(v, "@", w, ty) if ch.coin(0.7) else call("matmul", v.text, w.text, ty=ty)
        if "transpose" in w.text:
            self.features.add("op:transpose")
        self.let(e)

    def s_norm(self):
        ch = self.ch
        v = self.pick_float(lambda t: t.rank >= 1 and self.static(t.shape[-1]))
        if v is None:
            return False
        last = v.ty.shape[-1]
        kind = ch.pick(["layer_norm", "rms_norm"])
        self.features.add(f"op:{kind}")
        kw = {}
        if ch.coin(0.7):
            cond = "use_bias" if ch.coin(0.3) else None
            kw["weight"] = self.weight((last,), v.ty.dtype, stem="g", cond=cond).text
        if kind == "layer_norm" and ch.coin(0.5):
            kw["bias"] = self.weight((last,), v.ty.dtype, stem="bias",
                                     cond="use_bias" if ch.coin(0.5) else None).text
        if ch.coin(0.3):
            kw["eps"] = ch.pick(["1e-5", "0.001"])
        self.let(call(kind, v.text, ty=v.ty, **kw))

    def s_reshape(self):
        ch = self.ch
        v = self.pick_float(lambda t: t.rank >= 1)
        if v is None:
            return False
        s = list(v.ty.shape)
        last = s[-1]
        split = self.factor.get(last) or ((self.H, self.hd) if last == self.D else None)
        if split and ch.coin(0.6):
            new = s[:-1] + list(split)
        elif len(s) >= 2 and ch.coin(0.7):
            a, b = s[-2], s[-1]
            merged = a * b
            if (a, b) in ((self.H, self.hd),):
                merged = self.D
            new = s[:-2] + [merged]
        elif len(s) >= 2:
            new = [s[0] * s[1]] + s[2:]
        else:
            return False
        self.features.add("op:reshape")
        self.let(call("reshape", v.text, self.shape_text(new), ty=T(tuple(new), v.ty.dtype)), fresh=False)

    def s_transpose(self):
        v = self.pick_float(lambda t: t.rank >= 2)
        if v is None:
            return False
        r = v.ty.rank
        a, b = self.ch.int(0, r - 1), self.ch.int(0, r - 1)
        s = list(v.ty.shape)
        s[a], s[b] = s[b], s[a]
        neg = self.ch.coin(0.3)
        self.features.add("op:transpose")
        self.let(call("transpose", v.text, str(a - r if neg else a), str(b), ty=T(tuple(s), v.ty.dtype)), fresh=False)

    def s_concat(self):
        ch = self.ch
        names = self.visible(lambda n, x: x.ty.rank >= 1)
        if not names:
            return False
        v = self.ref(ch.pick(names))
        r = v.ty.rank
        axis = ch.int(0, r - 1)
        d = v.ty.shape[axis]
        if ch.coin(0.5) and self.low(d) >= 2:  # split along `axis` and put it back together
            k = ch.int(1, min(self.low(d) - 1, 3))
            head = ", ".join([":"] * axis)
            pre = head + ", " if head else ""
            a = E(f"{v.at(ATOM)}[{pre}0:{k}]", ATOM)
            b = E(f"{v.at(ATOM)}[{pre}{k}:]", ATOM)
            parts, total = [b.text, a.text], d
            self.features.add("slice-open-end")
        else:
            others = self.visible(lambda n, x: x.ty.dtype == v.ty.dtype and x.ty.rank == r and all(
                p == q for i, (p, q) in enumerate(zip(x.ty.shape, v.ty.shape)) if i != axis))
            w = self.ref(ch.pick(others))
            parts, total = [v.text, w.text], d + w.ty.shape[axis]
            if ch.coin(0.3):
                parts.append(v.text)
                total = total + d
        s = list(v.ty.shape)
        s[axis] = total
        neg = ch.coin(0.3)
        kw = {ch.pick(["axis", "dim"]): str(axis - r if neg else axis)}
        self.features.add("op:concat")
        self.let(call("concat", f"[{', '.join(parts)}]", ty=T(tuple(s), v.ty.dtype), **kw))

    def slice_item(self, d: Poly) -> tuple[str, Poly | None]:
        """One subscript item for an axis of size d: (text, new size or None when it drops the axis)."""
        ch = self.ch
        lo_d = self.low(d)
        kinds = ["all", "const", "open", "neg_start", "neg_end", "index", "neg_index", "sym"]
        kind = ch.pick(kinds)
        if kind == "const" and lo_d >= 1:
            a = ch.int(0, lo_d - 1)
            b = ch.int(a + 1, lo_d)
            return f"{a}:{b}", Poly.of(b - a)
        if kind == "open" and lo_d >= 1:
            a = ch.int(0, lo_d - 1)
            return f"{a}:", d - a
        if kind == "neg_start" and lo_d >= 1:  # the last k entries
            k = ch.int(1, lo_d)
            self.features.add("slice-negative")
            return f"-{k}:", Poly.of(k)
        if kind == "neg_end" and lo_d >= 2:  # all but the last k
            k = ch.int(1, lo_d - 1)
            self.features.add("slice-negative")
            return f"{ch.pick(['', '0'])}:-{k}", d - k
        if kind == "index" and lo_d >= 1:
            self.features.add("index-int")
            return str(ch.int(0, lo_d - 1)), None
        if kind == "neg_index" and lo_d >= 1:
            self.features.add("index-negative")
            return f"-{ch.int(1, lo_d)}", None
        if kind == "sym" and d.is_sum is False and len(d.terms) == 1 and lo_d >= 1:
            # a symbolic bound: 0:d, or 1:d when d >= 2
            self.features.add("slice-symbolic")
            if lo_d >= 2 and ch.coin(0.5):
                return f"1:{d.render()}", d - 1
            return f"0:{d.render()}", d
        return ":", d

    def s_slice(self):
        ch = self.ch
        names = self.visible(lambda n, x: x.ty.rank >= 1)
        if not names:
            return False
        v = self.ref(ch.pick(names))
        n = ch.int(1, v.ty.rank)
        items, shape = [], []
        for d in v.ty.shape[:n]:
            text, new = self.slice_item(d)
            items.append(text)
            if new is not None:
                shape.append(new)
        shape += list(v.ty.shape[n:])
        if all(i == ":" for i in items) and ch.coin(0.5):
            return False
        if all(":" in i for i in items) and ch.coin(0.3):
            self.features.add("op:slice")
            e = call("slice", v.text, f"[{', '.join(items)}]", ty=T(tuple(shape), v.ty.dtype))
        else:
            self.features.add("op:index")
            e = E(f"{v.at(ATOM)}[{', '.join(items)}]", ATOM, T(tuple(shape), v.ty.dtype))
        self.let(e, fresh=False)

    def s_index(self):
        """Integer indices: constants, negative, and the loop variable into a per-layer buffer."""
        ch = self.ch
        if self.loop is not None:
            names = self.visible(lambda n, x: x.ty.rank >= 2 and x.ty.shape[0] == Poly.of("n_layer")
                                 and x.kind != "param")
            if names:
                v = self.ref(ch.pick(names))
                self.features.add("index-loopvar")
                self.let(E(f"{v.text}[{self.loop['var']}]", ATOM, T(v.ty.shape[1:], v.ty.dtype)), fresh=False)
                return
        names = self.visible(lambda n, x: x.ty.rank >= 1 and self.low(x.ty.shape[0]) >= 1)
        if not names:
            return False
        v = self.ref(ch.pick(names))
        d = v.ty.shape[0]
        i = ch.int(0, self.low(d) - 1)
        text = str(i) if ch.coin(0.6) else str(-1 - i)
        self.features.add("index-int")
        self.let(E(f"{v.at(ATOM)}[{text}]", ATOM, T(v.ty.shape[1:], v.ty.dtype)), fresh=False)

    def new_shape(self) -> tuple:
        ch = self.ch
        n = ch.int(1, 3)
        return tuple(ch.pick(self.dims + [Poly.of(2), Poly.of(1)]) for _ in range(n))

    def s_full(self):
        ch = self.ch
        if not self.full_ok():
            return False
        shape = self.new_shape()
        dtype = ch.pick([self.fdt] * 4 + list(DTYPES))
        value = self.fill_value(dtype, [0.0, 1.0, 0.5, 2.0, -1.0, 3.0])
        args = [self.shape_text(shape), value]
        if ch.coin(0.8) or dtype != "float32":
            args.append(dtype if ch.coin(0.7) else f"dtype={dtype}")
        self.features.add("op:full")
        if self.loop is not None:
            self.features.add("full-in-loop")
        if dtype != self.fdt:
            self.features.add(f"dtype:{dtype}")
        self.let(call("full", *args, ty=T(shape, dtype)), stem="z")

    def region(self, t: T) -> tuple[str, tuple] | None:
        items, shape = [], []
        for d in t.shape[:self.ch.int(1, t.rank)]:
            text, new = self.slice_item(d)
            items.append(text)
            if new is not None:
                shape.append(new)
        return ", ".join(items), tuple(shape) + t.shape[len(items):]

    def value_of(self, shape, dtype) -> E | None:
        names = self.visible(lambda n, x: x.ty == T(shape, dtype))
        if names and (self.ch.coin(0.5) or not self.full_ok()):
            name = self.ch.pick(names)
            if self.loop is not None and "per-layer-write-late" in self.avoid:
                self.lookup(name).frozen = True  # written as it is now: no later re-assignment in this loop
                self.loop["frozen"].add(name)
            return self.ref(name)
        if not self.full_ok():
            return None
        return call("full", self.shape_text(shape), self.fill_value(dtype, [0.0, 1.0, 2.5]), dtype,
                    ty=T(shape, dtype))

    def writable(self, name: str) -> bool:
        """Whether an indexed write into `name` is safe from the open aliasing findings."""
        v = self.lookup(name)
        if ("write-through-view" in self.avoid or "write-through-alias" in self.avoid) and (not v.fresh or v.read):
            return False
        if self.loop is not None and "loop-reads-written-slice" in self.avoid and name in self.loop["reads"]:
            return False
        if name in getattr(self, "cache_all", ()) and "static-cache-reassigned" in self.avoid:
            return False
        return True

    def written(self, name: str) -> None:
        if self.loop is not None and "loop-reads-written-slice" in self.avoid:
            self.lookup(name).hidden = True  # not read again in this loop
            self.loop["hidden"].add(name)
        self.note_write(name)

    def s_setitem(self):
        """`y[...] = value`: a region write into a `let` value (a per-layer write in a loop)."""
        ch = self.ch
        locals_ = [n for n in self.visible(lambda n, x: x.kind == "local" and x.ty.rank >= 1) if self.writable(n)]
        if not locals_:
            return False
        name = ch.pick(locals_)
        t = self.lookup(name).ty
        per_layer_ok = self.loop is not None and (self.loop.get("per_layer") or "loop-reads-written-slice" not in self.avoid)
        if per_layer_ok and t.shape[0] == Poly.of("n_layer") and ch.coin(0.8):
            sub = T(t.shape[1:], t.dtype)
            value = self.value_of(sub.shape, sub.dtype)
            if value is None:
                return False
            self.emit(f"{name}[{self.loop['var']}] = {value.text}")
            self.features.add("per-layer-write")
            self.written(name)
            return
        if self.loop is not None and "loop-reads-written-slice" in self.avoid:
            return False  # any write in a loop body is a write the Block hands back
        idx, shape = self.region(t)
        value = self.value_of(shape, t.dtype)
        if value is None:
            return False
        self.emit(f"{name}[{idx}] = {value.text}")
        self.features.add("setitem")
        self.written(name)

    def note_write(self, name: str) -> None:
        if self.loop is not None and name not in self.scopes[-1]:
            self.loop["carried"].add(name)

    def s_assign(self):
        v = self.pick_float(lambda t: t.rank >= 1)
        if v is None:
            return False
        idx, shape = self.region(v.ty)
        value = self.value_of(shape, v.ty.dtype)
        if value is None:
            return False
        self.features.add("op:assign")
        self.let(call("assign", v.text, f"[{idx}]", value.text, ty=v.ty))

    def s_argmax(self):
        v = self.pick_float(lambda t: t.rank >= 1)
        if v is None:
            return False
        r = v.ty.rank
        axis = self.ch.int(-r, r - 1)
        s = list(v.ty.shape)
        del s[axis]
        self.features.add("op:argmax")
        kw = {self.ch.pick(["axis", "dim"]): str(axis)} if self.ch.coin(0.7) or axis != -1 else {}
        name = self.let(call("argmax", v.text, ty=T(tuple(s), "int64"), **kw), stem="k")
        self.argmax_bound[name] = v.ty.shape[axis]

    def s_routing(self):
        """A router over 4 experts: top-k of a linear's scores, their one_hot, and moe_experts. In
        float32 and float64 only: a tie among bfloat16 scores could pick differently in torch and
        in the reference (docs/language.md 9.4a)."""
        ch = self.ch
        v = self.pick_float(lambda t: t.rank >= 1 and self.static(t.shape[-1]) and t.dtype in ("float32", "float64"))
        if v is None:
            return False
        d, e, k, dt, lead = v.ty.shape[-1], Poly.of(4), ch.pick([1, 2]), v.ty.dtype, v.ty.shape[:-1]
        scores = self.let(call("linear", v.text, ty=T(lead + (e,), dt), weight=self.weight((e, d), dt).text))
        self.features |= {"op:linear", "op:top_k", "op:top_k_indices"}
        top = self.let(call("top_k", scores, str(k), ty=T(lead + (Poly.of(k),), dt)))
        idx = self.let(call("top_k_indices", scores, str(k), ty=T(lead + (Poly.of(k),), "int64")), stem="k")
        self.argmax_bound[idx] = e  # its values index 4 rows
        if ch.coin(0.5):
            self.features.add("op:one_hot")
            hot = self.let(call("one_hot", idx, "4", ty=T(lead + (Poly.of(k), e), "int64")), stem="k")
            self.argmax_bound[hot] = Poly.of(2)  # zeros and ones
        f = Poly.of("F")
        kw = {"up": self.weight((e, f, d), dt).text, "down": self.weight((e, d, f), dt).text}
        if ch.coin(0.5):
            kw["gate"] = self.weight((e, f, d), dt).text
        if ch.coin(0.3):  # biases per expert (gpt-oss)
            kw["up_bias"], kw["down_bias"] = self.weight((e, f), dt).text, self.weight((e, d), dt).text
            if "gate" in kw:
                kw["gate_bias"] = self.weight((e, f), dt).text
            self.features.add("moe-bias")
        if "gate" in kw and ch.coin(0.3):  # gpt-oss's clamped SwiGLU
            kw.update(act='"clamped_swiglu"', alpha="1.702", limit=ch.pick(["0.5", "7.0"]))
            self.features.add("moe-clamped-swiglu")
        self.features.add("op:moe_experts")
        self.let(call("moe_experts", v.text, idx, top, ty=v.ty, **kw))

    def s_recurrent(self):
        """A recurrent op over a [X, Y, C] value (axis 1 is time): cumsum; the causal convolution of its
        channels; or projections of it into Mamba2's scan (2 heads of 2, B and C in 1 or 2 groups of 3)
        or the gated delta rule (1 or 2 key heads, 2 value heads), each with its `_state` twin or not."""
        ch = self.ch
        v = self.pick_float(lambda t: t.rank == 3 and self.static(t.shape[-1]))
        if v is None:
            return False
        (a, b, c), dt = v.ty.shape, v.ty.dtype
        kind = ch.pick(["cumsum", "conv", "ssd", "delta"])
        if kind == "cumsum":
            self.features.add("op:cumsum")
            self.let(call("cumsum", v.text, str(ch.int(-3, 2)), ty=v.ty))
            return
        if kind == "conv":
            k = ch.pick([1, 2, 3])
            w = self.weight((c, Poly.of(1), Poly.of(k)), dt)
            kw = {"weight": w.text}
            if ch.coin(0.5):
                kw["bias"] = self.weight((c,), dt, stem="bias").text
            self.features.add("op:causal_conv1d")
            self.let(call("causal_conv1d", v.text, ty=v.ty, **kw))
            if ch.coin(0.5):
                self.features.add("op:causal_conv1d_state")
                self.let(call("causal_conv1d_state", v.text, ty=T((a, Poly.of(k - 1), c), dt), **kw))
            return

        def heads(n: int, width: int, stem: str) -> str:
            w = self.weight((Poly.of(n * width), c), dt)
            return self.let(call("reshape", call("linear", v.text, ty=T((a, b, Poly.of(n * width)), dt),
                                                 weight=w.text).text, self.shape_text((a, b, Poly.of(n), Poly.of(width))),
                                 ty=T((a, b, Poly.of(n), Poly.of(width)), dt)), stem=stem)

        def per_head(fn: str, stem: str) -> str:
            w = self.weight((Poly.of(2), c), dt)
            inner = call("linear", v.text, ty=T((a, b, Poly.of(2)), dt), weight=w.text).text
            return self.let(call(fn, inner, ty=T((a, b, Poly.of(2)), dt)) if fn else
                            E(inner, ATOM, T((a, b, Poly.of(2)), dt)), stem=stem)
        self.features |= {"op:linear", "op:reshape"}
        if kind == "ssd":
            groups = ch.pick([1, 2])
            x, step = heads(2, 2, "x"), per_head(None, "dt")
            bm, cm = heads(groups, 3, "bm"), heads(groups, 3, "cm")
            a_log = self.weight((Poly.of(2),), dt)
            args = [x, step, f"-exp({a_log.text})", bm, cm]
            self.features |= {"op:exp", "op:neg", "op:ssd_scan"}
            kw = {"D": self.weight((Poly.of(2),), dt).text} if ch.coin(0.5) else {}
            self.let(call("ssd_scan", *args, ty=T((a, b, Poly.of(2), Poly.of(2)), dt), **kw))
            if ch.coin(0.5):
                self.features.add("op:ssd_state")
                self.let(call("ssd_state", *args, ty=T((a, Poly.of(2), Poly.of(2), Poly.of(3)), dt), **kw))
            return
        key_heads = ch.pick([1, 2])
        q, k, val = heads(key_heads, 3, "q"), heads(key_heads, 3, "k"), heads(2, 2, "v")
        gate, beta = per_head("sigmoid", "g"), per_head("sigmoid", "beta")
        args = [q, k, val, f"-{gate}", beta]
        self.features |= {"op:sigmoid", "op:neg", "op:gated_delta_rule"}
        self.let(call("gated_delta_rule", *args, ty=T((a, b, Poly.of(2), Poly.of(2)), dt)))
        if ch.coin(0.5):
            self.features.add("op:gated_delta_state")
            self.let(call("gated_delta_state", *args, ty=T((a, Poly.of(2), Poly.of(3), Poly.of(2)), dt)))

    def s_softmax(self):
        v = self.pick_float(lambda t: t.rank >= 1)
        if v is None:
            return False
        r = v.ty.rank
        axis = self.ch.int(-r, r - 1)
        self.features.add("op:softmax")
        self.let(call("softmax", v.text, ty=v.ty, **({"axis": str(axis)} if self.ch.coin(0.7) else {})))

    def number_for(self, t: T) -> E:
        """A number that may stand beside a tensor of `t`'s dtype (an int beside an integer one)."""
        return lit(self.ch.pick([0.5, -0.25, 1.0]) if t.is_float else self.ch.pick([1, 0, 2]))

    def partner(self, v: E) -> E:
        """A tensor of `v`'s dtype that broadcasts with it, or a number."""
        ch = self.ch
        same = self.visible(lambda n, x: x.ty == v.ty)
        if same and ch.coin(0.5):
            return self.ref(ch.pick(same))
        if v.ty.is_float and v.ty.rank >= 1 and self.static(v.ty.shape[-1]) and ch.coin(0.5):
            return self.weight((v.ty.shape[-1],), v.ty.dtype, stem="b")
        return self.number_for(v.ty)

    def s_compare(self):
        """A comparison of tensors (a bool tensor), and `where` picking by it."""
        ch = self.ch
        names = self.visible(lambda n, x: x.ty.rank >= 1 and x.ty.dtype != "bool")
        if not names:
            return False
        v = self.ref(ch.pick(names))
        w = self.partner(v)
        op = ch.pick(["<", "<=", ">", ">=", "==", "!="])
        shape = v.ty.shape if w.ty is None else broadcast(v.ty.shape, w.ty.shape)
        m = E(f"{v.at(CMP + 1)} {op} {w.at(CMP + 1)}", CMP, T(shape, "bool"))
        self.features.add({"<": "op:lt", "<=": "op:le", ">": "op:gt", ">=": "op:ge", "==": "op:eq", "!=": "op:ne"}[op])
        self.features.add("tensor-compare")
        name = self.let(m, stem="m")
        if ch.coin(0.4):
            name = self.mask_logic(name, shape)
        if ch.coin(0.7):
            a, b = (v, w) if ch.coin(0.5) else (w, v)
            out = shape
            for t in (a.ty, b.ty):
                if t is not None:
                    out = broadcast(out, t.shape)
            self.features.add("op:where")
            self.let(call("where", name, a.text, b.text, ty=T(out, v.ty.dtype)))

    def mask_logic(self, name: str, shape) -> str:
        """`and`, `or` or `not` of bool tensors (elementwise): the mask `name` with another of its shape."""
        ch = self.ch
        f = ch.pick(["and", "or", "not"])
        self.features.add(f"op:{f}")
        self.features.add("mask-logic")
        m = self.ref(name)
        if f == "not":
            return self.let(E(f"not {m.at(NOT)}", NOT, m.ty), stem="m")
        others = self.visible(lambda n, x: x.ty.dtype == "bool" and x.ty.shape == shape)
        other = self.ref(ch.pick(others)) if others else m
        prec = AND if f == "and" else OR
        return self.let(E(f"{m.at(prec)} {f} {other.at(prec + 1)}", prec, m.ty), stem="m")

    def s_reduce(self):
        """sum, mean, max or min over an axis, the axis dropped or kept."""
        ch = self.ch
        names = self.visible(lambda n, x: x.ty.rank >= 1 and x.ty.dtype != "bool")
        if not names:
            return False
        v = self.ref(ch.pick(names))
        r = v.ty.rank
        axis = ch.int(-r, r - 1)
        ops = ["sum", "max", "min"] if self.low(v.ty.shape[axis]) >= 1 else ["sum"]  # max of nothing: no value
        f = ch.pick(ops + (["mean"] if v.ty.is_float else []))
        keep = ch.coin(0.4)
        s = list(v.ty.shape)
        if keep:
            s[axis] = Poly.of(1)
        else:
            del s[axis]
        self.features.add(f"op:{f}")
        kw = {ch.pick(["axis", "dim"]): str(axis)} if ch.coin(0.8) or axis != -1 else {}
        if keep:
            kw[ch.pick(["keepdim", "keepdims"])] = "True"
        self.let(call(f, v.text, ty=T(tuple(s), v.ty.dtype), **kw), stem="k" if v.ty.dtype in INTS else "v")

    def s_elementwise(self):
        """abs, minimum, maximum, clamp, floor, ceil and round of a tensor."""
        ch = self.ch
        names = self.visible(lambda n, x: x.ty.rank >= 1 and x.ty.dtype != "bool")
        if not names:
            return False
        v = self.ref(ch.pick(names))
        f = ch.pick(["abs", "minimum", "maximum", "clamp", "floor", "ceil", "round"])
        if f in ("floor", "ceil", "round") and not v.ty.is_float:
            f = "abs"
        self.features.add(f"op:{f}")
        if f in ("minimum", "maximum"):
            w = self.partner(v)
            shape = v.ty.shape if w.ty is None else broadcast(v.ty.shape, w.ty.shape)
            args = (v.text, w.text) if ch.coin(0.6) else (w.text, v.text)
            e = call(f, *args, ty=T(shape, v.ty.dtype))
        elif f == "clamp":
            lo, hi = (lit(-1.0), lit(1.0)) if v.ty.is_float else (lit(0), lit(2))
            kw = ch.pick([{"min": lo.text, "max": hi.text}, {"min": lo.text}, {"max": hi.text}])
            e = call("clamp", v.text, ty=v.ty, **kw)
        else:
            e = call(f, v.text, ty=v.ty)
        self.let(e)

    def s_cast(self):
        ch = self.ch
        names = self.visible(lambda n, x: x.ty.rank >= 1)
        if not names:
            return False
        v = self.ref(ch.pick(names))
        dtype = ch.pick([self.fdt, self.fdt, "int64", "int32", "bool", "float64"])
        self.features.add("op:cast")
        self.let(call("cast", v.text, dtype, ty=T(v.ty.shape, dtype)), stem="k" if dtype in INTS else "v")

    def s_arange(self):
        ch = self.ch
        self.features.add("op:arange")
        if ch.coin(0.5):
            n = ch.pick([self.T, Poly.of("F"), self.D])
            self.let(call("arange", n.render(), ty=T((n,), "int64")), stem="k")
        else:
            dtype = ch.pick([self.fdt, "int64"])
            self.let(call("arange", "1", "F + 1", ty=T((Poly.of("F"),), dtype), dtype=dtype),
                     stem="k" if dtype in INTS else "v")

    def s_expand(self):
        v = self.pick_float(lambda t: t.rank >= 1)
        if v is None:
            return False
        lead = self.ch.pick([self.B, Poly.of(2), self.H, Poly.of(1)])
        shape = (lead,) + v.ty.shape
        self.features.add("op:expand")
        self.let(call("expand", v.text, self.shape_text(shape), ty=T(shape, v.ty.dtype)), fresh=False)

    def s_repeat(self):
        ch = self.ch
        v = self.pick_float(lambda t: t.rank >= 1)
        if v is None:
            return False
        axis = ch.int(0, v.ty.rank - 1)
        n = ch.pick([Poly.of(2), Poly.of(1), self.H])
        s = list(v.ty.shape)
        s[axis] = s[axis] * n
        self.features.add("op:repeat_interleave")
        self.let(call("repeat_interleave", v.text, n.render(), ty=T(tuple(s), v.ty.dtype),
                      **{ch.pick(["axis", "dim"]): str(axis)}))

    def s_gather(self):
        ch = self.ch
        ints = self.visible(lambda n, x: x.ty.dtype in INTS and x.ty.rank >= 1)
        ints = [n for n in ints if n in self.int_high or n in self.argmax_bound]
        if not ints:
            return False
        name = ch.pick(ints)
        t = self.lookup(name).ty
        if name in self.int_high:
            rows = Poly.of(self.int_high[name]) if isinstance(self.int_high[name], str) else None
        else:
            rows = self.argmax_bound.get(name)
        if rows is None or not self.static(rows):
            return False
        table_shape = (rows, self.D) if ch.coin(0.8) else (rows, Poly.of(2), self.hd)
        if len(table_shape) == 3:
            self.features.add("gather-3d")
        table = self.param(table_shape, self.fdt, stem="table")
        self.features.add("op:gather")
        self.let(call("gather", table.text, name, ty=T(t.shape + table_shape[1:], self.fdt)))

    argmax_bound: dict = {}

    def s_int_math(self):
        """Arithmetic on integer tensors, as the dtype rules allow it (docs/language.md 5.1): with
        integers, and powers that are constants >= 0; the near misses (`/`, a float, a bool
        tensor) are the mutants' job."""
        ch = self.ch
        names = self.visible(lambda n, x: x.ty.dtype in INTS and x.ty.rank >= 1)
        if not names:
            return False
        v = self.ref(ch.pick(names))
        op = ch.pick(["+", "*", "-", "**", "neg"])
        self.features.add(f"int-math:{v.ty.dtype}")
        if op == "neg":
            self.let(E(f"-{v.at(UNARY)}", UNARY, v.ty), stem="k")
            return
        w = lit(ch.pick([1, 2, 3]) if op != "**" else 2)
        self.let(binop(v, op, w, v.ty) if ch.coin(0.8) or op == "**" else binop(w, op, v, v.ty), stem="k")

    def guard_for(self) -> tuple[str, set, set] | None:
        """A condition, the optional values it proves present, and the flags it proves true."""
        ch = self.ch
        opts = [n for n in self.visible(lambda n, x: x.kind == "input" and x.optional, allow_optional=True)
                if n not in self.present]
        kind = ch.pick(["flag", "exists", "compare", "logic", "kind"])
        if kind == "kind" and self.loop is not None:  # a list param's item at the layer (n_layer <= 3)
            if "kinds" not in self.scopes[0]:  # its length declared, or computed (a Config check either way)
                if ch.coin(0.5):
                    self.config("kinds", "list[str, 3]", ["a", "b", "a"])
                else:
                    self.config("kinds", "list[str]", ["a", "b", "a"])
                    self.derived.append("  n_kinds = len(kinds)")
                    self.features.add("op:len")
            self.features |= {"list-param", "op:item"}
            return f"kinds[{self.loop['var']}] {ch.pick(['==', '!='])} {ch.pick(['a', 'b'])!r}", set(), set()
        if kind == "exists" and opts:
            n = ch.pick(opts)
            return f"{n} exists", {n} | self.group_of(n), set()
        if kind in ("compare", "logic"):
            conditions = _COMPARE if kind == "compare" else _LOGIC
            text = ch.pick(list(conditions))
            self.features |= {f"op:{tag}" for tag in conditions[text]}
            return text, set(), set()
        f = ch.pick(["flag", "use_bias"])
        return f, set(), {f}

    def group_of(self, name: str) -> set:
        return {n for s in self.scopes for n, v in s.items() if v.group and v.group == self.lookup(name).group
                and self.lookup(name).group}

    def s_cond_value(self):
        ch = self.ch
        v = self.pick_float()
        if v is None:
            return False
        cond, present, flags = self.guard_for()
        saved = (set(self.present), set(self.flags_true))
        self.present |= present
        self.flags_true |= flags
        opts = [n for n in self.visible(lambda n, x: x.optional and x.ty == v.ty and (
            n in self.present or x.cond in self.flags_true))]
        if opts and ch.coin(0.7):
            body = binop(v, "+", self.ref(ch.pick(opts)), v.ty)
            self.features.add("guarded-use")
        else:
            body = binop(v, "*", lit(2.0), v.ty)
        self.present, self.flags_true = saved
        orelse = "None" if ch.coin(0.2) and self.loop is None else v.text
        self.features.add("cond-value")
        if ch.coin(0.3) and orelse != "None":  # the indented form
            name = self.fresh("c")
            self.emit(f"let {name} = if {cond}:")
            self.emit(f"    {body.text}")
            self.emit(f"else: {orelse}")
            self.scopes[-1][name] = Local(v.ty, "local", fresh=False)
            return
        self.bind(self.fresh("c"), E(f"{body.at(OR)} if {cond} else {orelse}", COND, v.ty),
                  optional=orelse == "None", fresh=orelse == "None")
        if orelse == "None":
            self.features.add("optional-value")

    def reassignable(self) -> list[str]:
        cache = getattr(self, "cache_all", ()) if "static-cache-reassigned" in self.avoid else ()
        return [n for n in self.visible(lambda n, x: x.kind == "local" and x.ty.is_float and not x.optional
                                        and not x.frozen) if n not in cache]

    def update_expr(self, name: str) -> E:
        """A new value of `name`'s type, computed from it."""
        ch = self.ch
        v = self.ref(name)
        kind = ch.pick(["add", "act", "norm", "linear", "scale"])
        if kind == "act":
            return call(ch.pick(["gelu", "tanh", "silu"]), v.text, ty=v.ty)
        if kind == "norm" and v.ty.rank >= 1 and self.static(v.ty.shape[-1]):
            return call("rms_norm", v.text, ty=v.ty, weight=self.weight((v.ty.shape[-1],), v.ty.dtype, stem="g").text)
        if kind == "linear" and v.ty.rank >= 1 and self.static(v.ty.shape[-1]):
            d = v.ty.shape[-1]
            return binop(v, "+", call("linear", v.text, ty=v.ty, weight=self.weight((d, d), v.ty.dtype).text), v.ty)
        if kind == "scale":
            return binop(v, "*", E("scale", ATOM, scalar="float"), v.ty)
        return binop(v, "+", self.other_operand(v) if ch.coin(0.5) else v, v.ty)

    def s_guarded(self):
        names = self.reassignable()
        if not names:
            return False
        name = self.ch.pick(names)
        cond, present, flags = self.guard_for()
        saved = (set(self.present), set(self.flags_true))
        self.present |= present
        self.flags_true |= flags
        t = self.lookup(name).ty
        opts = [n for n in self.visible(lambda n, x: x.optional and x.ty == t and (
            n in self.present or x.cond in self.flags_true))]
        e = binop(self.ref(name), "+", self.ref(self.ch.pick(opts)), t) if opts else self.update_expr(name)
        self.present, self.flags_true = saved
        self.emit(f"{name} = {e.at(OR)} if {cond}")
        self.features.add("guarded-assign")
        self.reassigned(name, certain=False)

    def s_if_block(self):
        names = self.reassignable()
        if not names:
            return False
        cond, present, flags = self.guard_for()
        self.emit(f"if {cond}:")
        self.indent += 1
        saved = (set(self.present), set(self.flags_true))
        self.present |= present
        self.flags_true |= flags
        self.scopes.append({})
        name = self.ch.pick(names)
        t = self.lookup(name).ty
        opts = [n for n in self.visible(lambda n, x: x.optional and x.ty == t and (
            n in self.present or x.cond in self.flags_true))]
        e = binop(self.ref(name), "+", self.ref(self.ch.pick(opts)), t) if opts else self.update_expr(name)
        self.emit(f"{name} = {e.text}")
        self.reassigned(name, certain=False)
        self.scopes.pop()
        self.present, self.flags_true = saved
        self.indent -= 1
        if self.ch.coin(0.5):
            self.emit("else:")
            self.indent += 1
            self.emit(f"{name} = {self.update_expr(name).text}")
            self.indent -= 1
        self.features.add("if-block")

    def s_shape_of(self):
        v = self.pick_float(lambda t: t.rank >= 2)
        if v is None:
            return False
        i = self.ch.int(0, v.ty.rank - 1)
        shape = list(v.ty.shape)
        dims = ", ".join(f"{v.text}.shape[{k}]" if k == i else shape[k].render() for k in range(len(shape)))
        self.features.add("op:size")
        self.let(call("reshape", v.text, f"[{dims}]", ty=v.ty), fresh=False)

    def s_update(self):
        names = self.reassignable()
        if not names:
            return False
        name = self.ch.pick(names)
        self.emit(f"{name} = {self.update_expr(name).text}")
        self.reassigned(name)

    def s_attention(self):
        """Self-attention over a [B, T, D] value (with the KV cache in a loop of a cached spec),
        or cross-attention to `mem`."""
        ch = self.ch
        v = self.pick_float(lambda t: t.rank == 3 and t.shape == (self.B, self.T, self.D) and t.dtype == self.fdt)
        if v is None:
            return False
        fdt = self.fdt
        head = (self.B, self.T, self.H, self.hd)

        def proj(src: E, rows) -> E:
            w = self.weight((rows[2] * rows[3], self.D), fdt)
            return call("reshape", call("linear", src.text, w.text, ty=None).text,
                        self.shape_text(rows), ty=T(tuple(rows), fdt))

        q = self.bind(self.fresh("q"), proj(v, head))
        if ch.coin(0.4):
            q = self.bind(self.fresh("q"), call("rope", q, ty=T(head, fdt),
                                                **({"offset": "T_past"} if self.cache else {})))
            self.features.add("op:rope")
        src, keys_len = v, self.T
        cross = getattr(self, "S", None) is not None and ch.coin(0.4)
        if self.cache and self.loop is not None and not self.loop.get("cached"):
            cross = False  # the first attention of a cached loop uses the cache
        if cross:
            mem = self.lookup("mem")
            if mem.optional and "mem" not in self.present:
                cross = False
        if cross:
            src, keys_len = self.ref("mem"), self.S
        kv_heads = self.H
        if not (self.cache and self.loop is not None and not self.loop.get("cached")) and ch.coin(0.25):
            kv_heads = Poly.of(1)  # grouped-query attention: one key/value head for every query head
            self.features.add("attention-gqa")
        kshape = (self.B, keys_len, kv_heads, self.hd)
        k = self.bind(self.fresh("k"), proj(src, kshape))
        val = self.bind(self.fresh("vv"), proj(src, kshape))
        kw = {}
        causal = ch.coin(0.6) and not (cross and "fully-masked-rows" in self.avoid)
        if self.cache and self.loop is not None and not cross and not self.loop.get("cached"):
            k, val = self.cache_step(k, val)
            keys_len = self.Tp + self.T
            causal = True
            self.loop["cached"] = True
        if causal:
            kw["causal"] = "True"
            if ch.coin(0.3):
                kw["window"] = "W"
                self.features.add("attention-window")
            if ch.coin(0.2):  # Llama 4's chunked local attention
                kw["chunk"] = "W"
                self.features.add("attention-chunk")
        if ch.coin(0.2):  # an additive bias on the scores [B, H, T, T_keys]
            kw["bias"] = f"full([1, 1, 1, {keys_len.render()}], 0.5, {fdt})"
            self.features.add("attention-bias")
        if ch.coin(0.3):
            kw["scale"] = ch.pick(["inv", "0.5"])
        if ch.coin(0.2):
            kw["dropout"] = "rate"
        if ch.coin(0.2):  # Gemma 2's logit soft-capping: the attention written out
            kw["softcap"] = ch.pick(["2.0", "50.0"])
            self.features.add("attention-softcap")
        if not cross and keys_len == self.T and ch.coin(0.15):  # latent attention: each head's key and value
            # expanded from a per-token latent of 2 values and 1 shared one (rope_dim)
            self.features.add("op:latent_attention")
            latent_ty = T((self.B, self.T, Poly.of(3)), fdt)
            lat = self.bind(self.fresh("lat"), call("linear", v.text, self.weight((Poly.of(3), self.D), fdt).text,
                                                    ty=latent_ty))
            w = self.weight((self.H * (self.hd + self.hd - Poly.of(1)), Poly.of(2)), fdt)
            extra = {n: kw[n] for n in ("causal", "scale") if n in kw}
            out = self.bind(self.fresh("att"), call("latent_attention", q, lat, w.text, rope_dim="1", v_dim="hd",
                                                    ty=T(head, fdt), **extra))
            self.let(call("reshape", out, self.shape_text((self.B, self.T, self.D)),
                          ty=T((self.B, self.T, self.D), fdt)), fresh=False)
            return
        if "chunk" not in kw and ch.coin(0.15):  # gpt-oss's attention sinks, a learned logit per query head: the attention written out
            kw["sinks"] = self.weight((self.H,), fdt).text
            self.features.add("attention-sinks")
        mask = self.lookup("mask")
        if mask is not None and not cross and keys_len == self.T and "bias" not in kw and ch.coin(0.7):
            kw["mask"] = "mask"
            self.features.add("attention-mask")
        self.features.add("op:flash_attention")
        out = self.bind(self.fresh("att"), call("flash_attention", q, k, val, ty=T(head, fdt), **kw))
        self.let(call("reshape", out, self.shape_text((self.B, self.T, self.D)), ty=T((self.B, self.T, self.D), fdt)),
                 fresh=False)

    def cache_step(self, k: str, v: str) -> tuple[str, str]:
        """concat([past_X[l], x], axis=1) if past_X exists else x; new_X[l] = that."""
        ch = self.ch
        out = []
        for stem, cur in (("keys", k), ("values", v)):
            past, new = self.cache_names[stem]
            full = self.bind(self.fresh("kv"), E(
                f"concat([{past}[{self.loop['var']}], {cur}], axis=1) if {past} exists else {cur}", COND,
                T((self.B, self.Tp + self.T, self.H, self.hd), self.fdt)), fresh=False)  # `cur` without a cache
            self.emit(f"{new}[{self.loop['var']}] = {full}")
            self.loop["carried"].add(new)
            if "per-layer-write-late" in self.avoid:
                self.lookup(full).frozen = True
                self.loop["frozen"].add(full)
            out.append(full)
        return out[0], out[1]

    # ------------------------------------------------------------------ structure
    def declare_cache(self) -> None:
        self.cache_names = {}
        shape = (Poly.of("n_layer"), self.B, self.Tp, self.H, self.hd)
        for stem in ("keys", "values"):
            past, new = f"past_{stem}", f"new_{stem}"
            self.add_input(past, shape, self.fdt, optional=True, group="cache")
            self.cache_names[stem] = (past, new)
            full_shape = (Poly.of("n_layer"), self.B, self.Tp + self.T, self.H, self.hd)
            self.bind(new, call("full", self.shape_text(full_shape), "0.0", self.fdt, ty=T(full_shape, self.fdt)))
            self.hide_until_loop_end(new)
        self.cache_all = {n for pair in self.cache_names.values() for n in pair}

    def hide_until_loop_end(self, name: str) -> None:
        """A value the loop writes per layer: reading it before or in the loop is what the open
        aliasing and Block findings trip on."""
        if self.avoid & {"write-through-view", "loop-reads-written-slice", "static-cache-reassigned"}:
            self.lookup(name).hidden = True
            if "static-cache-reassigned" not in self.avoid:  # in generate, the cache is a list of buffers
                self.after_loop.append(name)

    def layer_loop(self) -> None:
        ch = self.ch
        buf = None
        if ch.coin(0.4):  # a per-layer buffer written in the loop
            shape = (Poly.of("n_layer"), self.B, self.T, self.D)
            buf = self.bind(self.fresh("buf"), call("full", self.shape_text(shape), "0.0", self.fdt,
                                                    ty=T(shape, self.fdt)))
        var = ch.pick(["l", "i", "layer"])
        self.emit(f"for {var} in 0..n_layer-1:" if ch.coin(0.8) else f"for {var} in 0..n_layer - 1:")
        self.features.add("loop")
        self.loop = {"var": var, "carried": set(), "reads": set(), "hidden": set(), "frozen": set(),
                     "per_layer": bool(buf) or self.cache}
        if buf and self.avoid & {"write-through-view", "loop-reads-written-slice"}:
            self.lookup(buf).hidden = True
        self.indent += 1
        self.scopes.append({var: Local(None, "loopvar")})
        n = ch.int(1, 6)
        if self.cache:
            self.s_attention()
        for _ in range(n):
            self.statement()
        if ch.coin(0.8) and not self.lookup(self.x).frozen:
            self.emit(f"{self.x} = {self.update_expr(self.x).text}")
            self.reassigned(self.x)
        if buf is not None:
            sub = self.lookup(buf).ty
            pick = self.visible(lambda n, x: x.ty == T(sub.shape[1:], sub.dtype))
            if pick:
                self.emit(f"{buf}[{var}] = {self.ref(ch.pick(pick)).text}")
                self.features.add("per-layer-write")
                self.note_write(buf)
        if len(self.loop["carried"]) > 0:
            self.features.add("carried")
        for name in self.loop["hidden"] | {buf} - {None}:
            self.lookup(name).hidden = False
        for name in self.loop["frozen"]:
            if self.lookup(name) is not None:
                self.lookup(name).frozen = False
        for name in self.after_loop:
            self.lookup(name).hidden = False
        self.after_loop = []
        self.scopes.pop()
        self.indent -= 1
        self.loop = None

    def choose_outputs(self) -> None:
        ch = self.ch
        outs = []
        if self.lm:
            head = self.param((Poly.of("V"), self.D), self.fdt, stem="head")
            src = self.x
            if ch.coin(0.5):
                src = self.bind(self.fresh("h"), call("layer_norm", self.x, ty=T((self.B, self.T, self.D), self.fdt)))
            self.bind("logits", call("linear", src, weight=head.text, ty=T((self.B, self.T, Poly.of("V")), self.fdt)))
            outs.append(("logits", T((self.B, self.T, Poly.of("V")), self.fdt), False))
            if "targets" in self.scopes[0]:
                self.bind("loss", E(f"cross_entropy(logits, targets{', shift=True' if ch.coin(0.5) else ''}) "
                                    f"if targets exists else None", COND, T((), self.fdt)), optional=True)
                outs.append(("loss", T((), self.fdt), True))
                self.features.add("op:cross_entropy")
                # the same loss written as the op the compiler fuses the pair into
                self.bind("direct_loss", E(f"linear_cross_entropy({src}, {head.text}, targets) if targets exists "
                                           f"else None", COND, T((), self.fdt)), optional=True)
                outs.append(("direct_loss", T((), self.fdt), True))
                self.features.add("op:linear_cross_entropy")
        if self.cache:
            for stem in ("keys", "values"):
                past, new = self.cache_names[stem]
                outs.append((new, self.lookup(new).ty, False))
        top = [n for n, v in self.scopes[0].items() if v.kind == "local" and v.ty is not None
               and n not in {o[0] for o in outs}]
        k = ch.int(0 if outs else 1, 3)
        chosen = set()
        for name in (ch.pick(top) for _ in range(k)) if top else ():
            if name in chosen:
                continue
            chosen.add(name)
            v = self.lookup(name)
            out = f"y_{name}" if ch.coin(0.5) else name
            if out != name:
                self.bind(out, self.ref(name) if not v.optional else E(name, ATOM, v.ty), optional=v.optional)
            outs.append((out, v.ty, v.optional))
        for name, t, optional in outs:
            shape = self.shape_text(t.shape)
            if t.rank and ch.coin(0.2):
                names = {i: self.fresh("N") for i, d in enumerate(t.shape) if d.is_sum}
                where = [(names[i], d) for i, d in enumerate(t.shape) if d.is_sum]
                if where:
                    dims = [names[i] if d.is_sum else d.render() for i, d in enumerate(t.shape)]
                    self.outputs.append(f"  {name} : Tensor([{', '.join(dims)}], {t.dtype}){'?' if optional else ''}")
                    for w, d in where:
                        self.outputs.append(f"    where {w} = {d.render()}")
                    continue
            self.outputs.append(f"  {name} : Tensor({shape}, {t.dtype}){'?' if optional else ''}")

    def build(self) -> Spec:
        ch = self.ch
        self.setup()
        self.main_input()
        self.optional_inputs()
        if self.cache:
            self.declare_cache()
        self.argmax_bound = {}
        for _ in range(ch.int(0, 3)):
            self.statement()
        if self.cache or ch.coin(0.7):
            self.layer_loop()
        for _ in range(ch.int(0, 3)):
            self.statement()
        self.choose_outputs()
        return Spec(self.render_text(), self.domains, self.int_high, frozenset(self.features), frozenset(self.masks))

    def render_text(self) -> str:
        parts = ["param:", *self.fields, *self.derived, "", "input:", *self.inputs, ""]
        if self.params:
            parts += ["parameter:", *self.params, ""]
        if self.buffers:
            parts += ["buffer:", *self.buffers, ""]
        parts += ["output:", *self.outputs, ""]
        parts += self.asserts + self.body
        return "\n".join(parts) + "\n"


# config conditions, with the registry ops each one uses
_COMPARE = {"n_layer >= 2": ("ge",), "D > 4": ("gt",), "scale > 0.0": ("gt",), "H == 2": ("eq",),
            "hd != 2": ("ne",), "F < 4": ("lt",), "V <= 7": ("le",)}
_LOGIC = {"flag and use_bias": ("and",), "not flag": ("not",), "flag or n_layer > 1": ("or", "gt"),
          "not (H == 1)": ("not", "eq")}


def broadcast(a: tuple, b: tuple) -> tuple:
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else None
        y = b[-i] if i <= len(b) else None
        if x is None or x == Poly.of(1):
            out.append(y if y is not None else x)
        else:
            out.append(x)
    return tuple(reversed(out))


def build(chooser, avoid=None) -> Spec:
    return Gen(chooser, avoid).build()


# ----------------------------------------------------------------------------- mutants

_DIM_LIST = re.compile(r"\[([^\[\]:]*,[^\[\]:]*)\]")
_SLICE = re.compile(r"(?<=[\[,] )?(-?[\w.]*(?: \+ \w+)?):(-?[\w]*(?: \+ \w+)?)(?=[\],])")
_DTYPE = re.compile(r"\b(" + "|".join(DTYPES) + r")\b")
_GUARD_EXISTS = re.compile(r" if (\w+) exists else (\w+)")
_GUARD_BARE = re.compile(r" if (\w+ exists|flag|use_bias)$", re.M)
_COND_PARAM = re.compile(r" if (use_bias|flag) else None")
_INT_INDEX = re.compile(r"\[(-?\d+)(?=[\],])")
_NAMES = ("B", "T", "D", "H", "hd", "F", "V", "n_layer", "max_len", "T_past", "S", "1", "2")


def mutants(text: str, ch, n: int = 1) -> list[tuple[str, str]]:
    """Near misses of `text`: (kind, mutated text)."""
    out = []
    for _ in range(n * 4):
        if len(out) >= n:
            break
        kind = ch.pick(["swap_dims", "rename_dim", "drop_guard", "off_by_one", "dtype", "index", "drop_line",
                        "drop_assert", "loopvar", "axis", "literal"])
        m = _mutate(text, kind, ch)
        if m is not None and m != text:
            out.append((kind, m))
    return out


def _sub_at(text: str, match: re.Match, group: int, new: str) -> str:
    return text[:match.start(group)] + new + text[match.end(group):]


def _mutate(text: str, kind: str, ch) -> str | None:
    lines = text.split("\n")
    if kind == "swap_dims":
        ms = list(_DIM_LIST.finditer(text))
        if not ms:
            return None
        m = ch.pick(ms)
        items = [s.strip() for s in m.group(1).split(",")]
        i, j = ch.int(0, len(items) - 1), ch.int(0, len(items) - 1)
        items[i], items[j] = items[j], items[i]
        return _sub_at(text, m, 1, ", ".join(items))
    if kind == "rename_dim":
        ms = list(_DIM_LIST.finditer(text))
        if not ms:
            return None
        m = ch.pick(ms)
        items = [s.strip() for s in m.group(1).split(",")]
        items[ch.int(0, len(items) - 1)] = ch.pick(_NAMES + ("T_past + T", "D - 8", "0 - B", "n_layer - 5", "T // 2"))
        return _sub_at(text, m, 1, ", ".join(items))
    if kind == "drop_guard":
        choices = [(r, m) for r in (_GUARD_EXISTS, _GUARD_BARE, _COND_PARAM) for m in r.finditer(text)]
        choices += [(None, i) for i, line in enumerate(lines) if re.match(r"\s*if .*:$", line)]
        if not choices:
            return None
        r, m = ch.pick(choices)
        if r is None:
            lines[m] = re.sub(r"if .*:$", ch.pick(["if flag:", "if True:", "if not flag:"]), lines[m])
            return "\n".join(lines)
        if r is _GUARD_EXISTS and ch.coin(0.5):  # keep the optional value, drop its test
            return text[:m.start()] + " if flag else " + m.group(2) + text[m.end():]
        return text[:m.start()] + text[m.end():]
    if kind == "off_by_one":
        ms = [m for m in _SLICE.finditer(text)]
        if not ms:
            return None
        m = ch.pick(ms)
        g = ch.pick([1, 2])
        old = m.group(g)
        new = ch.pick([f"{old} + 1" if old else "1", f"{old} - 1" if old else "-1", "l", "l + 1", "-1", "T", "3"])
        return _sub_at(text, m, g, new)
    if kind == "dtype":
        ms = list(_DTYPE.finditer(text))
        if not ms:
            return None
        m = ch.pick(ms)
        return _sub_at(text, m, 1, ch.pick([d for d in DTYPES if d != m.group(1)]))
    if kind == "index":
        ms = list(_INT_INDEX.finditer(text))
        if not ms:
            return None
        m = ch.pick(ms)
        return _sub_at(text, m, 1, ch.pick(["5", "-9", "l", str(int(m.group(1)) + 1)]))
    if kind == "drop_line":
        body = [i for i, line in enumerate(lines) if line.strip().startswith(("let ", "new_", "x ="))
                or re.match(r"\s+\w+(\[\w+\])? = ", line)]
        if not body:
            return None
        del lines[ch.pick(body)]
        return "\n".join(lines)
    if kind == "drop_assert":
        asserts = [i for i, line in enumerate(lines) if line.startswith("assert")]
        if not asserts:
            return None
        del lines[ch.pick(asserts)]
        return "\n".join(lines)
    if kind == "loopvar":
        ms = list(re.finditer(r"\[(l|i|layer)\]", text))
        if not ms:
            return None
        m = ch.pick(ms)
        return _sub_at(text, m, 1, ch.pick(["0", "-1", f"{m.group(1)} + 1", "1"]))
    if kind == "axis":
        ms = list(re.finditer(r"\b(axis|dim|a|b)=(-?\d+)", text))
        if not ms:
            return None
        m = ch.pick(ms)
        return _sub_at(text, m, 2, ch.pick(["0", "1", "2", "3", "-1", "-4"]))
    if kind == "literal":
        ms = list(re.finditer(r"(?<![\w.])(\d+\.\d+|\d+)(?![\w.])", "\n".join(lines[lines.index("output:"):])))
        if not ms:
            return None
        offset = len("\n".join(lines[:lines.index("output:")])) + 1
        m = ch.pick(ms)
        new = ch.pick(["0", "-1", "1.0 / 0.0", "10.0 ** 400", "2 ** 2 ** 2 ** 2 ** 2", "-8 * 1"])
        return text[:offset + m.start(1)] + new + text[offset + m.end(1):]
    return None
