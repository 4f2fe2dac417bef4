"""Grids without re-lowering (issue 41, part 3): op tables fitted from a few lowerings equal the lowering's at
points the fit did not use (the independent reference is the real lowering at that point)."""
from __future__ import annotations

import pytest

from mhlo_cost.studies.gridfit import FitFailed, GridValues, fit_tables, flesh, plan_nodes, skeleton


def test_grid_values_closed_form():
    """Values of known polynomials at the nodes give the polynomials' values anywhere, exactly."""
    def f(b, c):
        return [3 * b * c + 7 * b - 2, 2**40 * b * c, 5, (b * c * (c + 1)) // 2]

    nodes = {"b": [2, 3], "c": [4, 6, 9]}
    values = [f(b, c) for b in nodes["b"] for c in nodes["c"]]
    grid = GridValues(nodes, values)
    for b, c in [(1, 1), (8, 2048), (128, 32768), (5, 7)]:
        assert grid.at({"b": b, "c": c}) == f(b, c)
    from mhlo_cost.walk.poly import Poly

    b, c = Poly.symbol("b"), Poly.symbol("c")
    assert grid.polys()[:3] == [3 * b * c + 7 * b - 2, 2**40 * b * c, Poly.const(5)]


def test_grid_values_wrong_degree_is_not_an_integer():
    grid = GridValues({"n": [2, 4]}, [[4], [16]])  # n*n seen as a line through two points
    assert grid.at({"n": 3}) == [10]  # the line, not 9: only a check point can tell
    with pytest.raises(ValueError, match="not an integer"):
        GridValues({"n": [2, 5]}, [[4], [26]]).at({"n": 3})  # slope 22/3


def test_plan_nodes():
    nodes, checks = plan_nodes({"batch": [8, 32, 128], "context": [2048, 8192, 32768]})
    assert nodes == {"batch": [8, 32], "context": [2048, 8192]} and checks == [{"batch": 128, "context": 32768}]
    assert plan_nodes({"batch": [2, 4], "context": [64, 128]}) is None  # every point a node: nothing to check
    assert plan_nodes({"batch": [2, 4, 8]}) is None  # 3 lowerings for 3 points: it does not pay


def _jax_analysis(fn, *shapes):
    import jax
    import jax.numpy as jnp

    from mhlo_cost.studies.study import Study

    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
    text = jax.jit(fn).lower(*args).as_text()
    return Study(text, dataflow=True, fuse="elementwise", hardware="h100").analysis


def test_skeleton_round_trip():
    import jax.numpy as jnp

    a = _jax_analysis(lambda x, w: jnp.tanh(x @ w), (4, 8), (8, 16))
    template, values = skeleton(a)
    b = flesh(template, values)
    assert [r.cost for r in b.rows] == [r.cost for r in a.rows]
    assert b.memory.peak_bytes == a.memory.peak_bytes
    assert skeleton(b)[1] == values


def _matmul_at(point):
    import jax.numpy as jnp

    n, k = point["n"], point.get("k", 32)
    return _jax_analysis(lambda x, w: jnp.tanh(x @ w).sum(axis=0), (n, k), (k, 24)), (n * 3,)


def test_fitted_table_equals_lowering_off_the_nodes():
    table = fit_tables(_matmul_at, {"n": [4, 8], "k": [16, 32]}, [{"n": 12, "k": 48}])
    for point in ({"n": 20, "k": 16}, {"n": 6, "k": 40}):
        fitted, facts = table.at(point)
        lowered, real_facts = _matmul_at(point)
        assert facts == real_facts
        assert [(r.op, r.cost) for r in fitted.rows] == [(r.op, r.cost) for r in lowered.rows]
        assert fitted.summary == lowered.summary  # counts and the memory figures (the liveness at the point)
        assert [str(r.result) for r in fitted.rows] == [str(r.result) for r in lowered.rows]


def test_op_graph_that_changes_falls_back():
    import jax.numpy as jnp

    def at(point):
        n = point["n"]
        fn = (lambda x: jnp.exp(x) * 2) if n > 8 else (lambda x: x * 2)  # another op past 8
        return _jax_analysis(fn, (n, 4)), ()

    with pytest.raises(FitFailed, match="op graph changes with the shape"):
        fit_tables(at, {"n": [4, 6]}, [{"n": 16}])


def test_degree_too_low_is_caught_at_the_check_point():
    import jax.numpy as jnp

    def at(point):  # the outer product's bytes are quadratic in n
        n = point["n"]
        return _jax_analysis(lambda x: x[:, None] * x[None, :], (n,)), ()

    with pytest.raises(FitFailed, match="misses the lowering"):
        fit_tables(at, {"n": [4, 6]}, [{"n": 10}])
    fit_tables(at, {"n": [4, 6, 8]}, [{"n": 10}])  # degree 2: passes


def test_serve_grid_fitted_equals_lowered(tmp_path):
    """A serve sweep of a small GPT: the fitted grid's table is byte-identical to lowering every point."""
    from mhlo_cost.lower.inference.steps import StepRequest
    from mhlo_cost.roofline import hardware_from_args
    from mhlo_cost.studies.serve.grid import StepCache, sweep, table

    hw = hardware_from_args("h100", None)
    base = StepRequest(model="gpt", overrides=(("layers", 2), ("hidden", 64), ("heads", 2), ("vocab", 128)))
    stages, notes = [], []
    grid = dict(batches=[1, 2, 3, 4], contexts=[128, 256, 512], hw=hw, tps=(1, 2))  # (from its 128 positions up)
    fitted = sweep(base, cache=StepCache(tmp_path / "a"), stage=stages.append, note=notes.append, **grid)
    lowered = sweep(base, cache=StepCache(tmp_path / "b"), fit=False, **grid)
    assert not notes
    assert sum("node of the fit" in s for s in stages) == 5  # 2 x 2 nodes and the check point
    assert sum(s.startswith("evaluating") for s in stages) == 9
    assert table(fitted).to_csv() == table(lowered).to_csv()
    assert fitted == lowered  # every figure, the blocks' times too
