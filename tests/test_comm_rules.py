"""Issue 23, item 2: the collective and Shardy rules are pure functions in the communication metric's tables, found
by dialect-qualified name like every other op; the module's facts reach them through their context, and what a
row says beyond its cost (comm kind, group size, groups, steps, device groups, a warning) through their Counted."""
from __future__ import annotations

import pytest

from mhlo_cost.walk.costvalue import ZERO, Cost, Counted
from mhlo_cost.walk.optable import ModuleFacts, RuleTable
from helpers import context, tensor


def parsed(**text):
    """Attributes parsed from their MLIR text (inside a context that stays open for the rule)."""
    from jaxlib.mlir import ir

    return {k: ir.Attribute.parse(v) for k, v in text.items()}


# -- one registry -------------------------------------------------------------------------------------------------
def test_collectives_are_found_in_their_tables_by_qualified_name():
    from mhlo_cost.walk import collective, shardy
    from mhlo_cost.walk.registry import RULES, rule_table

    table_of = {e.op: e.table for e in rule_table()}
    for d in ("stablehlo", "mhlo"):
        assert collective.COMM[f"{d}.all_reduce"].fn is collective.all_reduce
        assert collective.COMM[f"{d}.collective_permute"].fn is collective.collective_permute
        assert RULES[f"{d}.reduce_scatter"] is collective.COMM[f"{d}.reduce_scatter"]
        assert table_of[f"{d}.reduce_scatter"] == "collective"
    assert collective.COMM["mhlo.cross_replica_sum"].fn is collective.all_reduce
    assert (collective.COMM.name, shardy.SHARDY.name) == ("collective", "shardy")
    assert shardy.SHARDY["sdy.reshard"].fn is shardy.reshard and "stablehlo.reshard" not in shardy.SHARDY
    assert table_of["sdy.all_to_all"] == "shardy" and RULES["sdy.all_to_all"].fn is shardy.all_to_all
    assert shardy.SHARDY["sdy.all_gather"].extra is shardy.operand_sharding  # the walk reads the operand's sharding
    # async start / update / done are the walk's own control flow: no table holds them
    for op in ("stablehlo.async_start", "mhlo.async_done"):
        assert op not in RULES and op not in table_of


def test_a_second_claim_on_a_collective_is_refused():
    from mhlo_cost.walk.collective import COMM
    from mhlo_cost.walk.optable import compose
    from mhlo_cost.walk.registry import RULES, TABLES
    from mhlo_cost.walk.shardy import SHARDY

    before = dict(RULES)
    with pytest.raises(TypeError, match="a second rule in the collective table"):
        COMM.rule("all_reduce", kind="collective")(lambda ctx: ZERO)
    with pytest.raises(TypeError, match="a second rule"):
        SHARDY.rule("sdy.reshard", kind="collective")(lambda ctx: ZERO)
    mine = RuleTable("mine")
    mine.rule("all_gather", kind="collective")(lambda ctx: ZERO)
    with pytest.raises(TypeError, match="stablehlo.all_gather: a rule in both the collective and the mine tables"):
        compose(*TABLES, mine)
    assert dict(RULES) == before and RULES["stablehlo.all_gather"] is COMM["stablehlo.all_gather"]


# -- pure rules of a context built by hand ------------------------------------------------------------------------
def test_all_reduce_is_the_closed_form_ring_of_a_hand_built_context(mlir):
    from mhlo_cost.walk.collective import COMM

    x = tensor([16, 32])  # S = 16 * 32 * 4 = 2048 bytes, 512 elements
    attrs = parsed(replica_groups="dense<[[0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>")
    ctx = context("stablehlo.all_reduce", [x], x, attrs, module=ModuleFacts(num_replicas=8), bodies=((1, 0),))
    rule = COMM["stablehlo.all_reduce"]
    first, second = rule(ctx), rule(ctx)
    # n = 4: each device sends 2 (n-1)/n S = 2 * 3 * 2048 / 4 bytes in 2 (n-1) steps, and adds (n-1)/n of the
    # 512 elements once (the add body: 1 FLOP)
    assert first == second == Counted(
        Cost(vector_flops=384, bytes_read=2048, bytes_written=2048, comm_bytes=3072),
        comm=("all_reduce", 4, 2, 6), groups=((0, 1, 2, 3), (4, 5, 6, 7)))
    assert rule.kind == "collective" and first.warning == ()


