"""Issue 23, item 2: a cost is a value with algebra; a row is an identity and a cost; an op rule is a pure function
of a frozen context, found by dialect-qualified op name in one registry that refuses a second claim."""
from __future__ import annotations

import pytest

from mhlo_cost.walk.costvalue import ZERO, Cost, Counted
from mhlo_cost.walk.optable import RuleTable
from mhlo_cost.walk.row import LocationInfo, Row
from helpers import context, tensor


# -- the algebra ------------------------------------------------------------------------------------------------
def test_sum_scale_and_max_are_per_metric_on_exact_ints():
    a = Cost(gemm_flops=6, bytes_read=10, comm_bytes=1)
    b = Cost(vector_flops=3, transcendentals=2, bytes_read=4, bytes_written=8)
    assert a + b == Cost(6, 0, 3, 2, 14, 8, 1)
    assert a * 28 == 28 * a == Cost(gemm_flops=168, bytes_read=280, comm_bytes=28)
    assert Cost.max(a, b) == Cost(6, 0, 3, 2, 10, 8, 1)
    assert Cost.max(a, b) - a == Cost(vector_flops=3, transcendentals=2, bytes_written=8)
    assert sum([a, b, a]) == a * 2 + b and sum([], ZERO) == ZERO == Cost() and Cost.max() == ZERO
    assert (a + b).compute == 9 and b.nbytes == 12
    big = Cost(gemm_flops=2**70 + 1)  # beyond a float's 53-bit mantissa: stays exact
    assert (big * 3).gemm_flops == 3 * 2**70 + 3


@pytest.mark.parametrize("bad", [lambda c: c * 1.5, lambda c: 0.5 * c, lambda c: c + (1, 2), lambda c: c - 1,
                                 lambda c: c * c])
def test_a_float_count_or_a_plain_tuple_is_refused(bad):
    with pytest.raises(TypeError):
        bad(Cost(gemm_flops=2))


# -- a row: identity + cost -------------------------------------------------------------------------------------
def test_a_row_is_scaled_and_folded_by_its_cost():
    loc = LocationInfo.resolved("attn", "layers.0/attn", "model.py:3")
    row = Row(op="stablehlo.dot_general", kind="dot", loc=loc, scope="attn", result=tensor([4, 4]),
              cost=Cost(gemm_flops=128, bytes_read=128, bytes_written=64), note="x")
    assert (row.gemm_flops, row.bytes_read, row.comm_bytes, row.compute) == (128, 128, 0, 128)
    scaled = row.scaled(28, "layers", "while x28")
    assert scaled.cost == Cost(gemm_flops=128 * 28, bytes_read=128 * 28, bytes_written=64 * 28)
    assert (scaled.multiplicity, scaled.scope, scaled.note, scaled.op) == (28, "layers/attn", "while x28; x",
                                                                          row.op)
    scaled.add_scaled(row, 2)
    assert scaled.cost == row.cost * 30 and scaled.multiplicity == 30
    with pytest.raises(AttributeError):
        row.gemm_flops = 1  # a metric is the cost's: a rule returns a new Cost instead


# -- rules: pure functions of a frozen context ------------------------------------------------------------------
def test_dot_general_rule_is_a_pure_function_of_its_context():
    from jaxlib.mlir import ir

    from mhlo_cost.ir.loader import make_context
    from mhlo_cost.walk.matrix import MATRIX

    B, M, K, N = 2, 3, 5, 7
    with make_context():
        dims = ir.Attribute.parse("#stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], "
                                  "lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>")
        lhs, rhs, out = tensor([B, M, K]), tensor([B, K, N]), tensor([B, M, N])
        ctx = context("stablehlo.dot_general", [lhs, rhs], out, {"dot_dimension_numbers": dims})
        rule = MATRIX["stablehlo.dot_general"]
        first, second = rule(ctx), rule(ctx)
    want = Cost(gemm_flops=2 * B * M * N * K, bytes_read=4 * (B * M * K + B * K * N), bytes_written=4 * B * M * N)
    assert first == second == want and want.gemm_flops == 420
    assert (rule.kind, rule.weights) == ("dot", True)
    with pytest.raises(AttributeError):
        ctx.result = out  # the context is frozen


