"""Every tool works on every spec `snfc check` approves (issue 18): `snfc stats` (text and JSON),
`snfc graph`, `snfc ir` (and `--lowered`) and `snfc compile` exit 0, the module runs, the NumPy
interpreter (`snf.interpret`) runs the same inputs to the same shapes (the fast tier), and
`torch.export.export` exports the module (slow: test_every_model_exports; the specs' in
tests/test_export.py).

The specs: every one in specs/ (at a small config), hand-written ones with constructs the others
lack (branches on the layer variable, a computed int sizing a parameter, a size that grows with
the layer), and a fixed-seed sample of the random specs tests/property/specgen.py generates. A
failure here is an snfc bug: fix the rule, and keep the spec that found it.
"""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest
import torch

from conftest import REPO, fresh_module, snfc, write_spec
from specs_table import ROWS
from test_stats import COMPUTED_INT, LAYER_BRANCHES
from snf.compiler import analyze
from snf.interop import spec_state
from snf.interpret import interpret
from snf.source import Source
import runner
import specgen

LAYER_SIZES = """\
param:
  D : int = 4
  n_layer : int = 3
  P : int = 8
input:
  x : Tensor([B, D], float32)
parameter:
  pos : Tensor([P, D], float32)
  W : Tensor([n_layer, D, D], float32)
output:
  y : Tensor([B, D], float32)
assert n_layer <= P
let y = x
for l in 0..n_layer-1:
    let seen = pos[0:l + 1, :]
    y = linear(y, weight=W[l]) + seen[l, :]
"""

EXTRA = {"layer_branches": LAYER_BRANCHES, "computed_int": COMPUTED_INT, "layer_sizes": LAYER_SIZES}


def _random_specs(n: int = 40) -> dict:
    out = {}
    for seed in itertools.count():
        spec = specgen.build(specgen.RandomChooser(seed))
        if analyze(Source.from_bytes("r.snf", spec.text.encode())).ok:
            out[f"random{seed}"] = spec
        if len(out) == n:
            return out


RANDOM = _random_specs()
CASES = [p.stem for p in sorted((REPO / "specs").glob("*.snf"))] + list(EXTRA) + list(RANDOM)


def _case(name: str):
    """(text, config, hints) of a case."""
    if name in RANDOM:
        return RANDOM[name].text, {}, RANDOM[name]
    if name in EXTRA:
        return EXTRA[name], {}, None
    return (REPO / "specs" / f"{name}.snf").read_text(encoding="utf-8"), ROWS[name].small, None


def _stats(path, config: dict, fields: set) -> None:
    """`snfc stats` in both formats at `config`, with a value for each run-time dim it asks for."""
    sets = [f"{k}={v}" for k, v in config.items() if k in fields]
    for _ in range(8):
        args = [a for s in sets for a in ("--set", s)]
        rc, out, err = snfc("stats", str(path), *args)
        if rc == 1 and "give its value with --set " in err:
            sets.append(err.split("--set ")[-1].split("=")[0].strip() + "=3")
            continue
        assert rc == 0, err
        rc, out, err = snfc("stats", str(path), "--format", "json", *args)
        assert rc == 0, err
        return
    raise AssertionError(f"stats kept asking for dims: {sets}")


def _model(name: str, tmp_path):
    """The case compiled by `snfc compile` and imported: (its checked model, an instance at the small
    config, the case's module name, a runner to make inputs with)."""
    text, small, hints = _case(name)
    path = write_spec(tmp_path, text, f"{name}.snf")
    result = analyze(Source.read(path))
    assert result.ok, [d.message for d in result.diagnostics if d.severity == "error"]
    m = result.model
    config = {c.name: small[c.name] for c in m.config if c.name in small}
    out = tmp_path / f"every_{name}.py"
    rc, _, err = snfc("compile", str(path), "-o", str(out), "-q")
    assert rc == 0, err
    module = fresh_module(out, f"every_{name}")
    torch.manual_seed(0)
    model = module.Model(**config).eval()
    run = runner.Runner(text, hints, np.random.default_rng(0))
    run.m, run.values = m, {c.name: getattr(model.config, c.name) for c in m.config}
    return m, model, path, config, run


def _inputs(m, run):
    """(every optional input given?, the inputs) for the optional inputs all left out and all given,
    where the spec accepts the sizes drawn."""
    for present_all in (False, True):
        present = {i.name: present_all for i in m.inputs if i.optional}
        env = run.env_for(present, run.sample_dims())
        if runner.broken_checks(m, env, given={n for n, p in present.items() if p}) or \
                run.negative_sizes(env, present):
            continue
        inputs, _ = run.make_inputs(env, present)
        yield present_all, inputs


@pytest.mark.parametrize("name", CASES)
def test_every_tool_runs(name, tmp_path):
    m, model, path, config, run = _model(name, tmp_path)
    try:
        for args in (["check", "-v"], ["ir"], ["ir", "--lowered"], ["graph"]):
            rc, _, err = snfc(*args, str(path))
            assert rc == 0, (args, err)
        _stats(path, config, {c.name for c in m.config})
        for _, inputs in _inputs(m, run):
            kwargs = {k: v for k, v in inputs.items() if v is not None}
            with torch.no_grad():
                got = model(**kwargs)
            params = {k: v.detach().double().numpy() for k, v in spec_state(model).items()}
            wide = {k: None if v is None else v.double().numpy() if v.is_floating_point() else v.numpy()
                    for k, v in inputs.items()}
            want = interpret(m, params, wide, run.values)
            got = {m.outputs[0].name: got} if len(m.outputs) == 1 else got._asdict()
            for o in m.outputs:
                g, w = got[o.name], want[o.name]
                assert (g is None) == (w is None), o.name
                if g is not None:
                    assert tuple(g.shape) == np.shape(w), o.name
    finally:
        sys.modules.pop(f"every_{name}", None)


@pytest.mark.slow  # about 1 s an export on a 2-core CPU
@pytest.mark.parametrize("name", list(EXTRA) + list(RANDOM))
def test_every_model_exports(name, tmp_path):
    """torch.export.export takes every case's module but the specs', with every optional input given
    (or with none, where it has none); tests/test_export.py exports the specs' (each with the inputs its
    row names, sizes dynamic) and compares the programs with eager."""
    m, model, _, _, run = _model(name, tmp_path)
    try:
        for present_all, inputs in _inputs(m, run):
            if present_all or not any(i.optional for i in m.inputs):
                exported = torch.export.export(model, (), {k: v for k, v in inputs.items() if v is not None})
                assert exported.graph_module is not None
    finally:
        sys.modules.pop(f"every_{name}", None)
