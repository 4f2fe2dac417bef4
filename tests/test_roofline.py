"""Roofline latency: the per-op rule on closed forms, fusion, blocks and steps adding up, and the CLI."""
from __future__ import annotations

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import pandas as pd
import pytest
from jax import lax

from mhlo_cost import analyze
from mhlo_cost.cli import main
from mhlo_cost.analysis.collectors import assign_blocks
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.analysis import AnalysisOptions
from mhlo_cost.roofline import Roofline, fuse, op_time
from stderr_lines import error_line
from helpers import lowered

# The per-op rule at the datasheet peak: the shipped GEMM efficiency model is tested in test_gemm_efficiency.py
H100 = dataclasses.replace(get_profile("h100"), gemm=None)


def only(a, name):
    rows = [r for r in a.rows if r.op.endswith("." + name)]
    assert len(rows) == 1, [r.op for r in a.rows]
    return rows[0]


# -- the per-op rule ----------------------------------------------------------------------------------------


def test_lone_bf16_matmul_is_compute_bound_at_peak():
    n = 8192
    a = analyze(lowered(lambda x, y: x @ y, ((n, n), jnp.bfloat16), ((n, n), jnp.bfloat16)))
    t = op_time(only(a, "dot_general"), H100)
    flops = 2 * n**3
    assert t.flops == flops and t.bound == "compute" and t.unit == "matrix"
    assert t.time_s == flops / H100.matrix_peak("bf16") + H100.kernel_overhead
    # achievable bandwidth (issue 25): the profile's measured fraction of the datasheet figure, plus the
    # fill-and-drain of one kernel (half_size bytes at that rate)
    mem = H100.memory
    assert t.memory_s == (3 * n * n * 2 + mem.half_bytes) / (H100.hbm_bandwidth * mem.efficiency)
    assert t.utilisation == pytest.approx(flops / H100.matrix_peak("bf16") / t.time_s)


def test_bf16_operands_with_f32_result_run_at_the_bf16_rate():
    n = 4096
    f = lambda x, y: lax.dot_general(x, y, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)  # noqa
    a = analyze(lowered(f, ((n, n), jnp.bfloat16), ((n, n), jnp.bfloat16)))
    r = only(a, "dot_general")
    assert r.dtype == "f32"
    t = op_time(r, H100)
    assert t.peak == H100.matrix_peak("bf16") == 989.4e12
    assert t.compute_s == 2 * n**3 / 989.4e12


def test_large_elementwise_add_is_memory_bound_at_bandwidth():
    n = 2**26
    a = analyze(lowered(lambda x, y: x + y, ((n,), jnp.bfloat16), ((n,), jnp.bfloat16)))
    t = op_time(only(a, "add"), H100)
    nbytes = 3 * n * 2
    assert t.bound == "memory" and t.flops == n
    mem = H100.memory  # achievable bandwidth for one kernel of this size (issue 25)
    assert t.time_s == (nbytes + mem.half_bytes) / (H100.hbm_bandwidth * mem.efficiency) + H100.kernel_overhead
    assert t.utilisation < 0.01


def test_transcendental_rate_binds_when_tighter():
    n = 2**24
    a = analyze(lowered(jnp.exp, ((n,), jnp.float32)))
    t = op_time(only(a, "exponential"), H100)
    assert t.unit == "transcendental"
    assert t.compute_s == n / H100.transcendental_rate
    assert t.compute_s > n / H100.vector_peak("f32")


def test_reshape_and_constant_cost_nothing():
    a = analyze(lowered(lambda x: (x.reshape(64, 16) * 2.0), ((1024,), jnp.float32)))
    for name in ("reshape", "constant"):
        for r in a.rows:
            if r.op.endswith("." + name):
                t = op_time(r, H100)
                assert t.time_s == 0 and t.bound == "free"


UNKNOWN = """
func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.custom_call @my_kernel(%arg0) : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
"""


def test_unknown_ops_are_zero_but_flagged():
    rf = Roofline(analyze(UNKNOWN), H100)
    assert rf.times[0].bound == "unknown" and rf.times[0].time_s == 0
    assert rf.unknown_ops == 1 and rf.summary()["unknown_ops"] == 1


