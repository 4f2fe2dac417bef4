"""The estimate on chips beyond A100 / H100 / H200 against published measurements: every figure of
``benchmarks/data/published_chips.toml`` (GEMM tables, attention kernels, norm kernels, each with its source and
exact configuration) priced by the row pricing of ``benchmarks/validate_published.py`` (the same programs, the
``compiled`` execution model, the row's chip profile).

Most profile figures are datasheet numbers with documented default efficiencies; the few fitted to rows are listed
in ``benchmarks/data/chip_fits.toml`` (:mod:`chip_fits`). Every run refits them, says what each was fitted on and
whether the shipped value agrees, and prices each chip with the values fitted WITHOUT that chip's held-out rows
(leave one chip out, or one source out); the rows a chip's values were fitted on are marked ``fit`` and never count
as held out. Prints one line per figure, then per chip n, the held-out n, its median |error| and the median ratio
estimate / measured, and per chip and source the same; last line the median |error| over every held-out row.

    python benchmarks/validate_chips.py [--hardware-file FILE] [--only ID-SUBSTRING] [--chip NAME]
                                         [--data FILE] [--fits FILE] [--write-accuracy] [--write-docs]

``--hardware-file`` adds profiles (a user file, searched before the shipped catalogue); a row whose chip has no
profile is listed as not priced. ``--write-accuracy`` rewrites the per-chip table of
``mhlo_cost/machines/data/accuracy.toml`` (the accuracy line of a report on that chip: held-out rows only);
``--write-docs`` rewrites the table of ``docs/chips.md``.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import re
import sys
import tomllib
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import chip_fits as cf  # noqa: E402
import validate_published as vp  # noqa: E402  (sets the environment and the import path first)

from mhlo_cost.files.atomic import write_bytes  # noqa: E402
from mhlo_cost.machines.catalogue import HardwareError, get_profile, load_profiles  # noqa: E402

DATA = os.path.join(vp.ROOT, "benchmarks", "data", "published_chips.toml")
FITS = os.path.join(vp.ROOT, "benchmarks", "data", "chip_fits.toml")
DOCS = os.path.join(vp.ROOT, "docs", "chips.md")
DOCS_MARKER = "<!-- table: written by benchmarks/validate_chips.py --write-docs -->"
HELD_OUT = "every row is held out: nothing in the profiles was fitted to these measurements"
HELD_OUT_FIT = "held out: each chip priced with values fitted without its held-out rows; fit rows not counted"


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


# -- the fitted parameters ------------------------------------------------------------------------------------
def _ratio(m, profiles) -> float:
    return vp.estimated_s(m, profiles) / vp.measured_s(m)


def _shipped(fits, chips, profiles) -> dict:
    """chip name -> its profile (user file first), for the chips of ``fits`` that have one."""
    out = {}
    for c in sorted({c for f in fits for c in f.chips} & set(chips)):
        try:
            out[c] = get_profile(c, profiles)
        except HardwareError:
            pass
    return out


def _fit_chips(fit, exclude) -> list:
    if fit.held_out == "source":
        return list(fit.chips)
    return [fit.ship] if exclude not in fit.chips else [c for c in fit.chips if c != exclude]


def scenario(fits, rows, shipped, profiles=None, exclude=None):
    """(chip -> profile with every fit applied, [(fit, value, fit row ids)]): each fit on its rows of the chips
    :func:`_fit_chips` names (the shipped fit when ``exclude`` is None or not one of the fit's chips; else the other
    chips': leave ``exclude`` out), in file order (a later fit is made with the earlier ones applied)."""
    current, made = dict(shipped), []
    for fit in fits:
        chips = [c for c in fit.chips if c in current and cf.applies(fit, current[c])]
        on = set(_fit_chips(fit, exclude)) & set(chips)
        sel = [m for m in rows if m["chip"] in on and cf.matches(fit, m, source_name(m["source"]))]
        if not chips or not sel:
            continue
        base = {c: current[c] for c in chips}

        def price_row(m, variants, user=profiles):
            return _ratio(m, {("fit", m["chip"]): variants[m["chip"]], **(user or {})})
        value = round(cf.fit_value(fit, sel, base, price_row), 3)
        for c in chips:
            current[c] = cf.set_fields(current[c], fit, value)
        made.append((fit, value, [m["id"] for m in sel]))
    return current, made


def fitted(rows, fits, profiles=None, chips=None):
    """(chip -> the profile its figure is priced with, chip -> ids of its fit rows, report lines). A chip of a
    leave-one-chip-out fit is priced with the values fitted without its rows; every other chip with the shipped
    fits. ``chips``: only the fits of these chips are made (all where None)."""
    chips = {m["chip"] for m in rows} if chips is None else set(chips)
    shipped = _shipped(fits, {c for f in fits for c in f.chips}, profiles)
    fits = [f for f in fits if any(c in shipped and cf.applies(f, shipped[c]) for c in chips & set(f.chips))]
    ship_profiles, made = scenario(fits, rows, shipped, profiles)
    lines = [_fit_line(fit, value, ids, shipped) for fit, value, ids in made]
    use, fit_ids = {}, defaultdict(set)
    for c in sorted(chips & set(shipped)):
        own = any(f.held_out == "chip" and c in f.chips for f, _, _ in made)
        prof, mine = scenario(fits, rows, shipped, profiles, exclude=c) if own else (ship_profiles, made)
        use[c] = prof[c]
        own_ids = {m["id"] for m in rows if m["chip"] == c}
        fit_ids[c] = {i for _, _, ids in mine for i in ids if i in own_ids}
        if own:
            lines += [f"  {c}: priced with {f.name} = {v} fitted without its rows (on {len(ids)} rows of "
                      f"{', '.join(sorted({m['chip'] for m in rows if m['id'] in ids}))})"
                      for f, v, ids in mine if c in f.chips]
    return use, dict(fit_ids), lines


def _fit_line(fit, value, ids, shipped) -> str:
    now = {cf.get_field(hw, f) for hw in shipped.values() if cf.applies(fit, hw) for f in fit.fields}
    agree = "the shipped value" if now == {value} else f"the shipped value is {sorted(now)}: UPDATE the profiles"
    return f"fit: {fit.name} = {value} on {len(ids)} rows ({', '.join(ids)}): {agree}"


def price_held_out(rows, all_rows, fits, profiles=None):
    """(results, unpriced, fit ids by chip, fit lines): :func:`price` of ``rows`` with each chip's profile from
    :func:`fitted` (the fits made on ``all_rows``)."""
    use, fit_ids, lines = fitted(all_rows, fits, profiles, {m["chip"] for m in rows})
    results, unpriced = [], {}
    for chip in sorted({m["chip"] for m in rows}):
        mine = [m for m in rows if m["chip"] == chip]
        profs = {**({("fit", chip): use[chip]} if chip in use else {}), **(profiles or {})}
        r, u = price(mine, profs)
        results += r
        unpriced.update(u)
    order = {m["id"]: i for i, m in enumerate(rows)}
    results.sort(key=lambda r: order[r[3]])
    return results, unpriced, fit_ids, lines


def _is_fit(r, fit_ids) -> bool:
    return r[3] in (fit_ids or {}).get(r[0], ())


def per_chip(results, fit_ids=None) -> dict:
    """chip -> {category or 'overall': (median |error|, median ratio, n)} over its held-out rows (not those in
    ``fit_ids[chip]``), 'sources': sorted source names of those rows, 'fit': how many fit rows were left out."""
    out = {}
    for chip in sorted({r[0] for r in results}):
        mine = [r for r in results if r[0] == chip and not _is_fit(r, fit_ids)]
        table = {}
        for cat in vp.CATEGORIES + ("overall",):
            rs = [r[6] for r in mine if cat in (r[1], "overall")]
            if rs:
                med, _, d = vp.stats(rs)
                table[cat] = (med, d, len(rs))
        table["sources"] = sorted({r[2] for r in mine})
        table["fit"] = sum(1 for r in results if r[0] == chip and _is_fit(r, fit_ids))
        if mine:
            out[chip] = table
    return out


def _line(label, ratios) -> str:
    med, q90, d = vp.stats(ratios)
    way = "too slow" if d > 1 else "too fast"
    return (f"  {label:42} n={len(ratios):3}  median |error| {med:6.1%}  p90 {q90:6.1%}  "
            f"median ratio {d:.2f} ({way})")


def summary(results, unpriced, fit_ids=None) -> list[str]:
    """Per chip its held-out line (n = the held-out rows), its fit rows by id, and per source of held-out rows."""
    lines = [f"per chip ({HELD_OUT_FIT if any((fit_ids or {}).values()) else HELD_OUT}; ratio = estimate / measured):"]
    for chip in sorted({r[0] for r in results}):
        mine = [r for r in results if r[0] == chip]
        held = [r for r in mine if not _is_fit(r, fit_ids)]
        fit = [r[3] for r in mine if _is_fit(r, fit_ids)]
        lines.append(_line(chip, [r[6] for r in held]) + f"  (held out; {len(mine)} rows)" if held
                     else f"  {chip:42} n=  0  no held-out row ({len(mine)} rows)")
        if fit:
            lines.append(f"    fit rows (not counted): {', '.join(fit)}")
        for src in sorted({r[2] for r in held}):
            lines.append(_line(f"  {src}", [r[6] for r in held if r[2] == src]))
    for chip, ids in sorted(unpriced.items()):
        lines.append(f"  {chip:42} n={len(ids):3}  not priced: no profile named {chip!r} (give --hardware-file)")
    return lines


def final_line(results, fit_ids=None) -> str:
    held = [r for r in results if not _is_fit(r, fit_ids)]
    if not held:
        return "median |error| = n/a (no held-out row priced)"
    med = vp.stats([r[6] for r in held])[0]
    chips, fit = len({r[0] for r in held}), len(results) - len(held)
    how = f"held out; {fit} fit rows not counted" if fit else "held out: every row"
    return f"median |error| = {med:.1%} over {len(held)} rows on {chips} chips ({how})"


def _fmt(e) -> str:
    med, d, n = e
    return f"{{ median_error = {med:.3f}, median_ratio = {d:.3f}, n = {n} }}"


def accuracy_section(table, data_path, hardware_file, date) -> str:
    """The per-chip part of accuracy.toml (from :data:`validate_published.CHIPS_MARKER` on)."""
    profiles = _profiles(hardware_file)
    out = [vp.CHIPS_MARKER + " --write-accuracy: the median |error| of the",
           "# compiled estimate against published measurements on chips beyond those above, over held-out rows only:",
           "# each chip priced with the values of benchmarks/data/chip_fits.toml fitted without those rows; `fit`: the",
           "# chip's rows its values were fitted on (not counted in n). Read by mhlo_cost/machines/accuracy.py.",
           "[chips]",
           f'source = "benchmarks/validate_chips.py on {os.path.relpath(data_path, vp.ROOT)}"',
           f'profiles = "{profiles}"', f'date = "{date}"',
           'held_out = "every row counted in n (fit rows left out)"', ""]
    for chip, t in table.items():
        out.append(f'[chips.chip."{chip}"]')
        out += [f"{cat} = {_fmt(t[cat])}" for cat in vp.CATEGORIES + ("overall",) if cat in t]
        out.append("sources = [" + ", ".join(f'"{s}"' for s in t["sources"]) + "]")
        out.append(f"fit = {t.get('fit', 0)}")
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
    rows = ["| chip | held-out n | fit rows | median \\|error\\| (held out) | median estimate / measured | sources |",
            "|---|---:|---:|---:|---:|---|"]
    for chip, t in table.items():
        med, d, n = t["overall"]
        rows.append(f"| {chip} | {n} | {t.get('fit', 0)} | {med:.1%} | {d:.2f} | {', '.join(t['sources'])} |")
    for chip, ids in sorted(unpriced.items()):
        rows.append(f"| {chip} | {len(ids)} | | not priced (no profile) | | |")
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
    ap.add_argument("--fits", default=FITS, help="the fitted parameters (default: benchmarks/data/chip_fits.toml)")
    ap.add_argument("--write-accuracy", action="store_true")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args(argv)
    profiles = load_profiles(args.hardware_file) if args.hardware_file else None
    every = load_rows(args.data)
    rows = [m for m in every if (not args.only or args.only in m["id"]) and (not args.chip or args.chip == m["chip"])]
    results, unpriced, fit_ids, fit_lines = price_held_out(rows, every, cf.load_fits(args.fits), profiles)
    print("\n".join(fit_lines))
    print(f"{'id':44} {'chip':10} {'estimate':>11} {'measured':>11} {'ratio':>6}")
    for r in results:
        chip, _, _, rid, est, meas, ratio = r
        mark = "  fit" if _is_fit(r, fit_ids) else ""
        print(f"{rid:44} {chip:10} {est * 1e3:9.4f}ms {meas * 1e3:9.4f}ms {ratio:6.2f}{mark}")
    print("\n".join(summary(results, unpriced, fit_ids)))
    table = per_chip(results, fit_ids)
    if args.write_accuracy:
        write_accuracy(table, args.data, args.hardware_file)
    if args.write_docs:
        write_docs(table, unpriced, args.hardware_file)
    print(final_line(results, fit_ids))
    return 0


if __name__ == "__main__":
    sys.exit(main())
