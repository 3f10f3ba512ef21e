"""Names in scope: what each spec name is bound to, nested scopes, and declaring a name."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import ir
from ..diagnostics import Related
from ..language import RESERVED
from ..names import public_name_problem
from ..source import Span


@dataclass
class Binding:
    kind: str  # config | dim | input | param | buffer | local | loopvar | output
    ty: ir.Type
    span: Span
    optional: bool = False
    uses: int = 0
    scope_depth: int = 0
    loop_depth: int = 0


@dataclass
class Scope:
    names: dict = field(default_factory=dict)
    present: frozenset = frozenset()  # optional inputs known to exist here


class Scopes:
    """Mixed into `Checker`: `self.scopes` is a stack whose first entry holds the spec's sections."""

    def lookup(self, name: str) -> Binding | None:
        for s in reversed(self.scopes):
            if name in s.names:
                return s.names[name]
        return None

    @property
    def present(self) -> frozenset:
        return self.scopes[-1].present

    def push(self, present: frozenset | None = None) -> None:
        self.scopes.append(Scope(present=self.present | (present or frozenset())))

    def pop(self) -> None:
        self.scopes.pop()

    def declare(self, name: str, b: Binding, span: Span) -> bool:
        if name in RESERVED:
            self.r.error("reserved-name", f"`{name}` is reserved and cannot be declared", span)
            return False
        problem = public_name_problem(b.kind, name)
        if problem:
            self.r.error("reserved-name", problem, span, hint="pick another name")
            self.scopes[-1].names[name] = Binding(b.kind, ir.ErrorT(), span, uses=1)  # its uses report nothing more
            return False
        prev = self.lookup(name)
        if prev is not None and (name in self.scopes[-1].names or prev.kind != "local"):
            self.r.error("redefinition", f"`{name}` is already declared", span,
                         hint="pick another name, or assign without `let` to update it",
                         related=(Related(prev.span, f"`{name}` first declared here"),) if prev.span.line else ())
            return False
        b.scope_depth = len(self.scopes) - 1
        b.loop_depth = len(self.loops)
        self.scopes[-1].names[name] = b
        return True
