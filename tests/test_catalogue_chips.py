"""The chip and system catalogue (issue 39): sizes, a source or ESTIMATE for every figure, datasheet spot values
written here from the vendors' documents, the keys that price nothing, and `mhlo-cost hardware list/show/diff`."""
from __future__ import annotations

import json
import math
import re
import tomllib
from importlib import resources

import pytest

from mhlo_cost.cli import main
from mhlo_cost.machines.hardware import HardwareError, get_profile, list_profiles, parse_profiles
from mhlo_cost.network import MeshTopology, NodeTopology, list_systems, resolve_profile
from stderr_lines import error_line

DATA = resources.files("mhlo_cost.machines") / "data"
HW = tomllib.loads((DATA / "hardware.toml").read_text())
SYS = tomllib.loads((DATA / "systems.toml").read_text())

#: the names other work (per-chip validation, what-if) refers to: exactly these
CHIPS = ("b200", "gb200", "mi300x", "mi325x", "mi355x", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7", "gaudi3", "trn2",
         "l40s", "l4", "rtx-4090", "rtx-5090", "a100-sxm-40gb", "h100-pcie", "h100-nvl")
SYSTEMS = ("dgx-b200", "gb200-nvl72", "mi300x-platform", "mi355x-platform", "tpu-v5p-cube", "tpu-v6e-pod",
           "trn2-server")
TEXT_KEYS = {"aliases", "vendor", "description", "source", "f32_matmul", "sources", "chip", "name", "axes"}


def test_the_catalogue_holds_at_least_15_chips_and_8_systems():
    chips, systems = {p.name for p in list_profiles()}, {s.name for s in list_systems()}
    assert set(CHIPS) <= chips and len(chips) >= 15
    assert set(SYSTEMS) <= systems and len(systems) >= 8
    assert not chips & systems


def _figures(entry: dict) -> list[str]:
    """Every figure of a profile or system table as the key its [sources] table names it by."""
    out = []
    for k, v in entry.items():
        if k in TEXT_KEYS:
            continue
        if isinstance(v, dict):
            out += [f"{k}.{sub}" for sub in v if sub not in TEXT_KEYS]
        else:
            out.append(k)
    return out


@pytest.mark.parametrize("doc, table, names", [(HW, "profile", CHIPS), (SYS, "system", SYSTEMS)])
def test_every_catalogue_figure_is_sourced_or_marked(doc, table, names):
    tags = set(doc["sources"])
    for name in names:
        entry = doc[table][name]
        notes = entry["sources"]
        assert entry["source"].strip() and entry["description"].strip()
        for key in _figures(entry):
            note = notes.get(key, "")
            cited = set(re.findall(r"\[([A-Za-z0-9][A-Za-z0-9._-]*)\]", note))
            assert "ESTIMATE" in note or cited, f"{name}: {key} has no source and is not marked ESTIMATE: {note!r}"
            assert cited <= tags, f"{name}: {key} cites {cited - tags}"


@pytest.mark.parametrize("name", CHIPS)
def test_catalogue_figures_are_in_sane_ranges(name):
    hw = get_profile(name)
    m, v = hw.matrix_flops, hw.vector_flops
    assert 100e12 <= m["bf16"] <= 20_000e12
    assert 200e9 <= hw.hbm_bandwidth <= 10e12 and 16e9 <= hw.hbm_capacity <= 300e9
    assert 10e9 <= hw.link_bandwidth <= 2e12 and 1 <= hw.link_count <= 24 and hw.link_generation
    assert hw.tdp is None or 50 <= hw.tdp <= 2000
    assert hw.sram is None or 1e6 <= hw.sram <= 1e9
    assert v["f32"] < m["bf16"] and v["int32"] <= 2 * v["f32"]
    for low, high in (("bf16", "fp8"), ("fp8", "fp6"), ("fp6", "fp4"), ("bf16", "int8"), ("int8", "int4"),
                      ("tf32", "bf16")):
        if low in m and high in m:
            assert m[low] <= m[high], (low, high)
    assert hw.gemm is not None and hw.memory is not None  # the documented default: report prices them alike


