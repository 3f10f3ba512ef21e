"""Declarations: the `param:`, `input:`, `parameter:`, `buffer:` and `output:` sections (config
fields, derived dims, tensor types with symbolic shapes, run-time dims) and `checkpoint` sections."""

from __future__ import annotations

from .. import ir
from ..weight_mapping import MappingError, encode_mapping, eval_field, field_names, format_key, key_fields, parse_field
from ..diagnostics import Related
from ..dims import Dim
from ..ir import ErrorT, ScalarT, TensorT
from ..language import DTYPES, RESERVED, SCALAR_KINDS
from ..names import public_name_problem
from ..ops.shapes import FLOATS
from ..source import Span
from .calls import ERR
from .key_proof import key_problem
from .messages import text
from .scopes import Binding


class Declarations:
    """Mixed into `Checker`: `declarations()` checks every section line; `check_mappings` the
    checkpoint sections, once the body has shown which parameters are stacked."""

    def declarations(self) -> None:
        order = {"param": 0, "input": 1, "parameter": 2, "buffer": 2, "output": 3}
        decls = sorted(self.spec.decls, key=lambda d: order[d.section])
        outputs = [d for d in decls if d.section == "output"]
        for decl in decls:
            if decl is (outputs[0] if outputs else None):
                for o in outputs:
                    self.where_clauses(o)  # `where` dims serve every output
            getattr(self, f"decl_{decl.section}")(decl)
        self.float_dtype = self.model_float_dtype()

    def model_float_dtype(self) -> str | None:
        """The floating dtype the parameters and buffers share: the model's own, which a cast of the
        model (`.to(torch.bfloat16)`) changes as a whole, and which the spec's other uses of that
        dtype follow (docs/language.md, section 3.2). Another floating dtype there is an error: a
        cast would not keep it."""
        tensors = [t for t in self.params + self.buffers if t.ty.dtype in FLOATS]
        if not tensors:
            return None
        first = tensors[0]
        for t in tensors[1:]:
            if t.ty.dtype != first.ty.dtype:
                self.r.error("dtype-mismatch", f"`{t.name}` is {t.ty.dtype}, but the model's floating parameters and "
                             f"buffers share one dtype, which casting the model changes: {first.ty.dtype}, as "
                             f"`{first.name}` is", t.span,
                             hint=f"declare it {first.ty.dtype}, and `cast` where another precision is needed")
        return first.ty.dtype

    def decl_param(self, d: ir.Decl) -> None:
        if d.type is None:  # derived: D = n_embd, head_dim = D // H
            value = self.expr(d.value)
            ty = value.ty
            if not isinstance(ty, ErrorT) and (not isinstance(ty, ScalarT) or ty.kind not in ("int", "float", "bool")):
                self.r.error("bad-type", f"`{d.name}` must be a number computed from params", d.value.span)
                ty = ERR
            if isinstance(ty, ErrorT):  # declared all the same, so its uses report nothing more
                self.declare(d.name, Binding("dim", ERR, d.name_span, uses=1), d.name_span)
                return
            alias = value.name if isinstance(value, ir.Ref) and value.kind in ("config", "dim") else None
            dim = ty.dim if ty.kind == "int" else None
            # an int no polynomial expresses (`int(x)`, `floor(x)` of a float): a dim of its own, that
            # Config computes; its bounds and divisibility are checked there like any config value's
            opaque = ty.kind == "int" and dim is None
            if opaque:
                dim = Dim.sym(d.name)
                if isinstance(value, ir.Op) and value.op == "len":  # `n_layer = len(layer_types)`: its length
                    listed = self.lookup(value.arg("x").name)
                    listed.ty = ir.SeqT(listed.ty.kind, dim)
            if dim is not None and dim.value is not None and dim.value <= 0 and not alias:
                self.r.warning("bad-constraint", f"`{d.name}` = {dim.value} is not a positive size", d.value.span)
            if self.declare(d.name, Binding("dim", ScalarT(ty.kind, dim), d.name_span), d.name_span):
                if opaque:  # an int Config computes, and its checks use: it must compute, for every config
                    self.note_number(value, d.value.span, f"`{d.name}`")
                self.derived.append(ir.Derived(d.name, dim, value, alias, d.span, opaque))
                self.remember(self.derived[-1])
                if dim is not None:
                    atoms = dim.atoms()
                    if len(dim.terms) == 1 and dim.terms[0][1] == 1 and len(dim.terms[0][0]) == 1 \
                            and dim.terms[0][0][0][1] == 1:
                        atom = dim.terms[0][0][0][0]
                        self.display.setdefault(atom, d.name)
                    elif dim not in self.display and atoms:
                        self.display[dim] = d.name
            return
        if isinstance(d.type, ir.Subscript) and isinstance(d.type.value, ir.Name) and d.type.value.id == "list":
            self.list_param(d)
            return
        kind = d.type.id if isinstance(d.type, ir.Name) else None
        if kind not in SCALAR_KINDS:
            self.r.error("bad-type", f"a param is `int`, `float`, `bool` or `str`, or a `list[...]` of one, not "
                         f"`{text(d.type)}`", d.type.span,
                         hint="tensors are declared in `input:`, `parameter:`, `buffer:` or `output:`")
            self.declare(d.name, Binding("config", ERR, d.name_span, uses=1), d.name_span)  # no cascade
            return
        default = ir.MISSING
        if d.value is not None:
            default = self.literal(d.value, kind)
        ty = ScalarT(kind, Dim.sym(d.name) if kind == "int" else None)
        if self.declare(d.name, Binding("config", ty, d.name_span), d.name_span):
            self.config.append(ir.ConfigField(d.name, kind, default, d.span))

    def list_param(self, d: ir.Decl) -> None:
        """`name : list[K]` or `list[K, N]`: a list of K (a scalar kind) from the config, N long
        where N is given (Config checks it); its default a list literal of K."""
        index = d.type.index
        kind = index[0].id if index and isinstance(index[0], ir.Name) else None
        if kind not in SCALAR_KINDS or len(index) > 2:
            self.r.error("bad-type", f"a list param is `list[K]` or `list[K, N]`, K one of `int`, `float`, `bool`, "
                         f"`str` and N its length, not `{text(d.type)}`", d.type.span)
            self.declare(d.name, Binding("config", ERR, d.name_span, uses=1), d.name_span)
            return
        length = self.dim_expr(index[1], "config") if len(index) == 2 else None
        default = ir.MISSING
        if d.value is not None:
            items = d.value.items if isinstance(d.value, ir.ListExpr) else None
            if items is None:
                self.r.error("bad-default", f"the default of a `list[{kind}]` param is a list literal (`[...]`)",
                             d.value.span)
            else:
                values = [self.literal(i, kind) for i in items]
                default = ir.MISSING if ir.MISSING in values else tuple(values)
            if length is not None and default is not ir.MISSING:
                expected = self.at_defaults(length)
                if expected is not None and expected != len(default):
                    said = self.show_dim(length)
                    said += f" = {expected}" if said != str(expected) else ""
                    self.r.error("bad-default", f"the default of `{d.name}` has {len(default)} items, and its type "
                                 f"says {said}", d.value.span)
        if self.declare(d.name, Binding("config", ir.SeqT(kind, length), d.name_span), d.name_span):
            self.config.append(ir.ConfigField(d.name, f"list[{kind}]", default, d.span, length))

    def literal(self, e: ir.Expr, kind: str):
        neg = isinstance(e, ir.Unary) and e.op == "-"
        base = e.operand if neg else e
        value = base.value if isinstance(base, (ir.Num, ir.Str, ir.Const)) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and neg:
            value = -value
        ok = {"int": lambda v: isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**62,
              "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
              "bool": lambda v: isinstance(v, bool),
              "str": lambda v: isinstance(v, str)}[kind]
        if value is None or not ok(value):
            self.r.error("bad-default", f"the default of {'an' if kind == 'int' else 'a'} `{kind}` param must be "
                         f"{'an' if kind == 'int' else 'a'} {kind} literal", e.span)
            return ir.MISSING
        return float(value) if kind == "float" else value

    def tensor_type(self, e: ir.Expr, dim_mode: str, name: str = "") -> TensorT | None:
        if not (isinstance(e, ir.Call) and e.func == "Tensor"):
            self.r.error("bad-type", f"expected `Tensor([dims], dtype)`, got `{text(e)}`", e.span,
                         hint="write e.g. `Tensor([B, T, D], float32)`")
            return None
        if e.kwargs or not 1 <= len(e.args) <= 2 or not isinstance(e.args[0], ir.ListExpr):
            self.r.error("bad-type", "`Tensor` takes a list of dims and a dtype: `Tensor([B, T], int64)`", e.span)
            return None
        dtype = "float32"
        if len(e.args) == 2:
            dt = e.args[1]
            if not isinstance(dt, ir.Name) or dt.id not in DTYPES:
                self.r.error("bad-type", f"unknown dtype `{text(dt)}`", dt.span,
                             hint="dtypes: " + ", ".join(DTYPES))
                return None
            dtype = dt.id
        dims = []
        for axis, item in enumerate(e.args[0].items):
            d = self.dim_expr(item, dim_mode)
            if d is None or not self.size(d, item.span, f"axis {axis} of `{name}`" if name else f"axis {axis}"):
                return None
            dims.append(d)
        return TensorT(tuple(dims), dtype)

    def dim_expr(self, e: ir.Expr, mode: str, owner: str | None = None) -> Dim | None:
        """A shape entry. mode: config (params only) | input (new names bind run-time dims) | output."""
        if isinstance(e, ir.Name) and self.lookup(e.id) is None and e.id not in RESERVED:
            if mode == "input":
                self.runtime_dim(e.id, e.span, owner)
                return Dim.sym(e.id)
            if mode == "output" and e.id in self.where_dims:
                return self.where_dims[e.id]
            if mode == "output":  # a free dim, bound by unification with the computed output
                self.free_out.add(e.id)
                return Dim.sym(e.id)
            self.unknown(e.id, e.span, "unknown-dim",
                         "parameter shapes may use params and derived dims only" if mode == "config" else None)
            return None
        value = self.expr(e)
        if isinstance(value.ty, ErrorT):
            return None
        if not isinstance(value.ty, ScalarT) or value.ty.kind != "int" or value.ty.dim is None:
            self.r.error("unknown-dim", f"`{text(e)}` is not a dimension (an int param or dim expression)", e.span,
                         **self.not_an_int(value))
            return None
        if mode == "config":
            bad = [s for s in value.ty.dim.symbols() if s in self.runtime]
            if bad:
                self.r.error("unknown-dim", f"`{bad[0]}` is a run-time dim; parameter shapes may use params only",
                             e.span)
                return None
        return value.ty.dim

    def runtime_dim(self, name: str, span: Span, owner: str | None) -> None:
        if name in self.runtime:
            return
        self.scopes[0].names[name] = Binding("dim", ScalarT("int", Dim.sym(name)), span)
        self.runtime[name] = ("", 0)
        if owner:
            self.owner[name] = owner

    def decl_input(self, d: ir.Decl) -> None:
        self.tensor_decl(d, "input")

    def decl_parameter(self, d: ir.Decl) -> None:
        self.tensor_decl(d, "param")

    def decl_buffer(self, d: ir.Decl) -> None:
        self.tensor_decl(d, "buffer")

    def where_clauses(self, d: ir.Decl) -> None:
        for w in d.where:
            if w.name in self.where_dims:
                self.r.error("redefinition", f"`{w.name}` is defined by two `where` clauses", w.name_span)
                continue
            dim = self.dim_expr(w.value, "input")
            if dim is not None:
                self.where_dims[w.name] = dim
                self.display.setdefault(dim, w.name)

    def decl_output(self, d: ir.Decl) -> None:
        self.tensor_decl(d, "output")

    def tensor_decl(self, d: ir.Decl, kind: str) -> None:
        if d.type is None:
            self.r.error("bad-type", f"`{d.name} = ...` belongs in `param:`; declare a tensor with a type",
                         d.span, hint=f"write `{d.name} : Tensor([dims], dtype)`")
            return
        if kind == "input":
            mode = "input"
            before = set(self.runtime)
            ty = self.tensor_type(d.type, mode, d.name)
            if ty is not None and d.optional:
                for s in set(self.runtime) - before:
                    self.owner[s] = d.name
            if ty is not None:
                for axis, dim in enumerate(ty.shape):
                    s = dim.as_symbol()
                    if s in self.runtime and self.runtime[s] == ("", 0):
                        self.runtime[s] = (d.name, axis)
                self.fixed_length_warning(d, ty)
        else:
            ty = self.tensor_type(d.type, "output" if kind == "output" else "config", d.name)
        if ty is None:
            if kind != "output":  # declared all the same, so its uses report nothing more
                self.declare(d.name, Binding(kind, ERR, d.name_span, d.optional, uses=1), d.name_span)
            return
        cond = None
        layer_var = self.layer_var(d, kind)
        if d.condition is not None:
            if kind not in ("param", "buffer"):
                self.r.error("syntax", "only parameters and buffers may be conditional (`if c else None`)",
                             d.condition.span, hint="mark an optional input with `?`")
            elif layer_var is not None:
                # the layer variable is bound for the condition only, as a dim (`l % 2 == 1`)
                self.push()
                self.declare(layer_var, Binding("loopvar", ScalarT("int", Dim.sym(layer_var)), d.layer_var[1],
                                                uses=1), d.layer_var[1])
                self.layer_counts[layer_var] = ty.shape[0] if ty.rank else Dim.const(0)
                cond = self.condition(d.condition)
                del self.layer_counts[layer_var]
                self.pop()
            else:
                cond = self.condition(d.condition)
        optional = d.optional or cond is not None
        if d.optional and kind not in ("input", "output"):
            self.r.error("syntax", "only inputs and outputs may be optional (`?`)", d.span,
                         hint="a parameter that may be absent is written `... if flag else None`")
            optional = cond is not None  # reported once; its uses are not also "unguarded"
        if kind == "param" and ty.dtype not in FLOATS:
            self.r.error("dtype-mismatch", f"`{d.name}` is a parameter, which is trained, so its dtype is a floating "
                         f"one ({', '.join(FLOATS)}), not {ty.dtype}", d.type.span,
                         hint="a tensor the model keeps but does not train goes under `buffer:`")
        init = None
        if d.value is not None:
            if kind in ("param", "buffer"):
                self.initialising = d.name
                # a conditional tensor is initialised only when it exists (a per-layer condition is
                # no config condition: its initialiser is checked for every config)
                with self.guarded(cond if layer_var is None else None):
                    init = self.initialiser(d.value, ty)
                self.initialising = None
            else:
                self.r.error("syntax", f"an {kind} takes no default value", d.value.span)
        t = ir.Tensor(d.name, ty, optional, cond, init, d.span, layer_var=layer_var if cond is not None else None)
        b = Binding(kind, TensorT(ty.shape, ty.dtype, optional), d.name_span, optional)
        if kind == "output":
            problem = public_name_problem("output", d.name)
            if problem:
                self.r.error("reserved-name", problem, d.name_span, hint="pick another name")
            elif d.name in {o.name for o in self.outputs}:
                self.r.error("redefinition", f"output `{d.name}` is declared twice", d.name_span)
            self.outputs.append(t)
            self.decl_spans[d.name] = d.span
            return
        if self.declare(d.name, b, d.name_span):
            self.decl_spans[d.name] = d.span
            {"input": self.inputs, "param": self.params, "buffer": self.buffers}[kind].append(t)

    def layer_var(self, d: ir.Decl, kind: str) -> str | None:
        """The `l` of `name[l] : ... if cond else None`: a parameter or buffer that exists on the layers
        where `cond` holds. None (after reporting) when the declaration cannot have one."""
        if d.layer_var is None:
            return None
        var, where = d.layer_var
        if kind not in ("param", "buffer"):
            self.r.error("syntax", f"only parameters and buffers may exist on some layers only (`{d.name}[{var}]`)",
                         where, hint=f"write `{d.name} : ...`")
            return None
        if d.condition is None:
            self.r.error("syntax", f"`{d.name}[{var}]` names a layer variable for a condition, and there is none",
                         where, hint=f"write `{d.name}[{var}] : Tensor([n_layer, ...]) if <condition on {var}> else "
                                     f"None`, or `{d.name} : ...` for a tensor every layer has")
            return None
        return var

    def fixed_length_warning(self, d: ir.Decl, ty: TensorT) -> None:
        if ty.dtype not in ("int32", "int64") or ty.rank < 2 or d.optional:
            return
        items = d.type.args[0].items if isinstance(d.type, ir.Call) else ()
        for axis in range(1, ty.rank):
            sym = ty.shape[axis].as_symbol()
            item = items[axis] if axis < len(items) else None
            if sym and sym not in self.runtime and isinstance(item, ir.Name):
                self.r.warning(
                    "fixed-length",
                    f"axis {axis} of `{d.name}` is `{item.id}` = {sym}, a config value: every `{d.name}` must be "
                    f"exactly {sym} long, and a cache cannot extend it", item.span,
                    hint=f"name this axis with a fresh dim that is not a param (say `T_seq`); slice position "
                         f"tables to it and check it against {sym} at run time")


    def check_mappings(self, stacked: set) -> None:
        tensors = {t.name for t in self.params + self.buffers}
        seen: dict[tuple, Span] = {}
        values = self.key_values() if self.spec.mappings else {}
        for e in self.spec.mappings:
            if e.name != "_" and e.name not in tensors:
                self.unknown(e.name, e.span, "bad-checkpoint",
                             hint="a checkpoint entry maps a parameter or buffer (or `_` for keys to ignore)")
                continue
            if (e.fmt, e.name) in seen and e.name != "_":
                self.r.error("bad-checkpoint", f"`{e.name}` is mapped twice in `checkpoint {e.fmt}`", e.span,
                             related=(Related(seen[(e.fmt, e.name)], "first mapped here"),))
                continue
            seen[(e.fmt, e.name)] = e.span
            if e.name != "_" and (e.name in stacked) != (e.layer_var is not None):
                want = f"`{e.name}[l] <- ...` with `{{l}}` in the key" if e.name in stacked else f"`{e.name} <- ...`"
                self.r.error("bad-checkpoint", f"`{e.name}` is {'per layer' if e.name in stacked else 'not per layer'}"
                             f"; write {want}", e.span)
                continue
            target = next((t for t in self.params + self.buffers if t.name == e.name), None)
            if e.expert_var is not None and (target is None or target.ty.rank < 3):
                self.r.error("bad-checkpoint", f"`{e.name}[l, e]` reads the axis after the layer axis one key per "
                             f"entry, and `{e.name}` has {'no such axis' if target else 'no layer axis'}", e.span,
                             hint=f"write `{e.name}[l] <- ...`")
                continue
            try:
                encoded = encode_mapping(e.source, None if target is None else target.ty.rank - (e.name in stacked),
                                         expert=e.expert_var is not None)
                self.key_fields(e, encoded, target, e.name in stacked, values)
            except MappingError as err:
                self.r.error("bad-checkpoint", str(err), getattr(err, "span", None) or e.span,
                             hint='sources are "key" strings, `.T`, `a or b`, split("key", n, axis=i, index=j[, '
                                  'interleaved=True]) and join(["key", ...], axis=i, sizes=[n, ...])')

    def key_values(self) -> dict:
        """What a key's fields read for the defaults: the int params and the derived dims."""
        values = dict(self.defaults())
        for d in self.derived:
            if d.dim is not None and d.name not in values and (v := self.at_defaults(d.dim)) is not None:
                values[d.name] = v
        return values

    def key_fields(self, e: ir.MapEntry, encoded: tuple, target, per_layer: bool, values: dict) -> None:
        """The `{...}` fields of an entry's keys read `l` (per layer), `e` (`[l, e]`) and config ints
        only; for the defaults (`values`) every key is computed, none is negative and no two layers
        (or experts) give one key (MappingError otherwise): proved by check/key_proof.py."""
        ints = {c.name for c in self.config if c.kind == "int"} | {d.name for d in self.derived if d.dim is not None}
        # an ignored key (`_ <- "h.{l}.attn.bias"`) stands for every layer's
        allowed = ints | ({"l"} if per_layer or e.name == "_" else set()) | ({"e"} if e.expert_var is not None else set())
        keys = [k for k in _key_nodes(encoded)]
        for key in keys:
            for field in key_fields(key):
                for name in sorted(field_names(parse_field(field)) - allowed):
                    why = ("no layer number replaces it: the entry is not per layer" if name == "l" else
                           "an expert number replaces it only in `name[l, e] <- ...`" if name == "e" else
                           "a key reads the layer number `l`, the expert number `e` and int params")
                    raise MappingError(f"`{name}` in the key field `{{{field}}}`: {why}", _key_span(e.source, key))
        _join_sizes(e.source, target, per_layer, values, ints, self.at_defaults)
        if e.name == "_" or target is None or not per_layer:
            return
        layers = self.at_defaults(target.ty.shape[0])
        experts = self.at_defaults(target.ty.shape[1]) if e.expert_var is not None else 1
        if layers is None or experts is None:
            return  # not known for the defaults: interop computes them as it loads
        for key in keys:
            if (problem := key_problem(key, values, layers, experts)) is not None:
                raise MappingError(_problem_text(key, problem, values, e.expert_var is not None),
                                   _key_span(e.source, key))


