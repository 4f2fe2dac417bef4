"""A serve point priced from one layer (issue 41: the serve grid's pricing, mhlo_cost/studies/serve/onelayer.py):
the figures at full depth made from the step at depths 3 and 4, each priced once, are those of the step lowered at
full depth and priced whole (the independent reference), every figure and block time to the last bit; a grid
prices its points so once its program's check holds, and where the check does not hold its points are priced
from their rebuilt tables, the figures unchanged."""
from __future__ import annotations

from dataclasses import replace

from mhlo_cost.lower.inference.steps import StepRequest, lower_step
from mhlo_cost.roofline import hardware_from_args
from mhlo_cost.studies.serve import onelayer
from mhlo_cost.studies.serve.grid import StepCache, sweep
from mhlo_cost.studies.serve.serve import figures, step_study

HW = hardware_from_args("h100", None)
TINY = (("hidden", 64), ("heads", 2), ("vocab", 128))


def test_one_layer_pricing_is_the_full_depth_pricing():
    made = {}
    for n in (3, 4, 9):  # (every depth lowered from this one line: a lowering's locations hold the stack)
        step = lower_step(StepRequest(model="gpt", batch=4, context=256, overrides=TINY + (("layers", n),)))
        made[n] = (step, step_study(step, HW).analysis)
    step, analysis = made[9]
    for tp, launch in ((1, "stream"), (2, "cuda-graphs")):
        got = onelayer.layer_priced(step, made[3], made[4], HW, tp, launch, base=3)
        want = figures(step, HW, tp, analysis=analysis, launch=launch)
        assert got == want
    names = [b for b, _, _ in want.blocks]
    assert sum(n.startswith("layers.") for n in names) == 9 and names[-1] == "TOTAL"  # one block per layer
    assert want.flops > 0 and want.activation_bytes > 0 and want.step_time_s > 0


def _grid(tmp_path, name: str, **kw):
    base = StepRequest(model="gpt", overrides=TINY + (("layers", 7),))
    return sweep(base, batches=[1, 2, 3, 4], contexts=[128, 256, 512], hw=HW, tps=(1, 2),
                 cache=StepCache(tmp_path / name), **kw)


def test_grid_prices_from_one_layer_once_its_check_holds(tmp_path, monkeypatch):
    calls = []
    real = onelayer.layer_priced

    def counted(step, *a, **k):
        calls.append(step.layers)
        return real(step, *a, **k)

    monkeypatch.setattr(onelayer, "layer_priced", counted)
    notes = []
    fitted = _grid(tmp_path, "a", note=notes.append)
    assert not notes
    # the checks at depth 5 (the grid's program and batch 1's, each tp), then every point at full depth (7 layers)
    assert sorted(calls) == [5] * 4 + [7] * 24
    assert fitted == _grid(tmp_path, "b", fit=False)  # every figure, the blocks' times too


def test_a_check_that_fails_sends_the_points_to_their_rebuilt_tables(tmp_path, monkeypatch):
    calls = []
    real = onelayer.layer_priced

    def wrong(step, *a, **k):  # (a repetition that misses by one nanosecond)
        calls.append(step.layers)
        fig = real(step, *a, **k)
        return replace(fig, step_time_s=fig.step_time_s + 1e-9)

    monkeypatch.setattr(onelayer, "layer_priced", wrong)
    fitted = _grid(tmp_path, "a")
    assert calls == [5] * 4  # the checks only: no point priced from one layer
    assert fitted == _grid(tmp_path, "b", fit=False)