# Datasheet figures, written here from the vendors' documents (dense = the "with sparsity" figure / 2, except where a
# datasheet prints its own dense figure: L40S's 362.05 beside 733 sparse).
SPOT = [
    ("mi300x", "hbm_bandwidth", 5.3e12), ("mi300x", "hbm_capacity", 192e9), ("mi300x", "bf16", 2614.9e12 / 2),
    ("mi300x", "tdp", 750.0), ("mi300x", "sram", 256e6), ("mi325x", "hbm_capacity", 256e9),
    ("mi325x", "hbm_bandwidth", 6e12), ("mi355x", "hbm_capacity", 288e9), ("mi355x", "tdp", 1400.0),
    ("b200", "fp8", 9000e12 / 2), ("b200", "fp4", 18000e12 / 2), ("b200", "hbm_bandwidth", 64e12 / 8),
    ("b200", "link_bandwidth", 1.8e12 / 2), ("gb200", "bf16", 5000e12 / 2), ("gb200", "hbm_bandwidth", 576e12 / 72),
    ("tpu-v5e", "bf16", 197e12), ("tpu-v5e", "hbm_bandwidth", 819e9), ("tpu-v5e", "hbm_capacity", 16e9),
    ("tpu-v5e", "link_bandwidth", 400e9 / 2), ("tpu-v5p", "bf16", 459e12), ("tpu-v5p", "hbm_bandwidth", 2765e9),
    ("tpu-v6e", "bf16", 918e12), ("tpu-v6e", "int8", 1836e12), ("tpu-v6e", "link_bandwidth", 800e9 / 2),
    ("tpu-v7", "fp8", 4614e12), ("tpu-v7", "bf16", 2307e12), ("trn2", "bf16", 667e12), ("trn2", "fp8", 1299e12),
    ("trn2", "hbm_bandwidth", 2.9e12), ("gaudi3", "bf16", 1835e12), ("gaudi3", "hbm_bandwidth", 3.67e12),
    ("gaudi3", "sram", 96e6), ("l40s", "bf16", 362.05e12), ("l40s", "hbm_bandwidth", 864e9),
    ("l4", "hbm_bandwidth", 300e9), ("l4", "fp8", 485e12 / 2), ("rtx-4090", "hbm_bandwidth", 1008e9),
    ("rtx-5090", "hbm_bandwidth", 1792e9), ("rtx-5090", "fp4", 3352e12 / 2), ("a100-sxm-40gb", "hbm_bandwidth", 1555e9),
    ("a100-sxm-40gb", "bf16", 312e12), ("h100-pcie", "hbm_bandwidth", 2e12), ("h100-pcie", "fp8", 3026e12 / 2),
    ("h100-nvl", "bf16", 1671e12 / 2), ("h100-nvl", "hbm_capacity", 94e9), ("h100-nvl", "hbm_bandwidth", 3.9e12),
]


@pytest.mark.parametrize("name, what, expected", SPOT)
def test_datasheet_spot_values(name, what, expected):
    hw = get_profile(name)
    got = hw.matrix_flops[what] if what in hw.matrix_flops and not hasattr(hw, what) else getattr(hw, what)
    assert math.isclose(got, expected, rel_tol=1e-3), (name, what, got, expected)


def test_the_systems_topologies_follow_their_sources():
    nvl = resolve_profile("nvl72").topology
    assert isinstance(nvl, NodeTopology) and nvl.devices_per_node == 72 and nvl.switch
    assert nvl.intra.bandwidth == 1.8e12 / 2 and math.isclose(nvl.intra.efficiency, 40.1 / 50)
    amd = resolve_profile("mi300x-platform")
    assert amd.topology.devices_per_node == 8 and amd.topology.intra.bandwidth == 7 * 128e9 / 2
    v5p = resolve_profile("tpu-v5p-cube").topology
    assert isinstance(v5p, MeshTopology) and v5p.dims == (4, 4, 4) and v5p.wraparound == (True,) * 3
    assert v5p.link.bandwidth == 1200e9 / 2 / 6
    v6e = resolve_profile("tpu-v6e-pod").topology
    assert v6e.dims == (16, 16) and v6e.size == 256 and v6e.link.bandwidth == 800e9 / 2 / 4
    assert resolve_profile("trn2.48xlarge").topology.dims == (4, 4)
    libraries = {s.name: s.collectives for s in list_systems()}
    assert all(libraries.values())
    assert libraries["mi300x-platform"] == "RCCL" and libraries["dgx-b200"] == "NCCL"
    assert "XLA" in libraries["tpu-v6e-pod"] and "Neuron" in libraries["trn2-server"]


