"""Leave one source out, for ``benchmarks/validate_published.py``: each profile value of
``benchmarks/data/published_fits.toml`` is fitted (``chip_fits.fit_value``: the value at which the median of
estimate / measured over its rows is 1) once on every source's rows (the value the shipped profiles should hold) and
once without each source; a source's rows are priced with the values fitted without it, so no printed figure was
fitted on the rows it is computed from.

A value whose rows all come from the source being priced cannot be refitted without it. Its rows are priced with the
fit's ``prior`` where the file gives one (a value read off no row of the corpus), else they are listed as not held
out and left out of every held-out figure (:func:`loso`).
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass

import chip_fits as cf


@dataclass(frozen=True)
class SourceFit:
    fit: cf.Fit
    prior: float | None = None
    prior_basis: str = ""


def load(path) -> list[SourceFit]:
    """The fits of ``path`` (chip_fits' format with ``held_out = "source"``, optional ``prior`` / ``prior_basis``)."""
    fits = cf.load_fits(path)
    with open(path, "rb") as f:
        extra = tomllib.load(f).get("fit", [])
    for fit in fits:
        if fit.held_out != "source":
            raise ValueError(f"{path}: fit {fit.name!r}: held_out must be 'source' here")
    return [SourceFit(fit, e.get("prior"), e.get("prior_basis", "")) for fit, e in zip(fits, extra)]


def source_of(m: dict) -> str:
    """A row's source: a GitHub repository (owner/name), an arXiv paper (arxiv:ID), else the host."""
    url = m["source"]
    for pat, fmt in ((r"github\.com/([^/]+/[^/#?]+)", "{}"), (r"arxiv\.org/(?:abs|pdf)/([0-9.]+)", "arxiv:{}")):
        hit = re.search(pat, url)
        if hit:
            return fmt.format(hit.group(1))
    hit = re.search(r"https?://([^/ ]+)", url)
    return hit.group(1) if hit else url.split()[0]


def matches(fit: cf.Fit, m: dict) -> bool:
    want = fit.rows
    return (m["chip"] in fit.chips and m["category"] == want["category"]
            and ("library" not in want or m["params"].get("library") == want["library"])
            and ("impl" not in want or m.get("impl", "") == want["impl"]))


def _apply(base: dict, fit: cf.Fit, value: float) -> dict:
    return {c: cf.set_fields(hw, fit, value) if c in fit.chips else hw for c, hw in base.items()}


def fitted(fits, rows, base: dict, ratio, without: str | None = None):
    """(chip -> profile with every fit applied, [(fit, value, how)]): each fit on its rows whose source is not
    ``without``, in order; ``how`` is 'fit on N rows' or 'prior' or None (no row and no prior: not applied).
    ``ratio(row, profiles)`` -> estimate / measured; ``base``: chip name -> profile to start from."""
    current, made = dict(base), []
    for sf in fits:
        sel = [m for m in rows if matches(sf.fit, m) and source_of(m) != without]
        if sel:
            chips = {c: current[c] for c in sf.fit.chips}
            value = round(cf.fit_value(sf.fit, sel, chips, lambda m, p: ratio(m, p)), 3)
            how = f"fit on {len(sel)} rows of {', '.join(sorted({source_of(m) for m in sel}))}"
        elif sf.prior is not None:
            value, how = sf.prior, f"prior ({sf.prior_basis})"
        else:
            made.append((sf, None, None))
            continue
        current = _apply(current, sf.fit, value)
        made.append((sf, value, how))
    return current, made


def loso(fits, rows, base: dict, ratio):
    """Leave one source out. Returns (results, lines): results one (row, ratio, held) per row, ``held`` False where
    a value the row's pricing uses could not be refitted without its source (no other source, no prior); lines say
    what each fit gives on every source and, per source, what it was priced with."""
    full, made = fitted(fits, rows, base, ratio)
    lines = [f"fit: {sf.fit.name} = {v} ({how}){_agree(sf, v, base)}" for sf, v, how in made if v is not None]
    results = []
    for src in sorted({source_of(m) for m in rows}):
        mine = [m for m in rows if source_of(m) == src]
        touched = [sf for sf in fits if any(matches(sf.fit, m) for m in mine)]
        profiles, made_wo = fitted(fits, rows, base, ratio, without=src) if touched else (full, made)
        missing = [sf for sf, v, _ in made_wo if v is None and sf in touched]
        for sf, v, how in made_wo:
            if sf in touched and v is not None:
                lines.append(f"  {src}: priced with {sf.fit.name} = {v} ({how})")
        for sf in missing:
            lines.append(f"  {src}: {sf.fit.name} has no row outside this source and no prior: its rows are "
                         "not held out")
        for m in mine:
            held = not any(matches(sf.fit, m) for sf in missing)
            results.append((m, ratio(m, profiles), held))
    order = {id(m): i for i, m in enumerate(rows)}
    results.sort(key=lambda r: order[id(r[0])])
    return results, lines


def _agree(sf, value, base) -> str:
    now = {cf.get_field(base[c], f) for c in sf.fit.chips for f in sf.fit.fields}
    return "" if now == {value} else f"; the shipped profiles hold {sorted(now)}"
