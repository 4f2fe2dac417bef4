"""train-plan's mixture-of-experts models under ZeRO 2 and ZeRO 3 (FSDP), checked against closed forms worked out
here from the sizes: a layer's weight elements (the GPT layer with a SwiGLU MLP: two norms, QKV, the output
projection, gate, up and down, with biases; the router h x E; the local experts E/ep x 3 h F), the bytes of each
collective (parameters gathered in bf16, 2 bytes an element; gradients reduce-scattered in fp32, 4), the group each
runs over (the dense weights over the d data ranks, the experts over the d / ep ranks of the expert-data-parallel
group), and memory per GPU (shards, the unsharded buffers of the two largest layers, one layer's fp32 gradient)."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.moe_plan import dp_collectives, layer_dp_collectives
from mhlo_cost.studies.plan.plan import breakdown_frame, facts, plan
from mhlo_cost.studies.plan.sharding import seconds

H, S, E, K, F, EP, D, FFN = 64, 32, 8, 2, 32, 4, 8, 256
MOE = dict(layers=4, hidden=H, heads=4, seq=S, vocab=128, ffn=FFN, mlp_kind="swiglu", dropout=False, experts=E,
           top_k=K, expert_ffn=F, shared_experts=1, dense_layers=1, ep=EP, d=D, global_batch=16)
DGX = resolve_profile("dgx-h100")
MOE_LAYERS = 3
EDP = D // EP  # the expert-data-parallel group


def _cfg(**kw) -> ScaleConfig:
    return ScaleConfig(**{**MOE, **kw})


def layer_elems(f: int) -> int:
    """A layer's weights with a SwiGLU MLP f wide: norms 2 x 2h, QKV h x 3h + 3h, projection h x h + h, gate and up
    h x f + f each, down f x h + h."""
    return 4 * H + (3 * H * H + 3 * H) + (H * H + H) + 2 * (H * f + f) + (f * H + H)


DENSE_W = layer_elems(FFN)  # a dense layer
MOE_W = layer_elems(F) + H * E  # a MoE layer's dense part: attention, the shared expert (F wide), the router
EXPERT_W = (E // EP) * 3 * H * F  # a MoE layer's local experts
EMB = 2 * 128 * H  # one stage: the word embedding and the untied LM head (vocab x h each), sharded as the dense


def _rows(cols):
    return sorted((c.what, c.kind, c.nbytes, c.size, c.per) for c in cols)


def test_zero3_gathers_and_reduce_scatters_each_layer_over_its_group():
    cfg = _cfg(zero=3)
    p = plan(cfg, DGX)
    assert _rows(layer_dp_collectives(cfg, p.moe, "dense")) == sorted([
        ("dense layer parameters", "all_gather", 2 * DENSE_W, D, "layer_forward"),
        ("dense layer parameters", "all_gather", 2 * DENSE_W, D, "layer_backward"),
        ("dense layer gradients", "reduce_scatter", 4 * DENSE_W, D, "layer_backward")])
    assert _rows(layer_dp_collectives(cfg, p.moe, "moe")) == sorted([
        ("MoE layer's dense parameters", "all_gather", 2 * MOE_W, D, "layer_forward"),
        ("MoE layer's dense parameters", "all_gather", 2 * MOE_W, D, "layer_backward"),
        ("MoE layer's dense gradients", "reduce_scatter", 4 * MOE_W, D, "layer_backward"),
        ("MoE layer's expert parameters", "all_gather", 2 * EXPERT_W, EDP, "layer_forward"),
        ("MoE layer's expert parameters", "all_gather", 2 * EXPERT_W, EDP, "layer_backward"),
        ("MoE layer's expert gradients", "reduce_scatter", 4 * EXPERT_W, EDP, "layer_backward")])
    assert dp_collectives(cfg, p.moe, 1, MOE_LAYERS) == []  # nothing left for the end of the iteration
    kept = layer_dp_collectives(_cfg(zero=3, reshard_after_forward=False), p.moe, "moe")
    assert sorted(c.per for c in kept if c.kind == "all_gather") == ["layer_forward"] * 2  # not again backward


def test_zero2_reduce_scatters_per_layer_and_gathers_after_the_step():
    cfg = _cfg(zero=2)
    p = plan(cfg, DGX)
    assert _rows(layer_dp_collectives(cfg, p.moe, "moe")) == sorted([
        ("MoE layer's dense gradients", "reduce_scatter", 4 * MOE_W, D, "layer_backward"),
        ("MoE layer's expert gradients", "reduce_scatter", 4 * EXPERT_W, EDP, "layer_backward")])
    assert _rows(dp_collectives(cfg, p.moe, 1, MOE_LAYERS)) == sorted([
        ("dense parameters", "all_gather", 2 * (DENSE_W + MOE_LAYERS * MOE_W), D, "iteration"),
        ("expert parameters", "all_gather", 2 * MOE_LAYERS * EXPERT_W, EDP, "iteration")])


def test_every_collective_of_the_step_is_listed():
    c = plan(_cfg(zero=3), DGX).iteration.counts["collectives"]
    # 4 all_to_alls, then 3 per dense layer, 6 per MoE layer (dense and expert parts)
    assert len(c) == 4 + 3 + 6 and {r["group_size"] for r in c} == {EP, D, EDP}


@pytest.mark.parametrize("reshard", [True, False])
def test_zero3_memory_per_gpu_shards_and_buffers(reshard):
    cfg = _cfg(zero=3, reshard_after_forward=reshard)
    m = plan(cfg, DGX).memory
    dense = DENSE_W + MOE_LAYERS * MOE_W  # the first (only) stage: one dense layer, three MoE layers
    experts = MOE_LAYERS * EXPERT_W
    largest = [MOE_W + EXPERT_W, DENSE_W]
    buffers = 2 * (sum(largest) if reshard else dense + experts)  # the running and the prefetched layer (bf16)
    assert m["expert_weights"] == 2 * experts // EDP
    assert m["weights"] == 2 * dense // D + 2 * experts // EDP + buffers + 2 * EMB // D
    assert m["expert_gradients"] == 4 * experts // EDP
    assert m["gradients"] == 4 * dense // D + 4 * experts // EDP + 4 * max(largest) + 4 * EMB // D
    state = 12 * EXPERT_W + 4  # fp32 master + 2 moments per element; optax's int32 step count
    assert m["expert_optimizer_state"] == MOE_LAYERS * state // EDP
    assert m["total"] == sum(m[k] for k in ("weights", "gradients", "optimizer_state", "activations"))


def test_fsdp2_keeps_no_bf16_shard_with_experts():
    """fully_shard (torchtitan's MixedPrecisionPolicy(param_dtype=bf16)): the sharded parameter is the fp32 one the
    optimizer steps on, so the weights are the two gathered layers' bf16 buffers alone, the experts' shard 0."""
    m = plan(_cfg(zero=3, fsdp_version=2), DGX).memory
    assert m["expert_weights"] == 0
    assert m["weights"] == 2 * (MOE_W + EXPERT_W + DENSE_W)


def test_zero2_memory_keeps_whole_weights_and_sharded_gradients():
    m = plan(_cfg(zero=2), DGX).memory
    dense, experts = DENSE_W + MOE_LAYERS * MOE_W, MOE_LAYERS * EXPERT_W
    assert m["weights"] == 2 * (dense + experts + EMB) and m["expert_weights"] == 2 * experts
    assert m["gradients"] == 4 * dense // D + 4 * experts // EDP + 4 * max(DENSE_W, MOE_W + EXPERT_W) + 4 * EMB // D


def test_zero3_per_layer_collectives_are_in_the_breakdown():
    """Every micro-batch runs each layer's collectives (dp_total: all of them, priced by the network one by one);
    what is exposed is at most that, and the breakdown still adds up to the iteration."""
    cfg = _cfg(zero=3)
    p = plan(cfg, DGX)
    df = breakdown_frame(p)
    parts = df[df["component"] != "TOTAL"]["seconds"].sum()
    assert parts == pytest.approx(p.iteration.total, abs=2e-5)  # (ten components rounded to the microsecond)
    topo = DGX.topology
    one = {k: sum(seconds(topo, c) for c in layer_dp_collectives(cfg, p.moe, k)) for k in ("dense", "moe")}
    m = cfg.micro_batches
    assert p.iteration.dp_total == pytest.approx(m * (one["dense"] + MOE_LAYERS * one["moe"]), rel=1e-12)
    assert p.iteration.dp_total >= p.iteration.dp_exposed >= 0.0
    assert any("MoE layer's expert parameters: all_gather" in line for line in facts(p))
    assert "fsdp" in p.cfg.label()


def test_hsdp_shards_within_a_group_and_all_reduces_the_shards_across_replicas():
    """16 data ranks, sharding groups of 8 replicated twice; EP 4: the expert-data-parallel group's 4 ranks split into
    an expert sharding group of 2 (within one sharding group) and 2 replicas."""
    cfg = _cfg(zero=3, d=16, dp_shard=8, global_batch=16)
    assert cfg.invalid() is None
    p = plan(cfg, DGX)
    rows = {(c.what, c.kind, c.per): c for c in layer_dp_collectives(cfg, p.moe, "moe")}
    assert sorted((c.what, c.kind, c.nbytes, c.size, c.per) for c in rows.values()) == sorted([
        ("MoE layer's dense parameters", "all_gather", 2 * MOE_W, 8, "layer_forward"),
        ("MoE layer's dense parameters", "all_gather", 2 * MOE_W, 8, "layer_backward"),
        ("MoE layer's dense gradients", "reduce_scatter", 4 * MOE_W, 8, "layer_backward"),
        ("MoE layer's dense gradient shard", "all_reduce", 4 * MOE_W // 8, 2, "layer_backward"),
        ("MoE layer's expert parameters", "all_gather", 2 * EXPERT_W, 2, "layer_forward"),
        ("MoE layer's expert parameters", "all_gather", 2 * EXPERT_W, 2, "layer_backward"),
        ("MoE layer's expert gradients", "reduce_scatter", 4 * EXPERT_W, 2, "layer_backward"),
        ("MoE layer's expert gradient shard", "all_reduce", 4 * EXPERT_W // 2, 2, "layer_backward")])
    shard = rows[("MoE layer's expert gradients", "reduce_scatter", "layer_backward")].groups
    replicas = rows[("MoE layer's expert gradient shard", "all_reduce", "layer_backward")].groups
    assert shard[:2] == ((0, 4), (1, 5)) and replicas[:2] == ((0, 8), (1, 9))  # EP groups: 4 consecutive ranks
    m = p.memory
    experts = MOE_LAYERS * EXPERT_W
    assert m["expert_weights"] == 2 * experts // 2 and m["expert_gradients"] == 4 * experts // 2
    assert m["expert_optimizer_state"] == MOE_LAYERS * (12 * EXPERT_W + 4) // 2
    assert "hsdp8x2" in cfg.label()


def test_hsdp_zero1_with_experts():
    cfg = _cfg(zero=1, d=16, dp_shard=8, global_batch=16)
    got = {(c.what, c.kind): (c.nbytes, c.size) for c in dp_collectives(cfg, plan(cfg, DGX).moe, 1, MOE_LAYERS)}
    assert got[("expert gradients", "reduce_scatter")] == (4 * MOE_LAYERS * EXPERT_W, 2)
    assert got[("expert gradient shard", "all_reduce")] == (4 * MOE_LAYERS * EXPERT_W // 2, 2)
    assert got[("expert parameters", "all_gather")] == (2 * MOE_LAYERS * EXPERT_W, 2)


def test_interleaved_pipeline_with_experts():
    """p 2, v 2, one layer a chunk: stage 0 holds chunks 0 and 2 (the dense layer and a MoE layer), stage 1 chunks 1
    and 3; the interleaved schedule's bubble (p - 1) / (v m), 2 v m transfers, and stage 0 holding
    min(2 (p - 1) + (v - 1) p + 1, m v) = 5 chunk-micro-batches of activations (its two chunks' mean)."""
    from mhlo_cost.studies.plan.moe import stage_kinds

    cfg = _cfg(p=2, d=4, ep=4, interleave=2, global_batch=16)
    assert cfg.invalid() is None and stage_kinds(cfg) == [(1, 1), (0, 2)]
    p = plan(cfg, DGX)
    m = cfg.micro_batches
    c = p.iteration.counts
    assert (c["bubble_fraction"], c["p2p_transfers"]) == (f"1/{2 * m}", 2 * 2 * m)
    df = breakdown_frame(p)
    assert df[df["component"] != "TOTAL"]["seconds"].sum() == pytest.approx(p.iteration.total, abs=2e-5)
    from mhlo_cost.studies.plan.moe_plan import moe_memory

    mc = p.moe
    acts = mc.dense.activation_bytes + mc.base.activation_bytes + mc.experts.activation_bytes
    assert moe_memory(cfg, mc, stage=0)["activations"] == 5 * acts // 2


def test_cli_plans_fsdp_and_zero2_with_experts(capsys, tmp_path, monkeypatch):
    from mhlo_cost.cli import main

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    args = ["train-plan", "--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
            "--num-experts", "8", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "32", "--moe-shared-experts", "1",
            "--moe-dense-layers", "1", "-d", "8", "--global-batch", "16", "--hardware", "dgx-h100", "--no-cache",
            "--ep", "4"]
    assert main(args + ["--fsdp"]) == 0
    out = capsys.readouterr().out
    assert "fsdp" in out and "MoE layer's expert parameters: all_gather of 24,576 bytes over 2 ranks" in out
    assert main(args + ["--zero", "2"]) == 0 and "zero2" in capsys.readouterr().out
