"""Stage 3: typed IR -> a standalone PyTorch module, rendered with Jinja2.

Python here decides *what* each line says (names, expressions, shape comments); the templates
in `templates/` decide how the file is laid out. Every spec name goes through a `Namespace`,
literals are emitted with `repr`, and spec text is never copied into code.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import jinja2

from . import ir
from .dims import Dim, FloorDiv, show_shape
from .ir import ScalarT, TensorT
from .names import Namespace, module_attribute_names
from .checkpoints import encode_mapping, mapping_keys
from .ops import all_ops
from .resources import resource_dir
from .version import __version__

# Model.generate's own arguments and locals (templates/module.py.j2), kept apart from input names.
GENERATE_LOCALS = frozenset({"max_new_tokens", "temperature", "top_k", "top_p", "generator", "was_training",
                             "out", "tokens", "position", "step", "token", "at", "decode", "one_config"})
HELPERS_ORDER = ("_linear_t", "_attention", "_rope", "_assign", "_sinusoidal", "_cache_cat", "_narrow")


@functools.lru_cache(maxsize=None)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource_dir("templates"))),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
        autoescape=False)
    env.filters["pyrepr"] = repr
    return env


def _comment_text(text: str) -> str:
    """Spec text shown in a `#` comment: printable, one line, no way to end the comment."""
    return "".join(ch if ch.isprintable() else "?" for ch in text).strip()


def _display_text(text: str) -> str:
    """A file or model name shown in comments, docstrings and f-string messages of generated code:
    printable, one line, and without quotes, backslashes or braces (which could end a docstring or
    open an f-string field)."""
    return "".join("?" if ch in "{}\\\"'" else ch for ch in _comment_text(text)) or "?"


class _Emitter:
    """Lowers typed expressions and statements of one function body to Python source lines."""

    def __init__(self, gen: "Generator", where: str, names: Namespace, cfg: str = "cfg"):
        self.g, self.where, self.names, self.cfg = gen, where, names, cfg
        self.device_src: str | None = None
        self.cache_position: str | None = None  # set where a preallocated KV cache may be in use
        self.lines: list[str] = []
        self.runtime_used: set[str] = set()
        self.helpers: set[str] = set()
        self.read_names: dict[str, str] = {}  # outer value -> local name (block arguments)

    # ---------------------------------------------------------------- dims
    def dim(self, d: Dim, prec: int = 0) -> str:
        derived = self.g.derived_by_dim.get(d)
        if derived is not None:
            return f"{self.cfg}.{self.g.cfg_names.name(derived)}"
        code = d.render(self.atom)
        simple = re.fullmatch(r"[\w.]+", code) is not None
        return code if simple or prec <= 10 and not code.startswith("-") else f"({code})"

    def atom(self, a) -> str:
        if isinstance(a, FloorDiv):
            derived = self.g.derived_by_dim.get(Dim({((a, 1),): 1}))
            if derived is not None:
                return f"{self.cfg}.{self.g.cfg_names.name(derived)}"
            return f"({self.dim(a.num, 21)} // {self.dim(a.den, 21)})"
        if a in self.g.config_fields:
            return f"{self.cfg}.{self.g.cfg_names.name(a)}"
        if a in self.g.derived_alias:
            return self.atom(self.g.derived_alias[a])
        self.runtime_used.add(a)
        return self.names.name(a)

    # ---------------------------------------------------------------- expressions
    def expr(self, e: ir.TExpr) -> tuple[str, int]:
        if isinstance(e, ir.Lit):
            v = e.value
            if isinstance(v, float):
                return repr(v), (40 if v < 0 else 60)
            if isinstance(v, bool) or v is None:
                return repr(v), 60
            if isinstance(v, int):
                return repr(v), (40 if v < 0 else 60)
            if isinstance(e.ty, ScalarT) and e.ty.kind == "dtype":
                return f"torch.{v}", 60
            return repr(str(v)), 60
        if isinstance(e, ir.DimVal):
            return self.dim(e.dim), 10
        if isinstance(e, ir.Ref):
            return self.ref(e), 60
        if isinstance(e, ir.IsPresent):
            return f"{self.value_name(e.name)} is not None", 4
        if isinstance(e, ir.TCond):
            return (f"{self.code(e.body, 1)} if {self.code(e.test, 1)} else {self.code(e.orelse, 0)}", 0)
        if isinstance(e, ir.TList):
            return "[" + ", ".join(self.code(i) for i in e.items) + "]", 60
        if isinstance(e, ir.TSlice):
            return (self.code(e.lo, 11) if e.lo is not None else "") + ":" + \
                   (self.code(e.hi, 11) if e.hi is not None else ""), 60
        if isinstance(e, ir.Op):
            weight = e.arg("weight") if e.op == "linear" else None
            if isinstance(weight, ir.Ref) and weight.name in self.g.transposed:
                self.helpers.add("_linear_t")
                bias = e.arg("bias")
                bias_code = self.code(bias) if not (isinstance(bias, ir.Lit) and bias.value is None) else "None"
                return f"_linear_t({self.code(e.arg('x'))}, self.{self.g.transposed[weight.name]}, {bias_code})", 50
            if self.cache_position and e.op in ("slice", "index") and self.g.slices_at_cache(e):
                axis, item = next((a, i) for a, i in enumerate(e.arg("index").items) if isinstance(i, ir.TSlice)
                                  and i.lo is not None)
                self.helpers.add("_narrow")
                length = self.dim(item.hi.ty.dim - item.lo.ty.dim)
                return f"_narrow({self.code(e.arg('x'))}, {axis}, {self.code(item.lo)}, {length})", 50
            if self.cache_position and e.op == "concat" and self.g.is_cache_concat(e):
                past, new = e.arg("tensors").items
                self.helpers.add("_cache_cat")
                return f"_cache_cat({self.code(past)}, {self.code(new)}, {self.cache_position})", 50
            op = all_ops()[e.op]
            self.helpers.update(op.helpers)
            return op.torch(_LowerCtx(self, e)), op.prec
        raise TypeError(f"cannot lower {type(e).__name__}")  # pragma: no cover

    def code(self, e: ir.TExpr, prec: int = 0) -> str:
        text, p = self.expr(e)
        return f"({text})" if p < prec else text

    def ref(self, e: ir.Ref) -> str:
        if e.kind == "config":
            return f"{self.cfg}.{self.g.cfg_names.name(e.name)}"
        if e.kind == "dim":
            if e.name in self.g.runtime:
                self.runtime_used.add(e.name)
                return self.names.name(e.name)
            return self.dim(e.ty.dim) if e.ty.dim is not None else f"{self.cfg}.{self.g.cfg_names.name(e.name)}"
        if e.kind == "layer_param":
            return f"self.{self.g.attr(e.name)}"
        if e.kind in ("param", "buffer"):
            if self.where == "block":
                return self.value_name(e.name)
            return f"self.{self.g.attr(e.name)}"
        if e.kind == "loopvar":
            return self.names.name(e.name)
        return self.value_name(e.name)

    def value_name(self, name: str) -> str:
        return self.names.name(name)

    # ---------------------------------------------------------------- statements
    def comment(self, ty, span) -> str:
        parts = []
        if isinstance(ty, TensorT):
            parts.append(self.g.show(ty.shape))
        parts.append(f"{self.g.spec_file}:{span.line}")
        return "  # " + "  ".join(parts)

    def emit(self, line: str, indent: int) -> None:
        self.lines.append("    " * indent + line)

    def stmts(self, stmts, indent: int) -> None:
        for s in stmts:
            self.stmt(s, indent)

    def stmt(self, s, indent: int) -> None:
        static = self.g.static_cache if self.cache_position and self.where == "model" else None
        past = dict((new, past) for past, new in static["pairs"]).get(getattr(s, "name", None)) if static else None
        if isinstance(s, ir.Bind) and past and isinstance(s.value, ir.Op) and s.value.op == "full":
            # with a preallocated cache the layers write into the caller's buffer
            self.emit(f"{self.names.name(s.name)} = {self.code(s.value, 1)} if {self.cache_position} is None "
                      f"else {self.names.name(past)}{self.comment(s.value.ty, s.span)}", indent)
        elif isinstance(s, ir.Bind):
            self.emit(f"{self.names.name(s.name)} = {self.code(s.value)}{self.comment(s.value.ty, s.span)}", indent)
        elif isinstance(s, ir.SetItem):
            idx = ", ".join(self.code(i) for i in s.index)
            self.emit(f"{self.names.name(s.name)}[{idx}] = {self.code(s.value)}{self.comment(None, s.span)}", indent)
        elif isinstance(s, ir.TIf):
            self.emit(f"if {self.code(s.test)}:", indent)
            self.stmts(s.body, indent + 1)
            if not s.body:
                self.emit("pass", indent + 1)
            if s.orelse:
                self.emit("else:", indent)
                self.stmts(s.orelse, indent + 1)
        elif isinstance(s, ir.FusedLinear):
            self.fused(s, indent)
        elif isinstance(s, ir.Loop):
            self.g.loop_call(self, s, indent)
        else:  # pragma: no cover
            raise TypeError(type(s).__name__)

    def fused(self, s: ir.FusedLinear, indent: int) -> None:
        targets = ", ".join(self.names.name(t) for t in s.targets)
        sizes = self.dim(s.sizes[0]) if len(set(s.sizes)) == 1 else "(" + ", ".join(self.dim(d) for d in s.sizes) + ")"
        bias = f", self.{self.g.attr(s.fused_bias)}" if s.fused_bias else ""
        shapes = " ".join(self.g.show(t.shape) for t in s.tys if isinstance(t, TensorT))
        self.emit(f"# one matmul for {', '.join(s.weights)}", indent)
        if all(w in self.g.transposed for w in s.weights):
            self.helpers.add("_linear_t")
            call = (f"_linear_t({self.code(s.input)}, self.{self.g.fused_attr(s.fused_weight, True)}, "
                    f"{f'self.{self.g.attr(s.fused_bias)}' if s.fused_bias else 'None'})")
        else:
            call = f"F.linear({self.code(s.input)}, self.{self.g.attr(s.fused_weight)}{bias})"
        self.emit(f"{targets} = {call}.split({sizes}, dim=-1)  # {shapes}  {self.g.spec_file}:{s.span.line}", indent)


class _LowerCtx:
    """What an op's torch lowering may ask (see `ops/core.py`)."""

    def __init__(self, em: _Emitter, op: ir.Op):
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

    def dims_code(self, name: str) -> str:
        a = self.args[name]
        return ", ".join(self.em.dim(i.ty.dim) if isinstance(i, ir.Lit) or isinstance(i, ir.Ref) and
                         i.kind in ("config", "dim") else self.em.code(i) for i in a.items)

    def slices(self, name: str) -> str:
        return ", ".join(self.em.code(i) for i in self.args[name].items)

    def slice_objects(self, name: str) -> str:
        """The index list as a tuple of `slice(...)` objects and ints (for passing to a helper)."""
        parts = []
        for i in self.args[name].items:
            if isinstance(i, ir.TSlice):
                lo = self.em.code(i.lo) if i.lo is not None else "None"
                hi = self.em.code(i.hi) if i.hi is not None else "None"
                parts.append(f"slice({lo}, {hi})")
            else:
                parts.append(self.em.code(i))
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"

    def eq(self, a: Dim, b: Dim) -> bool:
        from .dims import equal
        return equal(a, b)[0]

    @property
    def cache_position(self) -> str | None:
        return self.em.cache_position

    @property
    def device(self) -> str:
        return self.em.g.device_expr(self.em)


