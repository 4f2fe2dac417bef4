"""The picture of a what-if table (``mhlo-cost whatif -o whatif.png``): per block, its time before and after
the changes as two horizontal bars, labelled with the bound after and the parameter whose 10% gain saves most.
matplotlib (the ``plot`` extra) with the Agg backend; the bytes steady (:func:`mhlo_cost.views.plot.save_figure`)."""
from __future__ import annotations

from .plot import save_figure


def plot_whatif(df, path: str, title: str = "") -> None:
    """Draw the what-if frame ``df`` (:func:`mhlo_cost.studies.whatif.whatif_table`'s) into ``path``."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    rows = df[df["block"] != "TOTAL"].reset_index(drop=True)
    n = len(rows)
    fig, ax = plt.subplots(figsize=(9, max(2.5, 0.45 * n + 1.5)))
    ys = list(range(n))[::-1]
    before = [t * 1e3 for t in rows["time_before_s"]]
    after = [t * 1e3 for t in rows["time_after_s"]]
    ax.barh([y + 0.2 for y in ys], before, height=0.38, color="#b5b5b5", label="before")
    ax.barh([y - 0.2 for y in ys], after, height=0.38, color="#1f5fa8", label="after")
    for y, a, bound, top in zip(ys, after, rows["bound_after"], rows["top"]):
        ax.text(a, y - 0.2, f"  {bound}" + (f"; 10% {top}" if top else ""), va="center", fontsize=7)
    ax.set_xlim(0, max(before + after + [1e-9]) * 1.5)  # room for the labels
    ax.set_yticks(ys)
    ax.set_yticklabels(list(rows["block"]), fontsize=7)
    ax.set_xlabel("time per block (ms)")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
