"""``mhlo-cost whatif`` and ``--hardware a,b,c``: a profile's parameters changed, the program priced again (never
walked again). The closed form: one memory-bound block (elementwise over a 4096 x 4096 bf16 tensor) and one
compute-bound block (an 8192^3 bf16 matmul); the times are worked out here from the profile's own figures."""
from __future__ import annotations

import json
import math

import pytest

from helpers import lowered, run_cli
from mhlo_cost.machines.hardware import HardwareError, get_profile
from mhlo_cost.machines.whatif import Change, apply, gain, parse_change, unpriced
from mhlo_cost.studies.study import Study
from mhlo_cost.studies.whatif import Pricing, compare_table, pareto_table, whatif_table

N = 4096 * 4096  # elements of the elementwise block's tensor
M = 8192  # the matmul's M = N = K


def _program(x, a, b):
    import jax

    with jax.named_scope("blocks.0"):
        y = x * 2.0 + 1.0  # broadcast, multiply, broadcast, add: four memory-bound kernels op by op
    with jax.named_scope("blocks.1"):
        z = a @ b
    return y, z


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    text = lowered(_program, ((4096, 4096), "bfloat16"), ((M, M), "bfloat16"), ((M, M), "bfloat16"))
    path = tmp_path_factory.mktemp("whatif") / "two_blocks.mlir"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def study(program):
    s = Study(str(program), hardware="h100", training=True)
    s.analysis  # walked once, here
    return s


def _row(table, block):
    df = table.frame
    return df[df["block"] == block].iloc[0]


# The memory-bound block op by op: 2 broadcasts (a 2-byte scalar in, 2N bytes out) and 2 elementwise ops (two
# bf16 tensors in, one out), each its own kernel.
BYTES = [2 + 2 * N, 6 * N, 2 + 2 * N, 6 * N]


def _memory_block_time(hw) -> float:
    """The closed form on ``hw``: per kernel the launch overhead, plus its bytes and the profile's fill and drain
    (``half_size_mb``) at ``hbm_bandwidth x efficiency`` (the profile's measured memory model)."""
    mem = hw.memory
    rate = hw.hbm_bandwidth * mem.efficiency
    return len(BYTES) * hw.kernel_overhead + math.fsum((b + mem.half_bytes) / rate for b in BYTES)


def test_memory_bound_block_halves_with_twice_the_bandwidth(study):
    h100 = get_profile("h100")
    t = whatif_table(study, [parse_change("hbm_bw=x2")])
    mem, dot = _row(t, "blocks.0"), _row(t, "blocks.1")
    assert (mem["bound_before"], dot["bound_before"]) == ("memory", "compute")
    assert mem["time_before_s"] == pytest.approx(_memory_block_time(h100), rel=1e-12)
    launch = len(BYTES) * h100.kernel_overhead  # the fixed part: it does not move with the bandwidth
    assert mem["time_after_s"] - launch == pytest.approx((mem["time_before_s"] - launch) / 2, rel=1e-12)
    assert mem["saved_s"] == pytest.approx((mem["time_before_s"] - launch) / 2, rel=1e-12)
    assert dot["time_after_s"] == dot["time_before_s"] and dot["saved_s"] == 0  # compute-bound: not moved
    assert dot["bound_after"] == "compute"


def test_compute_bound_block_halves_with_twice_the_peak(study):
    h100 = get_profile("h100")
    t = whatif_table(study, [parse_change("peak.bf16=x2")])
    mem, dot = _row(t, "blocks.0"), _row(t, "blocks.1")
    assert mem["time_after_s"] == mem["time_before_s"]  # the vector unit's rate is another key
    launch = h100.kernel_overhead  # one kernel
    assert dot["time_after_s"] - launch == pytest.approx((dot["time_before_s"] - launch) / 2, rel=1e-12)
    # a value with its unit is the same change as the factor
    same = whatif_table(study, [parse_change(f"peak.bf16={2 * h100.matrix_flops['bf16'] / 1e12!r}TFLOPS")])
    assert _row(same, "blocks.1")["time_after_s"] == pytest.approx(dot["time_after_s"], rel=1e-12)


