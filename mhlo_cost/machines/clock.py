"""The clock a chip's tensor cores hold under its power limit through a long stream of matrix work.

A profile's optional ``[profile.<name>.clock]`` table::

    power_limit_w = 700      # the board power limit the clocks below are held under
    peak_mhz = 1830          # the SM clock the profile's matrix peaks are stated at
    bf16 = 1447              # per dtype key: the SM clock a back-to-back stream of such dots holds at that limit
    fp8 = 1395

Why. A datasheet's matrix peak is the tensor cores' FLOPs per clock times one clock: for the H100 SXM,
132 SMs x 2048 dense FP16/BF16 FMA per clock and SM ([H100-WP] per-SM throughput table) x 2 x 1.830 GHz =
989.4 TFLOP/s, so the peak is stated at 1830 MHz. A GEMM kernel issues its MMA instructions at a fixed share of
the SM's clock cycles, so its rate is (FLOPs per clock) x (its efficiency per clock) x (the clock it runs at). The
power management unit lowers the clock until the board's draw is within its power limit (NVIDIA's
``nvidia-smi -pl`` / NVML power capping: ``clocks_event_reasons.sw_power_cap``); dynamic power is
alpha x C x V^2 x f, and on the DVFS curve V rises with f, so a dense random-data matrix stream (the largest
switching activity alpha the chip has) is held at a clock below the peak's. Measured on a lent H200 at its 700 W
limit (``benchmarks/data/measured_h200_train_run3.jsonl``, 12 s of one product back to back, NVML each second):
bf16 8192^3 on random data 662 TFLOP/s at 1440-1455 MHz and 692-705 W from the first second; the same product on
zeros (little switching) 772 TFLOP/s at 1725 MHz and 403 W; fp8 8192 x 4096 x 16384 1190 TFLOP/s at 1395 MHz.
Both runs give one efficiency per clock (662 / (132 x 4096 x 1.447 GHz) = 0.846, 772 / (... x 1.725) = 0.828):
the clock, not the kernel, is what the power limit takes.

Where. ``factor(key)`` = the dtype's sustained clock / ``peak_mhz`` (1 for a dtype the table does not list). The
roofline multiplies a dot's efficiency by it only on a profile marked ``sustained`` (:func:`sustained`): the
work of a training step or a long prefill, thousands of products back to back, not a one-off product timed in a
short loop (the published GEMM benchmarks the profile's ``gemm.efficiency`` was fitted on: best of a brute-force
search, 100 calls after 50 warm-up, whose clock the power limit has not pulled down the way a stream's does).
``train-plan`` marks its profile sustained by default (``--clock peak`` does not); nothing else does. It is an
upper bound on the throttling: a step's GEMMs share the power budget with its memory-bound kernels, launch gaps
and communication waits, and the limit binds on the board's average power, so a step's clock lies between this
stream's and the peak's (the H200 layer measurements: 0.93 of measured at peak, 1.11 sustained). Over the published
training rows, once the barrier and fp8-weight over-charges were removed, the sustained clock is the nearer of the
two (median 7.25% against 11.71% on 2026-11-30; docs/validation.md, "The tensor cores' clock under the power limit").

The step's own clock (``average``, :func:`step_average`, :mod:`.power`): the limit binds on power averaged over about
a second, so a step whose memory-bound kernels (``memory_w``) and waits (``idle_w``) draw less than the limit holds
its products at a clock above the stream's: the one at which the step's average power is the limit, on a measured
board-power-against-clock curve. ``train-plan`` prices with it when asked (studies/plan/power_clock.py), not by
default: over the published rows it is nearer on torchtitan's 500 W H100 and on the measured H200 layers and
farther on NeMo's and Megatron-Bridge's 700 W H100 rows (docs/validation.md, "The step-average clock").
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .limits import checked, known_table
from .power import floor_w, step_clock

#: The clocks a step's dots can be priced at: under the power limit through a stream of products (``sustained``),
#: the peak's, or the one the step's own average power holds at the limit (``average``: :mod:`.power`; where the
#: profile's table has no ``memory_w`` and ``idle_w``, the sustained clock).
CLOCKS = ("sustained", "peak", "average")
#: The clock table's fields beside its per-dtype clocks.
_FIELDS = ("power_limit_w", "peak_mhz", "memory_w", "idle_w")


@dataclass(frozen=True)
class ClockModel:
    power_limit_w: float
    peak_mhz: float
    sustained_mhz: tuple = ()  # ((dtype key, MHz), ...), sorted by key
    memory_w: float | None = None  # board power while memory-bound kernels run (the step-average clock: .power)
    idle_w: float | None = None  # board power through communication waits and launch gaps
    step: bool = False  # the clocks are a step's own (:func:`at_clocks`), every kernel's: not a stream's at the limit

    def factor(self, key: str) -> float:
        """The dtype's sustained clock over the clock the matrix peak is stated at (1 for an unlisted dtype)."""
        mhz = dict(self.sustained_mhz).get(key)
        return mhz / self.peak_mhz if mhz is not None else 1.0

    def as_toml(self) -> dict[str, Any]:
        power = {k: v for k, v in (("memory_w", self.memory_w), ("idle_w", self.idle_w)) if v is not None}
        return {"power_limit_w": self.power_limit_w, "peak_mhz": self.peak_mhz, **power, **dict(self.sustained_mhz)}

    @property
    def has_power(self) -> bool:
        """Whether the table gives the power of a step's other kernels (what :func:`step_average` needs)."""
        return self.memory_w is not None and self.idle_w is not None


