"""Sweeps of an inference step over batch x context (x tensor-parallel degree), with lowerings and results
cached on disk so that a second sweep over the same shapes reads them instead of lowering again.

The cache (default ``$XDG_CACHE_HOME/mhlo-cost/inference``, else ``~/.cache/mhlo-cost/inference``) holds per
lowered step ``<K>.mlir.gz`` and ``<K>.json`` (the cache layout and the model's facts), K a hash of the request
and of mhlo-cost's own source files and version (a changed rule is a new key, never a stale file); per
(step, profile, tp) ``<R>.result.json``, the figures. Points that do not fit the device are kept and marked.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
from dataclasses import asdict, replace
from pathlib import Path

from ...lower.inference.cache import CacheLayout, LayerCache
from .serve import Figures, figures
from ...lower.inference.steps import Step, StepRequest, lower_step

FORMAT = 1


def default_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mhlo-cost" / "inference"


def code_hash() -> str:
    from ... import __version__

    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256(f"{__version__}/{FORMAT}".encode())
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=repr).encode()).hexdigest()[:32]


class StepCache:
    """Lowered steps and their figures on disk (``root`` None: nothing is kept)."""

    def __init__(self, root: str | os.PathLike | None):
        self.root = Path(root) if root is not None else None
        self._code = code_hash() if root is not None else ""

    def _key(self, req: StepRequest) -> str:
        return _hash({"request": req.key(), "code": self._code})

    def step(self, req: StepRequest) -> tuple[Step, bool]:
        """The lowered step (and whether it came from the cache)."""
        from ...lower.frontends import Lowered

        if self.root is None:
            return lower_step(req), False
        k = self._key(req)
        ir, meta = self.root / f"{k}.mlir.gz", self.root / f"{k}.json"
        if ir.is_file() and meta.is_file():
            try:
                m = json.loads(meta.read_text())
                layers = tuple(LayerCache(tuple(x["key"]), tuple(x["value"]), x["itemsize"], x["window"])
                               for x in m["layout"]["layers"])
                layout = CacheLayout(layers, m["layout"]["batch"], m["layout"]["context"], m["layout"]["dtype"])
                text = gzip.decompress(ir.read_bytes()).decode()
                return Step(Lowered(text=text, info=m["info"]), layout, m["weight_bytes"], m["hidden"],
                            m["layers"], req, m["positions"]), True
            except (OSError, ValueError, KeyError, TypeError, EOFError):
                pass  # a damaged entry is lowered again
        step = lower_step(req)
        self.root.mkdir(parents=True, exist_ok=True)
        ir.write_bytes(gzip.compress(step.lowered.text.encode(), mtime=0))
        meta.write_text(json.dumps({"layout": asdict(step.layout), "weight_bytes": step.weight_bytes,
                                    "hidden": step.hidden, "layers": step.layers, "positions": step.positions,
                                    "info": {k: v for k, v in step.lowered.info.items() if k != "seconds"}}))
        return step, False

    def result_path(self, req: StepRequest, hw, tp: int) -> Path | None:
        if self.root is None:
            return None
        return self.root / f"{_hash({'step': self._key(req), 'hw': hw.as_dict(), 'tp': tp})}.result.json"

    def figures(self, req: StepRequest, hw, tp: int) -> Figures | None:
        p = self.result_path(req, hw, tp)
        if p is None or not p.is_file():
            return None
        try:
            return Figures(**json.loads(p.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def put(self, req: StepRequest, hw, tp: int, fig: Figures) -> None:
        p = self.result_path(req, hw, tp)
        if p is not None:
            p.write_text(json.dumps(asdict(fig)))


def sweep(base: StepRequest, batches, contexts, hw, tps=(1,), cache: StepCache | None = None,
          stage=None, launch: str = "stream") -> list[Figures]:
    """Figures of ``base`` at every batch x context x tp, in that order; lowered once per shape; kernels
    launched by ``launch`` (:data:`~mhlo_cost.studies.serve.serve.LAUNCHES`)."""
    from .serve import launched, step_study

    hw = launched(hw, launch)
    cache = cache or StepCache(None)
    stage = stage or (lambda text: None)
    out = []
    for b in batches:
        for c in contexts:
            req = replace(base, batch=b, context=c)
            found = {tp: cache.figures(req, hw, tp) for tp in tps}
            if any(f is None for f in found.values()):
                stage(f"lowering batch {b}, context {c}")
                step, _ = cache.step(req)
                stage(f"estimating batch {b}, context {c}")
                analysis = step_study(step, hw).analysis
                for tp in tps:
                    if found[tp] is None:
                        found[tp] = figures(step, hw, tp, analysis=analysis, launch=launch)
                        cache.put(req, hw, tp, found[tp])
            out += [found[tp] for tp in tps]
    return out


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
    return df


def plot(figs: list, path: str, title: str = "") -> None:
    """tokens/s and memory per device against batch, one line per context (and tp); points that do not fit
    drawn as red crosses, the device's capacity as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    fig.savefig(path, dpi=110, metadata={"Software": None} if path.endswith(".png") else None)
    plt.close(fig)
