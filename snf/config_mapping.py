"""Config mappings (`config FMT:` sections) as plain data: encoded and checked by `check`, evaluated
against a foreign config by `pretrained` (ConfigEval), inverted to write one back (invert, put) and
printed (show). One meaning for every reader: nothing in a mapping is ever evaluated as code."""

from __future__ import annotations

from . import ir
from .weight_mapping import MappingError, encode_mapping, mapping_keys, show_field
from .ops import by_symbol

ABOVE = "a Config field mapped above (a field is read from the names mapped before it)"
CONFIG_ARITH = ("+", "-", "*", "/", "//", "%")
CONFIG_COMPARE = ("==", "!=", "<", "<=", ">", ">=")
LONGEST_LIST = 1_000_000  # the most items a config section's list repetition or range(...) makes


def can_be_absent(enc) -> bool:
    """Whether an encoded config expression may have no value: a key of the foreign config (absent,
    or null), or an "or else" whose last alternative may. Everything else has a value or fails."""
    return enc[0] in ("key", "at") or enc[0] == "or" and can_be_absent(enc[2])


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
    v), ("list", items), ("or", a, b) (`a`, or else `b` where `a` has no value: after a key, `or`
    gives a default), ("any" / "all", a, b) (Python's `or` / `and`, on values), ("not", a), ("neg",
    a), ("op", op, a, b), ("cmp", op, a, b), ("if", test, body, orelse), ("item", list, i) (a list's
    i-th value: `(hf.time_step_limit or [0.0, 1e308])[1]`), ("count", list, value) (how many items
    equal it), ("flags", numbers, length) (1 at the listed positions of `length`, 0 elsewhere),
    ("positions", list, value) (where its items equal the value: flags' inverse for value 1),
    ("range", start, stop, step) (the list of Python's range), ("int", value) (Python's int)
    ("match", source, ((value, result), ...)), ("at", "obj", number, "a.b") (`FMT.obj[number].a.b`:
    the entry of a config object keyed by layer number, or a list's item; absent where it has none),
    ("per_layer", "obj", "a.b", length, default) (the list of each layer's entry) and ("keyed",
    numbers, ((name, value), ...)) (the object keyed by those numbers, each entry holding the names).
    With `keys=False` no key may be read (what the way back writes comes from the Config alone).
    `scope` says what `names` are."""
    def enc(x):
        return encode_config(x, fmt, names, keys, scope)

    at = _entry(e, fmt)
    if at is not None:
        obj, index, path = at
        if not keys:
            raise MappingError(f"`{fmt}.{obj}[...]` reads the foreign config, which a value written back cannot",
                               e.span)
        if len(index) != 1 or isinstance(index[0], ir.SliceExpr):
            raise MappingError(f"write `{fmt}.{obj}[number]`: one layer number (or list position)", e.span)
        return ("at", obj, enc(index[0]), path)
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
        left = enc(e.left)
        return ("or" if can_be_absent(left) else "any", left, enc(e.right))
    if isinstance(e, ir.Unary):
        return ("not", enc(e.operand)) if e.op == "not" else ("neg", enc(e.operand)) if e.op == "-" else enc(e.operand)
    if isinstance(e, ir.BinOp) and e.op in CONFIG_ARITH:
        return ("op", e.op, enc(e.left), enc(e.right))
    if isinstance(e, ir.Compare) and e.op in CONFIG_COMPARE:
        return ("cmp", e.op, enc(e.left), enc(e.right))
    if isinstance(e, ir.Cond) and e.orelse is not None:
        return ("if", enc(e.test), enc(e.body), enc(e.orelse))
    if isinstance(e, ir.Subscript) and len(e.index) == 1 and _constant_int(e.index[0]) is not None:
        return ("item", enc(e.value), _constant_int(e.index[0]))
    if isinstance(e, ir.Call) and e.func == "int":
        if len(e.args) != 1 or e.kwargs:
            raise MappingError("write int(value): a number toward zero, as Python's int", e.span)
        return ("int", enc(e.args[0]))
    if isinstance(e, ir.Call) and e.func in _LIST_FUNCS:
        if len(e.args) != 2 or e.kwargs:
            raise MappingError(f"write {_LIST_FUNCS[e.func]}", e.span)
        return (e.func, enc(e.args[0]), enc(e.args[1]))
    if isinstance(e, ir.Call) and e.func == "range":
        if not 2 <= len(e.args) <= 3 or e.kwargs:
            raise MappingError("write range(start, stop) or range(start, stop, step): the list of the ints from "
                               "start up to stop (not included), step apart", e.span)
        args = [enc(a) for a in e.args]
        return ("range", args[0], args[1], args[2] if len(args) == 3 else ("const", 1))
    if isinstance(e, ir.Call) and e.func == "per_layer":
        usage = ("write per_layer(FMT.obj, \"field\", length, default): the list of `length` values, the i-th "
                 "the field of the object's entry for layer i, the default where it has none")
        if len(e.args) != 4 or e.kwargs or config_key(e.args[0], fmt) is None \
                or not isinstance(e.args[1], ir.Str):
            raise MappingError(usage, e.span)
        enc(e.args[0])  # a key: refused where no key may be read
        return ("per_layer", config_key(e.args[0], fmt), e.args[1].value, enc(e.args[2]), enc(e.args[3]))
    if isinstance(e, ir.Call) and e.func == "keyed":
        if len(e.args) != 1 or not e.kwargs:
            raise MappingError("write keyed(numbers, field=value, ...): the object with an entry for each listed layer "
                               "number, holding those fields", e.span)
        return ("keyed", enc(e.args[0]), tuple((k.name, enc(k.value)) for k in e.kwargs))
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


def _constant_int(e: ir.Expr) -> int | None:
    """The int a list index writes (`1`, `-1`: from the end), else None."""
    if isinstance(e, ir.Unary) and e.op == "-":
        inner = _constant_int(e.operand)
        return None if inner is None else -inner
    return e.value if isinstance(e, ir.Num) and isinstance(e.value, int) and not isinstance(e.value, bool) else None


def _entry(e: ir.Expr, fmt: str):
    """(obj, index, "a.b") for `FMT.obj[index].a.b` (a subscript of a key, then attributes), else None."""
    path = []
    while isinstance(e, ir.Attribute):
        path.append(e.attr)
        e = e.value
    if isinstance(e, ir.Subscript) and config_key(e.value, fmt) is not None:
        return config_key(e.value, fmt), e.index, ".".join(reversed(path))
    return None


# the two-argument list functions, with how each is written and what it gives
_LIST_FUNCS = {
    "count": "count(list, value): how many of the list's items equal the value",
    # a set of layer numbers as a list of one item per layer, and back (Qwen2-MoE's mlp_only_layers)
    "flags": "flags(numbers, length): the list of `length` ints, 1 at each position `numbers` lists, 0 elsewhere",
    "positions": "positions(list, value): the positions of the list's items that equal the value, in increasing order",
}


def config_keys(enc) -> list[str]:
    """The foreign keys an encoded config expression reads."""
    return _leaves(enc, "key")


def config_names(enc) -> list[str]:
    """The Config names an encoded config expression reads."""
    return _leaves(enc, "name")


def _leaves(enc, kind: str) -> list[str]:
    if enc[0] == kind:
        return [enc[1]]
    if kind == "key" and enc[0] in ("at", "per_layer"):  # every layer's entry: `obj.*.a.b`, then the numbers' keys
        path, numbers = (enc[3], enc[2:3]) if enc[0] == "at" else (enc[2], enc[3:5])
        return [f"{enc[1]}.*" + (f".{path}" if path else "")] + [k for x in numbers for k in _leaves(x, kind)]
    out: list = []
    for part in enc[1:]:
        if isinstance(part, tuple) and part and isinstance(part[0], str):
            out += _leaves(part, kind)
        elif isinstance(part, tuple):
            out += [k for item in part if isinstance(item, tuple) and item and isinstance(item[0], str)
                    for k in _leaves(item, kind)]
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


def encode_sections(model: ir.Model) -> dict:
    """The checked model's `checkpoint FMT:` and `config FMT:` sections as data (the generated
    module's CHECKPOINTS): format -> 'params' (spec parameter -> its encoded source), 'ignore'
    (keys the model does not need: tied copies) and, where the spec has a `config FMT:` section,
    'config' (encode_config_section)."""
    by_fmt: dict[str, dict] = {}
    for e in model.mappings:
        entry = by_fmt.setdefault(e.fmt, {"params": {}, "ignore": ()})
        if e.name == "_":
            entry["ignore"] += tuple(mapping_keys(e.source))
        else:
            entry["params"][e.name] = encode_mapping(e.source, expert=e.expert_var is not None)
    for fmt, entry in by_fmt.items():
        if any(c.fmt == fmt for c in model.config_maps):
            entry["config"] = encode_config_section(model, fmt)
    return by_fmt


def section_keys(section: dict) -> set:
    """Every foreign key a section mentions (read, asserted, ignored), wherever it stands: a key is
    read when the section could reach it, whichever branch one config takes."""
    exprs = [*section["reads"].values(), *(test for test, _ in section["asserts"])]
    return {k for e in exprs for k in config_keys(e)} | set(section["ignore"])


# ----------------------------------------------------------------------------- evaluating, inverting, showing

class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()  # what a key gives that the foreign config lacks (or holds null)


class ConfigEval:
    """Evaluates encoded config expressions against a foreign config (`hf`: a dict, nested for dotted
    keys) and the Config names known so far (`names`: a dict, or the Config itself). Three-valued:
    a key gives its value or ABSENT, which only an "or else" (`hf.key or default`) turns into a
    value; anything else that meets it fails, raising `error` with the key named (`where` says
    which file and spec). `sources` (Config name -> the keys it was read from) names those keys
    where a message shows a Config value."""

    def __init__(self, hf: dict, names, where: str, error=ValueError, sources=None):
        self.hf, self.names, self.where, self.error = hf, names, where, error
        self.sources = sources or {}

    def key(self, key: str):
        if ".*" in key:  # every layer's entry (config_keys of `FMT.obj[i]`): shown as the object
            key = key.partition(".*")[0]
        node = self.hf
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
            if node is None:
                return ABSENT
        return node

    def value(self, e):
        """The value of `e`, which must have one."""
        out = self(e)
        if out is ABSENT:
            missing = [k for k in config_keys(e) if self.key(k) is ABSENT]
            raise self.error(f"{self.where}: config.json has no `{missing[0] if missing else show(e)}` (and the spec "
                             "gives no default for it)")
        return out

    def __call__(self, e):
        kind = e[0]
        if kind == "key":
            return self.key(e[1])
        if kind == "name":  # a list field as the list config.json gives (Config holds a tuple)
            value = self.names[e[1]] if isinstance(self.names, dict) else getattr(self.names, e[1])
            return list(value) if isinstance(value, tuple) else value
        if kind == "const":
            return e[1]
        if kind == "list":
            return [self.value(x) for x in e[1]]
        if kind == "or":
            first = self(e[1])
            return self(e[2]) if first is ABSENT else first
        if kind in ("any", "all"):
            first = self.value(e[1])
            return first if bool(first) == (kind == "any") else self.value(e[2])
        if kind == "not":
            return not self.value(e[1])
        if kind == "neg":
            return self.arith(e, lambda: -self.value(e[1]))
        if kind in ("op", "cmp"):
            left, right = self.value(e[2]), self.value(e[3])
            if e[1] == "*" and any(isinstance(x, list) for x in (left, right)):  # a list repeated
                items, times = (left, right) if isinstance(left, list) else (right, left)
                self.check_length(e, len(items) * times if isinstance(times, int) else 0)
            return self.arith(e, lambda: by_symbol(e[1]).scalar(left, right))
        if kind == "if":
            return self(e[2]) if self.value(e[1]) else self(e[3])
        if kind == "item":
            items = self.value(e[1])
            if not isinstance(items, (list, tuple)) or not -len(items) <= e[2] < len(items):
                least = e[2] + 1 if e[2] >= 0 else -e[2]
                raise self.error(f"{self.where}: `{show(e)}` needs a list of at least {least} values; "
                                 f"{self.settings(e[1])}")
            return items[e[2]]
        if kind == "int":
            return self.arith(e, lambda: int(self.value(e[1])))
        if kind == "count":
            items = self.value(e[1])
            if not isinstance(items, (list, tuple)):
                raise self.error(f"{self.where}: `{show(e)}` counts the items of a list; {self.settings(e[1])}")
            return items.count(self.value(e[2]))
        if kind == "flags":
            numbers, length = self.value(e[1]), self.value(e[2])
            if not _is_int(length) or length < 0:
                raise self.error(f"{self.where}: `{show(e)}` needs a length that is an int, at least 0; "
                                 f"{self.settings(e[2])}")
            self.check_length(e, length)
            if not isinstance(numbers, list) or not all(_is_int(n) and 0 <= n < length for n in numbers):
                raise self.error(f"{self.where}: `{show(e)}` needs a list of numbers from 0 to {length - 1}; "
                                 f"{self.settings(e)}")
            listed = set(numbers)
            return [1 if i in listed else 0 for i in range(length)]
        if kind == "positions":
            items, value = self.value(e[1]), self.value(e[2])
            if not isinstance(items, list):
                raise self.error(f"{self.where}: `{show(e)}` lists the positions in a list; {self.settings(e[1])}")
            return [i for i, item in enumerate(items) if item == value]
        if kind == "range":
            numbers = self.arith(e, lambda: range(*(self.value(x) for x in e[1:])))
            self.check_length(e, len(numbers))
            return list(numbers)
        if kind == "at":
            return self.entry(e, self.key(e[1]), self.value(e[2]), e[3])
        if kind == "per_layer":
            length = self.value(e[3])
            if not _is_int(length) or length < 0:
                raise self.error(f"{self.where}: `{show(e)}` needs a length that is an int, at least 0; "
                                 f"{self.settings(e[3])}")
            self.check_length(e, length)
            obj = self.key(e[1])
            items = [self.entry(e, obj, i, e[2]) for i in range(length)]
            return [self.value(e[4]) if x is ABSENT else x for x in items]
        if kind == "keyed":
            numbers = self.value(e[1])
            if not isinstance(numbers, list) or not all(_is_int(n) and n >= 0 for n in numbers):
                raise self.error(f"{self.where}: `{show(e)}` needs a list of layer numbers; {self.settings(e[1])}")
            fields = {name: self.value(x) for name, x in e[2]}
            return {str(n): dict(fields) for n in numbers}
        if kind == "match":
            value = self.value(e[1])
            for case, result in e[2]:
                if value == case:
                    return result
            raise self.error(f"{self.where}: {self.settings(e[1])}: the spec supports "
                             + ", ".join(repr(c) for c, _ in e[2]))
        raise ValueError(f"unknown config expression {kind!r}")

    def entry(self, e, obj, index, path: str):
        """`obj[index].path`: a config object's entry for a layer number (JSON keys it as the number's
        digits), or a list's item; ABSENT where there is none."""
        if obj is ABSENT:
            return ABSENT
        if isinstance(obj, dict) and (_is_int(index) and index >= 0 or isinstance(index, str)):
            node = obj.get(str(index), ABSENT)
        elif isinstance(obj, list) and _is_int(index):
            node = obj[index] if -len(obj) <= index < len(obj) else ABSENT
        else:
            raise self.error(f"{self.where}: `{show(e)}` needs an object keyed by layer number (or a list) and a "
                             f"number at least 0; {self.settings(e)}")
        for part in path.split(".") if path else ():
            if node is ABSENT or node is None:
                return ABSENT
            if not isinstance(node, dict):
                raise self.error(f"{self.where}: `{show(e)}` needs an object at `{part}`'s place; {self.settings(e)}")
            node = node.get(part, ABSENT)
        return ABSENT if node is None else node

    def check_length(self, e, length: int) -> None:
        """A list `e` makes (repeated, or a range) from config.json's sizes is not built past LONGEST_LIST
        items: a hostile file's billion layers would take the memory first."""
        if length > LONGEST_LIST:
            raise self.error(f"{self.where}: `{show(e)}` would make a list of {length} items with "
                             f"{self.settings(e)}: more than {LONGEST_LIST}")

    def arith(self, e, compute):
        try:
            return compute()
        except (TypeError, ZeroDivisionError, OverflowError, ValueError) as err:
            raise self.error(f"{self.where}: cannot compute `{show(e)}` with {self.settings(e)}: {err}") from None

    def settings(self, e) -> str:
        """`key = value` for each key `e` reads, as the foreign config gives it."""
        import json
        shown = []
        for key in dict.fromkeys(k.partition(".*")[0] for k in config_keys(e)):  # an entry by layer: its object
            value = self.key(key)
            shown.append(f"{key} = " + ("(absent)" if value is ABSENT else json.dumps(value, default=repr)))
        for name in dict.fromkeys(config_names(e)):  # the Config fields it reads, as config.json gave them
            keys = self.sources.get(name)
            read = f", read from config.json's {' and '.join(dict.fromkeys(keys))}" if keys else ""
            shown.append(f"{name} = {self(('name', name))!r} (in the Config){read}")
        return ", ".join(shown) or "these settings"


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def show(e, fmt: str = "hf") -> str:
    """An encoded expression as the spec writes it (for messages and `snfc ir`): a config expression
    of format `fmt`, or with fmt="" a checkpoint source, whose keys are strings. Parenthesized
    where nested, not outermost."""
    text = _show(e, fmt)
    return text[1:-1] if e[0] in ("or", "any", "all", "if") else text


def _show(e, fmt: str) -> str:
    kind = e[0]
    if kind == "key":
        return f"{fmt}.{e[1]}" if fmt else f'"{e[1]}"'
    if kind == "name":
        return e[1]
    if kind == "const":
        return f'"{e[1]}"' if isinstance(e[1], str) else repr(e[1])
    if kind == "list":
        return "[" + ", ".join(_show(x, fmt) for x in e[1]) + "]"
    if kind in ("or", "any", "all"):  # a chain of one operator is written without inner parentheses
        sides = [_show(x, fmt)[1:-1] if x[0] == kind else _show(x, fmt) for x in e[1:3]]
        return f"({sides[0]} {'and' if kind == 'all' else 'or'} {sides[1]})"
    if kind in ("not", "neg"):
        op = by_symbol("not" if kind == "not" else "-", 1)
        return ("not " if kind == "not" else "-") + _operand(e[1], op.operand_precs()[0], fmt)
    if kind in ("op", "cmp"):
        left, right = (_operand(x, prec, fmt) for x, prec in zip(e[2:], by_symbol(e[1]).operand_precs()))
        return f"{left} {e[1]} {right}"
    if kind == "if":
        return f"({_show(e[2], fmt)} if {_show(e[1], fmt)} else {_show(e[3], fmt)})"
    if kind == "item":
        inner = _show(e[1], fmt)
        bare = e[1][0] in ("key", "list", "or", "name", "at", "range", "per_layer", *_LIST_FUNCS)
        return f"{inner if bare else '(' + inner + ')'}[{e[2]}]"
    if kind in _LIST_FUNCS:
        return f"{kind}({show(e[1], fmt)}, {show(e[2], fmt)})"
    if kind == "int":
        return f"int({show(e[1], fmt)})"
    if kind == "range":
        return f"range({', '.join(show(x, fmt) for x in e[1:])})"
    if kind == "match":
        return f"match({show(e[1], fmt)}, " + ", ".join(f"{c}={r!r}" for c, r in e[2]) + ")"
    if kind == "at":
        return f"{fmt}.{e[1]}[{show(e[2], fmt)}]" + (f".{e[3]}" if e[3] else "")
    if kind == "per_layer":
        return f'per_layer({fmt}.{e[1]}, "{e[2]}", {show(e[3], fmt)}, {show(e[4], fmt)})'
    if kind == "keyed":
        return f"keyed({show(e[1], fmt)}, " + ", ".join(f"{n}={show(x, fmt)}" for n, x in e[2]) + ")"
    if kind == "T":
        return f"{_show(e[1], '')}.T"
    if kind in ("split", "interleave"):
        return (f"split({show(e[1], '')}, {e[2]}, axis={e[3]}, index={e[4]}"
                + (", interleaved=True)" if kind == "interleave" else ")"))
    if kind == "experts":
        return _show(e[1], "")
    if kind == "join":
        sources, sizes = ", ".join(_show(x, "") for x in e[1]), ", ".join(show_field(t) for t in e[3])
        return f"join([{sources}], axis={e[2]}, sizes=[{sizes}])"
    raise ValueError(f"unknown mapping expression {kind!r}")


def _operand(x, prec: int, fmt: str) -> str:
    """An operand of an operator, parenthesized where Python would read it otherwise (`prec`, the
    registry op's `operand_precs`): `(k - 1) * n`, `a - (b - c)`."""
    text = _show(x, fmt)
    if x[0] in ("op", "cmp") and by_symbol(x[1]).prec < prec:
        return f"({text})"
    return text


def written_key(source) -> str | None:
    """The key a field read from `source` is written back to: its first key, straight or through
    `or` defaults and `match`; None where the source is not such a read (a one-way field)."""
    if source[0] == "key":
        return source[1]
    return written_key(source[1]) if source[0] in ("or", "match") else None


def invert(source, value, out: dict) -> bool:
    """Write `value` where a field read from `source` came from (written_key); False where it cannot:
    a `match` with no case giving `value`, or a one-way source."""
    kind = source[0]
    if kind == "key":
        put(out, source[1], value)
        return True
    if kind == "or":
        return invert(source[1], value, out)
    if kind == "match":
        case = next((c for c, result in source[2] if result == value and type(result) is type(value)), ABSENT)
        return case is not ABSENT and invert(source[1], case, out)
    return False


def put(out: dict, key: str, value) -> None:
    """out[key] = value, `key` going into nested objects; a None value removes the key instead (and
    the objects it leaves empty)."""
    *outer, last = key.split(".")
    if value is None:
        path = [out]
        for part in outer:
            if not isinstance(path[-1].get(part), dict):
                return
            path.append(path[-1][part])
        path[-1].pop(last, None)
        for parent, part in zip(reversed(path[:-1]), reversed(outer)):
            if not parent[part]:
                del parent[part]
        return
    for part in outer:
        if not isinstance(out.get(part), dict):
            out[part] = {}
        out = out[part]
    out[last] = list(value) if isinstance(value, tuple) else value  # a list field's tuple, as JSON has it


def unknown_keys(hf: dict, known: set, prefix: str = "") -> list:
    """(key, value) for each setting of `hf` that no key in `known` covers: a key is covered by itself
    or an enclosing object; an object (or a null where one belongs) some of whose keys are known is
    looked into."""
    out = []
    for key, value in hf.items():
        path = prefix + key
        if any(_covers(k, path) for k in known):
            continue
        inner = any(_covers(k, path, inside=True) for k in known)
        if inner and value is None:
            continue  # `"rope_scaling": null`: read, as absent
        out += unknown_keys(value, known, path + ".") if inner and isinstance(value, dict) else [(path, value)]
    return out


def _covers(known: str, path: str, inside: bool = False) -> bool:
    """Whether the known key `known` is `path` (with inside=True: a key inside it); a `*` part of a
    known key (an entry of an object keyed by layer) stands for any one layer number."""
    parts, want = known.split("."), path.split(".")
    if (len(parts) <= len(want)) if inside else (len(parts) != len(want)):
        return False
    return all(k == w or k == "*" and w.isdigit() for k, w in zip(parts, want))
