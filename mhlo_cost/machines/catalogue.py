"""Hardware profiles from TOML: reading and checking a profile file, the shipped profiles, lookup by name.

Profiles live in TOML files written in human units (TFLOP/s, GB/s, GB, us) with
decimal prefixes as vendors use them (1 GB = 1e9 bytes); this module converts
them to exact SI floats (FLOP/s, bytes/s, bytes, seconds).  The shipped
profiles are in ``mhlo_cost/machines/data/hardware.toml``; ``hardware_template.toml``
next to it is a commented template for a user's own chip, loadable with
:func:`load_profiles`.
"""
from __future__ import annotations

import re
import tomllib
from decimal import Decimal
from importlib import resources
from os import PathLike
from pathlib import Path
from typing import Any, Mapping

from ..files.read import FileRefused, read_settings
from .clock import parse_clock
from .gemm import parse_gemm
from .kernels import parse_attention, parse_memory
from .profile import DTYPE_KEYS, Hardware, HardwareError
from .limits import checked, checked_count

# ---------------------------------------------------------------------------------
# TOML loading
# ---------------------------------------------------------------------------------

# field in file -> (Hardware field, SI scale, range kind of mhlo_cost.machines.limits)
_SCALARS: dict[str, tuple[str, Decimal, str]] = {
    "hbm_bandwidth_gb_s": ("hbm_bandwidth", Decimal(10) ** 9, "gb_s"),
    "hbm_capacity_gb": ("hbm_capacity", Decimal(10) ** 9, "gb"),
    "link_bandwidth_gb_s": ("link_bandwidth", Decimal(10) ** 9, "gb_s"),
    "hop_latency_us": ("hop_latency", Decimal(10) ** -6, "us"),
    "kernel_overhead_us": ("kernel_overhead", Decimal(10) ** -6, "us"),
    "transcendental_tops": ("transcendental_rate", Decimal(10) ** 12, "tops"),
}
# optional: the eager model's host time per framework op (:func:`mhlo_cost.roofline.eager.dispatch_overhead`)
_OPTIONAL_SCALARS: dict[str, tuple[str, Decimal, str]] = {
    "dispatch_overhead_us": ("dispatch_overhead", Decimal(10) ** -6, "us"),
}
_TFLOPS = Decimal(10) ** 12
_REQUIRED = ("description", "matrix_tflops", "vector_tflops", *_SCALARS)
# datasheet facts that price nothing: shown by `mhlo-cost hardware show` (:mod:`mhlo_cost.machines.datasheet`)
_FACTS: dict[str, tuple[str, Decimal, str]] = {
    "sram_mb": ("sram", Decimal(10) ** 6, "mb"),
    "tdp_w": ("tdp", Decimal(1), "w"),
}
_OPTIONAL = ("aliases", "vendor", "source", "f32_matmul", "gemm", "row_fusion", "memory", "attention", "clock",
             *_OPTIONAL_SCALARS, *_FACTS, "link_generation", "link_count", "sources")
_TAG_RE = re.compile(r"\[([A-Za-z0-9][A-Za-z0-9._-]*)\]")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

_DATA_FILE = "hardware.toml"
_TEMPLATE_FILE = "hardware_template.toml"


