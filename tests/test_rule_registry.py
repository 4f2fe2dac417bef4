"""Issue 23, item 2 and issue 34, item 4: op rules are found in one place, the registry the rule tables compose
into; the walk's own ``visit_`` methods are control flow only (calls, loops, branches, shard_map bodies,
composites). ``custom_call`` and ``dynamic_conv`` are pure rules of a context, checked here on contexts built by
hand (no walk) against counts worked out below."""
from __future__ import annotations

import pytest

from mhlo_cost.walk.costvalue import Cost, Counted
from mhlo_cost.walk.options import AnalysisOptions
from helpers import context, tensor

CONV_DIMS = "#stablehlo.conv<[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]>"


# -- one registry -------------------------------------------------------------------------------------------------
def test_the_registry_is_the_tables_together_and_holds_no_control_flow():
    from mhlo_cost.walk.base import IRVisitor
    from mhlo_cost.walk.registry import RULES, TABLES

    names = [t.name for t in TABLES]
    assert names == ["matrix", "vector", "linalg", "collective", "shardy", "custom_call"]
    assert sum(len(t) for t in TABLES) == len(RULES)  # no op in two tables: each rule is counted once
    for t in TABLES:
        assert all(RULES[op] is rule for op, rule in t.items())
    # control flow is the walk's: its methods exist, and no table holds their ops
    for op, method in (("stablehlo.while", "visit_while"), ("mhlo.case", "visit_case"),
                       ("func.call", "visit_func_call"), ("stablehlo.composite", "visit_composite"),
                       ("scf.for", "visit_scf_for")):
        assert op not in RULES and callable(getattr(IRVisitor, method))


def test_the_walk_finds_a_rule_in_its_tables_before_any_method_of_its_own():
    """rule_of answers from the tables, then the walk's own methods: a visit_ method put on the walk after it was
    made is never called for an op a table knows."""
    from mhlo_cost.analysis import walk
    from mhlo_cost.walk.base import IRVisitor
    from mhlo_cost.walk.custom_call import CUSTOM_CALL

    text = ("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
            "  %0 = stablehlo.custom_call @my_kernel(%a) : (tensor<4xf32>) -> tensor<4xf32>\n"
            "  return %0 : tensor<4xf32>\n}\n")

    def make(module, entry):
        v = IRVisitor(module, entry, rules=[CUSTOM_CALL])
        v.visit_custom_call = lambda op: pytest.fail("a method was looked up before the table")
        return v

    (row,) = walk(text, make)[1].rows
    assert (row.kind, row.target, row.bytes_read, row.bytes_written) == ("unknown", "my_kernel", 16, 16)


def test_custom_call_and_dynamic_conv_are_found_in_their_tables_by_qualified_name():
    from mhlo_cost.walk import custom_call, matrix
    from mhlo_cost.walk.registry import RULES, rule_table

    table_of = {e.op: e.table for e in rule_table()}
    for d in ("stablehlo", "mhlo"):
        assert custom_call.CUSTOM_CALL[f"{d}.custom_call"].fn is RULES[f"{d}.custom_call"].fn is custom_call.custom_call
        assert matrix.MATRIX[f"{d}.dynamic_conv"].fn is RULES[f"{d}.dynamic_conv"].fn is matrix.dynamic_conv
        assert (table_of[f"{d}.custom_call"], table_of[f"{d}.dynamic_conv"]) == ("custom_call", "matrix")
    rule = matrix.MATRIX["stablehlo.dynamic_conv"]
    assert (rule.kind, rule.weights, rule.extra) == ("conv", True, matrix.constant_padding)
    # traversal is the walk's: no table holds it
    for op in ("stablehlo.composite", "stablehlo.manual_computation", "sdy.manual_computation"):
        assert op not in RULES


