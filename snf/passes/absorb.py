"""Latent attention from the paper's equations: attention whose keys and values one linear map
expands from a per-token latent becomes `latent_attention` over the latent itself.

    kv = reshape(linear(c[:, :, 0:r], weight=W), [B, S, H, n + v])
    k = concat([kv[:, :, :, 0:n], expand(reshape(c[:, :, r:r + p], [B, S, 1, p]), [B, S, H, p])], axis=3)
    flash_attention(q, k, kv[:, :, :, n:n + v], causal=..., scale=...)
    ->  latent_attention(q, c, W, rope_dim=p, v_dim=v, causal=..., scale=...)

Both compute each head's key as [c W_k, k_rope] and its value as c W_v. The op's lowering then
chooses per call between expanding them (a prompt) and absorbing W into the queries and the output
(one query over a long cache: q (c W_k)^T = (q W_k^T) c^T, and p (c W_v) = (p c) W_v, the
reassociation of two matmuls), and the cache of `c` keeps r + p values per token, not H (n + p + v).
The match is proved on the checked types, not on names: the slices' bounds are the symbolic 0, r,
r + p (the latent's last axis), 0, n and n + v; W is [H (n + v), r]; the rope part is one head's,
broadcast to all H; q's heads are n + p wide. Only attention with no mask, window, chunk, bias, soft
cap, sinks or dropout is rewritten (latent_attention has none of them), and only where the latent,
W and the expansion's values are each bound once and never written into (the latent form reads the
latent when the attention runs, the expansion read it before). The expansion's own statements
(`kv`, `k`, `v`) go where nothing else reads them and no output returns them. The NumPy interpreter runs on the IR before
this pass, so it checks the spec as written.
"""

from __future__ import annotations

from .. import ir
from ..dims import Dim
from ..ir import ScalarT

# what attention's call may say besides what latent_attention takes: each must be left out (None)
_KEPT = ("q", "k", "v", "causal", "scale")


def absorb_latent(model: ir.Model) -> ir.Model:
    rewritten = _rewritten(model)
    if not rewritten:
        return model
    body = _stmts(model.body, lambda s: ir.replace(s, value=ir.rewrite(
        s.value, lambda e: rewritten[id(e)][0] if id(e) in rewritten else None)) if isinstance(s, (ir.Bind, ir.SetItem))
        else s)
    names = {n for _, names in rewritten.values() for n in names}
    return ir.replace(model, body=_drop_unread(body, names, {o.name for o in model.outputs}))


def _rewritten(model: ir.Model) -> dict:
    """id(flash_attention op) -> (its latent_attention, the names of the expansion's statements)."""
    written: dict[str, int] = {}
    for s in ir.walk_stmts(model.body):
        for n in ir.writes(s):
            written[n] = written.get(n, 0) + 1
    # a value the match may read through: bound once by its `let`, never written into after
    defs = {s.name: s.value for s in ir.walk_stmts(model.body)
            if isinstance(s, ir.Bind) and s.let and written[s.name] == 1}

    def unchanged(e) -> bool:  # a latent or weight: an input or parameter never written, or such a value
        return not isinstance(e, ir.Ref) or written.get(e.name, 0) == (1 if e.name in defs else 0)
    out = {}
    for e in ir.walk_exprs(model.body):
        if isinstance(e, ir.Op) and e.op == "flash_attention":
            found = _match(e, defs)
            if found is not None and all(map(unchanged, found[2])):
                out[id(e)] = found[:2]
    return out


def _stmts(stmts, fn) -> tuple:
    """`stmts` with `fn` applied to each statement outside loops and ifs (None drops it), inside them too."""
    out = []
    for s in stmts:
        if isinstance(s, ir.Loop):
            s = ir.replace(s, body=_stmts(s.body, fn))
        elif isinstance(s, ir.TIf):
            s = ir.replace(s, body=_stmts(s.body, fn), orelse=_stmts(s.orelse, fn))
        else:
            s = fn(s)
        if s is not None:
            out.append(s)
    return tuple(out)


def _drop_unread(body: tuple, names: set, outputs: set) -> tuple:
    """`body` without the `let` statements of `names` that no output returns and no statement kept
    reads (`k` reads `kv`: both go, or both stay)."""
    dead = set(names) - outputs
    while True:
        read = set().union(*(ir.reads(s) for s in ir.walk_stmts(body) if not (isinstance(s, ir.Bind) and s.name in dead)))
        if not dead & read:
            return _stmts(body, lambda s: None if isinstance(s, ir.Bind) and s.name in dead else s)
        dead -= read


