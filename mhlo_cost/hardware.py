"""Hardware profiles: peak rates of a chip, for turning counted costs into time.

Profiles live in TOML files written in human units (TFLOP/s, GB/s, GB, us) with
decimal prefixes as vendors use them (1 GB = 1e9 bytes); this module converts
them to exact SI floats (FLOP/s, bytes/s, bytes, seconds).  The shipped
profiles are in ``mhlo_cost/data/hardware.toml``; ``hardware_template.toml``
next to it is a commented template for a user's own chip, loadable with
:func:`load_profiles`.

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
import tomllib
from dataclasses import dataclass
from decimal import Decimal
from importlib import resources
from os import PathLike
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from .files import FileRefused, read_settings
from .gemm import GemmModel, parse_gemm
from .limits import checked

__all__ = [
    "Hardware",
    "HardwareError",
    "check_schema_version",
    "DTYPE_KEYS",
    "canonical_dtype",
    "list_profiles",
    "get_profile",
    "load_profiles",
    "profile_names",
]


class HardwareError(ValueError):
    """A hardware profile is missing, malformed, or lacks a rate that was asked for."""


#: Profile keys of the per-dtype rate tables.
DTYPE_KEYS = ("bf16", "f16", "tf32", "f32", "f64", "fp8", "fp6", "fp4", "int8", "int4", "int32")

_CHAINS: dict[str, tuple[str, ...]] = {
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

    >>> canonical_dtype("f8E4M3FN"), canonical_dtype("i8"), canonical_dtype("complex<f32>")
    ('fp8', 'int8', 'f32')
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
        if 1 <= bits <= 4:
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

    def __post_init__(self) -> None:
        # Freeze the rate tables so that a shared profile cannot be edited in place.
        object.__setattr__(self, "matrix_flops", MappingProxyType(dict(self.matrix_flops)))
        object.__setattr__(self, "vector_flops", MappingProxyType(dict(self.vector_flops)))
        object.__setattr__(self, "aliases", tuple(self.aliases))
        if self.f32_matmul not in ("f32", "tf32"):
            raise HardwareError(
                f"hardware {self.name!r}: f32_matmul must be 'f32' or 'tf32', got {self.f32_matmul!r}"
            )

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
        for k in _CHAINS[key]:
            if k == "f32":
                # An upcast to f32 obeys the f32 rule above.
                return self.matrix_peak("f32")
            if k in self.matrix_flops:
                return self.matrix_flops[k]
        return self.vector_peak(key)

    def vector_peak(self, dtype: str) -> float:
        """Peak vector-unit (non-matrix) FLOP/s for elementwise work in ``dtype``."""
        key = canonical_dtype(dtype)
        chain = _CHAINS[key]
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

    def memory_time(self, nbytes: float) -> float:
        """Time to move ``nbytes`` through HBM at peak bandwidth."""
        return nbytes / self.hbm_bandwidth

    def as_dict(self) -> dict[str, Any]:
        """Plain-dict form (SI units), e.g. for JSON reports."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["matrix_flops"] = dict(self.matrix_flops)
        d["vector_flops"] = dict(self.vector_flops)
        d["aliases"] = list(self.aliases)
        d["gemm"] = self.gemm.as_toml() if self.gemm is not None else None
        return d


# ---------------------------------------------------------------------------------
# TOML loading
# ---------------------------------------------------------------------------------

# field in file -> (Hardware field, SI scale, range kind of mhlo_cost.limits)
_SCALARS: dict[str, tuple[str, Decimal, str]] = {
    "hbm_bandwidth_gb_s": ("hbm_bandwidth", Decimal(10) ** 9, "gb_s"),
    "hbm_capacity_gb": ("hbm_capacity", Decimal(10) ** 9, "gb"),
    "link_bandwidth_gb_s": ("link_bandwidth", Decimal(10) ** 9, "gb_s"),
    "hop_latency_us": ("hop_latency", Decimal(10) ** -6, "us"),
    "kernel_overhead_us": ("kernel_overhead", Decimal(10) ** -6, "us"),
    "transcendental_tops": ("transcendental_rate", Decimal(10) ** 12, "tops"),
}
_TFLOPS = Decimal(10) ** 12
_REQUIRED = ("description", "matrix_tflops", "vector_tflops", *_SCALARS)
_OPTIONAL = ("aliases", "vendor", "source", "f32_matmul", "gemm", "row_fusion")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

