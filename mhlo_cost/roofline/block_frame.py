"""The block table with a program estimate's columns (:meth:`.estimate.Roofline.block_frame`): per-row time
columns by kind (GEMM / vector, fused or not, compute-bound, exposed communication) summed by block, the TOTAL row
set to the estimate's own totals, and each block's bound. Functions of a :class:`.estimate.Roofline` (``est``),
which keeps the methods as its face."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .bounds import span_bound

if TYPE_CHECKING:  # (pandas is not imported with the module: a sweep's worker prices programs and makes no frame)
    import pandas as pd

#: Block-table columns used for the overhead bound and dropped before the table is returned.
_FIXED, _GROWING = "fixed_cost_s", "growing_s"


def block_extra(est) -> dict:
    """Per-row columns for :func:`mhlo_cost.analysis.blocks.block_table`."""
    ts = est.times
    exposed = est.exposure().exposed
    extra = {
        "gemm_time_s": lambda r: ts[r.index].kernel_s if r.kind in ("dot", "conv") else 0.0,
        "vector_time_s": lambda r: ts[r.index].kernel_s if r.kind not in ("dot", "conv") else 0.0,
        "est_compute_s": lambda r: ts[r.index].compute_s,
        "est_memory_s": lambda r: ts[r.index].memory_s,
        "est_overhead_s": lambda r: ts[r.index].overhead_s,
        "comm_time_s": lambda r: ts[r.index].comm_s,
        "comm_exposed_s": lambda r: exposed[r.index],
        "est_time_s": lambda r: ts[r.index].time_s,
        "compute_bound_s": lambda r: ts[r.index].kernel_s if ts[r.index].bound == "compute" else 0.0,
    }
    if est.fusion is not None:
        ft = est.fusion.row_time
        ks, rk = est.fusion.kernels, est.fusion.row_kernel
        gemm = [rk[i] is not None and ks[rk[i]].has_dot for i in range(len(ts))]
        # Split by kernel: a GEMM kernel's epilogue counts as GEMM-kernel time.
        extra["gemm_time_fused_s"] = lambda r: ft[r.index] if gemm[r.index] else 0.0
        extra["vector_time_fused_s"] = lambda r: 0.0 if gemm[r.index] else ft[r.index]
        extra["est_time_fused_s"] = lambda r: ft[r.index] + ts[r.index].comm_s
        fexp = est.exposure(fused=True).exposed
        extra["comm_exposed_fused_s"] = lambda r: fexp[r.index]
        extra["est_time_fused_overlap_s"] = lambda r: ft[r.index] + fexp[r.index]
        cb = [rk[i] is not None and ks[rk[i]].bound == "compute" for i in range(len(ts))]
        extra["compute_bound_fused_s"] = lambda r: ft[r.index] if cb[r.index] else 0.0
    if est.execution == "inductor":
        extra.update(est.gain.block_extra())
    return extra


def block_frame(est, blocks, parts: bool = False, memory: list | None = None) -> pd.DataFrame:
    """The block table with the estimate columns (and ``memory``'s, see
    :func:`~mhlo_cost.analysis.blocks.block_table`); ``est_time_overlap_s`` = the compute side plus the exposed
    communication (``comm_exposed_s``, :meth:`.estimate.Roofline.exposure`)."""
    from ..analysis.blocks import block_table

    ts = est.times
    extra = block_extra(est) | {_FIXED: lambda r: ts[r.index].fixed_cost_s,
                                _GROWING: lambda r: ts[r.index].growing_s}
    df = block_table(est.analysis, blocks, parts=parts, extra=extra, memory=memory)
    df["est_time_overlap_s"] = df["est_time_s"] - df["comm_time_s"] + df["comm_exposed_s"]
    _total_from(df, est.totals())
    if est.execution == "inductor":
        from .gain import add_gain_column

        add_gain_column(df)
    # The block's bound: where most of its (fused, if estimated) device time goes.
    t = df["est_time_fused_s" if est.fusion is not None else "est_time_s"] - df["comm_time_s"]
    c = df["compute_bound_fused_s"] if est.fusion is not None else df["compute_bound_s"]
    df["bound"] = [span_bound(*v) for v in zip(t, c, df["comm_time_s"], df[_FIXED], df[_GROWING])]
    # The model the ``_fused`` columns describe (``unfused``: none; the plain columns are op by op).
    df = df.drop(columns=[_FIXED, _GROWING, "execution"], errors="ignore")  # execution: block_table's, moved last
    df["execution"] = est.execution
    return df


def _total_from(df: pd.DataFrame, totals: dict) -> None:
    """The TOTAL row's times are the summary's (``totals``), not a sum of the blocks' sums taken in another
    order: one figure, one value, to the last bit."""
    at = df.index[df["block"] == "TOTAL"]
    for c in df.columns:
        if c in totals and str(c).endswith("_s"):
            df.loc[at, c] = totals[c]
