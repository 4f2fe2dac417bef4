"""How far the estimate has been from published measurements, for the line printed beside every estimate.

``mhlo_cost/machines/data/accuracy.toml`` is written by ``benchmarks/validate_published.py --write-accuracy``: per
chip profile and category (gemm, attention_fwd, memory, model, overall), the held-out median |error| of the
compiled estimate against published GPU measurements, the median ratio estimate / measured, and how many
figures it rests on. ``mhlo_cost/machines/data/accuracy_eager.toml``, written by ``benchmarks/validate_measured.py
--write-accuracy``, is the same for the eager estimate against what this project measured on a lent GPU. The
``[chips]`` part of ``accuracy.toml``, written by ``benchmarks/validate_chips.py --write-accuracy``, gives the chips
beyond those (B200, MI300X, Gaudi 3, ...) their own median |error| against published measurements, every row held
out; a chip in neither part has no measurement, and its line says so.
"""
from __future__ import annotations

import tomllib
from functools import lru_cache
from importlib import resources

CATEGORIES = ("gemm", "attention_fwd", "attention_bwd", "memory", "model")


#: The accuracy file of each execution model that has one.
FILES = {"compiled": "accuracy.toml", "eager": "accuracy_eager.toml"}


@lru_cache(maxsize=2)
def table(execution: str = "compiled") -> dict:
    data = resources.files("mhlo_cost.machines").joinpath("data", FILES[execution]).read_bytes()
    return tomllib.loads(data.decode())


def _entry(chip: str, execution: str) -> dict | None:
    if execution not in FILES:
        return None
    doc = table(execution)
    return doc.get("chip", {}).get(chip) if execution == doc.get("execution", "compiled") else None


def chip_entry(chip: str, execution: str = "compiled") -> dict | None:
    """The per-chip validation of ``chip`` (``[chips.chip.<name>]`` of ``accuracy.toml``: categories, ``sources``),
    for the compiled estimate only; None where the chip has none."""
    if execution != "compiled":
        return None
    return table("compiled").get("chips", {}).get("chip", {}).get(chip)


def _figure(entry: dict, category: str) -> tuple[str, dict, str]:
    """(what the line speaks of, the figures of ``category`` (else of every figure), which way the estimate
    errs) of one chip's entry."""
    cat = category if category in entry else "overall"
    e = entry[cat]
    what = "whole-model" if cat == "model" else ("all" if cat == "overall" else cat)
    return what, e, "slow" if e["median_ratio"] > 1 else "fast"


def _chip_line(chip: str, entry: dict, category: str) -> str:
    what, e, way = _figure(entry, category)
    meta = table("compiled").get("chips", {})
    return (f"{what} estimates on {chip} have been {e['median_error']:.0%} from published measurements "
            f"(median of {e['n']}, every one held out, compiled; median estimate {abs(e['median_ratio'] - 1):.0%} "
            f"too {way}; {meta.get('source', 'benchmarks/validate_chips.py').split(' on ')[0]}, "
            f"{meta.get('date', 'undated')})")


def statement(chip: str, category: str = "model", execution: str = "compiled") -> str:
    """One line: the measured median error of ``category`` (else of every figure) on ``chip``, or that the
    chip has none."""
    entry = _entry(chip, execution)
    if not entry and execution != "compiled":
        return f"no published measurement validates the {execution} estimate"
    if not entry:
        own = chip_entry(chip, execution)
        if own:
            return _chip_line(chip, own, category)
        return (f"no published measurement validates {chip} "
                f"(benchmarks/validate_published.py, benchmarks/validate_chips.py)")
    what, e, way = _figure(entry, category)
    source = "published measurements" if execution == "compiled" else "measurements made on a lent GPU"
    return (f"{what} estimates on {chip} have been {e['median_error']:.0%} from {source} "
            f"(held-out median of {e['n']}, {execution}; median estimate {abs(e['median_ratio'] - 1):.0%} too {way})")


def median_error(chip: str, category: str = "model", execution: str = "compiled") -> float | None:
    """The held-out median |error| (a fraction) behind :func:`statement`; None where there is none."""
    entry = _entry(chip, execution) or chip_entry(chip, execution)
    if not entry:
        return None
    return float(entry[category if category in entry else "overall"]["median_error"])
