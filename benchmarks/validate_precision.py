"""The estimate of low-precision GEMMs against published figures: every row of
``benchmarks/data/published_precision.toml`` (fp8, fp4, int8 and int4 GEMM tables with exact shapes, each with its
source at a commit or its pull request / issue) written as a program lowered from its shape and priced with the
``compiled`` execution model on its profile; a ``weight_only`` row (w4a16 / w8a16, the weight dequantised in registers
onto the activations' matrix unit) priced by :func:`mhlo_cost.machines.precision.weight_only_time` instead, with no
fitted value of its precision, and reported as ``<precision> weight-only``.

Each source of the file has a role. The per-precision GEMM efficiency of the profiles (``efficiency_<precision>`` in
their ``[profile.<name>.gemm]`` table, :mod:`mhlo_cost.machines.gemm`) is fitted on the rows of the ``fit`` sources
only (the value at which the median of estimate / measured over them is 1: validate_published.py's rule), one value
for every profile those rows are priced on; the ``held_out`` sources are priced with that value and are what the
script reports. Prints one line per row, the fit (and whether the shipped profiles hold the same value), then per
precision and per held-out source n, median |error|, p90 and the median ratio estimate / measured, the same with
the precision priced at the bf16-fitted efficiency (what the profiles did before), and, as a check of the split,
each source priced with the value fitted on the other sources (leave one source out). Last line per precision:
``<precision>: median |error| = X% on N held-out rows``. Then the fp8 decode rows of
``published_precision_decode.toml`` (:mod:`validate_precision_decode`, all held out; ``--no-decode`` leaves them
out): ``fp8 decode: median |error| = X% on N held-out rows``.

    python benchmarks/validate_precision.py [--data FILE] [--only ID-SUBSTRING] [--no-decode] [--cache-dir DIR]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tomllib
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import validate_published as vp  # noqa: E402  (sets the environment and the import path first)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from mhlo_cost.analysis import AnalysisOptions, analyze  # noqa: E402
from mhlo_cost.machines.hardware import get_profile  # noqa: E402
from mhlo_cost.machines.precision import weight_only_time as wo_time  # noqa: E402
from mhlo_cost.roofline.estimate import Roofline  # noqa: E402

DATA = os.path.join(vp.ROOT, "benchmarks", "data", "published_precision.toml")
ROLES = ("fit", "held_out")
TIMINGS = ("kernel", "call")
TOLERANCE, MAX_STEPS, START = 0.0001, 30, 0.5  # chip_fits.py's fit rule
K_HALVES = tuple(range(0, 2049, 32))  # the k_half values tried by the fit


# -- the file ---------------------------------------------------------------------------------------------------
def load(path=DATA) -> tuple[dict, list[dict]]:
    """(source tag -> its table, rows); ValueError on a row whose source is not declared, a source without a role
    of :data:`ROLES`, a repeated id, or a ``matmul`` row priced on a profile without its precision's matrix rate
    and no ``price_note`` saying the path taken there."""
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    sources = {}
    for s in doc.get("source", []):
        if (s.get("role") not in ROLES or s.get("timing") not in TIMINGS
                or not s.get("url", "").startswith("https://")):
            raise ValueError(f"{path}: source {s.get('tag')!r}: role must be one of {ROLES}, timing one of "
                             f"{TIMINGS} and url an https address")
        if s["tag"] in sources:
            raise ValueError(f"{path}: source {s['tag']!r} declared twice")
        sources[s["tag"]] = s
    rows, seen = doc.get("m", []), set()
    for m in rows:
        if m["source"] not in sources:
            raise ValueError(f"{path}: row {m['id']!r}: source {m['source']!r} is not a [[source]] of the file")
        if m["id"] in seen:
            raise ValueError(f"{path}: row id {m['id']!r} repeated")
        seen.add(m["id"])
        if not (m["program"] == "weight_only" or m.get("price_note") or m["precision"] in
                get_profile(profile_name(m)).matrix_flops):
            raise ValueError(f"{path}: row {m['id']!r}: {profile_name(m)} has no {m['precision']} matrix rate; a "
                             "price_note must say the path the library takes there (e.g. an upcast)")
    return sources, rows


def split(sources: dict, rows: list[dict], leave_out: str | None = None) -> tuple[list[dict], list[dict]]:
    """(fit rows, held-out rows). With ``leave_out`` (a source tag): that source's rows are the held-out ones and
    every other source's rows the fit ones, whatever their role."""
    if leave_out is not None:
        return [m for m in rows if m["source"] != leave_out], [m for m in rows if m["source"] == leave_out]
    fit = [m for m in rows if sources[m["source"]]["role"] == "fit"]
    return fit, [m for m in rows if sources[m["source"]]["role"] == "held_out"]


