"""`snfc graph`: the typed IR's dataflow as a Graphviz DOT graph.

Nodes are the inputs, every tensor-valued op, the conditional values (`a if past exists else b`),
indexed writes (`new_keys[l] = k`) and the outputs; edges carry the symbolic shape of the value
that flows. Parameters, config values and literals are named in their op's label, not drawn.
A layer loop is one box (a DOT cluster) labelled with its trip count, its carried values are
nodes at its top, and a dashed edge feeds each one the value the next layer starts from. An op
guarded by a config switch (`x = dropout(x) if dropout > 0`) is drawn dashed: when the switch
is off it passes its input through. The output is deterministic: same spec, same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import ir
from .irdump import Printer
from .ir import TensorT


@dataclass
class Node:
    id: str
    kind: str  # input | op | cond | merge | write | carried | output
    label: str
    line: int = 0
    op: str = ""  # the registry op, for kind op
    dashed: bool = False
    shape: str = "box"


@dataclass
class Edge:
    src: str
    dst: str
    label: str
    back: bool = False  # a loop's value for the next layer


@dataclass
class Cluster:
    id: str
    label: str
    nodes: list = field(default_factory=list)
    clusters: list = field(default_factory=list)
    dashed: bool = False


@dataclass
class Graph:
    name: str
    nodes: list
    edges: list
    root: Cluster  # nodes outside any loop or branch, and the clusters

    def to_dot(self) -> str:
        return _dot(self)


class _Builder:
    def __init__(self, model: ir.Model):
        self.m = model
        self.p = Printer(model)
        self.nodes: list[Node] = []
        self.edges: list[Edge] = []
        self.root = Cluster("root", "")
        self.scope = [self.root]
        self.count = self.clusters = 0

    def text(self, e) -> str:
        """An expression as the spec writes it: `dropout > 0`, `ln1_weight[l]`, `past_keys exists`."""
        return self.p.spell(e)

    # ---------------------------------------------------------------- nodes and edges
    def node(self, kind: str, label: str, line: int = 0, **kw) -> Node:
        self.count += 1
        n = Node(f"n{self.count}", kind, label, line, **kw)
        self.nodes.append(n)
        self.scope[-1].nodes.append(n)
        return n

    def edge(self, src: Node | None, dst: Node, ty, back: bool = False) -> None:
        if src is not None:
            self.edges.append(Edge(src.id, dst.id, self.shape(ty), back))

    def shape(self, ty) -> str:
        if not isinstance(ty, TensorT):
            return ""
        dims = "[" + ", ".join(self.p.dim(d) for d in ty.shape) + "]"
        return dims if ty.dtype == "float32" else f"{dims} {ty.dtype}"

    def cluster(self, label: str, dashed: bool = False) -> Cluster:
        self.clusters += 1
        c = Cluster(f"cluster_{self.clusters}", label, dashed=dashed)
        self.scope[-1].clusters.append(c)
        return c

    # ---------------------------------------------------------------- the model
    def build(self) -> Graph:
        env: dict[str, tuple[Node, object]] = {}
        for i in self.m.inputs:
            n = self.node("input", f"{i.name}\n{self.shape(i.ty)}" + ("\n(optional)" if i.optional else ""),
                          i.span.line, dashed=i.optional, shape="ellipse")
            env[i.name] = (n, i.ty)
        self.block(self.m.body, env)
        for o in self.m.outputs:
            n = self.node("output", f"{o.name}\n{self.shape(o.ty)}", o.span.line, shape="ellipse")
            src = env.get(o.name)
            if src is not None:
                self.edge(src[0], n, o.ty)
        return Graph(self.m.name, self.nodes, self.edges, self.root)

    def block(self, stmts, env: dict) -> None:
        for s in stmts:
            if isinstance(s, ir.Bind):
                self.bind(s.name, s.value, env, s.span.line)
            elif isinstance(s, ir.SetItem):
                index = ", ".join(self.text(i) for i in s.index)
                n = self.node("write", f"{s.name}[{index}] = {self.text(s.value)}", s.span.line)
                prior = env.get(s.name)
                if prior is not None:
                    self.edge(prior[0], n, prior[1])
                src = self.expr(s.value, env)
                if src is not None:
                    self.edge(src, n, s.value.ty)
                env[s.name] = (n, prior[1] if prior else s.value.ty)
            elif isinstance(s, ir.TIf):
                self.branch(s, env)
            elif isinstance(s, ir.Loop):
                self.loop(s, env)
            else:
                raise TypeError(f"graphs show the checked IR, before the passes; got {type(s).__name__}")

    def bind(self, name: str, value, env: dict, line: int, guard: str = "") -> None:
        made = len(self.nodes)
        src = self.expr(value, env)
        if src is None:
            env.pop(name, None)
            return
        if len(self.nodes) > made and src is self.nodes[-1] and src.kind in ("op", "cond"):
            src.label = f"{name} = {src.label}"  # the node this statement made: name it
            if guard:
                src.label += f"\nif {guard}"
                src.dashed = True
        env[name] = (src, value.ty)

    def branch(self, s: ir.TIf, env: dict) -> None:
        test = self.text(s.test)
        body = s.body[0] if len(s.body) == 1 else None
        if not s.orelse and isinstance(body, ir.Bind) and not body.let and body.name in env:
            # `x = f(x) if switch`: one dashed op, which passes x through when the switch is off
            self.bind(body.name, body.value, env, body.span.line, guard=test)
            return
        envs = []
        for label, stmts in ((f"if {test}", s.body), ("else", s.orelse)):
            branch_env = dict(env)
            if stmts:
                self.scope.append(self.cluster(label, dashed=True))
                self.block(stmts, branch_env)
                self.scope.pop()
            envs.append(branch_env)
        for name in sorted(set(envs[0]) | set(envs[1])):
            a, b = envs[0].get(name), envs[1].get(name)
            if a is b or a is not None and b is not None and a[0] is b[0]:
                if a is not None:
                    env[name] = a
                continue
            n = self.node("merge", f"{name}\n{test} ?", s.span.line, shape="diamond")
            for src in (a, b):
                if src is not None:
                    self.edge(src[0], n, src[1])
            env[name] = (n, (a or b)[1])

    def loop(self, s: ir.Loop, env: dict) -> None:
        count = self.p.dim(s.count)
        c = self.cluster(f"for {s.var} in 0..{self.p.dim(s.count - 1)}  (× {count})")
        self.scope.append(c)
        outer_var, self.p.var = self.p.var, s.var
        inner = dict(env)
        carried = {}
        for name in s.carried:
            if name in env:
                n = self.node("carried", name, s.span.line, shape="ellipse")
                self.edge(env[name][0], n, env[name][1])
                carried[name] = n
                inner[name] = (n, env[name][1])
        self.block(s.body, inner)
        self.scope.pop()
        self.p.var = outer_var
        for name, n in carried.items():
            self.edge(inner[name][0], n, inner[name][1], back=True)
        env.update({k: v for k, v in inner.items() if k in env or k in s.carried})

    # ---------------------------------------------------------------- expressions
    def expr(self, e, env: dict) -> Node | None:
        """The node that produces `e`'s tensor value (None for parameters, numbers and dims)."""
        if isinstance(e, ir.Ref):
            if e.kind in ("local", "input", "layer_input"):
                got = env.get(e.name)
                return got[0] if got else None
            return None
        if isinstance(e, ir.TCond) and isinstance(e.ty, TensorT):
            body, orelse = self.expr(e.body, env), self.expr(e.orelse, env)
            n = self.node("cond", f"{self.text(e.test)} ?", e.span.line, shape="diamond")
            self.edge(body, n, e.body.ty)
            self.edge(orelse, n, e.orelse.ty)
            return n
        if not isinstance(e, ir.Op) or not isinstance(e.ty, TensorT):
            return None
        sources = []
        named = []
        for name, a in e.args:
            for part in (a.items if isinstance(a, ir.TList) else (a,)):
                src = self.expr(part, env)
                if src is not None:
                    sources.append((src, part.ty))
                elif isinstance(part, ir.Ref) and part.kind in ("param", "layer_param", "buffer"):
                    named.append(self.text(part))
        n = self.node("op", e.op + (f"\n{', '.join(named)}" if named else ""), e.span.line, op=e.op)
        for src, ty in sources:
            self.edge(src, n, ty)
        return n