def _join_sizes(source: ir.Expr, target, per_layer: bool, values: dict, ints: set, at_defaults) -> None:
    """A `join`'s sizes read int params and dims (`ints`) only, and add up to the axis it fills (for
    the defaults, `values`, where they are known)."""
    if isinstance(source, ir.BoolOp):
        _join_sizes(source.left, target, per_layer, values, ints, at_defaults)
        _join_sizes(source.right, target, per_layer, values, ints, at_defaults)
        return
    if not (isinstance(source, ir.Call) and source.func == "join") or target is None:
        return
    shape = target.ty.shape[1:] if per_layer else target.ty.shape
    enc = encode_mapping(source, len(shape))
    for size, tree in zip(next(k.value.items for k in source.kwargs if k.name == "sizes"), enc[3]):
        if unknown := sorted(field_names(tree) - ints):
            raise MappingError(f"`{unknown[0]}` in a join's size: a size reads int params and dims", size.span)
    want = at_defaults(shape[enc[2]])
    try:
        got = [eval_field(tree, values) for tree in enc[3]]
    except KeyError:  # a param without a default: interop checks the sizes as it loads
        return
    if want is not None and sum(got) != want:
        raise MappingError(f"the join's sizes add up to {' + '.join(map(str, got))} = {sum(got)} (for the "
                           f"defaults), and axis {enc[2]} of the tensor it fills is {want}", source.span)