# -- one row ------------------------------------------------------------------------------------------------------
def counted_flops(m) -> int:
    """The FLOPs of the measured call, as the sources count them: 2 x batch x m x n x k."""
    p = m["params"]
    return 2 * p["batch"] * p["m"] * p["n"] * p["k"]


def measured_s(m) -> float:
    return vp.measured_s(m, counted_flops)


def lowered_text(m) -> str:
    """The row's call as a program: [batch,] [m,k] x [k,n] in ``dtype``, the result in ``out_dtype``."""
    p = m["params"]
    if m["program"] != "matmul":
        raise ValueError(f"{m['id']}: unknown program {m['program']!r}")
    lead = (p["batch"],) if p["batch"] > 1 else ()
    a = jax.ShapeDtypeStruct(lead + (p["m"], p["k"]), jnp.dtype(p["dtype"]))
    b = jax.ShapeDtypeStruct(lead + (p["k"], p["n"]), jnp.dtype(p["dtype"]))
    out = jnp.dtype(p["out_dtype"])

    def f(x, y):
        return jnp.matmul(x, y, preferred_element_type=out)
    return jax.jit(f).lower(a, b).as_text()


def profile_name(m) -> str:
    return m.get("price_on", m["chip"])


def group(m) -> str:
    """What a row reports under: its precision, or ``<precision> weight-only`` for a ``weight_only`` program (the
    int4 / int8 weight dequantised onto the activations' matrix unit: priced with no fitted value of its own)."""
    return m["precision"] if m["program"] == "matmul" else f"{m['precision']} weight-only"


def weight_only_time(m, hw):
    """The :func:`mhlo_cost.machines.precision.weight_only_time` of a ``weight_only`` row on ``hw``."""
    p = m["params"]
    return wo_time(hw, p["batch"], p["m"], p["n"], p["k"], p["dtype"], p["act_dtype"], p.get("group", 0),
                   p.get("scale_dtype", p["act_dtype"]), p.get("zero", False), p.get("out_dtype"))


# -- the fit ------------------------------------------------------------------------------------------------------
def _replaced(pairs: tuple, key: str, value) -> tuple:
    out = {k: v for k, v in pairs if k != key}
    if value is not None:
        out[key] = value
    return tuple(sorted(out.items()))


def with_efficiency(hw, key: str, value: tuple | None):
    """``hw`` with its GEMM efficiency and k_half of dtype key ``key`` at ``value`` = (efficiency, k_half) (None:
    both removed, so that the dtype runs at the profile's bf16-fitted large-shape efficiency and k_half)."""
    eff, k_half = value if value is not None else (None, None)
    g = hw.gemm
    return dataclasses.replace(hw, gemm=dataclasses.replace(g, by_dtype=_replaced(g.by_dtype, key, eff),
                                                            k_half_by_dtype=_replaced(g.k_half_by_dtype, key, k_half)))


