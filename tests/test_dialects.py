"""Issue 24, dialects: rules keyed by the dialect-qualified op name, region ops of affine / scf / gpu,
Shardy's explicit collectives, collective group sizes proven by shapes, two exit-70 crashes, new rules.

Every expected number is a closed form worked out in the comments (fixtures under
tests/fixtures/reliability3/dialects/)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mhlo_cost import analyze
from mhlo_cost.walk.base import rule_name
from helpers import run_cli

FIX = Path(__file__).parent / "fixtures"
DIA = FIX / "reliability3" / "dialects"


def total(a, metric):
    return sum(getattr(r, metric) for r in a.rows)


# -- E: two exit-70 crashes ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fixture", [FIX / "reliability" / "case_comm.mlir", DIA / "case_comm_callee.mlir"])
@pytest.mark.parametrize("extra", [[], ["--hardware", "h100"], ["--format", "html"], ["--format", "json"]])
def test_case_with_comm_fused(fixture, extra, capsys):
    code, out, err = run_cli(["report", fixture, "--fuse", "elementwise", *extra], capsys)
    assert code == 0, err
    assert "internal error" not in err
    if extra == ["--format", "json"]:
        # The case's two branches: an add of 1024x1024 f32 (1,048,576 FLOPs) and a collective_permute of
        # 4 MiB (S = 4,194,304 bytes); the per-metric maximum keeps both, once per call of the callee.
        calls = 2 if "callee" in fixture.name else 1
        summary = json.loads(out)["summary"]
        assert summary["vector_flops"] == calls * 1024 * 1024
        assert summary["comm_bytes"] == calls * 4 * 1024 * 1024


@pytest.mark.parametrize("extra", [[], ["--fuse", "elementwise"], ["--hardware", "h100"], ["--format", "json"],
                                   ["--format", "html"], ["--by", "memory"]])
def test_entry_returning_nothing(extra, capsys):
    code, out, err = run_cli(["report", DIA / "empty_entry_no_results.mlir", *extra], capsys)
    assert code == 0, err
    assert "empty entry function" in err and "internal error" not in err
    if extra == ["--format", "json"]:
        summary = json.loads(out)["summary"]
        assert summary["vector_flops"] == 0 and summary["peak_bytes"] == 0


# -- A: dispatch by the dialect-qualified name ---------------------------------------------------------------
def test_rule_names():
    assert rule_name("stablehlo.dot_general") == rule_name("mhlo.dot_general") == "visit_dot_general"
    assert rule_name("chlo.top_k") == "visit_top_k"
    assert rule_name("affine.for") == "visit_affine_for"
    assert rule_name("scf.reduce.return") == "visit_scf_reduce_return"
    assert rule_name("func.call") == "visit_func_call"


def test_short_name_clashes_are_unknown_not_stablehlo():
    a = analyze(DIA / "short_name_clash.mlir")
    kinds = {r.op: r.kind for r in a.rows}
    # tensor.scatter, scf.reduce (with an operand: a reduction), gpu.all_reduce: no rule, reported unknown
    assert kinds["tensor.scatter"] == kinds["scf.reduce"] == kinds["gpu.all_reduce"] == "unknown"
    assert not any(r.comm_kind for r in a.rows)  # a workgroup reduction is not an inter-device collective
    assert total(a, "comm_bytes") == 0
    # affine.for 0 to 2 around an add of 8 f32: 2 x 8 FLOPs (not the scf.for rule)
    assert total(a, "vector_flops") == 16


# -- B: loops, launches and branches of other dialects ------------------------------------------------------
def test_loops_and_launches_multiply_their_body():
    a = analyze(DIA / "loops.mlir")
    adds = [r for r in a.rows if r.op == "stablehlo.add"]
    trips = [
        4,  # affine.for 0 to 10 step 3: 0, 3, 6, 9
        100,  # affine.parallel 0 to 100
        5 * 4,  # affine.parallel (0, 1) to (10, 21) step (2, 5)
        10 * 5,  # scf.parallel (0, 0) to (10, 5)
        3 * 8,  # scf.forall in (3, %c8)
        10 * 10 * 10 * 8,  # gpu.launch: 1000 blocks of 8 threads, the body once per thread
        1, 1, 1,  # affine.for to %n, gpu.launch of %n blocks, scf.while: not countable, once
    ]
    assert [r.vector_flops for r in adds] == [64 * t for t in trips]
    assert [("trip_count_unknown" in r.note) for r in adds] == [False] * 6 + [True] * 3
    flagged = [w for w in a.warnings if "trip count not provable" in w]
    assert len(flagged) == 3
    assert any(w.startswith("affine.for") for w in flagged) and any(w.startswith("gpu.launch") for w in flagged)
    assert any(w.startswith("scf.while") for w in flagged)


def test_index_switch_takes_the_per_metric_maximum():
    a = analyze(DIA / "index_switch.mlir")
    # case 0: multiply of 256 f32: 256 FLOPs, reads 2 x 1,024 bytes, writes 1,024
    # case 1: exponential of 64 f32: 64 FLOPs, 64 transcendentals, reads and writes 256 bytes
    # default: nothing. Sum of branches would be 320 FLOPs; the maximum is 256.
    assert total(a, "vector_flops") == 256
    assert total(a, "transcendentals") == 64
    assert total(a, "bytes_read") == 2048
    assert total(a, "bytes_written") == 1024


# -- C: Shardy ------------------------------------------------------------------------------------------------
def test_shardy_collectives_closed_forms():
    # mesh x=4, y=2, z=4 (32 devices); a 16x64 f32 is S_full = 4,096 bytes; %arg0 is sharded [{"x"}, {}]
    a = analyze(DIA / "shardy_collectives.mlir")
    got = {r.op: (r.comm_kind, r.comm_bytes, r.group_size) for r in a.rows if r.op != "func.return"}
    assert got["sdy.all_gather"] == ("all_gather", 3 * 4096 // 4, 4)  # (n-1)/n S, S the replicated result
    assert got["sdy.all_reduce"] == ("all_reduce", 2 * 1 * 4096 // 2, 2)  # 2(n-1)/n S over y
    assert got["sdy.all_to_all"] == ("all_to_all", 3 * 1024 // 4, 4)  # S = one device's 4x64 f32
    assert got["sdy.collective_permute"] == ("collective_permute", 1024, 4)  # S
    assert got["sdy.reshard"] == ("all_gather", 3 * 4096 // 4, 4)  # [{"x"}, {}] -> replicated
    assert got["sdy.all_slice"] == ("", 0, 0)  # a local slice
    assert got["sdy.reduce_scatter"] == ("reduce_scatter", 4096 // 2, 2)  # (n-1)/n S over y
    ar = next(r for r in a.rows if r.op == "sdy.all_reduce")
    assert ar.vector_flops == 1024 // 2  # (n-1)/n of the 1,024 elements combined


def test_shardy_reshard_classification():
    a = analyze(DIA / "shardy_reshard.mlir")
    rows = [r for r in a.rows if r.op == "sdy.reshard"]
    assert [(r.kind, r.comm_kind, r.comm_bytes) for r in rows] == [
        ("data", "", 0),  # unchanged
        ("data", "", 0),  # y added on dim 1: a local slice
        ("collective", "all_gather", 1024 // 2),  # [{"x","y"}] -> [{"x"}]: gather y, S = 16/4 x 64 x 4 B
        ("collective", "all_to_all", 3 * 1024 // 4),  # x moves from dim 0 to dim 1, S = 1,024 B
        ("unknown", "", 0),  # x gathered and y moved at once: not classified, reported
    ]
    assert any("sdy.reshard" in w for w in a.warnings) or rows[-1].target.startswith("sdy.reshard")


def test_shard_map_body_counts_per_device(fixtures):
    a = analyze(fixtures / "collectives_8dev.mlir")
    assert any("per device" in w for w in a.warnings)
    assert not any(r.op == "sdy.manual_computation" for r in a.rows)


# -- D: group size ---------------------------------------------------------------------------------------------
def test_group_size_proven_by_shapes():
    # all_gather 8 -> 32 f32: n = 4, S = 128 bytes, (n-1)/n S = 96 (the declarations alone give n = 2: 64)
    a = analyze(DIA / "all_gather_undeclared.mlir")
    (row,) = [r for r in a.rows if r.comm_kind]
    assert (row.comm_bytes, row.group_size) == (96, 4)
    assert any(w.startswith("collective group size") and "prove 4" in w for w in a.warnings)


def test_no_group_size_warning_where_they_agree(fixtures):
    a = analyze(fixtures / "collectives_8dev.mlir")
    assert not any(w.startswith("collective group size") for w in a.warnings)


# -- F: new rules -------------------------------------------------------------------------------------------------
def test_dynamic_conv_feeds_send_recv():
    a = analyze(DIA / "new_rules3.mlir")
    by = {r.op: r for r in a.rows}
    # 4x4 image, 3x3 kernel, padding 1: valid taps per spatial dim 2 + 3 + 3 + 2 = 10; 2 x 10 x 10
    assert by["stablehlo.dynamic_conv"].conv_flops == 200
    assert by["stablehlo.infeed"].kind == "data" and by["stablehlo.infeed"].bytes_written == 16 * 4
    assert by["stablehlo.outfeed"].kind == "data" and by["stablehlo.outfeed"].bytes_read == 16 * 4
    assert (by["stablehlo.send"].comm_bytes, by["stablehlo.send"].comm_kind) == (64, "collective_permute")
    assert by["stablehlo.recv"].comm_bytes == 0 and by["stablehlo.recv"].bytes_written == 8 * 4
    assert not any(r.kind == "unknown" for r in a.rows)


def test_dynamic_conv_with_unknown_padding_is_unknown():
    text = (DIA / "new_rules3.mlir").read_text().replace(
        "%pad = stablehlo.constant dense<1> : tensor<2x2xi64>",
        "%p0 = stablehlo.constant dense<1> : tensor<2x2xi64>\n  %pad = stablehlo.add %p0, %p0 : tensor<2x2xi64>")
    a = analyze(text)
    (row,) = [r for r in a.rows if r.op == "stablehlo.dynamic_conv"]
    assert row.kind == "unknown"


# -- G: dialect-mixing fuzz --------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(24000, 24024))
def test_dialect_mixing_programs_count_their_closed_form(seed):
    from fuzz_dialects import program

    p = program(seed)
    a = analyze(p.text)
    assert (total(a, "vector_flops"), total(a, "comm_bytes")) == (p.vector_flops, p.comm_bytes), p.text
    if p.uncountable:
        assert any("trip count not provable" in w for w in a.warnings)
    if p.unknown:
        assert any(r.kind == "unknown" for r in a.rows)


@pytest.mark.parametrize("seed", range(24000, 24008))
def test_dialect_mixing_mutants_never_crash(seed, tmp_path, capsys):
    import random

    from fuzz_dialects import program
    from fuzz_mutations import mutate

    rng = random.Random(seed)
    for kind in ("truncate", "flip", "delete_line", "odd_dim", "splice"):
        path = tmp_path / f"{kind}.mlir"
        path.write_bytes(mutate(program(seed).text.encode(), kind, rng))
        code, _, err = run_cli(["report", path, "-q"], capsys)
        assert code in (0, 2) and "internal error" not in err, (kind, err)
