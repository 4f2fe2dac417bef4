"""Counts that used to be silently wrong (issue 12): each against a closed form worked out here.

The programs are in tests/fixtures/reliability/ (hand-written, small).
"""
from __future__ import annotations

from pathlib import Path

from mhlo_cost import analyze
from mhlo_cost.cli import main

FIX = Path(__file__).parent / "fixtures" / "reliability"


def test_call_inside_a_reduce_window_body_is_counted():
    # Cumulative logsumexp over 10 elements of 8 rows: 80 outputs, window 10 -> 9 combines each; the
    # combiner calls @logaddexp: maximum, subtract, abs, negate, exponential, log_plus_one, add = 7 ops,
    # 2 of them transcendental.
    s = analyze(FIX / "cumulative_logsumexp.mlir").summary
    assert s["vector_flops"] == 80 * 9 * 7 == 5040
    assert s["transcendentals"] == 80 * 9 * 2
    assert s["unknown_ops"] == 0


def test_custom_call_inside_a_body_marks_the_row_unknown(tmp_path):
    text = (FIX / "cumulative_logsumexp.mlir").read_text().replace(
        "%r = func.call @logaddexp(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>",
        '%r = stablehlo.custom_call @my_combiner(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>')
    p = tmp_path / "cc.mlir"
    p.write_text(text)
    a = analyze(p)
    assert a.summary["unknown_ops"] == 1
    assert any("custom_call" in u for u in a.unknown)


def test_scf_for_with_constant_bounds_multiplies_its_body():
    # 1000 trips of a 4x8 @ 8x8 dot: 2 * 4 * 8 * 8 each.
    a = analyze(FIX / "scf_for.mlir")
    assert a.summary["gemm_flops"] == 1000 * 2 * 4 * 8 * 8
    assert not a.warnings


def test_scf_for_with_unknown_bounds_warns(tmp_path):
    text = (FIX / "scf_for.mlir").read_text().replace("func.func @main(%x: tensor<4x8xf32>,",
                                                      "func.func @main(%ub: index, %x: tensor<4x8xf32>,")
    text = text.replace("  %ub = arith.constant 1000 : index\n", "")
    p = tmp_path / "for.mlir"
    p.write_text(text)
    a = analyze(p)
    assert a.summary["gemm_flops"] == 2 * 4 * 8 * 8
    assert any("trip count not provable" in w for w in a.warnings)


def test_chlo_scan_counts_its_body_once_per_step():
    # 4 steps (dimension 0 of a 4x3 input), body: add and multiply on 3 elements.
    assert analyze(FIX / "chlo_scan.mlir").summary["vector_flops"] == 4 * 2 * 3


def test_case_takes_the_maximum_of_every_metric_over_its_branches():
    # Branch 0: an add of 1024x1024 f32 (2^20 FLOPs, reads 8 MiB, writes 4 MiB); branch 1: a
    # collective_permute of the same buffer (4 MiB on the wire, reads 4 MiB, writes 4 MiB).
    s = analyze(FIX / "case_comm.mlir").summary
    mib = 1 << 20
    assert s["vector_flops"] == 1 << 20
    assert s["comm_bytes"] == 4 * mib
    assert s["bytes_read"] == 8 * mib
    assert s["bytes_written"] == 4 * mib


def test_i8_counter_that_would_wrap_is_not_counted_as_a_trip_count():
    # i8 from 0 by 1 while (i32) i < 200: the counter wraps at 127 and the loop never ends.
    a = analyze(FIX / "while_i8_wraps.mlir")
    assert a.summary["transcendentals"] == 4  # counted once, marked
    assert any("trip count not provable" in w for w in a.warnings)
    # The same loop to 100 stays in range: 100 trips of exp on 4 elements.
    assert analyze(FIX / "while_i8.mlir").summary["transcendentals"] == 100 * 4


def test_empty_entry_warns_and_is_an_error_under_strict(capsys):
    a = analyze(FIX / "empty_entry.mlir")
    assert any(w.startswith("empty entry function") for w in a.warnings)
    assert main(["report", str(FIX / "empty_entry.mlir"), "-q"]) == 0
    assert "warning: empty entry function" in capsys.readouterr().err
    assert main(["report", str(FIX / "empty_entry.mlir"), "--strict"]) == 2
    err = capsys.readouterr().err
    assert err.count("mhlo-cost: error:") == 1 and "--strict" in err


def test_cross_replica_and_partition_groups_span_every_partition():
    # StableHLO spec, all_gather with a channel and no global device ids on 2 replicas x 2 partitions: each
    # group of 2 replicas takes part on both partitions, 4 devices; S = 32 f32 = 128 bytes; (n-1)/n S.
    a = analyze(FIX / "all_gather_replica_and_partition.mlir")
    row = next(r for r in a.rows if r.kind == "collective")
    assert row.group_size == 4
    assert a.summary["comm_bytes"] == 3 * 128 // 4 == 96
