"""Checkpoint mappings (`checkpoint FMT:` sections) as plain data: checked by `check`, emitted by `codegen`,
evaluated by `interop`. Nothing in a mapping is ever evaluated as code."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

from . import ir


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
        if len(e.args) != 2 or set(kw) != {"axis", "index"}:
            raise MappingError('write split("key", n, axis=i, index=j)', e.span)
        n, axis, index = _int(e.args[1], "n"), _int(kw["axis"], "axis"), _int(kw["index"], "index")
        if n < 1:
            raise MappingError(f"split into {n} parts: n must be at least 1", e.args[1].span)
        if not 0 <= index < n:
            raise MappingError(f"index={index} is not one of the {n} parts (0 to {n - 1})", kw["index"].span)
        if rank is not None and not -rank <= axis < rank:
            raise MappingError(f"axis={axis} is out of range for the rank-{rank} tensor this fills", kw["axis"].span)
        return ("split", _encode(e.args[0], rank, fields), n, axis, index)
    raise MappingError("unsupported checkpoint source expression", getattr(e, "span", None))


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


def eval_field(tree, values) -> int:
    """A parsed field's value; `values` maps its names (`l`, `e`, config ints) to ints."""
    if tree[0] == "const":
        return tree[1]
    if tree[0] == "name":
        return int(values[tree[1]])
    a, b = eval_field(tree[2], values), eval_field(tree[3], values)
    op = tree[1]
    return a + b if op == "+" else a - b if op == "-" else a * b if op == "*" else a // b if op == "//" else a % b


def format_key(key: str, values) -> str:
    """The key with each `{...}` field computed (`values[name]` for its names)."""
    return _FIELD.sub(lambda m: str(eval_field(parse_field(m[1]), values)), key)


class _Values(Mapping):
    """What a key's `{...}` fields read: `l`, `e` where bound, and the config's ints."""

    def __init__(self, bound: dict, config):
        self.bound, self.config = bound, config

    def __getitem__(self, name: str):
        if name in self.bound:
            return self.bound[name]
        if self.config is not None and hasattr(self.config, name):
            return getattr(self.config, name)
        raise KeyError(name)

    def __iter__(self):
        return iter(self.bound)

    def __len__(self) -> int:
        return len(self.bound)


def key_of(src: tuple, layer: int | None, config) -> str:
    """The checkpoint key of a ("key", text[, bound]) source at `layer`: its fields computed."""
    bound = dict(src[2]) if len(src) > 2 else {}
    if layer is not None:
        bound["l"] = layer
    return format_key(src[1], _Values(bound, config))


def mapping_keys(e: ir.Expr) -> list[str]:
    if isinstance(e, ir.Str):
        return [e.value]
    if isinstance(e, ir.BoolOp):
        return mapping_keys(e.left) + mapping_keys(e.right)
    return []


# ----------------------------------------------------------------------------- `config FMT:` sections

ABOVE = "a Config field mapped above (a field is read from the names mapped before it)"
CONFIG_ARITH = ("+", "-", "*", "/", "//", "%")
CONFIG_COMPARE = ("==", "!=", "<", "<=", ">", ">=")


def is_condition(e: ir.Expr) -> bool:
    """Whether `e` is a condition (a comparison, `and`, `not`, or an `or` of conditions): its `or`
    is then logical; after any other value `or` gives a default for an absent key."""
    if isinstance(e, (ir.Compare, ir.Const)) and not (isinstance(e, ir.Const) and e.value is None):
        return isinstance(e, ir.Compare) or isinstance(e.value, bool)
    if isinstance(e, ir.Unary) and e.op == "not":
        return True
    if isinstance(e, ir.BoolOp):
        return e.op == "and" or is_condition(e.left)
    return False


def config_key(e: ir.Expr, fmt: str) -> str | None:
    """"a.b" for `FMT.a.b` (a key of the foreign config; dots go into nested objects), else None."""
    parts = []
    while isinstance(e, ir.Attribute):
        parts.append(e.attr)
        e = e.value
    return ".".join(reversed(parts)) if parts and isinstance(e, ir.Name) and e.id == fmt else None


