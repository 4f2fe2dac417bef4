"""SRAM-centric chips on a mesh (mhlo_cost/machines/dataflow.py, mhlo_cost/roofline/dataflow.py).

Closed forms worked out here, not by the code under test:

* residency: a block whose weights fit in SRAM reads no DRAM for them; one whose weights do not fit streams
  them: DRAM bytes = its weight bytes per step, exactly; activations above the SRAM left spill (2 x the excess);
* the mesh: hops and the busiest link's bytes of collectives on a 4 x 4 grid of chips (dimension-order
  routing, no wraparound), and a neighbour permute's time from the link's figures;
* per-device FLOPs of STDiT3 under Megatron, 2D, Ulysses and Ring equal the unsharded model's closed form
  (tests/stdit3_formula.py) / devices for the parts each strategy splits evenly.
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from stdit3_formula import gemm_flops  # noqa: E402

from mhlo_cost.machines.dataflow import (DataflowSystem, MeshLink, get_dataflow_system, load_dataflow,  # noqa: E402
                                         parse_dataflow, template_text)
from mhlo_cost.machines.hardware import HardwareError  # noqa: E402
from mhlo_cost.network.mesh import mesh_traffic  # noqa: E402
from mhlo_cost.roofline.dataflow import (BlockLoad, Collective, collective_time, mesh_link,  # noqa: E402
                                         mesh_topology, price_blocks)

MB = 10 ** 6


@pytest.fixture(scope="module")
def system() -> DataflowSystem:
    return get_dataflow_system("dataflow-4x4-mesh16")


def small_sram(system, per_core_mb: int) -> DataflowSystem:
    """``system`` with ``per_core_mb`` MB of SRAM per core (16 cores)."""
    return replace(system, chip=replace(system.chip, sram_per_core=per_core_mb * MB))


# ---------------------------------------------------------------------------------------------------------
# The profile kind
# ---------------------------------------------------------------------------------------------------------


def test_shipped_system_and_template(system):
    assert system.devices == 16 and system.dims == (4, 4) and not system.wraparound
    chip = system.chip
    assert chip.cores == (4, 4) and chip.core_count == 16
    assert chip.sram_bytes == 16 * 16 * MB  # 16 MB per core
    assert chip.dram_bandwidth == 1600e9 and chip.chip_link.bandwidth == 100e9
    assert "ESTIMATE" in chip.source and "TEMPLATE" in chip.description
    assert get_dataflow_system("dataflow-mesh16") is not None  # an alias
    chips, systems = parse_dataflow(template_text().encode(), "template")
    assert set(chips) == {"my-chip"} and systems["my-mesh"].chip is chips["my-chip"]


@pytest.mark.parametrize("text,words", [
    ('[chip.a]\ncores = [4, 4]\nbogus = 1\n', "unknown field 'bogus'"),
    ('[chip.a]\ncores = [4, 4]\n', "missing field"),
    ('[system.s]\nchip = "nope"\ndims = [2, 2]\n', "unknown chip 'nope'"),
    ('[chip.a\n', "not valid TOML"),
    ('chip = 5\n', "[chip] must be a table"),  # (was a TypeError)
    ('system = "s"\n', "[system] must be a table"),
])
def test_malformed_file_is_one_line(text, words):
    with pytest.raises(HardwareError) as e:
        parse_dataflow(text.encode(), "f.toml")
    assert words in str(e.value) and "\n" not in str(e.value)


def test_unknown_system_names_the_known(tmp_path):
    with pytest.raises(HardwareError, match="dataflow-4x4-mesh16"):
        get_dataflow_system("nope")
    with pytest.raises(HardwareError):
        load_dataflow(tmp_path / "missing.toml")


# ---------------------------------------------------------------------------------------------------------
# What fits where
# ---------------------------------------------------------------------------------------------------------


def test_weights_that_fit_read_no_dram(system):
    # 256 MB of SRAM: 100 MB of weights and a 50 MB working set fit together
    (p,) = price_blocks([BlockLoad("b", weight_bytes=100 * MB, working_bytes=50 * MB)], system)
    assert (p.weights, p.weight_dram_bytes, p.spill_bytes, p.dram_bytes, p.dram_s) == ("resident", 0, 0, 0, 0.0)


def test_weights_that_do_not_fit_stream_exactly(system):
    w = 300 * MB + 7  # more than the 256 MB of SRAM
    (p,) = price_blocks([BlockLoad("b", weight_bytes=w)], system)
    assert p.weights == "streamed" and p.weight_dram_bytes == w and p.dram_bytes == w  # no activations: no spill
    assert p.dram_s == w / 1600e9


def test_residency_in_program_order(system):
    # 256 MB SRAM, the largest working set 56 MB reserved: 200 MB for weights; 120 + 70 fit, 30 more does not
    loads = [BlockLoad("a", weight_bytes=120 * MB, working_bytes=56 * MB), BlockLoad("b", weight_bytes=70 * MB),
             BlockLoad("c", weight_bytes=30 * MB), BlockLoad("d")]
    a, b, c, d = price_blocks(loads, system, "activations-first")
    assert [x.weights for x in (a, b, c, d)] == ["resident", "resident", "streamed", "none"]
    assert (a.weight_dram_bytes, b.weight_dram_bytes, c.weight_dram_bytes) == (0, 0, 30 * MB)
    assert sum(x.dram_bytes for x in (a, b, c, d)) == 30 * MB  # 256 - 190 - 30 = 36 MB free for c: no spill


def test_activations_above_the_sram_left_spill(system):
    sram16 = small_sram(system, 1)  # 16 MB per chip
    # the largest working set (12 MB) is reserved: 4 MB for weights. a (3 MB) stays, c (3 + 4 > 4) streams.
    # b: 16 - 3 = 13 MB free for its 10 MB: no spill. c: 16 - 3 - 4 = 9 MB free for 12 MB: 3 MB spill,
    # DRAM = its 4 MB of weights + 2 x 3 MB
    loads = [BlockLoad("a", weight_bytes=3 * MB), BlockLoad("b", working_bytes=10 * MB),
             BlockLoad("c", weight_bytes=4 * MB, working_bytes=12 * MB)]
    a, b, c = price_blocks(loads, sram16, "activations-first")
    assert (a.weights, a.dram_bytes) == ("resident", 0)
    assert (b.spill_bytes, b.dram_bytes) == (0, 0)
    assert (c.weights, c.weight_dram_bytes, c.spill_bytes, c.dram_bytes) == ("streamed", 4 * MB, 3 * MB, 10 * MB)


def test_weights_first_and_the_least_dram_choice(system):
    sram16 = small_sram(system, 1)  # 16 MB
    loads = [BlockLoad("a", weight_bytes=10 * MB), BlockLoad("b", working_bytes=8 * MB)]
    # weights-first: a's 10 MB stay; b has 6 MB free for 8 MB: 2 MB spill -> DRAM 4 MB per step
    a, b = price_blocks(loads, sram16, "weights-first")
    assert (a.weights, b.spill_bytes, a.dram_bytes + b.dram_bytes) == ("resident", 2 * MB, 4 * MB)
    # activations-first: 8 MB reserved, 8 MB left for weights: a's 10 MB stream (DRAM 10 MB per step); a holds
    # them only while it runs, so b has the whole 16 MB: no spill
    a, b = price_blocks(loads, sram16, "activations-first")
    assert (a.weights, a.dram_bytes, b.spill_bytes) == ("streamed", 10 * MB, 0)
    assert price_blocks(loads, sram16) == price_blocks(loads, sram16, "weights-first")  # 4 MB < 10 MB
    big = [BlockLoad("a", weight_bytes=10 * MB), BlockLoad("b", working_bytes=15 * MB)]
    # weights-first spills 9 MB (18 MB of DRAM traffic); activations-first streams 10 MB: the least is that
    assert price_blocks(big, sram16) == price_blocks(big, sram16, "activations-first")
    with pytest.raises(ValueError, match="least-dram"):
        price_blocks(loads, sram16, "nope")


def test_no_sram_streams_every_weight_and_spills_every_activation(system):
    loads = [BlockLoad("a", weight_bytes=5, working_bytes=7), BlockLoad("b", working_bytes=11)]
    a, b = price_blocks(loads, small_sram(system, 0))
    assert (a.weight_dram_bytes, a.spill_bytes, a.dram_bytes) == (5, 7, 5 + 14)
    assert (b.weights, b.spill_bytes, b.dram_bytes) == ("none", 11, 22)


def test_bound_and_time(system):
    (p,) = price_blocks([BlockLoad("b", gemm_flops=4 * 10 ** 12, compute_s=0.01, sram_bytes=32 * 10 ** 9)], system)
    # compute 10 ms; SRAM 32 GB / 32 TB/s = 1 ms; no DRAM, no comm
    assert p.sram_s == pytest.approx(1e-3) and p.time_s == 0.01 and p.bound == "compute"


# ---------------------------------------------------------------------------------------------------------
# The chip mesh
# ---------------------------------------------------------------------------------------------------------


def test_mesh_link_folds_in_the_core_grid(system):
    link = mesh_link(system.chip)
    # min(100 GB/s x 0.9, 4 edge cores x 256 GB/s) = 90 GB/s; 1 us + 3 core hops x 5 ns
    assert link.effective == pytest.approx(90e9)
    assert link.latency == pytest.approx(1e-6 + 3 * 5e-9)
    narrow = replace(system.chip, core_link=MeshLink(10e9, 5e-9))
    assert mesh_link(narrow).effective == pytest.approx(4 * 10e9)  # the edge's 4 cores bound it


def test_ring_along_a_row(system):
    topo = mesh_topology(system)
    s = 1_000_000
    # chips 0..3 are row 0 (x fastest); the ring's closing transfer 3 -> 0 takes 3 hops back along the row,
    # loading each link once with (n-1)/n S
    assert mesh_traffic(topo, "all_gather", s, [(0, 1, 2, 3)]) == (3, pytest.approx(3 / 4 * s))
    # a column (ids 0, 4, 8, 12): the same along y
    assert mesh_traffic(topo, "all_reduce", s, [(0, 4, 8, 12)]) == (3, pytest.approx(2 * 3 / 4 * s))
    # four rows at once use disjoint links: the busiest still carries one ring's share
    rows = [tuple(range(4 * r, 4 * r + 4)) for r in range(4)]
    assert mesh_traffic(topo, "all_gather", s, rows) == (3, pytest.approx(3 / 4 * s))


def test_all_to_all_on_the_grid(system):
    topo = mesh_topology(system)
    s = 16 * 1000
    # along a row: link x=1 -> x=2 carries every pair (x<=1 -> x>=2): 2 x 2 pairs x S/4 = S
    assert mesh_traffic(topo, "all_to_all", s, [(0, 1, 2, 3)]) == (3, pytest.approx(s))
    # all 16 (y first, then x): link y=1 -> y=2 in a column carries 2 sources x 8 destinations x S/16 = S;
    # link x=1 -> x=2 in a row carries 8 sources x 2 destinations x S/16 = S; the longest path is 3 + 3 hops
    assert mesh_traffic(topo, "all_to_all", s, [tuple(range(16))]) == (6, pytest.approx(s))


def test_permute_corner_to_corner_and_its_time(system):
    topo = mesh_topology(system)
    assert mesh_traffic(topo, "collective_permute", 500, [(0, 15)]) == (6, 500)
    s = 9 * 10 ** 6
    t, hops = collective_time(topo, Collective("collective_permute", s, ((0, 1),), times=3))
    # 3 executions of: base 2 us + 1 hop x (1 us + 3 x 5 ns) + S / 90 GB/s
    assert hops == 1
    assert t == pytest.approx(3 * (2e-6 + 1e-6 + 3 * 5e-9 + s / 90e9))


def test_collectives_price_into_their_block(system):
    c = Collective("all_gather", 4 * 10 ** 6, ((0, 1, 2, 3),))
    (p,) = price_blocks([BlockLoad("b", collectives=(c,))], system)
    assert p.hops == 3 and p.comm_s > 0 and p.bound == "comm" and p.time_s == p.comm_s


# ---------------------------------------------------------------------------------------------------------
# Per-device FLOPs of the strategies against the closed form, and the loads of a lowered program
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lowered():
    from mhlo_cost.analysis import AnalysisOptions, analyze
    from mhlo_cost.lower.models import parallel
    from mhlo_cost.lower.models.config import STDiT3Config

    cfg = replace(STDiT3Config().small(), heads=8, dtype="bfloat16")
    out = {}
    for strategy in ("megatron", "2d", "ulysses", "ring"):
        plan = parallel.make_plan(strategy, 4, None, cfg)
        text = parallel.lower(cfg, plan).as_text(debug_info=True)
        out[strategy] = analyze(text, AnalysisOptions(dataflow=True))
    return cfg, out


def _part_gemm(analysis, block: str, part: str) -> int:
    ops = analysis.ops
    sc = ops["scope"]
    return int(ops[(sc == f"{block}/{part}") | sc.str.startswith(f"{block}/{part}/")]["gemm_flops"].sum())


@pytest.mark.parametrize("strategy", ["megatron", "2d", "ulysses", "ring"])
def test_per_device_flops_split_evenly(lowered, strategy):
    cfg, analyses = lowered
    a, f = analyses[strategy], gemm_flops(cfg)
    for i in range(cfg.depth):
        for kind in ("spatial", "temporal"):
            block = f"{kind}_blocks.{i}"
            assert 4 * _part_gemm(a, block, "mlp") == f["mlp"], (block, "mlp")
            assert 4 * _part_gemm(a, block, "attn") == f["self_attn_linear"] + f[f"{kind}_attn_core"], block
            if strategy == "megatron":  # heads split: the cross-attention too
                assert 4 * _part_gemm(a, block, "cross_attn") == f["cross_attn"], block


def test_loads_of_a_lowered_program_keep_its_totals(lowered, system):
    from mhlo_cost.analysis.collectors import assign_blocks
    from mhlo_cost.roofline.dataflow import block_loads
    from mhlo_cost.roofline.memory import fused_profile

    _, analyses = lowered
    a = analyses["ulysses"]
    mem = fused_profile(a, attention="fused")
    loads = block_loads(a, assign_blocks(a), mem, system.chip)
    s = a.summary
    assert sum(b.gemm_flops for b in loads) == s["gemm_flops"] + s["conv_flops"]
    assert sum(b.vector_flops for b in loads) == s["vector_flops"]
    assert sum(c.comm_bytes for b in loads for c in b.collectives) == s["comm_bytes"]
    assert sum(b.weight_bytes for b in loads) == mem.param_bytes  # every parameter is read somewhere
    prices = price_blocks(loads, system)
    assert all(p.weights in ("resident", "none") for p in prices)  # a small model fits in 256 MB
    assert sum(p.dram_bytes for p in prices) == 0
    tiny = small_sram(system, 0)  # no SRAM at all: every weight streams, every activation spills
    streamed = price_blocks(loads, tiny)
    assert sum(p.weight_dram_bytes for p in streamed) == mem.param_bytes
    assert all(p.spill_bytes == b.working_bytes for p, b in zip(streamed, loads))


# ---------------------------------------------------------------------------------------------------------
# The published table's data file
# ---------------------------------------------------------------------------------------------------------


def test_published_file_shapes_and_columns():
    import tomllib

    from mhlo_cost.lower.models.config import STDiT3Config

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "data",
                        "published_stdit3_mesh.toml")
    with open(path, "rb") as f:
        pub = tomllib.load(f)
    assert pub["source"]["url"].startswith("https://")
    # the shapes as the analysis states them (S tokens per frame, T frames) are the model's
    for shape in pub["shape"]:
        cfg = STDiT3Config().with_shape(shape["name"])
        assert (cfg.tokens_s, cfg.tokens_t) == (shape["S"], shape["T"]), shape["name"]
    assert {s["name"] for s in pub["shape"]} == {"204_640_360", "408_640_360", "51_1280_720", "102_1280_720"}
    for fig in pub["figure"]:
        assert set(fig) == {"shape", "strategy", "chip", "column", "value", "unit", "note"}, fig
    cols = {c["name"]: c for c in pub["column"]}
    assert {n for n, c in cols.items() if c["reproduced"] == "yes"} == {"GEMM FLOPs", "vector FLOPs", "comm volume"}
    assert all(c["needs"] for c in cols.values())
