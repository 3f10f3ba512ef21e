"""The block plan: which layer loops become which `Block` module lists, and their data flow.

Each layer loop becomes a class (`Block`, `Block2`, ...) whose instances live in a
`nn.ModuleList` attribute (`layers`, `layers2`, ...). That one name is used by the generated
`forward`, by the state-dict keys of its per-layer parameters and by `spec_parameters`, which
`snf.interop` reads. A block's `forward` takes the values the loop carries and reads, and
returns the carried ones plus the per-layer values written into outer tensors (`cache[l] = v`
at the top of the body: the caller does the write, so the block itself stays free of side
effects and compiles as one graph).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import ir


@dataclass(frozen=True)
class Block:
    loop: ir.Loop
    cls: str  # the generated class: Block, Block2, ...
    attr: str  # the Model's nn.ModuleList attribute: layers, layers2, ...
    body: tuple  # the loop body without the hoisted writes
    hoisted: tuple[ir.SetItem, ...]  # `out[l] = value` writes the caller does
    carried: tuple[str, ...]  # outer locals the body re-assigns: passed in and returned
    reads: tuple[tuple[str, str], ...]  # (name, kind) of outer values the body reads; kind: param | buffer | input | local
    uses_var: bool  # the body reads the loop variable (other than to index stacked parameters)

    @property
    def returns(self) -> tuple[str, ...]:
        """What the block's forward returns: the carried values, then each hoisted write's value."""
        return self.carried + tuple(h.value.name for h in self.hoisted)


@dataclass(frozen=True)
class BlockPlan:
    blocks: tuple[Block, ...]

    def of(self, loop: ir.Loop) -> Block:
        return next(b for b in self.blocks if b.loop is loop)

    def owner(self, param: str) -> Block | None:
        """The block whose layers hold the stacked parameter `param` (None: the Model holds it)."""
        return next((b for b in self.blocks if param in b.loop.stacked), None)


def plan_blocks(model: ir.Model) -> BlockPlan:
    loops = [s for s in ir.walk_stmts(model.body) if isinstance(s, ir.Loop)]
    kinds = {t.name: "param" for t in model.params} | {t.name: "buffer" for t in model.buffers} \
        | {i.name: "input" for i in model.inputs}
    blocks = []
    for index, loop in enumerate(loops):
        hoisted = tuple(s for s in loop.body if _hoistable(s, loop))
        body = tuple(s for s in loop.body if s not in hoisted)
        written = {h.name for h in hoisted}
        carried = tuple(n for n in loop.carried if n not in written)
        reads = tuple((n, kinds.get(n, "local")) for n in loop.reads if n not in loop.carried)
        # a list param's item at the block's layer is read when the block is made (codegen/blocks.py)
        items = {id(e.arg("i")) for e in ir.walk_exprs(body) if isinstance(e, ir.Op) and e.op == "item"}
        uses_var = any(isinstance(e, ir.Ref) and e.kind == "loopvar" and id(e) not in items
                       for e in ir.walk_exprs(body))
        suffix = "" if index == 0 else str(index + 1)
        blocks.append(Block(loop, f"Block{suffix}", f"layers{suffix}", body, hoisted, carried, reads, uses_var))
    return BlockPlan(tuple(blocks))


def _hoistable(s, loop: ir.Loop) -> bool:
    """`name[l] = local` at the top of the loop body, into an outer tensor the loop neither reads
    nor writes elsewhere, of a value not re-assigned after the write: done by the caller with the
    value the block returns."""
    if not (isinstance(s, ir.SetItem) and s.name in loop.carried and len(s.index) == 1
            and isinstance(s.index[0], ir.Ref) and s.index[0].kind == "loopvar"
            and isinstance(s.value, ir.Ref) and s.value.kind == "local"):
        return False
    later = loop.body[loop.body.index(s) + 1:]
    return (not any(isinstance(t, (ir.Bind, ir.SetItem)) and t.name == s.name and t is not s
                    for t in ir.walk_stmts(loop.body))
            and not any(isinstance(e, ir.Ref) and e.name == s.name
                        for t in loop.body if t is not s for e in ir.walk_exprs((t,)))
            and not any(isinstance(t, (ir.Bind, ir.SetItem, ir.FusedLinear)) and s.value.name in
                        (t.targets if isinstance(t, ir.FusedLinear) else (t.name,)) for t in ir.walk_stmts(later)))