def build(model: ir.Model) -> Graph:
    return _Builder(model).build()


def to_dot(model: ir.Model) -> str:
    return build(model).to_dot()


# -------------------------------------------------------------------------------- DOT text

def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _node_line(n: Node) -> str:
    attrs = [f"label={_q(n.label)}", f"class={_q(n.kind + (' ' + n.op if n.op else ''))}"]
    if n.line:
        attrs.append(f"tooltip={_q(f'line {n.line}')}")
    if n.shape != "box":
        attrs.append(f"shape={n.shape}")
    style = {"input": "filled", "output": "filled", "carried": "filled"}.get(n.kind, "rounded")
    if n.dashed:
        style += ",dashed"
    if style != "rounded":
        attrs.append(f"style={_q(style)}")
    if n.kind in ("input", "output", "carried"):
        attrs.append(f"fillcolor={_q({'input': '#e8f0fe', 'output': '#e6f4ea', 'carried': '#fef7e0'}[n.kind])}")
    return f"{n.id} [{', '.join(attrs)}];"


def _cluster_lines(c: Cluster, pad: str) -> list[str]:
    out = [f"{pad}subgraph {c.id} {{", f"{pad}  label={_q(c.label)};",
           f"{pad}  style={_q('rounded,dashed' if c.dashed else 'rounded')};"]
    out += [f"{pad}  {_node_line(n)}" for n in c.nodes]
    for sub in c.clusters:
        out += _cluster_lines(sub, pad + "  ")
    return out + [f"{pad}}}"]


def _dot(g: Graph) -> str:
    lines = [f"digraph {_q(g.name)} {{",
             '  graph [rankdir=TB, fontname="Helvetica", fontsize=12, labeljust=l, nodesep=0.3, ranksep=0.35];',
             '  node [shape=box, style="rounded", fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=9, color="#5f6368"];']
    lines += [f"  {_node_line(n)}" for n in g.root.nodes]
    for c in g.root.clusters:
        lines += _cluster_lines(c, "  ")
    for e in g.edges:
        attrs = [f"label={_q(e.label)}"] if e.label else []
        if e.back:
            attrs += ['style="dashed"', "constraint=false"]
        lines.append(f"  {e.src} -> {e.dst}" + (f" [{', '.join(attrs)}]" if attrs else "") + ";")
    return "\n".join(lines) + "\n}\n"