def test_collectives_use_the_alpha_beta_model(fixtures):
    a = analyze(fixtures / "collectives_8dev.mlir")
    rf = Roofline(a, H100)
    comm = [(r, t) for r, t in zip(a.rows, rf.times) if r.kind == "collective"]
    assert comm
    for r, t in comm:
        assert t.bound == "comm"
        assert t.comm_s == H100.comm_time(r.comm_bytes, r.multiplicity * r.comm_steps)
    assert rf.totals()["comm_time_s"] == pytest.approx(sum(t.comm_s for _, t in comm))


# -- data flow and fusion ---------------------------------------------------------------------------------


def mlp(x, w1, b1, w2):
    h = x @ w1 + b1
    h = h * jax.nn.sigmoid(h)
    return h @ w2


MLP_SHAPES = (((256, 512), jnp.bfloat16), ((512, 1024), jnp.bfloat16), ((1024,), jnp.bfloat16),
              ((1024, 512), jnp.bfloat16))


def test_dataflow_rows_equal_analyze_and_producers_point_back():
    text = lowered(mlp, *MLP_SHAPES)
    a, d = analyze(text), analyze(text, AnalysisOptions(dataflow=True))
    assert [(r.op, r.scope, r.bytes_read, r.multiplicity) for r in a.rows] == \
        [(r.op, r.scope, r.bytes_read, r.multiplicity) for r in d.rows]
    assert len(d.producers) == len(d.rows)
    dots = [i for i, r in enumerate(d.rows) if r.kind == "dot"]
    # the first dot reads two arguments; the second reads a value produced by a row before it
    assert all(isinstance(p, str) for p in d.producers[dots[0]])
    assert any(isinstance(p, int) and p < dots[1] for p in d.producers[dots[1]])
    for i, ps in enumerate(d.producers):
        assert all(p < i for p in ps if isinstance(p, int))


def test_epilogue_fuses_into_the_gemm_kernel():
    d = analyze(lowered(mlp, *MLP_SHAPES), AnalysisOptions(dataflow=True))
    f = fuse(d, H100)
    dot_kernels = [k for k in f.kernels if k.has_dot]
    assert len(dot_kernels) == 2
    first = dot_kernels[0]
    ops = [d.rows[i].op.split(".")[-1] for i in first.members]
    assert "add" in ops and "multiply" in ops  # bias and the SiLU epilogue
    # The fused GEMM kernel reads x, w1, b1 once (and scalar constants) and writes only h
    assert 0 <= first.bytes_read - 2 * (256 * 512 + 512 * 1024 + 1024) <= 16
    assert first.bytes_written == 2 * 256 * 1024


def test_layernorm_row_reduction_is_one_kernel():
    def ln(x):
        xf = x.astype(jnp.float32)
        m = xf.mean(-1, keepdims=True)
        c = xf - m
        v = (c * c).mean(-1, keepdims=True)
        return (c * lax.rsqrt(v + 1e-6)).astype(x.dtype)

    d = analyze(lowered(ln, ((4096, 1024), jnp.bfloat16)), AnalysisOptions(dataflow=True))
    f = fuse(d, H100)
    big = [k for k in f.kernels if k.bytes_read >= 4096 * 1024 * 2]
    assert len(big) == 1
    k = big[0]
    assert k.bytes_read == 4096 * 1024 * 2 + sum(t.nbytes for t in k.inputs[1:])
    assert k.bytes_written == 4096 * 1024 * 2


@pytest.mark.parametrize("name", ["softmax", "rmsnorm"])
def test_softmax_and_rmsnorm_are_one_kernel(name):
    def softmax(x):
        return jax.nn.softmax(x.astype(jnp.float32), -1).astype(x.dtype)

    def rmsnorm(x):
        xf = x.astype(jnp.float32)
        return (xf * lax.rsqrt((xf * xf).mean(-1, keepdims=True) + 1e-6)).astype(x.dtype)

    d = analyze(lowered({"softmax": softmax, "rmsnorm": rmsnorm}[name], ((2048, 512), jnp.bfloat16)),
                AnalysisOptions(dataflow=True))
    f = fuse(d, H100)
    assert len(f.kernels) == 1
    k = f.kernels[0]
    # one pass: the bf16 input read once (plus scalar constants, a few bytes), the bf16 output written once
    assert 0 <= k.bytes_read - 2048 * 512 * 2 <= 16
    assert k.bytes_written == 2048 * 512 * 2