_DATA_FILE = "hardware.toml"
_TEMPLATE_FILE = "hardware_template.toml"


def _norm(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def _si(value: Any, scale: Decimal, where: str, kind: str) -> float:
    """Exact decimal -> SI float conversion of a figure in its physical range (mhlo_cost.limits)."""
    try:
        return float(checked(value, kind) * scale)
    except ValueError as e:
        raise HardwareError(f"{where} {e}") from None


def _rates(table: Any, where: str) -> dict[str, float]:
    if not isinstance(table, dict) or not table:
        raise HardwareError(f"{where} must be a non-empty table of dtype = TFLOP/s")
    out = {}
    for k, v in table.items():
        if k not in DTYPE_KEYS:
            raise HardwareError(f"{where}: unknown dtype key {k!r} (known: {', '.join(DTYPE_KEYS)})")
        out[k] = _si(v, _TFLOPS, f"{where}.{k}", "tflops")
    return out


def _build(name: str, entry: Any, origin: str) -> Hardware:
    where = f"{origin}: profile {name!r}"
    if not _NAME_RE.match(name):
        raise HardwareError(f"{where}: bad profile name (use letters, digits, '-', '_', '.')")
    if not isinstance(entry, dict):
        raise HardwareError(f"{where}: must be a table [profile.{name}]")
    # Unknown fields first: a misspelt field would otherwise show up as a missing one.
    unknown = [k for k in entry if k not in _REQUIRED and k not in _OPTIONAL]
    if unknown:
        raise HardwareError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(_REQUIRED + _OPTIONAL)})")
    missing = [k for k in _REQUIRED if k not in entry]
    if missing:
        raise HardwareError(f"{where}: missing field {missing[0]!r}"
                            + (f" (also {', '.join(map(repr, missing[1:]))})" if missing[1:] else ""))

    def text(key: str, default: str) -> str:
        v = entry.get(key, default)
        if not isinstance(v, str):
            raise HardwareError(f"{where}: field {key!r} must be a string, got {v!r}")
        return v

    aliases = entry.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a.strip() for a in aliases):
        raise HardwareError(f"{where}: field 'aliases' must be a list of non-empty strings")
    f32_matmul = text("f32_matmul", "f32")
    if f32_matmul not in ("f32", "tf32"):
        raise HardwareError(f"{where}: field 'f32_matmul' must be \"f32\" or \"tf32\", got {f32_matmul!r}")
    matrix = _rates(entry["matrix_tflops"], f"{where}: field 'matrix_tflops'")
    vector = _rates(entry["vector_tflops"], f"{where}: field 'vector_tflops'")
    if "f32" not in vector:
        raise HardwareError(f"{where}: field 'vector_tflops' needs an 'f32' rate")
    if f32_matmul == "tf32" and "tf32" not in matrix:
        raise HardwareError(f"{where}: f32_matmul = \"tf32\" needs a 'tf32' rate in 'matrix_tflops'")
    try:
        gemm = parse_gemm(entry["gemm"], f"{where}: field 'gemm'", DTYPE_KEYS) if "gemm" in entry else None
    except ValueError as e:
        raise HardwareError(str(e)) from None
    row_fusion = entry.get("row_fusion", True)
    if not isinstance(row_fusion, bool):
        raise HardwareError(f"{where}: field 'row_fusion' must be true or false, got {row_fusion!r}")
    scalars = {hw_field: _si(entry[k], scale, f"{where}: field {k!r}", kind)
               for k, (hw_field, scale, kind) in _SCALARS.items()}
    return Hardware(
        name=name,
        description=text("description", ""),
        matrix_flops=matrix,
        vector_flops=vector,
        source=text("source", origin),
        aliases=tuple(aliases),
        vendor=text("vendor", ""),
        f32_matmul=f32_matmul,
        gemm=gemm,
        row_fusion=row_fusion,
        **scalars,
    )


