"""A program priced on a mesh of SRAM-centric chips (:class:`~mhlo_cost.machines.dataflow.DataflowSystem`):
by what fits where, not as a GPU.

Per device (the IR of a sharded program is one device's), block by block (:func:`block_loads`: the tool's
blocks; ops outside every block in their groups, the embedders and the final layer):

* **weights**: a block's weights are the parameter bytes first read in it (:mod:`mhlo_cost.memory.params`).
  In program order a block keeps its weights RESIDENT in SRAM while all the weights kept so far fit in the SRAM
  given to weights (all of it, ``weights-first``; what is left after reserving the largest activation working
  set of any block, ``activations-first``; by default whichever of the two moves fewer DRAM bytes); every other
  block STREAMS its weights from DRAM once per step (DRAM bytes = its weight bytes, exactly) and holds them in
  SRAM while it runs;
* **activations**: a block's working set is the highest live total while its ops run (the fused estimate with
  attention as one kernel, :func:`mhlo_cost.roofline.memory.fused_profile`) less the device's parameters
  (arguments live throughout). What does not fit in the SRAM left (after the resident weights and the block's
  own streamed weights) SPILLS: written to DRAM once and read back once, 2 x the spilled bytes (a lower bound:
  a spilled value read by many ops may come back many times);
* **time** = max(compute, SRAM, DRAM) + collectives. Compute: each op's FLOPs at the chip's datasheet peak of
  its dtype (dot / convolution on the matrix unit, the rest on the vector unit or at the transcendental rate;
  no efficiency model: none is known for this chip). SRAM: every op's operands and results (bytes read +
  written), which live in SRAM on such a chip, at the chip's SRAM bandwidth. DRAM: streamed weights + spill
  traffic at the DRAM bandwidth. Collectives (:func:`collective_time`) are not overlapped with compute.

The chip mesh (:func:`mesh_topology`): chips on ``system.dims``, one link per direction to each neighbour; a
transfer leaves a chip through the cores of one edge, so a link's achievable bandwidth is the smaller of the
chip link's (x its efficiency) and ``min(core grid)`` core links', and each chip hop also crosses up to
``max(core grid) - 1`` core hops (the far core to the edge): per hop latency = chip link latency + that many
core link latencies. The collective's algorithm is the fastest of :func:`mhlo_cost.network.mesh.estimate_mesh`.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..analysis.blocks import row_labels
from ..machines.dataflow import DataflowChip, DataflowSystem
from ..network.collective import estimate, full_bytes, row_groups
from ..network.mesh import mesh_traffic
from ..network.topology import Link, MeshTopology
from .optime import op_time

__all__ = ["BlockLoad", "BlockPrice", "Collective", "block_loads", "collective_time", "mesh_link",
           "mesh_topology", "POLICIES", "price_blocks", "row_compute_s"]


@dataclass(frozen=True)
class Collective:
    """One execution of a collective: its kind, S (the full buffer, bytes), its device groups, how often."""

    kind: str
    nbytes: int
    groups: tuple
    times: int = 1
    comm_bytes: int = 0  # bytes one device sends, all executions (the IR's count)


@dataclass(frozen=True)
class BlockLoad:
    """What the IR says of one block on one device, per step (exact ints; compute_s already priced)."""

    name: str
    gemm_flops: int = 0
    vector_flops: int = 0
    sram_bytes: int = 0  # bytes read + written by its ops
    weight_bytes: int = 0  # parameters first read in the block
    working_bytes: int = 0  # activations live at the block's peak
    compute_s: float = 0.0
    collectives: tuple = ()


@dataclass(frozen=True)
class BlockPrice:
    """Where one block's data lives and what it costs; seconds, bytes."""

    name: str
    weights: str  # resident, streamed, none
    weight_dram_bytes: int
    spill_bytes: int  # activations that do not fit (DRAM traffic: twice this)
    dram_bytes: int
    compute_s: float
    sram_s: float
    dram_s: float
    comm_s: float
    hops: int  # the longest path of its collectives' transfers, in chip hops

    @property
    def time_s(self) -> float:
        return max(self.compute_s, self.sram_s, self.dram_s) + self.comm_s

    @property
    def bound(self) -> str:
        if self.comm_s > max(self.compute_s, self.sram_s, self.dram_s):
            return "comm"
        return max((self.compute_s, "compute"), (self.sram_s, "sram"), (self.dram_s, "dram"))[1]


def mesh_link(chip: DataflowChip) -> Link:
    """The chip-to-chip link as a transfer sees it (see the module docstring): bytes/s achievable, s per hop."""
    core = chip.core_link
    edge = min(chip.cores) * core.bandwidth * core.efficiency
    bandwidth = min(chip.chip_link.bandwidth * chip.chip_link.efficiency, edge)
    core_hops = max(chip.cores) - 1
    return Link("mesh", bandwidth, 1.0, chip.chip_link.latency + core_hops * core.latency)


def mesh_topology(system: DataflowSystem) -> MeshTopology:
    """The system's chips as a :class:`MeshTopology` over :func:`mesh_link`."""
    wrap = (system.wraparound,) * len(system.dims)
    return MeshTopology(tuple(system.dims), mesh_link(system.chip), wraparound=wrap,
                        base_latency=system.base_latency)


