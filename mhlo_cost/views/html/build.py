"""The report page of one analysis (``report --format html``) and the page of any one table (a sweep's).

Each section is there when its data is: the roofline and the times with a hardware profile; the memory
timeline when the op table or the caller gives live bytes (``*live_bytes*`` columns); block memory lines
when the block table has memory columns (``*_bytes`` beyond the bytes moved); a share by phase when the
rows carry a ``phase``. Columns that other work adds to the block table show up in the table as they are.
"""
from __future__ import annotations

import math

import pandas as pd

from ... import __version__
from ...analysis.blocks import TOTAL, block_table, row_labels
from ...machines.execution import memory_suffixes
from ..figures import summary_pairs
from ..headline import headline, step_time
from ..plot import block_label
from .charts import block_bars, block_lines, kind_colours, memory_timeline, share_bars
from .details import block_details
from .fmt import auto_prefix, esc, family, human_time
from .page import document, header, section
from .roofline_chart import caption, points, roofline_svg, roofs
from .table import table_html

#: Byte columns that count traffic, not memory held.
TRAFFIC = {"bytes_read", "bytes_written", "comm_bytes", "fused_bytes", "bytes"}
CONVENTIONS = (
    "Counts are exact integers from the IR, per device, totals over loop trips and call sites; display rounds "
    "(decimal prefixes: 1 G = 10<sup>9</sup>) and every number shows its exact value on hover. GEMM FLOPs = 2 x "
    "result elements x contracted size; 1 vector FLOP per element of elementwise work; bytes = operands read "
    "+ results written by each op; collectives move the ring volume per device (nccl-tests bus-bandwidth "
    "convention). Times are a roofline estimate: max(FLOPs / (peak x GEMM efficiency), bytes / HBM bandwidth) + "
    "launch overhead per kernel (with --fuse elementwise, per fused kernel, each attention one kernel). The full "
    "table: docs/conventions.md, &ldquo;Counting conventions&rdquo;."
)


def figures_page(fig, *, unit: str | None = None, top: int = 10) -> str:
    """The HTML report of a program's :class:`~mhlo_cost.views.figures.Figures`: its blocks, estimate, memory
    and summary (``fig.stage`` told when the page is written)."""
    memory = fig.memory
    timeline = {f"during_bytes{suffix}": prof.during for suffix, prof in memory}
    summary = fig.summary()
    fig.stage("writing the page")
    return report_page(fig.analysis, fig.blocks, roofline=fig.roofline, unit=unit, top=top,
                       timeline=timeline, memory=memory, summary=summary)


def report_page(analysis, blocks, *, roofline=None, unit: str | None = None, top: int = 10,
                timeline: pd.DataFrame | dict | None = None, title: str | None = None,
                memory: list | None = None, summary: list | None = None) -> str:
    """The HTML report of ``analysis`` (its rows grouped by ``blocks``), with the estimate ``roofline``
    (a :class:`~mhlo_cost.roofline.Roofline`) when one was made. ``unit`` (K, M, G, T) fixes the prefix
    of FLOP and byte columns; by default each column takes the one that suits it. ``timeline``: live
    bytes per op row in program order (columns or keys naming ``live_bytes``); ``memory``: ``(suffix,
    profile)`` pairs for the block table's memory columns (:func:`mhlo_cost.analysis.blocks.block_table`); ``summary``:
    the summary pairs (:func:`mhlo_cost.views.figures.summary_pairs`, made from these if not given)."""
    rf = roofline
    if summary is None:
        fused_mem = next((p for sfx, p in memory or () if sfx), None)
        summary = summary_pairs(analysis, roofline=rf, fused=fused_mem, hw=rf.hw if rf is not None else None,
                                blocks=blocks)
    fused = rf is not None and rf.fusion is not None
    if rf is not None:
        df, parts = rf.block_frame(blocks, memory=memory), rf.block_frame(blocks, parts=True, memory=memory)
    else:
        df = block_table(analysis, blocks, memory=memory)
        parts = block_table(analysis, blocks, parts=True, memory=memory)
    keys = [b for b in df["block"] if b != TOTAL]
    details = block_details(analysis, blocks, parts, rf, top, unit)
    templates = "".join(f'<template data-key="{esc(k)}">{details.get(k, "")}</template>' for k in keys)
    table = table_html(df, "blocks", unit=unit, row_keys=keys, filter_hint="filter blocks: text or /regex/")
    bars_note = ("Bars stack the estimated kernel time of GEMM / convolution kernels, of every other kernel and "
                 "of communication" + (", with elementwise work fused into its producer" if fused else "")
                 if rf is not None else "Bars stack GEMM and vector FLOPs: add --hardware NAME for times")
    sections = [
        ("per-block", "Per block", section("per-block", "Per block", block_bars(df, fused),
                                           esc(bars_note) + ". Click a bar for the block's parts and top ops.")),
        ("block-table", "Block table", section("block-table", "Block table", table + f'<div hidden>{templates}</div>',
                                          "Click a column to sort, a row for its parts and top ops; hover a "
                                          "number for its exact value. TOTAL equals the whole program.")),
        ("roofline", "Roofline", _roofline(rf)),
        ("share", "Share by kind", _share(analysis, rf)),
        ("memory", "Memory", _memory(analysis, df, blocks, rf, timeline)),
        ("summary", "Summary", _summary(summary)),
    ]
    name = title or f"{_base(analysis.source)}"
    head = header(f"mhlo-cost report: {name}", _subtitle(analysis, rf) + f'<br><b class="headline">'
                  f"{esc(headline(summary))}</b>", _cards(analysis, rf, memory, summary),
                  _facts(analysis, blocks, rf), CONVENTIONS)
    return document(f"mhlo-cost: {name}", head, [(sid, t, body) for sid, t, body in sections])


