"""What-if changes to a chip profile: a documented key per parameter, a value with its unit or a factor, and
the changed :class:`~mhlo_cost.machines.profile.Hardware` (``mhlo-cost whatif``).

Only the pricing moves: a change makes a new profile (``dataclasses.replace``), never a new walk; the exact
counts the walk made are priced again on it.

=====================  =========================================  =====================================
key                    what it changes                            units of a value (decimal prefixes)
=====================  =========================================  =====================================
``peak.<dtype>``       the matrix-unit peak of one dtype key       FLOP/s: ``989TFLOPS``, ``2PFLOP/s``
``peak``               every matrix-unit peak                      (a factor only)
``vector.<dtype>``     the vector-unit peak of one dtype key       FLOP/s
``vector``             every vector-unit peak                      (a factor only)
``transcendental``     special-function results per second         1/s: ``2.4T/s``, ``2.4e12``
``hbm_bw``             HBM bandwidth                               B/s: ``4.8TB/s``, ``3350GB/s``
``hbm``                HBM capacity (what fits; no time moves)     B: ``141GB``, ``96GiB``
``link_bw``            link bandwidth per device, one direction    B/s (chip profiles: a system's links
                                                                   are its topology's)
``hop_latency``        per-hop latency of a collective step        s: ``3us``, ``500ns``
``kernel_overhead``    launch overhead per kernel                  s
``dispatch_overhead``  eager mode's host time per framework op     s
``sram``               on-chip SRAM (``sram_mb`` in a profile)     B: ``256MB``; not used by the GPU
                                                                   pricing (no time moves with it)
=====================  =========================================  =====================================

A change is ``KEY=VALUE`` (a value with its unit, or ``xF``: the factor ``F``) or, for ``--scale``,
``KEY=F``. <dtype> is a profile dtype key (:data:`~mhlo_cost.machines.profile.DTYPE_KEYS`).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from .hardware import DTYPE_KEYS, Hardware, HardwareError

_PREFIX = {"": 1, "k": 10 ** 3, "K": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15,
           "E": 10 ** 18}
_BINARY = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40}
_TIME = {"": Decimal(1), "s": Decimal(1), "ms": Decimal("1e-3"), "us": Decimal("1e-6"), "ns": Decimal("1e-9")}


def _units(base: tuple[str, ...], binary: bool = False) -> dict[str, int]:
    """Every prefixed spelling of the ``base`` units (``TB/s``, ``GB/s``, ...) -> its factor; ``""`` (a bare
    number): SI."""
    out = {"": 1}
    for b in base:
        for p, f in _PREFIX.items():
            out[p + b] = f
        if binary:
            for p, f in _BINARY.items():
                out[p + b] = f
    return out


#: The units of each kind of value (the unit strings -> their factor to SI); a bare number is SI.
UNITS: dict[str, dict] = {
    "flops": _units(("FLOPS", "FLOP/s", "flops", "flop/s")),
    "rate": _units(("/s",)),
    "bandwidth": _units(("B/s",)),
    "bytes": _units(("B",), binary=True),
    "seconds": _TIME,
}
#: The examples an error message gives per kind.
_SHOWN = {"flops": "TFLOPS, TFLOP/s, PFLOPS, GFLOPS", "rate": "T/s, G/s", "bandwidth": "TB/s, GB/s, MB/s",
          "bytes": "TB, GB, MB, GiB, MiB", "seconds": "s, ms, us, ns"}


@dataclass(frozen=True)
class Param:
    """One what-if key: the kind of its value, whether a larger value is a gain (a rate) or a loss (a latency),
    and whether the pricing reads it."""

    key: str
    kind: str
    gain_up: bool = True
    priced: bool = True


def params() -> dict[str, Param]:
    """Every key :func:`parse_change` accepts."""
    out = {f"peak.{k}": Param(f"peak.{k}", "flops") for k in DTYPE_KEYS}
    out |= {f"vector.{k}": Param(f"vector.{k}", "flops") for k in DTYPE_KEYS}
    out |= {"peak": Param("peak", "flops"), "vector": Param("vector", "flops"),
            "transcendental": Param("transcendental", "rate"), "hbm_bw": Param("hbm_bw", "bandwidth"),
            "hbm": Param("hbm", "bytes", priced=False), "link_bw": Param("link_bw", "bandwidth"),
            "hop_latency": Param("hop_latency", "seconds", gain_up=False),
            "kernel_overhead": Param("kernel_overhead", "seconds", gain_up=False),
            "dispatch_overhead": Param("dispatch_overhead", "seconds", gain_up=False),
            "sram": Param("sram", "bytes", priced=False)}
    return out


#: Other spellings of a key (the profile's own field names among them).
ALIASES = {"hbm_bandwidth": "hbm_bw", "hbm_capacity": "hbm", "link_bandwidth": "link_bw", "sram_mb": "sram",
           "matrix": "peak", "transcendental_rate": "transcendental"}
#: The keys an error message lists (the dtype keys folded into ``peak.<dtype>``, ``vector.<dtype>``).
SHOWN_KEYS = ("peak", "peak.<dtype>", "vector", "vector.<dtype>", "transcendental", "hbm_bw", "hbm", "link_bw",
              "hop_latency", "kernel_overhead", "dispatch_overhead", "sram")


@dataclass(frozen=True)
class Change:
    """One change: ``key`` set to ``value`` (SI) or scaled by ``factor`` (exactly one of them)."""

    key: str
    value: float | None = None
    factor: float | None = None
    given: str = ""  # as the user wrote the value (4.8TB/s)

    def __str__(self) -> str:
        if self.factor is not None:
            return f"{self.key} x{self.factor:g}"
        return f"{self.key}={self.given or format(self.value, 'g')}"


def _number(text: str, what: str, zero: bool = False) -> Decimal:
    """``text`` as a positive number (``zero``: or 0, for a latency or an overhead, which a profile may state as
    0); HardwareError naming ``what`` otherwise."""
    try:
        d = Decimal(text)
    except InvalidOperation:
        d = Decimal("NaN")
    if not d.is_finite() or d < 0 or (d == 0 and not zero):
        raise HardwareError(f"{what}: expected a {'non-negative' if zero else 'positive'} number, got {text!r}")
    return d


def _key(key: str) -> Param:
    k = ALIASES.get(key.strip(), key.strip())
    known = params()
    if k not in known:
        raise HardwareError(f"unknown what-if key {key!r} (accepted: {', '.join(SHOWN_KEYS)}; <dtype>: "
                            f"{', '.join(DTYPE_KEYS)})")
    return known[k]


_VALUE = re.compile(r"^\s*([-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z/]*)\s*$")


def parse_change(text: str, scale: bool = False) -> Change:
    """``KEY=VALUE`` (``--set``: a value with its unit, or ``xF``) or ``KEY=F`` (``--scale``) as a
    :class:`Change`; :class:`HardwareError` (one line: the accepted keys or units) for anything else."""
    key, eq, value = text.partition("=")
    opt = "--scale" if scale else "--set"
    if not eq or not key.strip() or not value.strip():
        raise HardwareError(f"{opt} takes KEY={'FACTOR' if scale else 'VALUE'}, got {text!r}")
    p = _key(key)
    value = value.strip()
    zero = p.kind == "seconds"  # (no latency, no overhead: a what-if a profile may state too)
    if scale or value[:1] in "xX":
        number = value[1:] if value[:1] in "xX" else value
        return Change(p.key, factor=float(_number(number, f"{opt} {p.key}", zero)))
    if p.key in ("peak", "vector"):
        raise HardwareError(f"{opt} {p.key}: every {p.key} rate takes a factor (x2); a value goes with "
                            f"{p.key}.<dtype>")
    m = _VALUE.match(value)
    units = UNITS[p.kind]
    if not m or m.group(2) not in units:
        unit = m.group(2) if m else value
        raise HardwareError(f"{opt} {p.key}: unknown unit {unit!r} (accepted: {_SHOWN[p.kind]}; a bare number "
                            "is in SI units; xF scales)")
    return Change(p.key, value=float(_number(m.group(1), f"{opt} {p.key}", zero) * units[m.group(2)]), given=value)


def _rates(table, key: str, change: Change, name: str) -> dict:
    """A rate table with ``change`` made (``key``: one dtype key, or None for every rate)."""
    out = dict(table)
    if key is None:
        return {k: _in_range(change.key, v * change.factor, name) for k, v in out.items()}
    if key not in out and change.factor is not None:
        raise HardwareError(f"hardware {name!r} has no rate {change.key!r} to scale (it has: "
                            f"{', '.join(sorted(out)) or 'none'}); set one with --set {change.key}=VALUE")
    out[key] = _in_range(change.key, change.value if change.factor is None else out[key] * change.factor, name)
    return out


#: (what-if key -> the profile's field) for the plain numbers.
_FIELDS = {"transcendental": "transcendental_rate", "hbm_bw": "hbm_bandwidth", "hbm": "hbm_capacity",
           "link_bw": "link_bandwidth", "hop_latency": "hop_latency", "kernel_overhead": "kernel_overhead",
           "dispatch_overhead": "dispatch_overhead", "sram": "sram"}


#: (the profile file's range kind, SI per file unit) per key: a changed figure stays inside the physical
#: range a profile's own figure must be in (:mod:`mhlo_cost.machines.limits`).
_RANGE = {"peak": ("tflops", 1e12), "vector": ("tflops", 1e12), "transcendental": ("tops", 1e12),
          "hbm_bw": ("gb_s", 1e9), "hbm": ("gb", 1e9), "link_bw": ("gb_s", 1e9), "hop_latency": ("us", 1e-6),
          "kernel_overhead": ("us", 1e-6), "dispatch_overhead": ("us", 1e-6), "sram": ("mb", 1e6)}


def _in_range(key: str, si: float, name: str) -> float:
    from .limits import checked

    kind, unit = _RANGE[key.split(".")[0]]
    try:
        checked(si / unit, kind)
    except ValueError as e:
        raise HardwareError(f"what-if {key} on {name!r}: {e} (in the profile's units)") from None
    return si


def apply(hw: Hardware, changes) -> Hardware:
    """``hw`` with ``changes`` made (a new profile; ``hw`` is not touched)."""
    for c in changes:
        hw = _apply_one(hw, c)
    return hw


def _apply_one(hw: Hardware, c: Change) -> Hardware:
    if c.key.split(".")[0] in ("peak", "vector"):
        field = "matrix_flops" if c.key.startswith("peak") else "vector_flops"
        key = c.key.partition(".")[2] or None
        return dataclasses.replace(hw, **{field: _rates(getattr(hw, field), key, c, hw.name)})
    if c.key in ("link_bw", "hop_latency") and getattr(hw, "topology", None) is not None:
        raise HardwareError(f"{c.key} is a chip profile's flat ring: {hw.name!r} is a system, whose collectives "
                            "run on its topology's links (what-if takes its chip, or a chip profile)")
    field = _FIELDS[c.key]
    if c.key == "sram":  # bytes, as the catalogue's ``sram_mb`` is loaded
        now = hw.sram
        if c.factor is not None and now is None:
            raise HardwareError(f"hardware {hw.name!r} states no SRAM to scale; set one with --set sram=VALUE")
        value = now * c.factor if c.factor is not None else c.value
        return dataclasses.replace(hw, sram=_in_range("sram", value, hw.name))
    now = getattr(hw, field)
    if c.factor is not None:
        if now is None:
            raise HardwareError(f"hardware {hw.name!r} states no {c.key} to scale; set one with --set {c.key}=VALUE")
        value = now * c.factor  # the factor as written: kernel_overhead=x0.5 halves the overhead
    else:
        value = c.value
    return dataclasses.replace(hw, **{field: _in_range(c.key, value, hw.name)})


#: Why a change moves no time, per key.
_UNPRICED = {"sram": "not used by the GPU pricing (no time moves with it)",
             "hbm": "a capacity moves no time (it decides what fits: the memory figures of report)"}


def unpriced(changes) -> list[str]:
    """The notes of changes no time moves with (``sram``: the GPU pricing reads no SRAM size; ``hbm``: a
    capacity)."""
    known = params()
    return [f"{c}: {_UNPRICED[c.key]}" for c in changes if not known[c.key].priced]


def gain(hw: Hardware, key: str, fraction: float = 0.1) -> Hardware:
    """``hw`` with a ``fraction`` gain in ``key``: a rate ``x (1 + fraction)``, a latency or overhead
    ``/ (1 + fraction)`` (the same 10% faster either way)."""
    return _apply_one(hw, Change(key, factor=1 + fraction if params()[key].gain_up else 1 / (1 + fraction)))
