"""Exposed communication: the schedule on closed forms, from real IR (sync and async collectives), and the
roofline's and the CLI's columns (tier, algorithm, comm_exposed_s, the overlapped time)."""
from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stdout

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

from mhlo_cost.cli import main
from mhlo_cost.network import exposed_comm, resolve_profile
from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.roofline import Roofline

# -- the schedule on literal numbers ------------------------------------------------------------------------


def test_independent_compute_hides_min_of_comm_and_compute():
    # row 0: a collective of time 3 on an argument; row 1: independent compute of time T; row 2 needs row 0
    for t in (1.0, 2.0, 3.0, 5.0):
        e = exposed_comm([("arg0",), ("arg1",), (0,)], [0.0, t, 1.0], [3.0, 0.0, 0.0], [True, False, False])
        assert e.exposed[0] == pytest.approx(3.0 - min(3.0, t))
        assert e.makespan == pytest.approx(t + 1.0 + e.exposed[0])


def test_compute_that_feeds_or_needs_the_collective_hides_nothing():
    # 0: compute (2) -> 1: collective (3) -> 2: compute (4)
    e = exposed_comm([("arg0",), (0,), (1,)], [2.0, 0.0, 4.0], [0.0, 3.0, 0.0], [False, True, False])
    assert e.exposed == [0.0, 3.0, 0.0] and e.makespan == pytest.approx(9.0)


def test_two_collectives_in_a_chain_hide_behind_one_compute_only_once():
    # c1 (6) -> c2 (6) -> use; independent compute 10: the chain takes 12, 2 of it exposed, charged to c2
    e = exposed_comm([("a",), (0,), ("b",), (1,)], [0.0, 0.0, 10.0, 1.0], [6.0, 6.0, 0.0, 0.0],
                     [True, True, False, False])
    assert e.exposed == pytest.approx([0.0, 2.0, 0.0, 0.0])


def test_concurrent_collectives_do_not_contend():
    # two independent collectives of 6 beside compute of 10: both hidden
    e = exposed_comm([("a",), ("b",), ("c",), (0, 1)], [0.0, 0.0, 10.0, 1.0], [6.0, 6.0, 0.0, 0.0],
                     [True, True, False, False])
    assert sum(e.exposed) == 0.0


def test_async_collective_overlaps_only_what_is_written_before_its_done():
    # 0: async collective (4), 1: compute (2) before its done, 2: compute (5) after it: waits
    producers = [("a",), ("b",), ("c",)]
    e = exposed_comm(producers, [0.0, 2.0, 5.0], [4.0, 0.0, 0.0], [True, False, False], {0: 1})
    assert e.exposed[0] == pytest.approx(2.0) and e.makespan == pytest.approx(9.0)
    sync = exposed_comm(producers, [0.0, 2.0, 5.0], [4.0, 0.0, 0.0], [True, False, False])
    assert sync.exposed[0] == 0.0  # a synchronous one may overlap both


def test_unknown_producers_wait_for_everything_before():
    # row 2's operand is unknown (a loop-carried value): it waits for the collective though it does not use it
    e = exposed_comm([("a",), ("b",), (None,)], [0.0, 1.0, 1.0], [5.0, 0.0, 0.0], [True, False, False])
    assert e.exposed[0] == pytest.approx(4.0)


# -- from IR -----------------------------------------------------------------------------------------------------


def _psum_beside_matmul(n: int):
    mesh = jax.sharding.AbstractMesh((8,), ("d",))

    def body(x, w):
        s = jax.lax.psum(x, "d")  # a collective on x
        return s * 2.0, w @ w  # the matmul neither feeds it nor needs it

    f = jax.shard_map(body, mesh=mesh, in_specs=(P(), P()), out_specs=(P(), P()), check_vma=False)
    return jax.jit(f).lower(jax.ShapeDtypeStruct((1 << 20,), jnp.float32),
                            jax.ShapeDtypeStruct((n, n), jnp.bfloat16)).as_text(debug_info=True)


@pytest.mark.parametrize("n", [256, 8192])
def test_a_matmul_beside_a_psum_hides_it_up_to_its_own_time(n):
    a = analyze(_psum_beside_matmul(n), AnalysisOptions(dataflow=True))
    rf = Roofline(a, resolve_profile("dgx-h100"))
    (c,) = [r.index for r in a.rows if r.kind == "collective"]
    (d,) = [r.index for r in a.rows if r.kind == "dot"]
    comm, dot = rf.times[c].comm_s, rf.times[d].kernel_s
    others = math.fsum(t.kernel_s for i, t in enumerate(rf.times) if i not in (c, d) and a.rows[i].kind != "collective"
                       and c not in a.producers[i])  # other independent ops (none big)
    e = rf.exposure()
    assert e.exposed[c] == pytest.approx(max(0.0, comm - dot - others), abs=1e-12)
    assert rf.comm_detail(c).tier == "nvlink" and rf.comm_detail(c).algorithm == "ring"
    tot = rf.totals()
    assert tot["est_time_overlap_s"] == pytest.approx(tot["est_time_s"] - comm + e.exposed[c])


