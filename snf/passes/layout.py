"""The weight-layout plan: where each spec parameter and buffer lives in the generated module.

Parameters that play one role in one kind of op live in the torch module made for it, as a
hand-written model keeps them: a weight used only by `linear` (with one bias) is an
`nn.Linear`, one used only by `layer_norm` / `rms_norm` an `nn.LayerNorm` / `nn.RMSNorm`, an
embedding table an `nn.Embedding` (a tied LM head then reads `token_embedding.weight`); a linear
weight present under a condition, with no bias, an `nn.Linear` or None (an LM head untied by a switch),
so that every weight a tensor-parallel plan shards lives in a module `parallelize_module` can place.
Everything else is a plain `nn.Parameter` (or buffer) named as in the spec. So state-dict keys
and `named_parameters()` agree, tools that look for `nn.Linear` (PEFT/LoRA, torchao) find the
linear layers, and `spec_parameters` says where each spec name lives.

A module is named after its weight (`attn_q_weight` -> `attn_q`); where that name is taken, by
another spec name or by an `nn.Module` attribute, its parameters stay plain instead.
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass

from .. import ir
from ..dims import Dim
from ..names import GENERATED_ATTRIBUTES, Namespace, module_attribute_names
from .blocks import BlockPlan

# op -> (its input, the argument holding the module's weight, the one holding its bias)
MODULE_OPS = {"linear": ("x", "weight", "bias"), "layer_norm": ("x", "weight", "bias"),
              "rms_norm": ("x", "weight", None), "gather": ("index", "table", None)}


@dataclass(frozen=True)
class Module:
    """A torch module holding spec parameters: its attribute in the owner and what it is made of."""

    attr: str
    kind: str  # linear | layer_norm | rms_norm | embedding
    weights: tuple[str, ...]  # spec names of the weight, or the fused parts in row order
    biases: tuple[str | None, ...]  # the matching biases (all None, or one per weight)
    site: ir.Op | ir.FusedLinear  # one op that uses it: its arguments give eps, sizes, dtype


@dataclass(frozen=True)
class Place:
    """Where one spec parameter or buffer lives."""

    name: str
    owner: str | None  # the Block list attribute (`layers`) for per-layer ones; None: the Model
    path: str  # attribute path inside the owner: `attn_qkv.weight`, `ln_f.bias`, `pos_table`
    rows: tuple[Dim, Dim] | None = None  # the rows [lo, hi) of a fused tensor that are this parameter
    module: str | None = None  # the module attribute, when it lives in one

    @property
    def key(self) -> str:
        """Its state-dict key, with `{l}` for the layer of a per-layer one."""
        return f"{self.owner}.{{l}}.{self.path}" if self.owner else self.path


@dataclass(frozen=True)
class LayoutPlan:
    modules: tuple[tuple[str | None, Module], ...]  # (owner, module), in declaration order
    places: tuple[Place, ...]  # in the spec's declaration order

    def place(self, name: str) -> Place:
        return next(p for p in self.places if p.name == name)

    def modules_of(self, owner: str | None) -> list[Module]:
        return [m for o, m in self.modules if o == owner]

    def held(self, model: ir.Model, owner: str | None, floating: bool = False) -> str | None:
        """The path of a tensor the module `owner` always holds (`ln1.weight`), to take a device
        from; with `floating`, one of the model's floating dtype, to take the dtype it holds now from."""
        return next((p.path for p in self.places if p.owner == owner and model.param(p.name).condition is None
                     and (not floating or model.param(p.name).ty.dtype == model.float_dtype)), None)

    def module_call(self, op: ir.Op) -> tuple[Place, str] | None:
        """(the weight's place, the input argument) when `op` is a call of the module that holds its
        weight and bias, else None."""
        roles = MODULE_OPS.get(op.op)
        if roles is None:
            return None
        arg, weight_role, bias_role = roles
        weight = op.arg(weight_role)
        if not isinstance(weight, ir.Ref) or weight.kind not in ("param", "layer_param"):
            return None
        place = self.place(weight.name)
        if place.module is None or place.rows is not None:
            return None
        module = next(m for o, m in self.modules if o == place.owner and m.attr == place.module)
        if module.kind != _KIND[op.op] or module.weights[0] != weight.name:
            return None
        bias = op.arg(bias_role) if bias_role else None
        bias_name = bias.name if isinstance(bias, ir.Ref) else None
        return (place, arg) if bias_name == module.biases[0] else None


