"""Fuse `linear`s that share one input inside a layer loop into one matmul.

    q = linear(h, Wq, bq); k = linear(h, Wk, bk); v = linear(h, Wv, bv)
    ->  q, k, v = split(linear(h, [Wq; Wk; Wv], [bq; bk; bv]))

Only per-layer weights used nowhere else are fused, so the generated module can keep one
fused parameter and still save and load the spec's names (it splits them in its state-dict
hooks). The NumPy interpreter runs on the IR before this pass.
"""

from __future__ import annotations

import os

from .. import ir


def fuse_linear(model: ir.Model) -> ir.Model:
    body = tuple(_fuse_loop(s, model) if isinstance(s, ir.Loop) else s for s in model.body)
    return ir.replace(model, body=body)


def _candidate(s, model: ir.Model):
    """(input name, weight, bias) if `s` is `let t = linear(local, layer_param, layer_param|None)`."""
    if not (isinstance(s, ir.Bind) and s.let and isinstance(s.value, ir.Op) and s.value.op == "linear"):
        return None
    x, w, b = (s.value.arg(n) for n in ("x", "weight", "bias"))
    if not (isinstance(x, ir.Ref) and x.kind == "local"):
        return None
    if not (isinstance(w, ir.Ref) and w.kind == "layer_param" and model.param(w.name).condition is None):
        return None
    if isinstance(b, ir.Ref) and b.kind == "layer_param":
        return x.name, w.name, b.name
    if isinstance(b, ir.Lit) and b.value is None:
        return x.name, w.name, None
    return None


def _uses(stmts) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in ir.walk_exprs(stmts):
        if isinstance(e, ir.Ref) and e.kind == "layer_param":
            counts[e.name] = counts.get(e.name, 0) + 1
    return counts


def _condition_key(model: ir.Model, name: str | None):
    if name is None:
        return None
    cond = model.param(name).condition
    if cond is None:
        return "always"
    return ("config", cond.name) if isinstance(cond, ir.Ref) else ("unique", name)


def _fused_name(names: list[str], taken: set[str]) -> str:
    prefix = os.path.commonprefix(names)
    suffix = os.path.commonprefix([n[::-1] for n in names])[::-1]
    mids = [n[len(prefix):len(n) - len(suffix)] for n in names]
    if all(mids) and all(m.isidentifier() or m.isalnum() for m in mids):
        base = prefix + "".join(mids) + suffix
    else:
        base = "fused_" + "_".join(names)
    name, i = base, 2
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    return name


def _fuse_loop(loop: ir.Loop, model: ir.Model) -> ir.Loop:
    uses = _uses(loop.body)
    taken = {p.name for p in model.params + model.buffers}
    stmts = list(loop.body)
    groups: dict[tuple, list[int]] = {}
    for i, s in enumerate(stmts):
        c = _candidate(s, model)
        if c is None or uses.get(c[1], 0) != 1 or (c[2] and uses.get(c[2], 0) != 1):
            continue
        x, w, b = c
        # the input must not change between the first and this statement
        key = (x, model.param(w).ty.dtype, b is not None, _condition_key(model, b))
        if key in groups and any(isinstance(t, (ir.Bind, ir.SetItem)) and t.name == x
                                 for t in stmts[groups[key][0]:i]):
            groups[key] = []
        groups.setdefault(key, []).append(i)
    out = list(stmts)
    drop: set[int] = set()
    for key, idxs in groups.items():
        if len(idxs) < 2:
            continue
        binds = [stmts[i] for i in idxs]
        weights = [b.value.arg("weight").name for b in binds]
        biases = [b.value.arg("bias").name if isinstance(b.value.arg("bias"), ir.Ref) else None for b in binds]
        fused_w = _fused_name(weights, taken)
        taken.add(fused_w)
        fused_b = None
        if biases[0] is not None:
            fused_b = _fused_name(biases, taken)
            taken.add(fused_b)
        sizes = tuple(model.param(w).ty.shape[1] for w in weights)
        out[idxs[0]] = ir.FusedLinear(
            tuple(b.name for b in binds), binds[0].value.arg("x"), tuple(weights), tuple(biases),
            fused_w, fused_b, sizes, tuple(b.value.ty for b in binds), binds[0].span)
        drop.update(idxs[1:])
    body = tuple(s for i, s in enumerate(out) if i not in drop)
    return ir.replace(loop, body=body)
