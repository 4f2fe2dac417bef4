"""Pictures of a block table: one stacked bar per block, in program order (``mhlo-cost plot``).

With a hardware estimate (the table has ``gemm_time_s``, ``vector_time_s`` and ``comm_time_s``) a bar stacks
the time of the GEMM/convolution kernels, of everything else on the device (elementwise, reductions, data
movement) and of the collectives, in milliseconds. With ``fused`` (a table made with ``--fuse elementwise``)
the bars are the fused kernels' times and the unfused means per block kind are written under the title.
Without one a bar stacks GEMM/convolution and vector GFLOPs.

Blocks of different kinds (spatial, temporal, ...) get different colour families and hatches, and the
x labels name them by kind initial and index (``S0``, ``T0``); the rows outside blocks (embedders, final
layer) are grey and keep their names. matplotlib (the ``plot`` extra: ``pip install mhlo-cost[plot]``) runs
with the Agg backend: no display is needed.
"""
from __future__ import annotations

import pandas as pd

#: (dark, light) colours per block kind, in order of appearance; rows outside blocks are grey.
FAMILIES = [
    ("#1f5fa8", "#8fb8e6"),  # blue
    ("#d2691e", "#f5bf8e"),  # orange
    ("#2e8b57", "#9fd8b5"),  # green
    ("#7b4fa8", "#c7b0e3"),  # purple
]
GREYS = ("#555555", "#b5b5b5")
_COMM = "#c0392b"
_HATCHES = ["", "//", "..", "xx"]


#: Metadata that would change from run to run, left out per format: the same figure, the same bytes.
_STEADY = {".png": {"Software": None}, ".svg": {"Date": None}, ".pdf": {"CreationDate": None}}


def save_figure(fig, path: str, **kw) -> None:
    """``fig.savefig(path)``, byte-identical for the same figure: no date in an SVG or PDF, no software version
    in a PNG, and the SVG's element ids from a fixed salt (matplotlib draws a random one otherwise)."""
    import os

    import matplotlib

    meta = _STEADY.get(os.path.splitext(str(path))[1].lower())
    with matplotlib.rc_context({"svg.hashsalt": "mhlo-cost"}):
        fig.savefig(path, metadata=meta, **kw)


def block_label(block: str, kind: str, index) -> str:
    if kind and index is not None and not pd.isna(index):
        return f"{kind[:1].upper()}{int(index)}"
    return block


