"""`config FMT:` sections (docs/language.md 7.1): how a foreign config (transformers' config.json)
gives the Config, checked here; `snf.weight_mapping` encodes them as data, `snf.pretrained`
evaluates them."""

from __future__ import annotations

from .. import ir
from ..weight_mapping import MappingError
from ..config_mapping import ABOVE, config_keys, config_scope, encode_config, written_key
from ..diagnostics import Related
from ..source import Span

_HINT = ("a config entry is `field <- source`, `_ <- FMT.key` (keys to ignore), `FMT.key <- value` (written back) "
         'or `assert test, "message"`; sources are keys `FMT.key` (`FMT.outer.inner` for a nested one), Config '
         "names, constants, arithmetic, comparisons, `and`/`or`/`not`, `a if c else b`, "
         "match(source, value=result, ...), the list functions count, range, flags and positions, and for an "
         "object keyed by layer number `FMT.obj[number].field`, per_layer and keyed (docs/language.md 7.1)")


class ConfigMaps:
    """Mixed into `Checker`: the `config FMT:` sections, and that each `checkpoint FMT:` section
    gives every parameter a source."""

    def check_config_maps(self) -> None:
        fields = {c.name: c for c in self.config}
        names = config_scope(self.config, self.derived)
        checkpoint_fmts = {e.fmt for e in self.spec.mappings}
        by_fmt: dict[str, list] = {}
        for e in self.spec.config_maps:
            by_fmt.setdefault(e.fmt, []).append(e)
        for fmt, entries in by_fmt.items():
            if fmt not in checkpoint_fmts:
                self.r.error("bad-config-map", f"`config {fmt}` has no `checkpoint {fmt}` section to load the weights "
                             "with", entries[0].span, hint=f"add `checkpoint {fmt}:` mapping each parameter")
            read: dict[str, Span] = {}
            written: dict[str, Span] = {}
            before = len(self.r.items)
            for e in entries:
                self.config_entry(e, fields, names, read, written)
            if not any(d.severity == "error" for d in self.r.items[before:]):
                self.one_way_fields(fmt, entries, names)
            for f in fields.values():
                if f.name not in read and f.default is ir.MISSING:
                    self.r.error("bad-config-map", f"`config {fmt}` does not map `{f.name}`, which has no default",
                                 entries[0].span, related=(Related(f.span, f"`{f.name}` declared here"),),
                                 hint=f'add `{f.name} <- {fmt}.key` (with `or` a default for an absent key)')

    def config_entry(self, e: ir.ConfigEntry, fields: dict, names: tuple, read: dict, written: dict) -> None:
        if e.kind == "read" and e.target != "_":
            if e.target not in fields:
                derived = any(d.name == e.target for d in self.derived)
                self.r.error("bad-config-map", f"`{e.target}` is not a field of Config" +
                             (": it is computed from fields; map those" if derived else ""), e.target_span,
                             hint="a config entry reads a `param:` field with a declared type")
                return
            if e.target in read:
                self.r.error("bad-config-map", f"`{e.target}` is mapped twice in `config {e.fmt}`", e.target_span,
                             related=(Related(read[e.target], "first mapped here"),))
                return
        if e.kind == "write" and e.target in written:
            self.r.error("bad-config-map", f'"{e.target}" is written twice in `config {e.fmt}`', e.target_span,
                         related=(Related(written[e.target], "first written here"),))
            return
        fmt = e.fmt
        try:
            if e.kind == "read" and e.target == "_":
                enc = encode_config(e.source, fmt, ())
                if not _only_keys(enc):
                    raise MappingError(f"`_ <-` lists keys to ignore: `{fmt}.key or {fmt}.other or ...`", e.source.span)
            elif e.kind == "read":
                if e.target == fmt:
                    raise MappingError(f"`{fmt}` names the foreign config here, not a field", e.target_span)
                encode_config(e.source, fmt, tuple(read), scope=ABOVE)
            else:
                if e.kind == "write" and e.target.partition(".")[0] != fmt:
                    raise MappingError(f"`{e.target}` is not a key of `config {fmt}`: write `{fmt}.key <- value` "
                                       "(the way back), or `field <- source`", e.target_span)
                encode_config(e.source, fmt, names, keys=e.kind == "assert")
        except MappingError as err:
            self.r.error("bad-config-map", str(err), err.span or e.span, hint=_HINT)
            return
        if e.kind == "read" and e.target != "_":
            read[e.target] = e.target_span
        elif e.kind == "write":
            written[e.target] = e.target_span

    def one_way_fields(self, fmt: str, entries: list, names: tuple) -> None:
        """save_pretrained writes each field back to the key it is read from. A field computed from
        keys (`head_dim <- hf.hidden_size // hf.num_attention_heads`) is read one way only: it can be
        written back where each key it reads is written by something else (a field read from that
        key, an `assert hf.k == constant`, or `hf.k <- value`), and reading back computes it again.
        A field computed from Config fields alone needs nothing written."""
        written: set = set()
        one_way, above = [], []
        for e in entries:
            if e.kind == "read" and e.target != "_":
                source = encode_config(e.source, fmt, tuple(above), scope=ABOVE)
                above.append(e.target)
                if written_key(source) is not None:
                    written.add(written_key(source))
                elif config_keys(source):
                    one_way.append((e, source))
            elif e.kind == "write":
                written.add(e.target.partition(".")[2])
            elif e.kind == "assert":
                test = encode_config(e.source, fmt, names)
                if test[:2] == ("cmp", "==") and test[2][0] == "key" and not config_keys(test[3]):
                    written.add(test[2][1])
        for e, source in one_way:
            lost = [k for k in config_keys(source) if not any(k == w or k.startswith(w + ".") for w in written)]
            if lost:
                self.r.error("bad-config-map", f"`{e.target}` is computed from `{fmt}.{lost[0]}`, which nothing writes "
                             "back, so save_pretrained could not write a config.json that reads as this Config",
                             e.span, hint=f"read `{e.target}` straight from a key (`{e.target} <- {fmt}.key`, with `or` "
                             f"defaults or match(...)), or write the key back: "
                             f"`{fmt}.{lost[0].partition('.*')[0]} <- value`"
                             + (" (an object keyed by layer: keyed(numbers, field=value))" if ".*" in lost[0] else ""))

    def check_sources(self) -> None:
        """Each `checkpoint FMT:` section gives every parameter a source (a buffer the config decides
        needs none: snf.interop checks buffers when it loads). Only for a section with no other
        error, so that a misspelt entry is reported once."""
        by_fmt: dict[str, list] = {}
        for e in self.spec.mappings:
            by_fmt.setdefault(e.fmt, []).append(e)
        for fmt, entries in by_fmt.items():
            if self.r.has_errors:
                return
            mapped = {e.name for e in entries}
            for p in self.params:
                if p.name not in mapped:
                    self.r.error("bad-checkpoint", f"`checkpoint {fmt}` gives no source for the parameter `{p.name}`",
                                 entries[0].span, related=(Related(p.span, f"`{p.name}` declared here"),),
                                 hint=f'add `{p.name} <- "key"` to `checkpoint {fmt}`')


def _only_keys(enc) -> bool:
    return enc[0] == "key" or enc[0] == "or" and _only_keys(enc[1]) and _only_keys(enc[2])
