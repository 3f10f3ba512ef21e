"""The notation's sections (`Domain:`, `State:`, `Parameters:`, `Output:`) read before lowering,
and after it: defaults for the sizes the text leaves open, unused-name warnings, and the DSL
declarations of the lowered spec."""

from __future__ import annotations

from ... import ir
from ...dims import Dim, show_dim
from ...source import Span
from .sizes import Hole, Var, dim_to_expr
from .syntax import ForBlock, OperatorDef, Section, TransitionDef
from .values import RESERVED_NAMES, ROLE_TEXT, Group, LoweringError, StateInfo


# Domain descriptions -> the role of the dim. Run-time dims are bound by the inputs' shapes;
# the others become config params with these defaults (nanoGPT's shakespeare-char config).
ROLE_WORDS = {
    "batch": ("batch", "batch_size"),
    "sequence": ("sequence_position", "sequence", "sequence_length", "seq", "seq_len", "position", "positions",
                 "time", "tokens", "context_position"),
    "embedding": ("embedding_dim", "embedding", "model_dim", "d_model", "hidden", "hidden_dim", "width", "embd",
                  "n_embd", "channels"),
    "heads": ("attention_heads", "heads", "n_head", "num_heads", "head_count"),
    "layers": ("layer_depth", "layers", "depth", "n_layer", "num_layers"),
    "vocab": ("vocab", "vocabulary", "vocab_size", "tokens_vocab"),
    "context": ("context_length", "block_size", "max_sequence", "max_positions", "context"),
}
DEFAULTS = {"embedding": 384, "heads": 6, "layers": 6, "vocab": 65, "context": 256}
RUNTIME_ROLES = ("batch", "sequence")
SETS = {"ℝ": "float32", "R": "float32", "ℕ": "int64", "N": "int64", "ℤ": "int64", "Z": "int64"}
MLP_EXPANSION = 4


