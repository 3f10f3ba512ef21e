"""`config FMT:` sections (docs/language.md 7.1): how a foreign config (transformers' config.json)
gives the Config, checked here; `snf.checkpoints` encodes them as data, `snf.pretrained`
evaluates them."""

from __future__ import annotations

from .. import ir
from ..checkpoints import ABOVE, MappingError, config_scope, encode_config
from ..diagnostics import Related
from ..source import Span

_HINT = ("a config entry is `field <- source`, `_ <- FMT.key` (keys to ignore), `FMT.key <- value` (written back) "
         'or `assert test, "message"`; sources are keys `FMT.key` (`FMT.outer.inner` for a nested one), Config '
         "names, constants, arithmetic, comparisons, `and`/`or`/`not`, `a if c else b` and "
         "match(source, value=result, ...)")


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
            for e in entries:
                self.config_entry(e, fields, names, read, written)
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
