"""The estimate on chips beyond A100 / H100 / H200 against published measurements: every figure of
``benchmarks/data/published_chips.toml`` (GEMM tables, attention kernels, norm kernels, each with its source and
exact configuration) priced by the row pricing of ``benchmarks/validate_published.py`` (the same programs, the
``compiled`` execution model, the row's chip profile).

Nothing is fitted to these rows: the profiles are datasheet numbers with documented default efficiencies, so every
row is held out. Prints one line per figure, then per chip n, the median |error| and the median ratio estimate /
measured, and per chip and source the same; last line the median |error| over every row.

    python benchmarks/validate_chips.py [--hardware-file FILE] [--only ID-SUBSTRING] [--chip NAME]
                                         [--data FILE] [--write-accuracy] [--write-docs]

``--hardware-file`` adds profiles (a user file, searched before the shipped catalogue); a row whose chip has no
profile is listed as not priced. ``--write-accuracy`` rewrites the per-chip table of
``mhlo_cost/machines/data/accuracy.toml`` (the accuracy line of a report on that chip); ``--write-docs`` rewrites the
table of ``docs/chips.md``.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
import tomllib
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import validate_published as vp  # noqa: E402  (sets the environment and the import path first)

from mhlo_cost.files.atomic import write_bytes  # noqa: E402
from mhlo_cost.machines.catalogue import HardwareError, get_profile, load_profiles  # noqa: E402

DATA = os.path.join(vp.ROOT, "benchmarks", "data", "published_chips.toml")
DOCS = os.path.join(vp.ROOT, "docs", "chips.md")
DOCS_MARKER = "<!-- table: written by benchmarks/validate_chips.py --write-docs -->"
HELD_OUT = "every row is held out: nothing in the profiles was fitted to these measurements"


def source_name(url: str) -> str:
    """A short name of a row's source: the GitHub or Hugging Face repository, else the host."""
    m = re.search(r"github\.com/([^/]+/[^/]+)", url) or re.search(r"huggingface\.co/datasets/([^/ ]+/[^/ ]+)", url)
    if m:
        return m.group(1)
    m = re.search(r"https?://([^/ ]+)", url)
    return m.group(1) if m else url.split()[0]


def load_rows(path=DATA) -> list[dict]:
    with open(path, "rb") as f:
        return tomllib.load(f)["m"]


def price(rows, profiles=None):
    """(results, unpriced): results a list of (chip, category, source, id, estimate s, measured s, ratio) per row
    whose chip has a profile; unpriced the ids of the others, by chip."""
    results, unpriced = [], defaultdict(list)
    for m in rows:
        try:
            chip = get_profile(m["chip"], profiles).name
        except HardwareError:
            unpriced[m["chip"]].append(m["id"])
            continue
        est, meas = vp.estimated_s(m, profiles), vp.measured_s(m)
        if not (est > 0 and meas > 0):
            raise ValueError(f"{m['id']}: estimate {est} s, measured {meas} s (both must be positive)")
        results.append((chip, m["category"], source_name(m["source"]), m["id"], est, meas, est / meas))
    return results, dict(unpriced)


def per_chip(results) -> dict:
    """chip -> {category or 'overall': (median |error|, median ratio, n)} and 'sources': sorted source names."""
    out = {}
    for chip in sorted({r[0] for r in results}):
        mine = [r for r in results if r[0] == chip]
        table = {}
        for cat in vp.CATEGORIES + ("overall",):
            rs = [r[6] for r in mine if cat in (r[1], "overall")]
            if rs:
                med, _, d = vp.stats(rs)
                table[cat] = (med, d, len(rs))
        table["sources"] = sorted({r[2] for r in mine})
        out[chip] = table
    return out


def _line(label, ratios) -> str:
    med, q90, d = vp.stats(ratios)
    way = "too slow" if d > 1 else "too fast"
    return (f"  {label:42} n={len(ratios):3}  median |error| {med:6.1%}  p90 {q90:6.1%}  "
            f"median ratio {d:.2f} ({way})")


def summary(results, unpriced) -> list[str]:
    lines = [f"per chip ({HELD_OUT}; ratio = estimate / measured):"]
    for chip in sorted({r[0] for r in results}):
        mine = [r for r in results if r[0] == chip]
        lines.append(_line(chip, [r[6] for r in mine]))
        for src in sorted({r[2] for r in mine}):
            lines.append(_line(f"  {src}", [r[6] for r in mine if r[2] == src]))
    for chip, ids in sorted(unpriced.items()):
        lines.append(f"  {chip:42} n={len(ids):3}  not priced: no profile named {chip!r} (give --hardware-file)")
    return lines