# -- custom_call: a pure rule of a hand-built context -------------------------------------------------------------
def test_custom_call_of_a_placement_target_moves_data_and_any_other_is_unknown(mlir):
    from jaxlib.mlir import ir

    from mhlo_cost.walk.custom_call import CUSTOM_CALL

    x, w = tensor([4, 4]), tensor([8], "bf16", 2)  # 4 * 4 * 4 = 64 bytes; 8 * 2 = 16 bytes
    rule = CUSTOM_CALL["stablehlo.custom_call"]
    assert rule.kind == "unknown"

    def counted(target, operands=(x,), name="stablehlo.custom_call"):
        attrs = {} if target is None else {"call_target_name": ir.StringAttr.get(target)}
        return rule(context(name, list(operands), x, attrs))

    assert counted("Sharding") == Counted(Cost(bytes_read=64, bytes_written=64), kind="data", target="Sharding")
    assert counted("SPMDFullToShardShape", name="mhlo.custom_call").kind == "data"
    # kind "": the rule's own (unknown), named by its target, its bytes read (64 + 16) and written (64)
    assert counted("my_kernel", (x, w)) == Counted(Cost(bytes_read=80, bytes_written=64), target="my_kernel")
    # no target (or an empty one): named by the op
    assert counted(None).target == counted("").target == "stablehlo.custom_call"
    assert counted(None).kind == ""


# -- dynamic_conv: a pure rule of a hand-built context ------------------------------------------------------------
def conv_context(padding, options=None, name="stablehlo.dynamic_conv"):
    """Input 1 x 4 x 6 x 6 (b, f, spatial), kernel 8 x 2 x 3 x 3 (o, i, spatial: 2 input features per group of
    feature_group_count = 2), stride 1; the output's spatial size is 6 - 3 + 1 + padding on both sides."""
    from jaxlib.mlir import ir

    pad = padding[0] + padding[1] if padding is not None else 0
    lhs, rhs, pads = tensor([1, 4, 6, 6]), tensor([8, 2, 3, 3]), tensor([2, 2], "i64", 8)
    out = tensor([1, 8, 4 + pad, 4 + pad])
    attrs = {"dimension_numbers": ir.Attribute.parse(CONV_DIMS),
             "feature_group_count": ir.Attribute.parse("2 : i64"),
             "padding": None if padding is None else list(padding) * 2}  # what constant_padding gives
    return context(name, [lhs, rhs, pads], out, attrs, options=options)


def test_dynamic_conv_without_padding_is_two_flops_per_output_kernel_tap_and_input_feature(mlir):
    from mhlo_cost.walk.matrix import MATRIX

    got = MATRIX["stablehlo.dynamic_conv"](conv_context([0, 0]))
    # 2 x output elements (1 x 8 x 4 x 4 = 128) x kernel spatial size (3 x 3) x input features per group (4 / 2)
    flops = 2 * 128 * 9 * 2
    assert flops == 4608
    # bytes: input 144 x 4, kernel 144 x 4, padding 4 x 8; output 128 x 4
    assert got == Cost(conv_flops=flops, bytes_read=576 + 576 + 32, bytes_written=512)


def test_dynamic_conv_with_padding_counts_the_taps_on_real_input_or_all_of_them_dense(mlir):
    from mhlo_cost.walk.matrix import MATRIX

    rule = MATRIX["mhlo.dynamic_conv"]
    # padding 1 on each side: output 6 x 6 = 36 positions per (batch, feature), 1 x 8 x 36 = 288 elements.
    # Per spatial dimension, kernel tap 0 reads a real input for outputs 1..5 (5), tap 1 for all 6, tap 2 for 0..4
    # (5): 16 of 18; both dimensions: 16 x 16 pairs, x 2 input features per group x 8 output features x 2.
    real = rule(conv_context([1, 1], name="mhlo.dynamic_conv"))
    assert real.conv_flops == 16 * 16 * 2 * 8 * 2 == 8192
    dense = rule(conv_context([1, 1], AnalysisOptions(conv_padding="dense"), name="mhlo.dynamic_conv"))
    assert dense.conv_flops == 2 * 288 * 9 * 2 == 10368  # every output x every tap, padding or not
    assert real.bytes_written == dense.bytes_written == 288 * 4