class Declarations:
    """Mixed into `Lowering`."""

    def sec_domain(self, sec: Section) -> None:
        for e in sec.items:
            if e.name in self.dims:
                self.r.error("redefinition", f"dim `{e.name}` is already declared", e.name_span)
                continue
            if e.name in RESERVED_NAMES:
                self.r.error("reserved-name", f"`{e.name}` is reserved and cannot name a dim", e.name_span)
                continue
            role = next((rl for rl, words in ROLE_WORDS.items() if e.role_word.lower() in words), None)
            if role is None and e.default is None:
                self.poisoned.add(e.name)
                self.r.error("bad-default", f"`{e.name} : {e.role_word}` is not a size snfc knows a default for",
                             e.role_span, hint=f"give one: `{e.name} : {e.role_word} = 64`, or use a known role "
                             "(batch, sequence_position, embedding_dim, attention_heads, layer_depth, vocab, "
                             "context_length)")
                continue
            if role in self.roles.values() and role is not None:
                other = next(n for n, rl in self.roles.items() if rl == role)
                self.r.error("redefinition", f"`{e.name}` and `{other}` are both the {role} dim", e.role_span)
                continue
            if role in RUNTIME_ROLES and e.default is not None:
                self.r.error("bad-default", f"`{e.name}` is a run-time size (from the inputs' shapes) and takes no "
                             "default", e.span)
                self.poisoned.add(e.name)
                continue
            self.dims[e.name] = e
            self.roles[e.name] = role or "size"
            self.taken.add(e.name)

    def sec_state(self, sec: Section) -> None:
        for e in sec.items:
            if e.name in self.states or e.name in self.dims:
                self.r.error("redefinition", f"`{e.name}` is already declared", e.name_span)
                continue
            dtype = SETS.get(e.set_name)
            if dtype is None:
                self.poisoned.add(e.name)
                self.r.error("bad-type", f"unknown set `{e.set_name}`", e.set_span,
                             hint="state lives in ℝ (float32) or ℕ / ℤ (int64): `h ∈ ℝ[B, T, D]`")
                continue
            try:
                shape = tuple(self.size(d) for d in e.dims)
                count = self.size(e.count) if e.count is not None else None
            except LoweringError:
                self.poisoned.add(e.name)
                continue
            self.states[e.name] = StateInfo(e, dtype, shape, count, is_input=False)
            self.taken.add(e.name)

    def sec_parameters(self, sec: Section) -> None:
        for e in sec.items:
            if e.name in self.groups or e.name in self.states or e.name in self.dims:
                self.r.error("redefinition", f"`{e.name}` is already declared", e.name_span)
                continue
            try:
                count = self.size(e.count) if e.count is not None else None
            except LoweringError:
                self.poisoned.add(e.name)
                continue
            group = self.groups[e.name] = Group(e, count)
            for f in ((e.whole,) if e.whole else ()) + e.fields:
                key = "" if f is e.whole else f.name
                if key in group.declared:
                    self.r.error("redefinition", f"field `{f.name}` of `{e.name}` is declared twice", f.span)
                    continue
                if SETS.get(f.set_name) != "float32":
                    self.r.error("bad-type", f"parameters live in ℝ, not `{f.set_name}`", f.span)
                    continue
                try:
                    group.declared[key] = (tuple(self.size(d) for d in f.dims), f)
                except LoweringError:
                    continue

    def sec_output(self, sec: Section) -> None:
        self.declared_outputs = list(sec.items)

    def note_inputs(self) -> None:
        """A state never assigned is an input; the run-time dims must come from inputs."""
        assigned = set()

        def scan(stmts):
            for s in stmts:
                if isinstance(s, ir.Assign):
                    assigned.add(s.name)

        for item in self.items:
            if isinstance(item, (Section, OperatorDef, TransitionDef, ForBlock)):
                scan(getattr(item, "items", None) or getattr(item, "body", ()))
            elif isinstance(item, ir.Assign):
                assigned.add(item.name)
        bound = set()
        for name, st in self.states.items():
            if name not in assigned:
                st.is_input = True
                if st.count is not None:
                    self.r.error("syntax", f"input `{name}` is never assigned, so it cannot be a sequence "
                                 f"`{name}[...]`", st.entry.span)
                for d in st.shape:
                    bound |= d.symbols()
            st.ir_name = name
        for name, role in self.roles.items():
            if role in RUNTIME_ROLES and name not in bound:
                self.r.error("unknown-dim", f"`{name}` is a run-time size, but no input state has it in its shape",
                             self.dims[name].span, hint="run-time sizes (batch, sequence) come from the inputs")

    def finish_sizes(self) -> None:
        """Default what the text leaves open, then check every parameter size is known."""
        if not self.sizes.propagate():
            return
        for v in list(self.sizes.vars):
            root = self.sizes.find(v)
            if not isinstance(root, Var) or root is not v:
                continue
            o = root.origin
            in_dim = self.sizes.find(o.in_dim) if o.in_dim is not None else None
            if o.kind == "linear-out" and isinstance(in_dim, Dim):
                if root.hidden:
                    value = in_dim * MLP_EXPANSION
                    self.r.warning("ambiguous", f"the hidden width of `{o.text}` is not determined by the text: using "
                                   f"{show_dim(value)} ({MLP_EXPANSION} × the input width, as GPT-2's MLP)", o.span)
                else:
                    value = in_dim
                    self.r.warning("ambiguous", f"the output width of `{o.text}` is not determined by the text: "
                                   f"using {show_dim(value)}, the input width", o.span)
                self.sizes.unify(root, value)
                self.sizes.propagate()
        for p in self.params.values():
            for d in p.shape:
                if isinstance(self.sizes.find(d), Var):
                    self.r.error("implicit-shape", f"the shape of `{p.use_text}` cannot be inferred from its uses "
                                 f"(got {self.sizes.show_shape(p.shape)})", p.span,
                                 hint="declare the dim it ranges over in `Domain:` (e.g. `V : vocab`)")
                    break

    def warn_unused(self) -> None:
        for name, group in self.groups.items():
            if not group.used:
                self.r.warning("unused", f"parameter group `{name}` is declared but never used", group.entry.name_span)
                continue
            for key, (_, f) in group.declared.items():
                if key not in group.used_fields:
                    self.r.warning("unused", f"field `{f.name}` of `{name}` is declared but never used", f.span)
        for table in (self.operators, self.transitions):
            for name, d in table.items():
                if name not in self.used_ops:
                    self.r.warning("unused", f"`{name}` is defined but never used", d.name_span)
        if self.has_attention and not self.has_positions and self.first_embed is not None:
            self.r.warning("ambiguous", "no position embedding in the text: none is added, so attention sees token "
                           "order only through the causal mask", self.first_embed,
                           hint="add `+ PositionEmbed(θ_pos)` with a `context_length` dim to learn positions")
        if self.declared_outputs is not None:
            for o in self.declared_outputs:
                if o.name not in self.outputs:
                    self.r.error("output-unbound", f"output `{o.name}` is never computed", o.span)

    def tensor_type(self, shape, dtype: str, span: Span) -> ir.Call:
        items = ir.ListExpr(tuple(self.size_expr(d, span) for d in shape), span)
        return ir.Call("Tensor", (items, ir.Name(dtype, span)), (), span, span)

    def declarations(self) -> list:
        decls = []
        for name, e in self.dims.items():
            role = self.roles[name]
            if role in RUNTIME_ROLES:
                continue
            default = e.default if e.default is not None else DEFAULTS[role]
            decls.append(ir.Decl("param", name, ir.Name("int", e.role_span), ir.Num(default, e.span),
                                 span=e.span, name_span=e.name_span))
        for name, st in self.states.items():
            if st.is_input:
                decls.append(ir.Decl("input", name, self.tensor_type(st.shape, st.dtype, st.entry.span),
                                     None, span=st.entry.span, name_span=st.entry.name_span))
        inferred: dict = {}
        for p in self.params.values():
            full = ((p.count,) if p.count is not None else ()) + p.shape
            decls.append(ir.Decl("parameter", p.name, self.tensor_type(full, "float32", p.span), None,
                                 span=p.span, name_span=p.span))
            if not p.declared:
                inferred.setdefault((p.group, p.fieldname), []).append(p)
        for ps in inferred.values():  # one warning per parameter of the text (a norm's pair is one)
            p = ps[0]
            full = ((p.count,) if p.count is not None else ()) + p.shape
            per_layer = self.sizes.show_shape(p.shape)
            stacked = f", stacked over {show_dim(p.count)} layers as {self.sizes.show_shape(full)}" if p.count else ""
            if p.suffix:
                what = "norm " + " and ".join(q.suffix for q in ps)
                names = ", ".join(f"`{q.name}`" for q in ps)
                each = " each" if len(ps) > 1 else ""
                message = f"`{p.use_text}` ({what}) is inferred as {names} {per_layer}{each}{stacked}"
            else:
                message = f"`{p.use_text}` ({ROLE_TEXT[p.role]}) is inferred as `{p.name}` {per_layer}{stacked}"
            self.r.note("implicit-shape", message, p.span)
        for name, (local, span) in self.outputs.items():
            decls.append(ir.Decl("output", name, self.tensor_type(local.shape, local.dtype, span), None,
                                 span=span, name_span=span))
        return decls

    def fill(self, node):
        """Replace each `Hole` by its size, now that unification is done."""
        if isinstance(node, Hole):
            d = self.sizes.find(node.size)
            if isinstance(d, Var):
                self.r.error("implicit-shape", "a size here cannot be inferred from the text", node.span)
                return ir.Num(1, node.span)
            return dim_to_expr(d, node.span)
        if isinstance(node, tuple):
            return tuple(self.fill(n) for n in node)
        if hasattr(node, "__dataclass_fields__"):
            changes = {}
            for f in node.__dataclass_fields__:
                v = getattr(node, f)
                if isinstance(v, (tuple, Hole)) or hasattr(v, "__dataclass_fields__"):
                    nv = self.fill(v)
                    if nv is not v:
                        changes[f] = nv
            return ir.replace(node, **changes) if changes else node
        return node