def collective_time(topo: MeshTopology, c: Collective) -> tuple[float, int]:
    """Seconds of every execution of ``c`` on ``topo`` (the fastest algorithm) and its longest path in hops."""
    if c.nbytes <= 0 or not c.groups:
        return 0.0, 0
    hops, _ = mesh_traffic(topo, c.kind, c.nbytes, c.groups)
    return c.times * estimate(topo, c.kind, c.nbytes, c.groups).time_s, hops


def _weights_resident(loads: list[BlockLoad], budget: int) -> list[bool]:
    """In program order, whether each block's weights stay in SRAM: while all kept so far fit in ``budget``."""
    kept, out = 0, []
    for b in loads:
        fits = kept + b.weight_bytes <= budget
        if fits:
            kept += b.weight_bytes
        out.append(fits)
    return out


#: How SRAM is shared between weights and activations (:func:`price_blocks`).
POLICIES = ("least-dram", "activations-first", "weights-first")


def price_blocks(loads: list[BlockLoad], system: DataflowSystem, policy: str = "least-dram") -> list[BlockPrice]:
    """Each block of ``loads`` (one device, program order) priced on ``system`` (see the module docstring).

    ``policy``: ``activations-first`` reserves the largest working set of any block and keeps weights in what
    is left; ``weights-first`` keeps weights in the whole SRAM (activations get what they leave);
    ``least-dram`` (the default) whichever of the two moves fewer DRAM bytes per step (weights-first on a tie).
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown SRAM policy {policy!r}: choose one of {', '.join(POLICIES)}")
    if policy == "least-dram":
        first = _price(loads, system, 0)
        other = _price(loads, system, max((b.working_bytes for b in loads), default=0))
        dram = [sum(p.dram_bytes for p in ps) for ps in (first, other)]
        return first if dram[0] <= dram[1] else other
    reserve = max((b.working_bytes for b in loads), default=0) if policy == "activations-first" else 0
    return _price(loads, system, reserve)


def _price(loads: list[BlockLoad], system: DataflowSystem, reserve: int) -> list[BlockPrice]:
    chip = system.chip
    sram = chip.sram_bytes
    resident = _weights_resident(loads, max(sram - reserve, 0))
    kept = sum(b.weight_bytes for b, r in zip(loads, resident) if r)
    topo = mesh_topology(system)
    out = []
    for b, res in zip(loads, resident):
        own = 0 if res else b.weight_bytes
        free = max(sram - kept - own, 0)
        spill = max(b.working_bytes - free, 0)
        dram = own + 2 * spill
        comm, hops = 0.0, 0
        for c in b.collectives:
            t, h = collective_time(topo, c)
            comm, hops = comm + t, max(hops, h)
        out.append(BlockPrice(
            name=b.name, weights="none" if not b.weight_bytes else "resident" if res else "streamed",
            weight_dram_bytes=own, spill_bytes=spill, dram_bytes=dram, compute_s=b.compute_s,
            sram_s=b.sram_bytes / chip.sram_bandwidth, dram_s=dram / chip.dram_bandwidth, comm_s=comm, hops=hops))
    return out


def row_compute_s(r, hw) -> float:
    """One op row's compute seconds at the datasheet peak of ``hw`` (a chip's :meth:`as_hardware`, which has no
    GEMM efficiency model): the GPU roofline's own compute time of the row (:func:`~.optime.op_time`)."""
    return op_time(r, hw).compute_s


def _collective(r) -> Collective:
    return Collective(r.comm_kind, full_bytes(r), row_groups(r), max(r.multiplicity, 1), r.comm_bytes)


def block_loads(analysis, blocks, memory, chip: DataflowChip) -> list[BlockLoad]:
    """Per block of ``blocks`` (and per group of ops outside them), in program order, what ``analysis`` (made
    with ``AnalysisOptions(dataflow=True)``) says of it; ``memory``: the memory profile whose peak and
    parameter rows are read (:func:`mhlo_cost.roofline.memory.fused_profile`). An op row that belongs to
    several blocks counts whole in the first (the totals stay exact)."""
    hw = chip.as_hardware()
    labels = [ls[0] for ls in row_labels(blocks)]
    acc: dict[str, dict] = {}
    for i, r in enumerate(analysis.rows):
        a = acc.setdefault(labels[i], {"gemm": 0, "vector": 0, "bytes": 0, "weights": 0, "peak": 0,
                                       "compute": 0.0, "coll": []})
        a["gemm"] += r.gemm_flops + r.conv_flops
        a["vector"] += r.vector_flops
        a["bytes"] += r.bytes_read + r.bytes_written
        a["weights"] += memory.param_row_bytes.get(i, 0)
        a["peak"] = max(a["peak"], memory.during[i])
        a["compute"] += row_compute_s(r, hw)
        if r.kind == "collective" and r.comm_kind:
            a["coll"].append(_collective(r))
    return [BlockLoad(name, a["gemm"], a["vector"], a["bytes"], a["weights"],
                      max(a["peak"] - memory.param_bytes, 0), a["compute"], tuple(a["coll"]))
            for name, a in acc.items()]
