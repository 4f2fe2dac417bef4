"""The GEMM efficiency model of a hardware profile: the fraction of the matrix peak a dot reaches.

A profile's optional ``[profile.<name>.gemm]`` table::

    efficiency = 0.8         # achieved fraction of peak on large shapes (cuBLAS-class libraries)
    compute_units = 108      # SMs / cores that tiles are spread over (0: no wave quantization)
    tile = [256, 128]        # output tile (rows, columns) one compute unit computes at a time
    k_half = 128             # the contraction length at which a dot reaches half its rate (0: no small-K loss)
    split_k = false          # true: an output of fewer tiles than compute units is split along K (split-K)
    [profile.<name>.gemm.curve]   # optional, per dtype key (from `mhlo-cost calibrate`):
    f32 = [[0.001, 0.21], [0.1, 0.55], [10.0, 0.83]]   # [GFLOP of one dot, fraction of peak], ascending

``efficiency(M, N, K, dtype)`` = base x wave x depth, where base is the curve of the dtype interpolated on
log(FLOPs) (clamped at its ends) when the profile has one for that dtype, else ``efficiency``; and wave is
the wave-quantization factor tiles / (waves x compute units), tiles = batch x ceil(M / tile_m) x
ceil(N / tile_n), waves = ceil(tiles / compute units): the last wave of tiles leaves units idle; and
depth = K / (K + k_half) charges each output tile a fixed cost (filling the operand pipeline, writing the
tile out) worth k_half steps of its contraction loop, which a short K cannot amortise (1 with k_half = 0).
With ``split_k``, an output of fewer tiles than compute units is computed in units // tiles slices of its
contraction (cuBLAS's split-K), each slice a tile of work: tiles x (units // tiles) fill the units.
A profile without the table runs every dot at the datasheet peak (efficiency 1).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .limits import MAX_COUNT, checked, known_table

_FIELDS = ("efficiency", "compute_units", "tile", "k_half", "curve", "split_k")


@dataclass(frozen=True)
class GemmModel:
    efficiency: float = 1.0
    compute_units: int = 0
    tile: tuple[int, int] = (128, 128)
    curve: tuple = ()  # ((dtype key, ((flops, fraction), ...)), ...), flops ascending
    k_half: int = 0
    split_k: bool = False

    def base(self, flops: int, key: str) -> float:
        """The fraction of peak before wave quantization: the dtype's curve at ``flops``, else the
        large-shape efficiency."""
        pts = dict(self.curve).get(key)
        if not pts:
            return self.efficiency
        if flops <= pts[0][0]:
            return pts[0][1]
        if flops >= pts[-1][0]:
            return pts[-1][1]
        x = math.log(flops)
        for (f0, e0), (f1, e1) in zip(pts, pts[1:]):
            if f0 <= flops <= f1:
                span = math.log(f1) - math.log(f0)  # 0 for two neighbouring floats
                t = (x - math.log(f0)) / span if span > 0 else 1.0
                return e0 + t * (e1 - e0)
        return pts[-1][1]

    def wave(self, batch: int, m: int, n: int) -> float:
        """tiles / (waves x compute units); 1 without compute units or for an empty output."""
        if self.compute_units <= 0 or batch <= 0 or m <= 0 or n <= 0:
            return 1.0
        tiles = batch * -(-m // self.tile[0]) * -(-n // self.tile[1])
        if self.split_k and tiles < self.compute_units:
            tiles *= self.compute_units // tiles
        waves = -(-tiles // self.compute_units)
        return tiles / (waves * self.compute_units)

    def depth(self, k: int) -> float:
        """K / (K + k_half): the share of a tile's time spent in its contraction loop; 1 without k_half."""
        if self.k_half <= 0 or k <= 0:
            return 1.0
        return k / (k + self.k_half)

    def efficiency_of(self, batch: int, m: int, n: int, k: int, key: str) -> float:
        return self.base(2 * batch * m * n * k, key) * self.wave(batch, m, n) * self.depth(k)

    def as_toml(self) -> dict[str, Any]:
        out: dict[str, Any] = {"efficiency": self.efficiency, "compute_units": self.compute_units,
                               "tile": list(self.tile)}
        if self.k_half:
            out["k_half"] = self.k_half
        if self.split_k:
            out["split_k"] = True
        if self.curve:
            out["curve"] = {k: [[f / 1e9, e] for f, e in pts] for k, pts in self.curve}
        return out


def _fraction(v: Any, where: str) -> float:
    try:
        return float(checked(v, "fraction"))
    except ValueError as e:
        raise ValueError(f"{where} {e}") from None


def _curve(table: Any, where: str, keys: tuple) -> tuple:
    if not isinstance(table, dict):
        raise ValueError(f"{where} must be a table of dtype = [[GFLOP, fraction], ...]")
    out = []
    for key, pts in sorted(table.items()):
        w = f"{where}.{key}"
        if key not in keys:
            raise ValueError(f"{w}: unknown dtype key (known: {', '.join(keys)})")
        if not isinstance(pts, list) or not pts or not all(isinstance(p, list) and len(p) == 2 for p in pts):
            raise ValueError(f"{w} must be a non-empty list of [GFLOP, fraction] pairs")
        parsed = []
        for g, e in pts:
            try:
                gflop = checked(g, "gflop")
            except ValueError as err:
                raise ValueError(f"{w}: GFLOP {err}") from None
            parsed.append((float(gflop * 10 ** 9), _fraction(e, w)))
        if any(b[0] <= a[0] for a, b in zip(parsed, parsed[1:])):
            raise ValueError(f"{w}: GFLOP must be strictly ascending")
        out.append((key, tuple(parsed)))
    return tuple(out)


def parse_gemm(table: Any, where: str, keys: tuple) -> GemmModel:
    """A :class:`GemmModel` from a profile's ``gemm`` table (ValueError with ``where`` on bad input)."""
    known_table(table, where, _FIELDS)
    cu = table.get("compute_units", 0)
    if isinstance(cu, bool) or not isinstance(cu, int) or not 0 <= cu <= MAX_COUNT:
        raise ValueError(f"{where}.compute_units must be a whole number in [0, {MAX_COUNT}], got {cu!r}")
    tile = table.get("tile", [128, 128])
    if (not isinstance(tile, list) or len(tile) != 2
            or not all(isinstance(t, int) and not isinstance(t, bool) and 0 < t <= MAX_COUNT for t in tile)):
        raise ValueError(f"{where}.tile must be [rows, columns] of whole numbers in [1, {MAX_COUNT}], got {tile!r}")
    kh = table.get("k_half", 0)
    if isinstance(kh, bool) or not isinstance(kh, int) or not 0 <= kh <= MAX_COUNT:
        raise ValueError(f"{where}.k_half must be a whole number in [0, {MAX_COUNT}], got {kh!r}")
    split = table.get("split_k", False)
    if not isinstance(split, bool):
        raise ValueError(f"{where}.split_k must be true or false, got {split!r}")
    eff = _fraction(table.get("efficiency", 1), f"{where}.efficiency")
    return GemmModel(eff, cu, (tile[0], tile[1]), _curve(table.get("curve", {}), f"{where}.curve", keys), kh, split)