def _number(v: Any, kind: str, where: str) -> float:
    try:
        return float(checked(v, kind))
    except ValueError as e:
        raise ValueError(f"{where} {e}") from None


def parse_clock(table: Any, where: str, keys: tuple) -> ClockModel:
    """A :class:`ClockModel` from a profile's ``clock`` table (ValueError with ``where`` on bad input): both of
    ``power_limit_w`` and ``peak_mhz``, per dtype key a sustained clock no higher than ``peak_mhz``, and optionally
    ``memory_w`` and ``idle_w`` (both or neither), each below the limit."""
    known_table(table, where, _FIELDS + tuple(keys))
    for need in ("power_limit_w", "peak_mhz"):
        if need not in table:
            raise ValueError(f"{where}: missing field {need!r}")
    limit = _number(table["power_limit_w"], "w", f"{where}.power_limit_w")
    peak = _number(table["peak_mhz"], "mhz", f"{where}.peak_mhz")
    held = []
    for key in sorted(k for k in table if k in keys):
        mhz = _number(table[key], "mhz", f"{where}.{key}")
        if mhz > peak:
            raise ValueError(f"{where}.{key}: a sustained clock above peak_mhz ({mhz:g} > {peak:g} MHz)")
        held.append((key, mhz))
    if ("memory_w" in table) != ("idle_w" in table):
        raise ValueError(f"{where}: memory_w and idle_w go together (the step-average clock needs both)")
    power = {}
    if "memory_w" in table:
        if limit <= floor_w():
            raise ValueError(f"{where}.power_limit_w: at or below the power curve's floor ({limit:g} <= "
                             f"{floor_w():.0f} W): no step-average clock")
    for key in ("memory_w", "idle_w"):
        if key in table:
            power[key] = _number(table[key], "w", f"{where}.{key}")
            if power[key] >= limit:
                raise ValueError(f"{where}.{key}: at or above power_limit_w ({power[key]:g} >= {limit:g} W)")
    return ClockModel(limit, peak, tuple(held), **power)


def sustained(hw):
    """``hw`` marked as running a long stream of matrix work: its dots priced at the clock its ``clock`` table
    holds under the power limit (``hw`` itself where it has no such table or is marked already)."""
    if getattr(hw, "clock", None) is None or getattr(hw, "sustained", False):
        return hw
    return dataclasses.replace(hw, sustained=True)


def clock_factor(hw, key: str) -> float:
    """What a dot's efficiency is multiplied by on ``hw``: the clock factor of ``key`` on a sustained profile,
    else 1."""
    model = getattr(hw, "clock", None)
    if model is None or not getattr(hw, "sustained", False):
        return 1.0
    return model.factor(key)


def at_clocks(hw, mhz: dict):
    """``hw`` marked sustained with its clock table's per-dtype clocks replaced by ``mhz`` (dtype key -> MHz: the
    clocks a step holds, :func:`step_average`); the keys ``mhz`` lacks keep theirs."""
    model = hw.clock
    held = dict(model.sustained_mhz) | {k: min(float(v), model.peak_mhz) for k, v in mhz.items()}
    return dataclasses.replace(hw, clock=dataclasses.replace(model, sustained_mhz=tuple(sorted(held.items())),
                                                             step=True), sustained=True)


def step_average(hw, dots_s: float, memory_s: float, idle_s: float, attention: tuple = (0.0, 0.0)) -> dict:
    """Per dtype key of ``hw``'s clock table, the clock a step holds whose products take ``dots_s`` at the peak's
    clock, its memory-bound kernels ``memory_s`` and its waits and gaps ``idle_s`` (:func:`.power.step_clock`); {}
    where the profile has no clock table or no power of the other kernels. ``attention``: the fused attention's
    (seconds at the peak's clock, seconds its products would take at the tensor cores' full issue rate): tensor-core
    work at its own activity (that rate's share of its time) over the bf16 stream's (the profile's large-shape GEMM
    efficiency, held at the bf16 clock: the attention's products are bf16 under an fp8 recipe too)."""
    model = getattr(hw, "clock", None)
    if model is None or not model.has_power:
        return {}
    held = dict(model.sustained_mhz)
    others = ()
    if attention[0] > 0:
        gemm = getattr(hw, "gemm", None)
        stream = gemm.base(1 << 62, "bf16") if gemm is not None else 1.0
        others = ((attention[0], attention[1] / stream, held.get("bf16", model.peak_mhz)),)
    return {key: step_clock(dots_s, memory_s, idle_s, peak_mhz=model.peak_mhz, stream_mhz=mhz,
                            limit_w=model.power_limit_w, memory_w=model.memory_w, idle_w=model.idle_w,
                            others=others)
            for key, mhz in model.sustained_mhz}
