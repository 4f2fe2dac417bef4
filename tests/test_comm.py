"""Collective volumes against nccl-tests' bus-bandwidth factors, worked out here by hand."""
import pytest

from mhlo_cost import analyze
from mhlo_cost.walk.ring import ring_volume

# nccl-tests doc/PERFORMANCE.md: busbw = algbw x factor; factor 2(n-1)/n for all_reduce, (n-1)/n for
# all_gather, reduce_scatter and all_to_all; sendrecv / permute moves the buffer once.
NCCL_FACTOR = {
    "all_reduce": lambda n: (2 * (n - 1), n),
    "all_gather": lambda n: (n - 1, n),
    "reduce_scatter": lambda n: (n - 1, n),
    "all_to_all": lambda n: (n - 1, n),
}


@pytest.mark.parametrize("kind", sorted(NCCL_FACTOR))
@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_ring_volume_matches_nccl_factors(kind, n):
    full = 3 * 2**20 * n  # divisible by n: exact
    num, den = NCCL_FACTOR[kind](n)
    volume, steps = ring_volume(kind, full, n)
    assert volume == full * num // den
    assert steps == (2 * (n - 1) if kind == "all_reduce" else n - 1)


def test_ring_volume_rounds_up_to_whole_bytes():
    assert ring_volume("all_gather", 10, 4) == (8, 3)  # 7.5 -> 8
    assert ring_volume("all_reduce", 10, 1) == (0, 0)


def test_collectives_of_a_shard_map_program(fixtures):
    # tests/fixtures/collectives_8dev.mlir: shard_map over a 2x4 mesh, per device a (16,32) bf16 block `a`
    # and an (8,32) f32 block `b`, all inside jax.named_scope("layers.0"):
    #   psum(a, 'y')            all_reduce      S = 16*32*2 = 1024 B, n = 4 -> 2*3/4*1024 = 1536
    #   all_gather(b, 'y')      all_gather      S = 32*32*4 = 4096 B, n = 4 -> 3/4*4096 = 3072
    #   psum_scatter(g, 'y')    reduce_scatter  S = 4096 B,           n = 4 -> 3072
    #   all_to_all(a, 'y')      all_to_all      S = 1024 B,           n = 4 -> 768
    #   ppermute(b, 'x')        collective_permute S = 1024 B, pairs of 2 -> 1024
    a = analyze(fixtures / "collectives_8dev.mlir")
    comm = [r for r in a.rows if r.kind == "collective"]
    got = {r.comm_kind: (r.comm_bytes, r.group_size, r.num_groups) for r in comm}
    assert got == {
        "all_reduce": (1536, 4, 2),
        "all_gather": (3072, 4, 2),
        "reduce_scatter": (3072, 4, 2),
        "all_to_all": (768, 4, 2),
        "collective_permute": (1024, 2, 4),
    }
    assert a.summary["comm_bytes"] == 1536 + 3072 + 3072 + 768 + 1024
    assert a.summary["comm_ops"] == 5
    assert all(r.scope == "layers.0" for r in comm)
    # The all_reduce's adds: (n-1)/n of the 512 elements on each device.
    assert next(r for r in comm if r.comm_kind == "all_reduce").vector_flops == 512 * 3 // 4


def test_empty_replica_groups_fall_back_to_the_module(tmp_path):
    text = """
module @m attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 8 : i32} {
  func.func @main(%arg0: tensor<256xf32>) -> tensor<256xf32> {
    %0 = "stablehlo.all_reduce"(%arg0) <{replica_groups = dense<> : tensor<0x0xi64>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<256xf32>) -> tensor<256xf32>
    return %0 : tensor<256xf32>
  }
}
"""
    a = analyze(text)
    (row,) = [r for r in a.rows if r.kind == "collective"]
    assert row.group_size == 8
    assert row.comm_bytes == 2 * 7 * 1024 // 8
