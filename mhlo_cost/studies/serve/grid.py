"""Sweeps of an inference step over batch x context (x tensor-parallel degree), with lowerings and results
cached on disk so that a second sweep over the same shapes reads them instead of lowering again.

The cache is the one of :mod:`mhlo_cost.files.cache` (under the cache root, ``--cache-dir``): per lowered step
a ``serve/steps`` entry (:data:`STEPS`: the cache layout and the model's facts, the IR gzipped as its blob),
keyed by the request; per (step, profile, tp) a ``serve/figures`` entry (:data:`FIGURES`), the figures. Every
key holds the code hash: a changed rule is a new key, never a stale figure. Points that do not fit the device
are kept and marked.
"""
from __future__ import annotations

import gzip
import os
import zlib
from dataclasses import asdict, replace
from typing import Callable

from ...files.cache import AMOUNT, ANY, COUNT, FLAG, POSITIVE, TEXT, DiskCache, ListOf, MapOf, Maybe, OneOf, \
    Record, Schema, TupleOf
from ...lower.inference.cache import CacheLayout, LayerCache
from .serve import LAUNCHES, Figures, figures
from ...lower.inference.steps import Step, StepRequest, lower_step

_SHAPE = ListOf(COUNT)
#: A lowered step's facts (its IR is the entry's blob, gzipped).
STEPS = Schema("serve/steps", 2, Record({
    "layout": Record({"layers": ListOf(Record({"key": _SHAPE, "value": _SHAPE, "itemsize": POSITIVE,
                                               "window": Maybe(POSITIVE)}, {"scale_bytes": COUNT})),
                      "batch": POSITIVE, "context": POSITIVE, "dtype": TEXT}),
    "weight_bytes": COUNT, "hidden": POSITIVE, "layers": POSITIVE, "positions": Maybe(POSITIVE),
    "info": MapOf(ANY)}), blob=True)
#: One step's :class:`~.serve.Figures` on one profile and tp.
FIGURES = Schema("serve/figures", 2, Record({
    "step": TEXT, "batch": POSITIVE, "context": POSITIVE, "tokens": POSITIVE, "hardware": TEXT, "tp": POSITIVE,
    "kv_cache_bytes": COUNT, "kv_cache_layer_bytes": ListOf(COUNT), "weight_bytes": COUNT,
    "activation_bytes": COUNT, "memory_bytes": COUNT, "capacity_bytes": COUNT, "fits": FLAG, "flops": COUNT,
    "bytes_moved": COUNT, "step_time_s": AMOUNT, "comm_time_s": AMOUNT, "tokens_per_s": AMOUNT,
    "intensity": AMOUNT, "ridge": AMOUNT, "bound": TEXT, "max_batch": COUNT, "max_context": Maybe(COUNT),
    "blocks": ListOf(TupleOf((TEXT, AMOUNT, TEXT))), "launch": OneOf(LAUNCHES), "input_bytes": COUNT,
    "max_context_bound": OneOf(("memory", "positions", "none"))},
    {"precision": TEXT, "flops_by_precision": MapOf(COUNT), "precision_note": TEXT, "execution": TEXT,
     "ep": POSITIVE, "moe_imbalance": AMOUNT, "all_to_all_bytes": COUNT, "all_to_all_time_s": AMOUNT,
     "expert_weight_bytes": COUNT}))