class Pricer:
    """Estimate / measured of rows at a given (efficiency, k_half), each program lowered and analysed once. A row
    whose source times the kernel alone (``timing = "kernel"``: a profiler's kernel duration, or events around
    launches queued back to back) is priced without the launch overhead."""

    def __init__(self, sources: dict, profiles=None):
        self.sources, self.profiles, self._done = sources, profiles, {}

    def ratio(self, m, value: tuple | None) -> float:
        if m["program"] == "weight_only":  # no fitted value: the profile's act_dtype efficiency and memory
            t = weight_only_time(m, get_profile(profile_name(m), self.profiles))
            est = t.time_s - (t.overhead_s if self.sources[m["source"]]["timing"] == "kernel" else 0.0)
            return est / measured_s(m)
        hw = with_efficiency(get_profile(profile_name(m), self.profiles), m["precision"], value)
        if m["id"] not in self._done:
            self._done[m["id"]] = analyze(lowered_text(m), AnalysisOptions(dataflow=True))
        tot = Roofline(self._done[m["id"]], hw, fuse_mode="elementwise").totals()
        est = tot["est_time_fused_s"]
        if self.sources[m["source"]]["timing"] == "kernel":
            est -= tot["est_overhead_s"]
        return est / measured_s(m)


def _efficiency_at(rows: list[dict], pricer: Pricer, k_half: int) -> float:
    """The efficiency at which the median of estimate / measured over ``rows`` is 1 with ``k_half``, from
    :data:`START` (not the shipped value: the fit must not depend on what the profiles hold)."""
    value = START
    for _ in range(MAX_STEPS):
        median = statistics.median(pricer.ratio(m, (value, k_half)) for m in rows)
        if abs(median - 1) <= TOLERANCE or (value >= 1.0 and median > 1):
            break
        value = min(1.0, value * median)
    return round(value, 3)


def fit_value(rows: list[dict], pricer: Pricer) -> tuple[float, int]:
    """(efficiency, k_half) fitted on ``rows``: for each k_half of :data:`K_HALVES` the efficiency at which the
    median ratio is 1; of those pairs the one with the least median |error| (the smallest k_half on a tie)."""
    if not rows:
        raise ValueError("no row to fit on")
    best = None
    for k_half in K_HALVES:
        eff = _efficiency_at(rows, pricer, k_half)
        err = statistics.median(abs(pricer.ratio(m, (eff, k_half)) - 1) for m in rows)
        if best is None or err < best[0] - 1e-12:
            best = (err, eff, k_half)
    return best[1], best[2]


def fits(sources, rows, pricer, leave_out=None) -> dict:
    """precision -> (efficiency, k_half) fitted on its fit rows (of :func:`split`; ``matmul`` rows only: a
    weight-only row runs on the activations' matrix unit, so no value of its precision prices it)."""
    fit_rows, _ = split(sources, rows, leave_out)
    by = defaultdict(list)
    for m in fit_rows:
        if m["program"] == "matmul":
            by[m["precision"]].append(m)
    return {p: fit_value(rs, pricer) for p, rs in sorted(by.items())}


# -- the report ---------------------------------------------------------------------------------------------------
def stat_line(label: str, ratios: list[float]) -> str:
    med, q90, d = vp.stats(ratios)
    return (f"  {label:44} n={len(ratios):3}  median |error| {med:6.1%}  p90 {q90:6.1%}  median ratio {d:.2f} "
            f"({'too slow' if d > 1 else 'too fast'})")


def shipped_line(precision: str, value: tuple, rows: list[dict], profiles=None) -> str:
    names = sorted({profile_name(m) for m in rows if m["precision"] == precision})
    now = {}
    for n in names:
        g = get_profile(n, profiles).gemm
        now[n] = (dict(g.by_dtype).get(precision), dict(g.k_half_by_dtype).get(precision))
    agree = all(v == tuple(value) for v in now.values())
    state = "the shipped values" if agree else f"the shipped values are {now}: UPDATE the profiles"
    return (f"fit: gemm.efficiency_{precision} = {value[0]}, gemm.k_half_{precision} = {value[1]} "
            f"({', '.join(names)}): {state}")


