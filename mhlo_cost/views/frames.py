"""Frames the views share: a TOTAL row, the scope tree, the op list without a profile, the collectives, the
``--block`` / ``--scope`` filter, the ``overhead`` bound."""
from __future__ import annotations

import math
import re
from dataclasses import replace

from .table import ViewError

TOTAL = "TOTAL"
#: Columns a TOTAL row leaves empty: labels, sizes, ratios.
NOT_SUMMED = ("index", "group_size", "num_groups", "utilisation", "percent", "comm_steps", "depth", "live_bytes")


def with_total(df, label: str | None = None, totals: dict | None = None):
    """``df`` with a ``TOTAL`` row: integer columns summed exactly, seconds with ``math.fsum``, the rest empty;
    a column of seconds that ``totals`` (the summary's figures of the whole program) names takes its value
    there, not a re-sum of the rows taken in another order."""
    import pandas as pd

    from ..analysis import int_series
    from .text import is_int_column

    label = label or str(df.columns[0])
    data = {}
    for c in df.columns:
        col = df[c]
        if c == label:
            data[c] = list(col) + [TOTAL]
        elif c not in NOT_SUMMED and is_int_column(col):
            data[c] = int_series([int(v) for v in col] + [sum(int(v) for v in col)])
        elif c not in NOT_SUMMED and pd.api.types.is_float_dtype(col.dtype) and str(c).endswith("_s"):
            total = (totals or {}).get(c)
            total = math.fsum(v for v in col if not math.isnan(v)) if total is None else total
            data[c] = pd.Series(list(col) + [total], dtype="float64")
        else:
            data[c] = pd.Series(list(col) + [None], dtype=object if not is_int_column(col) else "Int64")
    return pd.DataFrame(data)


def select_rows(fig, req) -> list[int] | None:
    """Positions of the rows of the figures' analysis the request's ``block`` (``--block NAME``) and ``scope``
    (``--scope REGEX``) keep (None: no filter)."""
    name, pattern = req.block, req.scope
    if not name and not pattern:
        return None
    analysis = fig.analysis
    keep = range(len(analysis.rows))
    if name:
        from ..analysis.blocks import row_labels

        # every row of the block table: the blocks, and the groups of ops outside them (embed, lm_head, (top))
        labels = row_labels(fig.blocks)
        if not any(name in lab for lab in labels):
            names = list(dict.fromkeys(n for lab in labels for n in lab))
            shown = ", ".join(names[:12]) + (" ..." if len(names) > 12 else "")
            raise ViewError(f"no block named {name!r} (rows of the block table: {shown or 'none'})")
        keep = [i for i in keep if name in labels[i]]
    if pattern:
        rx = re.compile(pattern)
        keep = [i for i in keep if rx.search(analysis.rows[i].scope or "")]
    if not keep:
        raise ViewError(f"no op matches {'--block ' + name if name else ''}{' ' if name and pattern else ''}"
                        f"{'--scope ' + pattern if pattern else ''}")
    return list(keep)


def subset(analysis, keep: list[int] | None):
    """The analysis of the kept rows only (no memory figures: liveness is a whole-program matter)."""
    if keep is None:
        return analysis
    return replace(analysis, rows=[analysis.rows[i] for i in keep], _ops=None, liveness=None, _memory=None)


def op_list(analysis, top: int | None = None):
    """One row per op occurrence in program order (the op table), without a profile; ``top``: the N with the
    most FLOPs, most first."""
    df = analysis.ops
    if top is not None:
        flops = df["gemm_flops"] + df["conv_flops"] + df["vector_flops"]
        order = sorted(range(len(df)), key=lambda i: (-int(flops.iloc[i]), i))[:top]
        df = df.iloc[order].reset_index(drop=True)
    first = ["index", "op", "kind", "shape", "dtype", "gemm_flops", "conv_flops", "vector_flops", "transcendentals",
             "bytes_read", "bytes_written", "comm_bytes", "multiplicity", "scope"]
    return df[first + [c for c in df.columns if c not in first]]


def tree_frame(analysis, depth: int | None = None, params: list[int] | None = None):
    """Scopes as an indented tree, each with the subtotal of everything under it and its share of the total
    FLOPs; ``depth``: no deeper than that many segments; ``params`` (per row: the parameter elements first
    read there) adds a ``params`` column, as a module tree of a framework counts them."""
    import pandas as pd

    from ..analysis import SUM_COLUMNS, int_series

    width = len(SUM_COLUMNS) + 2  # the sums, the parameters, the ops
    sums: dict[tuple, list[int]] = {(): [0] * width}  # the root, also for a program without ops
    for i, r in enumerate(analysis.rows):
        parts = tuple((r.scope or "").split("/")) if r.scope else ()
        parts = parts[:depth] if depth else parts
        vals = [getattr(r, c) for c in SUM_COLUMNS] + [params[i] if params else 0, r.multiplicity]
        for n in range(0, len(parts) + 1):
            acc = sums.setdefault(parts[:n], [0] * width)
            for j, v in enumerate(vals):
                acc[j] += v
    order = _tree_order(list(sums))
    total = sums[()]
    flops = total[0] + total[1] + total[2]
    data = {"scope": ["(all)" if not k else "  " * (len(k) - 1) + k[-1] for k in order],
            "depth": int_series([len(k) for k in order])}
    for i, c in enumerate(SUM_COLUMNS):
        data[c] = int_series([sums[k][i] for k in order])
    if params is not None:
        data["params"] = int_series([sums[k][-2] for k in order])
    data["ops"] = int_series([sums[k][-1] for k in order])
    # a share, for display: the exact counts are in the columns beside it
    data["percent"] = pd.Series([100 * (sums[k][0] + sums[k][1] + sums[k][2]) / flops if flops else 0.0
                                 for k in order], dtype="float64")
    return pd.DataFrame(data)