def test_volumes_round_up_to_whole_bytes(mlir):
    from mhlo_cost.walk.collective import COMM

    x = tensor([5], "i16", 2)  # S = 10 bytes over n = 3: 2 * 2 * 10 / 3 = 13.3 -> 14; (n-1)/n S = 6.7 -> 7
    attrs = parsed(replica_groups="dense<[[0, 1, 2]]> : tensor<1x3xi64>")
    ar = COMM["stablehlo.all_reduce"](context("stablehlo.all_reduce", [x], x, attrs,
                                              module=ModuleFacts(num_replicas=3), bodies=((1, 0),)))
    assert ar.cost.comm_bytes == 14 and ar.comm == ("all_reduce", 3, 1, 4)
    assert ar.cost.vector_flops == 4  # ceil(2 * 5 / 3) elements combined, 1 FLOP each
    cb = COMM["stablehlo.collective_broadcast"](context("stablehlo.collective_broadcast", [x], x, attrs,
                                                        module=ModuleFacts(num_replicas=3)))
    assert cb.cost.comm_bytes == 10 and cb.comm == ("collective_broadcast", 3, 1, 2)  # S in n-1 steps


def test_the_module_facts_of_the_context_decide_an_undeclared_group(mlir):
    from mhlo_cost.walk.collective import COMM

    x, y = tensor([4, 8]), tensor([4, 8])  # all_to_all without split_count: the module gives n
    attrs = parsed(channel_handle="#stablehlo.channel_handle<handle = 1, type = 1>",
                   use_global_device_ids="unit")
    rule = COMM["stablehlo.all_to_all"]
    two = rule(context("stablehlo.all_to_all", [x], y, attrs, module=ModuleFacts(num_partitions=2, num_replicas=1)))
    eight = rule(context("stablehlo.all_to_all", [x], y, attrs, module=ModuleFacts(num_partitions=4, num_replicas=2)))
    # global device ids, no groups written: one group of every device, partitions x replicas
    assert two.comm == ("all_to_all", 2, 1, 1) and two.cost.comm_bytes == 128 // 2
    assert eight.comm == ("all_to_all", 8, 1, 7) and eight.cost.comm_bytes == 128 * 7 // 8
    assert eight.groups == (tuple(range(8)),)


def test_a_gather_whose_shapes_disagree_with_the_module_returns_its_warning(mlir):
    from mhlo_cost.walk.collective import COMM, GROUP_SIZE_MISMATCH

    x, y = tensor([4, 8]), tensor([16, 8])  # gathered dimension 4 -> 16: the shapes prove n = 4
    attrs = parsed(all_gather_dim="0 : i64", replica_groups="dense<[[0, 1]]> : tensor<1x2xi64>")
    got = COMM["stablehlo.all_gather"](context("stablehlo.all_gather", [x], y, attrs,
                                               module=ModuleFacts(num_replicas=2)))
    assert got.comm == ("all_gather", 4, 1, 3) and got.cost.comm_bytes == 512 * 3 // 4  # S: the result's bytes
    assert got.warning == (GROUP_SIZE_MISMATCH, "the module's declarations give 2 participants, its shapes prove "
                                                "4; counted with 4")
    assert got.groups == ((0, 1),)  # the ids as the module declares them


def test_a_permute_groups_are_the_connected_pairs_and_a_self_pair_moves_nothing(mlir):
    from mhlo_cost.walk.collective import COMM

    x = tensor([8])
    swaps = parsed(source_target_pairs="dense<[[0, 2], [2, 0], [1, 3], [3, 1]]> : tensor<4x2xi64>")
    got = COMM["stablehlo.collective_permute"](context("stablehlo.collective_permute", [x], x, swaps))
    assert got.comm == ("collective_permute", 2, 2, 1) and got.cost.comm_bytes == 32
    assert got.groups == ((0, 2), (2, 0), (1, 3), (3, 1))
    self_pairs = parsed(source_target_pairs="dense<[[0, 0], [1, 1]]> : tensor<2x2xi64>")
    none = COMM["stablehlo.collective_permute"](context("stablehlo.collective_permute", [x], x, self_pairs))
    assert none.cost == Cost(bytes_read=32, bytes_written=32) and none.groups == ()


