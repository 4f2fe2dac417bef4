"""What-if for architects, and one program across chips: the op table walked ONCE, priced again per profile.

:class:`Pricing` prices a walked :class:`~mhlo_cost.studies.study.Study` on any profile (a
:class:`~mhlo_cost.roofline.Roofline` of the same analysis and blocks: the exact counts never move, only the
time). :func:`whatif_table` answers ``mhlo-cost whatif``: per block the bound and time before and after the
changes, the time saved, and the sensitivity of each block's time (and the program's, its TOTAL row) to a 10%
gain in each parameter; :func:`pareto_table` the named chips side by side; :func:`compare_table` (``report``
and ``blocks --hardware a,b,c``) each block's time and bound on each chip and its ratio to the first.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..machines.whatif import apply, gain, unpriced
from ..views.table import Table, meta

#: The gain each sensitivity is taken for (10%: a rate x1.1, a latency /1.1).
GAIN = 0.1


@dataclass
class Pricing:
    """One walked study, priced on any profile: ``study`` (its analysis and blocks made once)."""

    study: object
    _frames: dict = field(default_factory=dict)

    def frame(self, hw):
        """(block names, step time per block, bound per block) on ``hw``, TOTAL last (the block table's rows)."""
        key = id(hw)
        if key not in self._frames:
            from ..roofline import Roofline

            f = self.study.figures
            rf = Roofline(f.analysis, hw, attention=f.attention, execution=f.execution, sdpa=f.sdpa or "flash")
            df = rf.block_frame(f.blocks)
            self._frames[key] = (hw, list(df["block"]), [float(t) for t in df[rf.step_name]], list(df["bound"]))
        return self._frames[key][1:]


def sensitivity_keys(hw, analysis, execution: str) -> list[str]:
    """The parameters whose 10% gain is tried: each matrix peak some dot or convolution of the program is priced
    at (:func:`_matrix_keys`), the vector and special function rates, HBM bandwidth, the launch overhead; the link
    (chip profiles, programs with collectives); eager mode's dispatch overhead where the profile states one."""
    keys = [f"peak.{k}" for k in _matrix_keys(hw, analysis)] + ["vector", "transcendental", "hbm_bw",
                                                                 "kernel_overhead"]
    if getattr(hw, "topology", None) is None and any(r.kind == "collective" for r in analysis.rows):
        keys += ["link_bw", "hop_latency"]
    if execution == "eager" and hw.dispatch_overhead is not None:
        keys.append("dispatch_overhead")
    return keys


def _matrix_keys(hw, analysis) -> list[str]:
    """The matrix peaks some dot or convolution of ``analysis`` is priced at on ``hw`` (a dtype without a rate
    of its own falls back along its chain: the key whose gain moves its peak)."""
    from ..machines.hardware import HardwareError, canonical_dtype

    dtypes = set()
    for r in analysis.rows:
        for t in r.operands[:2] if r.kind in ("dot", "conv") else ():
            try:
                dtypes.add(canonical_dtype(t.dtype))
            except HardwareError:  # (priced at the vector dtype: the vector key covers it)
                pass
    return [k for k in sorted(hw.matrix_flops)
            if any(gain(hw, f"peak.{k}").matrix_peak(d) != hw.matrix_peak(d) for d in dtypes)]


def _fraction(before: float, after: float) -> float:
    return (before - after) / before if before > 0 else 0.0


def sensitivities(pricing: Pricing, hw) -> dict[str, list[float]]:
    """Per parameter: per block (TOTAL last), the fraction of its time a 10% gain saves on ``hw``; the
    parameters that move no time anywhere left out."""
    _, base, _ = pricing.frame(hw)
    out = {}
    for key in sensitivity_keys(hw, pricing.study.analysis, pricing.study.figures.execution):
        _, times, _ = pricing.frame(gain(hw, key, GAIN))
        # (a time a gain does not touch may come back a rounding away from its own: below 1e-12, none)
        fractions = [x if abs(x) > 1e-12 else 0.0 for x in (_fraction(b, a) for b, a in zip(base, times))]
        if any(abs(x) > 1e-12 for x in fractions):
            out[key] = fractions
    return out


def whatif_table(study, changes, say=None) -> Table:
    """``mhlo-cost whatif``: the study's blocks priced on its profile and with ``changes``
    (:class:`~mhlo_cost.machines.whatif.Change`) made, with the sensitivities (on the changed profile)."""
    import pandas as pd

    base = study.hardware
    pricing = Pricing(study)
    changed = apply(base, changes)
    names, before, bound0 = pricing.frame(base)
    _, after, bound1 = pricing.frame(changed)
    sens = sensitivities(pricing, changed)
    data = {"block": names, "bound_before": bound0, "bound_after": bound1, "time_before_s": before,
            "time_after_s": after, "saved_s": [b - a for b, a in zip(before, after)],
            "saved": [_fraction(b, a) for b, a in zip(before, after)]}
    data["top"] = [_top(sens, i) for i in range(len(names))]
    data["top_saves"] = [max((v[i] for v in sens.values()), default=0.0) for i in range(len(names))]
    for key, fractions in sens.items():
        data[f"gain10_{key}"] = fractions
    df = pd.DataFrame(data)
    changes_said = ", ".join(str(c) for c in changes) or "none"
    notes = [f"changes: {changes_said}; bound and time before (on {base.name}) and after",
             f"gain10_KEY: the fraction of the block's time a 10% gain in KEY saves (a rate x1.1, a latency / 1.1), "
             f"priced on the changed profile; top: the key whose gain saves most (TOTAL: the program)",
             f"time: {'fused' if study.figures.execution != 'unfused' else 'op-by-op'} step time per block "
             f"(execution {study.figures.execution}); exact counts are the one walk's, only the pricing moves"]
    notes += unpriced(changes)
    m = meta(study.analysis) | {"hardware": base.name, "changes": [str(c) for c in changes]}
    return Table(f"what-if on {base.name}: {changes_said}", frame=df, notes=notes, meta=m)


def _top(sens: dict, i: int) -> str:
    best = max(sens, key=lambda k: (sens[k][i], k), default=None)
    return best if best is not None and sens[best][i] > 0 else ""


def pareto_table(study, chips, changes=()) -> Table:
    """The program's step time on each chip in ``chips`` (profiles; with the study's own, and its what-if
    variant where ``changes`` are given), beside its bf16 matrix peak, HBM bandwidth and TDP (where the
    profile states one); ``pareto``: no other chip is at least as fast with no more of the cost figure
    (TDP where every chip states one, else the bf16 peak)."""
    import pandas as pd

    pricing = Pricing(study)
    rows = [(study.hardware.name, study.hardware)]
    if changes:
        rows.append((f"{study.hardware.name} (what-if)", apply(study.hardware, changes)))
    rows += [(hw.name, hw) for hw in chips if hw.name != study.hardware.name]
    times = [pricing.frame(hw)[1][-1] for _, hw in rows]
    tdp = [hw.tdp for _, hw in rows]
    peak = [hw.matrix_peak("bf16") for _, hw in rows]
    cost = tdp if all(t is not None for t in tdp) else peak
    df = pd.DataFrame({"chip": [n for n, _ in rows], "time_s": times,
                       "bound": [pricing.frame(hw)[2][-1] for _, hw in rows],
                       "peak_bf16_tflops": [p / 1e12 for p in peak],
                       "hbm_tbytes_per_s": [hw.hbm_bandwidth / 1e12 for _, hw in rows],
                       "tdp_w": [math.nan if t is None else t for t in tdp],
                       "pareto": [_undominated(i, times, cost) for i in range(len(rows))]})
    what = "TDP" if cost is tdp else "bf16 matrix peak (no TDP in every profile)"
    return Table(None, frame=df, meta=meta(study.analysis),
                 notes=[f"pareto: no other chip is at least as fast with no more {what}"])


def _undominated(i: int, times: list, cost: list) -> bool:
    return not any(times[j] <= times[i] and cost[j] <= cost[i] and (times[j], cost[j]) != (times[i], cost[i])
                   for j in range(len(times)))


def compare_table(study, chips) -> Table:
    """Each block's step time and bound on each chip in ``chips`` (profiles, the first the reference) and the
    ratio ``first chip's time / this chip's`` (2: twice as fast): the op table walked once, each chip priced."""
    import pandas as pd

    pricing = Pricing(study)
    names, ref, _ = pricing.frame(chips[0])
    data = {"block": names}
    for hw in chips:
        _, times, bounds = pricing.frame(hw)
        data[f"{hw.name}_time_s"] = times
        data[f"{hw.name}_bound"] = bounds
        data[f"{hw.name}_ratio"] = [r / t if t > 0 else math.nan for r, t in zip(ref, times)]
    notes = [f"ratio: {chips[0].name}'s time / the chip's (2 = twice as fast); time: the step time per block "
             f"(execution {study.figures.execution})"]
    m = meta(study.analysis) | {"hardware": [hw.name for hw in chips]}
    return Table(f"blocks across chips: {', '.join(hw.name for hw in chips)}", frame=pd.DataFrame(data),
                 notes=notes, meta=m)
