"""`snfc ir`: the typed IR as text, every value with its symbolic shape (golden-tested); and the one
printer of typed expressions in the spec's notation (`Printer.spell`: messages, graph labels)."""

from __future__ import annotations

from . import ir
from .config_mapping import encode_sections, show
from .dims import Dim, show_dim
from .ir import ScalarT, TensorT
from .ops import all_ops


class Printer:
    """The typed IR as text, in the spec's names (`snfc ir`; also `snfc graph`'s labels and the
    checker's messages, which give `display`, the names as the checker knows them, for a model)."""

    def __init__(self, model: ir.Model | None = None, display: dict | None = None):
        self.m = model
        self.display = dict(model.display) if display is None else display
        self.out: list[str] = []
        self.var = "l"  # the enclosing loop's variable, that `spell` indexes a per-layer name by

    def dim(self, d: Dim) -> str:
        return show_dim(d, self.display)

    def ty(self, t) -> str:
        if isinstance(t, TensorT):
            return "[" + ", ".join(self.dim(d) for d in t.shape) + f"] {t.dtype}" + ("?" if t.maybe_none else "")
        if isinstance(t, ScalarT):
            return t.kind + (f" = {self.dim(t.dim)}" if t.dim is not None and t.kind == "int" else "")
        return type(t).__name__

    def expr(self, e) -> str:
        if isinstance(e, ir.Lit):
            return repr(e.value)
        if isinstance(e, ir.DimVal):
            return self.dim(e.dim)
        if isinstance(e, ir.Ref):
            return f"{e.name}[layer]" if e.kind == "layer_param" else e.name
        if isinstance(e, ir.IsPresent):
            return f"{e.name} exists"
        if isinstance(e, ir.TCond):
            return f"({self.expr(e.body)} if {self.expr(e.test)} else {self.expr(e.orelse)})"
        if isinstance(e, ir.TList):
            return "[" + ", ".join(self.expr(i) for i in e.items) + "]"
        if isinstance(e, ir.TSlice):
            return (self.expr(e.lo) if e.lo else "") + ":" + (self.expr(e.hi) if e.hi else "")
        if isinstance(e, ir.Op):
            op = all_ops().get(e.op)  # initialisers (normal, zeros, ...) are not registry ops
            args = []
            for name, a in e.args:
                p = op.param(name) if op is not None else None
                if isinstance(a, ir.Lit) and p is not None and a.value == p.default and \
                        type(a.value) is type(p.default):
                    continue
                args.append(f"{name}={self.expr(a)}")
            return f"{e.op}(" + ", ".join(args) + ")"
        return "?"

    def spell(self, e, prec: int = 0, number: bool = False) -> str | None:
        """`e` as the spec writes it: an operator by its registry op's `symbol` (`dropout > 0`,
        `0.02 / sqrt(2 * n_layer)`), parenthesised where Python would read it otherwise (`prec`:
        how tightly the place it goes binds), a function of one number as a call (`sqrt(x)`), a
        per-layer name indexed (`ln1_weight[l]`); anything else as `snfc ir` writes it. With
        `number`, None for anything but a number's expression (numbers, names, those operators
        and calls)."""
        text, p = self._spelled(e, number)
        return None if text is None else f"({text})" if p < prec else text

    def _spelled(self, e, number: bool) -> tuple[str | None, int]:
        op = all_ops().get(e.op) if isinstance(e, ir.Op) and not isinstance(e.ty, TensorT) else None
        if op is not None and op.symbol is not None:
            args = [self.spell(a, p, number) for (_, a), p in zip(e.args, op.operand_precs())]
            if None in args:
                return None, 0
            if len(args) == 1:
                return f"{op.symbol}{' ' if op.symbol.isalpha() else ''}{args[0]}", op.prec
            return f" {op.symbol} ".join(args), op.prec
        if op is not None and len(op.params) == 1:
            arg = self.spell(e.args[0][1], 0, number)
            return (None if arg is None else f"{e.op}({arg})"), 50
        if isinstance(e, ir.Ref) and e.kind in ("layer_param", "layer_input"):
            return f"{e.name}[{self.var}]", 50
        if isinstance(e, ir.DimVal):
            text = self.dim(e.dim)
            return text, _binding(text)
        if number and not (isinstance(e, ir.Ref) or isinstance(e, ir.Lit) and isinstance(e.value, (int, float))
                           and not isinstance(e.value, bool)):
            return None, 0
        return self.expr(e), 40 if isinstance(e, ir.Lit) and isinstance(e.value, (int, float)) and e.value < 0 else 50

    def stmts(self, stmts, indent: int) -> None:
        pad = "  " * indent
        for s in stmts:
            line = f"  # line {s.span.line}"
            if isinstance(s, ir.Bind):
                kw = "let " if s.let else ""
                self.out.append(f"{pad}{kw}{s.name}: {self.ty(s.value.ty)} = {self.expr(s.value)}{line}")
            elif isinstance(s, ir.SetItem):
                idx = ", ".join(self.expr(i) for i in s.index)
                self.out.append(f"{pad}{s.name}[{idx}] = {self.expr(s.value)}{line}")
            elif isinstance(s, ir.TIf):
                self.out.append(f"{pad}if {self.expr(s.test)}:{line}")
                self.stmts(s.body, indent + 1)
                if s.orelse:
                    self.out.append(f"{pad}else:")
                    self.stmts(s.orelse, indent + 1)
            elif isinstance(s, ir.Loop):
                self.out.append(f"{pad}for {s.var} in 0..{self.dim(s.count - 1)}:{line}")
                self.out.append(f"{pad}  # carried: {', '.join(s.carried) or '-'}; reads: {', '.join(s.reads) or '-'}")
                self.stmts(s.body, indent + 1)
            elif isinstance(s, ir.FusedLinear):
                self.out.append(f"{pad}{', '.join(s.targets)} = fused_linear({self.expr(s.input)}, "
                                f"{s.fused_weight}, {s.fused_bias}){line}")

    def under(self, when: tuple) -> str:
        """` if past_keys exists and small`: what a check is made under; nothing when always."""
        return f" if {' and '.join(self.spell(w, 4) for w in when)}" if when else ""

    def tensor(self, t: ir.Tensor) -> str:
        extra = []
        if t.optional and t.condition is None:
            extra.append("optional")
        if t.condition is not None:
            # a tensor of some layers: on layer `i` where the condition holds
            on = f"on layer {t.layer_var} " if t.layer_var else ""
            extra.append(f"{on}if {self.expr(t.condition)}")
        if t.name in self.m.stacked:
            extra.append("per layer")
        if t.init is not None:
            extra.append(f"init {self.expr(t.init)}")
        elif t.role:
            extra.append(f"role {t.role}")
        return f"  {t.name}: {self.ty(t.ty)}" + ("  (" + "; ".join(extra) + ")" if extra else "")

    def model(self) -> str:
        m = self.m
        self.out.append(f"model {m.name}  sha256:{m.sha256[:16]}")
        self.out.append("config:")
        for c in m.config:
            default = "" if c.default is ir.MISSING else f" = {c.default!r}"
            self.out.append(f"  {c.name}: {c.kind}{default}")
        if m.derived:
            self.out.append("derived:")
            for d in m.derived:
                value = d.dim.render() if d.dim is not None and not d.opaque else self.expr(d.value)
                self.out.append(f"  {d.name} = {value}")
        if m.constraints:
            self.out.append("constraints (checked when a Config is built):")
            for c in m.constraints:
                self.out.append(f"  {c.cond}{self.under(c.when)}  # line {c.span.line}")
        if m.checks:
            self.out.append("run-time checks:")
            for c in m.checks:
                self.out.append(f"  {c.text(m.display)}{self.under(c.when)}  # line {c.span.line}")
        if m.values:
            self.out.append("numbers (computed and checked when a Config is built):")
            for v in m.values:
                self.out.append(f"  {self.expr(v.value)} {v.range_text()}  # {v.what}, line {v.span.line}")
        for title, items in (("inputs", m.inputs), ("parameters", m.params), ("buffers", m.buffers),
                             ("outputs", m.outputs)):
            if items:
                self.out.append(f"{title}:")
                self.out.extend(self.tensor(t) for t in items)
        self.out.append("body:")
        self.stmts(m.body, 1)
        self.sections()
        return "\n".join(self.out) + "\n"

    def sections(self) -> None:
        """The `checkpoint FMT:` and `config FMT:` sections as loading and saving read them: the
        encoded data, printed by the mapping language's one printer (config_mapping.show)."""
        for fmt, entry in encode_sections(self.m).items():
            self.out.append(f"checkpoint {fmt}:")
            for name, source in entry["params"].items():
                index = "[l, e]" if source[0] == "experts" else "[l]" if name in self.m.stacked else ""
                self.out.append(f"  {name}{index} <- {show(source, '')}")
            self.out.extend(f'  _ <- "{key}"' for key in entry["ignore"])
            config = entry.get("config")
            if config is None:
                continue
            self.out.append(f"config {fmt}:")
            self.out.extend(f"  {field} <- {show(source, fmt)}" for field, source in config["reads"].items())
            self.out.extend(f"  assert {show(test, fmt)}" + (f", {message!r}" if message else "")
                            for test, message in config["asserts"])
            self.out.extend(f"  {fmt}.{key} <- {show(value, fmt)}" for key, value in config["writes"].items())
            if config["ignore"]:
                self.out.append(f"  _ <- " + " or ".join(f"{fmt}.{key}" for key in config["ignore"]))


def _binding(text: str) -> int:
    """How tightly a dim's text (Dim.render) binds, as Python's precedence: by its loosest operator
    outside parentheses (`T_past + T` 10, `4*D`, `-D` 20, `head_dim` 50)."""
    depth, top = 0, []
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        top.append(ch if depth == 0 else "")
    top = "".join(top)
    return 10 if " + " in top or " - " in top else 20 if "*" in top or "/" in top or top.startswith("-") else 50


def dump(model: ir.Model) -> str:
    return Printer(model).model()