def test_sensitivity_is_the_closed_form_and_names_the_top_parameter(study):
    h100 = get_profile("h100")
    t = whatif_table(study, [])
    mem, dot, total = _row(t, "blocks.0"), _row(t, "blocks.1"), _row(t, "TOTAL")
    launch = len(BYTES) * h100.kernel_overhead
    stream = _memory_block_time(h100) - launch
    # a 10% bandwidth gain: the streaming part over 1.1
    assert mem["gain10_hbm_bw"] == pytest.approx((stream - stream / 1.1) / (stream + launch), rel=1e-9)
    assert mem["top"] == "hbm_bw" and dot["top"] == "peak.bf16"
    assert dot["gain10_hbm_bw"] == 0 and mem["gain10_peak.bf16"] == 0
    assert total["top"] == "peak.bf16"  # the matmul is most of the program's time
    assert mem["top_saves"] == mem["gain10_hbm_bw"]
    assert (mem["bound_before"], mem["bound_after"], mem["saved"]) == ("memory", "memory", 0)


def test_repricing_does_not_walk_again(study, monkeypatch):
    from mhlo_cost.studies import study as study_module

    def walked(*a, **k):
        raise AssertionError("walked again")

    monkeypatch.setattr(study_module.Study, "answer", walked)
    monkeypatch.setattr("mhlo_cost.analysis.isolated.walk_loaded", walked)
    monkeypatch.setattr("mhlo_cost.analysis.isolated.analyze_isolated", walked)
    counts = [(r.gemm_flops, r.vector_flops, r.bytes_read, r.bytes_written) for r in study.analysis.rows]
    whatif_table(study, [parse_change("hbm_bw=4.8TB/s"), parse_change("kernel_overhead=1us")])
    assert counts == [(r.gemm_flops, r.vector_flops, r.bytes_read, r.bytes_written) for r in study.analysis.rows]


def test_changes_and_units():
    h100 = get_profile("h100")
    assert apply(h100, [parse_change("hbm_bw=4.8TB/s")]).hbm_bandwidth == 4.8e12
    assert apply(h100, [parse_change("hbm_bw=3350GB/s")]).hbm_bandwidth == 3.35e12
    assert apply(h100, [parse_change("hbm=96GiB")]).hbm_capacity == 96 * 2 ** 30
    assert apply(h100, [parse_change("kernel_overhead=500ns")]).kernel_overhead == pytest.approx(5e-7)
    assert apply(h100, [parse_change("link_bw=2", scale=True)]).link_bandwidth == 2 * h100.link_bandwidth
    assert apply(h100, [parse_change("peak=x2")]).matrix_flops == {k: 2 * v for k, v in h100.matrix_flops.items()}
    assert gain(h100, "kernel_overhead").kernel_overhead == pytest.approx(h100.kernel_overhead / 1.1)
    # no launch overhead, no hop latency: a profile may state 0 (it was refused as 'expected a positive number')
    assert apply(h100, [parse_change("kernel_overhead=0us"), parse_change("hop_latency=x0")]).hop_latency == 0
    assert apply(h100, [parse_change("kernel_overhead=0us")]).kernel_overhead == 0
    assert gain(h100, "hbm_bw").hbm_bandwidth == pytest.approx(h100.hbm_bandwidth * 1.1)
    assert h100.sram == 50e6 and apply(h100, [parse_change("sram=256MB")]).sram == 256e6  # 50 MB L2, datasheet
    assert apply(h100, [parse_change("sram=x2")]).sram == 100e6
    assert str(parse_change("hbm_bw=4.8TB/s")) == "hbm_bw=4.8TB/s" and str(Change("hbm_bw", factor=2)) == "hbm_bw x2"
    assert h100.hbm_bandwidth == 3.35e12  # the shared profile untouched
    notes = unpriced([parse_change("sram=256MB"), parse_change("hbm_bw=x2"), parse_change("hbm=x2")])
    assert notes[0] == "sram=256MB: not used by the GPU pricing (no time moves with it)"
    assert len(notes) == 2 and notes[1].startswith("hbm x2: a capacity moves no time")


