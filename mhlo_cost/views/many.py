"""Several programs' tables of one view as one table (``report A.mlir B.mlir``): :func:`joined` makes it,
:func:`stacked` writes its rows for a format (a renderer then takes it as any other table)."""
from __future__ import annotations

from .table import Table, ViewRequest


def joined(tables: list[Table], req: ViewRequest) -> Table:
    """``tables`` (the view ``req`` asks for, a program each) as one table."""
    first = tables[0].meta
    title = None if req.bare else f"{len(tables)} files, by {req.by}" + (f":{req.depth}" if req.depth else "")
    return Table(title, parts=list(tables), meta={"tool": first["tool"], "version": first["version"]})


def stacked(table: Table, fmt: str, unit: str) -> Table:
    """The joined ``table``'s rows: each part's, its ``file`` first; JSON: each file's counts after the rows.
    A summary's (metric, value) pairs are written in ``unit`` (exact in JSON, to the unit's digits in CSV)."""
    import pandas as pd

    parts = [_with_file(_pairs_frame(t.pairs, fmt, unit) if t.pairs is not None else t.frame, t)
             for t in table.parts]
    shown = None  # where a part shows fewer columns in text (a training step's phase view): those, stacked
    if any(t.text_frame is not None for t in table.parts):
        shown = pd.concat([_with_file(t.shown, t) for t in table.parts], ignore_index=True)
    # Columns some files lack (a training step's phase columns) are empty there and exact where present:
    # integer columns go through as Python ints (a concat would make them float).
    missing = {c for p in parts for c in p.columns if any(c not in q.columns for q in parts)}
    for i, p in enumerate(parts):
        p = p.copy()
        for c in p.columns:
            if c in missing and (p[c].dtype.kind in "iu" or str(p[c].dtype) == "Int64"):
                p[c] = pd.Series([None if v is pd.NA else int(v) for v in p[c]], index=p.index, dtype=object)
        parts[i] = p
    after = {}
    if fmt == "json":
        after["summaries"] = {t.meta["source"]: {k: int(v) for k, v in t.summary.items()} for t in table.parts}
    return Table(table.title, frame=pd.concat(parts, ignore_index=True), meta=dict(table.meta), after=after,
                 text_frame=shown)


def _with_file(df, table: Table):
    """A copy of ``df`` with the ``file`` column (the table's program) first."""
    df = df.copy()
    df.insert(0, "file", table.meta["source"])
    return df


def _pairs_frame(pairs, fmt: str, unit: str):
    """A summary's pairs as a frame, in the unit asked (exact values in JSON)."""
    import pandas as pd

    from .pairs import in_unit

    if fmt != "json":
        pairs = in_unit(pairs, unit, exact=fmt == "csv")
    return pd.DataFrame({"metric": [m for m, _ in pairs], "value": pd.Series([v for _, v in pairs], dtype=object)})