def _norm(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def si_value(value: Any, scale: Decimal, where: str, kind: str) -> float:
    """Exact decimal -> SI float conversion of a figure in its physical range (mhlo_cost.machines.limits)."""
    try:
        return float(checked(value, kind) * scale)
    except ValueError as e:
        raise HardwareError(f"{where} {e}") from None


def dtype_rates(table: Any, where: str) -> dict[str, float]:
    """A ``{dtype key: TFLOP/s}`` table of a profile as FLOP/s per key; HardwareError naming ``where`` if bad."""
    if not isinstance(table, dict) or not table:
        raise HardwareError(f"{where} must be a non-empty table of dtype = TFLOP/s")
    out = {}
    for k, v in table.items():
        if k not in DTYPE_KEYS:
            raise HardwareError(f"{where}: unknown dtype key {k!r} (known: {', '.join(DTYPE_KEYS)})")
        out[k] = si_value(v, _TFLOPS, f"{where}.{k}", "tflops")
    return out


def field_notes(entry: dict, where: str, refs: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """A profile's (or a system's) ``[sources]`` table (file key -> its source or ESTIMATE text; a key of a table as
    ``matrix_tflops.bf16``) and the documents its ``[TAG]`` citations name (the file's top-level ``[sources]``)."""
    notes = entry.get("sources", {})
    if not isinstance(notes, dict):
        raise HardwareError(f"{where}: field 'sources' must be a table of field = \"source or ESTIMATE text\"")
    cited: dict[str, str] = {}
    for key, text in notes.items():
        table, _, sub = key.partition(".")
        if table == "sources" or table not in entry or (sub and not (isinstance(entry[table], dict)
                                                                     and sub in entry[table])):
            raise HardwareError(f"{where}: field 'sources': {key!r} names no field of the profile")
        if not isinstance(text, str) or not text.strip():
            raise HardwareError(f"{where}: field 'sources': {key!r} must be a non-empty string")
        for tag in _TAG_RE.findall(text):
            if tag not in refs:
                raise HardwareError(f"{where}: field 'sources': {key!r} cites [{tag}], which the file's top-level "
                                    "[sources] table does not define")
            cited[tag] = refs[tag]
    return dict(notes), dict(sorted(cited.items()))


def _facts(entry: dict, where: str) -> dict[str, Any]:
    """The datasheet facts of a profile that price nothing (SRAM, TDP, the links' generation and count)."""
    out: dict[str, Any] = {hw_field: si_value(entry[k], scale, f"{where}: field {k!r}", kind)
                           for k, (hw_field, scale, kind) in _FACTS.items() if k in entry}
    generation = entry.get("link_generation", "")
    if not isinstance(generation, str):
        raise HardwareError(f"{where}: field 'link_generation' must be a string, got {generation!r}")
    out["link_generation"] = generation
    if "link_count" in entry:
        try:
            out["link_count"] = checked_count(entry["link_count"])
        except ValueError as e:
            raise HardwareError(f"{where}: field 'link_count' {e}") from None
    return out


def _check_fields(entry: Mapping, where: str) -> None:
    """Unknown fields first (a misspelt field would otherwise show up as a missing one), then missing ones."""
    unknown = [k for k in entry if k not in _REQUIRED and k not in _OPTIONAL]
    if unknown:
        raise HardwareError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(_REQUIRED + _OPTIONAL)})")
    missing = [k for k in _REQUIRED if k not in entry]
    if missing:
        raise HardwareError(f"{where}: missing field {missing[0]!r}"
                            + (f" (also {', '.join(map(repr, missing[1:]))})" if missing[1:] else ""))


def _models(entry: Mapping, where: str) -> tuple:
    """The profile's optional efficiency tables (gemm, memory, attention, clock; None where absent)."""
    try:
        gemm = parse_gemm(entry["gemm"], f"{where}: field 'gemm'", DTYPE_KEYS) if "gemm" in entry else None
        memory = parse_memory(entry["memory"], f"{where}: field 'memory'") if "memory" in entry else None
        attention = (parse_attention(entry["attention"], f"{where}: field 'attention'") if "attention" in entry
                     else None)
        clock = parse_clock(entry["clock"], f"{where}: field 'clock'", DTYPE_KEYS) if "clock" in entry else None
    except ValueError as e:
        raise HardwareError(str(e)) from None
    return gemm, memory, attention, clock


