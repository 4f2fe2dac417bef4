"""What a click on a row of the block table opens: the block's parts and its slowest ops (or, without a
hardware profile, those with the most FLOPs), as the disassembly table of ``report --by op`` shows them."""
from __future__ import annotations

import pandas as pd

from ...analysis import int_series
from ...analysis.blocks import TOTAL, row_labels
from .fmt import Column, esc, exact, plural
from .roofline_chart import op_name
from .table import columns_of, rows_table

#: Columns of the block table a part table does not repeat.
_KEYS = ("block", "kind", "index", "part")


def _ops_frame(analysis, rf) -> tuple[pd.DataFrame, str]:
    """Every op (or fused kernel) with the op row it starts at, and the column it is ranked by."""
    if rf is not None:
        frame = rf.kernel_frame() if rf.fusion is not None else rf.op_frame()
        return frame, "latency_us"
    rows = analysis.rows
    frame = pd.DataFrame({
        "index": int_series([r.index for r in rows]),
        "operation": [op_name(r) for r in rows],
        "kind": [r.kind for r in rows],
        "inputs": [r.operand_shapes for r in rows],
        "output": [r.result.pretty if hasattr(r.result, "pretty") else " ".join(t.pretty for t in r.result)
                   for r in rows],
        "multiplicity": int_series([r.multiplicity for r in rows]),
        "gemm_flops": int_series([r.gemm_flops + r.conv_flops for r in rows]),
        "vector_flops": int_series([r.vector_flops for r in rows]),
        "bytes": int_series([r.bytes_read + r.bytes_written for r in rows]),
    })
    frame["_rank"] = [r.gemm_flops + r.conv_flops + r.vector_flops for r in rows]
    return frame, "_rank"


def block_details(analysis, blocks, parts: pd.DataFrame | None, rf=None, top: int = 10,
                  unit: str | None = None) -> dict[str, str]:
    """Per row name of the block table: the HTML shown under it (parts, then the top ops). Units are
    chosen once for all blocks, so that two blocks read alike."""
    labels = row_labels(blocks)
    frame, rank = _ops_frame(analysis, rf)
    heads, ranks = frame["index"].tolist(), frame[rank].tolist()
    shown = frame.drop(columns=["_rank"], errors="ignore")
    op_cols = columns_of(shown, unit)
    op_rows = list(shown.itertuples(index=False, name=None))
    by_label: dict[str, list[int]] = {}
    for pos, head in enumerate(heads):
        for name in labels[head]:
            by_label.setdefault(name, []).append(pos)
    part_html = _parts(parts, unit) if parts is not None else {}
    what = "slowest" if rf is not None else "most FLOPs"
    kernel = "fused kernel" if rf is not None and rf.fusion is not None else "op"
    shared_col = Column("shared_by", "plain", True)
    out = {}
    for name, positions in by_label.items():
        best = sorted(positions, key=lambda p: (-ranks[p], heads[p]))[:top]
        shared = [len(labels[heads[p]]) for p in best]
        if any(k > 1 for k in shared):  # a loop body's rows, split over its iterations' blocks
            table = rows_table([op_cols[0], shared_col] + op_cols[1:],
                               [(op_rows[p][0], k) + op_rows[p][1:] for p, k in zip(best, shared)], "mini ops")
        else:
            table = rows_table(op_cols, [op_rows[p] for p in best], "mini ops")
        out[name] = (part_html.get(name, "")
                     + f"<h4>top {len(best)} of its {plural(len(positions), kernel)}, {what} first</h4>" + table)
    return out


def _parts(parts: pd.DataFrame, unit) -> dict[str, str]:
    """Per block with parts: its part table, without the columns that are zero in every one of its parts."""
    parts = parts[parts["block"] != TOTAL]
    view = parts[["part"] + [c for c in parts.columns if c not in _KEYS]]
    cols = columns_of(view, unit)
    rows: dict[str, list[tuple]] = {}
    for name, row in zip(parts["block"], view.itertuples(index=False, name=None)):
        rows.setdefault(name, []).append(row)
    out = {}
    for name, mine in rows.items():
        if len(mine) == 1 and mine[0][0] in ("", "(other)"):
            continue
        keep = [j for j, c in enumerate(cols) if not c.numeric or any(exact(r[j]) not in ("", "0", "0.0")
                                                                       for r in mine)]
        out[name] = f"<h4>parts of {esc(name)}</h4>" + rows_table([cols[j] for j in keep],
                                                                  [tuple(r[j] for j in keep) for r in mine])
    return out
