"""One point of a sweep, in a worker: lower it as ``mhlo-cost lower`` does, analyse it as ``mhlo-cost report``
does (the data-flow analysis: exposed communication and the memory peak), and make its row for every
hardware profile from that one analysis. Numbers are the report's own (``Roofline.summary``, the memory
profile), so a row equals what ``report --hardware H --steps K`` prints for the point alone.

Nothing here writes files or prints: a worker may run on another machine (a Dask cluster). A point that
fails returns its error as a result; it never raises.
"""
from __future__ import annotations

import hashlib
import math
import os
import time
from dataclasses import dataclass, field

from .grid import Point, build_config


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

    def profiles(self) -> list:
        """The Hardware objects of ``hardware`` (resolved as ``--hardware NAME --hardware-file FILE``)."""
        from ..roofline import hardware_from_args

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


def lower_text(point: Point, options: dict) -> str:
    """The MLIR text ``mhlo-cost lower`` writes for ``point`` (with locations)."""
    from ..frontends import write
    from ..frontends.api import LowerRequest, lower_request

    if point.source:
        req = library_request(point)
    else:
        cfg, _ = build_config(point, options)
        req = LowerRequest(model=point.model, config=cfg, frontend="jax")
    return write(lower_request(req), None).text


def library_request(point: Point):
    """The LowerRequest of a spec's ``[[models]]`` point, as ``lower --hf ... --set ... --input ...`` makes it."""
    from ..frontends.api import LowerRequest
    from ..frontends.inputs import dtype_name, parse_assignments, parse_input, split_inputs

    src = dict(point.source)
    kind = next(k for k in ("module", "hf", "diffusers", "timm") if k in src)
    positional, keyword = split_inputs([parse_input(s) for s in point.shape.split()])
    lib = None if kind == "module" else kind
    return LowerRequest(module=src[kind] if lib is None else None, library=lib, name=src[kind] if lib else None,
                        config=src["config"], overrides=parse_assignments(src["set"], "set"),
                        inputs=tuple(positional), input_kwargs=keyword, kwargs=parse_assignments(src["kwarg"]),
                        dtype=dtype_name(point.dtype))


def analyse_text(text: str, conv_padding: str = "xla"):
    """The analysis ``report --hardware`` makes of the text (with the data flow)."""
    from ..loader import load
    from ..analysis import analyze_dataflow

    return analyze_dataflow(load(text), conv_padding=conv_padding)


def compute(task: Task) -> Result:
    """Lower, analyse and estimate one point; a failure becomes a ``failed`` result with its message."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    t0 = time.perf_counter()
    try:
        text = lower_text(task.point, task.options)
        sha = hashlib.sha256(text.encode()).hexdigest()
        analysis = analyse_text(text, task.conv_padding)
        rows = [metrics(analysis, hw, task.steps, task.fuse) for hw in task.profiles()]
    except Exception as e:  # noqa: BLE001 - any failure of the point is its row, never the sweep's end
        first = (str(e).strip().splitlines() or [""])[0][:300]
        return Result(task.point, "failed", f"{type(e).__name__}: {first}", seconds=time.perf_counter() - t0)
    return Result(task.point, "ok", "", sha, rows, time.perf_counter() - t0)


def metrics(analysis, hw, steps: int = 1, fuse: str = "none") -> dict:
    """The numbers of one point on one profile, under the report's names (per device; ints exact)."""
    from ..roofline import Roofline

    rf = Roofline(analysis, hw, execution="eager") if fuse == "eager" else Roofline(analysis, hw, fuse_mode=fuse)
    s = rf.summary(steps)
    c = analysis.summary
    out = {k: int(c[k]) for k in ("gemm_flops", "conv_flops", "vector_flops", "comm_bytes")}
    out["flops"] = int(s["flops"])
    hbm = int(hw.hbm_capacity)
    peaks = [("", analysis.memory.peak_bytes)]
    if rf.fusion is not None:
        from ..memory.views import eager_profile, fused_profile

        prof = eager_profile(analysis, rf.fusion) if fuse == "eager" else fused_profile(analysis, rf.fusion)
        peaks.append(("_fused", prof.peak_bytes))
    for suffix, peak in peaks:
        out["peak_bytes" + suffix] = int(peak)
    out["hbm_bytes"] = hbm
    for suffix, peak in peaks:
        out["fits" + suffix] = "yes" if hbm - peak >= 0 else "no"
    for k in ("est_time_s", "est_time_overlap_s", "est_time_fused_s", "est_time_fused_overlap_s",
              "comm_time_s", "comm_exposed_s", "utilisation", "utilisation_fused"):
        if k in s:
            out[k] = s[k]
    if rf.fusion is not None:  # what compute cannot hide with fused compute times (report --by comm --fuse)
        out["comm_exposed_fused_s"] = math.fsum(rf.exposure(fused=True).exposed)
    out["bound"] = bound(rf)
    from ..accuracy import median_error

    out["accuracy_error"] = median_error(hw.name, "model", "compiled" if rf.fusion is not None else "unfused")
    step = s["est_time_fused_overlap_s"] if rf.fusion is not None else s["est_time_overlap_s"]
    out["steps"] = steps
    out["time_step_s"] = step
    out["time_run_s"] = step * steps
    return out


def bound(rf) -> str:
    """The whole program's bound by the rule of ``Roofline.block_frame`` (one block holding every op)."""
    from ..roofline.estimate import time_bound

    extra, rows = rf.block_extra(), rf.analysis.rows

    def total(name):
        return math.fsum(extra[name](r) for r in rows)

    comm = total("comm_time_s")
    fused = rf.fusion is not None
    return time_bound(total("est_time_fused_s" if fused else "est_time_s") - comm,
                      total("compute_bound_fused_s" if fused else "compute_bound_s"), comm)