GOOD = """\
[profile.c]
description = "c"
hbm_bandwidth_gb_s = 1000
hbm_capacity_gb = 16
link_bandwidth_gb_s = 100
hop_latency_us = 1
kernel_overhead_us = 1
transcendental_tops = 1
[profile.c.matrix_tflops]
bf16 = 100
[profile.c.vector_tflops]
f32 = 10
"""
FACTS = """sram_mb = 40
tdp_w = 300
link_generation = "NVLink 3"
link_count = 12
"""


def test_datasheet_keys_load_and_price_nothing():
    plain = parse_profiles(GOOD)["c"]
    text = GOOD.replace("transcendental_tops = 1\n", "transcendental_tops = 1\n" + FACTS)
    rich = parse_profiles('[sources]\nX-DS = "a datasheet"\n' + text + '[profile.c.sources]\n"matrix_tflops.bf16" '
                          '= "[X-DS] 100 dense"\ntdp_w = "ESTIMATE: guessed"\n')["c"]
    assert (rich.sram, rich.tdp, rich.link_generation, rich.link_count) == (40e6, 300.0, "NVLink 3", 12)
    assert rich.notes["matrix_tflops.bf16"] == "[X-DS] 100 dense" and rich.references == {"X-DS": "a datasheet"}
    assert (plain.sram, plain.tdp, plain.link_count, dict(plain.notes)) == (None, None, None, {})
    for hw_a, hw_b in ((plain, rich),):
        assert hash(hw_a) == hash(hw_b)
        assert hw_a.matrix_peak("bf16") == hw_b.matrix_peak("bf16")
        assert hw_a.memory_time(1e9, 3) == hw_b.memory_time(1e9, 3) and hw_a.comm_time(10**6, 4) == hw_b.comm_time(
            10**6, 4)


@pytest.mark.parametrize("extra, message", [
    ('[profile.c.sources]\nnope = "x"\n', "'nope' names no field"),
    ('[profile.c.sources]\n"matrix_tflops.fp8" = "x"\n', "names no field"),
    ('[profile.c.sources]\nhbm_capacity_gb = "[NOWHERE] 16 GB"\n', r"cites \[NOWHERE\]"),
    ('[profile.c.sources]\nhbm_capacity_gb = ""\n', "non-empty string"),
])
def test_bad_sources_tables_are_refused(extra, message):
    with pytest.raises(HardwareError, match=message):
        parse_profiles(GOOD + extra)


@pytest.mark.parametrize("line, message", [("tdp_w = 0", "tdp_w"), ("link_count = true", "link_count"),
                                           ("sram_mb = -1", "sram_mb"), ("link_generation = 5", "link_generation")])
def test_bad_datasheet_keys_are_refused(line, message):
    with pytest.raises(HardwareError, match=message):
        parse_profiles(GOOD.replace("hop_latency_us = 1\n", f"hop_latency_us = 1\n{line}\n"))


# ----------------------------------------------------------------------------------- the command line


