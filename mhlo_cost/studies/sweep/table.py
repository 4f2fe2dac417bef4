"""The sweep's tidy table: one row per (point, hardware profile), configuration columns named after the
flags, a status (ok / skipped / failed) with its reason, then the point's numbers per device. CSV, JSON,
Parquet and a markdown view; ``best`` ranks per (shape, hardware) by estimated time among those that fit.

The ``precision`` column (the point's recipe, after ``dtype``) is there where the sweep crosses a recipe other
than bf16: a table of bf16 points is as it was before the sweep took recipes, and a table without the column
reads as one of bf16 points (:func:`precision_of`).
"""
from __future__ import annotations

import json

import pandas as pd

from ... import __version__
from ...files.outtext import csv_safe_frame, json_text

CONFIG = ("model", "shape", "parallel", "devices", "hardware", "dtype", "status", "reason", "execution")
INTS = ("devices", "gemm_flops", "conv_flops", "vector_flops", "flops", "comm_bytes", "peak_bytes",
        "peak_bytes_fused", "hbm_bytes", "steps")
#: The number columns in table order; the ``_fused`` ones only where the sweep fused (``--fuse``).
NUMBERS = ("gemm_flops", "conv_flops", "vector_flops", "flops", "comm_bytes", "peak_bytes", "peak_bytes_fused",
           "hbm_bytes", "fits", "fits_fused", "time_step_s", "steps", "time_run_s", "est_time_s",
           "est_time_overlap_s", "est_time_fused_s", "est_time_fused_overlap_s", "comm_time_s", "comm_exposed_s",
           "comm_exposed_fused_s", "utilisation", "utilisation_fused", "bound")
FORMATS = ("csv", "json", "parquet", "markdown")
#: The precision of a row in a table without the ``precision`` column (every point bf16).
PRECISION = "bf16"


def columns(fused: bool, precision: bool = False) -> list[str]:
    config = list(CONFIG)
    if precision:
        config.insert(config.index("dtype") + 1, "precision")
    return config + [c for c in NUMBERS if fused or "fused" not in c]


def precision_of(df: pd.DataFrame) -> list[str]:
    """Each row's precision recipe: the ``precision`` column, or bf16 for a table without it."""
    return list(df["precision"]) if "precision" in df.columns else [PRECISION] * len(df)


def make_rows(points: list, results: dict, skipped: dict, hardware: list[str]) -> list[dict]:
    """Row dicts in grid order: for each point, one per hardware name (``results[point]``: a Result;
    ``skipped[point]``: the reason)."""
    rows = []
    for p in points:
        for j, hw in enumerate(hardware):
            row = {"model": p.model, "shape": p.shape, "parallel": p.parallel, "devices": p.devices,
                   "hardware": hw, "dtype": p.dtype, "precision": p.precision}
            if p in skipped:
                row.update(status="skipped", reason=skipped[p])
            else:
                r = results[p]
                row.update(status=r.status, reason=r.reason)
                if r.status == "ok":
                    row.update(r.rows[j])
            rows.append(row)
    return rows


def frame(rows: list[dict], fused: bool) -> pd.DataFrame:
    cols = columns(fused, any(r.get("precision", PRECISION) != PRECISION for r in rows))
    data = {}
    for c in cols:
        values = [r.get(c) for r in rows]
        if c in INTS:
            data[c] = pd.array(values, dtype="Int64")
        elif c.endswith("_s") or c.startswith("utilisation"):
            data[c] = pd.array([float("nan") if v is None else v for v in values], dtype="float64")
        else:
            data[c] = pd.array(["" if v is None else str(v) for v in values], dtype=object)
    return pd.DataFrame(data, columns=cols)


def best(df: pd.DataFrame) -> pd.DataFrame:
    """The rows that ran and fit, ranked per (shape, hardware) by ``time_step_s`` (ties: table order), with
    ``rank`` (1: fastest) after the configuration columns."""
    fits = "fits_fused" if "fits_fused" in df.columns else "fits"
    ok = df[(df["status"] == "ok") & (df[fits] == "yes")].copy()
    ok["_order"] = range(len(ok))
    shapes = {s: i for i, s in enumerate(dict.fromkeys(df["shape"]))}
    chips = {h: i for i, h in enumerate(dict.fromkeys(df["hardware"]))}
    ok["_g"] = [(shapes[s], chips[h]) for s, h in zip(ok["shape"], ok["hardware"])]
    ok = ok.sort_values(["_g", "time_step_s", "_order"], kind="stable")
    rank = pd.array(ok.groupby("_g", sort=False).cumcount() + 1, dtype="Int64")
    ok.insert(len(CONFIG) + ("precision" in df.columns), "rank", rank)  # (after the configuration columns)
    return ok.drop(columns=["_order", "_g"]).reset_index(drop=True)


def to_json(df: pd.DataFrame, settings: dict) -> str:
    rows = []
    for rec in df.to_dict(orient="records"):
        rows.append({k: _plain(v) for k, v in rec.items()})
    payload = {"tool": "mhlo-cost", "version": __version__, "kind": "sweep", "settings": settings, "rows": rows}
    return json_text(payload, ensure_ascii=True)