class StepCache:
    """Lowered steps and their figures under the cache root ``root`` (None: nothing is kept); ``note(text)``:
    told of an entry not trusted or not kept."""

    def __init__(self, root: str | os.PathLike | None, note: Callable[[str], None] | None = None):
        self.root = root
        self.steps = DiskCache(root, STEPS, note)
        self.figures_kept = DiskCache(root, FIGURES, note)

    def step(self, req: StepRequest) -> tuple[Step, bool]:
        """The lowered step (and whether it came from the cache). A step lowered with its decoder layers traced
        once (the serve grid's, :mod:`~mhlo_cost.lower.frontends.torchax_once`: the same ops, shorter location
        frames) is kept under a key of its own, so that a plain ``serve`` never reads its IR."""
        from ...lower.frontends.torchax_once import enabled

        key = {"step": req.key(), "layers_traced_once": True} if enabled() else req.key()
        found = self.steps.get_blob(key)
        step = _step_of(req, *found) if found is not None else None
        if step is not None:
            return step, True
        if found is not None:
            self.steps.note(f"cache: the entry {self.steps.path(key)} is not trusted (its IR is not gzipped "
                            "text); computed again")
        step = lower_step(req)
        info = {k: v for k, v in step.lowered.info.items() if k != "seconds"}
        self.steps.put(key, {"layout": asdict(step.layout), "weight_bytes": step.weight_bytes,
                                   "hidden": step.hidden, "layers": step.layers, "positions": step.positions,
                                   "info": info},
                       gzip.compress(step.lowered.text.encode(), mtime=0))
        return step, False

    def _figures_request(self, req: StepRequest, hw, tp: int, how: dict | None = None) -> dict:
        """The key of a step's figures; ``how``: the pricing beyond the compiled one-device default (the
        execution, an expert split), absent where there is none (those keys unchanged)."""
        return {"step": req.key(), "hw": hw.as_dict(), "tp": tp} | ({"how": how} if how else {})

    def figures(self, req: StepRequest, hw, tp: int, how: dict | None = None) -> Figures | None:
        kept = self.figures_kept.get(self._figures_request(req, hw, tp, how))
        if kept is None:
            return None
        kept["blocks"] = [tuple(b) for b in kept["blocks"]]
        return Figures(**kept)

    def put(self, req: StepRequest, hw, tp: int, fig: Figures, how: dict | None = None) -> None:
        self.figures_kept.put(self._figures_request(req, hw, tp, how), asdict(fig))


def _step_of(req: StepRequest, meta: dict, blob: bytes) -> Step | None:
    """The :class:`Step` of a kept entry (None where its blob is not the gzip of a text)."""
    from ...lower.frontends import Lowered

    try:
        text = gzip.decompress(blob).decode("utf-8")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError):
        return None
    m = meta["layout"]
    layers = tuple(LayerCache(tuple(x["key"]), tuple(x["value"]), x["itemsize"], x["window"],
                              x.get("scale_bytes", 0)) for x in m["layers"])
    layout = CacheLayout(layers, m["batch"], m["context"], m["dtype"])
    return Step(Lowered(text=text, info=meta["info"]), layout, meta["weight_bytes"], meta["hidden"], meta["layers"],
                req, meta["positions"])


def pricing(execution: str = "compiled", split=None) -> dict:
    """The ``how`` of a figures key (:meth:`StepCache.figures`): empty for the compiled step without an expert
    split."""
    how = {"execution": execution} if execution != "compiled" else {}
    if split is not None and split.ep > 1:
        how |= {"ep": split.ep, "moe_imbalance": str(split.imbalance)}
    return how


def sweep(base: StepRequest, batches, contexts, hw, tps=(1,), cache: StepCache | None = None,
          stage=None, launch: str = "stream", note=None, fit: bool = True, execution: str = "compiled",
          split=None, jobs: int = 1, check=None) -> list[Figures]:
    """Figures of ``base`` at every batch x context x tp, in that order; kernels launched by ``launch``
    (:data:`~mhlo_cost.studies.serve.serve.LAUNCHES`). Lowered once per shape, or, where it lowers fewer, a few
    shapes lowered and the others' op tables fitted from them (:mod:`.fitted`; ``note(text)`` told where the
    fit cannot be made and every shape is lowered; ``fit`` False: every shape lowered); priced under
    ``execution`` (eager: every shape lowered), the experts split by ``split`` (:mod:`.expert`). ``jobs`` 2 or
    more: a fitted sweep's steps lowered in a second process while this one walks, fits and prices them
    (:mod:`.warm`; the same figures). ``check()``: run before anything is lowered (once the second process has
    started: the checks that read the model's configuration import the frameworks beside its own imports)."""
    from .serve import launched

    hw = launched(hw, launch)
    how = pricing(execution, split)
    cache = cache or StepCache(None)
    stage = stage or (lambda text: None)
    found = {}
    for b in batches:
        for c in contexts:
            req = replace(base, batch=b, context=c)
            found.update({(b, c, tp): cache.figures(req, hw, tp, how) for tp in tps})
    todo = [(b, c) for b in batches for c in contexts if any(found[b, c, tp] is None for tp in tps)]
    fit = fit and execution == "compiled"  # (the fit is of the compiled step's kernels)
    warmer = None
    if fit and jobs > 1 and todo and cache.root is not None:
        from .warm import Warmed, start

        warmer = start(StepCache, base, todo, cache.root, note)
        cache = Warmed(cache, warmer)
        stage("the steps lowered in a second process")
    try:
        if check is not None:
            check()
        _sweep_here(base, todo, found, hw, tps, cache, stage, launch, note or (lambda text: None), fit, execution,
                    split, how)
    finally:
        if warmer is not None:
            warmer.stop()
    return [found[b, c, tp] for b in batches for c in contexts for tp in tps]


