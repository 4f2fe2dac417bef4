"""The fitted parameters of the chip profiles (``benchmarks/data/chip_fits.toml``), for
``benchmarks/validate_chips.py``: which rows each is fitted on, the value fitted on them, and the profile each chip is
priced with for its held-out figure (the value fitted without that chip's held-out rows).

A fit is validate_published.py's rule for the GH100 figures: the value at which the median of estimate / measured
over the fit rows is 1. Each field is a fraction of a peak (a time is inversely proportional to it where the rows
are bound by it), so the value is scaled by that median until the median is within :data:`TOLERANCE` of 1.
"""
from __future__ import annotations

import dataclasses
import statistics
import tomllib
from dataclasses import dataclass

TOLERANCE = 0.0001
MAX_STEPS = 30
START = 0.5


@dataclass(frozen=True)
class Fit:
    name: str
    chips: tuple
    fields: tuple
    rows: dict  # category, and optionally source / library, that a fit row matches
    held_out: str  # "chip" (leave one chip out) or "source" (the matching rows are fit rows on every chip)
    ship: str = ""  # held_out "chip": the chip whose rows the shipped value is fitted on
    tied: tuple = ()  # ((field, factor), ...): fields set to factor x the fitted value (not fitted themselves)


def load_fits(path) -> list[Fit]:
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    fits = []
    for e in doc.get("fit", []):
        fit = Fit(e["name"], tuple(e["chips"]), tuple(e["fields"]), dict(e["rows"]), e["held_out"], e.get("ship", ""),
                  tuple(sorted(e.get("tied", {}).items())))
        if fit.held_out not in ("chip", "source") or (fit.held_out == "chip") != (fit.ship in fit.chips):
            raise ValueError(f"{path}: fit {fit.name!r}: held_out must be 'chip' (with ship one of chips) or 'source'")
        fits.append(fit)
    return fits


# -- a profile with a field set ---------------------------------------------------------------------------------
def get_field(hw, field: str):
    """The value of a dotted field (gemm.efficiency, attention.<library>.forward / backward); None where the profile
    has no such table."""
    head, *rest = field.split(".")
    if head == "gemm" and rest == ["efficiency"]:
        return None if hw.gemm is None else hw.gemm.efficiency
    if head == "attention" and len(rest) == 2:
        lib = None if hw.attention is None else hw.attention.get(rest[0])
        return None if lib is None else getattr(lib, rest[1])
    raise ValueError(f"no fitted field {field!r} (gemm.efficiency, attention.<library>.forward / backward)")


def with_field(hw, field: str, value: float):
    """``hw`` with ``field`` set to ``value`` (a new profile; the shipped one is not touched)."""
    head, *rest = field.split(".")
    if head == "gemm":
        return dataclasses.replace(hw, gemm=dataclasses.replace(hw.gemm, efficiency=value))
    name, part = rest
    libs = tuple((n, dataclasses.replace(lib, **{part: value}) if n == name else lib)
                 for n, lib in hw.attention.libraries)
    return dataclasses.replace(hw, attention=dataclasses.replace(hw.attention, libraries=libs))


def applies(fit: Fit, hw) -> bool:
    """Whether ``fit`` sets fields of ``hw`` (a profile from a hardware file may lack the tables)."""
    return hw.name in fit.chips and all(get_field(hw, f) is not None for f in fit.fields + tuple(dict(fit.tied)))


def matches(fit: Fit, row: dict, source: str) -> bool:
    want = fit.rows
    return (row["chip"] in fit.chips and row["category"] == want["category"]
            and want.get("source", source) == source
            and want.get("library", row["params"].get("library")) == row["params"].get("library"))


# -- the fit ------------------------------------------------------------------------------------------------------
def fit_value(fit: Fit, rows: list[dict], base: dict, price_row) -> float:
    """The value of ``fit``'s fields at which the median estimate / measured over ``rows`` is 1. ``base``: chip name
    -> profile to start from (the fields set on each); ``price_row(row, profiles)`` -> estimate / measured."""
    if not rows:
        raise ValueError(f"fit {fit.name!r}: no row to fit on")
    value = START  # not the shipped value: the fit must not depend on what the profiles hold now
    for _ in range(MAX_STEPS):
        profiles = {c: set_fields(hw, fit, value) for c, hw in base.items()}
        median = statistics.median(price_row(m, profiles) for m in rows)
        if abs(median - 1) <= TOLERANCE or (value >= 1.0 and median > 1):
            break
        value = min(1.0, value * median)
    return value


def set_fields(hw, fit: Fit, value: float):
    """``hw`` with ``fit``'s fields at ``value`` and its tied fields at their factor x ``value`` (3 decimals)."""
    for f in fit.fields:
        hw = with_field(hw, f, value)
    for f, factor in fit.tied:
        hw = with_field(hw, f, round(factor * value, 3))
    return hw
