"""The requests a serving simulation is given: lengths (fixed or drawn), arrivals (a closed loop of a fixed
concurrency, a Poisson rate, or a trace file), all deterministic for a seed.

Lengths (:class:`Lengths`, ``--isl`` / ``--osl``): ``1024`` (fixed), ``uniform:LO:HI`` (whole numbers, both
ends included), ``normal:MEAN:STD`` (rounded, clipped to [1, 2 x MEAN]).

Trace files (:func:`read_trace`): CSV with the header ``arrival_s,input_tokens,output_tokens``, or JSON Lines,
one object per line with those three keys; arrival_s >= 0 (seconds from the start, any order: sorted by arrival,
ties in file order), token counts whole numbers >= 1. Any other line is an error naming it.
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass

import numpy as np

TRACE_FIELDS = ("arrival_s", "input_tokens", "output_tokens")


class LoadError(ValueError):
    """A length spec, a trace file or a workload that cannot be used: one line for the user."""


@dataclass(frozen=True)
class Lengths:
    """Token counts: ``kind`` fixed (``a``), uniform (``a``..``b``), normal (mean ``a``, std ``b``)."""

    kind: str
    a: int
    b: int = 0

    @classmethod
    def parse(cls, text: str, what: str = "--isl") -> "Lengths":
        parts = str(text).strip().split(":")
        try:
            nums = [int(p) for p in (parts[1:] if len(parts) > 1 else parts)]
        except ValueError:
            nums = None
        kind = parts[0] if len(parts) > 1 else "fixed"
        arity = {"fixed": 1, "uniform": 2, "normal": 2}
        if nums is None or kind not in arity or len(nums) != arity[kind]:
            raise LoadError(f"{what} {text!r}: give N, uniform:LO:HI or normal:MEAN:STD (whole numbers)")
        if kind == "fixed" and nums[0] < 1 or kind == "uniform" and not 1 <= nums[0] <= nums[1] \
                or kind == "normal" and (nums[0] < 1 or nums[1] < 0):
            raise LoadError(f"{what} {text!r}: lengths are whole numbers >= 1 (uniform: LO <= HI; normal: STD >= 0)")
        return cls(kind, *nums)

    @property
    def most(self) -> int:
        return {"fixed": self.a, "uniform": self.b, "normal": 2 * self.a}[self.kind]

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, self.a, dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(self.a, self.b + 1, size=n, dtype=np.int64)
        return np.clip(np.rint(rng.normal(self.a, self.b, size=n)), 1, 2 * self.a).astype(np.int64)

    def __str__(self) -> str:
        return str(self.a) if self.kind == "fixed" else f"{self.kind}:{self.a}:{self.b}"


@dataclass(frozen=True)
class Workload:
    """``inputs``, ``outputs``: per request; ``arrivals``: seconds (None: a closed loop of ``concurrency``, each
    request sent when one finishes)."""

    inputs: np.ndarray
    outputs: np.ndarray
    arrivals: np.ndarray | None = None
    concurrency: int | None = None
    describe: str = ""

    def __len__(self) -> int:
        return len(self.inputs)


def make(isl: Lengths, osl: Lengths, num: int, concurrency: int | None = None, rate: float | None = None,
         seed: int = 0) -> Workload:
    """``num`` requests, lengths drawn with ``seed``; closed loop at ``concurrency`` or Poisson at ``rate``/s
    (exponential gaps, the first request at its first gap)."""
    if (concurrency is None) == (rate is None):
        raise LoadError("give one of a concurrency (closed loop) or a request rate (Poisson arrivals)")
    if num < 1:
        raise LoadError(f"the number of requests must be at least 1, got {num}")
    rng = np.random.default_rng(seed)
    inputs, outputs = isl.draw(rng, num), osl.draw(rng, num)
    if rate is not None:
        if not (math.isfinite(rate) and rate > 0):
            raise LoadError(f"the request rate must be a positive number per second, got {rate}")
        arrivals = np.cumsum(rng.exponential(1.0 / rate, size=num))
        return Workload(inputs, outputs, arrivals, None, f"{num} requests, Poisson {rate:g}/s, seed {seed}")
    if concurrency < 1:
        raise LoadError(f"the concurrency must be at least 1, got {concurrency}")
    return Workload(inputs, outputs, None, concurrency, f"{num} requests, concurrency {concurrency}, seed {seed}")


def _row(values: dict, where: str) -> tuple[float, int, int]:
    missing = [k for k in TRACE_FIELDS if k not in values]
    if missing:
        raise LoadError(f"{where}: missing {', '.join(missing)} (a trace row has {', '.join(TRACE_FIELDS)})")
    if any(isinstance(values[k], bool) for k in TRACE_FIELDS):  # (JSON's true is no count: float(True) is 1.0)
        raise LoadError(f"{where}: arrival_s must be a number and the token counts whole numbers, not true/false")
    try:
        t = float(values["arrival_s"])
        n_in, n_out = (values[k] for k in TRACE_FIELDS[1:])
        n_in = int(n_in) if float(n_in) == int(float(n_in)) else None
        n_out = int(n_out) if float(n_out) == int(float(n_out)) else None
    except (TypeError, ValueError, OverflowError):
        raise LoadError(f"{where}: arrival_s must be a number and the token counts whole numbers") from None
    if not (math.isfinite(t) and t >= 0) or n_in is None or n_out is None or n_in < 1 or n_out < 1:
        raise LoadError(f"{where}: arrival_s must be >= 0 and the token counts whole numbers >= 1")
    return t, n_in, n_out


def read_trace(path: str) -> Workload:
    """A trace file (CSV or JSON Lines, see the module), sorted by arrival."""
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as e:
        raise LoadError(f"--trace {path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    lines = text.splitlines()
    first = next((ln for ln in lines if ln.strip()), "")
    rows = []
    if first.lstrip().startswith("{"):
        for i, ln in enumerate(lines, 1):
            if not ln.strip():
                continue
            try:
                obj = json.loads(ln)
            except json.JSONDecodeError as e:
                raise LoadError(f"--trace {path}:{i}: not JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise LoadError(f"--trace {path}:{i}: a line must be an object with {', '.join(TRACE_FIELDS)}")
            rows.append(_row(obj, f"--trace {path}:{i}"))
    else:
        reader = csv.DictReader(lines)
        if reader.fieldnames is None or any(k not in reader.fieldnames for k in TRACE_FIELDS):
            raise LoadError(f"--trace {path}: a CSV trace's header is {','.join(TRACE_FIELDS)}")
        for i, rec in enumerate(reader, 2):
            rows.append(_row(rec, f"--trace {path}:{i}"))
    if not rows:
        raise LoadError(f"--trace {path}: no requests in it")
    order = sorted(range(len(rows)), key=lambda i: (rows[i][0], i))
    arr = np.array([rows[i][0] for i in order], dtype=float)
    ins = np.array([rows[i][1] for i in order], dtype=np.int64)
    outs = np.array([rows[i][2] for i in order], dtype=np.int64)
    return Workload(ins, outs, arr, None, f"{len(rows)} requests from {path}")