def plot_blocks(df: pd.DataFrame, path: str, title: str = "", fused: bool = False) -> None:
    """Draw the block table ``df`` (as :func:`mhlo_cost.analysis.blocks.block_table` or
    :meth:`mhlo_cost.roofline.Roofline.block_frame` make it) into ``path`` (.png, .svg or .pdf)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from ..analysis.blocks import TOTAL

    d = df[df["block"] != TOTAL].reset_index(drop=True)
    if "part" in d.columns:
        raise ValueError("plot_blocks() takes a block table without parts")
    layers, ylabel, note = _layers(d, fused)
    kinds = [k for k in dict.fromkeys(d["kind"]) if k]
    family = {k: FAMILIES[i % len(FAMILIES)] for i, k in enumerate(kinds)}
    hatch = {k: _HATCHES[i % len(_HATCHES)] for i, k in enumerate(kinds)}
    n = len(d)
    width = max(8.0, min(40.0, 0.22 * n + 3))
    fig, ax = plt.subplots(figsize=(width, 5.2), dpi=110)
    _stack(ax, d, layers, family, hatch)
    labels = [block_label(b, k, i) for b, k, i in zip(d["block"], d["kind"], d["index"])]
    ax.set_xticks(list(range(n)))
    ax.set_xticklabels(labels, rotation=90, fontsize=7 if n > 40 else 8, family="monospace")
    for tick, k in zip(ax.get_xticklabels(), d["kind"]):
        tick.set_color(family.get(k, GREYS)[0])
    ax.set_xlim(-0.7, n - 0.3)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    if note:  # under the title, wrapped to the figure's width
        import textwrap

        note = "\n".join(textwrap.wrap(note, width=int(width * 9)))
    if title and note:
        fig.suptitle(title, fontsize=11)
        ax.set_title(note, fontsize=8, color="#333333")
    elif title:
        ax.set_title(title, fontsize=11)
    ax.legend(handles=_legend(d, layers, kinds, family, hatch), fontsize=8, loc="upper left",
              bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def _layers(d: pd.DataFrame, fused: bool) -> tuple[list, str, str]:
    """The stacked layers ``(name, values, level)``, the y label, and a note (the unfused time per block kind
    beside the fused one) for the block table ``d``: estimated times where it has them, else FLOPs."""
    if not {"gemm_time_s", "vector_time_s", "comm_time_s"} <= set(d.columns):
        gemm = (d["gemm_flops"].astype(float) + d["conv_flops"].astype(float)) / 1e9
        return [("GEMM / conv", gemm, 0), ("vector", d["vector_flops"].astype(float) / 1e9, 1)], \
            "GFLOPs per forward", ""
    fused = fused and {"gemm_time_fused_s", "vector_time_fused_s"} <= set(d.columns)
    scale, unit = 1e3, "ms"
    suffix = "_fused_s" if fused else "_s"
    layers = [("GEMM / conv kernels", d[f"gemm_time{suffix}"].astype(float) * scale, 0),
              ("other kernels (vector, memory)", d[f"vector_time{suffix}"].astype(float) * scale, 1),
              ("communication", d["comm_time_s"].astype(float) * scale, 2)]
    model = "eager" if "execution" in d.columns and "eager" in set(d["execution"]) else "fused"
    ylabel = f"estimated time per forward ({unit})" + (f", {model}" if fused else "")
    kinds = [k for k in dict.fromkeys(d["kind"]) if k]
    if not fused or not kinds:
        return layers, ylabel, ""

    def mean(col):  # the unfused figure, every op its own kernel: an upper bound, per block kind
        return ", ".join(f"{k} {d[d['kind'] == k][col].astype(float).mean() * scale:.3g}" for k in kinds)
    note = (f"unfused (every op its own kernel), mean per block: {mean('est_time_s')} {unit}; "
            f"{model}: {mean('est_time_fused_s')} {unit}")
    return layers, ylabel, note


def _stack(ax, d: pd.DataFrame, layers: list, family: dict, hatch: dict) -> None:
    """One bar per block, the layers stacked: each kind's family shade (communication in its own colour)."""
    n = len(d)
    bottom = [0.0] * n
    for _, values, level in layers:
        vals = [float(v) for v in values]
        if not any(vals):
            continue
        colours = [_COMM if level == 2 else family.get(k, GREYS)[level] for k in d["kind"]]
        bars = ax.bar(list(range(n)), vals, bottom=bottom, color=colours, edgecolor="white", linewidth=0.4,
                      width=0.8)
        for b, k in zip(bars, d["kind"]):
            if hatch.get(k, ""):
                b.set_hatch(hatch[k])
        bottom = [b + v for b, v in zip(bottom, vals)]


def _legend(d: pd.DataFrame, layers: list, kinds: list, family: dict, hatch: dict) -> list:
    from matplotlib.patches import Patch

    handles = []
    present = [lvl for _, v, lvl in layers if any(float(t) for t in v)]
    shades = {0: "dark", 1: "light"}
    for name, _, level in layers:
        if level not in present:
            continue
        if level == 2:
            handles.append(Patch(facecolor=_COMM, label=name))
        else:
            handles.append(Patch(facecolor=GREYS[level], label=f"{name} ({shades[level]} shade)"))
    for k in kinds:
        handles.append(Patch(facecolor=family[k][0], hatch=hatch[k], edgecolor="white",
                             label=f"{k} blocks ({k[:1].upper()}n)"))
    if len(kinds) < len(d["kind"]) and any(not k for k in d["kind"]):
        handles.append(Patch(facecolor=GREYS[0], label="outside blocks"))
    return handles


def _bands(labels: list, kinds: dict) -> list[tuple[int, int, str, str]]:
    """Contiguous runs (start, end, label, kind) of the same block label."""
    out: list = []
    for i, lab in enumerate(labels):
        if out and out[-1][2] == lab and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1, lab, out[-1][3])
        else:
            out.append((i, i + 1, lab, kinds.get(lab, "")))
    return out