def _problem_text(key: str, problem: tuple, values: dict, per_expert: bool) -> str:
    """What a key_problem says, at the (l, e) it names."""
    def where(at):
        return f"l = {at[0]}" + (f", e = {at[1]}" if per_expert else "")

    def name(at):
        return format_key(key, {**values, "l": at[0], "e": at[1]})

    kind = problem[0]
    if kind == "zero":
        return f"the key `{key}` divides by zero at {where(problem[1])} (for the defaults)"
    if kind == "missing":  # a param without a default
        return f"the key `{key}` reads `{problem[1]}`, which has no default, so check cannot list its keys"
    if kind == "unproved":  # key_proof says why: a field it cannot reason about, and too many keys to list
        return f"check cannot prove the key `{key}` sound for the defaults: {problem[1]}"
    if kind == "negative":
        return f"the key `{key}` gives a negative number at {where(problem[1])} (for the defaults): {name(problem[1])}"
    return (f"the key `{key}` gives `{name(problem[2])}` at {where(problem[1])} and at {where(problem[2])} (for the "
            f"defaults): each layer needs a key of its own")


def _key_nodes(encoded):
    """The key texts of an encoded source."""
    if isinstance(encoded, tuple) and encoded and encoded[0] == "key":
        yield encoded[1]
    elif isinstance(encoded, tuple):
        for x in encoded:
            yield from _key_nodes(x)


def _key_span(source: ir.Expr, key: str):
    """Where the string `key` is written in a source expression."""
    for x in _syntax_nodes(source):
        if isinstance(x, ir.Str) and x.value == key:
            return x.span
    return source.span


def _syntax_nodes(e):
    """`e` and the syntax nodes inside it (a call's arguments, an `or`'s sides, `.T`'s value)."""
    yield e
    for value in vars(e).values():
        for v in value if isinstance(value, tuple) else (value,):
            if hasattr(v, "span") and hasattr(v, "__dict__"):
                yield from _syntax_nodes(v)
