"""A serving simulation's answer (``mhlo-cost serve --isl .. --osl .. --concurrency ..``) as a view: the setup and
the figures (:mod:`mhlo_cost.studies.serve.simstats`) as (metric, value) pairs in sections, for the shared
renderers (table, CSV, JSON, Markdown): exact ints, exact seconds; the batch sizes run as one pair (and a list in
the JSON)."""
from __future__ import annotations

from .headline import human_seconds
from .pairs import heading
from .table import Table


def sim_headline(fig: dict) -> str:
    """One line: output tokens/s, requests/s, TTFT and TPOT medians, KV utilisation, preemptions."""
    t, lat, kv = fig["throughput"], fig["latency"], fig["kv_cache"]

    def sec(v):
        return "n/a" if v is None else human_seconds(v)

    rates = ("no duration" if t["requests_per_s"] is None else
             f"{t['output_tokens_per_s']:,.1f} output tokens/s, {t['requests_per_s']:,.2f} requests/s")
    return " | ".join([rates,
                       f"TTFT p50 {sec(lat['ttft_p50_s'])}, p99 {sec(lat['ttft_p99_s'])}",
                       f"TPOT p50 {sec(lat['tpot_p50_s'])}, p99 {sec(lat['tpot_p99_s'])}",
                       f"KV cache {kv['kv_utilisation_mean']:.0%} used (max {kv['kv_utilisation_max']:.0%})",
                       f"{kv['preemptions']} preemptions"])


def sim_pairs(setup: dict, fig: dict) -> list[tuple[str, object]]:
    """The setup, then each section of the figures, in order."""
    pairs = [heading("setup"), *setup.items()]
    for section, values in fig.items():
        pairs.append(heading(section.replace("_", " ")))
        pairs += [(k, "n/a" if v is None else v) for k, v in values.items()]
    return pairs


def sim_view(setup: dict, fig: dict, histogram: list, title: str) -> Table:
    """The simulation as a table of pairs; ``histogram``: (sequences per step, steps), one pair of the batches
    (``batch_sizes_run``: ``sequences x steps``, ascending) and the JSON's ``batch_sizes`` (a key before the rows)."""
    from .. import __version__

    run = ", ".join(f"{s} x {n}" for s, n in histogram)
    pairs = sim_pairs(setup, {k: (v | {"batch_sizes_run": run} if k == "batches" else v) for k, v in fig.items()})
    return Table(title, pairs=pairs,
                 meta={"tool": "mhlo-cost", "version": __version__, "what": title, "headline": sim_headline(fig),
                       "batch_sizes": [{"sequences": s, "steps": n} for s, n in histogram]})


def sim_plot(ends, used, seqs, blocks: int, path: str, title: str = "", series: dict | None = None) -> None:
    """KV utilisation and sequences per step against time (each step at its end), one panel each; ``series``
    (several schedulers: ``--pp``, ``--dp``, ``--disaggregate``): {pool: (ends, sequences, fraction of its
    engine's KV blocks in use)}, a line per pool in each panel, in place of the one run's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from .plot import save_figure

    series = series or {"": (ends, seqs, [u / blocks for u in used])}
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    for name, (x, s, frac) in series.items():
        ax1.step(x, [100.0 * u for u in frac], where="post", linewidth=0.8, label=name or None)
        ax2.step(x, s, where="post", linewidth=0.8, label=name or None, **({} if name else {"color": "tab:orange"}))
    ax1.set_ylabel("KV blocks in use (%)")
    ax1.set_ylim(0, 100)
    ax2.set_ylabel("sequences per step")
    ax2.set_xlabel("time (s)")
    for ax in (ax1, ax2):
        ax.grid(True, alpha=0.3)
    if any(series):
        ax2.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
