"""One point of a sweep, in a worker: lower it as ``mhlo-cost lower`` does, analyse it as ``mhlo-cost report``
does (the data-flow analysis: exposed communication and the memory peak), and make its row for every
hardware profile from that one analysis. The row is the study's (:func:`mhlo_cost.views.sweep_row.sweep_row`), the
one ``report --hardware H --steps K`` asks for the point alone, so it equals what the report prints.

Nothing here writes files or prints: a worker may run on another machine (a Dask cluster). A point that
fails returns its error as a result; it never raises.
"""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field

from ...files import collector
from ...views.sweep_row import sweep_row
from .grid import DEFAULT_PRECISION, Point, build_config, lowering_of, recipe_of


@dataclass
class Task:
    """What a worker needs for one point: the point, the grid's model options and settings, and the
    hardware profiles by name with the text of the user's profile file (so a remote worker needs none of
    this machine's files)."""

    point: Point
    options: dict
    hardware: list  # profile names, in the grid's order
    steps: int = 1
    fuse: str = "none"
    conv_padding: str = "xla"
    hardware_toml: str | None = None  # the text of --hardware-file
    check: bool = True  # a point priced from one layer checks the repetition at CHECK_DEPTH (else: checked once)
    repeat: bool = True  # False: never priced from one layer (its program's check failed): :func:`point_study`

    def profiles(self) -> list:
        """The Hardware objects of ``hardware`` (resolved as ``--hardware NAME --hardware-file FILE``)."""
        from ...roofline import hardware_from_args

        if self.hardware_toml is None:
            return [hardware_from_args(name, None) for name in self.hardware]
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "hardware.toml")
            with open(path, "w", encoding="utf-8") as f:
                f.write(self.hardware_toml)
            return [hardware_from_args(name, path) for name in self.hardware]


@dataclass
class Result:
    point: Point
    status: str  # ok | failed
    reason: str = ""
    ir_sha256: str = ""
    rows: list = field(default_factory=list)  # one dict of metrics per hardware profile, the task's order
    seconds: float = 0.0
    check: str = ""  # passed | failed: the repetition's check at CHECK_DEPTH (where the task checked it), else ""


def lower_text(point: Point, options: dict) -> str:
    """The MLIR text ``mhlo-cost lower`` writes for ``point`` (with locations; the bundled stdit3's ops with the
    frames of their block's call only: :func:`~mhlo_cost.lower.models.stdit3_once.blocks_traced_once`)."""
    from ...lower.frontends import write
    from ...lower.frontends.api import LowerRequest, lower_request

    if point.source:
        req = library_request(point)
    elif point.precision != DEFAULT_PRECISION:
        return _recipe_text(point, options)
    else:
        cfg, _ = build_config(point, options)
        deployed = bool(options.get("deployed"))
        req = LowerRequest(model=point.model, config=cfg, frontend="torchax" if deployed else "jax", deployed=deployed)
        if point.model == "stdit3" and not deployed:  # (each block's Python run once: the same ops, fewer frames)
            from ...lower.models.stdit3_once import blocks_traced_once

            with blocks_traced_once():
                return write(lower_request(req), None).text
    return write(lower_request(req), None).text


def _recipe_text(point: Point, options: dict) -> str:
    """The MLIR text of a bundled model's forward with its linears under the point's recipe (:func:`lowering_of`),
    lowered as ``lower`` lowers the forward (the frameworks quieted, locations relative)."""
    from ...lower.frontends import Lowered, write
    from ...lower.frontends.api import LowerRequest, run_request

    cfg, _ = build_config(point, options)
    plan = getattr(cfg, "plan", None)

    def lower(req, stage):
        low = lowering_of(point.model).lower(getattr(cfg, "cfg", cfg), recipe_of(point), plan)
        return Lowered(text=low.as_text(debug_info=True), info={"frontend": "jax", "model": point.model,
                                                                 "precision": point.precision})

    return write(run_request(LowerRequest(model=point.model, config=cfg), None, lower), None).text


def library_request(point: Point):
    """The LowerRequest of a spec's ``[[models]]`` point, as ``lower --hf ... --set ... --input ...`` makes it."""
    from ...lower.frontends.api import LowerRequest
    from ...lower.frontends.inputs import dtype_name, parse_assignments, parse_input, split_inputs

    src = dict(point.source)
    kind = next(k for k in ("module", "hf", "diffusers", "timm") if k in src)
    positional, keyword = split_inputs([parse_input(s) for s in point.shape.split()])
    lib = None if kind == "module" else kind
    return LowerRequest(module=src[kind] if lib is None else None, library=lib, name=src[kind] if lib else None,
                        config=src["config"], overrides=parse_assignments(src["set"], "set"),
                        inputs=tuple(positional), input_kwargs=keyword, kwargs=parse_assignments(src["kwarg"]),
                        dtype=dtype_name(point.dtype))


