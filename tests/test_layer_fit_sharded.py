"""A sharded STDiT3 (the sweep's points: a ``shard_map`` lowered to one ``sdy.manual_computation`` region) rebuilt
at depth 5 from its lowerings at depths 2 and 3 (:mod:`mhlo_cost.studies.layerfit_sharded`) is the lowering at depth 5
(the independent reference): every integer, name, scope, value-key pattern and liveness item, and the sweep's row
priced from it. Its counts are exactly linear in the depth, and its rows repeat in more than one place (each
layer's parameter reshapes before the region, its blocks inside it), which the plain rebuild of
:mod:`mhlo_cost.studies.layerfit` refuses, saying why."""
from __future__ import annotations

import pytest

from mhlo_cost.studies.gridfit import FitFailed, skeleton
from mhlo_cost.studies.layerfit import repeat_layers
from mhlo_cost.studies.layerfit_sharded import repeat_sharded
from mhlo_cost.studies.sweep.grid import Point
from mhlo_cost.studies.sweep.point import Task, lower_text, study_of
from mhlo_cost.views.sweep_row import sweep_row
from mhlo_cost.walk.costvalue import METRICS


def _studies(parallel: str, devices: int, depths) -> list:
    """The study of the small STDiT3 under ``parallel:devices`` at each depth, as a sweep point makes it."""
    out = []
    for d in depths:
        point = Point("stdit3", "default", parallel, devices, "bf16")
        options = {"small": True, "depth": d, "batch": 2}
        task = Task(point, options, ["dgx-h100"], 30, "elementwise")
        out.append((study_of(lower_text(point, options), task), task))
    return out


def _totals(analysis) -> dict:
    return {m: sum(getattr(r.cost, m) for r in analysis.rows) for m in METRICS}


@pytest.mark.parametrize("parallel,devices", [("ulysses", 2), ("ring", 2), ("megatron", 2), ("2d", 4)])
def test_sharded_table_rebuilt_from_depths_2_and_3_is_the_depth_5_lowering(parallel, devices):
    made = _studies(parallel, devices, (2, 3, 5))
    a2, a3, a5 = (study.analysis for study, _ in made)
    t2, t3, t5 = _totals(a2), _totals(a3), _totals(a5)
    assert all(type(v) is int for v in t5.values())
    assert t5 == {m: t2[m] + 3 * (t3[m] - t2[m]) for m in METRICS}
    assert t5["gemm_flops"] > t3["gemm_flops"] > t2["gemm_flops"] > 0
    items = a3.liveness.entry.items
    assert [type(it).__name__ for it in items] == ["Region", "Return"] and items[0].name == "manual_computation"
    starts = [a.liveness.entry.items[0].start for a in (a2, a3, a5)]
    assert starts[1] > starts[0] and starts[2] - starts[0] == 3 * (starts[1] - starts[0])  # per-layer reshapes
    with pytest.raises(FitFailed, match="not one plain function"):
        repeat_layers(a2, a3, 5, base=2)
    rebuilt = repeat_sharded(a2, a3, 5)
    assert len(rebuilt.rows) == len(a5.rows)
    assert skeleton(rebuilt) == skeleton(a5)
    study, task = made[2]
    row = sweep_row(study.on(task.profiles()[0]).figures)
    again = study_of(lower_text(task.point, task.options), task)
    again.__dict__["analysis"] = rebuilt  # (the study priced from the rebuilt table instead of its walk)
    assert sweep_row(again.on(task.profiles()[0]).figures) == row


@pytest.mark.parametrize("parallel,devices", [("ulysses", 2), ("none", 1)])
def test_sweep_point_rebuilt_from_shallow_lowerings_equals_the_full_lowering(parallel, devices, monkeypatch):
    """A sweep point of a model deeper than the check depth (6 here) is lowered at depths 2, 3 and 4 and its rows
    are those of the point lowered at full depth."""
    from mhlo_cost.studies.sweep import point as sweep_point

    task = Task(Point("stdit3", "default", parallel, devices, "bf16"), {"small": True, "depth": 6, "batch": 2},
                ["dgx-a100", "dgx-h100"], 30, "elementwise")
    lowered = []
    real = sweep_point.lower_text
    monkeypatch.setattr(sweep_point, "lower_text", lambda p, o: lowered.append(o.get("depth")) or real(p, o))
    fast = sweep_point.compute(task)
    assert lowered == [2, 3, 4] and fast.status == "ok"
    monkeypatch.setattr(sweep_point, "_rebuilt_depth", lambda task: None)
    full = sweep_point.compute(task)
    assert lowered == [2, 3, 4, 6] and full.status == "ok"
    assert fast.rows == full.rows and fast.ir_sha256 != full.ir_sha256
