"""Typed expressions and statements of one generated function, as Python source lines.

The `Emitter` decides what each line says; it reads every fact from the plans (where a
parameter lives, which op is a module call, which concat writes a preallocated cache, which
statements only the caches need) and works none out itself. Its methods return code (an
expression's text, a statement's lines) and record nothing: what a piece of code uses (the
run-time dims it names, the dtype and device it is handed, the items of list params a block
reads, the runtime's helpers) is read off the code itself (`reads`, `attributes_read` here,
`snf.runtime.called`), so no table predicts it.
"""

from __future__ import annotations

import ast
import re

from .. import ir
from ..dims import Dim, FloorDiv, equal
from ..ir import ScalarT, TensorT
from ..names import Namespace
from ..ops import all_ops


class Emitter:
    """Lowers the typed statements of one function body. `owner` is the module whose method this
    is: None for the Model, a block plan for a Block, "config" for Config's properties."""

    def __init__(self, gen, owner, names: Namespace, cfg: str = "cfg", defining: Dim | None = None):
        self.g, self.plans, self.owner, self.names, self.cfg = gen, gen.plans, owner, names, cfg
        self.defining = defining  # the derived dim whose own property this emits: spelled out, not read
        self.device_src: str | None = None  # a tensor this function always has, to take the device from
        self.device_arg: str | None = None  # else an argument the caller passes (a block holding no tensor)
        self.dtype_src: str | None = None  # code for the dtype the model holds now (see dtype_code)
        self.decode: str | None = None  # generate's decode state, where a preallocated cache may be in use
        self.flags: dict[str, str] = {}  # a demand's flag (use_cache, return_logits) -> its name here

    @property
    def use_cache(self) -> str | None:
        return self.flags.get("use_cache")

    @property
    def in_block(self) -> bool:
        return self.owner is not None and self.owner != "config"

    @property
    def owner_attr(self) -> str | None:
        return self.owner.attr if self.in_block else None

    # ---------------------------------------------------------------- dims
    def dim(self, d: Dim, prec: int = 0) -> str:
        derived = self.derived(d)
        if derived is not None:
            return f"{self.cfg}.{derived}"
        code = d.render(self.atom)
        simple = re.fullmatch(r"[\w.]+", code) is not None
        return code if simple or prec <= 10 and not code.startswith("-") else f"({code})"

    def device_code(self) -> str:
        """Where the tensors this function makes go: its tensors' device; the caller's, passed in, in a
        block that holds none (torch.get_default_device() would break a compiled graph)."""
        if self.device_src:
            return f"{self.device_src}.device"
        if self.device_arg:
            return self.device_arg
        return "torch.get_default_device()"

    def derived(self, d: Dim) -> str | None:
        """The derived dim of `param:` that is `d`, read as a Config property."""
        return None if d == self.defining else self.g.derived_by_dim.get(d)

    def atom(self, a) -> str:
        if isinstance(a, FloorDiv):
            derived = self.derived(Dim({((a, 1),): 1}))
            if derived is not None:
                return f"{self.cfg}.{derived}"
            return f"({self.dim(a.num, 21)} // {self.dim(a.den, 21)})"
        if a in self.g.config_fields:
            return f"{self.cfg}.{a}"
        if a in self.g.derived_alias:
            return self.atom(self.g.derived_alias[a])
        return self.names.name(a)

    def dtype_code(self, dtype: str) -> str:
        """torch's `dtype`; the model's floating dtype as the one its parameters hold now, so that in
        a cast model (`.to(torch.bfloat16)`) the spec's float32 means bfloat16 (docs/language.md 3.2)."""
        if dtype == self.g.model.float_dtype and self.dtype_src is not None:
            return self.dtype_src
        return f"torch.{dtype}"

    def layer_entry(self, op: ir.Op) -> str | None:
        """`self.<attr>` for `xs[l]` in a layer block, `l` its own layer: the item its `__init__` read
        (blocks.py writes it, for each one its code reads), a constant of the block's compiled graph;
        None elsewhere."""
        i = op.arg("i")
        if not (self.in_block and isinstance(i, ir.Ref) and i.kind == "loopvar" and i.name == self.owner.loop.var):
            return None
        return f"self.{entry_attribute(self.plans, self.owner, op.arg('x').name)}"

    # ---------------------------------------------------------------- expressions
    def expr(self, e: ir.TExpr) -> tuple[str, int]:
        if isinstance(e, ir.Lit):
            v = e.value
            if isinstance(v, (bool, type(None))):
                return repr(v), 60
            if isinstance(v, (int, float)):
                return repr(v), (40 if v < 0 else 60)
            if isinstance(e.ty, ScalarT) and e.ty.kind == "dtype":
                return self.dtype_code(v), 60
            return repr(str(v)), 60
        if isinstance(e, ir.DimVal):
            return self.dim(e.dim), 10
        if isinstance(e, ir.Ref):
            return self.ref(e), 60
        if isinstance(e, ir.IsPresent):
            return f"{self.names.name(e.name)} is not None", 4
        if isinstance(e, ir.Op) and e.op == "not" and isinstance(e.arg("a"), ir.IsPresent):
            return f"{self.names.name(e.arg('a').name)} is None", 4
        if isinstance(e, ir.TCond):
            return f"{self.code(e.body, 1)} if {self.code(e.test, 1)} else {self.code(e.orelse, 0)}", 0
        if isinstance(e, ir.TList):
            return "[" + ", ".join(self.code(i) for i in e.items) + "]", 60
        if isinstance(e, ir.TSlice):
            return (self.code(e.lo, 11) if e.lo is not None else "") + ":" + \
                   (self.code(e.hi, 11) if e.hi is not None else ""), 60
        if isinstance(e, ir.Op):
            return self.op(e)
        raise TypeError(f"cannot lower {type(e).__name__}")  # pragma: no cover

    def op(self, e: ir.Op) -> tuple[str, int]:
        call = self.plans.layout.module_call(e)
        if call is not None and call[0].owner == self.owner_attr:
            return f"self.{call[0].module}({self.code(e.arg(call[1]))})", 50
        pre = self.plans.caches.preallocated
        if self.decode and pre is not None and e in pre.narrows:
            axis, item = next((a, i) for a, i in enumerate(e.arg("index").items)
                              if isinstance(i, ir.TSlice) and i.lo is not None)
            length = self.dim(item.hi.ty.dim - item.lo.ty.dim)
            return f"_narrow({self.code(e.arg('x'))}, {axis}, {self.code(item.lo)}, {length})", 50
        if self.decode and pre is not None and e in pre.concats:
            past, new = e.arg("tensors").items
            return f"_cache_cat({self.code(past)}, {self.code(new)}, {self.decode})", 50
        op = all_ops()[e.op]
        return op.torch(LowerCtx(self, e)), op.prec

    def code(self, e: ir.TExpr, prec: int = 0) -> str:
        text, p = self.expr(e)
        return f"({text})" if p < prec else text

    def ref(self, e: ir.Ref) -> str:
        if e.kind == "config":
            return f"{self.cfg}.{e.name}"
        if e.kind == "dim":
            if e.name in self.g.runtime:
                return self.names.name(e.name)
            return self.dim(e.ty.dim) if e.ty.dim is not None else f"{self.cfg}.{e.name}"
        if e.kind == "layer_param" or e.kind in ("param", "buffer") and not self.in_block:
            return f"self.{self.plans.layout.place(e.name).path}"
        return self.names.name(e.name)

    # ---------------------------------------------------------------- statements
    def comment(self, ty, span) -> str:
        parts = [self.g.show(ty.shape)] if isinstance(ty, TensorT) else []
        parts.append(f"{self.g.spec_file}:{span.line}")
        return "  # " + "  ".join(parts)

    def stmts(self, stmts, indent: int) -> list[str]:
        """Statements in order, as lines; a run of those only an optional output needs goes under one
        `if` on the flag that asks for it, and what runs in their place otherwise under its `else`."""
        lines: list[str] = []
        plain: list = []
        run: list = []
        for s in list(stmts) + [None]:
            demand = self.demand(s)
            if demand is not None and run and demand is self.demand(run[0]):
                run.append(s)
                continue
            if run:
                lines += self.guarded(run, indent)
                run = []
            if demand is not None:
                lines += self.plain(plain, indent)
                plain, run = [], [s]
            elif s is not None:
                plain.append(s)
        return lines + self.plain(plain, indent)

    def plain(self, stmts, indent: int) -> list[str]:
        """Statements no flag guards. In a decode step, a run of writes into KV caches that its
        `_cache_cat` grew already goes under one `if decode is None:`."""
        lines: list[str] = []
        skipped = False  # the last line written is such a write, under its `if`
        for s in stmts:
            grown = bool(self.decode) and isinstance(s, ir.SetItem) and self.grown_in_place(s.name)
            if grown and not skipped:
                lines.append(at(indent, f"if {self.decode} is None:"))
            lines += self.stmt(s, indent + grown)
            skipped = grown
        return lines

    def demand(self, s):
        """The demand whose flag this function has and which guards `s`, if any."""
        demand = self.plans.outputs.demand(s) if s is not None else None
        return demand if demand is not None and demand.flag in self.flags else None

    def guarded(self, run: list, indent: int) -> list[str]:
        demand = self.demand(run[0])
        lines = [at(indent, f"if {self.flags[demand.flag]}:"), *self.plain(run, indent + 1)]
        unset = [self.names.name(t.name) for t in run if isinstance(t, ir.Bind) and t.let and t.name in demand.outputs]
        instead = [r for r in map(demand.replacement, run) if r is not None]
        if unset or instead:
            lines.append(at(indent, "else:"))
            if unset:
                lines.append(at(indent + 1, " = ".join(unset) + " = None"))
            lines += self.plain(instead, indent + 1)
        return lines

    def stmt(self, s, indent: int) -> list[str]:
        if isinstance(s, ir.Bind):
            value = self.code(s.value)
            cache = self.allocation_of(s)
            if cache is not None:  # with a preallocated cache the layers write into the caller's buffers
                value = f"{self.code(s.value, 1)} if {self.decode} is None else {self.names.name(cache.input)}"
            return [at(indent, f"{self.names.name(s.name)} = {value}{self.comment(s.value.ty, s.span)}")]
        if isinstance(s, ir.SetItem):
            return [at(indent, self.write(s.name, s.index, self.code(s.value), s) + self.comment(None, s.span))]
        if isinstance(s, ir.TIf):
            lines = [at(indent, f"if {self.code(s.test)}:"), *(self.stmts(s.body, indent + 1) or [at(indent + 1, "pass")])]
            if s.orelse:
                lines += [at(indent, "else:"), *self.stmts(s.orelse, indent + 1)]
            return lines
        if isinstance(s, ir.FusedLinear):
            return [at(indent, self.fused(s))]
        if isinstance(s, ir.Loop):
            return self.g.loop_call(self, s, indent)
        raise TypeError(type(s).__name__)  # pragma: no cover

    def write(self, name: str, index, value: str, s: ir.SetItem) -> str:
        """`name[index] = value`: in place where the write plan allows it, else on a copy (the
        tensor may be an input, or have views that must keep the old values)."""
        target = self.names.name(name)
        state = self.decode and any(c.state and c.output == name for c in self.plans.caches.caches)
        if s in self.plans.writes and (self.own_layer(index) or state) and isinstance(s.value.ty, TensorT):
            return f"_set_layer({target}, {self.code(index[0])}, {value})"  # one compiled graph for every layer
        if s in self.plans.writes:
            return f"{target}[{', '.join(self.code(i) for i in index)}] = {value}"
        return f"{target} = _assign({target}, {self.index_objects(index)}, {value})"

    def own_layer(self, index) -> bool:
        """Whether `index` is a block's own layer number alone (`name[l]`), an argument of its
        forward: compiled with dynamic sizes, a write there is _set_layer's."""
        return (self.in_block and len(index) == 1 and isinstance(index[0], ir.Ref) and index[0].kind == "loopvar"
                and index[0].name == self.owner.loop.var)

    def index_objects(self, items) -> str:
        """An index list as a tuple of `slice(...)` objects and ints (for passing to a helper)."""
        parts = []
        for i in items:
            if isinstance(i, ir.TSlice):
                lo = self.code(i.lo) if i.lo is not None else "None"
                hi = self.code(i.hi) if i.hi is not None else "None"
                parts.append(f"slice({lo}, {hi})")
            else:
                parts.append(self.code(i))
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"

    def grown_in_place(self, name: str) -> bool:
        """Whether `name` is a KV cache's output that a decode step's buffers hold (a block's write
        into it is then done already)."""
        return self.plans.caches.preallocated is not None and self.in_block and \
            any(c.output == name and not c.state for c in self.plans.caches.caches)

    def allocation_of(self, s: ir.Bind):
        """The cache whose output `s` allocates, when the preallocated buffers may replace it."""
        if self.decode is None or self.plans.caches.preallocated is None:
            return None
        return next((c for c in self.plans.caches.caches if c.init is s), None)

    def fused(self, s: ir.FusedLinear) -> str:
        targets = ", ".join(self.names.name(t) for t in s.targets)
        sizes = self.dim(s.sizes[0]) if len(set(s.sizes)) == 1 else "(" + ", ".join(self.dim(d) for d in s.sizes) + ")"
        module = self.plans.layout.place(s.weights[0]).module
        shapes = " ".join(self.g.show(t.shape) for t in s.tys if isinstance(t, TensorT))
        return (f"{targets} = self.{module}({self.code(s.input)}).split({sizes}, dim=-1)"
                f"  # {shapes}  {self.g.spec_file}:{s.span.line}")