def _match(e: ir.Op, defs: dict):
    """(latent_attention, the expansion's names, the latent and the weight it reads) where `e` is
    attention over a latent's expansion, else None."""
    if any(not _none(a) for n, a in e.args if n not in _KEPT):
        return None
    q = e.arg("q")
    kv_name, v_lo, v_hi = _last_slice(_value(e.arg("v"), defs))
    kv = defs.get(kv_name)
    if not _is(kv, "reshape") or not _is(kv.arg("x"), "linear") or not _none(kv.arg("x").arg("bias")):
        return None
    linear = kv.arg("x")
    weight = linear.arg("weight")
    latent, c_lo, c_hi = _last_slice(linear.arg("x"), ref=True)
    k = _value(e.arg("k"), defs)
    if not _is(k, "concat") or _lit(k.arg("axis")) not in (3, -1) or len(k.arg("tensors").items) != 2:
        return None
    nope_part, rope_part = k.arg("tensors").items
    k_name, k_lo, k_hi = _last_slice(nope_part)
    if not (_is(rope_part, "expand") and _is(rope_part.arg("x"), "reshape")):
        return None
    rope_latent, p_lo, p_hi = _last_slice(rope_part.arg("x").arg("x"), ref=True)
    if latent is None or rope_latent is None or latent.name != rope_latent.name or k_name != kv_name:
        return None
    shapes = [t.ty.shape for t in (q, latent, weight, kv, rope_part.arg("x"), rope_part)]
    if any(len(s) != n for s, n in zip(shapes, (4, 3, 2, 4, 4, 4))):
        return None
    (_, _, heads, qk), (_, keys, width), (rows, rank), (_, _, kv_heads, kv_width), (_, _, one, rope), \
        (_, _, rope_heads, _) = shapes
    nope, v = k_hi, (v_hi - v_lo) if v_hi is not None and v_lo is not None else None
    proofs = [c_lo == Dim.const(0), c_hi == rank, p_lo == rank, p_hi == width, p_hi - p_lo == rope, k_lo == Dim.const(0),
              v_lo == nope, v is not None and kv_width == nope + v, kv_heads == heads, rope_heads == heads,
              one == Dim.const(1), qk == nope + rope, rows == heads * (nope + v) if v is not None else False]
    if not all(proofs):
        return None
    new = ir.Op("latent_attention", (("q", q), ("latent", latent), ("kv_weight", weight),
                                     ("rope_dim", _dim(rope)), ("v_dim", _dim(v)), ("causal", e.arg("causal")),
                                     ("scale", e.arg("scale"))), e.ty, e.span)
    names = {n for n in (kv_name, _ref_name(e.arg("k")), _ref_name(e.arg("v"))) if n is not None}
    return new, names, (latent, weight)


def _value(e, defs: dict):
    """A local's value where `e` names one bound once, else `e`."""
    return defs.get(e.name, e) if isinstance(e, ir.Ref) and e.kind == "local" else e


def _ref_name(e) -> str | None:
    return e.name if isinstance(e, ir.Ref) and e.kind == "local" else None


def _last_slice(e, ref: bool = False):
    """(the sliced local (its name, or its Ref with `ref`), lo, hi) for `x[:, ..., lo:hi]`, a slice of
    the last axis alone with both bounds given; (None, None, None) otherwise."""
    nothing = (None, None, None)
    if not (_is(e, "index") or _is(e, "slice")) or not isinstance(e.arg("x"), ir.Ref):
        return nothing
    items = e.arg("index").items
    if len(items) != e.arg("x").ty.rank or not all(isinstance(i, ir.TSlice) for i in items):
        return nothing
    if any(i.lo is not None or i.hi is not None for i in items[:-1]):
        return nothing
    last = items[-1].ty
    if last.lo is None or last.hi is None:
        return nothing
    return (e.arg("x") if ref else e.arg("x").name), last.lo, last.hi


def _is(e, op: str) -> bool:
    return isinstance(e, ir.Op) and e.op == op


def _none(e) -> bool:
    return isinstance(e, ir.Lit) and e.value is None


def _lit(e):
    return e.value if isinstance(e, ir.Lit) else None


def _dim(d):
    return ir.DimVal(d, ScalarT("int", d))