@dataclass
class Generator:
    model: ir.Model
    spec_path: str
    block_names: dict = field(default_factory=dict)

    def __post_init__(self):
        m = self.model
        self.spec_file = _display_text(PurePosixPath(self.spec_path.replace("\\", "/")).name)
        self.config_fields = {c.name for c in m.config}
        self.derived_alias = {}
        self.derived_by_dim = {}
        for d in m.derived:
            if d.alias_of is not None and d.dim is not None:
                self.derived_alias[d.name] = d.dim
            elif d.dim is not None and not d.dim.is_const:
                self.derived_by_dim.setdefault(d.dim, d.name)
        self.runtime = {d for d, _, _ in m.runtime_dims} | self._all_runtime()
        self.display = dict(m.display)
        self.cfg_names = Namespace({"head_dim"} - {d.name for d in m.derived}, attribute=True)
        self.cfg_names.reserve("self", "property")  # `property` decorates derived dims in the Config body
        for c in m.config:
            self.cfg_names.name(c.name)
        for d in m.derived:
            if d.alias_of is None:
                self.cfg_names.name(d.name)
        attrs = set(module_attribute_names()) | {"config", "layers", "blocks", "_stored"}
        self.attrs = Namespace(attrs, attribute=True)
        for p in m.params + m.buffers:
            self.attrs.name(p.name)
        # weights used only by `linear` are stored [in, out]: CPU BLAS multiplies x @ W faster than
        # x @ W.T (HF's GPT-2 Conv1D layout); state dicts keep the spec's [out, in]
        self.transposed = {name: self.attrs.fresh(self.attrs.name(name) + "_t") for name in _linear_only(m)}

    def _all_runtime(self) -> set:
        out = set()
        for i in self.model.inputs + self.model.outputs:
            for d in i.ty.shape:
                out |= {s for s in d.symbols() if s not in self.config_fields}
        return out - {d.name for d in self.model.derived}

    def attr(self, name: str) -> str:
        return self.attrs.name(name)

    def show(self, shape) -> str:
        return show_shape(shape, self.display)

    def device_expr(self, em: _Emitter) -> str:
        if em.device_src is None:
            raise ValueError("no tensor in scope to take a device from")
        return f"{em.device_src}.device"

    # ---------------------------------------------------------------- parameters
    def param_shape_code(self, em: _Emitter, t: ir.Tensor, stacked: bool) -> str:
        shape = t.ty.shape[1:] if stacked else t.ty.shape
        return ", ".join(em.dim(d) for d in shape)

    def init_line(self, em: _Emitter, t: ir.Tensor, target: str) -> str:
        if t.init is not None:
            kind, args = t.init.op, {k: em.code(v) for k, v in t.init.args}
        elif t.role == "bias":
            kind, args = "zeros", {}
        elif t.role == "norm_weight":
            kind, args = "ones", {}
        else:
            kind, args = "normal", {"mean": "0.0", "std": "0.02"}
        if kind == "normal":
            return f"nn.init.normal_({target}, mean={args['mean']}, std={args['std']})"
        if kind == "zeros":
            return f"nn.init.zeros_({target})"
        if kind == "ones":
            return f"nn.init.ones_({target})"
        if kind == "constant":
            return f"nn.init.constant_({target}, {args['value']})"
        if kind == "sinusoidal":
            em.helpers.add("_sinusoidal")
            return f"{target}.copy_(_sinusoidal({target}.shape, {args['base']}))"
        raise ValueError(kind)  # pragma: no cover

    def decl_lines(self, em: _Emitter, tensors, stacked: bool) -> list[str]:
        lines = []
        for t in tensors:
            attr = self.attr(t.name)
            shape = self.param_shape_code(em, t, stacked)
            if t.name in self.transposed:
                out, inn = (t.ty.shape[1:] if stacked else t.ty.shape)
                lines.append(f"self.{self.transposed[t.name]} = nn.Parameter(torch.empty({em.dim(inn)}, {em.dim(out)}))"
                             f"  # {t.name} {self.show((out, inn))}, stored transposed  {self.spec_file}:{t.span.line}")
                continue
            is_buffer = t in self.model.buffers
            make = f"torch.empty({shape})" if shape else "torch.empty(())"
            cond = f" if {em.code(t.condition)} else None" if t.condition is not None else ""
            if is_buffer:
                if cond:
                    lines.append(f"self.register_buffer({attr!r}, {make}{cond})")
                else:
                    lines.append(f"self.register_buffer({attr!r}, {make})")
            else:
                lines.append(f"self.{attr} = nn.Parameter({make}){cond}")
            lines[-1] += f"  # {self.show(t.ty.shape[1:] if stacked else t.ty.shape)}  {self.spec_file}:{t.span.line}"
        return lines

    def init_lines(self, em: _Emitter, tensors) -> list[str]:
        lines = []
        for t in tensors:
            target = (f"self.{self.transposed[t.name]}.t()" if t.name in self.transposed
                      else f"self.{self.attr(t.name)}")
            line = self.init_line(em, t, target)
            if t.condition is not None:
                lines.append(f"if {target} is not None:")
                lines.append("    " + line)
            else:
                lines.append(line)
        return lines

    # ---------------------------------------------------------------- the layer loop
    def loop_call(self, em: _Emitter, loop: ir.Loop, indent: int) -> None:
        block = self.block_names[id(loop)]
        args = []
        for name in block["reads"]:
            kind = block["kinds"][name]
            if kind in ("param", "buffer"):
                args.append(f"self.{self.attr(name)}")
            elif kind == "dim":
                args.append(em.dim(Dim.sym(name)))
            else:
                args.append(em.value_name(name))
            if name in loop.layer_inputs:  # this layer's slice of a stacked input
                var = em.names.name(loop.var)
                args[-1] = (f"{args[-1]}[{var}] if {args[-1]} is not None else None"
                            if self.input_optional(name) else f"{args[-1]}[{var}]")
        carried = [em.value_name(n) for n in block["carried"]]
        written = [em.names.fresh(f"{h.name}_layer") for h in block["hoisted"]]
        outs = carried + written
        lhs = ", ".join(outs) + ("," if len(outs) == 1 and block["tuple_out"] else "")
        call_args = ", ".join(carried + args)
        if block["uses_var"]:
            call_args = f"{call_args}, {em.names.name(loop.var)}" if call_args else em.names.name(loop.var)
        if block["cache_position"]:
            call_args = f"{call_args}, {em.cache_position}"
        if block["uses_var"] or loop.layer_inputs or written:
            em.emit(f"for {em.names.name(loop.var)}, layer in enumerate(self.{block['attr']}):", indent)
        else:
            em.emit(f"for layer in self.{block['attr']}:", indent)
        assign = f"{lhs} = " if outs else ""
        where = f"  # {self.spec_file}:{loop.span.line}"
        if "gradient_checkpointing" in self.config_fields:
            # recompute each layer in backward instead of keeping its activations
            em.emit(f"if {em.cfg}.{self.cfg_names.name('gradient_checkpointing')} and self.training "
                    f"and torch.is_grad_enabled():", indent + 1)
            em.emit(f"{assign}torch.utils.checkpoint.checkpoint(layer, {call_args}, use_reentrant=False)",
                    indent + 2)
            em.emit("else:", indent + 1)
            em.emit(f"{assign}layer({call_args}){where}", indent + 2)
        else:
            em.emit(f"{assign}layer({call_args}){where}", indent + 1)
        if written and block["cache_position"]:  # a preallocated cache was written in place already
            em.emit(f"if {em.cache_position} is None:", indent + 1)
            indent += 1
        for h, tmp in zip(block["hoisted"], written):
            em.emit(f"{em.value_name(h.name)}[{em.names.name(loop.var)}] = {tmp}"
                    f"  # {self.spec_file}:{h.span.line}", indent + 1)

    def generate_context(self, names: Namespace, out_fields: Namespace, em: _Emitter) -> dict | None:
        """`Model.generate` for causal language models: the first input is int64 token ids [B, T],
        the first output logits [B, T, V] with attention causal; each optional input `past_X` paired
        with an output `new_X` is a cache fed back at the next step."""
        m = self.model
        if not self.has_generate:
            return None
        tokens, logits = m.inputs[0], m.outputs[0]
        outputs = {o.name for o in m.outputs}
        pasts = [i.name for i in m.inputs if i.optional and i.name.startswith("past_")
                 and "new_" + i.name[len("past_"):] in outputs]
        if any(set(g) & set(pasts) and not set(g) <= set(pasts) for g in m.input_groups):
            pasts = []  # the cache comes with another input (a mask [B, T_past + T]) generate cannot fill
        cache = [(names.name(p), out_fields.name("new_" + p[len("past_"):])) for p in pasts]
        static = self.static_cache
        if static and em.cache_position:
            static = {"size": em.dim(static["size"]), "axis": static["axis"], "position": em.cache_position,
                      "pairs": [(names.name(p), out_fields.name(n)) for p, n in static["pairs"]]}
        else:
            static = None
        return {"tokens": names.name(tokens.name), "logits": out_fields.name(logits.name), "cache": cache,
                "static": static}

    @functools.cached_property
    def has_generate(self) -> bool:
        m = self.model
        if len(m.outputs) < 2 or not m.inputs:  # a bare-tensor forward has no `.logits` (docs/language.md)
            return False
        tokens, logits = m.inputs[0], m.outputs[0]
        causal = any(isinstance(e, ir.Op) and e.op == "flash_attention" and dict(e.args)["causal"].value is True
                     for e in ir.walk_exprs(m.body))
        return (causal and tokens.ty.dtype == "int64" and tokens.ty.rank == 2 and not tokens.optional
                and logits.ty.rank == 3 and logits.ty.shape[:2] == tokens.ty.shape)

    @functools.cached_property
    def static_cache(self) -> dict | None:
        """The fixed-shape decode path: when the spec's cache inputs `past_X` (paired with outputs
        `new_X`) grow along one run-time dim (T_past) that an `assert`/slice bounds by a config
        value (block_size), generated code can keep them in preallocated buffers of that size,
        written in place at `cache_position`, so every decode step has the same shapes."""
        m = self.model
        outputs = {o.name for o in m.outputs}
        pairs = [(i.name, "new_" + i.name[len("past_"):]) for i in m.inputs
                 if i.optional and i.name.startswith("past_") and "new_" + i.name[len("past_"):] in outputs]
        loops = [s for s in m.body if isinstance(s, ir.Loop)]
        if not pairs or len(loops) != 1 or not {p for p, _ in pairs} <= set(loops[0].layer_inputs):
            return None
        owned = [(d, inp, ax) for d, inp, ax in m.runtime_dims if inp in {p for p, _ in pairs}]
        if len(owned) != 1:
            return None
        dim, _, axis = owned[0]
        if any(dim in d.symbols() for i in m.inputs if i.name not in {p for p, _ in pairs} for d in i.ty.shape):
            return None  # e.g. a mask [B, T_past + T]: sized by the filled length, not the buffer's
        bound = next((c.rhs for c in m.checks if dim in c.lhs.symbols() and c.op in ("<=", "<")
                      and not (c.rhs.symbols() - self.config_fields)), None)
        if bound is None:
            return None
        return {"dim": dim, "axis": axis, "size": bound, "pairs": pairs}

    def slices_at_cache(self, e: ir.Op) -> bool:
        """`x[T_past:T_past + T, :]`: one slice starting at the cache dim, every other axis whole.
        With a preallocated cache T_past is a tensor, so it lowers to a tensor-safe `_narrow`."""
        st = self.static_cache
        items = e.arg("index").items
        cut = [i for i in items if isinstance(i, ir.TSlice) and (i.lo is not None or i.hi is not None)]
        if st is None or len(cut) != 1 or any(not isinstance(i, ir.TSlice) for i in items):
            return False
        item = cut[0]
        return (item.lo is not None and item.hi is not None and isinstance(item.lo.ty, ScalarT)
                and item.lo.ty.dim is not None and st["dim"] in item.lo.ty.dim.symbols()
                and isinstance(item.hi.ty, ScalarT) and item.hi.ty.dim is not None)

    def is_cache_concat(self, e: ir.Op) -> bool:
        """`concat([past_X[l], new], axis=T)`: appending to a cache along its growing axis."""
        st = self.static_cache
        items = e.arg("tensors").items
        axis = e.arg("axis")
        return (st is not None and len(items) == 2 and isinstance(items[0], ir.Ref)
                and items[0].kind == "layer_input" and items[0].name in {p for p, _ in st["pairs"]}
                and isinstance(axis, ir.Lit) and axis.value in (st["axis"] - 1, st["axis"] - 1 - items[0].ty.rank - 1))

    def input_optional(self, name: str) -> bool:
        return any(i.name == name and i.optional for i in self.model.inputs)

    def block_context(self, loop: ir.Loop, index: int, types: dict) -> dict:
        m = self.model
        names = Namespace()
        em = _Emitter(self, "block", names)
        em.device_src = next((names.name(n) for n in list(loop.carried) + list(loop.reads)
                              if isinstance(types.get(n), TensorT) and not types[n].maybe_none), None)
        stacked = [m.param(n) for n in loop.stacked]
        fused = [s for s in ir.walk_stmts(loop.body) if isinstance(s, ir.FusedLinear)]
        fused_parts = {w for f in fused for w in f.weights} | {b for f in fused for b in f.biases if b}
        plain = [t for t in stacked if t.name not in fused_parts]
        types = dict(types)
        for n in loop.layer_inputs:  # the block sees one layer's slice of a stacked input
            t = types[n]
            types[n] = TensorT(t.shape[1:], t.dtype, t.maybe_none)
        # `cache[l] = value` writes leave the (compiled) block: it returns the value, the caller writes
        hoisted = [st for st in loop.body if _hoistable(st, loop)]
        body = tuple(st for st in loop.body if st not in hoisted)
        carried = [n for n in loop.carried if n not in {h.name for h in hoisted}]
        reads = [r for r in loop.reads if r not in loop.carried]
        uses_var = _uses_loopvar(body)
        # body first: it tells which run-time dims the block needs
        for n in carried + reads:
            names.name(n)
        if uses_var:
            names.name(loop.var)
        static = self.static_cache if loop.layer_inputs else None
        if static:
            em.cache_position = names.fresh("cache_position")
        em.stmts(body, 2)
        body_lines = em.lines
        em.lines = []
        # run-time dims: unpack from a tensor argument when one carries them, else pass them in
        sources, dim_args = {}, []
        for dim in sorted(em.runtime_used):
            src = next(((n, axis) for n in carried + reads
                        if isinstance(types.get(n), TensorT) and not types[n].maybe_none
                        for axis, d in enumerate(types[n].shape) if d.as_symbol() == dim), None)
            if src:
                sources.setdefault(src[0], {})[src[1]] = dim
            else:
                dim_args.append(dim)
        prologue = []
        for n, axes in sources.items():
            rank = types[n].rank
            targets = [names.name(axes[a]) if a in axes else "_" for a in range(rank)]
            while targets and targets[-1] == "_" and len(targets) > 1 and targets.count("_") > 1:
                targets.pop()
            if len(targets) == rank:
                prologue.append(f"{', '.join(targets)}{',' if rank == 1 else ''} = {names.name(n)}.shape")
            else:
                prologue += [f"{names.name(axes[a])} = {names.name(n)}.size({a})" for a in sorted(axes)]
        kinds = {}
        for n in reads:
            kinds[n] = "local"
            for t in m.params:
                if t.name == n:
                    kinds[n] = "param"
            for t in m.buffers:
                if t.name == n:
                    kinds[n] = "buffer"
        for d in dim_args:
            kinds[d] = "dim"
        signature = []
        for n in carried + reads + dim_args:
            t = types.get(n)
            ann = _annotation(t) if n not in dim_args else "int"
            signature.append(f"{names.name(n)}: {ann}")
        if uses_var:
            signature.append(f"{names.name(loop.var)}: int")
        if em.cache_position:
            signature.append(f"{em.cache_position}: Optional[torch.Tensor] = None")
        outs = carried + [h.value.name for h in hoisted]
        ret = [names.name(n) for n in outs]
        ret_ann = ("tuple[" + ", ".join(_annotation(types.get(n)) for n in outs) + "]") if len(outs) > 1 \
            else (_annotation(types.get(outs[0])) if outs else "None")
        cls = "Block" if index == 0 else f"Block{index + 1}"
        attr = "layers" if index == 0 else f"layers{index + 1}"
        info = {"attr": attr, "reads": reads + dim_args, "kinds": kinds, "tuple_out": False, "carried": carried,
                "hoisted": hoisted, "uses_var": uses_var, "cache_position": bool(em.cache_position)}
        self.block_names[id(loop)] = info

        fused_decls, fused_meta, reset_fused = [], [], []
        for f in fused:
            for group, fused_name in ((f.weights, f.fused_weight), (f.biases, f.fused_bias)):
                if fused_name is None:
                    continue
                parts = [m.param(p) for p in group]
                shapes = [p.ty.shape[1:] for p in parts]
                total = sum((s[0] for s in shapes), Dim.const(0))
                flip = fused_name == f.fused_weight and all(p in self.transposed for p in group)
                shape = (total,) + tuple(shapes[0][1:])
                stored = self.fused_attr(fused_name, flip)
                dims = ", ".join(em.dim(d) for d in (shape[::-1] if flip else shape))
                cond = parts[0].condition
                cond_code = f" if {em.code(cond)} else None" if cond is not None else ""
                how = f"stacked on axis {1 if flip else 0}" + (", stored transposed" if flip else "")
                fused_decls.append(f"self.{stored} = nn.Parameter(torch.empty({dims}))"
                                   f"{cond_code}  # {', '.join(group)} {how}")
                sizes = ", ".join(em.dim(s[0]) for s in shapes)
                sizes = f"({sizes},)" if len(shapes) == 1 else f"({sizes})"
                fused_meta.append(f"{stored!r}: ({tuple(self.attr(p) for p in group)!r}, {sizes}, {flip}),")
                whole = f"self.{stored}.t()" if flip else f"self.{stored}"
                views = f"dict(zip({tuple(self.attr(p) for p in group)!r}, {whole}.split(self._stored[{stored!r}][1])))"
                reset_fused.append((stored, views, parts, cond is not None))
        init_lines = self.init_lines(em, plain)
        for stored, views, parts, conditional in reset_fused:
            pre = "    " if conditional else ""
            if conditional:
                init_lines.append(f"if self.{stored} is not None:")
            init_lines.append(f"{pre}parts = {views}")
            for p in parts:
                init_lines.append(pre + self.init_line(em, p, f"parts[{self.attr(p.name)!r}]"))
        fused_meta += self.transposed_meta(plain)
        return {
            "cls": cls, "attr": attr, "line": loop.span.line, "var": loop.var, "count": em.dim(loop.count),
            "decls": self.decl_lines(em, plain, True) + fused_decls,
            "fused_meta": fused_meta, "init_lines": init_lines,
            "signature": ", ".join(signature), "ret_ann": ret_ann,
            "prologue": prologue, "body": body_lines,
            "ret": ", ".join(ret) if ret else None, "helpers": em.helpers,
        }

    def fused_attr(self, fused_name: str, flip: bool) -> str:
        if not flip:
            return self.attr(fused_name)
        key = ("fused_t", fused_name)
        if key not in self.transposed:
            self.transposed[key] = self.attrs.fresh(self.attr(fused_name) + "_t")
        return self.transposed[key]

    def transposed_meta(self, tensors) -> list[str]:
        """`_stored` entries of plain weights kept [in, out]: saved and loaded as the spec's [out, in]."""
        return [f"{self.transposed[t.name]!r}: (({self.attr(t.name)!r},), None, True),"
                for t in tensors if t.name in self.transposed]

    # ---------------------------------------------------------------- the whole file
    def render(self) -> str:
        m = self.model
        types = self._local_types()
        loops = [s for s in m.body if isinstance(s, ir.Loop)]
        blocks = [self.block_context(loop, i, types) for i, loop in enumerate(loops)]
        names = Namespace(GENERATE_LOCALS if self.has_generate else ())  # forward's inputs are generate's too
        inputs = sorted(m.inputs, key=lambda i: i.optional)
        for i in inputs:
            names.name(i.name)
        em = _Emitter(self, "model", names)
        first = next((i for i in inputs if not i.optional), None)
        em.device_src = names.name(first.name) if first is not None else None
        static = self.static_cache
        if static:
            em.cache_position = names.fresh("cache_position")
        em.stmts(m.body, 2)
        body = em.lines
        em.lines = []
        top = [t for t in m.params + m.buffers if t.name not in m.stacked]
        prologue = self.forward_prologue(em, names, inputs)
        outputs = [(names.name(o.name), o) for o in m.outputs]
        out_fields = Namespace(attribute=True)
        helpers = set(em.helpers)
        for b in blocks:
            helpers |= b["helpers"]
        decls = self.decl_lines(em, top, False)
        init_lines = self.init_lines(em, top)
        model_stored = self.transposed_meta(top)
        helpers |= em.helpers
        ctx = {
            "version": __version__, "spec_path": self.spec_path, "spec_path_repr": repr(self.spec_path),
            "sha256": m.sha256, "model_name": _display_text(m.name), "spec_file": self.spec_file,
            "config": self.config_context(), "derived": self.derived_context(em),
            "constraints": self.constraint_context(),
            "blocks": blocks,
            "decls": decls, "init_lines": init_lines,
            "inputs": [(names.name(i.name), _annotation(i.ty, i.optional), i.optional, self.show(i.ty.shape))
                       for i in inputs],
            "prologue": prologue, "body": body,
            "outputs": [(out_fields.name(o.name), n, self.show(o.ty.shape), o.optional) for n, o in outputs],
            "helpers": [h for h in HELPERS_ORDER if h in helpers],
            "spec_parameters": self.spec_parameter_table(),
            "checkpoints": self.checkpoint_table(),
            "docstring": f"{_display_text(m.name)}: generated by snfc from {self.spec_file}.",
            "uses_checkpoint": bool(loops) and "gradient_checkpointing" in self.config_fields,
            "generate": self.generate_context(names, out_fields, em),
            "cache_position": em.cache_position,
            "model_stored": model_stored,
        }
        text = _env().get_template("module.py.j2").render(**ctx)
        return text

    def forward_prologue(self, em: _Emitter, names: Namespace, inputs) -> list[str]:
        lines = ["cfg = self.config"]
        bound: set[str] = set()
        static = self.static_cache
        cached = [i for i in inputs if static and i.name in {p for p, _ in static["pairs"]}]
        for i in inputs:
            if i not in cached:
                lines += self.input_lines(em, names, i, bound)
            elif i is cached[0]:  # the cache inputs, checked together
                lines += self.static_cache_lines(em, names, cached, bound)
        for group in self.model.input_groups:
            given = [names.name(n) for n in group]
            lines.append(f"if len({{{', '.join(f'{g} is None' for g in given)}}}) != 1:")
            lines.append(f"    raise ValueError({(', '.join(group) + ' must be given together, or not at all')!r})")
        for c in self.model.checks:
            if not self.is_runtime_check(c):
                continue
            lhs, rhs = em.dim(c.lhs), em.dim(c.rhs)
            msg = (f"expected {self.show((c.lhs,))[1:-1]} {c.op} {self.show((c.rhs,))[1:-1]}, got "
                   f"{self.show((c.lhs,))[1:-1]} = {{int({lhs})}} and {self.show((c.rhs,))[1:-1]} = {{{rhs}}}"
                   f" ({self.spec_file}:{c.span.line})")
            guard = ""
            if static and static["dim"] in (c.lhs.symbols() | c.rhs.symbols()):
                guard = f"{em.cache_position} is None and "  # a buffer's bound is checked by its caller
            lines.append(f"if {guard}not {em.dim(c.lhs, 5)} {c.op} {em.dim(c.rhs, 5)}:")
            lines.append(f"    raise ValueError(f{msg!r})")
        return lines

    def input_lines(self, em: _Emitter, names: Namespace, i: ir.Tensor, bound: set, shape: tuple = (),
                    check: str = "_check_input", bind: bool = True) -> list[str]:
        """Check one input's rank, dtype and known sizes (of `shape`, its declared one by default),
        and bind the run-time dims it brings (into `bound`)."""
        lines = []
        n = names.name(i.name)
        rank = i.ty.rank
        dims = [d.as_symbol() if d.as_symbol() in self.runtime else None for d in i.ty.shape]
        shape = shape or i.ty.shape
        fixed = {axis: em.dim(d) for axis, d in enumerate(shape)
                 if not (d.symbols() & self.runtime) or d.symbols() <= bound}
        sizes = ", {" + ", ".join(f"{a}: {code}" for a, code in fixed.items()) + "}" if fixed else ""
        call = f"{check}({_display_text(i.name)!r}, {n}, {rank}, {self.show(shape)!r}, {i.ty.dtype!r}{sizes})"
        lines.append(call if not i.optional else f"if {n} is not None:\n            {call}")
        new = [d for d in dims if d and d not in bound]
        if not new or not bind:
            return lines
        if i.optional:
            for axis, d in enumerate(dims):
                if d and d not in bound:
                    lines.append(f"{names.name(d)} = {n}.size({axis}) if {n} is not None else 0")
                    bound.add(d)
        else:
            targets = ", ".join(names.name(d) if d and d not in bound else "_" for d in dims)
            if rank == 1:
                targets += ","
            lines.append(f"{targets} = {n}.shape")
            bound.update(d for d in dims if d)
        return lines

    def static_cache_lines(self, em: _Emitter, names: Namespace, cached: list, bound: set) -> list[str]:
        """The cache inputs' checks twice: as growing tensors, and (with cache_position) as
        preallocated buffers of the bound's size, whose filled length is cache_position."""
        static = self.static_cache
        cp, dim = em.cache_position, names.name(static["dim"])
        size = self.show((static["size"],))[1:-1]
        grown, buffers, outer = [], [], set(bound)
        for i in cached:
            grown += self.input_lines(em, names, i, outer)
            shape = list(i.ty.shape)
            shape[static["axis"]] = static["size"]
            buffers += self.input_lines(em, names, ir.replace(i, optional=False), bound | {static["dim"]}, tuple(shape),
                                        "_check_cache", False)  # given: checked just above
        bound.add(static["dim"])
        given = [names.name(i.name) for i in cached]
        message = (f"{cp} must be a 0-d integer tensor, given with the preallocated caches "
                   + ", ".join(_display_text(i.name) for i in cached))
        position = [f"if {' or '.join(f'{g} is None' for g in given)} or not _is_position({cp}):",
                    f"    raise ValueError({message!r})"]

        def nested(block: list[str]) -> list[str]:  # one level deeper, continuation lines too
            return ["    " + line.replace("\n", "\n    ") for line in block]
        return [f"if {cp} is None:", *nested(grown), f"else:  # preallocated caches of {size} slots, "
                f"{dim} of them filled", *nested(position + buffers + [f"{dim} = {cp}"])]

    def is_runtime_check(self, c: ir.Check) -> bool:
        return bool((c.lhs.symbols() | c.rhs.symbols()) - self.config_fields)

    def _local_types(self) -> dict:
        types = {i.name: TensorT(i.ty.shape, i.ty.dtype, i.optional) for i in self.model.inputs}
        for t in self.model.params + self.model.buffers:
            types[t.name] = t.ty
        for s in ir.walk_stmts(self.model.body):
            if isinstance(s, ir.Bind) and s.let:
                types.setdefault(s.name, s.value.ty)
            elif isinstance(s, ir.FusedLinear):
                for n, t in zip(s.targets, s.tys):
                    types.setdefault(n, t)
        return types

    def config_context(self) -> list[dict]:
        rows = []
        for c in self.model.config:
            default = None if c.default is ir.MISSING else repr(c.default)
            rows.append({"name": self.cfg_names.name(c.name), "type": c.kind, "default": default,
                         "comment": f"{self.spec_file}:{c.span.line}"})
        # fields without defaults must come first in a dataclass
        return sorted(rows, key=lambda r: r["default"] is not None)

    def derived_context(self, em: _Emitter) -> list[dict]:
        rows = []
        em = _Emitter(self, "config", Namespace(), cfg="self")
        for d in self.model.derived:
            if d.alias_of is not None:
                continue
            code = em.code(d.value)
            if d.dim is not None:
                # a derived dim is its canonical form, so `D // H` reads as n_embd // n_head
                code = d.dim.render(em.atom) if d.dim not in self.derived_by_dim or \
                    self.derived_by_dim[d.dim] == d.name else em.dim(d.dim)
                if self.derived_by_dim.get(d.dim) == d.name:
                    code = _without_self_alias(d.dim, em)
                if code.startswith("(") and code.endswith(")") and code.count("(") == 1:
                    code = code[1:-1]
            rows.append({"name": self.cfg_names.name(d.name), "type": "int" if d.dim is not None else
                         ("float" if isinstance(d.value.ty, ScalarT) and d.value.ty.kind == "float" else "bool"),
                         "code": code, "line": d.span.line})
        return rows

    def constraint_context(self) -> list[dict]:
        rows = []
        em = _Emitter(self, "config", Namespace(), cfg="self")
        for c in self.model.constraints:
            num, den = em.dim(c.cond.num, 21), em.dim(c.cond.den, 21)
            fields = sorted(c.cond.num.symbols() | c.cond.den.symbols())
            shown = ", ".join(f"{self.cfg_names.name(f)}={{self.{self.cfg_names.name(f)}}}" for f in fields
                              if f in self.config_fields)
            msg = f"{c.why} ({self.spec_file}:{c.span.line}); got {shown}"
            rows.append({"cond": f"{num} % {den} != 0", "message": msg})
        for c in self.model.checks:
            if self.is_runtime_check(c):
                continue
            fields = sorted(c.lhs.symbols() | c.rhs.symbols())
            shown = ", ".join(f"{self.cfg_names.name(f)}={{self.{self.cfg_names.name(f)}}}" for f in fields)
            msg = (f"expected {self.show((c.lhs,))[1:-1]} {c.op} {self.show((c.rhs,))[1:-1]} "
                   f"({self.spec_file}:{c.span.line}); got {shown}")
            rows.append({"cond": f"not {em.dim(c.lhs, 5)} {c.op} {em.dim(c.rhs, 5)}", "message": msg})
        return rows

    def spec_parameter_table(self) -> list[str]:
        rows = []
        for t in self.model.params + self.model.buffers:
            stacked = t.name in self.model.stacked
            path = f"layers.{{l}}.{self.attr(t.name)}" if stacked else self.attr(t.name)
            rows.append(f"{t.name!r}: ({path!r}, {stacked!r}),")
        return rows

    def checkpoint_table(self) -> list[str]:
        rows = []
        by_fmt: dict[str, list] = {}
        for e in self.model.mappings:
            by_fmt.setdefault(e.fmt, []).append(e)
        for fmt, entries in by_fmt.items():
            rows.append(f"{fmt!r}: {{")
            ignored = []
            for e in entries:
                if e.name == "_":  # keys the checkpoint has but the model does not need (tied copies)
                    ignored += mapping_keys(e.source)
                    continue
                rows.append(f"    {e.name!r}: {encode_mapping(e.source)!r},")
            if ignored:
                rows.append(f"    '_ignore': {tuple(ignored)!r},")
            rows.append("},")
        return rows


