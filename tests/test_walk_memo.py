"""The walk asks a rule once per signature of op (mhlo_cost.walk.memo): ops of the same name and types whose
attributes differ where the rule reads them get their own answers; each row stays its op's own. Expectations are
closed forms worked out here (nccl-tests' convention for the permute: S bytes per device)."""
from __future__ import annotations

from mhlo_cost.analysis import analyze
from mhlo_cost.walk.costvalue import Cost
from mhlo_cost.walk.memo import RuleMemo
from mhlo_cost.walk.options import AnalysisOptions

SWAPS = "dense<[[0, 2], [2, 0], [1, 3], [3, 1]]> : tensor<4x2xi64>"  # two groups of two devices
SELF = "dense<[[0, 0], [1, 1]]> : tensor<2x2xi64>"  # self-pairs: nothing moves

IR = f"""
func.func @main(%x: tensor<8xf32>, %w: tensor<4x4xf32>) -> (tensor<8xf32>, tensor<4x4xf32>) {{
  %0 = "stablehlo.collective_permute"(%x) {{source_target_pairs = {SWAPS}}} : (tensor<8xf32>) -> tensor<8xf32>
  %1 = "stablehlo.collective_permute"(%0) {{source_target_pairs = {SELF}}} : (tensor<8xf32>) -> tensor<8xf32>
  %2 = "stablehlo.collective_permute"(%1) {{source_target_pairs = {SWAPS}}} : (tensor<8xf32>) -> tensor<8xf32>
  %3 = stablehlo.custom_call @Sharding(%2) : (tensor<8xf32>) -> tensor<8xf32>
  %4 = stablehlo.custom_call @my_kernel(%3) : (tensor<8xf32>) -> tensor<8xf32>
  %5 = stablehlo.custom_call @Sharding(%4) : (tensor<8xf32>) -> tensor<8xf32>
  %6 = stablehlo.dot_general %w, %w, contracting_dims = [1] x [0] : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %7 = stablehlo.dot_general %6, %w, contracting_dims = [1] x [0] : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %8 = stablehlo.dot_general %7, %6, contracting_dims = [0] x [0] : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %5, %8 : tensor<8xf32>, tensor<4x4xf32>
}}
"""


def test_ops_of_one_signature_whose_read_attributes_differ_get_their_own_answers():
    rows = analyze(IR).rows
    permutes, calls, dots = rows[:3], rows[3:6], rows[6:]
    s = 8 * 4  # bytes of tensor<8xf32>
    # swaps between two pairs of devices: S per device, one step, two groups of two
    assert [(r.comm_kind, r.group_size, r.num_groups, r.comm_steps, r.comm_bytes) for r in permutes] == [
        ("collective_permute", 2, 2, 1, s), ("collective_permute", 1, 0, 0, 0), ("collective_permute", 2, 2, 1, s)]
    assert [r.replica_groups for r in permutes] == [((0, 2), (2, 0), (1, 3), (3, 1)), (), ((0, 2), (2, 0), (1, 3),
                                                                                          (3, 1))]
    # a sharding annotation moves data; a kernel the IR does not describe is unknown, named by its target
    assert [(r.kind, r.target) for r in calls] == [("data", "Sharding"), ("unknown", "my_kernel"),
                                                   ("data", "Sharding")]
    assert all(r.cost == Cost(bytes_read=s, bytes_written=s) for r in calls)
    # three 4x4 @ 4x4 products: 2 * 4 * 4 * 4 FLOPs each, the weights (arguments) as each row's own operands say
    assert [r.gemm_flops for r in dots] == [128, 128, 128]
    assert [r.weights for r in dots] == [(0, 1), (1,), ()]


def test_rows_of_reused_answers_keep_their_own_values_and_locations():
    a = analyze(IR, AnalysisOptions(dataflow=True))
    keys = [r.values[1] for r in a.rows]
    assert len(set(keys)) == len(keys)  # every row names its own result
    assert a.producers[1:6] == [(0,), (1,), (2,), (3,), (4,)]  # each op reads the one before it
    assert a.producers[7][0] == 6 and a.producers[8] == (7, 6)


class _Op:
    def __init__(self, attrs):
        self.attributes = attrs


def test_an_answer_is_reused_only_where_each_read_finds_the_same_and_never_after_an_opaque_read():
    memo = RuleMemo()
    key = memo.key(len, "x.op", (), ())
    reads = memo.reads(_Op({"a": 1, "b": 2}))
    assert "a" in reads and "c" not in reads and reads["b"] == 2 and reads.get("d", 9) == 9
    memo.keep(key, reads, "answer")
    assert memo.get(key, _Op({"a": 1, "b": 2, "z": 0})) == "answer"  # an attribute not read: the same
    assert memo.get(key, _Op({"a": 1, "b": 3})) is None  # b differs
    assert memo.get(key, _Op({"a": 1, "b": 2, "c": 0})) is None  # c was absent
    assert memo.get(key, _Op({"b": 2})) is None  # a was present
    other = memo.key(len, "x.op", (), ())
    seen = memo.reads(_Op({"a": 1}))
    assert list(seen) == ["a"] and seen.opaque  # iterated: the rule may read anything
    memo2 = RuleMemo()
    memo2.keep(other, seen, "answer")
    assert memo2.get(other, _Op({"a": 1})) is None


SORTED = """
func.func @main(%k: tensor<16xf32>, %v: tensor<16xi8>) -> (tensor<16xf32>, tensor<16xi8>) {
  %0:2 = "stablehlo.sort"(%k, %v) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<i8>, %d: tensor<i8>):
    %p = stablehlo.compare GT, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  }) {dimension = 0 : i64} : (tensor<16xf32>, tensor<16xi8>) -> (tensor<16xf32>, tensor<16xi8>)
  %1 = stablehlo.negate %0#0 : tensor<16xf32>
  %2 = stablehlo.convert %0#1 : (tensor<16xi8>) -> tensor<16xf32>
  %3 = stablehlo.add %1, %2 : tensor<16xf32>
  return %3, %0#1 : tensor<16xf32>, tensor<16xi8>
}
"""


def test_operands_made_by_earlier_ops_have_their_own_types_each_result_of_several_its_own():
    rows = analyze(SORTED).rows
    assert [r.op.split(".")[1] for r in rows] == ["sort", "negate", "convert", "add"]
    sort, neg, conv, add = rows
    assert [t.pretty for t in sort.operands] == ["f32[16]", "i8[16]"]  # function arguments, read from the IR
    assert sort.bytes_read == 16 * 4 + 16 * 1
    assert [t.pretty for t in neg.operands] == ["f32[16]"] and neg.bytes_read == 64  # the sort's first result
    assert [t.pretty for t in conv.operands] == ["i8[16]"] and conv.bytes_read == 16  # its second: a byte each
    assert conv.bytes_written == 64 and add.bytes_read == 2 * 64