def check_schema_version(doc: Mapping, origin: str) -> None:
    """A profile file's ``schema_version``, where given, is the whole number 1 (``true`` is not a number)."""
    version = doc.get("schema_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version != 1:
        shown = str(version).lower() if isinstance(version, bool) else repr(version)
        raise HardwareError(f"{origin}: unsupported schema_version {shown} (the whole number 1 is the only one)")


def _parse(data: bytes, origin: str) -> dict[str, Hardware]:
    try:
        doc = tomllib.loads(data.decode("utf-8"), parse_float=Decimal)
    except UnicodeDecodeError as e:
        raise HardwareError(f"{origin}: not UTF-8 text ({e.reason})") from None
    except tomllib.TOMLDecodeError as e:
        raise HardwareError(f"{origin}: not valid TOML: {e}") from None
    check_schema_version(doc, origin)
    extra = [k for k in doc if k not in ("profile", "schema_version", "system")]  # systems: mhlo_cost.network
    if extra:
        raise HardwareError(f"{origin}: unknown top-level key {extra[0]!r} (profiles go under [profile.<name>])")
    table = doc.get("profile")
    if not isinstance(table, dict) or not table:
        raise HardwareError(f"{origin}: no profiles (expected at least one [profile.<name>] table)")
    out: dict[str, Hardware] = {}
    seen: dict[str, str] = {}
    for name, entry in table.items():
        hw = _build(name, entry, origin)
        for n in (hw.name, *hw.aliases):
            key = _norm(n)
            if key in seen and seen[key] != hw.name:
                raise HardwareError(
                    f"{origin}: profile {hw.name!r}: name or alias {n!r} already used by {seen[key]!r}"
                )
            seen[key] = hw.name
        out[hw.name] = hw
    return out


def load_profiles(path: str | PathLike[str]) -> dict[str, Hardware]:
    """Load every ``[profile.<name>]`` of a TOML file, keyed by profile name.

    Raises :class:`HardwareError` (a ``ValueError``) with a one-line message
    naming the file and the offending field when the file is unreadable, not
    TOML, or a profile misses a field or has a non-positive number.
    """
    p = Path(path)
    try:
        data = read_settings(p, "a hardware file")
    except FileRefused as e:
        raise HardwareError(str(e)) from None
    return _parse(data, str(p))


_BUILTIN: dict[str, Hardware] | None = None


def _builtin() -> dict[str, Hardware]:
    global _BUILTIN
    if _BUILTIN is None:
        res = resources.files("mhlo_cost") / "data" / _DATA_FILE
        _BUILTIN = _parse(res.read_bytes(), f"mhlo_cost/data/{_DATA_FILE}")
    return _BUILTIN


def template_text() -> str:
    """The commented profile template shipped as ``data/hardware_template.toml``."""
    return (resources.files("mhlo_cost") / "data" / _TEMPLATE_FILE).read_text(encoding="utf-8")


def list_profiles() -> list[Hardware]:
    """The shipped profiles, in file order."""
    return list(_builtin().values())


def profile_names() -> list[str]:
    """Canonical names of the shipped profiles."""
    return list(_builtin())


def get_profile(name: str, profiles: Mapping[str, Hardware] | None = None) -> Hardware:
    """Look a profile up by name or alias, case-insensitively.

    ``profiles`` (e.g. from :func:`load_profiles`) is searched before the
    shipped profiles, so a user's file can shadow a shipped name.  ``_`` and
    spaces count as ``-`` (``H100_SXM`` finds ``h100-sxm``).
    """
    if not isinstance(name, str) or not name.strip():
        raise HardwareError(f"hardware name must be a non-empty string, got {name!r}")
    key = _norm(name)
    pools = ([profiles.values()] if profiles else []) + [_builtin().values()]
    for pool in pools:
        for hw in pool:
            if key == _norm(hw.name) or key in (_norm(a) for a in hw.aliases):
                return hw
    known = sorted({hw.name for pool in pools for hw in pool})
    raise HardwareError(f"unknown hardware {name!r} (known: {', '.join(known)})")
