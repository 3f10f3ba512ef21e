"""`snfc graph`: the DOT text parsed back (a small parser for the subset snfc writes) and checked
against the typed IR; the layer loop is one box with its trip count; SVG through Graphviz."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import REPO, assert_golden, snfc, write_spec
from snf import ir
from snf.compiler import analyze
from snf.graph import to_dot
from snf.source import Source

SPECS = sorted((REPO / "specs").glob("*.snf")) + sorted((REPO / "tests" / "specs").glob("*.snf"))


# ------------------------------------------------------------------------------ a DOT reader

@dataclass
class Dot:
    name: str = ""
    nodes: dict = field(default_factory=dict)  # id -> attrs (with "cluster": the innermost cluster's id)
    edges: list = field(default_factory=list)  # (src, dst, attrs)
    clusters: dict = field(default_factory=dict)  # id -> attrs (with "parent")


_TOKEN = re.compile(r'\s*(?:(->)|([{}\[\];,=])|"((?:[^"\\]|\\.)*)"|([A-Za-z_][A-Za-z0-9_.]*|-?[0-9.]+))')


def _tokens(text: str) -> list:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        assert m, f"unexpected DOT text at {text[pos:pos + 40]!r}"
        arrow, punct, quoted, word = m.groups()
        if quoted is not None:
            out.append(("str", re.sub(r"\\(.)", lambda g: "\n" if g.group(1) == "n" else g.group(1), quoted)))
        else:
            out.append(("sym", arrow or punct or word))
        pos = m.end()
    return out


def parse_dot(text: str) -> Dot:
    """The subset snfc writes: one digraph; graph/node/edge defaults; clusters; `a [..];` and
    `a -> b [..];` statements; `key=value;` inside a cluster."""
    toks = _tokens(text)
    dot = Dot()
    i = 0

    def take(expect=None):
        nonlocal i
        kind, value = toks[i]
        i += 1
        assert expect is None or value == expect, (expect, value, i)
        return value

    def attrs() -> dict:
        out = {}
        if toks[i][1] != "[":
            return out
        take("[")
        while toks[i][1] != "]":
            key = take()
            take("=")
            out[key] = take()
            if toks[i][1] == ",":
                take(",")
        take("]")
        return out

    take("digraph")
    dot.name = take()
    take("{")
    stack = [None]
    while True:
        word = take()
        if word == "}":
            stack.pop()
            if not stack:
                break
            continue
        if word in ("graph", "node", "edge"):
            attrs()
        elif word == "subgraph":
            cid = take()
            take("{")
            dot.clusters[cid] = {"parent": stack[-1]}
            stack.append(cid)
            continue
        elif toks[i][1] == "=":
            take("=")
            dot.clusters[stack[-1]][word] = take()
        elif toks[i][1] == "->":
            take("->")
            dot.edges.append((word, take(), attrs()))
        else:
            assert word not in dot.nodes, f"node {word} declared twice"
            dot.nodes[word] = {**attrs(), "cluster": stack[-1]}
        take(";")
    assert i == len(toks), "text after the graph"
    return dot


# ------------------------------------------------------------------------------ against the IR

def _model(path: Path) -> ir.Model:
    result = analyze(Source.read(path))
    assert result.ok
    return result.model


def _within(dot: Dot, cluster, outer) -> bool:
    """Whether `cluster` is `outer` or nested in it."""
    while cluster is not None and cluster != outer:
        cluster = dot.clusters[cluster]["parent"]
    return cluster == outer


def _tensor_ops(stmts) -> Counter:
    return Counter(e.op for e in ir.walk_exprs(stmts) if isinstance(e, ir.Op) and isinstance(e.ty, ir.TensorT))


def _data_args(stmts) -> int:
    """Tensor arguments that are values (not parameters or buffers): one edge each."""
    n = 0
    for e in ir.walk_exprs(stmts):
        if isinstance(e, ir.Op) and isinstance(e.ty, ir.TensorT):
            for _, a in e.args:
                for part in (a.items if isinstance(a, ir.TList) else (a,)):
                    if isinstance(getattr(part, "ty", None), ir.TensorT) and not (
                            isinstance(part, ir.Ref) and part.kind in ("param", "layer_param", "buffer")):
                        n += 1
    return n


def _kind(attrs: dict) -> str:
    return attrs["class"].split()[0]


@pytest.mark.parametrize("spec", SPECS, ids=[p.stem for p in SPECS])
def test_nodes_and_edges_match_the_ir(spec):
    _check_against_ir(_model(spec))


BRANCHES = """\
param:
  D : int = 4
  use_gate : bool = True

input:
  x : Tensor([B, T, D], float32)
  past : Tensor([B, T_past, D], float32)?

parameter:
  w : Tensor([D, D], float32)

output:
  y : Tensor([B, T, D], float32)
  z : Tensor([B, T, D], float32)

let y = linear(x, weight=w)
if use_gate:
    y = y * 2.0
    y = relu(y)