def study_of(text: str, task: Task):
    """The study ``report --hardware H --steps K`` makes of the text (walked here: a worker is a process of
    its own; parsed here too: the text is the lowering this process just made, :attr:`StudyOptions.parse_here`,
    unless ``MHLO_COST_ISOLATE=1``);
    ``on(hw)`` gives it on each profile."""
    from ..study import Study, StudyOptions

    own = task.fuse in ("eager", "inductor")  # an execution model of its own, not a --fuse mode
    return Study(StudyOptions(text, conv_padding=task.conv_padding, execution=task.fuse if own else None,
                              fuse="none" if own else task.fuse, steps=task.steps, isolate=False,
                              dataflow=True, parse_here=True))


def compute(task: Task) -> Result:
    """Lower, analyse and estimate one point; a failure becomes a ``failed`` result with its message."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    t0 = time.perf_counter()
    try:
        with _collector_paused(), _blocks_shared():
            sha, rows, check = point_rows(task)
    except Exception as e:  # noqa: BLE001 - any failure of the point is its row, never the sweep's end
        first = (str(e).strip().splitlines() or [""])[0][:300]
        return Result(task.point, "failed", f"{type(e).__name__}: {first}", seconds=time.perf_counter() - t0)
    return Result(task.point, "ok", "", sha, rows, time.perf_counter() - t0, check)


def warm() -> None:
    """Import what a point needs (jax, the bundled models' lowering, the walk, the pricing), nothing run: a worker
    started ahead of its first point (:func:`mhlo_cost.studies.sweep.run.early_pools`) pays its imports then."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from ...analysis import isolated  # noqa: F401
    from ...lower.frontends import api  # noqa: F401
    from ...lower.models import parallel  # noqa: F401
    from .. import layerprice, study  # noqa: F401


def _collector_paused():
    """Python's cyclic garbage collector paused while one point runs, as it was after. A point makes the analyses
    and pricings of its lowerings, a few hundred thousand objects that live until it ends, and the collector runs
    after every few hundred allocations, now and then over every tracked object (CPython's generational
    collector, ``InternalDocs/garbage_collector.md``): measured, a sixth of a sweep's CPU time (its full
    collections most of it), for no garbage, what has no cycle being freed by its reference count as ever. The
    cycles the point left (jax's traces, its studies) are collected as it ends, in the young generations (where all
    it made stays while the collector is paused; the old one, the process's modules, is not walked). The cost: the
    cycles that die within a point wait for its end (the published STDiT3 table's peak per process, measured:
    317 -> 567 MB with ``--jobs 1``, 306 -> 436 MB with two workers)."""
    return collector.paused(collect=1)


def _blocks_shared():
    """The bundled STDiT3's blocks traced once between the point's lowerings at its several depths, not once per
    lowering (:func:`mhlo_cost.lower.models.stdit3_once.blocks_shared`: the same text, byte for byte)."""
    from ...lower.models.stdit3_once import blocks_shared

    return blocks_shared()


#: The depths a deep bundled model is lowered at, its table rebuilt at full depth from them
#: (:mod:`mhlo_cost.studies.layerfit`, :mod:`mhlo_cost.studies.layerfit_sharded`), and the depth the rebuild is
#: checked at (lowered too, never used to rebuild: the independent reference).
DEPTHS, CHECK_DEPTH = (2, 3), 4


def point_rows(task: Task) -> tuple[str, list, str]:
    """(the sha256 of the lowerings its rows are made from, the point's row per profile, the check's outcome):
    priced from one layer where the point's model repeats and ``task.repeat`` (:func:`_repeated_rows`), else from
    the study of :func:`point_study`. The outcome, where ``task.check`` and the repetition was tried: ``passed``
    (the rows are the repetition's, checked at :data:`CHECK_DEPTH`) or ``failed`` (the repetition was not taken or
    its check did not hold: the rows are :func:`point_study`'s); else ``""``."""
    depth = _rebuilt_depth(task) if task.repeat and task.fuse in REPEATED_FUSE else None
    if depth:
        got = _repeated_rows(task, depth)
        if got is not None:
            return (*got, "passed" if task.check else "")
    sha, study = point_study(task)
    return sha, [sweep_row(study.on(hw).figures) for hw in task.profiles()], "failed" if depth and task.check else ""


#: The fusion modes a point is priced from one layer under (:mod:`mhlo_cost.studies.layerprice`).
REPEATED_FUSE = ("none", "elementwise")


def repeats(task: Task) -> bool:
    """Whether ``task``'s point is priced from one layer (so its program's check matters)."""
    return task.repeat and task.fuse in REPEATED_FUSE and _rebuilt_depth(task) is not None


def _repeated_rows(task: Task, depth: int):
    """(sha256 of the lowerings at :data:`DEPTHS`, rows) of a point lowered there and priced at ``depth`` by repeating
    its priced layer (:mod:`mhlo_cost.studies.layerprice`), the repetition checked against the program lowered at
    :data:`CHECK_DEPTH` (where ``task.check``: the sweep checks the first point of each program and prices the
    others of that program so only where the check passed: :func:`mhlo_cost.studies.sweep.run_sweep`); None where
    the layers do not repeat or the check fails (the point then takes :func:`point_study`'s path: lowered at
    depths 2, 3 and 4 again and rebuilt row by row where that rebuild holds at depth 4, else at full depth)."""
    from ..gridfit import FitFailed
    from ..layerprice import Repeat, repeated_rows

    made = {d: lower_text(task.point, dict(task.options, depth=d)) for d in DEPTHS}
    studies = {d: study_of(text, task) for d, text in made.items()}
    a2, a3 = (studies[d].analysis for d in DEPTHS)  # (walked once, for every profile)
    profiles = task.profiles()
    priced = [tuple(studies[d].on(hw) for d in DEPTHS) for hw in profiles]
    try:
        first = Repeat(a2, a3, CHECK_DEPTH if task.check else depth, base=DEPTHS[0])
        if task.check and not _check_holds(task, made, first, priced):
            return None
        rows = repeated_rows(first.at(depth) if task.check else first, priced)
    except (FitFailed, ValueError, IndexError, KeyError, TypeError, AttributeError):
        return None  # a program the repetition does not take: point_study's path
    return hashlib.sha256("".join(made[d] for d in DEPTHS).encode()).hexdigest(), rows  # (checked or not: one key)


def _check_holds(task: Task, made: dict, repeat, priced: list) -> bool:
    """Whether ``repeat`` (the repetition to :data:`CHECK_DEPTH`) gives, on every profile, the row of the point
    lowered and priced at :data:`CHECK_DEPTH` (that lowering's text put into ``made``), to the last bit."""
    from ..layerprice import repeated_rows

    made[CHECK_DEPTH] = lower_text(task.point, dict(task.options, depth=CHECK_DEPTH))
    at = study_of(made[CHECK_DEPTH], task)
    at.analysis  # noqa: B018 (walked once, for every profile)
    return repeated_rows(repeat, priced) == [sweep_row(at.on(hw).figures) for hw in task.profiles()]


def point_study(task: Task) -> tuple[str, object]:
    """(the sha256 of what was lowered, the study walked once) of ``task``'s point: a bundled stdit3 deeper than
    :data:`CHECK_DEPTH` lowered at :data:`DEPTHS` and :data:`CHECK_DEPTH`, its table rebuilt at full depth where
    the rebuild at :data:`CHECK_DEPTH` is the table lowered there (the sha then of the three lowerings), else the
    point lowered at full depth. Every depth is lowered from one line (a lowering's locations hold the stack)."""
    from ..study import Study

    depth = _rebuilt_depth(task)
    wanted, made = ([*DEPTHS, CHECK_DEPTH] if depth else [None]), {}
    while wanted:
        d = wanted.pop(0)
        text = lower_text(task.point, task.options if d is None else dict(task.options, depth=d))
        made[d] = (text, study_of(text, task))
        made[d][1].analysis  # noqa: B018 (walked once, for every profile)
        if d == CHECK_DEPTH:
            rebuilt = _rebuilt(made, depth)
            if rebuilt is None:
                wanted = [None]
            else:
                digest = hashlib.sha256("".join(made[x][0] for x in (*DEPTHS, CHECK_DEPTH)).encode()).hexdigest()
                return digest, Study.of(rebuilt, **{f: getattr(made[d][1].options, f) for f in _STUDY_FIELDS})
    text, study = made[None]
    return hashlib.sha256(text.encode()).hexdigest(), study


_STUDY_FIELDS = ("conv_padding", "execution", "fuse", "steps", "isolate", "dataflow")


def _rebuilt_depth(task: Task) -> int | None:
    """The depth of ``task``'s point where its table may be rebuilt from shallow lowerings (the bundled stdit3 at
    the default precision, not ``deployed``, deeper than :data:`CHECK_DEPTH`), else None."""
    p = task.point
    if p.source or p.model != "stdit3" or p.precision != DEFAULT_PRECISION or task.options.get("deployed"):
        return None
    cfg, _ = build_config(p, task.options)
    depth = getattr(getattr(cfg, "cfg", cfg), "depth", 0)
    return depth if depth > CHECK_DEPTH else None


def _rebuilt(made: dict, depth: int):
    """The analysis at ``depth`` rebuilt from ``made`` (depth -> (text, study)) at :data:`DEPTHS`, or None where
    the layers do not repeat or the rebuild at :data:`CHECK_DEPTH` is not the table lowered there."""
    from ..gridfit import FitFailed, skeleton
    from ..layerfit import repeat_layers
    from ..layerfit_sharded import repeat_sharded

    a2, a3, a4 = (made[d][1].analysis for d in (*DEPTHS, CHECK_DEPTH))
    items = a3.liveness.entry.items if a3.liveness is not None and a3.liveness.entry is not None else []
    repeat = repeat_sharded if any(getattr(it, "name", "") == "manual_computation" for it in items) else \
        repeat_layers
    try:
        if skeleton(repeat(a2, a3, CHECK_DEPTH, base=DEPTHS[0])) != skeleton(a4):
            return None
        return repeat(a2, a3, depth, base=DEPTHS[0])
    except (FitFailed, ValueError, IndexError, KeyError, TypeError, AttributeError):
        return None  # a program the rebuild does not take: lowered at full depth, as before the rebuild existed