def table_page(df: pd.DataFrame, title: str, *, facts: list[tuple[str, str]] = (), unit: str | None = None,
               sections: list[tuple[str, str, str]] = ()) -> str:
    """A page of one tidy table (``report --by ...``, a sweep): sortable, filterable, exact on hover, with
    its TOTAL row (if any) kept last; ``sections`` (id, title, html) follow it."""
    head = header(title, f"mhlo-cost {esc(__version__)}", [], [(k, esc(v)) for k, v in facts])
    body = section("rows", "Table", table_html(df, "table", unit=unit),
                   f"{len(df):,} rows. Click a column to sort; hover a number for its exact value.")
    return document(title, head, [("rows", "Table", body)] + [
        (sid, t, section(sid, t, html)) for sid, t, html in sections])


def _base(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def _subtitle(analysis, rf) -> str:
    parts = [f"{esc(analysis.source)}", f"entry @{esc(analysis.entry)}"]
    if rf is not None:
        parts.append(f"estimated on {esc(rf.hw.name)}" + (", elementwise fused" if rf.fusion is not None else
                                                            ", op by op"))
    parts.append(f"mhlo-cost {esc(__version__)}")
    return " · ".join(parts)


def _cards(analysis, rf, memory: list | None = None, summary: list = ()) -> list[tuple[str, str, str]]:
    """The page's cards: counts, memory, and with an estimate the summary's step time and utilisation."""
    s = dict(analysis.summary)
    for suffix, prof in memory or ():  # the fused peak beside the unfused one
        if suffix:
            s[f"{suffix.strip('_')}_peak_bytes"] = prof.peak_bytes
    out = [
        ("GEMM + conv FLOPs", s["gemm_flops"] + s["conv_flops"], "FLOP"),
        ("vector FLOPs", s["vector_flops"], "FLOP"),
        ("transcendentals", s["transcendentals"], ""),
        ("bytes read + written", s["bytes_read"] + s["bytes_written"], "B"),
    ]
    if s["comm_ops"]:
        out.append(("communication per device", s["comm_bytes"], "B"))
    for k, v in s.items():  # memory and parameter figures that other work adds to the summary
        if (k not in TRAFFIC and family(k) == "bytes") or k.startswith("param"):
            out.append((k.replace("_", " "), v, "B" if family(k) == "bytes" else ""))
    cards = [(label, auto_prefix(int(v), u), f"{int(v):,} {u}".rstrip()) for label, v, u in out]
    cards.append(("ops" + (f" ({s['unknown_ops']} unknown)" if s["unknown_ops"] else ""), f"{s['ops']:,}",
                  f"{s['ops']:,} op executions"))
    if rf is not None:
        sm = dict(summary)
        t = step_time(sm)
        label = {"eager": " (eager)", "compiled": " (fused)", "inductor": " (inductor)"}.get(sm["execution"], "")
        cards.append(("estimated time" + label, human_time(t), repr(t)))
        u = sm.get("utilisation_fused", sm["utilisation"])
        cards.append(("utilisation of the matrix peak", f"{100 * u:.1f}%", repr(u)))
    return cards


def _facts(analysis, blocks, rf) -> list[tuple[str, str]]:
    s = analysis.summary
    kinds = ", ".join(f"{n} {k}" for k, n in blocks.kinds().items())
    facts = [("blocks", esc(f"{blocks.count}: {kinds} (found by {blocks.method})" if blocks.count else
                            f"none found ({'; '.join(blocks.notes) or blocks.method})"))]
    if analysis.unknown:
        facts.append(("unknown ops", f'<span class="warn">{s["unknown_ops"]:,} no rule knows, counted as 0: '
                                     f"{esc(', '.join(analysis.unknown))}</span>"))
    else:
        facts.append(("unknown ops", "none: every op has a rule"))
    comm = [r for r in analysis.rows if r.kind == "collective"]
    if comm:
        sizes = sorted({r.group_size for r in comm})
        kinds = sorted({r.comm_kind for r in comm})
        facts.append(("collectives", esc(f"{s['comm_ops']:,} ({', '.join(kinds)}) in groups of "
                                         f"{', '.join(map(str, sizes))} devices")))
    if rf is not None:
        hw = rf.hw
        facts.append(("hardware", esc(f"{hw.name}: {hw.description}; HBM {hw.hbm_bandwidth / 1e12:g} TB/s, "
                                      f"{hw.hbm_capacity / 1e9:g} GB; link {hw.link_bandwidth / 1e9:g} GB/s; "
                                      f"{hw.kernel_overhead * 1e6:g} us per kernel")))
    for w in analysis.warnings:
        facts.append(("warning", f'<span class="warn">{esc(w)}</span>'))
    return facts


def _roofline(rf) -> str:
    if rf is None:
        return section("roofline", "Roofline", "<p>No hardware profile: add <code>--hardware NAME</code> "
                       "(<code>mhlo-cost hardware</code> lists them) for times, the roofline and utilisation.</p>")
    pts, skipped, skipped_s = points(rf)
    fused = rf.fusion is not None
    svg = roofline_svg(pts, roofs(rf), rf.hw.hbm_bandwidth,
                       f"roofline of {'fused kernels' if fused else 'ops'} on {rf.hw.name}", fused)
    return section("roofline", "Roofline", svg, caption(pts, skipped, skipped_s, fused)
                   + " Hover a point for the op; its distance below the roof is time lost to the estimate's "
                     "per-kernel overhead.")


def _share(analysis, rf) -> str:
    rows = analysis.rows
    groupings = [("kind", [r.kind for r in rows])]
    if rows and hasattr(rows[0], "phase"):  # training phases, when the rows carry them
        groupings.append(("phase", [r.phase for r in rows]))
    if rf is not None:
        ft = rf.fusion.row_time if rf.fusion is not None else None
        values = [(ft[i] + t.comm_s if ft is not None else t.time_s) for i, t in enumerate(rf.times)]
        what, unit = "estimated time", "s"
    else:
        values = [r.gemm_flops + r.conv_flops + r.vector_flops for r in rows]
        what, unit = "FLOPs", "FLOP"
    out = []
    for by, keys in groupings:
        acc: dict[str, list] = {}
        for k, v in zip(keys, values):
            acc.setdefault(k or "(none)", []).append(v)
        items = [(k, math.fsum(v) if unit == "s" else sum(v)) for k, v in acc.items()]
        label = "op kind" if by == "kind" else by
        out.append(f"<h3>{esc(what)} by {esc(label)}</h3>" + share_bars(items, unit, f"{what} by {by}",
                                                                        kind_colours(acc)))
    return section("share", "Share by kind", "".join(out))


def _memory(analysis, df, blocks, rf, timeline) -> str:
    series = _live_series(analysis, timeline)
    out = ""
    if series:
        labels = row_labels(blocks)
        known = {b.name: b for b in blocks.blocks}
        bands, start = [], 0
        for i in range(1, len(labels) + 1):
            if i == len(labels) or labels[i] != labels[start]:
                b = known.get(labels[start][0] if labels[start] else "")
                if b is not None:
                    bands.append((start, i, b.name, b.kind, block_label(b.name, b.kind, b.index)))
                start = i
        cap = rf.hw.hbm_capacity if rf is not None else 0.0
        out += memory_timeline(series, bands, cap)
    cols = [c for c in df.columns if family(c) == "bytes" and c not in TRAFFIC]
    if cols:
        out += "<h3>per block</h3>" + block_lines(df, cols, "memory per block")
    during = any("during_bytes" in k for k in series)
    what = ("Bytes live per device while each op runs (its operands and results together: the peak is the "
            "summary's peak_bytes)" if during else "Live bytes per device after each op")
    return section("memory", "Memory", out, f"{what}, in program order; shaded bands are blocks."
                   if series else "")


def _live_series(analysis, timeline) -> dict[str, list[int]]:
    if timeline is None:
        rows = analysis.rows
        names = ("live_bytes",) + tuple("live_bytes" + sfx for sfx in memory_suffixes())
        if not rows or not any(hasattr(rows[0], a) for a in names):
            return {}
        return {a: [int(getattr(r, a)) for r in rows] for a in names if hasattr(rows[0], a)}
    items = timeline.items() if isinstance(timeline, dict) else ((c, timeline[c]) for c in timeline.columns)
    return {str(k): [int(v) for v in vals] for k, vals in items
            if "live_bytes" in str(k) or "during_bytes" in str(k)}


def _summary(pairs: list) -> str:
    from .table import plain_table

    frame = pd.DataFrame({"metric": [k for k, _ in pairs],
                          "value": [f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else
                                    (repr(v) if isinstance(v, float) else str(v)) for _, v in pairs],
                          "reads": [_reads(k, v) for k, v in pairs]})
    return section("summary", "Summary", plain_table(frame, cls="mini summary"),
                   "The whole program, exact; the same figures as <code>mhlo-cost report --format json</code>.")


def _reads(k: str, v) -> str:
    fam = family(k)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return ""
    if fam in ("flops", "bytes", "count") and isinstance(v, int):
        return auto_prefix(v, {"flops": "FLOP", "bytes": "B", "count": ""}[fam])
    if fam == "time":
        return human_time(float(v))
    if fam == "ratio":
        return f"{100 * float(v):.2f}%"
    return ""
