"""The plans as text: one printer per plan, for the per-pass examples (tests/golden/passes/) and
for reading what a pass decided. A statement is named by its spec line and what it binds."""

from __future__ import annotations

from .. import ir
from ..dims import show_dim
from . import Plans


def stmt_name(s) -> str:
    """`line 12: let h` / `line 14: new_keys[...] =` / `line 9: for l` / `line 10: if`."""
    if isinstance(s, ir.Bind):
        what = f"{'let ' if s.let else ''}{s.name}"
    elif isinstance(s, ir.SetItem):
        what = f"{s.name}[...] ="
    elif isinstance(s, ir.FusedLinear):
        what = ", ".join(s.targets) + " (fused projection)"
    elif isinstance(s, ir.Loop):
        what = f"for {s.var}"
    elif isinstance(s, ir.TIf):
        what = "if"
    else:
        what = type(s).__name__.lower()
    return f"line {s.span.line}: {what}"


def show_blocks(plans: Plans) -> list[str]:
    out = []
    for b in plans.blocks.blocks:
        out.append(f"{b.cls} (Model.{b.attr}): the loop at line {b.loop.span.line}, {len(b.body)} statements")
        out += [f"  reads {name} ({kind})" for name, kind in b.reads]
        out += [f"  carries {name}" for name in b.carried]
        out += [f"  the caller writes {stmt_name(s)}" for s in b.hoisted]
        out += ["  reads the layer variable"] if b.uses_var else []
        sig = plans.signature(b)
        device = sig.device_from or (f"self.{sig.device_held}" if sig.device_held else None)
        out.append(f"  its device: {device}'s" if device else "  its device: its caller's, where it makes a tensor")
        if plans.model.float_dtype is not None:
            dtype = f"self.{sig.dtype_held}" if sig.dtype_held else sig.dtype_from
            out.append(f"  the model's dtype: {dtype}'s" if dtype else "  the model's dtype: its caller's, where it names it")
        takes = ["use_cache"] * sig.use_cache + ["the decode state"] * sig.decode
        out += [f"  also takes {', '.join(takes)}"] if takes else []
    return out


def show_caches(plans: Plans) -> list[str]:
    plan = plans.caches
    out = [f"{c.input} -> {c.output}: " + ("a recurrent state" if c.state else f"grows along axis {c.axis} ({c.dim})")
           + (f", a slice per layer of the loop at line {c.loop.span.line}" if c.loop else "") for c in plan.caches]
    if plan.preallocated:
        p = plan.preallocated
        out.append(f"preallocated: {show_dim(p.size)} slots, the length in {p.dim}; {len(p.concats)} concats "
                   f"write in place, {len(p.narrows)} slices start at the length" if p.size is not None
                   else "preallocated: the states, one buffer per layer, each written over in place")
    elif plan.reason:
        out.append(f"no preallocated path: {plan.reason}")
    return out


def show_layout(plans: Plans) -> list[str]:
    out = [f"{owner + '.' if owner else ''}{m.attr}: {m.kind} of {', '.join(m.weights)}"
           + (f" (biases {', '.join(b for b in m.biases if b)})" if any(m.biases) else "")
           for owner, m in plans.layout.modules]
    for p in plans.layout.places:
        rows = f" rows [{show_dim(p.rows[0])}, {show_dim(p.rows[1])})" if p.rows else ""
        out.append(f"{p.name} -> {p.owner + '[l].' if p.owner else ''}{p.path}{rows}")
    return out


def show_outputs(plans: Plans) -> list[str]:
    out = []
    for d in plans.outputs.demands:
        off = f"; off in training{' with ' + ', '.join(d.off_in_training_with) if d.off_in_training_with else ''}"
        out.append(f"{d.flag}: {', '.join(sorted(d.outputs))}{off}")
        out += [f"  only then: {stmt_name(s)}" for s in sorted(d.statements, key=lambda s: (s.span.line, s.span.col))]
        out += [f"  else: {stmt_name(old)} runs fused" for old, _ in d.instead]
    return out


def show_decode(plans: Plans) -> list[str]:
    d = plans.decode
    if d is None:
        return []
    fed = ", ".join(f"{c.output} -> {c.input}" for c in d.caches) or "none: each step recomputes the sequence"
    out = [f"tokens {d.tokens}, logits {d.logits}", f"fed back: {fed}",
           f"buffers written in place: {'yes' if d.preallocated else 'no'}"]
    if d.encoder is not None:
        e = d.encoder
        once = ", ".join(stmt_name(plans.model.body[i]) for i in e.stmts)
        out += [f"encoder inputs: {', '.join(e.inputs)}", f"run once: {once}", f"handed to each step: {', '.join(e.values)}"]
        out += [f"recomputed each step: {name}" for name, _ in e.recomputed]
    return out


