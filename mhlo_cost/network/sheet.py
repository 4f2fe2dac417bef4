"""A system profile as a datasheet: its own figures (the chip's name, the collective library, each tier of its
topology) with their source notes, before its chip's (:func:`mhlo_cost.machines.datasheet.chip_rows`)."""
from __future__ import annotations

from ..machines.datasheet import Row, chip_rows
from ..machines.hardware import Hardware
from .systems import SystemProfile
from .topology import Link, MeshTopology

__all__ = ["profile_rows", "references", "system_rows"]


def _link(prefix: str, link: Link, bw_key: str, bw: float, unit: str, notes) -> list[Row]:
    return [Row(f"{prefix}.name", link.name, "", notes.get(f"{prefix}.name", "")),
            Row(f"{prefix}.{bw_key}", bw, unit, notes.get(f"{prefix}.{bw_key}", "")),
            Row(f"{prefix}.efficiency", link.efficiency, "fraction", notes.get(f"{prefix}.efficiency", "")),
            Row(f"{prefix}.latency_us", link.latency * 1e6, "us per step", notes.get(f"{prefix}.latency_us", ""))]


def system_rows(s: SystemProfile) -> list[Row]:
    """The system's own figures in the units of ``systems.toml``, each with its note."""
    n, t = s.system_notes, s.topology
    rows = [Row("chip", s.chip, "", n.get("chip", ""))]
    if s.collectives:
        rows.append(Row("collectives", s.collectives, "", n.get("collectives", "")))
    rows.append(Row("base_latency_us", t.base_latency * 1e6, "us per call", n.get("base_latency_us", "")))
    if isinstance(t, MeshTopology):
        rows += [Row("mesh.dims", list(t.dims), "chips", n.get("mesh.dims", "")),
                 Row("mesh.axes", " ".join(t.axes), "", n.get("mesh.axes", "")),
                 Row("mesh.wraparound", " ".join("true" if w else "false" for w in t.wraparound), "per axis",
                     n.get("mesh.wraparound", ""))]
        rows += _link("mesh", t.link, "link_bandwidth_gb_s", t.link.bandwidth / 1e9, "GB/s per link, one direction", n)
    else:
        rows += [Row("intra.devices_per_node", t.devices_per_node, "devices", n.get("intra.devices_per_node", "")),
                 Row("intra.switch", t.switch, "", n.get("intra.switch", ""))]
        rows += _link("intra", t.intra, "bandwidth_gb_s", t.intra.bandwidth / 1e9, "GB/s per device, one direction", n)
        if t.inter is not None:
            rows.append(Row("network.nics_per_node", t.nics_per_node, "NICs", n.get("network.nics_per_node", "")))
            rows += _link("network", t.inter, "nic_gbit_s", t.inter.bandwidth * 8 / 1e9, "Gb/s per NIC, one direction",
                          n)
    if t.placement:
        rows.append(Row("placement", " ".join(map(str, t.placement)), "slots", n.get("placement", "")))
    return rows


def profile_rows(hw: Hardware) -> list[Row]:
    """A chip's rows; a system's own rows, then its chip's (their keys under ``chip.``)."""
    if not isinstance(hw, SystemProfile):
        return chip_rows(hw)
    return system_rows(hw) + [Row(f"chip.{r.key}", r.value, r.unit, r.note) for r in chip_rows(hw)]


def references(hw: Hardware) -> dict[str, str]:
    """The documents that the notes of ``hw`` (and, for a system, of its chip) cite, by tag."""
    return dict(sorted({**hw.references, **getattr(hw, "system_references", {})}.items()))