def test_without_row_fusion_softmax_reads_its_input_per_reduction():
    def softmax(x):
        return jax.nn.softmax(x, -1)

    d = analyze(lowered(softmax, ((2048, 512), jnp.float32)), AnalysisOptions(dataflow=True))
    f = fuse(d, dataclasses.replace(H100, row_fusion=False))
    n = 2048 * 512 * 4
    assert len(f.kernels) >= 2
    # max, then the rest: the input is read by both passes (a row of scalars between them is small)
    assert sum(k.bytes_read for k in f.kernels) >= 2 * n
    assert sum(k.bytes_read for k in fuse(d, H100).kernels) < n + 64


@pytest.fixture(scope="module")
def stdit3_small():
    stdit3 = pytest.importorskip("mhlo_cost.lower.models.stdit3")
    from mhlo_cost.lower.models.config import STDiT3Config

    return analyze(stdit3.lower(STDiT3Config().small()).as_text(debug_info=True), AnalysisOptions(dataflow=True))


@pytest.fixture(scope="module")
def gpt_scan():
    gpt = pytest.importorskip("mhlo_cost.lower.models.gpt")
    cfg = gpt.GPTConfig(vocab=64, hidden=32, heads=2, layers=3, seq=16, batch=2, dtype="float32", scan=True)
    return analyze(gpt.lower(cfg).as_text(debug_info=True), AnalysisOptions(dataflow=True))


@pytest.mark.parametrize("model", ["stdit3_small", "gpt_scan"])
@pytest.mark.parametrize("hw", ["h100", "a100"])
def test_fused_never_above_unfused(request, model, hw):
    d = request.getfixturevalue(model)
    rf = Roofline(d, get_profile(hw), fuse_mode="elementwise")
    tot = rf.totals()
    assert 0 < tot["est_time_fused_s"] <= tot["est_time_s"]
    assert tot["fused_kernels"] <= tot["kernels"]
    for k in rf.fusion.kernels:  # kernel by kernel
        assert k.time_s <= math.fsum(rf.times[i].kernel_s for i in k.members) * (1 + 1e-12)
    assert math.fsum(rf.fusion.row_time) == pytest.approx(rf.fusion.time_s, rel=1e-12)


def test_while_loop_rows_keep_their_producers(gpt_scan):
    # rows inside the scanned layers are replayed copies: their producers still point at rows of the walk
    n = len(gpt_scan.rows)
    looped = [i for i, r in enumerate(gpt_scan.rows) if r.multiplicity > 1 and r.kind == "dot"]
    assert looped
    assert any(isinstance(p, int) for i in looped for p in gpt_scan.producers[i])
    assert all(p is None or isinstance(p, str) or 0 <= p < n for ps in gpt_scan.producers for p in ps)


# -- blocks, summary, steps ------------------------------------------------------------------------------


@pytest.mark.parametrize("fuse_mode", ["none", "elementwise"])
def test_block_times_add_up_to_the_total(stdit3_small, fuse_mode):
    rf = Roofline(stdit3_small, H100, fuse_mode=fuse_mode)
    df = rf.block_frame(assign_blocks(stdit3_small))
    body, total = df[df["block"] != "TOTAL"], df[df["block"] == "TOTAL"].iloc[0]
    tot = rf.totals()
    cols = ["est_time_s", "est_compute_s", "est_memory_s", "comm_time_s", "gemm_time_s", "vector_time_s"]
    if fuse_mode == "elementwise":
        cols += ["est_time_fused_s", "gemm_time_fused_s", "vector_time_fused_s"]
    for c in cols:
        assert body[c].sum() == pytest.approx(total[c], rel=1e-12, abs=1e-15)
    assert total["est_time_s"] == pytest.approx(tot["est_time_s"], rel=1e-12)
    assert total["gemm_time_s"] + total["vector_time_s"] + total["comm_time_s"] == pytest.approx(tot["est_time_s"])
    if fuse_mode == "elementwise":
        assert total["est_time_fused_s"] == pytest.approx(tot["est_time_fused_s"], rel=1e-12)
    assert set(body["kind"]) >= {"spatial", "temporal"}
    assert set(df["bound"]) <= {"compute", "memory", "comm", "free", "overhead"}
    over = body["est_time_overlap_s"]
    assert (over <= body["est_time_s"] + 1e-18).all()


