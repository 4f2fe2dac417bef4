"""The block table: the metrics of every block (and of the groups of ops outside blocks) with a TOTAL row.

``block_table(analysis, blocks)`` has one row per block in program order, the ops outside every block
grouped by their nearest scope (``x_embedder``, ``final_layer``, ``(top)``) placed where they first
appear, and ``TOTAL`` last, which equals ``analysis.summary`` for every metric. With ``parts=True``
each block is cut further into its parts (``attn``, ``cross_attn``, ``mlp``, ...).

A row that a loop body spreads over N blocks gives each of them 1/N of every metric (exact: the metrics
of such rows are per-iteration values times N; any remainder goes to the first blocks so that sums stay
exact).

To add a column, add ``name -> function(row) -> number`` to ``extra`` (or to :data:`ROW_METRICS`).
"""
from __future__ import annotations

from typing import Callable

import re

import pandas as pd

from .series import int_series

TOTAL = "TOTAL"
#: Label of the rows of a block that no part claims.
NO_PART = "(other)"


def _attr(name: str) -> Callable:
    return lambda r: getattr(r, name)


#: Per-row metrics summed into the table, in column order.
ROW_METRICS: dict[str, Callable] = {
    "gemm_flops": _attr("gemm_flops"),
    "conv_flops": _attr("conv_flops"),
    "vector_flops": _attr("vector_flops"),
    "transcendentals": _attr("transcendentals"),
    "bytes_read": _attr("bytes_read"),
    "bytes_written": _attr("bytes_written"),
    "comm_bytes": _attr("comm_bytes"),
    "comm_ops": lambda r: r.multiplicity if r.kind == "collective" else 0,
    "ops": _attr("multiplicity"),
}


def _with_precisions(rows) -> dict[str, Callable]:
    """:data:`ROW_METRICS` with ``gemm_flops_<precision>`` after ``gemm_flops`` for each low precision the rows'
    dots run in (none for a program in classical dtypes: its table is unchanged)."""
    from . import dot_precision, precision_flops

    names = list(precision_flops(rows))
    out: dict[str, Callable] = {}
    for k, f in ROW_METRICS.items():
        out[k] = f
        if k == "gemm_flops":
            for name in names:
                p = name.rsplit("_", 1)[1]
                out[name] = lambda r, p=p: r.gemm_flops if dot_precision(r) == p else 0
    return out


def _share(value, k: int, j: int):
    """The j-th of k shares of value: exact integer split (remainder to the first shares)."""
    if k == 1:
        return value
    if isinstance(value, int):
        q, rem = divmod(value, k)
        return q + (1 if j < rem else 0)
    return value / k


def taken_names(blocks) -> set[str]:
    """Names a group of rows outside blocks never takes: a block's, or its family's (``spatial_blocks``
    beside ``spatial_blocks.0``); ops next to blocks but outside them belong to the top level, ``(top)``."""
    names = {b.name for b in blocks.blocks}
    return names | {re.split(r"[._/\[]\d+\]?$", b.name)[0] for b in blocks.blocks}


def row_labels(blocks) -> list[tuple[str, ...]]:
    """The block table rows each op row adds to: its blocks' names, or its group's name."""
    taken = taken_names(blocks)
    out = []
    for bids, group in zip(blocks.row_blocks, blocks.row_groups):
        if bids:
            out.append(tuple(blocks.blocks[b].name for b in bids))
        else:
            group = group or "(top)"
            out.append(("(top)",) if group in taken else (group,))
    return out