def _run(capsys, *argv):
    code = main(["hardware", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_hardware_list_is_the_default(capsys):
    assert _run(capsys)[:2] == _run(capsys, "list")[:2]
    code, out, _ = _run(capsys)
    assert code == 0 and all(name in out for name in CHIPS + SYSTEMS)


def test_hardware_show_prints_every_figure_with_its_source(capsys):
    code, out, _ = _run(capsys, "show", "MI300X")
    assert code == 0 and out.startswith("mi300x")
    row = next(ln for ln in out.splitlines() if ln.startswith("hbm_bandwidth_gb_s"))
    assert "5300" in row and "GB/s" in row and "[MI300X-DS]" in row
    assert re.search(r"^matrix_tflops\.bf16\s+1307\.4\s+TFLOP/s dense\s+\[MI300X-DS\]", out, re.M)
    assert re.search(r"^hop_latency_us\s+3\s+us\s+ESTIMATE", out, re.M)
    assert "sources cited:" in out and "[MI300X-DS] AMD Instinct MI300X" in out
    code, out, _ = _run(capsys, "show", "tpu-v5p-cube", "--format", "json")
    rows = {r["field"]: r for r in json.loads(out)["rows"]}
    assert code == 0 and rows["mesh.dims"]["value"] == "4 x 4 x 4" and rows["chip.matrix_tflops.bf16"]["value"] == "459"
    assert "XLA" in rows["collectives"]["value"] and "ESTIMATE" in rows["mesh.efficiency"]["source"]


def test_hardware_diff_gives_the_ratio_of_each_figure(capsys):
    code, out, _ = _run(capsys, "diff", "h100", "b200", "--format", "json")
    rows = {r["field"]: r for r in json.loads(out)["rows"]}
    assert code == 0
    assert rows["hbm_bandwidth_gb_s"]["B/A"] == f"{8000 / 3350:.4g}"
    assert rows["matrix_tflops.fp4"]["h100-sxm"] == "-" and rows["matrix_tflops.fp4"]["b200"] == "9000"
    assert rows["link_generation"]["B/A"] == "differs"


@pytest.mark.parametrize("argv, message", [
    (["show", "mi300"], "unknown hardware 'mi300' (close: mi300x"),
    (["show", "qwerty"], "no close name"),
    (["diff", "h100"], "hardware diff takes two names, got 1"),
    (["show"], "hardware show takes one name, got 0"),
    (["list", "h100"], "hardware list takes no names, got 1"),
])
def test_hardware_errors_are_one_line(capsys, argv, message):
    code, out, err = _run(capsys, *argv)
    assert code == 2 and not out and message in error_line(err)


def test_report_runs_end_to_end_on_a_catalogue_chip(capsys):
    assert main(["report", "tests/fixtures/small_stablehlo.mlir", "--hardware", "mi300x", "--format", "json",
                 "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["headline"].endswith("on mi300x") and doc["summary"]["est_time_s"] > 0


def test_the_mi300x_platform_prices_a_collective_in_closed_form(capsys):
    # all_gather over 4 devices, ring: base 6.6 us + 3 steps x 1 us + 3,072 bytes / (448 GB/s x 0.7)
    assert main(["report", "tests/fixtures/collectives_8dev.mlir", "--hardware", "mi300x-platform", "--by", "comm",
                 "--format", "json", "-q"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    gather = next(r for r in rows if r["op"] == "all_gather")
    assert gather["tier"] == "xgmi" and gather["comm_bytes"] == 3072
    assert math.isclose(gather["comm_time_s"], (6.6 + 3 * 1.0) * 1e-6 + 3072 / (448e9 * 0.7), rel_tol=1e-9)


def test_show_reads_the_notes_of_a_users_file(tmp_path, capsys):
    f = tmp_path / "mine.toml"
    f.write_text('[sources]\nX-DS = "the X datasheet"\n' + GOOD + '[profile.c.sources]\n"matrix_tflops.bf16" = '
                 '"[X-DS] 100 dense"\n')
    code, out, _ = _run(capsys, "show", "c", "--hardware-file", str(f))
    assert code == 0 and re.search(r"^matrix_tflops\.bf16\s+100\s+TFLOP/s dense\s+\[X-DS\] 100 dense$", out, re.M)
    assert "[X-DS] the X datasheet" in out
    assert re.search(r"^hbm_bandwidth_gb_s\s+1000\s+GB/s\s+\(the profile's source line\)$", out, re.M)