@pytest.mark.parametrize("text, words", [
    ("foo=2", "unknown what-if key 'foo' (accepted: peak, peak.<dtype>"),
    ("hbm_bw=3PB", "unknown unit 'PB' (accepted: TB/s, GB/s"),
    ("hbm_bw=-1TB/s", "expected a positive number"),
    ("hbm_bw=0TB/s", "expected a positive number"),
    ("hop_latency=-1us", "expected a non-negative number"),
    ("peak=2PFLOPS", "every peak rate takes a factor"),
    ("hbm_bw", "takes KEY=VALUE"),
])
def test_bad_changes_are_one_line(text, words):
    with pytest.raises(HardwareError) as e:
        parse_change(text)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_pareto_table(study):
    chips = [get_profile("a100"), get_profile("h200")]
    df = pareto_table(study, chips, [parse_change("hbm_bw=x2")]).frame
    assert list(df["chip"]) == ["h100-sxm", "h100-sxm (what-if)", "a100-sxm-80gb", "h200-sxm"]
    pareto = dict(zip(df["chip"], df["pareto"]))
    # the what-if h100 (2x its bandwidth: 6.7 TB/s) is faster than h200 (4.8 TB/s) at the same bf16 peak
    assert pareto == {"h100-sxm": False, "h100-sxm (what-if)": True, "a100-sxm-80gb": True, "h200-sxm": False}


def _two_chips(tmp_path):
    """Two made-up chips, no launch overhead and no memory or GEMM model: ``fast`` has twice ``slow``'s bandwidth."""
    body = """
[profile.{name}]
description = "made-up"
hbm_bandwidth_gb_s = {bw}
hbm_capacity_gb = 80
link_bandwidth_gb_s = 100
hop_latency_us = 1.0
kernel_overhead_us = 0
transcendental_tops = 1.0
[profile.{name}.matrix_tflops]
bf16 = 500
[profile.{name}.vector_tflops]
f32 = 50
bf16 = 100
"""
    path = tmp_path / "chips.toml"
    path.write_text("schema_version = 1\n" + body.format(name="slow", bw=1000) + body.format(name="fast", bw=2000))
    return path


@pytest.mark.parametrize("command", ["blocks", "report"])
def test_compare_ratio_of_a_memory_bound_block(program, tmp_path, capsys, command):
    chips = _two_chips(tmp_path)
    code, out, err = run_cli([command, program, "--hardware", "slow,fast", "--hardware-file", chips, "--format",
                              "json"], capsys)
    assert code == 0, err
    rows = {r["block"]: r for r in json.loads(out)["rows"]}
    assert rows["blocks.0"]["fast_ratio"] == pytest.approx(2.0, rel=1e-12)  # memory-bound: twice as fast
    assert rows["blocks.1"]["fast_ratio"] == pytest.approx(1.0, rel=1e-12)  # compute-bound: no faster
    assert rows["blocks.0"]["slow_ratio"] == 1.0
    assert rows["blocks.0"]["slow_bound"] == rows["blocks.0"]["fast_bound"] == "memory"


def test_whatif_compare_reads_the_hardware_file(program, tmp_path, capsys):
    """--compare finds chips in --hardware-file as --hardware does (it looked in the catalogue alone)."""
    chips = _two_chips(tmp_path)
    code, out, err = run_cli(["whatif", program, "--hardware", "slow", "--hardware-file", chips, "--compare",
                              "fast", "--format", "json"], capsys)
    assert code == 0, err
    assert [r["chip"] for r in json.loads(out)["pareto"]] == ["slow", "fast"]


def test_compare_table_every_format_and_html(program, tmp_path, capsys):
    base = ["report", program, "--hardware", "h100,a100"]
    for fmt in ("table", "csv", "markdown"):
        code, out, err = run_cli(base + ["--format", fmt], capsys)
        assert code == 0 and "a100-sxm-80gb_ratio" in out, err
    page = tmp_path / "c.html"
    code, _, err = run_cli(base + ["--format", "html", "-o", page], capsys)
    assert code == 0, err
    html = page.read_text()
    assert "Blocks across chips" in html and html.count("<h3>blocks.") == 2


def test_compare_is_the_single_chip_estimate(study):
    h100, a100 = get_profile("h100"), get_profile("a100")
    df = compare_table(study, [h100, a100]).frame
    alone = study.on(a100).block_frame(memory=False)
    assert list(df["a100-sxm-80gb_time_s"]) == list(alone["est_time_overlap_s"])
    assert list(df["a100-sxm-80gb_bound"]) == list(alone["bound"])
    assert Pricing(study).frame(h100)[1] == list(df["h100-sxm_time_s"])


