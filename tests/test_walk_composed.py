"""One ``analyze(source, options) -> Analysis`` (issue 23, item 3): the options say what the walk records, and
what they do not ask for is None on the one Analysis type, never a missing attribute."""
from __future__ import annotations

import pickle
from dataclasses import fields

import pytest

from mhlo_cost.analysis import Analysis, analyze
from mhlo_cost.walk.options import AnalysisOptions
from mhlo_cost.analysis.isolated import WalkOptions, analyze_isolated
from helpers import two_calls

M, K, N = 8, 16, 32
#: x @ w with w donated (a parameter updated in place), as JAX writes a donated argument.
MATMUL = f"""
func.func @main(%w: tensor<{K}x{N}xf32> {{jax.buffer_donor = true}}, %x: tensor<{M}x{K}xf32>) -> tensor<{M}x{N}xf32> {{
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<{M}x{K}xf32>, tensor<{K}x{N}xf32>) -> tensor<{M}x{N}xf32>
  return %0 : tensor<{M}x{N}xf32>
}}
"""
GEMM = 2 * M * K * N  # closed form: one multiply and one add per (m, n, k)

#: A 1-D convolution: 4 input positions, a kernel of 3, padding 1 on each side, one feature in and out.
CONV = """
func.func @main(%x: tensor<1x1x4xf32>, %k: tensor<1x1x3xf32>) -> tensor<1x1x4xf32> {
  %0 = stablehlo.convolution(%x, %k) dim_numbers = [b, f, 0]x[o, i, 0]->[b, f, 0], window = {stride = [1],
    pad = [[1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64}
    : (tensor<1x1x4xf32>, tensor<1x1x3xf32>) -> tensor<1x1x4xf32>
  return %0 : tensor<1x1x4xf32>
}
"""


def test_parts_not_asked_for_are_none_and_every_part_is_declared():
    a = analyze(MATMUL)
    assert a.options == AnalysisOptions()
    assert (a.producers, a.async_done, a.arguments, a.param_args, a.phases) == (None, None, None, None, None)
    assert a.liveness is not None and a.summary["gemm_flops"] == GEMM
    declared = {f.name for f in fields(Analysis)}
    assert {"options", "liveness", "producers", "async_done", "arguments"} <= declared


def test_liveness_off_records_no_liveness_and_the_counts_stay():
    a = analyze(MATMUL, AnalysisOptions(liveness=False))
    assert a.liveness is None and a.summary["gemm_flops"] == GEMM
    assert "peak_bytes" not in a.summary


def test_dataflow_names_the_producers_of_every_operand():
    a = analyze(MATMUL, AnalysisOptions(dataflow=True))
    dot = [r.kind for r in a.rows].index("dot")
    assert [str(p)[:3] for p in a.producers[dot]] == ["arg", "arg"]
    assert a.arguments is None and a.phases is None


def test_phases_imply_dataflow_and_arguments_and_read_the_donated_one():
    o = AnalysisOptions(phases=True)
    assert o.dataflow and o.arguments
    a = analyze(MATMUL, o)
    assert [(x.index, x.donated, x.type.shape) for x in a.arguments] == [(0, True, (K, N)), (1, False, (M, K))]
    assert a.param_args == {a.arguments[0].key}
    assert a.phases is not None and len(a.phases.phase) == len(a.rows)


def test_arguments_alone_need_no_data_flow():
    a = analyze(MATMUL, AnalysisOptions(arguments=True))
    assert a.producers is None and [x.donated for x in a.arguments] == [True, False]


def test_conv_padding_is_an_option_not_a_class():
    # 4 outputs x 3 kernel taps = 12 (output, tap) pairs; 2 of them land on padding (the first output's first
    # tap, the last output's last): XLA counts the 10 real ones, the dense convention all 12; x2 (multiply-add).
    assert analyze(CONV).summary["conv_flops"] == 2 * 10
    assert analyze(CONV, AnalysisOptions(conv_padding="dense")).summary["conv_flops"] == 2 * 12
    assert analyze(CONV, conv_padding="dense").summary["conv_flops"] == 2 * 12
    with pytest.raises(ValueError, match="conv_padding must be one of xla, dense"):
        AnalysisOptions(conv_padding="same")


def test_entry_override_and_named_records():
    two = MATMUL.replace("func.func @main", "func.func @other") + MATMUL
    assert analyze(two, AnalysisOptions(entry="main"), entry="other").entry == "other"
    assert AnalysisOptions.recording("training") == AnalysisOptions(phases=True)
    assert AnalysisOptions.recording("counts", conv_padding="dense") == AnalysisOptions(conv_padding="dense")
    with pytest.raises(ValueError, match="record must be one of"):
        AnalysisOptions.recording("everything")


def test_the_options_cross_to_the_reader_child_and_back():
    o = AnalysisOptions(conv_padding="dense")
    assert pickle.loads(pickle.dumps(o)) == o
    there = analyze_isolated(CONV, WalkOptions(conv_padding="dense", record="dataflow"), name="c.mlir")
    assert there.options == AnalysisOptions(conv_padding="dense", dataflow=True)
    assert there.summary["conv_flops"] == 2 * 12 and there.producers is not None