def _linear_only(m: ir.Model) -> list[str]:
    """Parameters whose every use is the `weight` of a `linear` (fused ones included)."""
    uses: dict[str, int] = {}
    linear: dict[str, int] = {}
    for s in ir.walk_stmts(m.body):
        if isinstance(s, ir.FusedLinear):
            for w in s.weights:
                uses[w] = uses.get(w, 0) + 1
                linear[w] = linear.get(w, 0) + 1
    for e in ir.walk_exprs(m.body):
        if isinstance(e, ir.Ref) and e.kind in ("param", "layer_param"):
            uses[e.name] = uses.get(e.name, 0) + 1
        if isinstance(e, ir.Op) and e.op == "linear":
            w = e.arg("weight")
            if isinstance(w, ir.Ref) and w.kind in ("param", "layer_param"):
                linear[w.name] = linear.get(w.name, 0) + 1
    out = []
    for t in m.params:
        rank = t.ty.rank - (1 if t.name in m.stacked else 0)
        if rank == 2 and t.condition is None and uses.get(t.name, 0) and uses.get(t.name) == linear.get(t.name):
            out.append(t.name)
    return out


def _hoistable(s, loop: ir.Loop) -> bool:
    """`name[l] = local` at the top of the loop body, into an outer tensor: done by the caller."""
    return (isinstance(s, ir.SetItem) and s.name in loop.carried and len(s.index) == 1
            and isinstance(s.index[0], ir.Ref) and s.index[0].kind == "loopvar"
            and isinstance(s.value, ir.Ref) and s.value.kind == "local"
            and not any(isinstance(t, (ir.Bind, ir.SetItem)) and t.name == s.name and t is not s
                        for t in ir.walk_stmts(loop.body)))


def _uses_loopvar(stmts) -> bool:
    return any(isinstance(e, ir.Ref) and e.kind == "loopvar" for e in ir.walk_exprs(stmts))


def _without_self_alias(d: Dim, em: _Emitter) -> str:
    """A derived dim's own definition (its property must not refer to itself)."""
    saved = em.g.derived_by_dim
    em.g.derived_by_dim = {k: v for k, v in saved.items() if k != d}
    try:
        return d.render(em.atom)
    finally:
        em.g.derived_by_dim = saved


def _annotation(t, optional: bool = False) -> str:
    if isinstance(t, TensorT):
        return "Optional[torch.Tensor]" if optional or t.maybe_none else "torch.Tensor"
    if isinstance(t, ScalarT):
        return {"int": "int", "float": "float", "bool": "bool"}.get(t.kind, "object")
    return "object"


def generate(model: ir.Model, spec_path: str) -> str:
    return Generator(model, spec_path).render()
