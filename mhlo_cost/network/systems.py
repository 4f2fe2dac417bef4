"""System profiles: a chip and the topology that joins many of them, read from TOML.

The shipped systems are in ``mhlo_cost/machines/data/systems.toml`` (its header is the schema);
``system_template.toml`` is a commented template of a user's own chip and system. A
:class:`SystemProfile` is a :class:`~mhlo_cost.machines.hardware.Hardware` (the chip's rates, under the system's
name) that also carries its ``topology``: everything that prices compute reads it as a chip, and the
roofline prices its collectives with :mod:`mhlo_cost.network` instead of the chip's flat ring.
"""
from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from ..files.read import FileRefused, read_settings
from ..machines.hardware import (Hardware, HardwareError, check_schema_version, field_notes, get_profile, load_profiles,
                                 profile_names, source_table)
from ..machines.limits import MAX_COUNT, checked, checked_count
from .topology import Link, MeshTopology, NetworkError, NodeTopology

__all__ = ["SystemProfile", "list_systems", "load_systems", "resolve_profile", "system_names"]

_DATA_FILE = "systems.toml"
_GB, _GBIT, _US = Decimal(10) ** 9, Decimal(10) ** 9 / 8, Decimal(10) ** -6


@dataclass(frozen=True)
class SystemProfile(Hardware):
    """A chip's rates under a system's name, with the ``topology`` its collectives run on."""

    topology: Any = None
    chip: str = ""
    collectives: str = ""  # the collective library its devices run (NCCL, RCCL, XLA's ICI collectives, ...)
    system_notes: Mapping[str, str] = dataclasses.field(default_factory=dict)  # system key -> source / ESTIMATE
    system_references: Mapping[str, str] = dataclasses.field(default_factory=dict)  # tag -> the document

    __hash__ = Hardware.__hash__

    def as_dict(self) -> dict[str, Any]:
        d = super().as_dict()
        d["topology"] = {"kind": type(self.topology).__name__, **dataclasses.asdict(self.topology)}
        d["system_notes"] = dict(self.system_notes)
        d["system_references"] = dict(self.system_references)
        return d


def _num(entry: dict, key: str, where: str, kind: str, scale: Decimal = Decimal(1), default: Any = None) -> float:
    """The figure ``key`` of ``entry`` in SI units, inside its physical range (:mod:`mhlo_cost.machines.limits`)."""
    v = entry.get(key, default)
    if v is None:
        raise NetworkError(f"{where}: missing field {key!r}")
    try:
        return float(checked(v, kind) * scale)
    except ValueError as e:
        raise NetworkError(f"{where}: field {key!r} {e}") from None


def _int(entry: dict, key: str, where: str) -> int:
    try:
        return checked_count(entry.get(key))
    except ValueError as e:
        raise NetworkError(f"{where}: field {key!r} {e}") from None


def _known(entry: dict, fields: tuple, where: str) -> None:
    if not isinstance(entry, dict):
        raise NetworkError(f"{where}: must be a table")
    unknown = [k for k in entry if k not in fields]
    if unknown:
        raise NetworkError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(fields)})")


def _link(entry: dict, where: str, bw_key: str, kind: str, scale: Decimal, default_name: str) -> Link:
    eff = _num(entry, "efficiency", where, "fraction", default=1)
    name = entry.get("name", default_name)
    if not isinstance(name, str) or not name.strip():
        raise NetworkError(f"{where}: field 'name' must be a non-empty string")
    return Link(name, _num(entry, bw_key, where, kind, scale), eff,
                _num(entry, "latency_us", where, "us", _US, default=0))