def test_whatif_cli_formats_and_plot(program, tmp_path, capsys):
    base = ["whatif", program, "--hardware", "h100", "--set", "hbm_bw=x2"]
    code, out, err = run_cli(base + ["--format", "json", "--compare", "a100,h200"], capsys)
    assert code == 0, err
    got = json.loads(out)
    assert got["changes"] == ["hbm_bw x2"] and len(got["pareto"]) == 4
    assert [r["block"] for r in got["rows"]][-1] == "TOTAL"
    for fmt in ("table", "csv", "markdown", "html"):
        code, out, err = run_cli(base + ["--format", fmt], capsys)
        assert code == 0 and "gain10_hbm_bw" in out, err
    code, out, err = run_cli(base + ["--set", "sram=256MB", "--format", "csv"], capsys)
    assert code == 0
    pytest.importorskip("matplotlib")
    png = tmp_path / "whatif.png"
    code, _, err = run_cli(base + ["-o", png], capsys)
    assert code == 0 and png.read_bytes()[:4] == b"\x89PNG", err


@pytest.mark.parametrize("args, words", [
    (["whatif", "{p}", "--set", "hbm_bw=x2"], "whatif needs a profile"),
    (["whatif", "{p}", "--hardware", "h100", "--set", "hbm_bw=2"], "must be a number in [0.001, 1e+06] GB/s"),
    (["whatif", "{p}", "--hardware", "h100", "--set", "bogus=2"], "unknown what-if key 'bogus'"),
    (["whatif", "{p}", "--hardware", "h100", "--set", "hbm_bw=2XB/s"], "unknown unit 'XB/s'"),
    (["whatif", "{p}", "--hardware", "h100,a100"], "whatif takes one --hardware"),
    (["whatif", "{p}", "--hardware", "h100", "--scale", "peak.fp6=2"], "no rate 'peak.fp6' to scale"),
    (["whatif", "{p}", "--hardware", "h100", "--compare", "nochip"], "unknown hardware 'nochip'"),
    (["whatif", "{p}", "--hardware", "h100", "--compare", "a100,a100"], "--compare names a chip twice"),
    (["whatif", "{p}", "--hardware", "h100", "--compare", "a100,"], "--compare takes names separated by commas"),
    (["whatif", "{p}", "--hardware", "dgx-h100", "--scale", "link_bw=2"], "is a system"),
    (["report", "{p}", "--hardware", "h100,a100", "--by", "op"], "goes with --by block"),
    (["blocks", "{p}", "--hardware", "h100,h100"], "names a chip twice"),
    (["blocks", "{p}", "--hardware", "h100,", "--block", "x"], "names separated by commas"),
    (["blocks", "{p}", "--hardware", "h100,a100", "--block", "x"], "does not go with --block"),
])
def test_errors_are_one_line_exit_2(program, capsys, args, words):
    code, out, err = run_cli([a.format(p=program) for a in args], capsys)
    assert code == 2 and out == ""
    assert err.startswith("mhlo-cost: error: ") and err.count("\n") == 1 and words in err, err


def test_single_hardware_name_is_unchanged(program, capsys):
    """One name still takes the one-chip path (the golden tests hold its bytes)."""
    code, out, err = run_cli(["blocks", program, "--hardware", "h100", "--format", "csv"], capsys)
    assert code == 0 and "h100-sxm_ratio" not in out and "est_time_s" in out


def test_whatif_on_stdit3_prints_bound_and_top_per_block(tmp_path, capsys):
    """The issue's case: STDiT3 at 204_640_360 (one block of each kind), per block a bound and a top parameter."""
    path = tmp_path / "stdit3.mlir"
    code, _, err = run_cli(["lower", "--model", "stdit3", "--shape", "204_640_360", "--depth", "1", "-o", path,
                            "-q"], capsys)
    assert code == 0, err
    code, out, err = run_cli(["whatif", path, "--hardware", "h100", "--execution", "compiled", "--format", "json"],
                             capsys)
    assert code == 0, err
    rows = {r["block"]: r for r in json.loads(out)["rows"]}
    for block in ("spatial_blocks.0", "temporal_blocks.0", "TOTAL"):
        assert rows[block]["bound_after"] in ("compute", "memory", "overhead", "comm")
        assert rows[block]["top"] and rows[block]["top_saves"] > 0
        assert rows[block]["top_saves"] == max(v for k, v in rows[block].items() if k.startswith("gain10_"))


def test_a_chip_with_no_time_shows_no_ratio_in_the_page():
    """A block that takes no time on a chip has no ratio (NaN in the table, null in JSON): its bar said 'xnan'."""
    from mhlo_cost.views.html.compare import chip_bars

    svg = chip_bars("b", [("a", 1e-3, "memory", 1.0), ("c", 0.0, "free", math.nan)])
    assert "nan" not in svg and "memory  x1" in svg
