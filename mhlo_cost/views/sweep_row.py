"""The sweep's row: one view of a program's figures on one hardware profile (:func:`sweep_row`), made from the
same figures a ``report`` of the program renders, so that a sweep row and ``report``'s figures agree by
construction."""
from __future__ import annotations

from ..machines.accuracy import median_error


def sweep_row(fig) -> dict:
    """The sweep's row of ``fig`` (a program's :class:`~mhlo_cost.views.figures.Figures` on a profile): the
    numbers of the program on the profile, under the report's names (per device; ints exact): the same roofline
    and memory estimate ``report`` prints, read from the same figures."""
    rf, hw, analysis, steps = fig.roofline, fig.hardware, fig.analysis, fig.steps or 1
    s = rf.summary(steps)
    c = analysis.summary
    out = {k: int(c[k]) for k in ("gemm_flops", "conv_flops", "vector_flops", "comm_bytes")}
    out["flops"] = int(s["flops"])
    hbm = int(hw.hbm_capacity)
    peaks = [("", analysis.memory.peak_bytes)]
    if rf.fusion is not None:
        peaks.append(("_fused", fig.fused_memory.peak_bytes))
    for suffix, peak in peaks:
        out["peak_bytes" + suffix] = int(peak)
    out["hbm_bytes"] = hbm
    for suffix, peak in peaks:
        out["fits" + suffix] = "yes" if hbm - peak >= 0 else "no"
    for k in ("est_time_s", "est_time_overlap_s", "est_time_fused_s", "est_time_fused_overlap_s",
              "comm_time_s", "comm_exposed_s", "utilisation", "utilisation_fused", "comm_exposed_fused_s"):
        if k in s:  # comm_exposed_fused_s: what compute cannot hide with fused compute times
            out[k] = s[k]
    out["bound"] = rf.program_bound()  # the rule of Roofline.block_frame: one block holding every op
    out["accuracy_error"] = median_error(hw.name, "model", "compiled" if rf.fusion is not None else "unfused")
    out["steps"] = steps
    out["time_step_s"] = s[rf.step_name]  # the summary's step: compute + exposed communication
    out["time_run_s"] = s["run_time_fused_s" if rf.fusion is not None else "run_time_s"]
    return out