def report(sources, rows, pricer) -> list[str]:
    fitted = fits(sources, rows, pricer)
    fit_rows, held = split(sources, rows)
    fit_ids = {m["id"] for m in fit_rows}
    lines = [f"{'id':42} {'chip':9} {'priced on':9} {'role':8} {'estimate':>10} {'measured':>10} {'ratio':>6}"]
    for m in rows:
        r = pricer.ratio(m, fitted.get(m["precision"]))
        lines.append(f"{m['id']:42} {m['chip']:9} {profile_name(m):9} {'fit' if m['id'] in fit_ids else 'held':8} "
                     f"{r * measured_s(m) * 1e3:8.4f}ms {measured_s(m) * 1e3:8.4f}ms {r:6.2f}")
    lines += [shipped_line(p, v, [m for m in rows if m["program"] == "matmul"], pricer.profiles)
              for p, v in fitted.items()]
    for g in sorted({group(m) for m in rows}):
        lines += group_lines(g, sources, rows, held, fitted, pricer)
    return lines


def group_lines(g: str, sources, rows, held, fitted, pricer) -> list[str]:
    """The held-out figures of one :func:`group`: per source, all, at the bf16-fitted efficiency, leave one source
    out; last, ``<group>: median |error| = X% on N held-out rows``."""
    mine = [m for m in held if group(m) == g]
    p = mine[0]["precision"] if mine else g
    matmul = not g.endswith("weight-only")
    lines = [f"{g} (ratio = estimate / measured; held out: never fitted on"
             + ("" if matmul else "; priced on the activations' matrix unit and the memory: no fitted value") + "):"]
    if matmul and p not in fitted and mine:
        lines.append(f"  no fit source for {p}: priced with the shipped profiles' values (a declared prior)")
    for s in sorted({m["source"] for m in mine}):
        lines.append(stat_line(f"held out {s}", [pricer.ratio(m, fitted.get(p)) for m in mine if m["source"] == s]))
    if mine:
        lines.append(stat_line("held out, all", [pricer.ratio(m, fitted.get(p)) for m in mine]))
        if matmul:
            lines.append(stat_line("held out, at the bf16-fitted efficiency", [pricer.ratio(m, None) for m in mine]))
    for s in sorted({m["source"] for m in rows if group(m) == g}) if matmul else ():
        value = fits(sources, rows, pricer, leave_out=s).get(p)
        rs = [pricer.ratio(m, value) for m in rows if m["source"] == s and group(m) == g]
        lines.append(stat_line(f"leave {s} out ({value[0]}, {value[1]})" if value else
                               f"leave {s} out (no other source: the shipped values)", rs))
    lines.append(f"{g}: median |error| = "
                 + (f"{vp.stats([pricer.ratio(m, fitted.get(p)) for m in mine])[0]:.1%} on {len(mine)} "
                    "held-out rows" if mine else "- (no held-out row)"))
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=DATA, help="the published figures (default: %(default)s)")
    ap.add_argument("--only", help="price only the rows whose id contains this (the fit still uses its rows)")
    ap.add_argument("--no-decode", action="store_true",
                    help="leave out the fp8 decode rows (validate_precision_decode.py: a serving simulation each)")
    ap.add_argument("--cache-dir", help="the decode rows' step cache (default: the user cache)")
    args = ap.parse_args(argv)
    sources, rows = load(args.data)
    if args.only:
        fit_rows, _ = split(sources, rows)
        rows = [m for m in rows if args.only in m["id"] or m in fit_rows]
    print("\n".join(report(sources, rows, Pricer(sources))), flush=True)
    if not args.no_decode:
        import validate_precision_decode as vd

        decode = [r for r in vd.load() if args.only is None or args.only in r["id"]]
        print()
        for line in vd.report(decode, args.cache_dir):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
