"""torch.export on every generated model, at its row's config and with the optional inputs its row
names (tests/specs_table.py): dynamic batch and sequence dims, and the exported program matches
eager at sizes other than the traced ones.

Export runs with SNF_COMPILE=1, the default: the layer blocks' torch.compile wrapper (`_hot_path`)
must not stand in its way. The eager reference runs with SNF_COMPILE=0.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.utils._pytree as pytree
from torch.export import Dim

import runner
from snf.interpret import Interpreter
from specs_table import HINTS, ROWS, SPECS, checked

pytestmark = pytest.mark.slow  # about 1-3 s per export on a 2-core CPU


TRACED = dict(B=2, T=5, P=3)  # P: every run-time size but the batch's and the tokens' (T_past, an encoder's S)
CHECKED = [dict(B=1, T=1, P=1), dict(B=3, T=2, P=6), dict(B=4, T=7, P=1)]
SEQ = 16  # the largest T and P exported: T + T_past within the small configs' contexts (32)


@dataclass(frozen=True)
class Case:
    """A spec's model at its row's config (tests/specs_table.py), exported with its required inputs
    and the optional ones `given` (a row's `exports`); their shapes are the checked spec's."""
    module: str
    given: tuple

    @functools.cached_property
    def checked(self):
        return checked(self.module)

    def inputs(self):
        return [i for i in self.checked.inputs if not i.optional or i.name in self.given]


def _size(dim: str) -> str:
    """B, T or P: which of TRACED's (and CHECKED's) sizes the run-time size `dim` takes."""
    return dim if dim in ("B", "T") else "P"


CASES = {"+".join((name,) + given): Case(name, given) for name in SPECS for given in ROWS[name].exports}


def make_inputs(case: Case, model, sizes: dict, seed: int) -> dict:
    """Token ids below their tables' rows, masks with key 0 kept, floats; at `sizes` (B, T, P)."""
    run = runner.Runner("", HINTS, np.random.default_rng(seed))
    run.m = case.checked
    env = {**Interpreter(case.checked, dataclasses.asdict(model.config)).ints,
           **{d: sizes[_size(d)] for d in case.checked.run_time_dims}}
    native, _ = run.make_inputs(env, {i.name: i in case.inputs() for i in case.checked.inputs})
    return {k: v for k, v in native.items() if v is not None}


def dynamic_shapes(case: Case) -> dict:
    dims = {"B": Dim("batch", min=1, max=8), "T": Dim("seq", min=1, max=SEQ), "P": Dim("past", min=1, max=SEQ)}
    return {i.name: {axis: dims[_size(d.as_symbol())] for axis, d in enumerate(i.ty.shape)
                     if d.as_symbol() in case.checked.run_time_dims} for i in case.inputs()}


def leaves(out) -> list:
    return [out] if isinstance(out, torch.Tensor) else [x for x in out if x is not None]


def build(case: Case) -> torch.nn.Module:
    mod = importlib.import_module(f"generated.{case.module}")
    torch.manual_seed(0)
    return mod.Model(mod.Config(**ROWS[case.module].small)).eval()


def export(model, case: Case, monkeypatch, strict: bool = False):
    monkeypatch.setenv("SNF_COMPILE", "1")  # the default: export goes past _hot_path
    program = torch.export.export(model, (), make_inputs(case, model, TRACED, 0), dynamic_shapes=dynamic_shapes(case),
                                  strict=strict)
    monkeypatch.setenv("SNF_COMPILE", "0")
    return program


def assert_matches_eager(program, model, case: Case) -> None:
    for seed, sizes in enumerate(CHECKED, start=1):
        inputs = make_inputs(case, model, sizes, seed)
        with torch.no_grad():
            got, want = program.module()(**inputs), model(**inputs)
        assert type(got) is type(want)
        assert len(leaves(got)) == len(leaves(want))
        for a, b in zip(leaves(got), leaves(want)):
            assert a.shape == b.shape and a.dtype == b.dtype
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_export_matches_eager(name, monkeypatch):
    case = CASES[name]
    model = build(case)
    program = export(model, case, monkeypatch)
    ranges = sorted((r.lower, r.upper) for r in program.range_constraints.values())
    assert (1, 8) in ranges and (1, SEQ) in ranges  # batch and sequence stayed dynamic, whole range
    assert_matches_eager(program, model, case)


def test_strict_export_and_a_saved_program(tmp_path, monkeypatch):
    case = CASES["nanogpt"]
    model = build(case)
    program = export(model, case, monkeypatch, strict=True)
    # saving needs a name for the Output namedtuple; torch has only a private call for that
    output = importlib.import_module("generated.nanogpt").Output
    if output not in pytree.SUPPORTED_SERIALIZED_TYPES:
        pytree._register_namedtuple(output, serialized_type_name="generated.nanogpt.Output")
    torch.export.save(program, tmp_path / "nanogpt.pt2")
    assert_matches_eager(torch.export.load(tmp_path / "nanogpt.pt2"), model, case)
