"""``mhlo-cost serve``'s answers as views: one step's figures (:class:`~.serve.Figures`) as (metric, value) pairs
in sections, a sweep's as a frame; each a :class:`~mhlo_cost.views.table.Table` that the shared renderers
(:mod:`mhlo_cost.views.render`) write in every format, so the text, CSV, JSON and Markdown carry the same figures.

The metrics are the figures' own names (``kv_cache_bytes``, ``step_time_s``, ...): exact ints, exact seconds.
:func:`sweep_plot` draws a sweep's points (``--plot``) into a path the one writer gives."""
from __future__ import annotations

from .headline import human, human_seconds
from .pairs import heading
from .table import Table


def _meta(what: str, line: str | None = None) -> dict:
    from .. import __version__

    return {"tool": "mhlo-cost", "version": __version__, "what": what} | ({"headline": line} if line else {})


def _sequences(f) -> int:
    """The sequences a step runs on all its devices: the batch, in each of ``ep / tp`` attention groups."""
    ep = getattr(f, "ep", 1)
    return f.batch * (ep // f.tp if ep > 1 else 1)


def step_headline(f) -> str:
    """One line: the step's time and tokens/s, the cache, the memory per device against the chip, the bound."""
    if f.step == "decode":
        time = (f"decode: {human_seconds(f.step_time_s)} per output token, {f.tokens_per_s:,.1f} tokens/s "
                f"({f.tokens_per_s / _sequences(f):,.1f} per sequence)")
    else:
        time = f"prefill: {human_seconds(f.step_time_s)} to first token, {f.tokens_per_s:,.1f} prompt tokens/s"
    fits = "fits" if f.fits else "DOES NOT FIT"
    ep = getattr(f, "ep", 1)
    on = (f" on {f.hardware}" + (f" x{f.tp}" if f.tp > 1 and ep == 1 else "")
          + (f" x{ep} (experts over {ep}, attention tp {f.tp})" if ep > 1 else "")
          + (", one CUDA graph" if f.launch == "cuda-graphs" else "")
          + (", eager (plain generate)" if getattr(f, "execution", "compiled") == "eager" else ""))
    return " | ".join([time + on,
                       f"KV cache {human(f.kv_cache_bytes, 'B')}",
                       f"memory {human(f.memory_bytes, 'B')} per device of {human(f.capacity_bytes, 'B')}: {fits}",
                       f"{f.bound}-bound"])


def moe_pairs(moe: dict | None) -> list[tuple[str, object]]:
    """A mixture of experts' routing assumption and expert loads as lowered (``Lowered.info["moe"]``; none
    without experts)."""
    if not moe:
        return []
    return [heading("mixture of experts"), ("routing", moe["routing"]), ("routing_assumption", moe["assumption"]),
            ("expert_layers", moe["layers"]), ("expert_loads", moe["text"]), ("dropped_copies", moe["dropped"])]


def _precision(f) -> list[tuple[str, object]]:
    """The step's precision recipe, where it is not the default bf16 (a bf16 step's pairs are unchanged)."""
    return [] if f.precision == "bf16" else [("precision", f.precision)]


def _experts(f) -> list[tuple[str, object]]:
    """An expert split's figures (:mod:`mhlo_cost.studies.serve.expert`), where there is one."""
    if getattr(f, "ep", 1) <= 1:
        return []
    return [heading("expert parallel"), ("ep", f.ep), ("attention_groups", f.ep // f.tp),
            ("moe_imbalance", f.moe_imbalance), ("expert_weight_bytes", f.expert_weight_bytes),
            ("all_to_all_bytes", f.all_to_all_bytes), ("all_to_all_time_s", f.all_to_all_time_s)]


def step_pairs(f, layout=None, moe: dict | None = None) -> list[tuple[str, object]]:
    """The figures of one step in sections: the step, a mixture of experts' routing (``moe``), KV cache, memory
    per device, time, blocks."""
    pairs = [heading("step"), ("step", f.step), ("batch", f.batch), ("context", f.context), ("tokens", f.tokens),
             ("hardware", f.hardware), ("tp", f.tp), ("launch", f.launch),
             ("execution", getattr(f, "execution", "compiled")), *_precision(f), *moe_pairs(moe), *_experts(f),
             heading("KV cache")]
    if layout is not None:
        pairs.append(("kv_cache_layout", layout.describe()))
    pairs += [("kv_cache_layer_bytes", list(f.kv_cache_layer_bytes)), ("kv_cache_bytes", f.kv_cache_bytes),
              heading("memory per device" + (f" (weights and cache / {f.tp})" if f.tp > 1 else "")),
              ("weight_bytes", f.weight_bytes), ("input_bytes", f.input_bytes),
              ("activation_bytes", f.activation_bytes), ("memory_bytes", f.memory_bytes),
              ("capacity_bytes", f.capacity_bytes),
              ("fits", "yes" if f.fits else "no"),
              ("max_batch", f.max_batch),
              ("max_context", "unbounded" if f.max_context is None else f.max_context),
              ("max_context_bound", f.max_context_bound),
              heading("time " + ("per output token" if f.step == "decode" else "to first token")),
              ("step_time_s", f.step_time_s), ("tokens_per_s", f.tokens_per_s)]
    if f.step == "decode":
        pairs.append(("tokens_per_s_per_sequence", f.tokens_per_s / _sequences(f)))
    pairs += [("comm_time_s", f.comm_time_s), ("flops", f.flops), *f.flops_by_precision.items(),
              ("bytes_moved", f.bytes_moved), ("intensity", f.intensity), ("ridge", f.ridge), ("bound", f.bound)]
    if f.precision_note:
        pairs.append(("precision_note", f.precision_note))
    if f.blocks:
        pairs.append(heading("blocks (one device)"))
        for block, t, bound in f.blocks:
            pairs += [(f"{block}.est_time_s", t), (f"{block}.bound", bound)]
    return pairs


def step_view(f, what: str = "", layout=None, moe: dict | None = None) -> Table:
    """One step (``what``: the request, the title; ``layout``: its KV cache's; ``moe``: a mixture of experts'
    routing and loads) as a table of pairs."""
    return Table(what or f"{f.step} on {f.hardware}", pairs=step_pairs(f, layout, moe),
                 meta=_meta(what, step_headline(f)))


def sweep_view(figs: list, df, title: str) -> Table:
    """A sweep's points, one row each (``df``: :func:`mhlo_cost.studies.serve.grid.table` of ``figs``), the
    step's time in exact seconds."""
    at = list(df.columns).index("step_time_ms")
    df = df.drop(columns="step_time_ms")
    df.insert(at, "step_time_s", [f.step_time_s for f in figs])
    return Table(title, frame=df, meta=_meta(title))


def sweep_plot(figs: list, path: str, title: str = "") -> None:
    """tokens/s and memory per device against batch, one line per context (and tp); points that do not fit
    drawn as red crosses, the device's capacity as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from .plot import save_figure

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    series: dict = {}
    for f in figs:
        series.setdefault((f.context, f.tp), []).append(f)
    for (ctx, tp), pts in series.items():
        label = f"context {ctx}" + (f", tp {tp}" if tp > 1 else "")
        xs = [p.batch for p in pts]
        line, = ax1.plot(xs, [p.tokens_per_s for p in pts], marker="o", label=label)
        ax2.plot(xs, [p.memory_bytes / 1e9 for p in pts], marker="o", color=line.get_color(), label=label)
        bad = [p for p in pts if not p.fits]
        for ax, val in ((ax1, lambda p: p.tokens_per_s), (ax2, lambda p: p.memory_bytes / 1e9)):
            ax.scatter([p.batch for p in bad], [val(p) for p in bad], marker="x", s=80, color="red", zorder=3)
    if figs:
        ax2.axhline(figs[0].capacity_bytes / 1e9, linestyle="--", color="grey", label="device memory")
    for ax, ylabel in ((ax1, "tokens/s"), (ax2, "memory per device (GB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    ax2.legend(fontsize=8)
    fig.suptitle(title + " (x: does not fit)" if title else "x: does not fit", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