def _nodes(entry: dict, where: str, base: float, placement: tuple) -> NodeTopology:
    intra_e = entry["intra"]
    _known(intra_e, ("name", "devices_per_node", "bandwidth_gb_s", "efficiency", "latency_us", "switch"),
           f"{where}.intra")
    switch = intra_e.get("switch", True)
    if not isinstance(switch, bool):
        raise NetworkError(f"{where}.intra: field 'switch' must be true or false, got {switch!r}")
    intra = _link(intra_e, f"{where}.intra", "bandwidth_gb_s", "gb_s", _GB, "nvlink")
    dpn = _int(intra_e, "devices_per_node", f"{where}.intra")
    inter, nics = None, 0
    if "network" in entry:
        net = entry["network"]
        _known(net, ("name", "nics_per_node", "nic_gbit_s", "efficiency", "latency_us"), f"{where}.network")
        inter = _link(net, f"{where}.network", "nic_gbit_s", "gbit_s", _GBIT, "net")
        nics = _int(net, "nics_per_node", f"{where}.network")
        if nics > dpn:
            raise NetworkError(f"{where}.network: {nics} NICs per node for {dpn} devices: at most one NIC per "
                               "device is modelled")
    return NodeTopology(dpn, intra, inter, nics, switch, base, placement)


def _mesh(entry: dict, where: str, base: float, placement: tuple) -> MeshTopology:
    m = entry["mesh"]
    w = f"{where}.mesh"
    _known(m, ("name", "dims", "axes", "wraparound", "link_bandwidth_gb_s", "efficiency", "latency_us"), w)
    dims = m.get("dims")
    if not isinstance(dims, list) or not 1 <= len(dims) <= 3 or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims) or math.prod(dims) > MAX_COUNT:
        raise NetworkError(f"{w}: field 'dims' must be a list of 1 to 3 whole numbers >= 1 whose product is at most "
                           f"{MAX_COUNT}, got {dims!r}")
    axes = m.get("axes", list(("z", "y", "x")[-len(dims):]))
    if not isinstance(axes, list) or len(axes) != len(dims) or not all(
            isinstance(a, str) and a for a in axes) or len(set(axes)) != len(axes):
        raise NetworkError(f"{w}: field 'axes' must name each of the {len(dims)} axes once, got {axes!r}")
    wrap = m.get("wraparound", False)
    wrap = [wrap] * len(dims) if isinstance(wrap, bool) else wrap
    if not isinstance(wrap, list) or len(wrap) != len(dims) or not all(isinstance(x, bool) for x in wrap):
        raise NetworkError(f"{w}: field 'wraparound' must be true, false or one per axis, got {m['wraparound']!r}")
    link = _link(m, w, "link_bandwidth_gb_s", "gb_s", _GB, "mesh")
    return MeshTopology(tuple(dims), link, tuple(axes), tuple(wrap), base, placement)


_FIELDS = ("aliases", "vendor", "description", "source", "chip", "base_latency_us", "placement",
           "intra", "network", "mesh", "collectives", "sources")


def _build(name: str, entry: Any, origin: str, chips: Mapping[str, Hardware] | None,
           refs: Mapping[str, str] | None = None) -> SystemProfile:
    where = f"{origin}: system {name!r}"
    _known(entry, _FIELDS, where)
    if ("mesh" in entry) == ("intra" in entry):
        raise NetworkError(f"{where}: give either an [intra] link (and a [network]) or a [mesh]")
    if "mesh" in entry and "network" in entry:
        raise NetworkError(f"{where}: a [mesh] system has no [network] table")
    chip_name = entry.get("chip")
    if not isinstance(chip_name, str):
        raise NetworkError(f"{where}: missing field 'chip' (a hardware profile name)")
    try:
        chip = get_profile(chip_name, chips)
    except HardwareError as e:
        raise NetworkError(f"{where}: chip: {e}") from None
    placement = entry.get("placement", [])
    if not isinstance(placement, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in placement) \
            or sorted(placement) != list(range(len(placement))):
        raise NetworkError(f"{where}: field 'placement' must list each slot 0..N-1 once")
    base = _num(entry, "base_latency_us", where, "us", _US, default=0)
    topo = (_mesh if "mesh" in entry else _nodes)(entry, where, base, tuple(placement))
    aliases = entry.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a.strip() for a in aliases):
        raise NetworkError(f"{where}: field 'aliases' must be a list of non-empty strings")
    texts = {k: entry.get(k, "") for k in ("vendor", "description", "source", "collectives")}
    if not all(isinstance(v, str) for v in texts.values()):
        raise NetworkError(f"{where}: vendor, description, source and collectives must be strings")
    notes, cited = field_notes(entry, where, refs or {})
    return SystemProfile(**{f.name: getattr(chip, f.name) for f in dataclasses.fields(Hardware)} | dict(
        name=name, aliases=tuple(aliases), vendor=texts["vendor"] or chip.vendor,
        description=texts["description"] or f"{chip.description} (system)",
        source=texts["source"] or origin, topology=topo, chip=chip.name, collectives=texts["collectives"],
        system_notes=notes, system_references=cited))


