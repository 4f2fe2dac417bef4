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

from .analysis import int_series

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


def _share(value, k: int, j: int):
    """The j-th of k shares of value: exact integer split (remainder to the first shares)."""
    if k == 1:
        return value
    if isinstance(value, int):
        q, rem = divmod(value, k)
        return q + (1 if j < rem else 0)
    return value / k


def block_table(analysis, blocks, parts: bool = False, extra: dict[str, Callable] | None = None) -> pd.DataFrame:
    """DataFrame ``block, kind, index, [part,] <metrics...>``; see the module docstring."""
    rows = analysis.rows
    metrics = dict(ROW_METRICS)
    if extra:
        metrics.update(extra)
    names = list(metrics)
    funcs = [metrics[m] for m in names]

    # key -> accumulated values; keys in order of first appearance.
    # A key is ("b", block id, part) or ("g", group name, "").
    acc: dict[tuple, list] = {}
    order: dict[tuple, tuple] = {}
    # A group never takes a block's name, nor its family's (``spatial_blocks`` beside ``spatial_blocks.0``):
    # ops next to blocks but outside them belong to the top level.
    block_names = {b.name for b in blocks.blocks}
    block_names |= {re.split(r"[._/\[]\d+\]?$", b.name)[0] for b in blocks.blocks}
    for i, r in enumerate(rows):
        vals = [f(r) for f in funcs]
        bids = blocks.row_blocks[i]
        part = (blocks.row_parts[i] or NO_PART) if parts else ""
        if bids:
            k = len(bids)
            for j, b in enumerate(bids):
                key = ("b", b, part)
                a = acc.get(key)
                if a is None:
                    a = acc[key] = [0] * len(names)
                    order[key] = (i, b)
                for c, v in enumerate(vals):
                    a[c] += _share(v, k, j)
        else:
            group = blocks.row_groups[i] or "(top)"
            if group in block_names:
                group = "(top)"
            key = ("g", group, "")
            a = acc.get(key)
            if a is None:
                a = acc[key] = [0] * len(names)
                order[key] = (i, -1)
            for c, v in enumerate(vals):
                a[c] += v
    # Blocks in block order (their ids are in program order), each at its first row; parts of a block
    # in order of first appearance right after one another.
    block_first: dict[int, int] = {}
    for key, (i, b) in order.items():
        if key[0] == "b":
            block_first[b] = min(block_first.get(b, i), i)
    # A block starts where its first row is, but never before an earlier block.
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

    keys = sorted(acc, key=sort_key)

    col_block, col_kind, col_index, col_part = [], [], [], []
    for key in keys:
        if key[0] == "b":
            blk = blocks.blocks[key[1]]
            col_block.append(blk.name)
            col_kind.append(blk.kind)
            col_index.append(blk.index)
        else:
            col_block.append(key[1])
            col_kind.append("")
            col_index.append(None)
        col_part.append(key[2])
    totals = [sum(acc[k][c] for k in keys) for c in range(len(names))] if keys else [0] * len(names)
    col_block.append(TOTAL)
    col_kind.append("")
    col_index.append(None)
    col_part.append("")

    data = {"block": col_block, "kind": col_kind, "index": pd.array(col_index, dtype="Int64")}
    if parts:
        data["part"] = col_part
    for c, m in enumerate(names):
        vals = [acc[k][c] for k in keys] + [totals[c]]
        if all(isinstance(v, int) for v in vals):
            data[m] = int_series(vals)
        else:
            data[m] = pd.Series(vals, dtype="float64")
    return pd.DataFrame(data)


def block_totals(df: pd.DataFrame) -> dict:
    """The TOTAL row of a block table as a dict of its metric columns."""
    row = df[df["block"] == TOTAL].iloc[0]
    return {c: row[c] for c in df.columns if c not in ("block", "kind", "index", "part")}
