"""Call graphs cost O(functions x ops) (issue 24, item 5; the call-DAG part of the fuzz item 12).

A callee's rows are summarised once and scaled by how many times it is reached: a call DAG that fans out to
2**40 call paths is analysed (counts, memory, estimate) with exact integer counts, each checked against a
closed form (the leaf's counts x the number of call paths). Ordinary programs keep one row set per call site.
No timing here: benchmarks/callgraph_fanout.py measures it.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from callgraph_dags import LEAF, VALUE_BYTES, blocks, fanout, inline, random_dag
from mhlo_cost import analyze
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.analysis import AnalysisOptions
from mhlo_cost.roofline import Roofline
from mhlo_cost.walk.callgraph import AMPLIFICATION_CAP, FOLDED

#: Per leaf execution: dot reads 2 x 64 and writes 64, exponential 64 and 64, add 2 x 64 and 64.
LEAF_BYTES = {"bytes_read": 5 * VALUE_BYTES, "bytes_written": 3 * VALUE_BYTES}


def expected(paths: int) -> dict:
    return {k: v * paths for k, v in {**LEAF, **LEAF_BYTES}.items()}


def counts(a) -> dict:
    s = a.summary
    return {k: s[k] for k in (*LEAF, *LEAF_BYTES)}


@pytest.mark.parametrize("depth, fan, scopes, folds", [
    (20, 2, "same", False), (6, 10, "same", False), (40, 2, "same", False), (40, 2, "distinct", True),
    (6, 10, "distinct", True), (3, 2, "distinct", False),
])
def test_fan_out_counts_are_exact(depth, fan, scopes, folds):
    """10**6 and 2**40 call paths; folds: whether counts move between scopes (and a warning says so)."""
    a = analyze(fanout(depth, fan, scopes))
    paths = fan ** depth
    assert counts(a) == expected(paths)
    assert all(type(v) is int for v in counts(a).values())
    assert sum(r.multiplicity for r in a.rows) == 3 * paths
    assert len(a.rows) <= AMPLIFICATION_CAP * 3 * fan  # O(functions x ops), not O(paths)
    by_scope = a.group("scope")
    assert int(by_scope["gemm_flops"].sum()) == LEAF["gemm_flops"] * paths
    folded = [w for w in a.warnings if w.startswith(FOLDED)]
    assert bool(folded) == folds


def test_small_distinct_dag_keeps_every_scope():
    """Below the cap every call site keeps its own rows: 8 leaf paths, 8 distinct scope paths."""
    a = analyze(fanout(3, 2, "distinct"))
    assert len(a.rows) == 8 * 3 and not a.warnings
    scopes = {r.scope for r in a.rows}
    assert len(scopes) == 8 and "s0_1/s1_0/s2_1" in scopes


def test_calls_from_distinct_scopes_keep_their_rows():
    """A block function called 28 times from 28 scopes: 28 row sets, one per block, as before."""
    a = analyze(blocks(28))
    assert len(a.rows) == 28 * 3 and not a.warnings
    g = a.group("scope")
    assert list(g["scope"]) == [f"blocks.{j}" for j in range(28)]
    assert set(g["gemm_flops"]) == {LEAF["gemm_flops"]} and set(g["ops"]) == {3}


def test_repeated_leaf_calls_from_one_scope_are_copied():
    """A callee whose table repeats nothing is copied at every call (its rows are linear in the IR)."""
    a = analyze(fanout(1, 5))
    assert len(a.rows) == 5 * 3 and {r.multiplicity for r in a.rows} == {1}
    assert counts(a) == expected(5)


@pytest.mark.parametrize("scopes", ["same", "distinct"])
def test_memory_of_a_folded_dag_is_that_of_the_program_without_calls(scopes):
    """Live bytes peak at the argument, the leaf's input, the dot's and the exponential's results: 4 values;
    the same written out without calls, and the same with 2**40 call paths."""
    flat = analyze(inline(8)).summary["peak_bytes"]
    assert flat == 4 * VALUE_BYTES
    assert analyze(fanout(3, 2, scopes)).summary["peak_bytes"] == flat
    big = analyze(fanout(40, 2, scopes))
    assert big.summary["peak_bytes"] == flat
    assert big.summary["output_bytes"] == VALUE_BYTES
    assert big.memory.peak_row is not None


@pytest.mark.parametrize("fuse_mode", ["none", "elementwise"])
def test_estimate_scales_with_call_paths(fuse_mode):
    """The estimate of 8 call paths is that of the program without calls; of 2**40 paths, 2**37 times it."""
    h100 = get_profile("h100")
    small = Roofline(analyze(fanout(3), AnalysisOptions(dataflow=True)), h100, fuse_mode).totals()
    flat = Roofline(analyze(inline(8), AnalysisOptions(dataflow=True)), h100, fuse_mode).totals()
    big = Roofline(analyze(fanout(40), AnalysisOptions(dataflow=True)), h100, fuse_mode).totals()
    assert small["kernels"] == flat["kernels"] == 8 * 3  # dot, exponential, add
    assert big["kernels"] == 2**37 * small["kernels"]
    assert big["est_time_s"] == pytest.approx(2**37 * flat["est_time_s"], rel=1e-9)
    if fuse_mode == "elementwise":
        assert small["fused_kernels"] == flat["fused_kernels"]
        assert big["fused_kernels"] == 2**37 * flat["fused_kernels"]
        assert big["est_time_fused_s"] == pytest.approx(2**37 * flat["est_time_fused_s"], rel=1e-9)


def test_cli_report_on_2_pow_40_paths(tmp_path):
    path = tmp_path / "fanout40.mlir"
    path.write_text(fanout(40, 2, "distinct"))
    out = subprocess.run([sys.executable, "-m", "mhlo_cost", "report", str(path), "--hardware", "h100",
                          "--fuse", "elementwise", "--format", "json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    text = json.dumps(summary)
    assert str(LEAF["gemm_flops"] * 2**40) in text and FOLDED in out.stderr + text


@pytest.mark.parametrize("seed", range(12))
def test_random_call_dags_count_every_path(seed):
    """Fuzz: random call DAGs (shared, distinct and no scopes, repeated calls); the leaf body's counts times
    the closed-form number of call paths."""
    text, runs = random_dag(seed)
    a = analyze(text)
    assert counts(a) == expected(runs)
    assert a.summary["peak_bytes"] == 4 * VALUE_BYTES  # argument, input, dot and exponential results
