"""The IR verifier: invariants every pass must keep. A failure is an snfc bug (exit 2)."""

from __future__ import annotations

from .. import ir


class VerifyError(AssertionError):
    pass


def verify(model: ir.Model) -> None:
    names = {p.name for p in model.params + model.buffers}
    defined = {i.name for i in model.inputs}

    def check_stmts(stmts, locals_: set, in_loop: bool):
        for s in stmts:
            if isinstance(s, ir.Bind):
                check_expr(s.value, locals_, in_loop)
                locals_.add(s.name)
            elif isinstance(s, ir.SetItem):
                _need(s.name in locals_, f"SetItem on undefined {s.name}")
                check_expr(s.value, locals_, in_loop)
            elif isinstance(s, ir.FusedLinear):
                _need(in_loop, "FusedLinear outside a loop")
                _need(len(s.targets) == len(s.weights) == len(s.biases) == len(s.sizes), "FusedLinear arity")
                check_expr(s.input, locals_, in_loop)
                locals_.update(s.targets)
            elif isinstance(s, ir.TIf):
                check_expr(s.test, locals_, in_loop)
                check_stmts(s.body, set(locals_), in_loop)
                check_stmts(s.orelse, set(locals_), in_loop)
                # names re-assigned inside stay defined; new lets are block-local
            elif isinstance(s, ir.Loop):
                _need(not in_loop, "nested loop")
                for n in s.stacked:
                    _need(n in names, f"stacked {n} is not a parameter")
                check_stmts(s.body, set(locals_) | {s.var}, True)
            else:
                raise VerifyError(f"unknown statement {type(s).__name__}")

    def check_expr(e, locals_, in_loop):
        if isinstance(e, ir.Ref):
            if e.kind == "local":
                _need(e.name in locals_, f"use of undefined local {e.name}")
            elif e.kind == "layer_param":
                _need(in_loop and e.name in names, f"layer_param {e.name} outside a loop")
            elif e.kind == "layer_input":
                _need(in_loop and e.name in defined, f"layer_input {e.name} outside a loop")
            elif e.kind in ("param", "buffer"):
                _need(e.name in names, f"unknown parameter {e.name}")
            elif e.kind == "input":
                _need(e.name in defined, f"unknown input {e.name}")
        if isinstance(e, (ir.Op, ir.TCond, ir.TList, ir.TSlice)):
            _need(not isinstance(e.ty, ir.ErrorT), "ErrorT in a checked model")
        for c in ir.children(e):
            check_expr(c, locals_, in_loop)

    check_stmts(model.body, set(), False)


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise VerifyError(what)
