"""One chip's peak rates (:class:`Hardware`), the dtype names it answers for, and its time models.

Profiles are read from TOML by :mod:`mhlo_cost.machines.catalogue`; import both through
:mod:`mhlo_cost.machines.hardware`.

Dtype names
-----------
:meth:`Hardware.matrix_peak` and :meth:`Hardware.vector_peak` take MLIR element
type names as they appear in IR (``bf16``, ``f16``, ``f32``, ``f64``, ``tf32``,
``f8E4M3FN``, ``f8E5M2``, ``f8E4M3FNUZ``, ..., ``f4E2M1FN``, ``i8``, ``ui8``,
``i32``, ``i1``, ``complex<f32>``, ...).  Each is mapped to a profile key
(``bf16 f16 tf32 f32 f64 fp8 fp6 fp4 int8 int4 int32``):

* all ``f8*`` types -> ``fp8``; ``f6*`` -> ``fp6``; ``f4*`` -> ``fp4``;
* ``i1``/``i2``/``i4`` (and ``ui``/``si`` forms) -> ``int4``, 8-bit ints -> ``int8``,
  16/32/64-bit ints and ``index`` -> ``int32`` (64-bit ints are priced at the
  32-bit rate: optimistic);
* ``complex<fT>`` -> the rate of ``fT``: the caller counts the real FLOPs of a
  complex op (a complex multiply is 6 real FLOPs), the peak is per real FLOP.

Fallbacks
---------
If a profile has no rate for a key, the next key of its chain is used:
``fp4 -> fp6 -> fp8 -> f16 -> bf16 -> f32``, ``fp6 -> fp8 -> ...``,
``fp8 -> f16 -> bf16 -> f32``, ``bf16 -> f32``, ``f16 -> f32``, ``tf32 -> f32``,
``int4 -> int8 -> int32``.  For the matrix unit this models a format the unit
lacks being upcast (XLA upcasts fp8 dots on Ampere, for instance).  When no
key of the chain has a matrix rate, the op is assumed to run on the vector
unit and :meth:`Hardware.vector_peak` answers.

``f32`` matmuls are conservative by default: an ``f32`` dot is priced at the
profile's ``f32`` matrix rate if it lists one (a chip whose matrix unit does
true f32), else at the vector (CUDA-core) ``f32`` rate.  A profile with
``f32_matmul = "tf32"`` prices ``f32`` dots at its ``tf32`` matrix rate instead
(what cuBLAS/XLA do when TF32 is allowed).

An unknown dtype name, or a dtype for which neither table has any rate of its
chain, raises :class:`HardwareError`.

Communication
-------------
:meth:`Hardware.comm_time` is the alpha-beta model
``steps * hop_latency + comm_bytes / link_bandwidth``, where ``link_bandwidth``
is the per-device bandwidth in ONE direction and ``comm_bytes`` the bytes one
device sends (for a ring all-reduce of ``S`` bytes over ``n`` devices:
``comm_bytes = 2 (n-1)/n * S``, ``steps = 2 (n-1)``).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from .clock import ClockModel
from .gemm import GemmModel
from .kernels import AttentionModel, MemoryModel


class HardwareError(ValueError):
    """A hardware profile is missing, malformed, or lacks a rate that was asked for."""


#: Profile keys of the per-dtype rate tables.
DTYPE_KEYS = ("bf16", "f16", "tf32", "f32", "f64", "fp8", "fp6", "fp4", "int8", "int4", "int32")

#: Per dtype key, the keys whose rate a dot / an elementwise op in it is priced at, first stated first (an upcast).
FALLBACK_CHAINS: dict[str, tuple[str, ...]] = {
    "fp4": ("fp4", "fp6", "fp8", "f16", "bf16", "f32"),
    "fp6": ("fp6", "fp8", "f16", "bf16", "f32"),
    "fp8": ("fp8", "f16", "bf16", "f32"),
    "bf16": ("bf16", "f32"),
    "f16": ("f16", "f32"),
    "tf32": ("tf32", "f32"),
    "f32": ("f32",),
    "f64": ("f64",),
    "int4": ("int4", "int8", "int32"),
    "int8": ("int8", "int32"),
    "int32": ("int32",),
}

_INT_RE = re.compile(r"^(?:[su]?i|ui)(\d+)$")
_COMPLEX_RE = re.compile(r"^complex\s*<\s*(.+?)\s*>$")


def canonical_dtype(dtype: str) -> str:
    """Map an MLIR element type name (or a profile key) to a profile key.

    >>> canonical_dtype("f8E4M3FN"), canonical_dtype("i8"), canonical_dtype("complex<f32>"), canonical_dtype("i1")
    ('fp8', 'int8', 'f32', 'int8')
    """
    if not isinstance(dtype, str):
        raise HardwareError(f"dtype must be a string, got {dtype!r}")
    d = dtype.strip()
    m = _COMPLEX_RE.match(d)
    if m:
        inner = canonical_dtype(m.group(1))
        if inner not in ("f16", "bf16", "f32", "f64"):
            raise HardwareError(f"unsupported dtype {dtype!r}: complex element type must be f16, bf16, f32 or f64")
        return inner
    low = d.lower()
    if low in DTYPE_KEYS:
        return low
    if low in ("float32", "fp32"):
        return "f32"
    if low in ("float64", "fp64"):
        return "f64"
    if low in ("float16", "fp16"):
        return "f16"
    if low == "bfloat16":
        return "bf16"
    if low.startswith("f8") or low.startswith("float8"):
        return "fp8"
    if low.startswith("f6") or low.startswith("float6"):
        return "fp6"
    if low.startswith("f4") or low.startswith("float4"):
        return "fp4"
    if low == "index":
        return "int32"
    m = _INT_RE.match(low)
    if m:
        bits = int(m.group(1))
        if bits == 1:  # a predicate is stored and computed on as a byte (XLA's ByteWidth(PRED) is 1)
            return "int8"
        if 2 <= bits <= 4:
            return "int4"
        if bits <= 8:
            return "int8"
        if bits <= 64:
            return "int32"
    raise HardwareError(
        f"unknown dtype {dtype!r}: expected an MLIR element type such as bf16, f16, f32, "
        f"f64, tf32, f8E4M3FN, f8E5M2, i8, i32, complex<f32>"
    )


@dataclass(frozen=True)
class Hardware:
    """One chip's peak rates, in SI units (FLOP/s, bytes/s, bytes, seconds)."""

    name: str
    description: str
    matrix_flops: Mapping[str, float]
    vector_flops: Mapping[str, float]
    transcendental_rate: float
    hbm_bandwidth: float
    hbm_capacity: float
    link_bandwidth: float
    hop_latency: float
    kernel_overhead: float
    source: str
    aliases: tuple[str, ...] = ()
    vendor: str = ""
    f32_matmul: str = "f32"
    gemm: GemmModel | None = None  # GEMM efficiency model (None: dots at the datasheet peak)
    row_fusion: bool = True  # whether the compiler runs a row reduction and its consumers as one kernel
    memory: MemoryModel | None = None  # achievable HBM bandwidth by kernel size (None: the datasheet figure)
    attention: AttentionModel | None = None  # fused attention kernels per library (None: at the GEMM model)
    dispatch_overhead: float | None = None  # host seconds per framework op in eager mode (None: the model's estimate)
    clock: ClockModel | None = None  # the tensor cores' clock under the power limit (None: at the peak's clock)
    sustained: bool = False  # dots priced at ``clock``'s sustained clocks (a long stream of matrix work: .clock)
    # Datasheet facts shown by `mhlo-cost hardware show` that price nothing (no estimate reads them):
    sram: float | None = None  # on-chip SRAM, bytes (L2 / Infinity Cache / SRAM / SBUF, as the datasheet names it)
    tdp: float | None = None  # board power, watts
    link_generation: str = ""  # the interconnect's name and generation (NVLink 5, Infinity Fabric 4, ICI, ...)
    link_count: int | None = None  # links per device that link_bandwidth is the sum of
    notes: Mapping[str, str] = dataclasses.field(default_factory=dict)  # file key -> its source or ESTIMATE text
    references: Mapping[str, str] = dataclasses.field(default_factory=dict)  # source tag -> the document it names

    def __post_init__(self) -> None:
        # Freeze the rate tables so that a shared profile cannot be edited in place.
        object.__setattr__(self, "matrix_flops", MappingProxyType(dict(self.matrix_flops)))
        object.__setattr__(self, "vector_flops", MappingProxyType(dict(self.vector_flops)))
        object.__setattr__(self, "aliases", tuple(self.aliases))
        object.__setattr__(self, "notes", MappingProxyType(dict(self.notes)))
        object.__setattr__(self, "references", MappingProxyType(dict(self.references)))
        if self.f32_matmul not in ("f32", "tf32"):
            raise HardwareError(
                f"hardware {self.name!r}: f32_matmul must be 'f32' or 'tf32', got {self.f32_matmul!r}"
            )

    def __reduce__(self):
        """Pickled (to a worker process) as its attributes, the frozen tables as plain dicts (pickle refuses a
        ``MappingProxyType``), frozen again where it arrives: :func:`_unpickled`."""
        state = {k: (dict(v), True) if isinstance(v, MappingProxyType) else (v, False) for k, v in vars(self).items()}
        return _unpickled, (type(self), state)

    def __hash__(self) -> int:
        return hash((self.name, tuple(sorted(self.matrix_flops.items())),
                     tuple(sorted(self.vector_flops.items())), self.hbm_bandwidth,
                     self.link_bandwidth))

    # -- rates -----------------------------------------------------------------
    def matrix_peak(self, dtype: str) -> float:
        """Peak dense matrix-unit FLOP/s for a dot/convolution in ``dtype``.

        See the module docstring for dtype names and the fallback rules.
        """
        key = canonical_dtype(dtype)
        if key == "f32":
            if self.f32_matmul == "tf32" and "tf32" in self.matrix_flops:
                return self.matrix_flops["tf32"]
            if "f32" in self.matrix_flops:
                return self.matrix_flops["f32"]
            return self.vector_peak("f32")
        for k in FALLBACK_CHAINS[key]:
            if k == "f32":
                # An upcast to f32 obeys the f32 rule above.
                return self.matrix_peak("f32")
            if k in self.matrix_flops:
                return self.matrix_flops[k]
        return self.vector_peak(key)

    def vector_peak(self, dtype: str) -> float:
        """Peak vector-unit (non-matrix) FLOP/s for elementwise work in ``dtype``."""
        key = canonical_dtype(dtype)
        chain = FALLBACK_CHAINS[key]
        for k in chain:
            if k in self.vector_flops:
                return self.vector_flops[k]
        raise HardwareError(
            f"hardware {self.name!r} has no vector rate for dtype {dtype!r} "
            f"(tried {', '.join(chain)})"
        )

    # -- time models -------------------------------------------------------------
    def comm_time(self, comm_bytes: int, steps: int) -> float:
        """Alpha-beta time: ``steps * hop_latency + comm_bytes / link_bandwidth``.

        ``comm_bytes`` is what one device sends over its links in one direction;
        ``steps`` the number of sequential hops (e.g. ``2 (n-1)`` for a ring
        all-reduce over ``n`` devices).
        """
        if comm_bytes < 0 or steps < 0:
            raise HardwareError(
                f"comm_time needs non-negative comm_bytes and steps, got {comm_bytes}, {steps}"
            )
        return steps * self.hop_latency + comm_bytes / self.link_bandwidth

    def memory_time(self, nbytes: float, kernels: int = 0, path: str = "stream") -> float:
        """Time to move ``nbytes`` through HBM: at the datasheet bandwidth (``kernels=0`` or a profile
        without a memory model), else in ``kernels`` kernels at the bandwidth they reach for their size on
        ``path`` (:class:`~mhlo_cost.machines.kernels.MemoryModel`, :data:`~mhlo_cost.machines.kernels.PATHS`)."""
        if self.memory is None or kernels <= 0:
            return nbytes / self.hbm_bandwidth
        return self.memory.time(nbytes, self.hbm_bandwidth, kernels, path)

    def memory_fixed(self, kernels: int) -> float:
        """The part of :meth:`memory_time` for ``kernels`` kernels that does not grow with the bytes (each
        kernel's fill and drain under the measured memory model; 0 without one)."""
        if self.memory is None or kernels <= 0:
            return 0.0
        return kernels * self.memory.half_bytes / (self.hbm_bandwidth * self.memory.efficiency)

    def as_dict(self) -> dict[str, Any]:
        """Plain-dict form (SI units), e.g. for JSON reports."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["matrix_flops"] = dict(self.matrix_flops)
        d["vector_flops"] = dict(self.vector_flops)
        d["aliases"] = list(self.aliases)
        d["notes"] = dict(self.notes)
        d["references"] = dict(self.references)
        d["gemm"] = self.gemm.as_toml() if self.gemm is not None else None
        d["memory"] = self.memory.as_toml() if self.memory is not None else None
        d["attention"] = self.attention.as_toml() if self.attention is not None else None
        d["clock"] = self.clock.as_toml() if self.clock is not None else None
        return d


def _unpickled(kind: type, state: dict) -> Hardware:
    """A profile of class ``kind`` as :meth:`Hardware.__reduce__` sent it (a subclass's own attributes too)."""
    hw = object.__new__(kind)
    for k, (v, proxy) in state.items():
        object.__setattr__(hw, k, MappingProxyType(v) if proxy else v)
    return hw