def block_table(analysis, blocks, parts: bool = False, extra: dict[str, Callable] | None = None,
                memory: list | None = None) -> pd.DataFrame:
    """DataFrame ``block, kind, index, [part,] <metrics...>``; see the module docstring.

    ``memory``: ``(suffix, profile)`` pairs (:class:`mhlo_cost.memory.MemoryProfile`) adding, per row,
    ``peak_bytes<suffix>`` (the highest live total while the block's ops run; every block of a loop gets its
    body's) and ``live_out_bytes<suffix>`` (live once its last op is done); TOTAL: the program's peak and
    what is live at its end; then ``execution``, the model the ``_fused`` columns describe."""
    metrics = _with_precisions(analysis.rows)
    if extra:
        metrics.update(extra)
    names = list(metrics)
    acc, order, row_keys = _accumulate(analysis.rows, blocks, [metrics[m] for m in names], parts)
    keys = sorted(acc, key=_sort_key(order))
    totals = [sum(acc[k][c] for k in keys) for c in range(len(names))] if keys else [0] * len(names)

    col_block, col_kind, col_index, col_part = [], [], [], []
    for key in keys:
        blk = blocks.blocks[key[1]] if key[0] == "b" else None
        col_block.append(blk.name if blk else key[1])
        col_kind.append(blk.kind if blk else "")
        col_index.append(blk.index if blk else None)
        col_part.append(key[2])
    data = {"block": col_block + [TOTAL], "kind": col_kind + [""],
            "index": pd.array(col_index + [None], dtype="Int64")}
    if parts:
        data["part"] = col_part + [""]
    for c, m in enumerate(names):
        vals = [acc[k][c] for k in keys] + [totals[c]]
        data[m] = int_series(vals) if all(isinstance(v, int) for v in vals) else pd.Series(vals, dtype="float64")
    for suffix, prof in memory or ():
        peak, live_out = _memory_columns(row_keys, prof)
        data["peak_bytes" + suffix] = int_series([peak.get(k, 0) for k in keys] + [prof.peak_bytes])
        end = prof.after[-1] if prof.after else prof.argument_bytes
        data["live_out_bytes" + suffix] = int_series([live_out.get(k, 0) for k in keys] + [end])
    if memory:  # the execution model of the peak_bytes_fused column (unfused: none)
        fused = dict(memory).get("_fused")
        data["execution"] = fused.execution if fused is not None else "unfused"
    return pd.DataFrame(data)


def _accumulate(rows, blocks, funcs, parts: bool):
    """Per table key, the metric sums (a row in k blocks gives each its share); keys are ``("b", block id,
    part)`` or ``("g", group name, "")``. Also each key's (first row, block id) and each row's keys."""
    acc: dict[tuple, list] = {}
    order: dict[tuple, tuple] = {}
    row_keys: list[tuple] = []
    block_names = taken_names(blocks)
    for i, r in enumerate(rows):
        vals = [f(r) for f in funcs]
        bids = blocks.row_blocks[i]
        if bids:
            part = (blocks.row_parts[i] or NO_PART) if parts else ""
            keys = tuple(("b", b, part) for b in bids)
            shares = [[_share(v, len(bids), j) for v in vals] for j in range(len(bids))]
        else:
            group = blocks.row_groups[i] or "(top)"
            keys = (("g", "(top)" if group in block_names else group, ""),)
            shares = [vals]
        row_keys.append(keys)
        for key, b, share in zip(keys, bids or (-1,), shares):
            a = acc.get(key)
            if a is None:
                a = acc[key] = [0] * len(funcs)
                order[key] = (i, b)
            for c, v in enumerate(share):
                a[c] += v
    return acc, order, row_keys


def _sort_key(order: dict):
    """Blocks in block order (their ids are in program order), each at its first row but never before an
    earlier block; parts of a block in order of first appearance right after one another; groups at their
    first row."""
    block_first: dict[int, int] = {}
    for key, (i, b) in order.items():
        if key[0] == "b":
            block_first[b] = min(block_first.get(b, i), i)
    pos = {}
    last = -1
    for b in sorted(block_first):
        last = max(last, block_first[b])
        pos[b] = last

    def sort_key(key):
        i, b = order[key]
        if key[0] == "b":
            return (pos[b], 0, b, i)
        return (i, 1, 0, i)
    return sort_key


def _memory_columns(row_keys: list, prof) -> tuple[dict, dict]:
    """Per table key: the highest live total while its rows run, and the live total after its last row."""
    peak: dict = {}
    live_out: dict = {}
    for ks, during, after in zip(row_keys, prof.during, prof.after):
        for k in ks:
            if during > peak.get(k, -1):
                peak[k] = during
            live_out[k] = after
    return peak, live_out


def block_totals(df: pd.DataFrame) -> dict:
    """The TOTAL row of a block table as a dict of its metric columns."""
    row = df[df["block"] == TOTAL].iloc[0]
    return {c: row[c] for c in df.columns if c not in ("block", "kind", "index", "part")}


# -- training phases ----------------------------------------------------------------------------------------

#: Column prefix of each phase (see :mod:`mhlo_cost.analysis.collectors.phases`).
PHASE_PREFIX = {"forward": "fwd", "backward": "bwd", "recompute": "recompute", "optimizer": "opt"}
#: The backward's matrix products split by what they are the gradient of.
GRAD_SPLIT = ("dgrad", "wgrad")
#: Label of the group that holds the optimizer's ops (outside every block).
OPTIMIZER_GROUP = "optimizer"