def _build(name: str, entry: Any, origin: str, refs: Mapping[str, str] | None = None) -> Hardware:
    where = f"{origin}: profile {name!r}"
    if not _NAME_RE.match(name):
        raise HardwareError(f"{where}: bad profile name (use letters, digits, '-', '_', '.')")
    if not isinstance(entry, dict):
        raise HardwareError(f"{where}: must be a table [profile.{name}]")
    _check_fields(entry, where)

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
    matrix = dtype_rates(entry["matrix_tflops"], f"{where}: field 'matrix_tflops'")
    vector = dtype_rates(entry["vector_tflops"], f"{where}: field 'vector_tflops'")
    if "f32" not in vector:
        raise HardwareError(f"{where}: field 'vector_tflops' needs an 'f32' rate")
    if f32_matmul == "tf32" and "tf32" not in matrix:
        raise HardwareError(f"{where}: f32_matmul = \"tf32\" needs a 'tf32' rate in 'matrix_tflops'")
    gemm, memory, attention, clock = _models(entry, where)
    row_fusion = entry.get("row_fusion", True)
    if not isinstance(row_fusion, bool):
        raise HardwareError(f"{where}: field 'row_fusion' must be true or false, got {row_fusion!r}")
    scalars = {hw_field: si_value(entry[k], scale, f"{where}: field {k!r}", kind)
               for k, (hw_field, scale, kind) in {**_SCALARS, **_OPTIONAL_SCALARS}.items() if k in entry}
    notes, cited = field_notes(entry, where, refs or {})
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
        memory=memory,
        attention=attention,
        clock=clock,
        row_fusion=row_fusion,
        notes=notes,
        references=cited,
        **scalars,
        **_facts(entry, where),
    )


def check_schema_version(doc: Mapping, origin: str) -> None:
    """A profile file's ``schema_version``, where given, is the whole number 1 (``true`` is not a number)."""
    version = doc.get("schema_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version != 1:
        shown = str(version).lower() if isinstance(version, bool) else repr(version)
        raise HardwareError(f"{origin}: unsupported schema_version {shown} (the whole number 1 is the only one)")


def source_table(doc: Mapping, origin: str) -> dict[str, str]:
    """A profile file's top-level ``[sources]``: tag -> the document it names (``A100-DS = "NVIDIA A100 ..."``)."""
    refs = doc.get("sources", {})
    if not isinstance(refs, dict) or not all(isinstance(k, str) and _TAG_RE.fullmatch(f"[{k}]") and isinstance(v, str)
                                             and v.strip() for k, v in refs.items()):
        raise HardwareError(f"{origin}: the top-level [sources] table must map tags (letters, digits, '.', '_', '-') "
                            "to non-empty strings")
    return dict(refs)


def _parse(data: bytes, origin: str) -> dict[str, Hardware]:
    try:
        doc = tomllib.loads(data.decode("utf-8"), parse_float=Decimal)
    except UnicodeDecodeError as e:
        raise HardwareError(f"{origin}: not UTF-8 text ({e.reason})") from None
    except tomllib.TOMLDecodeError as e:
        raise HardwareError(f"{origin}: not valid TOML: {e}") from None
    check_schema_version(doc, origin)
    # systems: mhlo_cost.network; sources: the documents that the profiles' notes cite by tag
    extra = [k for k in doc if k not in ("profile", "schema_version", "system", "sources")]
    if extra:
        raise HardwareError(f"{origin}: unknown top-level key {extra[0]!r} (profiles go under [profile.<name>])")
    table = doc.get("profile")
    if not isinstance(table, dict) or not table:
        raise HardwareError(f"{origin}: no profiles (expected at least one [profile.<name>] table)")
    refs = source_table(doc, origin)
    out: dict[str, Hardware] = {}
    seen: dict[str, str] = {}
    for name, entry in table.items():
        hw = _build(name, entry, origin, refs)
        for n in (hw.name, *hw.aliases):
            key = _norm(n)
            if key in seen and seen[key] != hw.name:
                raise HardwareError(
                    f"{origin}: profile {hw.name!r}: name or alias {n!r} already used by {seen[key]!r}"
                )
            seen[key] = hw.name
        out[hw.name] = hw
    return out


def parse_profiles(text: str, origin: str = "<text>") -> dict[str, Hardware]:
    """Every ``[profile.<name>]`` of TOML ``text`` (``origin`` names it in messages), as :func:`load_profiles`."""
    return _parse(text.encode("utf-8"), origin)


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
        res = resources.files("mhlo_cost.machines") / "data" / _DATA_FILE
        _BUILTIN = _parse(res.read_bytes(), f"mhlo_cost/machines/data/{_DATA_FILE}")
    return _BUILTIN


def template_text() -> str:
    """The commented profile template shipped as ``data/hardware_template.toml``."""
    return (resources.files("mhlo_cost.machines") / "data" / _TEMPLATE_FILE).read_text(encoding="utf-8")


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
