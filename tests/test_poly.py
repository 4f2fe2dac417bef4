"""The exact polynomial type and its grid interpolation (mhlo_cost.walk.poly / polyfit): closed forms."""
from fractions import Fraction

import pytest

from mhlo_cost.walk.poly import Poly
from mhlo_cost.walk.polyfit import degree_along, fit_grid

b, s = Poly.symbol("b"), Poly.symbol("s")


def test_arithmetic_and_text():
    p = 2 * b * s * s + 3 * b - 1
    assert str(p) == "2*b*s**2 + 3*b - 1"
    assert p.at({"b": 4, "s": 5}) == 2 * 4 * 25 + 12 - 1
    assert p.degree("s") == 2 and p.degree("b") == 1 and p.degree() == 3
    assert (p - p) == 0 and (b + s) * (b - s) == b ** 2 - s ** 2
    assert eval(str(p), {"b": 7, "s": 3}) == p.at({"b": 7, "s": 3})


def test_rational_coefficients_give_integers_only():
    tri = Poly({(("s", 2),): Fraction(1, 2), (("s", 1),): Fraction(1, 2)})  # s*(s+1)/2
    assert [tri.at({"s": n}) for n in range(1, 6)] == [1, 3, 6, 10, 15]
    with pytest.raises(ValueError, match="not an integer"):
        Poly({(("s", 1),): Fraction(1, 2)}).at({"s": 3})
    with pytest.raises(ValueError, match="no value"):
        tri.at({"b": 1})


def test_fit_recovers_attention_counts_exactly():
    # an attention block's counts at batch b, sequence s, hidden 64: projections 8*b*s*64*64, scores 4*b*s*s*64,
    # softmax exp b*s*s, causal pairs b*s*(s+1)/2 (a rational coefficient)
    def counts(p):
        bb, ss = p["b"], p["s"]
        return [8 * bb * ss * 64 * 64 + 4 * bb * ss * ss * 64, bb * ss * ss, bb * ss * (ss + 1) // 2, 7]

    fit = fit_grid(counts, {"b": [1, 2], "s": [16, 32, 48]})
    assert fit.at({"b": 8, "s": 4096}) == counts({"b": 8, "s": 4096})
    assert str(fit.poly(1)) == "b*s**2"
    assert fit.poly(2).at({"b": 3, "s": 101}) == 3 * 101 * 102 // 2
    assert fit.poly(3) == 7
    assert fit.mismatches(counts, [{"b": 5, "s": 1000}, {"b": 1, "s": 1}]) == []


def test_a_low_degree_bound_is_caught_on_check_points():
    cube = lambda p: [p["s"] ** 3]
    fit = fit_grid(cube, {"s": [1, 2, 3]})  # degree 2 assumed: wrong
    assert fit.mismatches(cube, [{"s": 10}])


def test_op_graph_changes_are_refused():
    with pytest.raises(ValueError, match="op graph"):
        fit_grid(lambda p: [1] * p["s"], {"s": [1, 2]})


def test_degree_along():
    assert degree_along([5, 5, 5]) == 0
    assert degree_along([1, 4, 9, 16]) == 2
    assert degree_along([1, 8, 27]) is None   # three samples cannot confirm a cube
    assert degree_along([0, 1, 8, 27, 64]) == 3


def test_a_monomial_is_one_key_whatever_the_order_of_its_factors():
    """A fit over symbols not in alphabetical order (B, T, S) gives terms that add to and equal the products of
    symbols (one key per monomial, as the product builds it), and print once."""
    b, t, s = Poly.symbol("B"), Poly.symbol("T"), Poly.symbol("S")
    assert Poly({(("T", 1), ("B", 1)): 3}) == 3 * b * t
    assert Poly({(("S", 1), ("S", 1)): 1}) == s ** 2
    fitted = fit_grid(lambda p: [p["B"] * p["T"] ** 2 * p["S"]], {"B": [1, 2], "T": [1, 2, 3], "S": [1, 2]}).poly(0)
    assert fitted == b * t ** 2 * s and str(fitted + b * s * t ** 2) == "2*B*S*T**2"