def encode_config(e: ir.Expr, fmt: str, names, keys: bool = True, scope: str = "a Config name"):
    """A `config FMT:` expression as nested tuples (never evaluated as code): ("key", "a.b") is
    `FMT.a.b`, a key of the foreign config, ("name", n) a Config name (one of `names`), ("const",
    v), ("list", items), ("or", a, b) (`a`, or `b` where `a` is an absent or null key), ("any" /
    "all", a, b), ("not", a), ("neg", a), ("op", op, a, b), ("cmp", op, a, b), ("if", test, body,
    orelse) and ("match", source, ((value, result), ...)). With `keys=False` no key may be read
    (what the way back writes comes from the Config alone). `scope` says what `names` are."""
    def enc(x):
        return encode_config(x, fmt, names, keys, scope)

    key = config_key(e, fmt)
    if key is not None:
        if not keys:
            raise MappingError(f"`{fmt}.{key}` reads the foreign config, which a value written back cannot", e.span)
        return ("key", key)
    if isinstance(e, ir.Name):
        if e.id == fmt:
            raise MappingError(f"`{fmt}` is the foreign config: write `{fmt}.key`", e.span)
        if e.id not in names:
            raise MappingError(f"`{e.id}` is not {scope}", e.span)
        return ("name", e.id)
    if isinstance(e, (ir.Num, ir.Str, ir.Const)):
        return ("const", e.value)
    if isinstance(e, ir.ListExpr):
        return ("list", tuple(enc(x) for x in e.items))
    if isinstance(e, ir.BoolOp):
        if e.op == "and":
            return ("all", enc(e.left), enc(e.right))
        return ("any" if is_condition(e.left) else "or", enc(e.left), enc(e.right))
    if isinstance(e, ir.Unary):
        return ("not", enc(e.operand)) if e.op == "not" else ("neg", enc(e.operand)) if e.op == "-" else enc(e.operand)
    if isinstance(e, ir.BinOp) and e.op in CONFIG_ARITH:
        return ("op", e.op, enc(e.left), enc(e.right))
    if isinstance(e, ir.Compare) and e.op in CONFIG_COMPARE:
        return ("cmp", e.op, enc(e.left), enc(e.right))
    if isinstance(e, ir.Cond) and e.orelse is not None:
        return ("if", enc(e.test), enc(e.body), enc(e.orelse))
    if isinstance(e, ir.Call) and e.func == "match":
        if len(e.args) != 1 or not e.kwargs:
            raise MappingError("write match(source, value=result, ...): one source, then what each value gives", e.span)
        cases = []
        for k in e.kwargs:
            result = enc(k.value)
            if result[0] != "const":
                raise MappingError(f"`{k.name}=` must give a constant", k.value.span)
            cases.append((k.name, result[1]))
        return ("match", enc(e.args[0]), tuple(cases))
    raise MappingError("unsupported config expression", getattr(e, "span", None))


def config_keys(enc) -> list[str]:
    """The foreign keys an encoded config expression reads."""
    if enc[0] == "key":
        return [enc[1]]
    out: list = []
    for part in enc[1:]:
        if isinstance(part, tuple) and part and isinstance(part[0], str):
            out += config_keys(part)
        elif isinstance(part, tuple):
            out += [k for item in part if isinstance(item, tuple) and item and isinstance(item[0], str)
                    for k in config_keys(item)]
    return out


def config_scope(fields, derived) -> tuple[str, ...]:
    """The names an assert or a value written back may read: the Config's fields and what it
    computes (not an alias such as `D = n_embd`, which the generated Config does not hold)."""
    return tuple(c.name for c in fields) + tuple(d.name for d in derived if d.alias_of is None)


def encode_config_section(model: ir.Model, fmt: str) -> dict:
    """The checked model's `config FMT:` section as data for snf.pretrained: 'reads' (field ->
    source, in the order they are read), 'asserts' ((test, message) pairs), 'writes' (key ->
    value, for the way back), 'ignore' (keys)."""
    names = config_scope(model.config, model.derived)
    reads, asserts, writes, ignore = {}, [], {}, []
    for e in (e for e in model.config_maps if e.fmt == fmt):
        if e.kind == "read" and e.target == "_":
            ignore += config_keys(encode_config(e.source, e.fmt, ()))
        elif e.kind == "read":
            reads[e.target] = encode_config(e.source, e.fmt, tuple(reads), scope=ABOVE)
        elif e.kind == "write":
            writes[e.target.partition(".")[2]] = encode_config(e.source, e.fmt, names, keys=False)
        else:
            asserts.append((encode_config(e.source, e.fmt, names), e.message or ""))
    return {"reads": reads, "asserts": tuple(asserts), "writes": writes, "ignore": tuple(ignore)}