else:
    y = y + 1.0
let z = y
if past exists:
    z = z + slice(past, [:, 0:T, :])
"""


def test_if_blocks_are_boxes_and_their_values_merge(tmp_path):
    model = _model(write_spec(tmp_path, BRANCHES))
    dot = _check_against_ir(model)
    assert sorted(a["label"] for a in dot.clusters.values()) == ["else", "if use_gate"]
    (merge,) = [n for n, a in dot.nodes.items() if _kind(a) == "merge"]
    assert dot.nodes[merge]["label"] == "y\nuse_gate ?"
    into = sorted(dot.nodes[s]["label"] for s, d, _ in dot.edges if d == merge)
    assert into == ["y = add", "y = relu"]
    guarded = [a for a in dot.nodes.values() if a["label"] == "z = add\nif past exists"]
    assert len(guarded) == 1 and "dashed" in guarded[0]["style"]


def test_labels_spell_conditions_as_python_reads_them(tmp_path):
    """A condition is spelled by the one printer (irdump.Printer.spell), from the registry's symbols and
    precedences: parentheses where Python needs them (and around a power under a minus)."""
    spec = BRANCHES.replace("  use_gate : bool = True", "  use_gate : bool = True\n  slow : bool = False\n"
                            "  a : int = 1\n  b : float = 2.0\n  c : float = -1.0")
    spec = spec.replace("if use_gate:", "if (a + b) * c > -(b ** 2) and not (use_gate or slow) or a - (a - 1) == 0:")
    labels = {a["label"] for a in parse_dot(to_dot(_model(write_spec(tmp_path, spec)))).clusters.values()}
    assert "if (a + b) * c > -(b ** 2) and not (use_gate or slow) or a - (a - 1) == 0" in labels, labels


def test_a_number_is_spelled_as_python_reads_it():
    """The checker's messages spell a number by the same printer, None where it holds anything else."""
    from snf.dims import Dim
    from snf.irdump import Printer

    def op(name, *args, ty=ir.FLOAT):
        return ir.Op(name, tuple(zip("ab", args)), ty)
    n, two = ir.Ref("n", "config", ir.INT), ir.Lit(2, ir.INT)
    spell = Printer(display={}).spell
    assert spell(op("pow", op("pow", n, two), op("neg", two)), number=True) == "(n ** 2) ** -2"
    assert spell(op("div", ir.Lit(0.02, ir.FLOAT), ir.Op("sqrt", (("x", op("mul", two, n)),), ir.FLOAT)),
                 number=True) == "0.02 / sqrt(2 * n)"
    dims = ir.DimVal(Dim.sym("T") + Dim.sym("P"), ir.INT)
    assert spell(op("mul", dims, op("sub", n, op("sub", n, two))), number=True) == "(P + T) * (n - (n - 2))"
    test = op("and", ir.IsPresent("past", ir.BOOL), op("gt", n, two, ty=ir.BOOL), ty=ir.BOOL)
    assert spell(test) == "past exists and n > 2"
    assert spell(ir.TCond(test, n, two, ir.INT), number=True) is None  # not a number's expression


def _check_against_ir(model: ir.Model) -> Dot:
    dot = parse_dot(to_dot(model))
    assert dot.name == model.name
    nodes = dot.nodes
    # every input and output, labelled with its name and shape
    for kind, tensors in (("input", model.inputs), ("output", model.outputs)):
        labels = sorted(a["label"].split("\n")[0] for a in nodes.values() if _kind(a) == kind)
        assert labels == sorted(t.name for t in tensors)
    # one node per tensor op of the IR, of that op
    drawn = Counter(a["class"].split()[1] for a in nodes.values() if _kind(a) == "op")
    assert drawn == _tensor_ops(model.body)
    assert sum(_kind(a) == "cond" for a in nodes.values()) == sum(
        isinstance(e, ir.TCond) and isinstance(e.ty, ir.TensorT) for e in ir.walk_exprs(model.body))
    # edges join declared nodes; one into each op per data argument
    for src, dst, _ in dot.edges:
        assert src in nodes and dst in nodes
    into_ops = sum(_kind(nodes[d]) == "op" for _, d, _ in dot.edges)
    assert into_ops == _data_args(model.body)
    # a layer loop is one cluster with its trip count, holding exactly the loop body's ops
    loops = [s for s in model.body if isinstance(s, ir.Loop)]
    boxes = {c: a for c, a in dot.clusters.items() if a["label"].startswith("for ")}
    assert len(boxes) == len(loops)
    for loop, (cid, box) in zip(loops, sorted(boxes.items())):
        count = loop.count.as_symbol() or str(loop.count)
        assert box["label"].endswith(f"(× {dict(model.display).get(loop.count, count)})"), box["label"]
        inside = Counter(a["class"].split()[1] for a in nodes.values()
                         if _kind(a) == "op" and _within(dot, a["cluster"], cid))  # `if` blocks are clusters in it
        assert inside == _tensor_ops(loop.body)
        carried = {a["label"] for a in nodes.values() if _kind(a) == "carried" and a["cluster"] == cid}
        assert carried == set(loop.carried)
        back = [(s, d) for s, d, a in dot.edges if a.get("style") == "dashed" and nodes[d]["cluster"] == cid]  # this loop's
        assert sorted(nodes[d]["label"] for _, d in back) == sorted(loop.carried)
    return dot


