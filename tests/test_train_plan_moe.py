"""train-plan's mixture-of-experts layers and expert parallelism, checked against closed forms worked out here from
the sizes: the all_to_all's bytes per step (T x k x hidden x 2 bytes per dispatch or combine, (ep-1)/ep of it
sent per GPU, four per MoE layer and micro-batch, six with full recompute), the routed part's GEMM FLOPs per
device (the router's 2 T h E and the local experts' 3 x 2 x rows x h x F, twice that backward), and memory per GPU
of the expert weights (bf16), gradients (fp32) and AdamW state (fp32 master + 2 moments, optax's int32 step count)
sharded over the expert-data-parallel group (d / ep) with the distributed optimizer."""
from __future__ import annotations

from math import ceil

import pytest

pytest.importorskip("optax")

from mhlo_cost.cli import main
from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.config import ScaleConfig, model_config
from mhlo_cost.studies.plan.costs import layer_cost
from mhlo_cost.studies.plan.moe_plan import a2a_collectives, dp_collectives, ep_groups, expert_dp_groups
from mhlo_cost.studies.plan.plan import breakdown_frame, facts, plan
from mhlo_cost.studies.plan.stages import stage_rows

H, S, E, K, F, EP, D = 64, 32, 8, 2, 32, 4, 8
MOE = dict(layers=4, hidden=H, heads=4, seq=S, vocab=128, ffn=256, mlp_kind="swiglu", dropout=False, experts=E,
           top_k=K, expert_ffn=F, shared_experts=1, dense_layers=1, ep=EP, d=D, global_batch=16)
DGX = resolve_profile("dgx-h100")
MOE_LAYERS = 3  # 4 layers, the first dense


def _cfg(**kw) -> ScaleConfig:
    return ScaleConfig(**{**MOE, **kw})


# --- all_to_all: bytes per step ------------------------------------------------------------------------------

def test_all_to_all_bytes_per_moe_layer_and_per_step():
    cfg = _cfg(zero=1)
    full = S * K * H * 2  # T = b x s = 32 tokens, each sent to k = 2 experts, h = 64 bf16 elements
    rows = a2a_collectives(cfg)
    assert [(c.kind, c.nbytes, c.size, c.per) for c in rows] == (
        [("all_to_all", full, EP, "layer_forward")] * 2 + [("all_to_all", full, EP, "layer_backward")] * 2)
    p = plan(cfg, DGX)
    m = 16 // D  # micro-batches per pipeline
    assert p.iteration.counts["ep_bytes_per_layer"] == 4 * full * (EP - 1) // EP
    assert p.iteration.counts["ep_bytes"] == m * MOE_LAYERS * 4 * full * (EP - 1) // EP
    rec = a2a_collectives(_cfg(recompute="full"))
    assert len(rec) == 6 and sum(c.per == "layer_backward" for c in rec) == 4  # the forward's two again


def test_expert_parallel_groups_are_consecutive_data_ranks_and_expert_dp_strided():
    cfg = _cfg()
    assert ep_groups(cfg) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert expert_dp_groups(cfg) == ((0, 4), (1, 5), (2, 6), (3, 7))


def test_all_to_all_tier_nvlink_within_a_node_scale_out_beyond():
    small = plan(_cfg(ep=8, d=8), DGX).iteration.counts["ep_tier"]
    wide = plan(_cfg(ep=8, d=16, global_batch=16), DGX).iteration.counts
    spanning = plan(_cfg(experts=16, ep=16, d=16, global_batch=16), DGX).iteration.counts["ep_tier"]
    assert small == "nvlink" and wide["ep_tier"] == "nvlink" and "ib" in spanning


