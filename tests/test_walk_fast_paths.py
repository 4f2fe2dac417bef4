"""The walk's fast paths (rows built by position, the op name bound once per op name, data flow from the keys the
walk read, the summary computed once) say what the slow paths said."""
from __future__ import annotations

from dataclasses import fields

from mhlo_cost.analysis import analyze
from mhlo_cost.walk.options import AnalysisOptions
from mhlo_cost.walk.row import Row

IR = """
func.func @main(%w: tensor<4x8xf32>, %x: tensor<2x4xf32>) -> tensor<2x8xf32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %1 = stablehlo.exponential %0 : tensor<2x8xf32>
  %2 = stablehlo.add %1, %0 : tensor<2x8xf32>
  %c = stablehlo.constant dense<1.0> : tensor<2x8xf32>
  %3 = stablehlo.multiply %2, %c : tensor<2x8xf32>
  return %3 : tensor<2x8xf32>
}
"""


def test_rows_made_by_position_have_the_fields_their_keywords_name():
    a = analyze(IR, AnalysisOptions(dataflow=True))
    assert [r.op for r in a.rows] == ["stablehlo.dot_general", "stablehlo.exponential", "stablehlo.add",
                                      "stablehlo.constant", "stablehlo.multiply"]
    assert [r.kind for r in a.rows][:2] == ["dot", "transcendental"]
    for r in a.rows:
        assert (r.multiplicity, r.note, r.target, r.comm_kind, r.group_size, r.num_groups, r.comm_steps) == \
            (1, "", "", "", 0, 0, 0)
        assert r.func == "main" and r.scope == r.loc.scope
        uses, defs = r.values
        assert len(uses) == len(r.operands) and len(defs) == 1
    dot = a.rows[0]
    assert dot.weights == (0, 1)  # both operands are arguments of @main
    assert dot.gemm_flops == 2 * 2 * 4 * 8  # 2 * M * K * N
    assert dot.bytes_read == (2 * 4 + 4 * 8) * 4 and dot.bytes_written == 2 * 8 * 4
    # a rebuilt row by keyword is the same row
    for r in a.rows:
        assert Row(**{f.name: getattr(r, f.name) for f in fields(Row)}) == r


def test_data_flow_from_the_walks_keys_names_producers_and_arguments():
    a = analyze(IR, AnalysisOptions(dataflow=True))
    # dot reads %x (arg1) and %w (arg0); exp reads the dot (row 0); add reads exp and dot; multiply: add, constant
    p = a.producers
    assert p[1:] == [(0,), (1, 0), (), (2, 3)]
    x, w = p[0]  # function arguments, each its own key
    assert x.startswith("arg") and w.startswith("arg") and x != w


def test_summary_is_computed_once_and_again_when_the_rows_change():
    a = analyze(IR)
    s = a.summary
    assert s["gemm_flops"] == 128 and s["ops"] == 5
    assert s["transcendentals"] == 16
    s["gemm_flops"] = -1  # a caller's change to its copy is not the analysis's
    assert a.summary["gemm_flops"] == 128
    a.rows = a.rows[1:]  # another row list: summed again
    assert a.summary["gemm_flops"] == 0 and a.summary["ops"] == 4
    a.rows.append(a.rows[0])  # the list grown: summed again
    assert a.summary["ops"] == 5