def test_table_rules_read_only_their_context():
    from mhlo_cost.walk.linalg import LINALG
    from mhlo_cost.walk.vector import VECTOR

    x = tensor([16, 8])
    fft = LINALG["stablehlo.fft"](context("stablehlo.fft", [x], x, {"fft_length": [8]}))
    assert fft.vector_flops == 8 * 3 * 128  # 8 x log2(8) x elements (XLA's convention)
    tanh = VECTOR["stablehlo.tanh"](context("stablehlo.tanh", [x], x))
    assert tanh == Cost(vector_flops=128, transcendentals=128, bytes_read=512, bytes_written=512)
    assert VECTOR["stablehlo.tanh"].reads == "same_type" and VECTOR["chlo.erf"].reads == "operands"
    # a reducer body with an op no rule knows: the row says unknown, never a silent zero
    red = VECTOR["stablehlo.reduce"](context("stablehlo.reduce", [x], tensor([16]), bodies=((1, 0, ("foo.bar",)),)))
    assert red == Counted(Cost(vector_flops=16 * 7, bytes_read=512, bytes_written=64), "unknown",
                          "stablehlo.reduce body: foo.bar")


# -- one registry, by dialect-qualified name --------------------------------------------------------------------
def test_rules_are_found_by_dialect_qualified_name():
    from mhlo_cost.walk.matrix import MATRIX, dot_general, ragged_dot
    from mhlo_cost.walk.registry import RULES, rule_table
    from mhlo_cost.walk.vector import VECTOR, top_k, transcendental

    table_of = {e.op: e.table for e in rule_table()}
    assert table_of["stablehlo.dot_general"] == table_of["mhlo.dot_general"] == "matrix"
    assert RULES["stablehlo.dot_general"].fn is MATRIX["mhlo.dot_general"].fn is dot_general
    assert table_of["chlo.top_k"] == "vector" and VECTOR["chlo.top_k"].fn is RULES["chlo.top_k"].fn is top_k
    assert table_of["chlo.ragged_dot"] == "matrix" and RULES["chlo.ragged_dot"].fn is ragged_dot
    assert table_of["chlo.erf"] == "vector" and VECTOR["chlo.erf"].fn is transcendental
    assert "affine.for" not in VECTOR and "affine.for" not in RULES


def test_a_second_claim_on_an_op_is_refused_in_a_table_and_across_tables():
    from mhlo_cost.walk.matrix import MATRIX, dot_general
    from mhlo_cost.walk.optable import compose
    from mhlo_cost.walk.registry import RULES, TABLES

    before = dict(RULES)
    mine = RuleTable("mine")
    mine.rule("stablehlo.dot_general", "stablehlo.my_op", kind="dot")(lambda ctx: ZERO)
    with pytest.raises(TypeError, match="stablehlo.dot_general: a rule in both the matrix and the mine tables"):
        compose(*TABLES, mine)
    with pytest.raises(TypeError, match="a rule in both the mine and the matrix tables"):
        compose(mine, MATRIX)  # whichever comes first: the order decides nothing
    assert RULES["stablehlo.dot_general"].fn is dot_general and "stablehlo.my_op" not in RULES
    assert dict(RULES) == before
    with pytest.raises(TypeError, match="a second rule in the mine table"):
        mine.rule("stablehlo.my_op", kind="dot")(lambda ctx: ZERO)
    assert compose(mine)["stablehlo.my_op"].kind == "dot"  # a table of one's own, alone, is a registry of its own


def test_the_walks_fast_constructors_are_the_keyword_forms():
    """vector_cost and io_cost build the tuple by position: each field lands where its keyword puts it."""
    from mhlo_cost.walk.costvalue import io_cost, vector_cost

    assert vector_cost(3, 5, 7, 11) == Cost(vector_flops=3, transcendentals=5, bytes_read=7, bytes_written=11)
    assert io_cost(7, 11) == Cost(bytes_read=7, bytes_written=11)
    assert type(vector_cost(1, 0, 0, 0)) is Cost and vector_cost(1, 0, 0, 0).vector_flops == 1