def _plain(v):
    if v is None or v is pd.NA or (isinstance(v, float) and v != v):
        return None
    if hasattr(v, "item"):  # numpy scalars: Python int / float (ints stay exact)
        return v.item()
    return v


def to_csv(df: pd.DataFrame) -> str:
    """CSV; text that a spreadsheet would evaluate (``=...``) with a leading apostrophe."""
    return csv_safe_frame(df).to_csv(index=False, lineterminator="\n")


def to_markdown(df: pd.DataFrame) -> str:
    """A compact view: times in ms, bytes in GB (decimal), utilisation in %; a column whose largest value is
    under one of its unit takes a smaller one (us, MB), and every column has digits enough for its smallest
    non-zero value (a small model's step does not read 0.00)."""
    fused = "fits_fused" in df.columns
    view = [("model", "model"), ("shape", "shape"), ("parallel", "parallel"), ("devices", "devices"),
            ("hardware", "hardware"), ("dtype", "dtype")]
    view += [(c, c) for c in ("precision", "rank") if c in df.columns]
    view += [("status", "status"), ("time_step_s", "step"), ("time_run_s", "run"), ("comm_bytes", "comm"),
             ("comm_time_s", "comm"), ("comm_exposed_fused_s" if fused else "comm_exposed_s", "exposed"),
             ("peak_bytes_fused" if fused else "peak_bytes", "peak"), ("fits_fused" if fused else "fits", "fits"),
             ("utilisation_fused" if fused else "utilisation", "util"), ("bound", "bound")]
    recs = df.to_dict(orient="records")
    shown = {c: _display(c, [_plain(r.get(c)) for r in recs]) for c, _ in view if c in _SCALE}
    heads = [f"{h} {shown[c][0]}" if c in shown else h for c, h in view]
    lines = ["| " + " | ".join(heads) + " |",
             "| " + " | ".join("---:" if c in _SCALE else "---" for c, _ in view) + " |"]
    for rec in recs:
        cells = [_cell(c, rec.get(c), rec, shown.get(c)) for c, _ in view]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


#: Column -> its default unit: (name, size in the column's own unit), then the smaller ones it may take.
_SCALE = {c: (("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)) for c in ("time_step_s", "comm_time_s", "comm_exposed_s",
                                                                    "comm_exposed_fused_s")}
_SCALE["time_run_s"] = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6))
_SCALE.update({c: (("GB", 1e9), ("MB", 1e6), ("KB", 1e3), ("B", 1)) for c in ("comm_bytes", "peak_bytes",
                                                                             "peak_bytes_fused")})
_SCALE.update({c: (("%", 0.01),) for c in ("utilisation", "utilisation_fused")})


def _display(col: str, values: list) -> tuple[str, float, int]:
    """(unit, its size, decimals) of a column of the compact view."""
    from ...views.text import decimals_for

    nums = [abs(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v]
    top = max(nums, default=0)
    units = _SCALE[col]
    unit, size = units[0]
    for name, length in units:
        unit, size = name, length
        if top >= length or not top:
            break
    return unit, size, decimals_for(nums, size, least=1 if unit == "%" else 2)


def _cell(col: str, v, rec: dict, shown: tuple | None = None) -> str:
    v = _plain(v)
    if col == "status" and rec.get("reason"):
        return f"{v}: {rec['reason']}".replace("|", "/")
    if v is None:
        return ""
    if shown is not None:
        _, size, digits = shown
        return f"{v / size:.{digits}f}"
    return str(v)


def write(df: pd.DataFrame, fmt: str, out: str | None, settings: dict) -> str | None:
    """Write the table through the one writer (:mod:`mhlo_cost.files.write`); returns the text for stdout where
    there is no ``out`` (parquet needs a file)."""
    from ...files.write import replacing, write as write_file

    if fmt == "parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise OSError("Parquet needs pyarrow: pip install 'mhlo-cost[sweep]'") from None

        with replacing(out) as tmp:
            pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp)
        return None
    text = {"csv": to_csv, "markdown": to_markdown}[fmt](df) if fmt != "json" else to_json(df, settings)
    if out and out != "-":
        write_file(out, text)
        return None
    return text


def format_of(out: str | None, fmt: str | None) -> str:
    """--format, else the output's extension, else markdown."""
    if fmt:
        return fmt
    ext = (out or "").lower().rsplit(".", 1)[-1] if out and "." in out else ""
    return {"csv": "csv", "json": "json", "parquet": "parquet", "pq": "parquet", "md": "markdown"}.get(ext, "markdown")


def is_table(path: str) -> bool:
    """Whether ``path`` is a sweep table (by its start: a CSV header or JSON of kind sweep, or Parquet)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    if head.startswith(b"PAR1"):
        return True
    text = head.decode("utf-8", "replace")
    return text.startswith(",".join(CONFIG[:6])) or (text.lstrip().startswith("{") and '"kind": "sweep"' in text)


def read(path: str) -> pd.DataFrame:
    """A sweep table written by ``mhlo-cost sweep`` (CSV, JSON or Parquet), for ``plot``."""
    low = path.lower()
    if low.endswith((".parquet", ".pq")):
        return pd.read_parquet(path)
    if low.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            return pd.DataFrame(json.load(f)["rows"])
    return pd.read_csv(path, keep_default_na=False, na_values=[""], dtype={"shape": str})