# -- recorders composed, not inherited (issue 23, item 1) -----------------------------------------------------
LOOP = two_calls(M, K)


def test_a_recorder_of_its_own_is_told_of_rows_calls_and_returns():
    from mhlo_cost.analysis import walk
    from mhlo_cost.walk.base import IRVisitor
    from mhlo_cost.walk.recorder import Recorder

    class Tally(Recorder):
        wants_rows = True

        def __init__(self):
            self.rows, self.regions, self.returns, self.built = [], [], 0, []

        def emitted(self, op, row):
            self.rows.append(op.name)

        def region_started(self, kind, op):
            return kind

        def region_finished(self, kind, op, token, start):
            self.regions.append(token)

        def returned(self, op):
            self.returns += 1

        def function_finished(self, name, rows):
            self.built.append((name, len(rows)))

    t = Tally()
    _, v = walk(LOOP, lambda module, entry: IRVisitor(module, entry, recorders=[t]))
    # the callee's two ops are made once and replayed at the second call; two calls, two function bodies
    assert t.rows == ["stablehlo.dot_general", "stablehlo.tanh"] and t.regions == ["call", "call"]
    assert t.returns == 2 and t.built == [("layer", 2), ("main", 4)] and len(v.rows) == 4


def test_data_flow_is_the_same_with_or_without_the_liveness_recorder():
    both = analyze(LOOP, AnalysisOptions(dataflow=True))
    alone = analyze(LOOP, AnalysisOptions(dataflow=True, liveness=False))
    assert alone.liveness is None and both.liveness is not None
    def plain(producers):  # argument keys are hashes of this walk's MLIR objects: compared by kind
        return [tuple("arg" if isinstance(p, str) else p for p in ps) for ps in producers]

    assert plain(alone.producers) == plain(both.producers)
    # the second call's dot reads the first call's tanh (row 1), and the weight argument
    assert alone.producers[2][0] == 1 and str(alone.producers[2][1]).startswith("arg")
    assert alone.summary["gemm_flops"] == 2 * (2 * M * K * K)  # two (M x K) @ (K x K) products


def test_each_table_runs_alone_and_counts_only_its_own_ops():
    from mhlo_cost.analysis import walk
    from mhlo_cost.walk.base import IRVisitor
    from mhlo_cost.walk.matrix import MATRIX
    from mhlo_cost.walk.vector import VECTOR

    def alone(table, unknown_rows=False):
        return walk(LOOP, lambda module, entry: IRVisitor(module, entry, rules=[table],
                                                         unknown_rows=unknown_rows))[1].rows

    matrix = alone(MATRIX)
    assert [r.op for r in matrix] == ["stablehlo.dot_general"] * 2
    assert sum(r.gemm_flops for r in matrix) == 2 * (2 * M * K * K)
    vector = alone(VECTOR)
    assert [r.op for r in vector] == ["stablehlo.tanh"] * 2
    assert sum(r.transcendentals for r in vector) == 2 * M * K  # one tanh per element, twice
    # with unknown rows, what the table does not know is a row of kind unknown, never a silent zero
    assert [(r.op, r.kind) for r in alone(MATRIX, True)] == [("stablehlo.dot_general", "dot"),
                                                             ("stablehlo.tanh", "unknown")] * 2


def test_a_table_of_ones_own_composes_with_the_others_only_where_they_do_not_overlap():
    from mhlo_cost.analysis import walk
    from mhlo_cost.walk.base import IRVisitor
    from mhlo_cost.walk.matrix import MATRIX
    from mhlo_cost.walk.optable import OpRule, RuleTable, qualified
    from mhlo_cost.walk.vector import VECTOR

    mine = RuleTable("mine")
    mine.add(qualified("tanh"), OpRule(lambda ctx: ctx.io, "mine"))
    with pytest.raises(TypeError, match="stablehlo.tanh: a rule in both the mine and the vector tables"):
        walk(LOOP, lambda module, entry: IRVisitor(module, entry, rules=[mine, VECTOR]))
    rows = walk(LOOP, lambda module, entry: IRVisitor(module, entry, rules=[mine, MATRIX]))[1].rows
    assert [r.kind for r in rows] == ["dot", "mine", "dot", "mine"]  # both calls followed by the walk itself


# -- rules found in one place (issue 23, item 2; issue 34, item 4) ------------------------------------------------
def test_the_registry_names_the_one_table_counting_each_op():
    from mhlo_cost.walk.registry import RULES, rule_table

    entries = rule_table()
    table_of = {e.op: e.table for e in entries}
    assert len(table_of) == len(entries) == len(RULES)  # each op once: no op is claimed by two tables
    assert table_of["stablehlo.dot_general"] == table_of["mhlo.dot_general"] == "matrix"
    assert table_of["stablehlo.tanh"] == "vector"  # installed from the op tables
    assert table_of["stablehlo.all_reduce"] == "collective"
    assert table_of["sdy.all_gather"] == "shardy"
    assert "affine.for" not in table_of  # control flow: the walk's, no table's
