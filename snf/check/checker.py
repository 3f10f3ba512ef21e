"""The `Checker`: syntax IR -> typed IR (`ir.Model`), checking names, dtypes and symbolic shapes.

All errors are collected; a value whose check failed gets `ErrorT`, and nothing that uses it
reports again, so one root cause gives one error. The class is composed of one mixin per
concern, each in its own module; this one holds the state they share and runs them in order.
"""

from __future__ import annotations

from .. import ir
from ..diagnostics import Related, Reporter
from ..dims import Dim, equal
from ..ir import ErrorT, ScalarT, TensorT
from ..irdump import Printer
from ..ops import all_ops
from ..source import Span
from .calls import Calls
from .conditions import fewest
from .config_maps import ConfigMaps
from .declarations import Declarations
from .expressions import Expressions
from .facts import Facts
from .fold import Folding
from .inits import Inits
from .loops import Loops
from .messages import Messages
from .numbers import Numbers
from .presence import Presence
from .scopes import Scope, Scopes
from .statements import Statements


class Checker(Declarations, ConfigMaps, Expressions, Statements, Loops, Calls, Facts, Folding, Numbers, Presence, Inits,
              Scopes, Messages):
    def __init__(self, spec: ir.Spec, r: Reporter):
        self.spec, self.r = spec, r
        self.ops = all_ops()
        self.scopes: list[Scope] = [Scope()]
        self.config: list[ir.ConfigField] = []
        self.layer_counts: dict = {}  # a per-layer declaration's layer variable -> its count (while checked)
        self.derived: list[ir.Derived] = []
        self.inputs: list[ir.Tensor] = []
        self.params: list[ir.Tensor] = []
        self.buffers: list[ir.Tensor] = []
        self.outputs: list[ir.Tensor] = []
        self.decl_spans: dict[str, Span] = {}
        self.display: dict = {}  # dim or atom -> the spec's name for it, for messages
        self.printer = Printer(display=self.display)  # spells expressions in messages, in those names
        self.runtime: dict[str, tuple[str, int]] = {}  # runtime dim -> (input, axis)
        self.owner: dict[str, str] = {}  # runtime dim -> the optional input that introduces it
        self.constraints: list[ir.Constraint] = []
        self.loops: list[dict] = []  # open loops: var, count, depth, carried, reads, stacked
        self.whole_reads: dict[str, list[Span]] = {}  # param -> where it is read other than as `p[l]`
        self.roles: dict[str, str] = {}
        self.where_dims: dict[str, Dim] = {}
        self.free_out: set[str] = set()
        self.pending: list[ir.Check] = []  # the checks on dims, as they arose (check/facts.py)
        self.nonlinear_spans: set = set()  # where a condition not linear in a layer was refused
        self.free_bound: dict[str, Dim] = {}
        self.n_unknown = 0  # unknown names reported (bounds the cost of "did you mean")
        self._numbers: dict = {}  # id(scalar node) -> (node, (its number, whether it read a default), FoldError)
        self.folded: dict = {}  # a derived value's name -> (its number for the defaults, whether it used one)
        self.float_dtype: str | None = None  # the model's floating dtype (Declarations.model_float_dtype)
        self.value_checks: list = []  # numbers computed from the config, with their owner (check/numbers.py)
        self.guards: list = []  # the conditions the statement being checked runs under
        self.initialising: str | None = None  # the parameter whose initialiser is being checked

    def run(self) -> ir.Model | None:
        self.declarations()
        body = self.block(self.spec.body)
        if not self.outputs and not self.r.has_errors:
            self.r.error("output-unbound", "the spec declares no output", Span(1, 1, 1, 2),
                         hint="add an `output:` section, e.g. `output:` / `  y : Tensor([B, D], float32)`")
        outputs = self.check_outputs()
        self.assumed(body)
        self.unused_warnings()
        stacked = self.stacked_owners(body)
        self.check_mappings(set(stacked))
        self.check_sources()
        self.check_config_maps()
        if self.r.has_errors:
            return None
        return ir.Model(
            name=self.spec.name, path=self.spec.path, sha256=self.spec.sha256,
            config=self.with_choices(body), derived=tuple(self.derived), inputs=tuple(self.inputs),
            params=self.with_roles(self.params), buffers=self.with_roles(self.buffers), outputs=tuple(outputs),
            body=body, constraints=tuple(fewest(self.constraints, lambda c: c.cond)),
            dim_sources=tuple((d, inp, ax) for d, (inp, ax) in self.runtime.items() if inp),
            display=tuple(sorted(((k, v) for k, v in self.display.items()), key=lambda kv: kv[1])),
            mappings=self.spec.mappings, config_maps=self.spec.config_maps, stacked=stacked,
            checks=self.checks(),
            input_groups=self.input_groups(), float_dtype=self.float_dtype,
            values=self.numbers(set(stacked)), index_rows=ir.index_rows(body),
            computed=tuple((n, v) for n, v in self.defaults().items() if n in self.computed_ints()))

    def with_choices(self, body: tuple) -> tuple[ir.ConfigField, ...]:
        """The config, each list of strings with its known items: its defaults' and the strings
        the spec compares its items with (`layer_types[l] == "moe"`)."""
        compared: dict[str, list] = {}
        for e in ir.walk_exprs(body):
            if isinstance(e, ir.Op) and e.op in ("eq", "ne"):
                a, b = e.arg("a"), e.arg("b")
                for item, other in ((a, b), (b, a)):
                    listed = item.arg("x") if isinstance(item, ir.Op) and item.op == "item" else None
                    if isinstance(listed, ir.Ref) and listed.kind == "config" and isinstance(other, ir.Lit) \
                            and isinstance(other.value, str):
                        compared.setdefault(listed.name, []).append(other.value)
        return tuple(ir.replace(c, choices=tuple(dict.fromkeys(
            (c.default if isinstance(c.default, tuple) else ()) + tuple(compared.get(c.name, ())))))
            if c.item_kind == "str" else c for c in self.config)

    def check_outputs(self) -> list[ir.Tensor]:
        """Each declared output against the value the body computed for it."""
        outputs = []
        for o in self.outputs:
            b = self.scopes[0].names.get(o.name)
            if b is None or b.kind != "local":
                self.r.error("output-unbound", f"output `{o.name}` is never computed", o.span,
                             hint=f"bind it with `let {o.name} = ...`")
                continue
            b.uses += 1
            got = b.ty
            if isinstance(got, TensorT) and not isinstance(got, ErrorT):
                ok = got.rank == o.ty.rank and all(self.output_dim(want, have)
                                                   for want, have in zip(o.ty.shape, got.shape))
                if got.maybe_none and not o.optional:
                    self.r.error("output-mismatch", f"output `{o.name}` may be None here; declare it optional `?`",
                                 o.span)
                if not ok or got.dtype != o.ty.dtype:
                    self.r.error("output-mismatch", f"output `{o.name}` is declared {self.show(o.ty.shape)} "
                                 f"{o.ty.dtype} but computed as {self.show(got.shape)} {got.dtype}", o.span,
                                 related=(Related(b.span, f"`{o.name}` computed here"),))
            elif isinstance(got, ScalarT):
                self.r.error("output-mismatch", f"output `{o.name}` must be a tensor", o.span)
            outputs.append(o)
        return outputs

    def output_dim(self, declared: Dim, got: Dim) -> bool:
        sym = declared.as_symbol()
        if sym in self.free_out:
            bound = self.free_bound.setdefault(sym, got)
            return equal(bound, got)[0]
        return equal(declared, got)[0]
