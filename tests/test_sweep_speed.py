"""What the sweep does to go faster changes none of its numbers: the bundled STDiT3 lowered with each kind of block
traced once (:func:`mhlo_cost.lower.models.stdit3_once.blocks_traced_once`) is op for op the program traced block by
block, every op under the same scope name, only the frames inside a block gone from its location; a point runs
with Python's cyclic collector paused and leaves it as it found it, whatever the point's outcome. (The sweep's
rows against ``lower`` + ``report`` of the plain lowering: tests/test_sweep.py.)"""
from __future__ import annotations

import contextlib
import gc
import re
from dataclasses import replace

import pytest

from mhlo_cost.lower.models import parallel, stdit3, stdit3_once
from mhlo_cost.lower.models.config import STDiT3Config
from mhlo_cost.lower.models.parallel_plan import make_plan
from mhlo_cost.studies.sweep import make_grid
from mhlo_cost.studies.sweep import point as sweep_point
from mhlo_cost.studies.sweep.point import Task, compute

CFG = replace(STDiT3Config().small(), depth=3)
LOC_DEF = re.compile(r"^(#loc\d+) = (.*)$", re.M)
LOC_REF = re.compile(r"loc\((#loc\d+)\)\s*$")


def _text(strategy: str, once: bool) -> str:
    """The lowering's text, with each kind of block traced once or not (called from one line: a location's frames
    hold the caller's too)."""
    with stdit3_once.blocks_traced_once() if once else contextlib.nullcontext():
        if strategy == "none":
            return stdit3.lower(CFG).as_text(debug_info=True)
        return parallel.lower(CFG, make_plan(strategy, 2, cfg=CFG)).as_text(debug_info=True)


def _ops(text: str) -> list[tuple[str, str, str]]:
    """Per op line of the body: (the line without its location, the op's scope name, the files of its frames),
    the location followed through the text's location table by hand (independent of the walk's reader)."""
    table = dict(LOC_DEF.findall(text))

    def resolve(ref: str, seen: int = 0) -> str:
        body = table[ref]
        return re.sub(r"#loc\d+", lambda m: resolve(m.group(0), seen + 1) if seen < 40 else "", body)

    out = []
    for line in text.splitlines():
        m = LOC_REF.search(line)
        if line.startswith("#loc") or m is None or "=" not in line:
            continue
        where = resolve(m.group(1))
        name = re.search(r'"([^"]*/[^"]*)"\(', where)
        out.append((line[:m.start()].strip(), name.group(1) if name else "", " ".join(sorted(set(
            re.findall(r'"([^"]+\.py)":', where))))))
    return out


@pytest.mark.parametrize("strategy", ["none", "ulysses", "megatron"])
def test_blocks_traced_once_is_the_same_program_under_the_same_names(strategy):
    plain, once, again = [_text(strategy, o) for o in (False, True, False)]
    assert again == plain  # the context gone, the plain lowering again
    a, b = _ops(plain), _ops(once)
    assert len(a) == len(b) > 100
    assert [x[0] for x in a] == [x[0] for x in b]  # op for op, operands and types
    assert [x[1] for x in a] == [x[1] for x in b]  # the same scope name per op
    blocks = [i for i, x in enumerate(a) if "_blocks." in x[1]]
    assert {re.search(r"\w+_blocks\.\d+", a[i][1]).group(0) for i in blocks} == {
        f"{k}_blocks.{i}" for k in ("spatial", "temporal") for i in range(CFG.depth)}
    # the frames inside a block (its kernels' file) are in the plain lowering's locations, not in the other's
    assert any("stdit3_kernels.py" in a[i][2] for i in blocks)
    assert not any("stdit3_kernels.py" in b[i][2] for i in blocks)
    assert all("stdit3.py" in b[i][2] for i in blocks)  # (the call of the block, in the forward)


def _task() -> Task:
    grid = make_grid({"model": "stdit3", "strategies": ["none:1"], "hardware": ["dgx-h100"], "dtype": ["bf16"],
                      "options": {"small": True, "depth": 1}})
    return Task(grid.points[0], grid.options, grid.hardware)


@pytest.mark.parametrize("fails", [False, True])
@pytest.mark.parametrize("enabled", [True, False])
def test_a_point_runs_with_the_collector_paused_and_leaves_it_as_it_was(monkeypatch, fails, enabled):
    seen = []

    def rows(task):
        seen.append(gc.isenabled())
        if fails:
            raise ValueError("no such point")
        return "sha", [{"flops": 1}], ""

    monkeypatch.setattr(sweep_point, "point_rows", rows)
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        got = compute(_task())
        after = gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False]
    assert after is enabled
    assert (got.status, got.reason) == (("failed", "ValueError: no such point") if fails else ("ok", ""))



