"""A deep program priced from one layer (:mod:`mhlo_cost.studies.layerprice`): the sweep row at full depth made by
repeating the priced rows and kernels of the programs lowered at depths 2 and 3 is the row of the program lowered
and priced at full depth (the independent reference): every int equal, every float time bit for bit (each total
is an ``fsum``; the exposed communication is scheduled over the full-depth rows), on the sweep's sharded STDiT3
strategies and a GPT decode step."""
from __future__ import annotations

import pytest

from mhlo_cost.studies.gridfit import FitFailed
from mhlo_cost.studies.layerfit_sharded import repeat_sharded
from mhlo_cost.studies.layerprice import Repeat, repeated_rows
from mhlo_cost.studies.sweep.grid import Point
from mhlo_cost.studies.sweep.point import Task, lower_text, study_of
from mhlo_cost.views.sweep_row import sweep_row


def _stdit3(parallel: str, devices: int, depths, fuse: str = "elementwise") -> tuple:
    """(the studies of the small STDiT3 under ``parallel:devices`` at each depth as a sweep point walks them, the
    profiles)."""
    point = Point("stdit3", "default", parallel, devices, "bf16")
    out = {}
    for d in depths:
        task = Task(point, {"small": True, "depth": d, "batch": 2}, ["dgx-a100", "dgx-h100"], 30, fuse)
        out[d] = study_of(lower_text(point, task.options), task)
        out[d].analysis  # noqa: B018 (walked once, shared by the profiles)
    return out, task.profiles()


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in b:  # floats bit for bit (repr round-trips a double), ints exact
        assert type(a[k]) is type(b[k]) and repr(a[k]) == repr(b[k]), k


@pytest.mark.parametrize("parallel,devices,fuse", [("ulysses", 2, "elementwise"), ("megatron", 2, "elementwise"),
                                                   ("2d", 4, "elementwise"), ("none", 1, "elementwise"),
                                                   ("ring", 2, "none")])
def test_stdit3_priced_from_one_layer_is_the_full_depth_pricing(parallel, devices, fuse):
    made, profiles = _stdit3(parallel, devices, (2, 3, 6), fuse)
    repeat = Repeat(made[2].analysis, made[3].analysis, 6)
    got = repeated_rows(repeat, [(made[2].on(hw), made[3].on(hw)) for hw in profiles])
    want = [sweep_row(made[6].on(hw).figures) for hw in profiles]
    for a, b in zip(got, want):
        _same(a, b)
    row = want[0]
    assert type(row["gemm_flops"]) is int and row["gemm_flops"] > 0 and type(row["time_step_s"]) is float
    if parallel != "none":
        assert row["comm_bytes"] > 0 and row["comm_time_s"] > 0
        # the data flow between rows at full depth is the one the row-by-row rebuild makes (the schedule reads no
        # argument's name: those stay layer 2's here)
        def rows_read(producers):
            return [tuple("arg" if isinstance(x, str) else x for x in ps) for ps in producers]

        rebuilt = repeat_sharded(made[2].analysis, made[3].analysis, 6)
        assert rows_read(repeat.program().producers) == rows_read(rebuilt.producers)
    # the memory peaks and counts grow by a constant per layer: linear in the depth
    a2, a3, a6 = (made[d].analysis for d in (2, 3, 6))
    assert repeat.program().summary == a6.summary
    assert a6.memory.peak_bytes == a3.memory.peak_bytes + 3 * (a3.memory.peak_bytes - a2.memory.peak_bytes)


def test_gpt_decode_priced_from_one_layer_is_the_full_depth_pricing():
    from mhlo_cost.lower.inference.steps import StepRequest, lower_step
    from mhlo_cost.roofline import hardware_from_args
    from mhlo_cost.studies.serve.serve import step_study

    hw = hardware_from_args("h100", None)
    tiny = (("hidden", 64), ("heads", 2), ("vocab", 128))
    made = {}
    for n in (2, 3, 7):
        step = lower_step(StepRequest(model="gpt", batch=2, context=128, overrides=tiny + (("layers", n),)))
        made[n] = step_study(step, hw)
    repeat = Repeat(made[2].analysis, made[3].analysis, 7)
    [got] = repeated_rows(repeat, [(made[2], made[3])])
    _same(got, sweep_row(made[7].figures))
    assert got["gemm_flops"] > 0 and got["peak_bytes_fused"] > 0


def test_layers_that_do_not_repeat_are_refused():
    made, _ = _stdit3("ulysses", 2, (2, 3))
    with pytest.raises(FitFailed):
        Repeat(made[3].analysis, made[2].analysis, 6)  # (deep and shallow swapped: no layer to repeat)
    with pytest.raises(FitFailed):
        Repeat(made[2].analysis, made[3].analysis, 3)  # (nothing to repeat: the deep lowering itself)


def test_a_sweep_point_checks_the_repetition_once_per_program(monkeypatch):
    """The sweep's first point of each program (model, strategy, dtype, precision) lowers at depths 2, 3 and the
    check depth 4; the others at 2 and 3 alone; both give the rows of the point lowered at full depth."""
    from mhlo_cost.studies.sweep import _first_of_program
    from mhlo_cost.studies.sweep import point as sweep_point

    pts = [Point("stdit3", s, p, n, "bf16") for s in ("a", "b") for p, n in (("ulysses", 2), ("none", 1))]
    assert _first_of_program(pts) == [True, True, False, False]
    lowered = []
    real = sweep_point.lower_text
    monkeypatch.setattr(sweep_point, "lower_text", lambda p, o: lowered.append(o.get("depth")) or real(p, o))
    task = Task(Point("stdit3", "default", "ulysses", 2, "bf16"), {"small": True, "depth": 6, "batch": 2},
                ["dgx-a100", "dgx-h100"], 30, "elementwise", check=False)
    fast = sweep_point.compute(task)
    assert lowered == [2, 3] and fast.status == "ok"
    monkeypatch.setattr(sweep_point, "_rebuilt_depth", lambda task: None)
    full = sweep_point.compute(task)
    assert lowered == [2, 3, 6] and full.status == "ok"
    for a, b in zip(fast.rows, full.rows):
        _same(a, b)


@pytest.mark.parametrize("parallel,devices", [("ulysses", 2), ("megatron", 2), ("ring", 2)])
def test_a_repetition_checked_at_one_depth_prices_another(parallel, devices):
    """A sweep point checked at depth 4 prices its full depth from the same layers' segments (:meth:`Repeat.at`:
    found once): the rows at depth 7 are the rows of the program lowered and priced at depth 7 (the independent
    reference, not used to build them), and the repetition is the one made afresh at that depth."""
    made, profiles = _stdit3(parallel, devices, (2, 3, 7))
    a2, a3 = made[2].analysis, made[3].analysis
    checked = Repeat(a2, a3, 4)
    repeat = checked.at(7)
    assert repeat.plan.segs is checked.plan.segs and repeat.plan.depth == 6 and checked.plan.depth == 3
    fresh = Repeat(a2, a3, 7)
    assert repeat.order == fresh.order and repeat.plan.segs == fresh.plan.segs
    got = repeated_rows(repeat, [(made[2].on(hw), made[3].on(hw)) for hw in profiles])
    want = [sweep_row(made[7].on(hw).figures) for hw in profiles]
    for a, b in zip(got, want):
        _same(a, b)
    assert want[0]["comm_bytes"] > 0