_KIND = {"linear": "linear", "layer_norm": "layer_norm", "rms_norm": "rms_norm", "gather": "embedding"}


def plan_layout(model: ir.Model, blocks: BlockPlan) -> LayoutPlan:
    tensors = {t.name: t for t in model.params + model.buffers}
    buffers = {t.name for t in model.buffers}
    uses = _uses(model)
    owner_of = {name: (blocks.owner(name).attr if blocks.owner(name) else None) for name in tensors}
    taken = set(tensors) | GENERATED_ATTRIBUTES | {b.attr for b in blocks.blocks}
    claimed: dict[tuple, str] = {}  # (owner, attr) -> module
    modules: list[tuple[str | None, Module]] = []
    placed: dict[str, Place] = {}

    def free(owner, attr: str, base: str) -> bool:
        return not (attr in taken - {base} or (owner, attr) in claimed or attr in module_attribute_names()
                    or keyword.iskeyword(attr) or attr.startswith("_") or not attr.isidentifier())

    def claim(owner, base: str, fused: bool = False) -> str | None:
        attr = base[:-len("_weight")] if base.endswith("_weight") and len(base) > 7 else base
        if fused:  # a name snfc made up: number it until it is free
            attr = next(a for a in (attr if i == 1 else f"{attr}_{i}" for i in range(1, 10 ** 6))
                        if free(owner, a, base))
        elif not free(owner, attr, base):
            return None
        claimed[(owner, attr)] = base
        return attr

    for s in ir.walk_stmts(model.body):
        if isinstance(s, ir.FusedLinear):
            owner = owner_of[s.weights[0]]
            module = Module(claim(owner, s.fused_weight, fused=True), "linear", s.weights, s.biases, s)
            modules.append((owner, module))
            _place_fused(placed, owner, module)

    for name, t in tensors.items():
        if name in placed or name in buffers:
            continue
        form = _module_form(name, uses, tensors, blocks)
        if form is None:
            continue
        kind, site, bias = form
        if t.condition is not None and (kind != "linear" or bias is not None):
            continue  # a conditional linear is a module or None (a head untied by a switch: `lm_head`)
        if bias is not None and bias in placed:
            continue
        attr = claim(owner_of[name], name)
        if attr is None:
            continue
        modules.append((owner_of[name], Module(attr, kind, (name,), (bias,), site)))
        placed[name] = Place(name, owner_of[name], f"{attr}.weight", None, attr)
        if bias is not None:
            placed[bias] = Place(bias, owner_of[name], f"{attr}.bias", None, attr)

    plain = Namespace(set(module_attribute_names()) | GENERATED_ATTRIBUTES | {b.attr for b in blocks.blocks}
                      | {a for _, a in claimed}, attribute=True)
    places = []
    for name in tensors:
        places.append(placed.get(name) or Place(name, owner_of[name], plain.name(name)))
    order = {n: i for i, n in enumerate(tensors)}
    modules.sort(key=lambda om: order[om[1].weights[0]])
    return LayoutPlan(tuple(modules), tuple(places))


def _place_fused(placed: dict, owner, module: Module) -> None:
    site = module.site
    lo = Dim.const(0)
    for weight, bias, size in zip(site.weights, site.biases, site.sizes):
        placed[weight] = Place(weight, owner, f"{module.attr}.weight", (lo, lo + size), module.attr)
        if bias is not None:
            placed[bias] = Place(bias, owner, f"{module.attr}.bias", (lo, lo + size), module.attr)
        lo = lo + size


