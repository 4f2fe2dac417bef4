"""Three gaps of train-plan's options (issue 38's audit), each against a closed form worked out here:

1. ``--moe-imbalance F``: the busiest expert-parallel rank receives F times the balanced T x k token copies, so
   each all_to_all (dispatch, combine, their gradients) is priced at ceil(F T k) x h x 2 bytes per rank;
2. the embedding and the LM head's weights, gradients and optimizer state on the pipeline stages that hold them;
3. PyTorch DDP's flat bucket buffers (``--torch-ddp``) beside each parameter's ``.grad``.
"""
from __future__ import annotations

from math import ceil

import pytest

pytest.importorskip("optax")

from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.moe_plan import a2a_collectives

H, S, E, K, F, EP, D = 64, 32, 8, 2, 32, 4, 8
MOE = dict(layers=4, hidden=H, heads=4, seq=S, vocab=128, ffn=256, mlp_kind="swiglu", dropout=False, experts=E,
           top_k=K, expert_ffn=F, shared_experts=1, dense_layers=1, ep=EP, d=D, global_batch=16)


# --- 1. --moe-imbalance: the all_to_all at the busiest rank's bytes ------------------------------------------

@pytest.mark.parametrize("imbalance", [1.0, 1.5, 1.7])
def test_imbalance_prices_every_all_to_all_at_the_busiest_ranks_copies(imbalance):
    cfg = ScaleConfig(**MOE, expert_imbalance=imbalance)
    t = 1 * S  # one micro-batch of b = 1 sequence of s = 32 positions routed by one device
    busiest = ceil(imbalance * t * K)  # balanced T k = 64 copies; 1.5 x: 96; 1.7 x: 108.8 -> 109
    rows = a2a_collectives(cfg)
    assert [c.kind for c in rows] == ["all_to_all"] * 4
    assert {c.nbytes for c in rows} == {busiest * H * 2}  # bf16 rows of h = 64


def test_imbalance_with_expert_tensor_parallelism_gathers_the_busiest_groups_rows():
    cfg = ScaleConfig(**{**MOE, "t": 2, "sp": True, "expert_tp": 2, "ep": 4, "d": 4}, expert_imbalance=1.5)
    t = S // 2  # sequence parallel: s / t positions routed per device
    busiest = ceil(1.5 * t * K) * H * 2
    by_kind = {(c.kind, c.nbytes) for c in a2a_collectives(cfg)}
    assert by_kind == {("all_to_all", busiest), ("all_gather", 2 * busiest), ("reduce_scatter", 2 * busiest)}


def test_capacity_factor_ignores_the_imbalance():
    cap = ceil(1.25 * S * K / E)  # padded slots per expert and rank: the buffer is fixed whatever the routing
    for imb in (1.0, 2.0):
        rows = a2a_collectives(ScaleConfig(**MOE, capacity_factor=1.25, expert_imbalance=imb))
        assert {c.nbytes for c in rows} == {E * cap * H * 2}


# --- 2. the embedding and the LM head on the stages that hold them --------------------------------------------

TINY = dict(layers=4, hidden=64, heads=4, seq=32, vocab=128)


@pytest.mark.parametrize("tied", [False, True])
def test_pipeline_stages_hold_the_embedding_and_head_state(tied):
    """p 4, t 2, ZeRO 1 over d 2: the first stage holds the embedding (V/t x h = 64 x 64), the last the LM head (a
    copy of the same weight when tied), the middle ones none: 2 + 4 bytes an element whole, 12 over the 2 ranks."""
    from mhlo_cost.network import resolve_profile
    from mhlo_cost.studies.plan.costs import layer_cost
    from mhlo_cost.studies.plan.memory import memory

    cfg = ScaleConfig(**TINY, t=2, p=4, d=2, global_batch=8, zero=1, tied_embedding=tied)
    cost = layer_cost(cfg, resolve_profile("selene"))
    layers = [memory(cfg, cost, stage=s) for s in range(4)]
    e = 128 // 2 * 64
    one = 2 * e + 4 * e + 12 * e // 2
    assert [m.get("embedding_state", 0) for m in layers] == [one, 0, 0, one]
    base = cost.weight_bytes  # stage 1 (no embedding) is the layers' part of every stage (one layer each)
    assert layers[0]["weights"] - layers[1]["weights"] == 2 * e == layers[3]["weights"] - base


def test_one_stage_untied_holds_both_and_zero3_shards_them():
    """p 1, ZeRO 3 over d 4 (DeepSpeed-style, a bf16 shard kept): 2 x V x h elements, 2 / 4 / 12 bytes over 4."""
    from mhlo_cost.network import resolve_profile
    from mhlo_cost.studies.plan.costs import layer_cost
    from mhlo_cost.studies.plan.memory import embedding_state, memory

    cfg = ScaleConfig(**TINY, d=4, global_batch=4, zero=3)
    e = 2 * 128 * 64
    assert embedding_state(cfg, 0) == {"weights": 2 * e // 4, "gradients": 4 * e // 4, "optimizer_state": 12 * e // 4}
    assert embedding_state(cfg.with_split(fsdp_version=2), 0)["weights"] == 0  # FSDP2: the fp32 shard is the master
    assert memory(cfg, layer_cost(cfg, resolve_profile("selene")))["embedding_state"] == 18 * e // 4


# --- 3. PyTorch DDP's flat buckets ----------------------------------------------------------------------------

@pytest.mark.parametrize("tied", [False, True])
def test_torch_ddp_keeps_2_byte_buckets_over_every_weight(tied):
    """--DDP-impl torch, gradient_as_bucket_view off: one flat bucket element of the 2-byte gradient dtype per
    weight element of the stage (4 layers and, on one stage, the embedding and LM head: V x h once tied, twice not)
    beside the gradients; nothing else moves, and nothing without the flag."""
    from mhlo_cost.network import resolve_profile
    from mhlo_cost.studies.plan.costs import layer_cost
    from mhlo_cost.studies.plan.memory import memory

    base = ScaleConfig(**TINY, d=2, global_batch=4, tied_embedding=tied, grad_reduce_fp32=False)
    cost = layer_cost(base, resolve_profile("selene"))
    plain, ddp = memory(base, cost), memory(base.with_split(torch_ddp=True), cost)
    elems = 4 * cost.weight_elems + (1 if tied else 2) * 128 * 64
    assert ddp["gradients"] - plain["gradients"] == 2 * elems == ddp["ddp_buckets"]
    assert ddp["total"] - plain["total"] == 2 * elems and "ddp_buckets" not in plain
    assert {k: ddp[k] for k in ("weights", "optimizer_state", "activations")} == {
        k: plain[k] for k in ("weights", "optimizer_state", "activations")}


def test_imbalance_is_bounded_by_what_the_busiest_rank_can_receive():
    """E 8 experts over ep 4 (2 a rank), top-k 2: a rank can take both of a token's copies, so at most every one of
    the 4 ranks' T k copies: F <= 4 x min(2, 2) / 2 = 4 (the older bound, E / ep = 2, was below it); with top-k 4
    (2 a rank at most) F <= 4 x 2 / 4 = 2."""
    assert ScaleConfig(**MOE, expert_imbalance=4.0).invalid() is None
    assert "imbalance 4.5" in ScaleConfig(**MOE, expert_imbalance=4.5).invalid()
    assert ScaleConfig(**{**MOE, "top_k": 4}, expert_imbalance=2.0).invalid() is None
    assert "imbalance 2.1" in ScaleConfig(**{**MOE, "top_k": 4}, expert_imbalance=2.1).invalid()