def at(indent: int, line: str) -> str:
    """`line` at the `indent`th level (four spaces each)."""
    return "    " * indent + line


def entry_attribute(plans, block, name: str) -> str:
    """The attribute of a Block that holds its layer's item of the list param `name` (`layer_types_l`):
    a function of the name alone, so two never meet (`_item` keeps it off the block's tensors)."""
    taken = {p.path for p in plans.layout.places if p.owner == block.attr}
    attr = f"{name}_{block.loop.var}"
    while attr in taken:
        attr += "_item"
    return attr


def _parsed(lines: list[str]) -> ast.AST:
    return ast.parse("if True:\n" + "\n".join(lines) if lines else "")


def names_in(lines: list[str]) -> list[ast.Name]:
    """The names the statements `lines` (indented as a method's body, or deeper) read and bind, in
    order: what a piece of code uses is read off the code itself, so nothing predicts it."""
    tree = _parsed(lines)
    return sorted((n for n in ast.walk(tree) if isinstance(n, ast.Name)), key=lambda n: (n.lineno, n.col_offset))


def reads(lines: list[str]) -> frozenset[str]:
    """The names `lines` read."""
    return frozenset(n.id for n in names_in(lines) if isinstance(n.ctx, ast.Load))


def attributes_read(lines: list[str]) -> frozenset[str]:
    """The attributes of `self` that `lines` read."""
    return frozenset(n.attr for n in ast.walk(_parsed(lines)) if isinstance(n, ast.Attribute) and
                     isinstance(n.ctx, ast.Load) and isinstance(n.value, ast.Name) and n.value.id == "self")


