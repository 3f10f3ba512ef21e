"""Checkpoint mappings (`checkpoint FMT:` sections) as plain data: checked by `check`, emitted by `codegen`,
evaluated by `interop`. Nothing in a mapping is ever evaluated as code."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

from . import ir
from .ops import by_symbol


class MappingError(ValueError):
    def __init__(self, message: str, span=None):
        super().__init__(message)
        self.span = span


def _int(e: ir.Expr, what: str) -> int:
    neg = isinstance(e, ir.Unary) and e.op == "-"
    base = e.operand if neg else e
    if isinstance(base, ir.Num) and isinstance(base.value, int):
        return -base.value if neg else base.value
    raise MappingError(f"{what} must be an integer literal", getattr(e, "span", None))


def encode_mapping(e: ir.Expr, rank: int | None = None, expert: bool = False):
    """A checkpoint source expression as nested tuples; nothing in it is ever evaluated as code.
    `rank`, when known, is the rank of the parameter it fills (one layer's), which a `split`'s
    axis must lie within. With `expert` (`name[l, e] <- ...`) each key names one entry of the
    axis after the layer axis, `{e}` its number: ("experts", source of one entry)."""
    if expert:
        return ("experts", _encode(e, None if rank is None else rank - 1, ("l", "e")))
    return _encode(e, rank, ("l",))


def _encode(e: ir.Expr, rank: int | None, fields: tuple):
    if isinstance(e, ir.Str):
        used = set()
        for field in key_fields(e.value):
            try:
                used |= field_names(parse_field(field))
            except MappingError as err:
                raise MappingError(str(err), e.span) from None
        if "e" in used and "e" not in fields:
            raise MappingError("`{e}` in a key: `{e}` needs `name[l, e] <- ...`, where the expert number replaces it", e.span)
        if "e" in fields and "e" not in used:  # every expert would read the same key
            raise MappingError("`[l, e]` reads one key per expert: write `{e}` (the expert number) in the key", e.span)
        return ("key", e.value)
    if isinstance(e, ir.Attribute) and e.attr == "T":
        if rank is not None and rank < 2:
            raise MappingError(f"`.T` swaps the last two axes, and the tensor this fills has {rank} "
                               f"axis{'es' * (rank != 1)}", e.span)
        return ("T", _encode(e.value, rank, fields))
    if isinstance(e, ir.BoolOp) and e.op == "or":
        return ("or", _encode(e.left, rank, fields), _encode(e.right, rank, fields))
    if isinstance(e, ir.Call) and e.func == "split":
        kw = {k.name: k.value for k in e.kwargs}
        if len(e.args) != 2 or not {"axis", "index"} <= set(kw) <= {"axis", "index", "interleaved"}:
            raise MappingError('write split("key", n, axis=i, index=j), or with interleaved=True', e.span)
        interleaved = kw.get("interleaved", ir.Const(False))
        if not (isinstance(interleaved, ir.Const) and isinstance(interleaved.value, bool)):
            raise MappingError("interleaved= is True or False", getattr(interleaved, "span", e.span))
        n, axis, index = _int(e.args[1], "n"), _int(kw["axis"], "axis"), _int(kw["index"], "index")
        if n < 1:
            raise MappingError(f"split into {n} parts: n must be at least 1", e.args[1].span)
        if not 0 <= index < n:
            raise MappingError(f"index={index} is not one of the {n} parts (0 to {n - 1})", kw["index"].span)
        if rank is not None and not -rank <= axis < rank:
            raise MappingError(f"axis={axis} is out of range for the rank-{rank} tensor this fills", kw["axis"].span)
        # interleaved: entries index, index + n, index + 2n, ... (gpt-oss's gate and up columns, alternating)
        return ("interleave" if interleaved.value else "split", _encode(e.args[0], rank, fields), n, axis, index)
    if isinstance(e, ir.Call) and e.func == "join":
        return _encode_join(e, rank, fields)
    raise MappingError("unsupported checkpoint source expression", getattr(e, "span", None))


_JOIN = ('write join(["key", "key", ...], axis=i, sizes=[n, m, ...]): the keys\' tensors joined along axis i, '
         'each n, m, ... long there')


def _encode_join(e: ir.Call, rank: int | None, fields: tuple):
    """`join([a, b, ...], axis=i, sizes=[n, m, ...])`: one tensor from several sources joined on axis i,
    each its size there (ints of the config): ("join", sources, axis, size fields). OLMo hybrid's q, k
    and v short convolutions, separate keys of unequal size, as the one weight transformers joins."""
    kw = {k.name: k.value for k in e.kwargs}
    if len(e.args) != 1 or set(kw) != {"axis", "sizes"} or not isinstance(e.args[0], ir.ListExpr) \
            or not isinstance(kw["sizes"], ir.ListExpr):
        raise MappingError(_JOIN, e.span)
    parts, sizes = e.args[0].items, kw["sizes"].items
    if len(parts) < 2 or len(sizes) != len(parts):
        raise MappingError(f"join reads {len(parts)} source{'s' * (len(parts) != 1)} and gives {len(sizes)} "
                           f"size{'s' * (len(sizes) != 1)}: two sources at least, one size each", e.span)
    axis = _int(kw["axis"], "axis")
    if rank is not None and not -rank <= axis < rank:
        raise MappingError(f"axis={axis} is out of range for the rank-{rank} tensor this fills", kw["axis"].span)
    return ("join", tuple(_encode(x, rank, fields) for x in parts), axis, tuple(_size_field(x) for x in sizes))


def _size_field(e: ir.Expr):
    """A join's size as a key field's tree (an int expression of config ints: `key_dim`, `2 * n`)."""
    if isinstance(e, ir.Num) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return ("const", e.value)
    if isinstance(e, ir.Name):
        return ("name", e.id)
    if isinstance(e, ir.BinOp) and e.op in ("+", "-", "*", "//", "%"):
        return ("op", e.op, _size_field(e.left), _size_field(e.right))
    raise MappingError("a join's size is an int of the config: a name, a number, or + - * // % of them",
                       getattr(e, "span", None))


def join_sizes(src: tuple, config) -> list[int]:
    """A join's sizes for the config (`src` as _encode_join gives it); a size that divides by zero or
    is negative there is a MappingError that says which."""
    sizes = []
    for tree in src[3]:
        try:
            n = eval_field(tree, _Fields((), config))
        except ZeroDivisionError:
            raise MappingError(f"a size of join(...) divides by zero at this config ({show_field(tree)})") from None
        if n < 0:
            raise MappingError(f"a size of join(...) is {n} at this config ({show_field(tree)}): sizes are not negative")
        sizes.append(n)
    return sizes


# ----------------------------------------------------------------------------- key fields
# A key's `{...}` fields are integer expressions of the layer number `l`, the expert number `e` and
# config ints, with + - * // % and parentheses (`"model.layers.{2*l + 1}.mlp"`). They are parsed by the
# small grammar below into data and computed from it: never evaluated as Python.

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*)|(//|[-+*%()]))")
_FIELD = re.compile(r"\{([^{}]*)\}")


def key_fields(key: str) -> list[str]:
    return _FIELD.findall(key)


def key_parts(key: str) -> list[str]:
    """The key's text between fields and its fields' texts, alternating: `"h.{l}.a"` as
    ["h.", "l", ".a"] (its even items literal, its odd ones fields)."""
    return _FIELD.split(key)


@functools.lru_cache(maxsize=4096)  # a field is parsed once, however many keys and layers compute it
def parse_field(text: str):
    """`2*l + 1` as ("op", "+", ("op", "*", ("const", 2), ("name", "l")), ("const", 1))."""
    tokens, pos = [], 0
    while pos < len(text.rstrip()):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise MappingError(f"`{{{text}}}` in a key: a field is an integer expression of `l`, `e` and config "
                               f"ints, with + - * // %")
        tokens.append(("const", int(m[1])) if m[1] else ("name", m[2]) if m[2] else ("sym", m[3]))
        pos = m.end()

    def take(*syms):
        if tokens and tokens[0][0] == "sym" and tokens[0][1] in syms:
            return tokens.pop(0)[1]
        return None

    def atom():
        if take("("):
            inner = expr()
            if not take(")"):
                raise MappingError(f"`{{{text}}}` in a key: a `(` is not closed")
            return inner
        if tokens and tokens[0][0] in ("const", "name"):
            return tokens.pop(0)
        raise MappingError(f"`{{{text}}}` in a key: a field is an integer expression of `l`, `e` and config ints, "
                           f"with + - * // %")

    def term():
        out = atom()
        while (op := take("*", "//", "%")) is not None:
            out = ("op", op, out, atom())
        return out

    def expr():
        out = term()
        while (op := take("+", "-")) is not None:
            out = ("op", op, out, term())
        return out

    tree = expr()
    if tokens:
        raise MappingError(f"`{{{text}}}` in a key: unexpected `{tokens[0][1]}`")
    return tree


def field_names(tree) -> set:
    if tree[0] == "name":
        return {tree[1]}
    return field_names(tree[2]) | field_names(tree[3]) if tree[0] == "op" else set()


def is_affine(tree, variables=frozenset({"l", "e"})) -> bool:
    """Whether a parsed field is a*l + b*e + c once its other names are fixed: `*` with one side free
    of `variables`, `//` and `%` with both sides free of them."""
    if tree[0] != "op":
        return True
    if tree[1] in ("+", "-"):
        return is_affine(tree[2], variables) and is_affine(tree[3], variables)
    free = [not field_names(side) & variables for side in tree[2:]]
    if tree[1] == "*":
        return any(free) and is_affine(tree[2], variables) and is_affine(tree[3], variables)
    return all(free)


def show_field(tree, prec: int = 0) -> str:
    """A parsed field as written (`2 * n + 1`), parenthesized where its operator binds looser than `prec`."""
    if tree[0] != "op":
        return str(tree[1])
    mine = 1 if tree[1] in ("+", "-") else 2
    text = f"{show_field(tree[2], mine)} {tree[1]} {show_field(tree[3], mine + 1)}"
    return f"({text})" if mine < prec else text


def eval_field(tree, values) -> int:
    """A parsed field's value; `values` maps its names (`l`, `e`, config ints) to ints."""
    if tree[0] == "const":
        return tree[1]
    if tree[0] == "name":
        return int(values[tree[1]])
    return by_symbol(tree[1]).scalar(eval_field(tree[2], values), eval_field(tree[3], values))


def format_key(key: str, values) -> str:
    """The key with each `{...}` field computed (`values[name]` for its names)."""
    return _FIELD.sub(lambda m: str(eval_field(parse_field(m[1]), values)), key)


class _Fields(dict):
    """What a key's `{...}` fields read: `l` and `e` where bound, else the Config's value (a field,
    or a dim its class computes)."""

    def __init__(self, bound, config):
        super().__init__(bound)
        self.config = config

    def __missing__(self, name: str):
        if self.config is not None and hasattr(self.config, name):
            return getattr(self.config, name)
        raise KeyError(name)


def key_of(src: tuple, layer: int | None, config) -> str:
    """The checkpoint key of a ("key", text[, bound]) source at `layer`: its fields computed."""
    values = _Fields(src[2] if len(src) > 2 else (), config)
    if layer is not None:
        values["l"] = layer
    return format_key(src[1], values)


def mapping_keys(e: ir.Expr) -> list[str]:
    if isinstance(e, ir.Str):
        return [e.value]
    if isinstance(e, ir.BoolOp):
        return mapping_keys(e.left) + mapping_keys(e.right)
    return []


# ----------------------------------------------------------------------------- checkpoint sources and tensors

class Reading:
    """What evaluating the mappings found: the keys used, and those missing, not tensors, or of a
    shape that does not fit."""

    def __init__(self, sd: Mapping, config=None):
        self.sd, self.used, self.missing, self.invalid, self.mismatched = sd, set(), [], [], []
        self.config = config  # what keys' fields read beside `l` and `e`
        self.reported: set = set()
        self.trace: list = []  # the keys read, in order

    def tensor(self, key: str):
        """sd[key] when it is a tensor; otherwise None, and the key is listed as invalid."""
        import torch  # only where tensors are read: `snfc check` never imports torch
        value = self.sd[key]
        if isinstance(value, torch.Tensor):
            return value
        self.invalid.append((key, "None" if value is None else type(value).__name__))
        return None

    def absorb(self, trial: "Reading", value, invalid: list = ()):
        """Take in what a trial reading (one side of an `or`) found; return its `value`."""
        self.used |= trial.used
        self.trace += trial.trace
        self.invalid += list(invalid) + trial.invalid
        self.missing += trial.missing
        self.mismatched += [m for m in trial.mismatched if m[0].split(" ")[0] not in self.reported]
        self.reported |= trial.reported
        return value


def for_expert(src: tuple, expert: int) -> tuple:
    """An encoded source of one expert's entry: its keys with the expert number bound to `e`."""
    if src[0] == "key":
        return ("key", src[1], (("e", expert),))
    return tuple(for_expert(x, expert) if isinstance(x, tuple) else x for x in src)


def read_tensor(src, want: tuple, layer: int | None, r: Reading, shown: str, transformed: bool = False,
                index: tuple | None = None):
    """The tensor `src` gives for a piece of shape `want`, or None (and the problem noted). A
    source that goes through `.T` or `split` is checked against the shape it must have before any
    transform runs, so a misshapen one is named with that shape, never an IndexError.

    With `index` (a slice per leading axis of the piece), only those entries: the index is carried
    through the transforms to each key, which reads only its own entries (`read_part`), so a rank
    of a sharded load reads its slice of each tensor. Shapes are not checked again: a load checks
    them first, on the checkpoint's shapes."""
    kind = src[0]
    if index is not None:
        return _read_index(src, want, layer, r, shown, tuple(index) + (slice(None),) * (len(want) - len(index)))
    if kind == "key":
        key = _found(src, layer, r)
        tensor = None if key is None else r.tensor(key)
        if tensor is not None and transformed and tuple(tensor.shape) != tuple(want):
            if key not in r.reported:
                r.reported.add(key)
                r.mismatched.append((f"{key} (for {shown})", tuple(want), tuple(tensor.shape)))
            return None
        return tensor
    if kind == "or":
        trial = Reading(r.sd, r.config)
        first = read_tensor(src[1], want, layer, trial, shown, transformed)
        if first is not None or trial.mismatched:  # the first source is there, if misshapen
            return r.absorb(trial, first)
        other = Reading(r.sd, r.config)
        second = read_tensor(src[2], want, layer, other, shown, transformed)
        if second is None and not other.mismatched and not other.invalid:
            other.missing = trial.missing  # neither is there: the first source's keys are named missing
        return r.absorb(other, second, invalid=trial.invalid)
    if kind == "T":
        if len(want) < 2:
            r.mismatched.append((f"{shown} (`.T` needs two axes)", tuple(want), tuple(want)))
            return None
        inner = read_tensor(src[1], tuple(want[:-2]) + (want[-1], want[-2]), layer, r, shown, True)
        return None if inner is None else inner.transpose(-1, -2)
    if kind == "experts":  # `name[l, e] <- ...`: one key per entry of the first axis, stacked
        if not want:
            return None
        parts = [read_tensor(for_expert(src[1], e), tuple(want[1:]), layer, r, shown, True) for e in range(want[0])]
        if any(p is None for p in parts):
            return None
        import torch  # only where tensors are read: `snfc check` never imports torch
        if parts[0].is_meta:  # shapes checked: stacking meta tensors imports torch's compiler (2 s)
            return torch.empty((len(parts), *parts[0].shape), dtype=parts[0].dtype, device="meta")
        return torch.stack(parts)
    if kind == "join":  # each source its size along the axis, checked before any is joined
        try:
            sizes, axis = join_sizes(src, r.config), src[2]
        except MappingError as err:
            raise MappingError(f"{shown}: {err}") from None
        if sum(sizes) != want[axis]:
            r.mismatched.append((f"{shown} (joined from {len(sizes)} keys, {' + '.join(map(str, sizes))} along "
                                 f"axis {axis})", tuple(want), tuple(want[:axis % len(want)]) + (sum(sizes),)
                                 + tuple(want[axis % len(want) + 1:])))
            return None
        pieces = [read_tensor(part, tuple(size if i == axis % len(want) else w for i, w in enumerate(want)),
                              layer, r, shown, True) for part, size in zip(src[1], sizes)]
        if any(p is None for p in pieces):
            return None
        import torch  # only where tensors are read: `snfc check` never imports torch
        if pieces[0].is_meta:
            return torch.empty(want, dtype=pieces[0].dtype, device="meta")
        return torch.cat(pieces, dim=axis)
    if kind in ("split", "interleave"):
        _, _, n, axis, index = src
        whole = list(want)
        whole[axis] *= n
        inner = read_tensor(src[1], tuple(whole), layer, r, shown, True)
        if inner is None:
            return None
        if kind == "interleave":  # every n-th entry along the axis, from `index`
            return inner.unflatten(axis, (want[axis], n)).select(axis % len(whole) + 1, index)
        return inner.narrow(axis, index * want[axis], want[axis])
    raise ValueError(f"unknown checkpoint expression {kind!r}")


def _found(src: tuple, layer: int | None, r: Reading) -> str | None:
    """The key of a ("key", ...) source at `layer`, noted as used; None, noted missing, where the
    checkpoint has no such key."""
    key = key_of(src, layer, r.config)
    if key not in r.sd:
        r.missing.append(key)
        return None
    r.used.add(key)
    r.trace.append(key)
    return key


def read_part(sd: Mapping, key: str, index: tuple | None):
    """sd[key][index], reading only those entries where the checkpoint can (its `part`: a safetensors
    file's); a mapping without one gives its whole tensor, indexed. sd[key] itself for None."""
    part = getattr(sd, "part", None)
    if index is None:
        return sd[key]
    return part(key, index) if part is not None else sd[key][index]


def _read_index(src, want: tuple, layer: int | None, r: Reading, shown: str, index: tuple):
    """read_tensor's entries `index` (a slice per axis of `want`) of the piece `src` gives."""
    kind = src[0]
    if kind == "key":
        key = _found(src, layer, r)
        return None if key is None else read_part(r.sd, key, index)
    if kind == "or":
        trial = Reading(r.sd, r.config)
        first = _read_index(src[1], want, layer, trial, shown, index)
        if first is not None:
            return r.absorb(trial, first)
        return _read_index(src[2], want, layer, r, shown, index)
    if kind == "T":
        inner = _read_index(src[1], (*want[:-2], want[-1], want[-2]), layer, r, shown,
                            (*index[:-2], index[-1], index[-2]))
        return None if inner is None else inner.transpose(-1, -2)
    if kind == "experts":
        chosen = range(want[0])[index[0]]
        parts = [_read_index(for_expert(src[1], e), tuple(want[1:]), layer, r, shown, index[1:])
                 for e in chosen or range(want[0])[:1]]  # none chosen: one read for its dtype and shape
        if any(p is None for p in parts):
            return None
        import torch  # only where tensors are read: `snfc check` never imports torch
        return torch.stack(parts) if chosen else parts[0].new_empty((0, *parts[0].shape))
    axis = src[3] % len(want) if kind in ("split", "interleave") else src[2] % len(want)
    mine = range(want[axis])[index[axis]]  # the entries wanted along the transformed axis
    if kind == "join":  # each source the entries wanted that fall within it
        pieces, start = [], 0
        for part, size in zip(src[1], join_sizes(src, r.config)):
            # the first entry wanted at `start` or past it
            first = mine.start + max(0, -(-(start - mine.start) // mine.step)) * mine.step
            inner = slice(first - start, max(min(mine.stop, start + size), first) - start, mine.step)
            shape = tuple(size if i == axis else w for i, w in enumerate(want))
            pieces.append(_read_index(part, shape, layer, r, shown, (*index[:axis], inner, *index[axis + 1:])))
            start += size
        if any(p is None for p in pieces):
            return None
        import torch  # only where tensors are read: `snfc check` never imports torch
        return torch.cat(pieces, dim=axis)
    if kind in ("split", "interleave"):
        _, _, n, _, at = src
        whole = tuple(w * n if i == axis else w for i, w in enumerate(want))
        if kind == "interleave":  # entry k is the inner entry k * n + at
            inner = slice(mine.start * n + at, mine.stop * n + at, mine.step * n)
        else:  # entry k is the inner entry at * want[axis] + k
            inner = slice(at * want[axis] + mine.start, at * want[axis] + mine.stop, mine.step)
        return _read_index(src[1], whole, layer, r, shown, (*index[:axis], inner, *index[axis + 1:]))
    raise ValueError(f"unknown checkpoint expression {kind!r}")


def source_keys(src, layer: int | None, config) -> list[str]:
    """Every checkpoint key a source may read at `layer` (each side of an `or`), the experts' with
    `e` = 0: one of them must be there for the source to be."""
    if src[0] == "key":
        return [key_of(src, layer, config)]
    if src[0] == "experts":
        return source_keys(for_expert(src[1], 0), layer, config)
    if src[0] == "join":
        return [k for part in src[1] for k in source_keys(part, layer, config)]
    return [k for part in src[1:] if isinstance(part, tuple) for k in source_keys(part, layer, config)]


def stored_keys(src, want: tuple, layer: int | None, config) -> list[tuple[int | None, str]]:
    """The keys that hold a piece of shape `want` as it is stored, each with the index along the
    piece's first axis it fills (None: all of it): a bare key, or one key per expert (`[l, e]`); none
    where the source transforms what it reads. A loader reads these straight into the piece."""
    if src[0] == "key":
        return [(None, key_of(src, layer, config))]
    if src[0] == "experts" and src[1][0] == "key" and want:
        return [(e, key_of(for_expert(src[1], e), layer, config)) for e in range(want[0])]
    return []


def unmap_tensor(source, tensor, layer, out: dict, parts: dict, config=None) -> None:
    """The inverse of read_tensor: `tensor` (one layer's) written where `source` reads it from, into
    `out` (key -> tensor): `.T` transposes back, an `or` writes its first source, one key per expert,
    a `join` writes each source its part, and the parts of a `split` are gathered in `parts` ((inner,
    layer, n, axis, interleaved) -> {index: tensor}) for the caller to join (join_parts)."""
    kind = source[0]
    if kind == "key":
        out[key_of(source, layer, config)] = tensor
    elif kind == "T":
        unmap_tensor(source[1], tensor.transpose(-1, -2), layer, out, parts, config)
    elif kind == "or":
        unmap_tensor(source[1], tensor, layer, out, parts, config)
    elif kind == "experts":
        for e in range(tensor.shape[0]):
            unmap_tensor(for_expert(source[1], e), tensor[e], layer, out, parts, config)
    elif kind == "join":  # saved back split: each source its part
        for part, piece in zip(source[1], tensor.split(join_sizes(source, config), dim=source[2])):
            unmap_tensor(part, piece.contiguous(), layer, out, parts, config)
    elif kind in ("split", "interleave"):
        _, inner, n, axis, index = source
        parts.setdefault((inner, layer, n, axis, kind == "interleave"), {})[index] = tensor
    else:
        raise ValueError(f"unknown checkpoint expression {kind!r}")


def join_parts(pieces: list, axis: int, interleaved: bool):
    """The n parts of a `split` as the tensor they came from: concatenated along `axis`, or
    interleaved there (entry i of part j at i * n + j)."""
    import torch  # only where tensors are written: `snfc check` never imports torch
    if not interleaved:
        return torch.cat(pieces, dim=axis)
    axis = axis % pieces[0].dim()
    return torch.stack(pieces, dim=axis + 1).flatten(axis, axis + 1)