def _uses(model: ir.Model) -> dict[str, list[tuple[ir.Op | None, str | None]]]:
    """Every use of each parameter or buffer: (the op it is an argument of, which argument);
    (None, None) for a use that is not a direct op argument."""
    uses: dict[str, list] = {}
    for s in ir.walk_stmts(model.body):
        if isinstance(s, ir.FusedLinear):
            for n in list(s.weights) + [b for b in s.biases if b]:
                uses.setdefault(n, []).append((s, "fused"))
    seen_as_arg = set()
    for e in ir.walk_exprs(model.body):
        if isinstance(e, ir.Op):
            for role, a in e.args:
                if isinstance(a, ir.Ref) and a.kind in ("param", "layer_param", "buffer"):
                    uses.setdefault(a.name, []).append((e, role))
                    seen_as_arg.add(id(a))
    for e in ir.walk_exprs(model.body):
        if isinstance(e, ir.Ref) and e.kind in ("param", "layer_param", "buffer") and id(e) not in seen_as_arg:
            uses.setdefault(e.name, []).append((None, None))
    return uses


def _same(a, b) -> bool:
    """Two argument expressions that lower to the same code (spans aside)."""
    if isinstance(a, ir.Lit) and isinstance(b, ir.Lit):
        return a.value == b.value and type(a.value) is type(b.value)
    if isinstance(a, ir.Ref) and isinstance(b, ir.Ref):
        return a.name == b.name and a.kind == b.kind
    return False


def _module_form(name: str, uses: dict, tensors: dict, blocks: BlockPlan):
    """(kind, one op using it, its bias) when `name` can live in a module of that kind, else None."""
    mine = uses.get(name, [])
    if not mine or any(op is None or isinstance(op, ir.FusedLinear) for op, _ in mine):
        return None
    rank = tensors[name].ty.rank - (1 if blocks.owner(name) else 0)
    ops = {op.op for op, _ in mine}
    if "gather" in ops:  # an embedding table; a tied head reads its `.weight`
        gathers = [op for op, role in mine if op.op == "gather" and role == "table"]
        if rank == 2 and gathers and all((op.op, role) in (("gather", "table"), ("linear", "weight"))
                                         for op, role in mine):
            return "embedding", gathers[0], None
        return None
    if len(ops) != 1:
        return None
    kind = ops.pop()
    if kind not in ("linear", "layer_norm", "rms_norm") or any(role != "weight" for _, role in mine):
        return None
    if rank != (2 if kind == "linear" else 1):
        return None
    if kind != "linear" and not name.endswith("weight"):
        return None  # a norm module is named after its weight: `ln_1_weight` -> `ln_1`; `gamma` stays `gamma`
    first = mine[0][0]
    bias_role = MODULE_OPS[kind][2]
    others = [n for n, _ in first.args if n not in ("x", "weight")]
    for op, _ in mine[1:]:
        if not all(_same(first.arg(n), op.arg(n)) for n in others):
            return None
    if kind in ("layer_norm", "rms_norm") and not _static_eps(first):
        return None
    bias = first.arg(bias_role) if bias_role else None
    if isinstance(bias, ir.Ref):
        per_layer = 1 if blocks.owner(bias.name) else 0
        if bias.kind not in ("param", "layer_param") or tensors[bias.name].ty.rank - per_layer != 1 \
                or blocks.owner(bias.name) != blocks.owner(name):
            return None
        sites = [op for op, _ in mine]
        if any(op not in sites for op, _ in uses.get(bias.name, [])):
            return None  # the bias is used elsewhere too
        return kind, first, bias.name
    if bias is not None and not (isinstance(bias, ir.Lit) and bias.value is None):
        return None
    return kind, first, None


def _static_eps(op: ir.Op) -> bool:
    eps = op.arg("eps")
    return isinstance(eps, ir.Lit) or isinstance(eps, ir.Ref) and eps.kind in ("config", "dim")