class LowerCtx:
    """What an op's torch lowering may ask (see `ops/core.py`)."""

    def __init__(self, em: Emitter, op: ir.Op):
        self.em, self.op, self.args = em, op, dict(op.args)

    def code(self, name: str, prec: int = 0) -> str:
        return self.em.code(self.args[name], prec)

    def val(self, name: str):
        a = self.args[name]
        return a.value if isinstance(a, ir.Lit) else None

    def ty(self, name: str):
        return self.args[name].ty

    def given(self, name: str) -> bool:
        a = self.args.get(name)
        return a is not None and not (isinstance(a, ir.Lit) and a.value is None)

    def dim(self, d: Dim) -> str:
        return self.em.dim(d)

    def dtype(self, dtype: str) -> str:
        """The code for a dtype the spec names (see Emitter.dtype_code)."""
        return self.em.dtype_code(dtype)

    def show_dim(self, d: Dim) -> str:
        """`d` in the spec's names, for a message (`vocab_size`)."""
        return self.em.g.show((d,))[1:-1]

    def describe(self, name: str) -> str:
        """The argument `name` as a run-time message names it: `input labels` for an input, else
        where the call is (`the targets at model.snf:12`)."""
        a = self.args[name]
        if isinstance(a, ir.Ref) and a.kind in ("input", "layer_input"):
            return f"input {a.name}"
        return f"the {name} at {self.em.g.spec_file}:{self.op.span.line}"

    def dims_code(self, name: str) -> str:
        a = self.args[name]
        return ", ".join(self.em.dim(i.ty.dim) if isinstance(i, ir.Lit) or isinstance(i, ir.Ref) and
                         i.kind in ("config", "dim") else self.em.code(i) for i in a.items)

    def dim_items(self, name: str) -> list[Dim] | None:
        """The sizes of the dims list `name` as dims, or None where one is not a size the checker named."""
        dims = [getattr(i.ty, "dim", None) for i in self.args[name].items]
        return None if any(d is None for d in dims) else dims

    def run_time(self, d: Dim) -> bool:
        """Whether `d` names a dim a call decides (`B`, `T`): it may be 0 at run time."""
        return bool(d.symbols() & self.em.g.model.run_time_dims)

    def slices(self, name: str) -> str:
        return ", ".join(self.em.code(i) for i in self.args[name].items)

    def slice_objects(self, name: str) -> str:
        """The index list as a tuple of `slice(...)` objects and ints (for passing to a helper)."""
        return self.em.index_objects(self.args[name].items)

    def eq(self, a: Dim, b: Dim) -> bool:
        return equal(a, b)[0]

    @property
    def decode(self) -> str | None:
        return self.em.decode

    @property
    def device(self) -> str:
        return self.em.device_code()
