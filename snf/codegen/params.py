"""Declaring and initialising parameters, as the layout plan places them."""

from __future__ import annotations

from .. import ir
from ..ops.shapes import FLOATS
from ..passes.layout import Module, Place
from .emit import Emitter

# the module class of each kind of module the layout plan makes
MODULE_CLASSES = {"linear": "nn.Linear", "layer_norm": "nn.LayerNorm", "rms_norm": "nn.RMSNorm",
                  "embedding": "nn.Embedding"}


def _dtype_kw(dtype: str) -> str:
    return "" if dtype == "float32" else f", dtype=torch.{dtype}"


def _local_shape(gen, t: ir.Tensor) -> tuple:
    """The shape of one parameter as its owner stores it (a per-layer one without the layer axis)."""
    return t.ty.shape[1:] if gen.plans.blocks.owner(t.name) else t.ty.shape


def _bias_flag(em: Emitter, gen, biases) -> str:
    names = [b for b in biases if b is not None]
    if not names:
        return "False"
    cond = layer_condition(gen, gen.model.param(names[0]))  # a bias of some layers: on those
    if cond is None:
        return "True"
    code = em.code(cond)
    return code if isinstance(cond, ir.Ref) and cond.kind == "config" and cond.ty == ir.BOOL else f"bool({code})"


def module_line(em: Emitter, gen, m: Module) -> str:
    weight = gen.model.param(m.weights[0])
    shape = _local_shape(gen, weight)
    dtype = _dtype_kw(weight.ty.dtype)
    cls = MODULE_CLASSES[m.kind]
    if m.kind == "linear":
        out = sum((_local_shape(gen, gen.model.param(w))[0] for w in m.weights[1:]), shape[0])
        args = f"{em.dim(shape[1])}, {em.dim(out)}, bias={_bias_flag(em, gen, m.biases)}"
    elif m.kind == "embedding":
        args = f"{em.dim(shape[0])}, {em.dim(shape[1])}"
    else:
        eps = f"eps={em.code(m.site.arg('eps'))}"
        bias = f", bias={_bias_flag(em, gen, m.biases)}" if m.kind == "layer_norm" else ""
        args = f"{em.dim(shape[0])}, {eps}{bias}"
    if len(m.weights) > 1:
        spec_names = ", ".join(m.weights) + " fused" + (" (and their biases)" if any(m.biases) else "")
    else:
        spec_names = ", ".join(n for n in m.weights + m.biases if n)
    cond = f" if {em.code(layer_condition(gen, weight))} else None" if weight.condition is not None else ""
    return f"self.{m.attr} = {cls}({args}{dtype}){cond}  # {spec_names}  {gen.spec_file}:{weight.span.line}"


def declaration_lines(em: Emitter, gen, owner: str | None) -> list[str]:
    """The modules and plain parameters/buffers one owner (the Model, or a Block) holds, in the
    spec's order."""
    lines, made = [], set()
    modules = {m.attr: m for m in gen.plans.layout.modules_of(owner)}
    for place in gen.plans.layout.places:
        if place.owner != owner:
            continue
        if place.module is not None:
            if place.module not in made:
                made.add(place.module)
                lines.append(module_line(em, gen, modules[place.module]))
            continue
        t = gen.model.param(place.name)
        shape = _local_shape(gen, t)
        make = f"torch.empty({', '.join(em.dim(d) for d in shape) or '()'}{_dtype_kw(t.ty.dtype)})"
        cond = f" if {em.code(layer_condition(gen, t))} else None" if t.condition is not None else ""
        where = f"  # {gen.show(shape)}  {gen.spec_file}:{t.span.line}"
        if t in gen.model.buffers:
            lines.append(f"self.register_buffer({place.path!r}, {make}{cond}){where}")
        else:
            lines.append(f"self.{place.path} = nn.Parameter({make}){cond}{where}")
    return lines


def layer_condition(gen, t: ir.Tensor) -> ir.TExpr:
    """A tensor's condition as its owner's `__init__` tests it: one declared `name[i]` reads the
    layer number as the loop's variable (the Block's `__init__` argument)."""
    if t.layer_var is None:
        return t.condition
    return ir.rename_var(t.condition, t.layer_var, gen.plans.blocks.owner(t.name).loop.var)


def per_layer_conditions(gen, owner: str | None) -> bool:
    """Whether a Block holds a tensor that exists on some of its layers only."""
    return any(gen.model.param(p.name).layer_var for p in gen.plans.layout.places if p.owner == owner)


def _target(em: Emitter, place: Place) -> str:
    whole = f"self.{place.path}"
    if place.rows is None:
        return whole
    lo, hi = place.rows
    return f"{whole}[{em.dim(lo) if lo.value != 0 else ''}:{em.dim(hi)}]"


def init_lines(em: Emitter, gen, owner: str | None) -> list[str]:
    """`reset_parameters`: each spec parameter initialised as the spec says, where it lives. The
    parts of a fused tensor initialised alike are initialised as one."""
    groups: dict[str, list] = {}  # stored tensor -> [(place, line)]
    for place in gen.plans.layout.places:
        if place.owner == owner:
            t = gen.model.param(place.name)
            groups.setdefault(place.path, []).append((t, _init_line(em, t, _target(em, place)),
                                                   place.module if place.path == f"{place.module}.weight" else None))
    lines = []
    for path, parts in groups.items():
        t = parts[0][0]
        alike = {_init_line(em, p, "X") for p, _, _ in parts}
        todo = [_init_line(em, t, f"self.{path}")] if len(parts) > 1 and len(alike) == 1 else [ln for _, ln, _ in parts]
        if t.condition is not None:
            held = f"self.{parts[0][2] or path}"  # a conditional linear is None, not its weight
            lines += [f"if {held} is not None:"] + ["    " + ln for ln in todo]
        else:
            lines += todo
    return lines


# The initialiser of a tensor declared without one, by how it is used (docs/language.md, section 8).
_DEFAULT_INIT = {"bias": "zeros", "norm_weight": "ones"}


def _default_init(t: ir.Tensor) -> str:
    """An integer or boolean buffer starts as zeros (`normal` draws floats)."""
    return _DEFAULT_INIT.get(t.role, "normal") if t.ty.dtype in FLOATS else "zeros"


def recomputed_buffers(m: ir.Model) -> tuple[str, ...]:
    """Buffers whose value the config decides (a zeros, ones, constant or sinusoidal initialiser):
    a checkpoint need not give them (snf.interop leaves them as initialised)."""
    deterministic = ("zeros", "ones", "constant", "sinusoidal")
    return tuple(t.name for t in m.buffers
                 if (t.init.op if t.init is not None else _default_init(t)) in deterministic)


def _init_line(em: Emitter, t: ir.Tensor, target: str) -> str:
    if t.init is not None:
        kind, args = t.init.op, {k: em.code(v) for k, v in t.init.args}
    else:
        kind = _default_init(t)
        args = {"mean": "0.0", "std": "0.02"} if kind == "normal" else {}
    if kind == "normal":
        return f"nn.init.normal_({target}, mean={args['mean']}, std={args['std']})"
    if kind == "zeros":
        return f"nn.init.zeros_({target})"
    if kind == "ones":
        return f"nn.init.ones_({target})"
    if kind == "constant":
        return f"nn.init.constant_({target}, {args['value']})"
    if kind == "sinusoidal":
        return f"{target}.copy_(_sinusoidal({target}.shape, {args['base']}))"
    raise ValueError(kind)  # pragma: no cover