def test_steps_multiply(stdit3_small):
    rf = Roofline(stdit3_small, get_profile("a100"), fuse_mode="elementwise")
    one, run = rf.summary(1), rf.summary(30)
    assert run["run_time_s"] == pytest.approx(30 * one["est_time_s"], rel=1e-15)
    assert run["run_time_fused_s"] == pytest.approx(30 * one["est_time_fused_s"], rel=1e-15)
    assert run["run_flops"] == 30 * one["flops"]
    assert run["utilisation"] == one["utilisation"]
    assert one["utilisation"] == pytest.approx(one["flops"] / (one["est_time_s"] * one["reference_peak_tflops"] * 1e12))
    assert one["compute_bound_s"] + one["memory_bound_s"] == pytest.approx(one["est_time_s"] - one["comm_time_s"])


# -- the command line ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_file(tmp_path_factory, stdit3_small):
    stdit3 = pytest.importorskip("mhlo_cost.lower.models.stdit3")
    from mhlo_cost.lower.models.config import STDiT3Config

    p = tmp_path_factory.mktemp("rf") / "small.mlir"
    p.write_text(stdit3.lower(STDiT3Config().small()).as_text(debug_info=True))
    return p


@pytest.mark.parametrize("by", ["op", "block", "summary", "kind", "scope:1"])
@pytest.mark.parametrize("fmt", ["table", "csv", "json", "markdown"])
def test_report_with_hardware_renders(small_file, capsys, by, fmt):
    assert main(["report", str(small_file), "--hardware", "h100", "--by", by, "--format", fmt, "-q"]) == 0
    out = capsys.readouterr().out
    assert out.strip()
    if by in ("op", "block") and fmt == "csv":
        from io import StringIO

        df = pd.read_csv(StringIO(out))
        if by == "op":
            assert {"operation", "inputs", "weights", "output", "gflops", "latency_us", "utilisation",
                    "bound"} <= set(df.columns)
            assert list(df["index"]) == sorted(df["index"])  # program order
            assert df["weights"].notna().any()  # weight shapes of the dots
        else:
            assert {"est_compute_s", "est_memory_s", "comm_time_s", "est_time_s", "est_time_overlap_s"} <= set(
                df.columns)


def test_report_fused_steps_and_top(small_file, capsys):
    assert main(["report", str(small_file), "--hardware", "a100", "--fuse", "elementwise", "--steps", "30",
                 "--format", "json", "-q"]) == 0
    rows = {r["metric"]: r["value"] for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["steps"] == 30 and rows["run_time_s"] == pytest.approx(30 * rows["est_time_s"])
    assert rows["est_time_fused_s"] <= rows["est_time_s"]
    assert main(["report", str(small_file), "--hardware", "h100", "--by", "op", "--top", "5", "--format", "csv",
                 "-q"]) == 0
    from io import StringIO

    df = pd.read_csv(StringIO(capsys.readouterr().out))
    assert len(df) == 5 and list(df["latency_us"]) == sorted(df["latency_us"], reverse=True)
    assert main(["report", str(small_file), "--hardware", "h100", "--fuse", "elementwise", "--by", "op",
                 "--format", "csv", "-q"]) == 0
    assert "ops" in pd.read_csv(StringIO(capsys.readouterr().out)).columns  # one row per fused kernel


def test_unknown_hardware_is_one_line_listing_names(small_file, capsys):
    assert main(["report", str(small_file), "--hardware", "tpu-v9", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "tpu-v9" in err
    for name in ("a100-sxm-80gb", "h100-sxm", "h200-sxm"):
        assert name in err


@pytest.mark.parametrize("argv", [["--steps", "3"], ["--by", "kind", "--top", "3"],
                                  ["--hardware", "h100", "--steps", "0"], ["--hardware", "h100", "--top", "2"]])
def test_bad_estimate_options_exit_2(small_file, capsys, argv):
    assert main(["report", str(small_file), "-q", *argv]) == 2
    error_line(capsys.readouterr().err)


def test_hardware_file(small_file, tmp_path, capsys):
    from mhlo_cost.machines.hardware import template_text

    f = tmp_path / "mine.toml"
    f.write_text(template_text())
    assert main(["report", str(small_file), "--hardware-file", str(f), "--format", "json", "-q"]) == 0
    rows = {r["metric"]: r["value"] for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["hardware"] == "my-chip"
    assert main(["report", str(small_file), "--hardware-file", str(f), "--hardware", "h100", "--format", "json",
                 "-q"]) == 0
    rows = {r["metric"]: r["value"] for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["hardware"] == "h100-sxm"
    assert main(["report", str(small_file), "--hardware-file", str(tmp_path / "none.toml"), "-q"]) == 2