def final_line(results) -> str:
    if not results:
        return "median |error| = n/a (no row priced)"
    med = vp.stats([r[6] for r in results])[0]
    chips = len({r[0] for r in results})
    return f"median |error| = {med:.1%} over {len(results)} rows on {chips} chips (held out: every row)"


def _fmt(e) -> str:
    med, d, n = e
    return f"{{ median_error = {med:.3f}, median_ratio = {d:.3f}, n = {n} }}"


def accuracy_section(table, data_path, hardware_file, date) -> str:
    """The per-chip part of accuracy.toml (from :data:`validate_published.CHIPS_MARKER` on)."""
    profiles = _profiles(hardware_file)
    out = [vp.CHIPS_MARKER + " --write-accuracy: the median |error| of the",
           "# compiled estimate against published measurements on chips beyond those above; nothing in the profiles",
           "# was fitted to these rows, so every row is held out. Read by mhlo_cost/machines/accuracy.py.",
           "[chips]",
           f'source = "benchmarks/validate_chips.py on {os.path.relpath(data_path, vp.ROOT)}"',
           f'profiles = "{profiles}"', f'date = "{date}"', 'held_out = "every row"', ""]
    for chip, t in table.items():
        out.append(f'[chips.chip."{chip}"]')
        out += [f"{cat} = {_fmt(t[cat])}" for cat in vp.CATEGORIES + ("overall",) if cat in t]
        out.append("sources = [" + ", ".join(f'"{s}"' for s in t["sources"]) + "]")
        out.append("")
    return "\n".join(out)


def replace_from(path, marker: str, tail: str) -> None:
    """``path`` with everything from ``marker`` on (or, without one, appended after its text) replaced by ``tail``
    (which begins with the marker), in one step (:func:`mhlo_cost.files.atomic.write_bytes`)."""
    with open(path) as f:
        text = f.read()
    at = text.find(marker)
    head = (text if at < 0 else text[:at]).rstrip("\n") + "\n\n"
    write_bytes(path, (head + tail).encode())


def write_accuracy(table, data_path, hardware_file, path=vp.ACCURACY, date=None) -> None:
    """Replace the per-chip part of ``path`` (keeping validate_published.py's part above it)."""
    date = date or datetime.date.today().isoformat()
    replace_from(path, vp.CHIPS_MARKER, accuracy_section(table, data_path, hardware_file, date))


def _profiles(hardware_file) -> str:
    return f"{os.path.basename(hardware_file)} (a hardware file)" if hardware_file else "the shipped catalogue"


def docs_table(table, unpriced, date, hardware_file=None) -> str:
    rows = ["| chip | n | median \\|error\\| | median estimate / measured | sources |", "|---|---:|---:|---:|---|"]
    for chip, t in table.items():
        med, d, n = t["overall"]
        rows.append(f"| {chip} | {n} | {med:.1%} | {d:.2f} | {', '.join(t['sources'])} |")
    for chip, ids in sorted(unpriced.items()):
        rows.append(f"| {chip} | {len(ids)} | not priced (no profile) | | |")
    return "\n".join([DOCS_MARKER, f"Written {date} by `python benchmarks/validate_chips.py --write-docs` with the "
                      f"profiles of {_profiles(hardware_file)}.", ""] + rows) + "\n"


def write_docs(table, unpriced, hardware_file=None, path=DOCS, date=None) -> None:
    """Replace the table of ``path`` (from :data:`DOCS_MARKER` to the end) and keep the prose above it."""
    date = date or datetime.date.today().isoformat()
    replace_from(path, DOCS_MARKER, docs_table(table, unpriced, date, hardware_file))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hardware-file", help="a TOML file of profiles, searched before the shipped catalogue")
    ap.add_argument("--data", default=DATA, help="the measurements (default: benchmarks/data/published_chips.toml)")
    ap.add_argument("--only", help="run only the figures whose id contains this")
    ap.add_argument("--chip", help="run only the figures of this chip (its row name)")
    ap.add_argument("--write-accuracy", action="store_true")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args(argv)
    profiles = load_profiles(args.hardware_file) if args.hardware_file else None
    rows = [m for m in load_rows(args.data) if (not args.only or args.only in m["id"])
            and (not args.chip or args.chip == m["chip"])]
    results, unpriced = price(rows, profiles)
    print(f"{'id':44} {'chip':10} {'estimate':>11} {'measured':>11} {'ratio':>6}")
    for chip, _, _, rid, est, meas, ratio in results:
        print(f"{rid:44} {chip:10} {est * 1e3:9.4f}ms {meas * 1e3:9.4f}ms {ratio:6.2f}")
    print("\n".join(summary(results, unpriced)))
    table = per_chip(results)
    if args.write_accuracy:
        write_accuracy(table, args.data, args.hardware_file)
    if args.write_docs:
        write_docs(table, unpriced, args.hardware_file)
    print(final_line(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
