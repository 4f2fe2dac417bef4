"""SRAM-centric (dataflow) chips and meshes of them: a profile kind of its own, read from ``data/dataflow.toml``.

A dataflow chip keeps weights and activations in the SRAM of its cores and spills to DRAM; its cores sit on a
grid joined by an on-chip mesh, and chips join their neighbours on a mesh of chip-to-chip links. A profile
says (TOML in human units, decimal prefixes; converted here to exact SI floats):

* ``cores = [rows, columns]`` and ``sram_per_core_mb``: the on-chip memory, ``sram_bandwidth_per_core_gb_s``;
* ``matrix_tflops`` / ``vector_tflops`` (per chip, dense, per dtype key as in ``hardware.toml``),
  ``transcendental_tops``;
* ``dram_capacity_gb``, ``dram_bandwidth_gb_s``: the spill tier;
* ``[chip.NAME.core_link]`` (``bandwidth_gb_s`` one direction, ``latency_us`` per hop) between neighbouring
  cores, and ``[chip.NAME.chip_link]`` (also ``efficiency``) to each neighbouring chip, one per direction.

A system (``[system.NAME]``) is ``chip``, ``dims`` (the chip grid), ``wraparound`` and ``base_latency_us``.
How a program is priced on it is :mod:`mhlo_cost.roofline.dataflow`. ``dataflow_template.toml`` next to the
data file is a commented template, loadable with :func:`load_dataflow`.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from decimal import Decimal
from importlib import resources
from typing import Any

from ..files.read import FileRefused, read_settings
from .catalogue import check_schema_version, dtype_rates, si_value
from .limits import known_table
from .profile import Hardware, HardwareError

_GB = Decimal(10) ** 9
_MB = Decimal(10) ** 6
_US = Decimal(10) ** -6
_TERA = Decimal(10) ** 12
_DATA_FILE = "dataflow.toml"
_TEMPLATE_FILE = "dataflow_template.toml"

_CHIP_FIELDS = ("description", "vendor", "source", "aliases", "cores", "sram_per_core_mb",
                "sram_bandwidth_per_core_gb_s", "matrix_tflops", "vector_tflops", "transcendental_tops",
                "dram_capacity_gb", "dram_bandwidth_gb_s", "core_link", "chip_link")
_SYSTEM_FIELDS = ("description", "source", "aliases", "chip", "dims", "wraparound", "base_latency_us")


@dataclass(frozen=True)
class MeshLink:
    """One link of a mesh, one direction: bytes/s at line rate, the achievable fraction, seconds per hop."""

    bandwidth: float
    latency: float
    efficiency: float = 1.0


@dataclass(frozen=True)
class DataflowChip:
    """An SRAM-centric chip: a grid of cores with SRAM each, DRAM as a spill tier, mesh links."""

    name: str
    description: str
    source: str
    cores: tuple  # (rows, columns) of the core grid
    sram_per_core: float  # bytes
    sram_bandwidth_per_core: float  # bytes/s
    matrix_flops: dict
    vector_flops: dict
    transcendental_rate: float
    dram_capacity: float  # bytes
    dram_bandwidth: float  # bytes/s
    core_link: MeshLink
    chip_link: MeshLink
    vendor: str = ""
    aliases: tuple = ()

    @property
    def core_count(self) -> int:
        return math.prod(self.cores)

    @property
    def sram_bytes(self) -> int:
        """The chip's SRAM, bytes (every core's together)."""
        return int(self.core_count * self.sram_per_core)

    @property
    def sram_bandwidth(self) -> float:
        return self.core_count * self.sram_bandwidth_per_core

    def as_hardware(self) -> Hardware:
        """The chip priced as a GPU would be (its DRAM in the place of HBM): the rates it shares with one."""
        return Hardware(name=self.name, description=self.description, matrix_flops=self.matrix_flops,
                        vector_flops=self.vector_flops, transcendental_rate=self.transcendental_rate,
                        hbm_bandwidth=self.dram_bandwidth, hbm_capacity=self.dram_capacity,
                        link_bandwidth=self.chip_link.bandwidth, hop_latency=self.chip_link.latency,
                        kernel_overhead=0.0, source=self.source, vendor=self.vendor)


@dataclass(frozen=True)
class DataflowSystem:
    """Chips of one kind on a grid of ``dims`` (row-major device ids, the last axis fastest)."""

    name: str
    description: str
    source: str
    chip: DataflowChip
    dims: tuple
    wraparound: bool = False
    base_latency: float = 0.0  # seconds per collective call
    aliases: tuple = ()

    @property
    def devices(self) -> int:
        return math.prod(self.dims)


def _text(entry: dict, key: str, where: str, default: str = "") -> str:
    v = entry.get(key, default)
    if not isinstance(v, str):
        raise HardwareError(f"{where}: field {key!r} must be a string, got {v!r}")
    return v


def _known(entry: Any, fields: tuple, where: str) -> dict:
    try:
        return known_table(entry, where, fields)
    except ValueError as e:
        raise HardwareError(str(e)) from None


def _need(entry: dict, key: str, where: str) -> Any:
    if key not in entry:
        raise HardwareError(f"{where}: missing field {key!r}")
    return entry[key]


def _grid(value: Any, where: str, key: str) -> tuple:
    if not isinstance(value, list) or not 1 <= len(value) <= 3 or not all(
            isinstance(d, int) and not isinstance(d, bool) and 1 <= d <= 4096 for d in value):
        raise HardwareError(f"{where}: field {key!r} must be a list of 1 to 3 whole numbers in [1, 4096], "
                            f"got {value!r}")
    return tuple(value)


def _aliases(entry: dict, where: str) -> tuple:
    a = entry.get("aliases", [])
    if not isinstance(a, list) or not all(isinstance(x, str) and x.strip() for x in a):
        raise HardwareError(f"{where}: field 'aliases' must be a list of non-empty strings")
    return tuple(a)


def _link(entry: Any, where: str) -> MeshLink:
    e = _known(entry, ("bandwidth_gb_s", "latency_us", "efficiency"), where)
    return MeshLink(
        bandwidth=si_value(_need(e, "bandwidth_gb_s", where), _GB, f"{where}: field 'bandwidth_gb_s'", "gb_s"),
        latency=si_value(e.get("latency_us", 0), _US, f"{where}: field 'latency_us'", "us"),
        efficiency=si_value(e.get("efficiency", 1), Decimal(1), f"{where}: field 'efficiency'", "fraction"))


def _chip(name: str, entry: Any, origin: str) -> DataflowChip:
    where = f"{origin}: chip {name!r}"
    e = _known(entry, _CHIP_FIELDS, where)

    def num(key: str, scale: Decimal, kind: str) -> float:
        return si_value(_need(e, key, where), scale, f"{where}: field {key!r}", kind)

    vector = dtype_rates(_need(e, "vector_tflops", where), f"{where}: field 'vector_tflops'")
    if "f32" not in vector:
        raise HardwareError(f"{where}: field 'vector_tflops' needs an 'f32' rate")
    return DataflowChip(
        name=name, description=_text(e, "description", where), source=_text(e, "source", where, origin),
        cores=_grid(_need(e, "cores", where), where, "cores"),
        sram_per_core=num("sram_per_core_mb", _MB, "mb"),
        sram_bandwidth_per_core=num("sram_bandwidth_per_core_gb_s", _GB, "gb_s"),
        matrix_flops=dtype_rates(_need(e, "matrix_tflops", where), f"{where}: field 'matrix_tflops'"),
        vector_flops=vector, transcendental_rate=num("transcendental_tops", _TERA, "tops"),
        dram_capacity=num("dram_capacity_gb", _GB, "gb"), dram_bandwidth=num("dram_bandwidth_gb_s", _GB, "gb_s"),
        core_link=_link(_need(e, "core_link", where), f"{where}.core_link"),
        chip_link=_link(_need(e, "chip_link", where), f"{where}.chip_link"),
        vendor=_text(e, "vendor", where), aliases=_aliases(e, where))


def _system(name: str, entry: Any, origin: str, chips: dict) -> DataflowSystem:
    where = f"{origin}: system {name!r}"
    e = _known(entry, _SYSTEM_FIELDS, where)
    chip = _text(e, "chip", where)
    if chip not in chips:
        raise HardwareError(f"{where}: unknown chip {chip!r} (known: {', '.join(sorted(chips)) or 'none'})")
    wrap = e.get("wraparound", False)
    if not isinstance(wrap, bool):
        raise HardwareError(f"{where}: field 'wraparound' must be true or false, got {wrap!r}")
    return DataflowSystem(
        name=name, description=_text(e, "description", where), source=_text(e, "source", where, origin),
        chip=chips[chip], dims=_grid(_need(e, "dims", where), where, "dims"), wraparound=wrap,
        base_latency=si_value(e.get("base_latency_us", 0), _US, f"{where}: field 'base_latency_us'", "us"),
        aliases=_aliases(e, where))


def parse_dataflow(data: bytes, origin: str) -> tuple[dict, dict]:
    """``(chips, systems)`` by name from the TOML text ``data``; :class:`HardwareError` (one line) if malformed."""
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise HardwareError(f"{origin}: not valid TOML: {e}") from None
    check_schema_version(doc, origin)
    _known(doc, ("schema_version", "chip", "system"), origin)
    chips = {n: _chip(n, t, origin) for n, t in _tables(doc, "chip", origin).items()}
    systems = {n: _system(n, t, origin, chips) for n, t in _tables(doc, "system", origin).items()}
    return chips, systems


def _tables(doc: dict, key: str, origin: str) -> dict:
    """``doc[key]`` (``[chip]``, ``[system]``): a table of named tables, or HardwareError (``chip = 5`` was a
    TypeError)."""
    tables = doc.get(key, {})
    if not isinstance(tables, dict):
        raise HardwareError(f"{origin}: [{key}] must be a table")
    return tables


def load_dataflow(path=None) -> tuple[dict, dict]:
    """The chips and systems of ``path`` (a TOML file), or of the shipped ``data/dataflow.toml``."""
    if path is None:
        text = resources.files(__package__).joinpath("data", _DATA_FILE).read_bytes()
        return parse_dataflow(text, _DATA_FILE)
    try:
        return parse_dataflow(read_settings(path, "dataflow profile file"), str(path))
    except FileRefused as e:
        raise HardwareError(str(e)) from None


def template_text() -> str:
    """The commented template of a dataflow chip and system (``data/dataflow_template.toml``)."""
    return resources.files(__package__).joinpath("data", _TEMPLATE_FILE).read_text(encoding="utf-8")


def get_dataflow_system(name: str, path=None) -> DataflowSystem:
    """A system by name or alias (from ``path`` or the shipped file); HardwareError naming the known ones."""
    _, systems = load_dataflow(path)
    want = name.strip().lower()
    for s in systems.values():
        if want == s.name.lower() or want in (a.lower() for a in s.aliases):
            return s
    raise HardwareError(f"unknown dataflow system {name!r} (known: {', '.join(sorted(systems)) or 'none'})")
