"""A sharded STDiT3 (the sweep's points: a ``shard_map`` lowered to one ``sdy.manual_computation`` region) as the
next step of issue 41's sweep would rebuild it from depths 2 and 3: its counts are exactly linear in the depth (the
extrapolation from depths 2 and 3 equals the lowering at depth 5, every metric an exact integer), its rows repeat
in two places (each layer's parameter reshapes before the region, its blocks inside it), and the rebuild of
:mod:`mhlo_cost.studies.layerfit` refuses it today, saying why (a sweep point is lowered at full depth)."""
from __future__ import annotations

import pytest

from mhlo_cost.studies.gridfit import FitFailed
from mhlo_cost.studies.layerfit import repeat_layers
from mhlo_cost.studies.sweep.grid import Point
from mhlo_cost.studies.sweep.point import Task, lower_text, study_of
from mhlo_cost.walk.costvalue import METRICS


def _analyses(parallel: str, devices: int, depths) -> list:
    """The analysis of the small STDiT3 under ``parallel:devices`` at each depth, as a sweep point walks it."""
    out = []
    for d in depths:
        point = Point("stdit3", "default", parallel, devices, "bf16")
        options = {"small": True, "depth": d, "batch": 2}
        task = Task(point, options, ["dgx-h100"], 1, "elementwise")
        out.append(study_of(lower_text(point, options), task).analysis)
    return out


def _totals(analysis) -> dict:
    return {m: sum(getattr(r.cost, m) for r in analysis.rows) for m in METRICS}


@pytest.mark.parametrize("parallel", ["ulysses", "ring"])
def test_sharded_counts_are_linear_in_depth_and_the_rebuild_refuses_the_region(parallel):
    a2, a3, a5 = _analyses(parallel, 2, (2, 3, 5))
    t2, t3, t5 = _totals(a2), _totals(a3), _totals(a5)
    assert all(type(v) is int for v in t5.values())
    assert t5 == {m: t2[m] + 3 * (t3[m] - t2[m]) for m in METRICS}
    assert t5["gemm_flops"] > t3["gemm_flops"] > t2["gemm_flops"] > 0
    assert len(a5.rows) == len(a2.rows) + 3 * (len(a3.rows) - len(a2.rows))
    items = a3.liveness.entry.items
    assert [type(it).__name__ for it in items] == ["Region", "Return"] and items[0].name == "manual_computation"
    before = [items[0].start for a in (a2, a3, a5) for items in [a.liveness.entry.items]]
    assert before[1] - before[0] > 0 and before[2] - before[0] == 3 * (before[1] - before[0])  # per-layer reshapes
    with pytest.raises(FitFailed, match="not one plain function"):
        repeat_layers(a2, a3, 5, base=2)