def _parse(data: bytes, origin: str, chips: Mapping[str, Hardware] | None) -> dict[str, SystemProfile]:
    try:
        doc = tomllib.loads(data.decode("utf-8"), parse_float=Decimal)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise NetworkError(f"{origin}: not valid TOML: {e}") from None
    check_schema_version(doc, origin)
    table = doc.get("system", {})
    if not isinstance(table, dict):
        raise NetworkError(f"{origin}: 'system' must be a table of [system.<name>] tables")
    refs = source_table(doc, origin)
    return {name: _build(name, entry, origin, chips, refs) for name, entry in table.items()}


def load_systems(path, chips: Mapping[str, Hardware] | None = None) -> dict[str, SystemProfile]:
    """The ``[system.<name>]`` tables of a TOML file; their chips are looked up in ``chips`` first."""
    p = Path(path)
    try:
        data = read_settings(p, "a system file")
    except FileRefused as e:
        raise NetworkError(str(e)) from None
    return _parse(data, str(p), chips)


_BUILTIN: dict[str, SystemProfile] | None = None


def list_systems() -> list[SystemProfile]:
    """The shipped systems, in file order."""
    global _BUILTIN
    if _BUILTIN is None:
        res = resources.files("mhlo_cost.machines") / "data" / _DATA_FILE
        _BUILTIN = _parse(res.read_bytes(), f"mhlo_cost/machines/data/{_DATA_FILE}", None)
    return list(_BUILTIN.values())


def system_names() -> list[str]:
    return [s.name for s in list_systems()]


def file_profiles(path) -> tuple[dict, dict]:
    """(chips, systems) of a user's TOML file; a file may hold either or both."""
    p = Path(path)
    try:
        doc = tomllib.loads(read_settings(p, "a hardware file").decode("utf-8"))
    except FileRefused as e:
        raise HardwareError(str(e)) from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise HardwareError(f"{p}: not valid TOML: {e}") from None
    if "profile" not in doc and "system" not in doc:
        raise HardwareError(f"{p}: no profiles (expected [profile.<name>] or [system.<name>] tables)")
    chips = load_profiles(p) if "profile" in doc else {}
    return chips, load_systems(p, chips or None)


def _norm(name: str) -> str:
    return "-".join(name.strip().lower().replace("_", " ").split())


def resolve_profile(name: str | None, path=None) -> Hardware | None:
    """The chip or system named ``name`` (the user's file ``path`` first, then the shipped systems and
    chips); the file's only system (or, without systems, its only chip) where no name is given; None where
    neither is."""
    chips, systems = file_profiles(path) if path else ({}, {})
    if name is None:
        if not path:
            return None
        only = list(systems.values()) if systems else list(chips.values())
        if len(only) != 1:
            raise HardwareError(f"{path}: holds {len(only)} {'systems' if systems else 'profiles'} "
                                f"({', '.join(p.name for p in only)}); choose one with --hardware NAME")
        return only[0]
    if not isinstance(name, str) or not name.strip():
        raise HardwareError(f"hardware name must be a non-empty string, got {name!r}")
    key = _norm(name)
    for pool in (systems.values(), list_systems()):
        for s in pool:
            if key in {_norm(n) for n in (s.name, *s.aliases)}:
                return s
    try:
        return get_profile(name, chips or None)
    except HardwareError:
        known = sorted({*system_names(), *systems, *chips, *profile_names()})
        raise HardwareError(f"unknown hardware {name!r} (known: {', '.join(known)})") from None