def test_capacity_factor_pads_each_expert_and_the_dispatch():
    cfg = _cfg(capacity_factor=1.25)
    cap = ceil(1.25 * S * K / E)  # one rank's slots per expert: 10
    assert a2a_collectives(cfg)[0].nbytes == E * cap * H * 2
    fl = layer_cost(cfg, DGX, part="experts").gemm_flops
    rows = EP * cap  # each local expert: its slots from every rank of the EP group
    assert fl["forward"] == 2 * S * H * E + 3 * 2 * (E // EP) * rows * H * F


# --- expert GEMM FLOPs per device ----------------------------------------------------------------------------

@pytest.mark.parametrize("imbalance", [1.0, 1.5])
def test_routed_part_gemm_flops_per_device(imbalance):
    cfg = _cfg(expert_imbalance=imbalance)
    fl = layer_cost(cfg, DGX, part="experts").gemm_flops
    copies = ceil(imbalance * S * K / (E // EP)) * (E // EP)  # the busiest rank's rows, whole rows per expert
    router = 2 * S * H * E
    experts = 3 * 2 * copies * H * F  # gate, up, down
    assert fl["forward"] == router + experts
    assert fl["backward"] == 2 * (router + experts)  # dgrad + wgrad


@pytest.mark.parametrize("mlp, mats", [("swiglu", 3), ("gelu", 2)])
def test_model_flops_match_the_closed_form(mlp, mats):
    cfg = _cfg(zero=1, mlp_kind=mlp)
    b, s, h, f = 16, S, H, 256
    attn = 6 * b * s * 4 * h * h + 12 * b * s * s * h
    dense = attn + 6 * b * s * mats * h * f  # the dense and shared MLPs: the model's kind
    moe = attn + 6 * b * s * (mats * h * F + 3 * K * h * F + h * E)  # shared, top-k SwiGLU experts, router
    assert plan(cfg, DGX).iteration.counts["model_flops"] == dense + MOE_LAYERS * moe + 6 * b * s * h * 128


# --- memory per GPU ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("zero", [0, 1])
def test_expert_weights_gradients_and_optimizer_state_per_gpu(zero):
    cfg = _cfg(zero=zero)
    m = plan(cfg, DGX).memory
    elems = MOE_LAYERS * (E // EP) * 3 * H * F  # local experts' weights on each GPU
    assert m["expert_weights"] == 2 * elems
    assert m["expert_gradients"] == 4 * elems
    state = MOE_LAYERS * (12 * (E // EP) * 3 * H * F + 4)  # fp32 master + 2 moments; optax's step count
    assert m["expert_optimizer_state"] == (state // (D // EP) if zero else state)
    assert m["total"] == sum(m[k] for k in ("weights", "gradients", "optimizer_state", "activations"))


def test_expert_gradients_reduced_over_the_expert_data_parallel_group():
    cfg = _cfg(zero=1)
    rows = {c.what: c for c in dp_collectives(cfg, plan(cfg, DGX).moe, 1, MOE_LAYERS)}
    elems = MOE_LAYERS * (E // EP) * 3 * H * F
    assert (rows["expert gradients"].kind, rows["expert gradients"].nbytes) == ("reduce_scatter", 4 * elems)
    assert rows["expert gradients"].size == D // EP
    assert (rows["expert parameters"].kind, rows["expert parameters"].nbytes) == ("all_gather", 2 * elems)
    assert rows["dense gradients"].size == D
    assert "expert gradients" not in {c.what for c in dp_collectives(_cfg(ep=8), plan(_cfg(ep=8), DGX).moe, 1, 3)}


# --- the plan as a whole -------------------------------------------------------------------------------------

def test_breakdown_and_stage_rows_add_up_to_the_iteration():
    p = plan(_cfg(p=2, d=4, ep=4, global_batch=16), DGX)
    df = breakdown_frame(p)
    parts = df[df["component"] != "TOTAL"]["seconds"]
    # each part rounded to the microsecond (breakdown_frame): at most half of one off each
    assert parts.sum() == pytest.approx(p.iteration.total, abs=0.5e-6 * len(parts))
    assert "ep_comm (all_to_all)" in set(df["component"]) and p.iteration.ep_comm > 0
    for row in stage_rows(p):
        busy = sum(v for k, v in row.items() if k not in ("stage", "devices", "iteration") and not
                   k.startswith("mem_"))
        assert busy == pytest.approx(p.iteration.total, rel=1e-9)
    assert any("MLA" in line for line in facts(p))  # the attention's approximation is said


@pytest.mark.parametrize("kw, why", [
    (dict(ep=3), "does not divide the experts"), (dict(ep=8, d=4, global_batch=16), "does not divide cp x d"),
    (dict(t=2), "need sequence parallelism"), (dict(experts=0), "needs experts"), (dict(top_k=9), "exceeds"),
    (dict(zero=3, dp_shard=2), "HSDP with experts"), (dict(shared_experts=0), "without shared experts"),
    (dict(recompute="op"), "op recompute"), (dict(expert_imbalance=float("inf")), "imbalance >= 1"),
    (dict(capacity_factor=float("nan")), "capacity factor must be"), (dict(expert_imbalance=5.0), "above ep x min(top-k, experts / ep)"),
    (dict(capacity_factor=5.0), "above experts / top-k"),
])
def test_invalid_expert_splits_say_why(kw, why):
    assert why in _cfg(**kw).invalid()


def test_deepseek_v3_sizes():
    cfg = model_config("deepseek-v3")
    assert (cfg.layers, cfg.hidden, cfg.heads, cfg.experts, cfg.top_k, cfg.expert_ffn, cfg.shared_experts,
            cfg.dense_layers, cfg.mlp, cfg.vocab) == (61, 7168, 128, 256, 8, 2048, 1, 3, 18432, 129280)


ARGS = ["train-plan", "--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
        "--num-experts", "8", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "32", "--moe-shared-experts", "1",
        "--moe-dense-layers", "1", "-d", "8", "--global-batch", "16", "--hardware", "dgx-h100", "--no-cache"]


def test_cli_plans_a_moe_and_refuses_a_bad_split(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert main(ARGS + ["--ep", "4", "--use-distributed-optimizer", "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert "ep_comm (all_to_all)" in out
    assert main(ARGS + ["--ep", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error:") and "expert-parallel degree 3" in err[0]


def test_overlapped_all_to_all_exposes_only_what_outlasts_the_moe_layers_compute():
    cfg = _cfg(dense_layers=0, d=4, ep=4, global_batch=8)
    plain, over = plan(cfg, DGX), plan(cfg.with_split(ep_overlap=True), DGX)
    m = cfg.micro_batches
    head = over.head.time_s["forward"] + over.head.time_s["backward"]
    work = sum(over.iteration.compute.values()) - m * head  # every layer is a MoE layer here
    assert over.iteration.ep_comm == pytest.approx(max(0.0, plain.iteration.ep_comm - work), rel=1e-9)
    assert over.iteration.counts["ep_total_s"] == pytest.approx(plain.iteration.ep_comm, rel=1e-12)
    assert "needs experts" in ScaleConfig(ep_overlap=True).invalid()


def test_hf_deepseek_v3_maps_its_experts():
    pytest.importorskip("transformers")
    from mhlo_cost.studies.plan.hf import hf_scale_config

    cfg = hf_scale_config("DeepseekV3ForCausalLM", "deepseek_v3", {"num_hidden_layers": 5}, 256)
    assert (cfg.layers, cfg.hidden, cfg.experts, cfg.top_k, cfg.expert_ffn, cfg.shared_experts, cfg.dense_layers,
            cfg.ffn, cfg.seq) == (5, 7168, 256, 8, 2048, 1, 3, 18432, 256)


def test_full_recompute_keeps_only_each_layers_input():
    cfg = _cfg(recompute="full", p=1)
    m = plan(cfg, DGX).memory
    layer_input = 1 * S * H * 2  # b x s x h, bf16
    assert m["activations"] == min(1, cfg.micro_batches) * cfg.layers * layer_input


def test_dense_layers_sit_on_the_first_stages():
    from mhlo_cost.studies.plan.moe import stage_kinds

    cfg = model_config("deepseek-v3", p=16, d=16, ep=16, global_batch=16, first_stage_layers=4, last_stage_layers=1)
    assert stage_kinds(cfg) == [(3, 1)] + [(0, 4)] * 14 + [(0, 1)]
    counted = _cfg(layers=6, dense_layers=2, p=4, d=4, account_embedding=True, account_loss=True)
    assert counted.invalid() is None and stage_kinds(counted) == [(1, 0), (1, 1), (0, 2), (0, 1)]


def test_deepseek_v3_parameters_near_the_published_671b_and_37b():
    """DeepSeek-V3 publishes 671B parameters, 37B activated per token (its report, section 1), with MLA attention;
    priced with multi-head attention (4 h^2 a layer: 205.5M against MLA's 187.1M), the counts stay within 0.5%
    and 5% (the active count is the more sensitive: the attention is a third of it)."""
    cfg = model_config("deepseek-v3", p=16, d=16, ep=16, global_batch=16, first_stage_layers=4,
                       last_stage_layers=1, recompute="full")
    c = plan(cfg, DGX).iteration.counts
    assert abs(c["params_total"] / 671e9 - 1) < 0.005
    assert abs(c["params_active"] / 37e9 - 1) < 0.05


@pytest.mark.parametrize("extra", [["--moe-router-topk", "2"], ["--moe-imbalance", "3"], ["--moe-dense-layers", "1"],
                                   ["--moe-expert-capacity-factor", "1.5"]])
def test_moe_options_on_a_dense_model_are_refused_not_dropped(extra, capsys):
    dense = ["train-plan", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
             "--no-cache"]
    assert main(dense + extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error:") and "needs experts" in err[0]


def test_an_infinite_imbalance_is_one_line(capsys):
    assert main(ARGS + ["--ep", "4", "--moe-imbalance", "inf"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error:")