def phase_metrics(phases, conv: bool = False) -> dict[str, Callable]:
    """Per-row columns for :func:`block_table`: ``{fwd,bwd,recompute,opt}_{gemm,vector}_flops``, the
    backward GEMM split into ``dgrad_gemm_flops`` / ``wgrad_gemm_flops``; the same for conv_flops with
    ``conv``."""
    phase, grad = phases.phase, phases.grad

    def of(metric, p):
        return lambda r: getattr(r, metric) if phase[r.index] == p else 0

    def split(metric, g):
        return lambda r: getattr(r, metric) if grad[r.index] == g else 0

    out: dict[str, Callable] = {}
    for metric in ("gemm_flops",) + (("conv_flops",) if conv else ()):
        for p, prefix in PHASE_PREFIX.items():
            out[f"{prefix}_{metric}"] = of(metric, p)
            if p == "backward":
                for g in GRAD_SPLIT:
                    out[f"{g}_{metric}"] = split(metric, g)
    for p, prefix in PHASE_PREFIX.items():
        out[f"{prefix}_vector_flops"] = of("vector_flops", p)
    return out


def training_blocks(blocks, phases):
    """``blocks`` of a training step, for the table: the optimizer's rows outside every block grouped as
    :data:`OPTIMIZER_GROUP`, and blocks found twice under one name (a scanned model's forward loop and
    backward loop each give ``layers.0``, ``layers.1``, ...) made one, so that a block's row holds its
    forward and its backward. (The backward loop runs the layers in reverse; its iterations cost the same,
    so the sums are exact either way.)"""
    from dataclasses import replace

    first: dict = {}
    ids, kept = [], []
    for b in blocks.blocks:
        key = (b.name, b.kind, b.index)
        if key not in first:
            first[key] = len(kept)
            kept.append(b)
        ids.append(first[key])
    row_blocks = [tuple(ids[b] for b in bs) for bs in blocks.row_blocks] if len(kept) < len(ids) \
        else blocks.row_blocks
    groups = [OPTIMIZER_GROUP if not b and p == "optimizer" else g
              for b, p, g in zip(blocks.row_blocks, phases.phase, blocks.row_groups)]
    return replace(blocks, blocks=kept, row_blocks=row_blocks, row_groups=groups)


def add_phase_columns(df: pd.DataFrame, analysis, blocks, phases, parts: bool = False) -> pd.DataFrame:
    """``df`` (a block table of ``blocks``, estimate columns or not) with the phase columns and
    ``bwd_fwd_ratio``: backward over forward matrix FLOPs (GEMM + conv) per row, empty where no forward."""
    conv = any(r.conv_flops for r in analysis.rows)
    extra = phase_metrics(phases, conv)
    ph = block_table(analysis, blocks, parts=parts, extra=extra)
    if list(ph["block"]) != list(df["block"]):
        raise ValueError("the phase table and the block table have different rows")
    df = df.copy()
    for c in extra:
        df[c] = ph[c].values
    fwd = df["fwd_gemm_flops"] + (df["fwd_conv_flops"] if conv else 0)
    bwd = df["bwd_gemm_flops"] + (df["bwd_conv_flops"] if conv else 0)
    df["bwd_fwd_ratio"] = pd.Series([int(b) / int(f) if int(f) else float("nan") for b, f in zip(bwd, fwd)],
                                    dtype="float64")
    return df


def phase_view(df: pd.DataFrame) -> pd.DataFrame:
    """The terminal view of a training step's block table: ``gemm_flops``, ``conv_flops`` and
    ``vector_flops`` left out (their phase columns add up to them) and so are the phase columns that are
    zero in every row (recompute without remat, the optimizer's GEMMs, ...); CSV and JSON keep them all."""
    names = {f"{p}_{m}" for p in list(PHASE_PREFIX.values()) + list(GRAD_SPLIT)
             for m in ("gemm_flops", "conv_flops", "vector_flops")}
    idle = [c for c in df.columns if (c in names or c == "conv_flops") and not any(int(v) for v in df[c])]
    summed = [m for m in ("gemm_flops", "conv_flops", "vector_flops") if f"fwd_{m}" in df.columns]
    df = df.drop(columns=list(dict.fromkeys(idle + summed)))
    phase = [c for c in df.columns if c in names or c == "bwd_fwd_ratio"]
    head = [c for c in ("block", "kind", "index", "part") if c in df.columns]
    return df[head + phase + [c for c in df.columns if c not in head and c not in phase]]