def _sweep_here(base, todo, found, hw, tps, cache, stage, launch, note, fit, execution, split, how) -> None:
    """:func:`sweep`'s ``todo`` points ((batch, context) pairs) swept in this process, into ``found``: the grid's
    fitted points priced as soon as they are made (:func:`.fitted.fitted_steps`' ``ready``), while a second
    process, where there is one, lowers the points left (:mod:`.warm`), then the others."""
    from ..gridfit import FitFailed
    from .fitted import fitted_steps
    from .onelayer import Layered
    from .serve import step_study

    made, done = {}, set()

    def price(points) -> None:
        for b, c in points:
            done.add((b, c))
            req = replace(base, batch=b, context=c)
            step, analysis = made.get((b, c), (None, None))
            if isinstance(analysis, Layered):  # (at the fit's depths: priced from one layer where its check holds)
                stage(f"pricing batch {b}, context {c}")
                try:
                    _put(found, b, c, tps, lambda tp: analysis.figures(step, hw, tp, launch, split), cache, req, hw,
                         how)
                    continue
                except FitFailed as e:  # (its layers do not repeat at this point: lowered at full depth)
                    note(f"serve: batch {b}, context {c} lowered at full depth: {e}")
                    step = None
            if step is None:
                stage(f"lowering batch {b}, context {c}")
                step, _ = cache.step(req)
                stage(f"estimating batch {b}, context {c}")
                analysis = step_study(step, hw, execution=execution).analysis
            _put(found, b, c, tps, lambda tp: figures(step, hw, tp, analysis=analysis, launch=launch,
                                                      execution=execution, split=split), cache, req, hw, how)

    def ready(grid: dict) -> None:
        made.update(grid)
        price([p for p in todo if p in grid])

    if todo and fit:
        made.update(fitted_steps(base, todo, hw, cache, stage, note, ready=ready))
    price([p for p in todo if p not in done])


def _put(found: dict, b: int, c: int, tps, priced, cache, req, hw, how) -> None:
    """The figures ``priced(tp)`` of each ``tp`` not found yet at (``b``, ``c``), into ``found`` and the cache."""
    for tp in tps:
        if found[b, c, tp] is None:
            found[b, c, tp] = priced(tp)
            cache.put(req, hw, tp, found[b, c, tp], how)


COLUMNS = ("batch", "context", "tp", "kv_cache_bytes", "weight_bytes", "input_bytes", "activation_bytes",
           "memory_bytes", "fits", "step_time_ms", "tokens_per_s", "intensity", "bound", "max_batch")


def table(figs: list) -> "pd.DataFrame":  # noqa: F821
    """One row per point; ``fits`` is ``no`` where weights + cache + inputs + activations exceed the device."""
    import pandas as pd

    from ...analysis.series import int_series

    data = {c: [] for c in COLUMNS}
    for f in figs:
        d = f.row()
        d["fits"] = "yes" if f.fits else "no"
        d["step_time_ms"] = f.step_time_s * 1e3
        for c in COLUMNS:
            data[c].append(d[c])
    df = pd.DataFrame(data)
    for c in ("batch", "context", "tp", "kv_cache_bytes", "weight_bytes", "input_bytes", "activation_bytes",
              "memory_bytes", "max_batch"):
        df[c] = int_series(data[c])
    return _priced_as(df, figs)


def _priced_as(df, figs: list):
    """The execution (where not compiled) and the expert split (where there is one) as columns after ``tp``:
    a compiled sweep without ``--ep`` keeps its columns."""
    from ...analysis.series import int_series

    at = list(df.columns).index("tp") + 1
    if any(f.ep > 1 for f in figs):
        for i, c in enumerate(("ep", "moe_imbalance", "all_to_all_bytes")):
            values = [getattr(f, c) for f in figs]
            df.insert(at + i, c, values if c == "moe_imbalance" else int_series(values))
    if any(f.execution != "compiled" for f in figs):
        df.insert(at, "execution", [f.execution for f in figs])
    return df