def _lowerings(strategy: str, cfgs: list, shared: bool) -> tuple[list, list]:
    """(each of ``cfgs``' lowerings with each kind of block traced once, lowered from one line whatever the mode: a
    location's frames hold the caller's too; the count of jits :func:`~mhlo_cost.lower.models.stdit3_once
    .blocks_shared` keeps after each, or None) with the blocks shared between them (``shared``) or not."""
    texts, kept = [], []
    with stdit3_once.blocks_shared() if shared else contextlib.nullcontext():
        for cfg in cfgs:
            plan = None if strategy == "none" else make_plan(strategy, 2, cfg=cfg)
            with stdit3_once.blocks_traced_once():
                low = stdit3.lower(cfg) if plan is None else parallel.lower(cfg, plan)
            texts.append(low.as_text(debug_info=True))
            memo = stdit3_once._SHARED.get()
            kept.append(None if memo is None else len(memo))
    return texts, kept


@pytest.mark.parametrize("strategy", ["none", "ulysses", "megatron"])
def test_blocks_shared_between_depths_and_shapes_lower_the_same_text(strategy):
    """The lowerings of one point at depths 2, 3, 4 (and of another shape after them) with the blocks traced once
    between them (:func:`~mhlo_cost.lower.models.stdit3_once.blocks_shared`) are, byte for byte, those lowered each
    on its own (the independent source: the lowering without the shared blocks); and the blocks were shared (two
    jits kept, one per kind of block, for one shape; two more for the other)."""
    other = replace(CFG, latent_t=CFG.latent_t + 2, latent_h=CFG.latent_h + 4)
    cfgs = [replace(CFG, depth=d) for d in (2, 3, 4)] + [replace(other, depth=d) for d in (3, 2)]
    (alone, none_kept), (shared, kept) = [_lowerings(strategy, cfgs, mode) for mode in (False, True)]
    assert none_kept == [None] * 5 and kept == [2, 2, 2, 4, 4]
    assert len(set(alone)) == len(cfgs)  # (five different programs)
    for a, b in zip(alone, shared):
        assert a == b
    assert stdit3_once._SHARED.get() is None  # (the context gone, nothing kept)


def test_a_point_parses_its_own_lowering_here_with_the_guards_rows(monkeypatch):
    """A worker parses the text it just lowered in its own process (``StudyOptions.parse_here``: no reader's child
    started, no bytecode made); its analysis and rows are those of the text parsed in the reader's child, as
    ``report`` parses a file (the independent path: :func:`mhlo_cost.ir.guard.read_guarded`)."""
    from mhlo_cost.ir import guard
    from mhlo_cost.studies.study import Study
    from mhlo_cost.views.sweep_row import sweep_row

    grid = make_grid({"model": "stdit3", "shape": ["default"], "strategies": ["ulysses:2"], "hardware": ["h100"],
                      "fuse": "elementwise", "options": {"small": True, "depth": 3}})
    task = Task(grid.points[0], grid.options, grid.hardware, grid.steps, grid.fuse)
    text = sweep_point.lower_text(task.point, dict(task.options))
    here = sweep_point.study_of(text, task)
    assert here.options.parse_here and not here.isolated()
    guarded = Study(replace(here.options, parse_here=False))
    monkeypatch.delenv("MHLO_COST_ISOLATE", raising=False)  # the default: the guard on for files from elsewhere
    calls = []
    real = guard.read_guarded
    monkeypatch.setattr(guard, "read_guarded", lambda *a, **k: calls.append(1) or real(*a, **k))
    a, b = here.analysis, guarded.analysis
    assert calls == [1]  # (the guarded study's parse alone went through the reader's child)
    assert a.summary == b.summary and len(a.rows) == len(b.rows) > 100
    assert [(r.op, r.scope, r.cost, r.multiplicity, r.loc.file_line, r.loc.stack) for r in a.rows] == \
        [(r.op, r.scope, r.cost, r.multiplicity, r.loc.file_line, r.loc.stack) for r in b.rows]
    assert _flow(a.producers) == _flow(b.producers)
    hw = task.profiles()[0]
    assert sweep_row(here.on(hw).figures) == sweep_row(guarded.on(hw).figures)
    # an explicit MHLO_COST_ISOLATE=1 keeps the guarded parse for the point's own text too
    monkeypatch.setenv("MHLO_COST_ISOLATE", "1")
    forced = Study(here.options)
    assert forced.options.parse_here and forced.analysis.summary == a.summary
    assert calls == [1, 1]


def _flow(producers: list) -> list:
    """The data flow with each argument's key (a value's address in its parse) named by its order of first use."""
    names: dict = {}
    return [tuple(x if not isinstance(x, str) else names.setdefault(x, f"arg{len(names)}") for x in ps)
            for ps in producers]
