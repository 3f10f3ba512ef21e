"""How the checker words its diagnostics: dims and shapes in the spec's names, spec text quoted
back, "did you mean", "declared here" notes and the unused-name warnings."""

from __future__ import annotations


from .. import ir
from ..diagnostics import Related
from ..dims import Dim, show_dim, show_shape
from ..ir import ScalarT, TensorT
from ..language import RECOGNISED_CONFIG
from ..source import NO_SPAN, Span
from ..names import close_name

# Binding kinds as messages name them.
KIND_NAMES = {"config": "param", "param": "parameter", "buffer": "buffer", "input": "input", "dim": "dim",
              "loopvar": "loop variable", "output": "output", "local": "value"}


def article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


class Messages:
    """Mixed into `Checker`: message text, "did you mean" hints, notes and unused-name warnings."""

    def show_dim(self, d: Dim) -> str:
        return show_dim(d, self.display)

    def show(self, shape) -> str:
        return show_shape(shape, self.display)

    def show_type(self, t: ir.Type) -> str:
        if isinstance(t, TensorT):
            return f"{self.show(t.shape)} {t.dtype}"
        if isinstance(t, ScalarT):
            return t.kind
        return type(t).__name__

    def unknown(self, name: str, span: Span, code: str = "unknown-name", hint: str | None = None) -> None:
        self.n_unknown += 1
        names = [n for s in self.scopes for n in s.names] if self.n_unknown <= 50 else []  # bounded cost
        close = close_name(name, names)
        if close and not hint:
            hint = f"did you mean `{close}`?"
        self.r.error(code, f"`{name}` is not defined", span, hint=hint)

    def source_text(self, span: Span) -> str | None:
        """The spec text at a one-line span, without a keyword argument's `name=`."""
        if span.line != span.end_line or not span.line:
            return None
        text = self.r.source.line(span.line)[span.col - 1:span.end_col - 1].strip()
        head, sep, tail = text.partition("=")
        if sep and head.strip().isidentifier() and not tail.startswith("="):
            text = tail.strip()
        return text

    def not_an_int(self, value: ir.TExpr) -> dict:
        """The hint and note for a float where an int belongs (a slice bound, a dim): round it where
        it is defined."""
        if not (isinstance(value.ty, ScalarT) and value.ty.kind == "float"):
            return {}
        hint = "a float becomes an int (a dim, when computed from params) with `int(...)`, `floor(...)`, " \
               "`ceil(...)` or `round(...)`"
        b = self.lookup(value.name) if isinstance(value, ir.Ref) else None
        if b is not None and b.span.line:
            return {"hint": hint, "related": (Related(b.span, f"`{value.name}` is a float, computed here"),)}
        return {"hint": hint}

    def origin(self, a: ir.TExpr, argname: str) -> Related:
        """Where the value passed as `argname` comes from, for 'declared here' notes."""
        if isinstance(a, ir.Ref):
            if a.name in self.decl_spans:
                ty = self.lookup(a.name).ty if self.lookup(a.name) else a.ty
                shown = f" as {self.show(ty.shape)}" if isinstance(ty, TensorT) else ""
                return Related(self.decl_spans[a.name], f"`{a.name}` declared{shown} here")
            b = self.lookup(a.name)
            if b is not None and b.kind == "local" and isinstance(a.ty, TensorT):
                return Related(b.span, f"`{a.name}` is {self.show(a.ty.shape)}, from here")
        if isinstance(a, ir.TList):
            for item in a.items:
                r = self.origin(item, argname)
                if r.span.line:
                    return r
        if isinstance(a, ir.Op) and a.op == "index":
            return self.origin(a.args[0][1], argname)
        return Related(NO_SPAN, "")

    def unused_warnings(self) -> None:
        for name, kind in RECOGNISED_CONFIG.items():
            b = self.scopes[0].names.get(name)
            if b is not None and b.kind == "config":
                b.uses += 1
                if not isinstance(b.ty, ir.ScalarT) or b.ty.kind != kind:
                    self.r.error("bad-type", f"`{name}` is a value snfc reads: declare it `{kind}`", b.span)
        for name, b in self.scopes[0].names.items():
            if b.uses == 0 and b.kind in ("config", "param", "buffer", "input"):
                what = KIND_NAMES[b.kind]
                self.r.warning("unused", f"{what} `{name}` is declared but never used", b.span)


def text(e) -> str:
    """A short spec-like rendering of a syntax expression, for messages."""
    if isinstance(e, ir.Name):
        return e.id
    if isinstance(e, (ir.Num, ir.Str, ir.Const)):
        return repr(e.value)
    if isinstance(e, ir.BinOp):
        return f"{text(e.left)} {e.op} {text(e.right)}"
    if isinstance(e, ir.Call):
        return f"{e.func}(...)"
    if isinstance(e, ir.Subscript):
        return f"{text(e.value)}[" + ", ".join(text(i) for i in e.index) + "]"
    if isinstance(e, ir.SliceExpr):
        return f"{text(e.lo) if e.lo else ''}:{text(e.hi) if e.hi else ''}"
    if isinstance(e, ir.Attribute):
        return f"{text(e.value)}.{e.attr}"
    if isinstance(e, ir.ListExpr):
        return "[" + ", ".join(text(i) for i in e.items) + "]"
    return "..."
