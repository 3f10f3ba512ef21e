"""Sharding rules: how an argument's axis, sharded over tensor-parallel ranks, passes through an op.

Each op's `OpDef.shard` is one of these rules (or one of its own), written once beside its shape
rule: `rule(op, arg, axis) -> Passage`, for the typed call `op` whose argument `arg` arrives
sharded along `axis` (of that argument; of an item of it for a list of tensors). The plan pass
(passes/tensor_parallel.py) reads nothing else about an op's meaning. The four kinds:

- kept        the result is sharded along `Passage.axis`: each rank computes its own slice
              (elementwise ops, a norm over another axis, attention over its heads); `with_` names
              the other arguments (and their axis) that must be sharded alike (q with k and v, gate
              with up, the sinks per head): a parameter among them is sharded along that axis
- contracted  the axis is summed over (linear's input features, an embedding's rows): each rank
              holds a partial sum, which an all-reduce completes
- reduced     the op needs the whole axis (a norm or softmax over it, a loss over the vocabulary)
- mixed       anything else (a slice across it, positions mixed along it)

An op whose `shard` is None refuses a sharded argument: the plan names it and its line.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..dims import Dim, equal
from .shapes import product

KEPT, CONTRACTED, REDUCED, MIXED = "kept", "contracted", "reduced", "mixed"


@dataclass(frozen=True)
class Passage:
    kind: str  # kept | contracted | reduced | mixed
    axis: int | None = None  # kept: the result's sharded axis
    units: Dim | None = None  # kept through a reshape that splits the axis: what it now counts (the heads)
    with_: tuple[tuple[str, int], ...] = ()  # kept: (argument, its axis) that must be sharded alike
    why: str = ""  # reduced / mixed: what the op does with the axis, for the plan's reason
    # kept: the result is a piece of the sharded axis (a slice of a fused projection, or pieces concatenated):
    # each rank holds its part of each piece, and `units` is the piece's size
    piece: bool = False


def _rank(e) -> int:
    ty = getattr(e, "ty", None)
    return ty.rank if isinstance(ty, ir.TensorT) else 0


def _covers(op: ir.Op, name: str, out_axis: int) -> int | None:
    """The axis of argument `name` that is the result's `out_axis` (broadcast from the right), None where
    it has none (or one of size 1)."""
    a = op.arg(name)
    r = _rank(a)
    k = out_axis - (_rank(op) - r)
    return k if r > 0 and 0 <= k < r and a.ty.shape[k] != Dim.const(1) else None


def _axis(op: ir.Op, name: str = "axis") -> int | None:
    a = op.arg(name)
    return a.value if isinstance(a, ir.Lit) and isinstance(a.value, int) else None


def pointwise(op: ir.Op, arg: str, axis: int) -> Passage:
    """Elementwise (with broadcasting): the axis is kept; every argument that has it is sharded alike."""
    out = axis + _rank(op) - _rank(op.arg(arg))
    tensors = tuple((n, _covers(op, n, out)) for n, _ in op.args if n != arg and _covers(op, n, out) is not None)
    return Passage(KEPT, out, with_=tensors)


def along(reduces: str = "reduces", keepdim: bool | None = None):
    """An op over its `axis` argument (softmax, sum, top_k): that axis is needed whole; another is kept
    (shifted where the op drops its axis without `keepdim`)."""
    def rule(op: ir.Op, arg: str, axis: int) -> Passage:
        rank = _rank(op.arg(arg))
        over = _axis(op)
        if over is None:
            return Passage(MIXED, why="works along an axis not known when compiling")
        over %= rank
        if over == axis:
            return Passage(REDUCED, why=f"{reduces} along it")
        keep = op.arg("keepdim") if "keepdim" in dict(op.args) else None
        kept = keepdim if keepdim is not None else keep is None or bool(getattr(keep, "value", True))
        return Passage(KEPT, axis - (0 if kept or axis < over else 1))
    return rule


def last_axis(reduces: str, others: tuple[str, ...] = ()):
    """An op over its argument's last axis (a norm, RoPE's rotation): that axis is needed whole, the rest
    kept; `others` are the arguments of that last axis only (a norm's weight): sharded, they are mixed."""
    def rule(op: ir.Op, arg: str, axis: int) -> Passage:
        if arg in others:
            return Passage(MIXED, why=f"takes its `{arg}` sharded, over the last axis")
        if axis == _rank(op.arg(arg)) - 1:
            return Passage(REDUCED, why=f"{reduces} along it")
        return Passage(KEPT, axis)
    return rule


def linear(op: ir.Op, arg: str, axis: int) -> Passage:
    """x @ weight.T (+ bias): the input features are contracted, the other axes kept."""
    if arg != "x":
        return Passage(MIXED, why=f"takes its `{arg}` sharded")
    if axis == _rank(op.arg("x")) - 1:
        return Passage(CONTRACTED)
    return Passage(KEPT, axis)


def reshape(op: ir.Op, arg: str, axis: int) -> Passage:
    """Kept where the sharded axis is the outermost of a group of axes that becomes a group of the
    result's, the outermost of which it shards: features split into (heads, head_dim) (then the heads
    count its units), (heads, head_dim) merged back into features, or (heads, a * b) regrouped into
    (heads * a, b); mixed where the reshape cuts it otherwise."""
    src, dst = op.arg(arg).ty.shape, op.ty.shape
    before = product(src[:axis])
    lo = next((j for j in range(len(dst)) if _same(product(dst[:j]), before)), None)
    if lo is None:
        return Passage(MIXED, why="reshapes across it")
    for m in range(axis + 1, len(src) + 1):
        hi = next((j for j in range(lo + 1, len(dst) + 1) if _same(product(dst[:j]), product(src[:m]))), None)
        if hi is not None:
            return Passage(KEPT, lo, units=dst[lo] if m == axis + 1 and hi - lo > 1 else None)
    return Passage(MIXED, why="reshapes across it")


def _same(a: Dim, b: Dim) -> bool:
    return equal(a, b)[0]




def transpose(op: ir.Op, arg: str, axis: int) -> Passage:
    rank = _rank(op.arg("x"))
    a, b = (_axis(op, n) for n in ("a", "b"))
    if a is None or b is None:
        return Passage(MIXED, why="swaps axes not known when compiling")
    a, b = a % rank, b % rank
    return Passage(KEPT, b if axis == a else a if axis == b else axis)


def subscript(op: ir.Op, arg: str, axis: int) -> Passage:
    """`x[i, a:b]`: kept where the sharded axis is taken whole (`:` or beyond the index), shifted left by
    the integer indices before it. A slice of it between config bounds is a piece of a fused projection
    (Phi-3's q, k and v of one qkv): kept, with the piece's size as its units, where each rank holds its
    part of every piece (the layout of tp-interface's pieces); any other index mixes."""
    if arg != "x":
        return Passage(MIXED, why=f"takes its `{arg}` sharded")
    items = op.arg("index").items if isinstance(op.arg("index"), ir.TList) else ()
    dropped = sum(1 for it in items[:axis] if not isinstance(it, ir.TSlice))
    if axis < len(items):
        it = items[axis]
        if not isinstance(it, ir.TSlice):
            return Passage(MIXED, why="indexes it")
        if it.lo is not None or it.hi is not None:  # the plan refuses a piece of a run-time size
            return Passage(KEPT, axis - dropped, units=op.ty.shape[axis - dropped], piece=True)
    return Passage(KEPT, axis - dropped)


def concat(op: ir.Op, arg: str, axis: int) -> Passage:
    """Kept along another axis than the one it concatenates, every item sharded alike; along that one, the
    sharded items become the pieces of the result (each rank concatenates its parts of them)."""
    over = _axis(op)
    if over is None:
        return Passage(MIXED, why="concatenates along an axis not known when compiling")
    if over % _rank(op) == axis:
        return Passage(KEPT, axis, units=op.ty.shape[axis], with_=(("tensors", axis),), piece=True)
    return Passage(KEPT, axis, with_=(("tensors", axis),))


def heads(axes: dict[str, int], out: int = 2):
    """An op over heads (attention, a recurrent scan): each argument of `axes` is kept along its heads
    axis (its value there: the third of [B, T, heads, ...], the first of a per-head parameter such as
    the sinks), the result along `out`, and needs the others sharded alike; any other axis mixes
    positions or is contracted."""
    def rule(op: ir.Op, arg: str, axis: int) -> Passage:
        if axes.get(arg) == axis:
            others = tuple((n, a) for n, a in axes.items() if n != arg and _rank(op.arg(n)) > 0)
            return Passage(KEPT, out, with_=others)
        return Passage(MIXED, why=f"mixes positions or head features of its `{arg}`")
    return rule


def repeat(op: ir.Op, arg: str, axis: int) -> Passage:
    """`expand`, `repeat_interleave`, `one_hot`: each element (each unit of a sharded axis) repeated in
    place, so the axis is kept (moved right by the axes the op adds in front)."""
    return Passage(KEPT, axis + _rank(op) - _rank(op.arg(arg)) if op.op == "expand" else axis)


def matmul(op: ir.Op, arg: str, axis: int) -> Passage:
    """a @ b: batch axes kept; a's rows and b's columns kept, with the other argument whole; the
    contracted axis is a partial sum no module holds."""
    rank = _rank(op.arg(arg))
    if axis < rank - 2:
        return Passage(KEPT, axis + _rank(op) - rank, with_=(("b" if arg == "a" else "a", axis),))
    if (arg, axis) in (("a", rank - 2), ("b", rank - 1)):
        return Passage(KEPT, _rank(op) - (2 if arg == "a" else 1))
    return Passage(MIXED, why="contracts it with no weight to shard")


def channels(op: ir.Op, arg: str, axis: int) -> Passage:
    """A depthwise convolution over time (x [B, T, C], weight [C, 1, K], bias [C], state [B, K - 1, C]):
    channels are kept, each with its own weight row; time is mixed."""
    axes = {"x": 2, "weight": 0, "bias": 0, "state": 2}
    if axes.get(arg) == axis:
        return Passage(KEPT, _rank(op) - 1, with_=tuple((n, a) for n, a in axes.items()
                                                        if n != arg and _rank(op.arg(n)) > 0))
    return Passage(MIXED, why="mixes positions")


def rows(op: ir.Op, arg: str, axis: int) -> Passage:
    """An embedding lookup: a table sharded by rows gives each rank the rows it holds (a partial sum: zeros
    elsewhere); by columns, the features are kept; sharded indices keep their axis."""
    if arg == "table":
        return Passage(CONTRACTED) if axis == 0 else Passage(KEPT, _rank(op) - 1)
    return Passage(KEPT, axis)


def reduced(why: str):
    def rule(op: ir.Op, arg: str, axis: int) -> Passage:
        return Passage(REDUCED, why=why)
    return rule


def mixed(why: str):
    def rule(op: ir.Op, arg: str, axis: int) -> Passage:
        return Passage(MIXED, why=why)
    return rule
