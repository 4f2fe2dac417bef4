"""``mhlo-cost plot`` of a sweep table: for each shape (rows) and hardware profile (columns), a bar per
strategy (parallel:devices, and the precision recipe where the sweep crossed one) of the estimated time per step,
with the peak memory per device marked on a second axis (a diamond; the chip's HBM a dashed line) and the
strategies that do not fit hatched.
Skipped and failed points have no bar."""
from __future__ import annotations

import pandas as pd

from .plot import save_figure


def plot_sweep(df: pd.DataFrame, path: str, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    ok = df[df["status"] == "ok"]
    if ok.empty:
        raise ValueError("the sweep table has no point that ran (status ok): nothing to plot")
    fused = "peak_bytes_fused" in df.columns
    peak_col, fits_col = ("peak_bytes_fused", "fits_fused") if fused else ("peak_bytes", "fits")
    shapes = list(dict.fromkeys(df["shape"]))
    chips = list(dict.fromkeys(df["hardware"]))
    strategies = list(dict.fromkeys(_keys(df)))
    fig, axes = plt.subplots(len(shapes), len(chips), figsize=(1.2 + 0.9 * len(strategies) * len(chips),
                                                               1.0 + 2.6 * len(shapes)), squeeze=False)
    for i, shape in enumerate(shapes):
        for j, chip in enumerate(chips):
            _panel(axes[i][j], ok[(ok["shape"] == shape) & (ok["hardware"] == chip)], strategies, peak_col, fits_col)
            axes[i][j].set_title(f"{shape} on {chip}", fontsize=9)
    fig.suptitle(title or "estimated time per step by strategy (diamond: peak memory per device)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def _keys(df: pd.DataFrame) -> list[str]:
    """A bar's name per row: ``parallel:devices``, and the precision recipe where the table has that column and
    the row's is not bf16 (a table without the column: every point bf16)."""
    recipes = df["precision"] if "precision" in df.columns else ["bf16"] * len(df)
    return [f"{p}:{d}" + ("" if r == "bf16" else f" {r}") for p, d, r in zip(df["parallel"], df["devices"], recipes)]


def _panel(ax, rows: pd.DataFrame, strategies: list[str], peak_col: str, fits_col: str) -> None:
    by = dict(zip(_keys(rows), rows.to_dict(orient="records")))
    xs = range(len(strategies))
    times = [by[s]["time_step_s"] * 1e3 if s in by else 0.0 for s in strategies]
    hatch = ["//" if s in by and by[s][fits_col] != "yes" else "" for s in strategies]
    bars = ax.bar(xs, times, color="#4c72b0")
    for b, h in zip(bars, hatch):
        b.set_hatch(h)
    ax.set_ylabel("ms per step", fontsize=8)
    ax.set_xticks(list(xs), strategies, rotation=45, ha="right", fontsize=7)
    mem = ax.twinx()
    peaks = [(x, by[s][peak_col] / 1e9) for x, s in zip(xs, strategies) if s in by]
    mem.plot([x for x, _ in peaks], [g for _, g in peaks], "D", color="#c44e52", markersize=5, linestyle="none")
    if len(rows):
        mem.axhline(float(rows["hbm_bytes"].iloc[0]) / 1e9, color="#c44e52", linestyle="--", linewidth=0.8)
    mem.set_ylim(bottom=0)
    mem.set_ylabel("peak GB / device", fontsize=8, color="#c44e52")