def show_writes(plans: Plans) -> list[str]:
    every = [s for s in ir.walk_stmts(plans.model.body) if isinstance(s, ir.SetItem)]
    return [f"{stmt_name(s)} {'in place' if s in plans.writes else 'copies first'}" for s in every]


def show_loss(plans: Plans) -> list[str]:
    f = plans.loss
    if f is None:
        return []
    return [f"{stmt_name(f.head)} feeds {stmt_name(f.loss)}: linear_cross_entropy in training"
            + (f" with {', '.join(f.targets)}" if f.targets else "")]


def _pieces_sizes(sizes, display: dict, env: dict, tp: int) -> str:
    """A projection's pieces' sizes, in the spec's names, then at the defaults and per rank where they compute."""
    names = ", ".join(show_dim(d, display) for d in sizes)
    try:
        ns = [d.evaluate(env) for d in sizes]
    except (KeyError, ValueError, ZeroDivisionError):
        return names
    ranks = ", ".join(str(n // tp) for n in ns) + " per rank" if all(n % tp == 0 for n in ns) else "not divisible"
    return f"{names}: {', '.join(map(str, ns))} at the defaults, {ranks}"


def show_tensor_parallel(plans: Plans, tp: int) -> list[str]:
    """`snfc check --tp N`: each module's placement and why, the caches, and what tp must divide (with the
    default config's numbers at `tp`)."""
    from .tp_plan import defaults
    plan, model = plans.tp, plans.model
    display = dict(model.display)
    path = model.path.rsplit("/", 1)[-1]
    sharded = sum(p.sharded for p in plan.placements)
    out = [f"tensor-parallel plan of {path} at tp={tp}: {'full' if plan.full else 'partial'} "
           f"({sharded} of {len(plan.placements)} modules and parameters sharded)"]
    width = max((len(p.key) for p in plan.placements), default=0)
    for p in plan.placements:
        out.append(f"  {p.key:<{width}}  {p.style:<15}  {p.reason} (line {p.span.line})")
    for name, output, axis in plan.caches:
        where = f"sharded along axis {axis}, as what is written into it" if axis is not None else "whole"
        leaves = dict(plan.pieces).get(output)
        where += f", in pieces: each rank holding its part of each of {len(leaves)}" if leaves else ""
        out.append(f"  cache {name} -> {output}: {where}")
    env = defaults(model)
    tables = dict(plan.pieces)
    for p in plan.placements:
        if p.style == "colwise_pieces":
            out.append(f"  pieces {p.key}: " + (_pieces_sizes(tables[p.key], display, env, tp) if p.key in tables else
                                                 "not one list of sizes (pieces of pieces, or slices that do not "
                                                 "tile its rows): snf.parallelize refuses it"))
    for r in plan.requires:
        try:
            n = r.units.evaluate(env)
            at = f": {n} at the defaults, {n // tp if n % tp == 0 else 'not divisible'}" \
                 f"{' per rank' if n % tp == 0 else ''}"
        except (KeyError, ValueError, ZeroDivisionError):
            at = ""
        out.append(f"  requires {r.message(display, path)}{at}")
    for w, why, span, low_rank in plan.refused:
        out.append(f"  {'whole by design' if low_rank else 'partial'}: {w} stays whole at line {span.line}: {why}")
    return out + _show_sequence(plans.sequence, width)


def _show_sequence(sq, width: int) -> list[str]:
    """The sequence-parallel lines of `snfc check --tp N`: the norms on the positions, the linears that
    gather and scatter them; or why a model's sequences cannot split."""
    from .sequence_parallel import GATHER, NORM_HEAD, SCATTER
    if sq.refused is not None:
        why, span = sq.refused
        return [f"  no sequence parallel: {why}" + (f" (line {span.line})" if span.line else "")]
    out = ["  sequence parallel (sequence_parallel=True; T divisible by tp): each rank holds its positions "
           "between the row-wise outputs and the column-wise inputs"]
    for key, role, span in sq.roles:
        if role not in (GATHER, SCATTER):
            head = "; the LM head reads it (gathered first where the head is the token embedding)" \
                if role == NORM_HEAD else ""
            out.append(f"  {key:<{width}}  {'sequence_norm':<15}  a norm per position, on this rank's positions: "
                       f"its weight whole, its gradient all-reduced{head} (line {span.line})")
    for role, what in ((GATHER, "gather their input over the positions (all-gather)"),
                       (SCATTER, "split their output over the positions (reduce-scatter)")):
        out.append(f"  {', '.join(k for k, r, _ in sq.roles if r == role)}: {what}")
    return out
