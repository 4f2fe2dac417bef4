"""Kernel models of a hardware profile read off measurements, not datasheet peaks: the HBM bandwidth a kernel
reaches for its size, and the fused attention kernels of each library.

``[profile.<name>.memory]``::

    efficiency = 0.8     # fraction of the datasheet HBM bandwidth that large streaming kernels reach
    half_size_mb = 11    # bytes one kernel moves at which it reaches half of that (MB, 1e6 bytes)

A kernel moving ``n`` bytes reaches ``peak x efficiency x n / (n + half)``: its memory time is
``(n + half) / (peak x efficiency)``, a fixed fill-and-drain cost plus a stream (:meth:`MemoryModel.time`).

Two optional rates (TB/s) for PyTorch eager's elementwise kernels that do not stream with vector loads
(:data:`PATHS`; :func:`mhlo_cost.roofline.eager.eager_path` says which kernel takes which)::

    generic_tbps = 1.51  # TensorIterator's generic path: an operand broadcast ([B,1,C] + [B,N,C]) or strided
                         # (a transposed view copied or read): one element per load, with index arithmetic
    convert_tbps = 2.14  # its unrolled path: a widening dtype conversion (bf16 -> f32), mixed-dtype operands
    reduce_row_ns = 0.18 # its reduction kernel: a fixed time per row reduced (per output element), beside the
                         # stream: a mean over rows of 32 f32 elements runs at a seventh of one over rows of 4096
    l2_mib = 50          # the L2 cache (MiB): a two-pass row kernel of eager (torch's LayerNorm / RMSNorm) reads
                         # again from HBM the lines of its rows that the other rows in flight evicted between the
                         # two reads (:func:`mhlo_cost.roofline.two_pass.reread_bytes`); absent: every second read hits

A kernel on such a path streams its bytes at ``min(peak x efficiency, rate)`` after the same fill and drain;
a profile without the field streams at the full rate on every path.

``[profile.<name>.attention]``::

    library = "fa2"                                   # the kernel a fused attention runs as by default
    fa2 = { forward = 0.5, backward = 0.4, ramp = 2 } # fraction of the matrix peak per pass; ramp: key/value
                                                      # tiles (of `tile` keys) at which half of that is lost
    fa3 = { forward = 0.9, backward = 0.6, ramp = 2, exp_exposed = 1 }
    tile = 128

A fused attention kernel's matrix time is its GEMM FLOPs over the blocks it computes (a causal mask skips the
tiles above the diagonal) / (peak x fraction x n / (n + ramp)), n the key tiles one query tile visits; the
exponentials and the vector work run beside the matrix units: the kernel's compute time is the largest of the
three, plus ``exp_exposed`` (a fraction, default 0) of the exponentials' time added to the matrix time, the part of
the softmax the kernel does not hide behind its products (on GH100 the exponential unit runs at 1/256 of the bf16
matrix rate: at head dim 64 the exponentials of a tile take about as long as its two products, at 256 a quarter).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .limits import checked, known_table

LIBRARIES = ("fa2", "fa3", "cudnn")
#: How an eager elementwise kernel moves its bytes: vector loads (stream), TensorIterator's generic path
#: (a broadcast or strided operand) or its unrolled path (a widening dtype conversion).
PATHS = ("stream", "generic", "convert")
_MEMORY_FIELDS = ("efficiency", "half_size_mb", "generic_tbps", "convert_tbps", "reduce_row_ns", "l2_mib")
_LIB_FIELDS = ("forward", "backward", "ramp", "exp_exposed")


@dataclass(frozen=True)
class MemoryModel:
    efficiency: float = 1.0
    half_bytes: float = 0.0
    generic_bw: float = 0.0  # bytes/s of the generic elementwise path; 0: the streaming rate
    convert_bw: float = 0.0  # bytes/s of the unrolled (converting) path; 0: the streaming rate
    reduce_row_s: float = 0.0  # seconds per row an eager reduction kernel reduces, beside its stream
    l2_bytes: int = 0  # the L2 cache's bytes (0: not given; a second read of a row always hits)

    def rate(self, peak: float, path: str = "stream") -> float:
        """Bytes/s a large kernel on ``path`` (:data:`PATHS`) streams at."""
        full = peak * self.efficiency
        cap = {"generic": self.generic_bw, "convert": self.convert_bw}.get(path, 0.0)
        return min(full, cap) if cap > 0 else full

    def time(self, nbytes: float, peak: float, kernels: int = 1, path: str = "stream") -> float:
        """Seconds for ``kernels`` executions moving ``nbytes`` in all (0 for no bytes): each kernel's fill and
        drain (the same on every path) and the bytes at the rate of ``path``."""
        if nbytes <= 0:
            return 0.0
        full, rate = peak * self.efficiency, self.rate(peak, path)
        if rate == full:
            return (nbytes + kernels * self.half_bytes) / full
        return kernels * self.half_bytes / full + nbytes / rate

    def as_toml(self) -> dict:
        out = {"efficiency": self.efficiency, "half_size_mb": self.half_bytes / 1e6}
        for name, bw in (("generic_tbps", self.generic_bw), ("convert_tbps", self.convert_bw)):
            if bw > 0:
                out[name] = bw / 1e12
        if self.reduce_row_s > 0:
            out["reduce_row_ns"] = self.reduce_row_s * 1e9
        if self.l2_bytes > 0:
            out["l2_mib"] = self.l2_bytes / 2**20
        return out


@dataclass(frozen=True)
class AttentionLibrary:
    forward: float
    backward: float
    ramp: float = 0.0
    exp_exposed: float = 0.0  # the fraction of the exponentials' time added to the matrix time (not hidden)

    def fraction(self, backward: bool, key_tiles: float) -> float:
        base = self.backward if backward else self.forward
        return base * key_tiles / (key_tiles + self.ramp) if key_tiles > 0 else base


@dataclass(frozen=True)
class AttentionModel:
    library: str = "fa2"
    libraries: tuple = ()  # ((name, AttentionLibrary), ...)
    tile: int = 128

    def get(self, name: str | None = None) -> AttentionLibrary | None:
        return dict(self.libraries).get(name or self.library)

    def as_toml(self) -> dict:
        out: dict[str, Any] = {"library": self.library, "tile": self.tile}
        for name, lib in self.libraries:
            out[name] = {"forward": lib.forward, "backward": lib.backward, "ramp": lib.ramp}
            if lib.exp_exposed:
                out[name]["exp_exposed"] = lib.exp_exposed
        return out


def backward_pass_bytes(q_rows: int, head_dim: int, itemsize: int) -> int:
    """The HBM bytes of the two memory-bound kernels a FlashAttention-style backward runs beside its main kernel
    (FlashAttention-2 / -3 ``flash_bwd_preprocess`` / ``postprocess``; cuDNN's backward takes the same f32 dQ
    workspace): before it, D = rowsum(dO * O) (O and dO read, D written in f32, one per query row) and the f32 dQ
    accumulator zeroed; after it, that accumulator (into which the main kernel adds each key tile's dQ with
    atomics) read and written out as dQ. Per element of Q (``q_rows`` x ``head_dim``, ``itemsize`` bytes each):
    3 x ``itemsize`` + 2 x 4; per query row 4. They run one after the other with the main kernel, so their time
    adds to its time (:func:`mhlo_cost.roofline.attention_compute.kernel_compute_s`)."""
    return q_rows * head_dim * (3 * itemsize + 8) + 4 * q_rows


def _number(v: Any, kind: str, where: str):
    try:
        return checked(v, kind)
    except ValueError as e:
        raise ValueError(f"{where} {e}") from None


def parse_memory(table: Any, where: str) -> MemoryModel:
    t = known_table(table, where, _MEMORY_FIELDS)
    eff = float(_number(t.get("efficiency", 1), "fraction", f"{where}.efficiency"))
    half = float(_number(t.get("half_size_mb", 0), "mb", f"{where}.half_size_mb")) * 1e6
    paths = [float(_number(t[k], "tb_s", f"{where}.{k}")) * 1e12 if k in t else 0.0
             for k in ("generic_tbps", "convert_tbps")]
    row = float(_number(t.get("reduce_row_ns", 0), "ns", f"{where}.reduce_row_ns")) * 1e-9
    l2 = int(_number(t.get("l2_mib", 0), "mb", f"{where}.l2_mib") * 2**20)
    return MemoryModel(eff, half, *paths, row, l2)


def parse_attention(table: Any, where: str) -> AttentionModel:
    t = known_table(table, where, ("library", "tile") + LIBRARIES)
    lib = t.get("library", "fa2")
    if lib not in LIBRARIES:
        raise ValueError(f"{where}.library must be one of {', '.join(LIBRARIES)}, got {lib!r}")
    tile = t.get("tile", 128)
    if isinstance(tile, bool) or not isinstance(tile, int) or not 1 <= tile <= 65536:
        raise ValueError(f"{where}.tile must be a whole number in [1, 65536], got {tile!r}")
    libs = []
    for name in LIBRARIES:
        if name in t:
            w = f"{where}.{name}"
            e = known_table(t[name], w, _LIB_FIELDS)
            fwd = float(_number(e.get("forward", 1), "fraction", f"{w}.forward"))
            bwd = float(_number(e.get("backward", fwd), "fraction", f"{w}.backward"))
            ramp = float(_number(e.get("ramp", 0), "count", f"{w}.ramp"))
            exposed = float(_number(e.get("exp_exposed", 0), "share", f"{w}.exp_exposed"))
            libs.append((name, AttentionLibrary(fwd, bwd, ramp, exposed)))
    if lib not in dict(libs):
        raise ValueError(f"{where}: the default library {lib!r} needs its table [{where.split()[-1]}.{lib}]")
    return AttentionModel(lib, tuple(libs), tile)
