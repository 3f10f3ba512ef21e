"""snf/dims.py: canonical symbolic dims, floor division, exact-division equality, limits."""

from __future__ import annotations

import pytest

from snf.dims import MAX_INT, MAX_TERMS, Dim, DimError, Divides, FloorDiv, equal

D, H, B, T = (Dim.sym(n) for n in ("D", "H", "B", "T"))


def test_canonical_equality_of_polynomials():
    assert (D + H) * B == B * H + D * B
    assert hash((D + H) * B) == hash(B * H + D * B)
    assert 4 * D == D + D + D + D
    assert D - D == Dim.const(0)
    assert (D + 1) * (D - 1) == D * D - 1
    assert D + H != D * H
    assert 2 * D != D


def test_canonical_form_prints_the_same_whichever_way_it_was_built():
    assert str(H * D + 3) == str(3 + D * H)
    assert str(4 * D) == "4*D"
    assert str(D - H) != str(H - D)


def test_constants_and_symbols():
    assert Dim.const(6).value == 6
    assert D.value is None
    assert D.as_symbol() == "D"
    assert (2 * D).as_symbol() is None
    assert (D * H).symbols() == {"D", "H"}


def test_floor_division_simplifies():
    assert Dim.const(7) // 2 == Dim.const(3)
    assert D // 1 == D
    assert D // D == Dim.const(1)
    assert (4 * D) // 2 == 2 * D
    assert (4 * D + 8) // 4 == D + 2


def test_floor_division_that_cannot_simplify_stays_an_atom():
    q = D // H
    assert q.as_symbol() is None
    assert q.atoms() == {FloorDiv(D, H)}
    assert (3 * D) // 2 != D + D // 2  # not simplified by a wrong rule
    assert (3 * D) // 2 == (3 * D) // 2


def test_equal_gives_the_divisibility_it_needs():
    ok, conds = equal(H * (D // H), D)
    assert ok
    assert conds == (Divides(D, H),)
    assert str(conds[0]) == "D % H == 0"


def test_equal_without_constraints_and_unequal():
    assert equal(D * H, H * D) == (True, ())
    assert equal(D, H) == (False, ())
    assert equal(H * (D // H), D + 1) == (False, ())


def test_reshape_element_counts_agree_only_with_divisibility():
    before = B * T * D
    after = B * T * H * (D // H)
    ok, conds = equal(before, after)
    assert ok and conds == (Divides(D, H),)


def test_evaluate():
    assert (4 * D + H).evaluate({"D": 3, "H": 2}) == 14
    assert (D // H).evaluate({"D": 7, "H": 2}) == 3
    with pytest.raises(DimError):
        (D // H).evaluate({"D": 7, "H": 0})


@pytest.mark.parametrize("build", [
    lambda: Dim.const(MAX_INT + 1),
    lambda: Dim.const(MAX_INT) * 4,
    lambda: Dim.const(2**40) * Dim.const(2**40),
    lambda: D // 0,
    lambda: D // Dim.const(0),
    lambda: sum((Dim.sym(f"x{i}") for i in range(MAX_TERMS + 1)), Dim()),
])
def test_dim_error_on_out_of_range(build):
    with pytest.raises(DimError):
        build()


def test_dim_is_immutable():
    with pytest.raises(AttributeError):
        D.terms = ()