def test_nanogpt_edges_carry_shapes():
    dot = parse_dot(to_dot(_model(REPO / "specs" / "nanogpt.snf")))
    by_label = {a["label"]: n for n, a in dot.nodes.items()}
    edges = {(s, d): a.get("label") for s, d, a in dot.edges}
    idx, gather = by_label["idx\n[B, T] int64"], by_label["tok_emb = gather\ntoken_embedding"]
    assert edges[(idx, gather)] == "[B, T] int64"
    logits = by_label["logits\n[B, T, vocab_size]"]
    assert edges[(by_label["logits = linear\ntoken_embedding"], logits)] == "[B, T, vocab_size]"
    q = by_label["q = linear\nattn_q_weight[l], attn_q_bias[l]"]
    assert edges[(by_label["x_norm = layer_norm\nln1_weight[l], ln1_bias[l]"], q)] == "[B, T, D]"
    (box,) = [a for a in dot.clusters.values() if a["label"].startswith("for ")]
    assert box["label"] == "for l in 0..n_layer - 1  (× n_layer)"
    # the cache: a conditional value, written per layer into the output
    cond = by_label["k_full = past_keys exists ?"]
    write = by_label["new_keys[l] = k_full"]
    assert edges[(cond, write)] == "[B, T_total, H, head_dim]"
    assert dot.nodes[by_label["x = dropout\nif dropout > 0"]]["style"] == "rounded,dashed"


def test_golden_dot_and_determinism():
    text = to_dot(_model(REPO / "specs" / "nanogpt.snf"))
    assert text == to_dot(_model(REPO / "specs" / "nanogpt.snf"))
    assert_golden("graph_nanogpt.dot", text)


# ------------------------------------------------------------------------------ the command

def test_dot_to_stdout_and_to_a_file(tmp_path):
    rc, out, _ = snfc("graph", "specs/tiny_transformer.snf")
    assert rc == 0 and out.startswith('digraph "tiny_transformer" {')
    rc, _, err = snfc("graph", "specs/tiny_transformer.snf", "-o", str(tmp_path / "t.dot"))
    assert rc == 0 and (tmp_path / "t.dot").read_text() == out


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed (CI installs it)")
def test_svg_through_graphviz(tmp_path):
    rc, _, err = snfc("graph", "specs/nanogpt.snf", "-o", str(tmp_path / "n.svg"))
    assert rc == 0, err
    svg = (tmp_path / "n.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert _svg_nodes(svg) == _dot_nodes("specs/nanogpt.snf")


def _svg_nodes(svg: str) -> dict:
    """Graphviz writes each node as <g class="node ..."><title>ID</title> ... <text>line</text>...</g>."""
    import html
    out = {}
    for ident, body in re.findall(r'<g id="node\d+" class="node[^"]*">\s*<title>([^<]+)</title>(.*?)</g>', svg, re.S):
        out[ident] = "\n".join(html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", body))
    return out


def _dot_nodes(spec: str) -> dict:
    return {n: a["label"] for n, a in parse_dot(to_dot(_model(REPO / spec))).nodes.items()}


def test_svg_without_graphviz_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    rc, _, err = snfc("graph", "specs/nanogpt.snf", "-o", str(tmp_path / "n.svg"))
    assert rc == 1 and "needs Graphviz's `dot`, which is not installed" in err and "apt-get install graphviz" in err
    assert not (tmp_path / "n.svg").exists()


def test_bad_suffix_and_bad_spec_exit_1(tmp_path):
    rc, _, err = snfc("graph", "specs/nanogpt.snf", "-o", str(tmp_path / "n.jpeg"))
    assert rc == 1 and "write .dot or .gv" in err
    bad = write_spec(tmp_path, "param:\n  D : int = 4\n\nlet y = x\n")
    assert snfc("graph", str(bad))[0] == 1


def test_readme_picture_is_made_from_the_current_graph():
    """docs/images/nanogpt.svg is `snfc graph specs/nanogpt.snf -o docs/images/nanogpt.svg`: the
    same nodes as today's DOT (Graphviz's version may change the drawing, not the nodes)."""
    svg = (REPO / "docs" / "images" / "nanogpt.svg").read_text()
    assert _svg_nodes(svg) == _dot_nodes("specs/nanogpt.snf")
    readme = (REPO / "README.md").read_text()
    assert "docs/images/nanogpt.svg" in readme and "snfc graph specs/nanogpt.snf -o docs/images/nanogpt.svg" in readme