def test_dynamic_conv_with_a_padding_not_constant_is_unknown_with_its_bytes(mlir):
    from mhlo_cost.walk.matrix import MATRIX

    got = MATRIX["stablehlo.dynamic_conv"](conv_context(None))
    assert got == Counted(Cost(bytes_read=576 + 576 + 32, bytes_written=512), kind="unknown",
                          target="stablehlo.dynamic_conv (padding not a constant)")


def test_the_extra_of_dynamic_conv_reads_a_constant_padding_operand_and_only_that(mlir):
    from jaxlib.mlir import ir

    from mhlo_cost.walk.matrix import MATRIX

    conv = ('"stablehlo.dynamic_conv"(%x, %k, %{p}) {{dimension_numbers = {dims}, feature_group_count = 1 : i64, '
            'batch_group_count = 1 : i64}} : (tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32>, tensor<2x2xi64>) -> '
            'tensor<1x1x{n}x{m}xf32>')
    text = ("func.func @main(%x: tensor<1x1x4x4xf32>, %k: tensor<1x1x3x3xf32>, %q: tensor<2x2xi64>) {\n"
            "  %c = stablehlo.constant dense<[[1, 2], [0, 1]]> : tensor<2x2xi64>\n"
            f"  %0 = {conv.format(p='c', dims=CONV_DIMS, n=5, m=3)}\n"
            f"  %1 = {conv.format(p='q', dims=CONV_DIMS, n=2, m=2)}\n"
            "  return\n}\n")
    module = ir.Module.parse(text)
    body = module.body.operations[0].regions[0].blocks[0]
    ops = [op.operation for op in body.operations if op.operation.name == "stablehlo.dynamic_conv"]
    extra = MATRIX["stablehlo.dynamic_conv"].extra
    assert [extra(op) for op in ops] == [{"padding": [1, 2, 0, 1]}, {"padding": None}]  # row-major


# -- traversal is the walk's, whatever tables are composed ---------------------------------------------------------
def test_composites_and_shard_map_bodies_are_walked_by_the_walk_with_any_table():
    from mhlo_cost.analysis import walk
    from mhlo_cost.walk.base import IRVisitor
    from mhlo_cost.walk.control import MANUAL_WARNING
    from mhlo_cost.walk.matrix import MATRIX

    text = """module {
sdy.mesh @mesh = <["x"=2]>
func.func private @mm(%x: tensor<8x16xf32>) -> tensor<8x8xf32> {
  %0 = stablehlo.dot_general %x, %x, contracting_dims = [1] x [1] : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
func.func @main(%a: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = stablehlo.composite "my.mm" %a {decomposition = @mm} : (tensor<8x16xf32>) -> tensor<8x8xf32>
  %1 = stablehlo.composite "my.mm" %a {decomposition = @mm} : (tensor<8x16xf32>) -> tensor<8x8xf32>
  %2 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{"x"}, {}]>] out_shardings=[<@mesh, [{"x"}, {}]>] manual_axes={"x"} (%b: tensor<4x16xf32>) {
    %3 = stablehlo.dot_general %b, %b, contracting_dims = [1] x [1] : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x4xf32>
    sdy.return %b : tensor<4x16xf32>
  } : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %4 = sdy.manual_computation(%2) in_shardings=[<@mesh, [{"x"}, {}]>] out_shardings=[<@mesh, [{"x"}, {}]>] manual_axes={"x"} (%c: tensor<4x16xf32>) {
    sdy.return %c : tensor<4x16xf32>
  } : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %4 : tensor<8x16xf32>
}
}"""
    _, v = walk(text, lambda module, entry: IRVisitor(module, entry, rules=[MATRIX], unknown_rows=False))
    # each composite: its decomposition's 8 x 8 outputs x 16 terms x 2; the shard_map body: one device's 4 x 4 x 16 x 2
    assert [(r.gemm_flops, r.note) for r in v.rows] == [(2048, ""), (2048, ""), (512, "per device")]
    assert v.warnings == [MANUAL_WARNING]  # once, for two shard_map bodies
