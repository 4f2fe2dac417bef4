"""``train-plan --format html``: one page of a training plan, from :mod:`mhlo_cost.views.html`'s building blocks.

The header's cards (iteration time, MFU, memory per GPU), a stacked bar per pipeline stage of where its
iteration goes (compute by phase, exposed tensor-parallel communication, point-to-point, exposed
data-parallel reduction, optimizer, idle: the bubble and the wait for the last stage), the breakdown table
of the busiest device and the per-stage table (every device of a stage runs the same program). Plain SVG,
no chance, no clock: the same plan gives the same bytes.
"""
from __future__ import annotations

from .fmt import esc, time_unit
from .page import document, header, section
from .svg import Scale, legend, nice_max, open_svg, rect, text, tip, y_axis
from .table import table_html

#: One colour per component (compute in blues, communication in reds, idle grey).
COLOURS = {"forward": "#1f5fa8", "backward": "#5b8fd0", "recompute": "#8fb8e6", "tp_comm": "#c0392b",
           "cp_comm": "#e0607e", "p2p": "#e08a2e", "dp_exposed": "#7b4fa8", "optimizer": "#2e8b57",
           "idle": "#cccccc", "ep_comm": "#d4a017"}
W = 1100


def stage_bars(rows: list[dict], components: tuple) -> str:
    """One stacked bar per pipeline stage: its seconds per component (``components``: the keys of a row that
    add up to the iteration, in the order they stack)."""
    COMPONENTS = components  # noqa: N806
    if not rows:
        return ""
    top = max(sum(r[k] for k in COMPONENTS) for r in rows)
    uname, usize = time_unit(top)
    h, left, right, head, bottom = 380, 78, 16, 46, 40
    ys = Scale(0.0, nice_max(top / usize) if top > 0 else 1.0, h - bottom, head)
    step = (W - left - right) / len(rows)
    bw = min(64.0, max(1.0, step * 0.7))
    out = [open_svg(W, h, f"time per pipeline stage ({uname}), one bar per stage")]
    out += y_axis(ys, left, W - right, f"time per iteration ({uname})")
    for i, r in enumerate(rows):
        x = left + i * step + (step - bw) / 2
        acc, segs = 0.0, []
        for k in COMPONENTS:
            v = r[k] / usize
            if v > 0:
                segs.append(rect(x, ys(acc + v), bw, ys(acc) - ys(acc + v), COLOURS[k]))
                acc += v
        desc = "; ".join(f"{k} {r[k] / usize:.4g} {uname}" for k in COMPONENTS if r[k] > 0)
        label = f"stage {r['stage']} (devices {r['devices']}): {desc}"
        out.append(f'<g class="bar"{tip(label)}>' + "".join(segs)
                   + text(x + bw / 2, ys(0.0) + 16, f"stage {r['stage']}", "middle", "tick") + "</g>")
    out += legend([(k, COLOURS[k]) for k in COMPONENTS], left, 16, W - left - right)
    out.append("</svg>")
    return "".join(out)


def plan_page(fig) -> str:
    """The whole page of a plan's figures (:class:`mhlo_cost.views.plan.PlanFigures`): the header's cards, the
    stage bars and table, the breakdown of the busiest device."""
    c, mem, cards = fig.config, fig.memory, fig.cards
    gib = 2 ** 30
    head_cards = [("iteration", f"{c['iteration_s']:.4g} s", repr(c["iteration_s"])),
                  ("MFU", f"{fig.counts['mfu']:.1%}", repr(fig.counts["mfu"])),
                  ("memory per GPU (first stage)", f"{mem['total'] / gib:.2f} GiB", f"{mem['total']:,} bytes"),
                  ("GPUs", f"{cards['gpus']}", f"t {cards['t']} x p {cards['p']} x d {cards['d']}")]
    title = f"train-plan: {c['config']} on {fig.system}"
    head = header(title, esc(f"{cards['layers']} layers, hidden {cards['hidden']}, {cards['heads']} heads, "
                             f"sequence {cards['seq']}, vocabulary {cards['vocab']}, global batch "
                             f"{cards['global_batch']}"), head_cards,
                  list(zip(("schedule", "FLOPs", "utilisation", "memory"), map(esc, fig.facts))))
    stages = stage_bars(fig.stages, fig.components) + table_html(fig.stage_frame, "stages")
    sections = [
        ("stages", "Per stage", section("stages", "Per stage", stages,
                                        "Every device of a stage (its t x d GPUs) runs the same program; the bars "
                                        "add up to the iteration time. idle: the pipeline bubble, and on the "
                                        "stages before the last the wait for the LM head.")),
        ("breakdown", "Breakdown", section("breakdown", "Breakdown of the busiest device (the last stage)",
                                           table_html(fig.breakdown, "breakdown"))),
    ]
    return document(title, head, sections)


__all__ = ["plan_page", "stage_bars"]
