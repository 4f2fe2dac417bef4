"""train-plan's mixture-of-experts models with tensor parallelism, as Megatron-Core runs them (sequence parallelism
on; the expert tensor-parallel degree ``--expert-tensor-parallel-size`` defaulting to t), checked against closed forms
worked out here: a device routes its b x s / t tokens; the all_to_all moves T x k x h bf16 over the ep ranks of an
expert-parallel group (expert tensor rank fastest, so ep ranks etp apart); with expert TP the dispatched rows are
all-gathered over the etp ranks (etp x the all_to_all's buffer) and the outputs reduce-scattered; each local expert
computes etp x T x k / (E / ep) rows at 1/etp of its width; model FLOPs and parameters do not depend on the split."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import layer_cost
from mhlo_cost.studies.plan.moe_sharding import a2a_collectives, ep_groups, etp_groups, expert_dp_groups
from mhlo_cost.studies.plan.plan import breakdown_frame, plan

H, S, E, K, F, EP, FFN, V = 64, 32, 8, 2, 32, 4, 256, 128
MOE = dict(layers=4, hidden=H, heads=4, seq=S, vocab=V, ffn=FFN, mlp_kind="swiglu", dropout=False, experts=E,
           top_k=K, expert_ffn=F, shared_experts=1, dense_layers=1, ep=EP, t=2, sp=True, d=4, global_batch=16)
DGX = resolve_profile("dgx-h100")
MOE_LAYERS = 3
T = S // 2  # tokens per device: b x s / t


def _cfg(**kw) -> ScaleConfig:
    return ScaleConfig(**{**MOE, **kw})


def layer_elems(f: int) -> int:
    """A whole layer's weights with a SwiGLU MLP f wide (norms, QKV, projection, gate, up, down, with biases)."""
    return 4 * H + (3 * H * H + 3 * H) + (H * H + H) + 2 * (H * f + f) + (f * H + H)


def test_expert_tp_defaults_to_t_gathers_rows_over_the_expert_tp_group():
    cfg = _cfg()
    assert cfg.etp == 2 and cfg.invalid() is None
    s = T * K * H * 2
    rows = [(c.kind, c.nbytes, c.size, c.per) for c in a2a_collectives(cfg)]
    fwd = [("all_to_all", s, EP), ("all_gather", 2 * s, 2), ("reduce_scatter", 2 * s, 2), ("all_to_all", s, EP)]
    bwd = [("all_to_all", s, EP), ("all_gather", 2 * s, 2), ("reduce_scatter", 2 * s, 2), ("all_to_all", s, EP)]
    assert rows == [r + ("layer_forward",) for r in fwd] + [r + ("layer_backward",) for r in bwd]
    assert ep_groups(cfg) == ((0, 2, 4, 6), (1, 3, 5, 7))  # same expert tensor rank, ep of them
    assert etp_groups(cfg) == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert sorted(expert_dp_groups(cfg)) == [(r,) for r in range(8)]  # 8 / (2 x 4): one rank each


@pytest.mark.parametrize("etp", [1, 2])
def test_routed_part_gemm_flops_and_expert_weights_per_device(etp):
    cfg = _cfg(expert_tp=etp)
    fl = layer_cost(cfg, DGX, part="experts").gemm_flops
    rows = etp * T * K // (E // EP)  # each local expert's rows after the expert-TP gather
    router = 2 * T * H * E
    experts = 3 * 2 * (E // EP) * rows * H * (F // etp)
    assert fl["forward"] == router + experts and fl["backward"] == 2 * (router + experts)
    m = plan(cfg, DGX).memory
    assert m["expert_weights"] == 2 * MOE_LAYERS * (E // EP) * 3 * H * (F // etp)


def test_expert_tp_1_takes_ep_from_consecutive_ranks_and_shards_over_the_rest():
    cfg = _cfg(expert_tp=1)
    assert [c.kind for c in a2a_collectives(cfg)] == ["all_to_all"] * 4
    assert ep_groups(cfg) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert expert_dp_groups(cfg) == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert "etp1" in cfg.label()


def test_model_flops_and_parameters_do_not_depend_on_the_split():
    attn = 6 * 16 * S * 4 * H * H + 12 * 16 * S * S * H
    dense = attn + 6 * 16 * S * 3 * H * FFN
    moe = attn + 6 * 16 * S * (3 * H * F + 3 * K * H * F + H * E)
    params = layer_elems(FFN) + MOE_LAYERS * (layer_elems(F) + H * E + E * 3 * H * F) + V * H
    for kw in (dict(t=1, sp=False, d=8), dict(), dict(expert_tp=1)):
        c = plan(_cfg(**kw), DGX).iteration.counts
        assert c["model_flops"] == dense + MOE_LAYERS * moe + 6 * 16 * S * H * V, kw
        assert c["params_total"] == params, kw


def test_breakdown_adds_up_with_tensor_and_expert_parallelism():
    p = plan(_cfg(p=2, d=2, ep=2, global_batch=8, zero=1), DGX)
    df = breakdown_frame(p)
    assert df[df["component"] != "TOTAL"]["seconds"].sum() == pytest.approx(p.iteration.total, abs=2e-5)
    assert p.iteration.tp_comm > 0 and p.iteration.ep_comm > 0


@pytest.mark.parametrize("kw, why", [(dict(sp=False), "need sequence parallelism"),
                                     (dict(expert_tp=3), "does not divide"),
                                     (dict(expert_tp=4, ep=4), "x expert tensor degree 4 does not divide t x cp x d"),
                                     (dict(expert_tp=-1), "expert_tp must be")])
def test_bad_tensor_splits_with_experts_say_why(kw, why):
    assert why in _cfg(**kw).invalid()


def test_cli_expert_tensor_parallel_size(capsys, tmp_path, monkeypatch):
    from mhlo_cost.cli import main

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    args = ["train-plan", "--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
            "--num-experts", "8", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "32", "--moe-shared-experts", "1",
            "--moe-dense-layers", "1", "-t", "2", "--sp", "-d", "4", "--global-batch", "16", "--hardware", "dgx-h100",
            "--no-cache", "--ep", "4"]
    assert main(args + ["--expert-tensor-parallel-size", "1"]) == 0
    assert "etp1" in capsys.readouterr().out
    assert main([a for a in args if a != "--sp"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error:") and "sequence parallelism" in err[0]