def test_a_shardy_rule_reads_the_meshes_of_its_context_and_the_operand_sharding_given_it(mlir):
    from mhlo_cost.walk.shardy import OPERAND, SHARDY

    meshes = {"mesh": {"x": 2, "y": 4}}
    x = tensor([32, 128])  # global: 16384 bytes
    attrs = parsed(out_sharding='#sdy.sharding<@mesh, [{}, {"y"}]>')
    attrs[OPERAND] = parsed(s='#sdy.sharding<@mesh, [{"x"}, {"y"}]>')["s"]
    got = SHARDY["sdy.all_gather"](context("sdy.all_gather", [x], x, attrs, module=ModuleFacts(meshes=meshes)))
    # n = 8 / 4 = 2 (over "x"); per device it reads 16384 / 8 and writes 16384 / 4 = S, sending (n-1)/n S
    assert got == Counted(Cost(bytes_read=2048, bytes_written=4096, comm_bytes=2048), comm=("all_gather", 2, 4, 1))
    # a mesh the module does not declare: unknown, never a zero
    lost = SHARDY["sdy.all_gather"](context("sdy.all_gather", [x], x, attrs, module=ModuleFacts()))
    assert (lost.kind, lost.target, lost.cost) == ("unknown", "sdy.all_gather (shardings not classified)",
                                                   Cost(bytes_read=16384, bytes_written=16384))


# -- the walk applies what the Counted says -----------------------------------------------------------------------
MISMATCH = """
module attributes {mhlo.num_replicas = 2 : i32} {
  func.func @main(%x: tensor<4x8xf32>) -> tensor<16x8xf32> {
    %0 = "stablehlo.all_gather"(%x) {all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}
       : (tensor<4x8xf32>) -> tensor<16x8xf32> loc("gather"("m.py":3:1))
    return %0 : tensor<16x8xf32>
  }
}
"""

ASYNC = """
module attributes {mhlo.num_replicas = 4 : i32} {
  func.func private @ar(%x: tensor<64xf32>) -> tensor<64xf32> attributes {execution_thread = "main"} {
    %0 = "mhlo.all_reduce"(%x) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = mhlo.add %a, %b : tensor<f32>
      mhlo.return %s : tensor<f32>
    }) {replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : (tensor<64xf32>) -> tensor<64xf32>
    return %0 : tensor<64xf32>
  }
  func.func @main(%x: tensor<64xf32>) -> tensor<64xf32> {
    %s = "mhlo.async_start"(%x) {called_computation = @ar, execution_thread = "main"}
       : (tensor<64xf32>) -> !mhlo.async_bundle<tensor<64xf32>, tensor<64xf32>>
    %r = "mhlo.async_done"(%s) {called_computation = @ar, execution_thread = "main"}
       : (!mhlo.async_bundle<tensor<64xf32>, tensor<64xf32>>) -> tensor<64xf32>
    return %r : tensor<64xf32>
  }
}
"""


def test_the_walk_warns_with_the_location_and_records_the_groups():
    from mhlo_cost.analysis import walk
    from mhlo_cost.walk.base import IRVisitor

    _, v = walk(MISMATCH, IRVisitor)
    (row,) = v.rows
    assert (row.kind, row.comm_kind, row.group_size, row.num_groups, row.comm_steps) == ("collective", "all_gather",
                                                                                         4, 1, 3)
    assert row.cost == Cost(bytes_read=128, bytes_written=512, comm_bytes=384) and row.replica_groups == ((0, 1),)
    assert v.warnings == ["collective group size: stablehlo.all_gather at m.py:3 gather: the module's declarations "
                          "give 2 participants, its shapes prove 4; counted with 4"]


def test_an_async_start_replays_its_computation_once_and_done_adds_nothing():
    from mhlo_cost.analysis import walk
    from mhlo_cost.walk.base import IRVisitor

    _, v = walk(ASYNC, IRVisitor)
    assert [(r.op, r.comm_kind, r.multiplicity) for r in v.rows] == [("mhlo.all_reduce", "all_reduce", 1)]
    assert v.rows[0].comm_bytes == 2 * 3 * 256 // 4  # 2 (n-1)/n S, S = 64 x 4 bytes, n = 4
    assert v.rule_of("mhlo.async_start").__func__ is IRVisitor.visit_async_start  # the walk's own traversal