ASYNC = """
module @m attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  func.func private @ar(%x: tensor<16777216xf32>) -> tensor<16777216xf32> attributes {execution_thread = "main"} {
    %0 = "mhlo.all_reduce"(%x) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = mhlo.add %a, %b : tensor<f32>
      mhlo.return %s : tensor<f32>
    }) {replica_groups = dense<[[0,1,2,3,4,5,6,7]]> : tensor<1x8xi64>,
        channel_handle = #mhlo.channel_handle<handle = 1, type = 1>, use_global_device_ids}
       : (tensor<16777216xf32>) -> tensor<16777216xf32>
    return %0 : tensor<16777216xf32>
  }
  func.func @main(%x: tensor<16777216xf32>, %w: tensor<1024x1024xbf16>) -> (tensor<16777216xf32>, tensor<1024x1024xbf16>, tensor<1024x1024xbf16>) {
    %s = "mhlo.async_start"(%x) {called_computation = @ar, execution_thread = "main"}
       : (tensor<16777216xf32>) -> !mhlo.async_bundle<tensor<16777216xf32>, tensor<16777216xf32>>
    %d = "mhlo.dot"(%w, %w) : (tensor<1024x1024xbf16>, tensor<1024x1024xbf16>) -> tensor<1024x1024xbf16>
    %r = "mhlo.async_done"(%s) {called_computation = @ar, execution_thread = "main"}
       : (!mhlo.async_bundle<tensor<16777216xf32>, tensor<16777216xf32>>) -> tensor<16777216xf32>
    %y = mhlo.add %r, %r : tensor<16777216xf32>
    %e = "mhlo.dot"(%w, %w) : (tensor<1024x1024xbf16>, tensor<1024x1024xbf16>) -> tensor<1024x1024xbf16>
    return %y, %d, %e : tensor<16777216xf32>, tensor<1024x1024xbf16>, tensor<1024x1024xbf16>
  }
}
"""


def test_async_pair_hides_behind_the_compute_between_start_and_done():
    a = analyze(ASYNC, AnalysisOptions(dataflow=True))
    assert a.async_done == {0: 1}  # the all_reduce's done comes after row 1, the first dot
    rf = Roofline(a, resolve_profile("dgx-a100"))
    comm, dot = rf.times[0].comm_s, rf.times[1].kernel_s
    assert comm > dot  # so that the second dot, after the done, could have hidden the rest if it were sync
    assert rf.exposure().exposed[0] == pytest.approx(comm - dot)
    assert a.producers[2] == (0, 0)  # the add reads the done's result: the collective's row


# -- the CLI -------------------------------------------------------------------------------------------------------


def run(*argv) -> tuple[int, str]:
    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(list(argv))
    return code, buf.getvalue()


def test_report_by_comm_shows_tier_and_algorithm(fixtures):
    code, out = run("report", str(fixtures / "collectives_8dev.mlir"), "--hardware", "dgx-h100", "--by", "comm",
                    "--format", "json", "-q")
    assert code == 0
    rows = json.loads(out)["rows"]
    assert rows[-1]["op"] == "TOTAL" and rows[-1]["comm_bytes"] == sum(r["comm_bytes"] for r in rows[:-1])
    got = {(r["op"], r["tier"], r["algorithm"]) for r in rows[:-1]}
    assert got == {("all_reduce", "nvlink", "ring"), ("all_gather", "nvlink", "ring"),
                   ("reduce_scatter", "nvlink", "ring"), ("all_to_all", "nvlink", "direct"),
                   ("collective_permute", "nvlink", "direct")}
    assert all(0 <= r["comm_exposed_s"] <= r["comm_time_s"] for r in rows)
    code, mesh = run("report", str(fixtures / "collectives_8dev.mlir"), "--hardware", "mesh-4x4", "--by", "comm",
                     "--format", "csv", "-q")
    assert code == 0 and "mesh:x" in mesh and "mesh:y" in mesh  # groups 0-3 / 4-7 are rows; 0<->4 a column


def test_blocks_carry_exposed_comm_and_the_overlapped_time(fixtures, tmp_path):
    out = tmp_path / "b.csv"
    code, _ = run("blocks", str(fixtures / "collectives_8dev.mlir"), "--hardware", "dgx-h100", "-o", str(out), "-q")
    assert code == 0
    import pandas as pd

    df = pd.read_csv(out)
    assert {"comm_exposed_s", "est_time_overlap_s"} <= set(df.columns)
    assert (df["est_time_overlap_s"] - (df["est_time_s"] - df["comm_time_s"] + df["comm_exposed_s"])).abs().max() < 1e-12


def test_a_program_too_big_for_the_mesh_is_one_line(tmp_path, capsys):
    mlir = tmp_path / "big.mlir"
    ids = ",".join(map(str, range(32)))  # 32 devices: two more rows than the 4 x 4 mesh has
    mlir.write_text(ASYNC.replace("num_partitions = 8", "num_partitions = 32")
                    .replace("[[0,1,2,3,4,5,6,7]]> : tensor<1x8xi64>", f"[[{ids}]]> : tensor<1x32xi64>"))
    code = main(["report", str(mlir), "--hardware", "mesh-4x4", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "outside the system" in err and "Traceback" not in err