def _tree_order(keys: list[tuple]) -> list[tuple]:
    """Depth-first, children in order of first appearance (``keys`` are in that order already)."""
    children: dict[tuple, list[tuple]] = {}
    for k in keys:
        if k:
            children.setdefault(k[:-1], []).append(k)
    out: list[tuple] = []
    stack = [()]
    while stack:
        k = stack.pop()
        out.append(k)
        stack.extend(reversed(children.get(k, [])))
    return out


def mark_overhead(df, rf):
    """``bound`` = ``overhead`` on op rows whose fixed costs (launch overhead, each kernel's fill and drain) are
    more than the work that grows with their size (:attr:`OpTime.overhead_bound`)."""
    if "bound" not in df.columns or "index" not in df.columns:
        return df
    pos = {r.index: i for i, r in enumerate(rf.analysis.rows)}
    out = []
    for idx, b in zip(df["index"], df["bound"]):
        t = rf.times[pos[int(idx)]]
        out.append("overhead" if b in ("compute", "memory") and t.overhead_bound else b)
    df = df.copy()
    df["bound"] = out
    return df


def timed_group(analysis, rf, by: str, depth, df):
    """est_time_s (and est_time_fused_s) per group of a --by kind/opname/scope table."""
    keys = analysis.keys(by, depth)
    label = df.columns[0]
    acc: dict = {}
    fused: dict = {}
    for r, k, t in zip(analysis.rows, keys, rf.times):
        acc[k] = acc.get(k, 0.0) + t.time_s
        if rf.fusion is not None:
            fused[k] = fused.get(k, 0.0) + rf.fusion.row_time[r.index] + t.comm_s
    df = df.copy()
    df["est_time_s"] = [acc.get(k, 0.0) for k in df[label]]
    if rf.fusion is not None:
        df["est_time_fused_s"] = [fused.get(k, 0.0) for k in df[label]]
    return df


def comm_frame(analysis, rf):
    import pandas as pd

    from ..analysis import int_series

    rows = [r for r in analysis.rows if r.kind == "collective"]
    df = pd.DataFrame({
        "op": [r.comm_kind for r in rows],
        "scope": [r.scope for r in rows],
        "group_size": int_series([r.group_size for r in rows]),
        "num_groups": int_series([r.num_groups for r in rows]),
        "shape": [r.shape for r in rows],
        "dtype": [r.dtype for r in rows],
        "multiplicity": int_series([r.multiplicity for r in rows]),
        "comm_bytes": int_series([r.comm_bytes for r in rows]),
        "location": [r.location for r in rows],
    })
    if rf is not None:  # where each collective runs, how, how long, and how much of it compute cannot hide
        pos = {r.index: i for i, r in enumerate(rf.analysis.rows)}
        idx = [pos[r.index] for r in rows]
        details = [rf.comm_detail(i) for i in idx]
        df.insert(4, "tier", [d.tier for d in details])
        df.insert(5, "algorithm", [d.algorithm for d in details])
        df["comm_time_s"] = pd.Series([rf.times[i].comm_s for i in idx], dtype="float64")
        # what compute cannot hide, with op-by-op compute times and (--fuse, eager) the fused kernels' times:
        # the block table's and the summary's names
        for suffix, fused in (("", False), ("_fused", True))[:2 if rf.fusion is not None else 1]:
            exposed = rf.exposure(fused=fused).exposed
            df[f"comm_exposed{suffix}_s"] = pd.Series([exposed[i] for i in idx], dtype="float64")
    return df


def keep_ops(df, analysis, keep, top):
    keep_idx = {analysis.rows[i].index for i in keep}
    df = df[df["index"].isin(keep_idx)].sort_values("index", kind="stable")
    if top is not None:
        df = df.sort_values("latency_us", ascending=False, kind="stable").head(top)
    return df.reset_index(drop=True)


def keep_blocks(df, req):
    """The rows of the block the request names (``--block``), or whose names its ``scope`` matches (``--scope``;
    the program's TOTAL left out)."""
    if req.block:
        df = df[df["block"] == req.block]
        if len(df) == 0:
            raise ViewError(f"no block named {req.block!r}")
    if req.scope:
        rx = re.compile(req.scope)
        df = df[[bool(rx.search(str(b))) and b != "TOTAL" for b in df["block"]]]
    return df.reset_index(drop=True)


def sub_roofline(rf, keep):
    """``rf`` with its times cut to the kept rows (for the grouped views of a filtered analysis)."""
    if keep is None:
        return rf

    from types import SimpleNamespace

    return SimpleNamespace(times=[rf.times[i] for i in keep], fusion=rf.fusion)
