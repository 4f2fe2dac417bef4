"""The summary of one analysis, once: the ``(metric, value)`` pairs that every format renders (table, CSV,
JSON, Markdown, the HTML page; the headline is made from them in :mod:`mhlo_cost.views.headline`). No pandas (``report``'s default view starts
faster for it).

With an estimate of a fused execution (``--fuse``), the figures of that execution come first: each
``*_fused*`` figure stands just before the unfused one it replaces (``est_time_fused_s`` before
``est_time_s``, ``peak_bytes_fused`` before ``peak_bytes``).
"""
from __future__ import annotations


def summary_pairs(analysis, *, roofline=None, fused=None, hw=None, blocks=None, steps: int = 1,
                  filtered: bool = False, params: int | None = None) -> list[tuple[str, object]]:
    """The summary of ``analysis``: its counts (with ``macs`` and ``params``), the estimate of ``roofline``
    (not for a ``filtered`` part of the program), where the memory peaks are (``fused``: the fused memory
    profile; ``blocks``: for the peak's block; ``hw``: whether it fits). ``params`` overrides the count (the
    parameters first read in a filtered part)."""
    counts = dict(analysis.summary)
    if params is not None:
        counts["params"] = params
    pairs = list(counts.items())
    if roofline is not None and not filtered:
        pairs += [(k, v) for k, v in roofline.summary(steps).items() if k not in counts]
        from ..machines.accuracy import statement

        pairs.append(("accuracy", statement(roofline.hw.name, "model",
                                            "compiled" if roofline.fusion is not None else "unfused")))
    if analysis.liveness is not None:
        from ..roofline.memory import summary_lines

        pairs += summary_lines(analysis, blocks, fused, hw)
    return chosen_first(pairs)


def chosen_first(pairs: list[tuple[str, object]]) -> list[tuple[str, object]]:
    """Each ``*_fused*`` pair moved just before the unfused pair it replaces, where there is one."""
    names = {m for m, _ in pairs}
    fused = {m.replace("_fused", "", 1): (m, v) for m, v in pairs if "_fused" in m
             and m.replace("_fused", "", 1) in names}
    moved = {m for m, _ in fused.values()}
    out = []
    for m, v in pairs:
        if m in moved:
            continue
        if m in fused:
            out.append(fused[m])
        out.append((m, v))
    return out