def _byte_unit(top: int) -> tuple[float, str]:
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if top >= scale:
            return scale, unit
    return 1.0, "bytes"


def _capacity_line(ax, hbm_bytes: int | None, shown: bool, scale, unit: str, data_top: int) -> None:
    """The chip's HBM capacity: a dashed line where ``shown``, else (a capacity given) only named in the legend,
    since an axis up to it would flatten the data."""
    if shown:
        ax.axhline(hbm_bytes / scale, color="#7b4fa8", linestyle="--", linewidth=1.0,
                   label=f"HBM capacity {hbm_bytes / scale:.3g} {unit}")
    elif hbm_bytes:
        cap_scale, cap_unit = _byte_unit(hbm_bytes)
        ax.plot([], [], color="#7b4fa8", linestyle="--", linewidth=1.0,
                label=f"HBM capacity {hbm_bytes / cap_scale:.3g} {cap_unit}, off the scale "
                      f"(peak {100 * data_top / hbm_bytes:.2g}% of it)")


def plot_memory(path: str, labels: list[str], kinds: dict, unfused, fused=None, hbm_bytes: int | None = None,
                title: str = "", fused_label: str = "fused elementwise") -> None:
    """Live bytes (while each op runs) against program order into ``path``: one colour band per block (its
    kind's family, as :func:`plot_blocks` colours them), the unfused line, the fused one where given, each peak
    marked (its value in the legend), and the chip's HBM capacity as a horizontal line where given and within
    twice the peak; the axis is scaled to the data, not to the chip."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    data_top = max([unfused.peak_bytes] + ([fused.peak_bytes] if fused is not None else []))
    cap_shown = bool(hbm_bytes) and hbm_bytes <= 2 * max(data_top, 1)  # the chip's line only where in reach
    top = max(data_top, hbm_bytes if cap_shown else 0)
    scale, unit = _byte_unit(top)
    fig, ax = plt.subplots(figsize=(12, 5.2), dpi=110)
    kind_order = [k for k in dict.fromkeys(kinds.values()) if k]
    family = {k: FAMILIES[i % len(FAMILIES)] for i, k in enumerate(kind_order)}
    for j, (s, e, lab, kind) in enumerate(_bands(labels, kinds)):
        colour = family.get(kind, GREYS)[1]
        ax.axvspan(s - 0.5, e - 0.5, color=colour, alpha=0.35 if j % 2 else 0.2, linewidth=0)
    x = range(len(labels))
    lines = [("unfused (every op its own kernel)", unfused, "#1a1a1a")]
    if fused is not None:
        lines.append((fused_label, fused, "#c0392b"))
    for name, prof, colour in lines:  # each peak marked on the line and named in the legend: no label collides
        peak = f"peak {prof.peak_bytes / scale:.3g} {unit}"
        where = f" at op {prof.peak_row}" if prof.peak_row is not None else " (the arguments)"
        ax.plot(x, [v / scale for v in prof.during], color=colour, linewidth=0.9, label=f"{name}: {peak}{where}")
        if prof.peak_row is not None:
            ax.plot([prof.peak_row], [prof.peak_bytes / scale], marker="v", color=colour, markersize=8)
    _capacity_line(ax, hbm_bytes, cap_shown, scale, unit, data_top)
    ax.set_xlim(-0.5, max(len(labels), 1) - 0.5)
    ax.set_ylim(0, top / scale * 1.08)
    ax.set_xlabel("op, in program order (bands: blocks)")
    ax.set_ylabel(f"live bytes per device ({unit})")
    ax.grid(axis="y", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=11)
    from matplotlib.patches import Patch

    handles, _ = ax.get_legend_handles_labels()
    handles += [Patch(facecolor=family[k][1], alpha=0.5, label=f"{k} blocks") for k in kind_order]
    if any(not kinds.get(lab) for lab in labels):
        handles.append(Patch(facecolor=GREYS[1], alpha=0.5, label="outside blocks"))
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
