"""fp8 decode against published serving figures (``benchmarks/data/published_precision_decode.toml``), all held out.

Each row's model is lowered through the transformers path (``--hf``) with the row's precision recipe (fp8 linears,
an fp8 KV cache) and priced as ``benchmarks/validate_serving.py`` prices a serving row (its :func:`options` and
:func:`simulated`: the decode step fitted once per model and chip, the row's static batch or closed loop run through
the serving simulation, on ``tp`` GPUs). Nothing is fitted on these rows. Prints each row's figure against the
simulation's and their ratio (simulated / published), then ``fp8 decode: median |error| = X% on N held-out rows``.

    python benchmarks/validate_precision_decode.py [--only ID_PART] [--cache-dir DIR] [--breakdown]

``--breakdown``: each row's decode and prefill step by part first (``validate_serving.breakdown``).
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

DATA = HERE / "data" / "published_precision_decode.toml"
FIGURES = ("output_tok_s", "itl_ms")


def load(path=DATA) -> list[dict]:
    """The rows; ValueError for a row whose source is undeclared, without a recipe, or without a figure."""
    doc = tomllib.loads(Path(path).read_text())
    sources, rows, seen = doc.get("sources", {}), doc.get("row", []), set()
    for r in rows:
        if r.get("source") not in sources or not sources[r["source"]].startswith("https://"):
            raise ValueError(f"{path}: row {r.get('id')!r}: its source must be an https address of [sources]")
        if not r.get("recipe") or not any(k in r for k in FIGURES) or r["id"] in seen:
            raise ValueError(f"{path}: row {r.get('id')!r}: needs a recipe, a figure ({', '.join(FIGURES)}) and a "
                             "new id")
        seen.add(r["id"])
    return rows


def row_options(row: dict, cache_dir=None):
    """validate_serving's options for the row, its step lowered with the row's recipe."""
    import validate_serving as vs

    opts = vs.options(row, cache_dir, row.get("launch"))
    return dataclasses.replace(opts, request=dataclasses.replace(opts.request, precision=row["recipe"]))


def price(row: dict, cache_dir=None, parts: bool = False) -> dict:
    """{figure: (published, simulated)} of the row; with ``parts``, "breakdown": its steps by part."""
    import validate_serving as vs

    from mhlo_cost.studies.serve.simstudy import SimStudy

    study = SimStudy(row_options(row, cache_dir))
    got = vs.simulated(study.figures, row)
    out = {k: (row[k], got[k]) for k in FIGURES if k in row and got.get(k) is not None}
    return out | ({"breakdown": vs.breakdown(study, row)} if parts else {})


def report(rows: list[dict], cache_dir=None, parts: bool = False):
    """The report's lines, each yielded as soon as its row is priced."""
    yield (f"{'fp8 decode row':<48} {'recipe':<22} {'figure':<13} {'published':>10} {'simulated':>10} {'ratio':>7}")
    ratios = []
    for row in rows:
        try:
            figs = price(row, cache_dir, parts)
        except ValueError as e:  # the row does not fit the simulated server
            yield f"{row['id']:<48} not run: {e}"
            continue
        if "breakdown" in figs:
            yield f"{row['id']}\n{figs.pop('breakdown')}"
        for key, (pub, sim) in figs.items():
            ratios.append(sim / pub)
            yield (f"{row['id']:<48} {row['recipe']:<22} {key:<13} {pub:>10,.2f} {sim:>10,.2f} "
                   f"{sim / pub:>7.3f}")
    if ratios:
        errs = sorted(abs(r - 1) for r in ratios)
        yield (f"fp8 decode: median ratio {statistics.median(ratios):.3f}, p90 |error| "
               f"{errs[min(len(errs) - 1, int(0.9 * len(errs)))]:.1%}")
        yield f"fp8 decode: median |error| = {statistics.median(errs):.1%} on {len(ratios)} held-out rows"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DATA), help="the published figures (default: %(default)s)")
    ap.add_argument("--only", help="price only the rows whose id contains this")
    ap.add_argument("--cache-dir", help="the step cache (default: the user cache)")
    ap.add_argument("--breakdown", action="store_true", help="each row's decode and prefill step by part")
    a = ap.parse_args(argv)
    rows = [r for r in load(a.data) if a.only is None or a.only in r["id"]]
    for line in report(rows, a.cache_dir, a.breakdown):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
