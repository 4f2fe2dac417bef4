"""train-plan's mixture-of-experts models under the fp8 training recipes: the routed experts' GEMMs (gate, up, down;
forward, dgrad and wgrad) run in fp8, as Transformer Engine's grouped GEMM runs them, each 2 x rows x h x F per local
expert (rows = T x k / (E / ep) at balance, T = b x s); the router's stays bf16; the weights stay bf16 arguments with
float32 master copies and moments, as the dense fp8 path keeps them; counts worked out here from the sizes."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost import analyze
from mhlo_cost.analysis import AnalysisOptions
from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import layer_cost
from mhlo_cost.studies.plan.moe import lower_experts
from mhlo_cost.studies.plan.plan import plan

H, S, E, K, F, EP, D = 64, 32, 8, 2, 32, 4, 8
MOE = dict(layers=4, hidden=H, heads=4, seq=S, vocab=128, ffn=256, mlp_kind="swiglu", dropout=False, experts=E,
           top_k=K, expert_ffn=F, shared_experts=1, dense_layers=1, ep=EP, d=D, global_batch=16)
DGX = resolve_profile("dgx-h100")


def _cfg(**kw) -> ScaleConfig:
    return ScaleConfig(**{**MOE, **kw})


@pytest.mark.parametrize("precision", ["fp8-rowwise", "fp8-tensorwise"])
def test_expert_gemms_run_in_fp8_and_the_router_in_bf16(precision):
    cfg = _cfg(precision=precision)
    assert cfg.invalid() is None
    a = analyze(lower_experts(cfg))
    rows = S * K // (E // EP)
    experts = 3 * 2 * (E // EP) * rows * H * F  # gate, up, down of every local expert, one pass
    router = 2 * S * H * E
    assert a.summary["gemm_flops_fp8"] == 3 * experts  # forward, dgrad, wgrad
    assert a.summary["gemm_flops"] == 3 * (experts + router)
    b = analyze(lower_experts(cfg), AnalysisOptions(arguments=True))
    by: dict = {}
    for arg in b.arguments:
        root = arg.name.split("[")[0]
        by[root] = by.get(root, 0) + arg.type.nbytes
    weights = H * E + (E // EP) * 3 * H * F
    assert by["params"] == 2 * weights and by["master"] == 4 * weights


def test_fp8_experts_price_faster_with_the_same_flops_and_memory():
    bf16, fp8 = plan(_cfg(), DGX), plan(_cfg(precision="fp8-rowwise"), DGX)
    assert fp8.iteration.counts["model_flops"] == bf16.iteration.counts["model_flops"]
    for k in ("expert_weights", "expert_gradients", "expert_optimizer_state"):
        assert fp8.memory[k] == bf16.memory[k], k
    assert fp8.iteration.row()["precision"] == "fp8-rowwise"


def test_fp8_expert_gemms_are_priced_at_the_fp8_rate():
    """At a size where the GEMMs are compute-bound (h 2048, F 4096, 4096 rows per expert), the experts' GEMMs (the
    dot rows under the scope ``experts``) are priced faster in fp8 (the H100's fp8 rate twice its bf16 rate); the
    casts around them are priced as the dense fp8 linears' are."""
    from mhlo_cost.studies.study import Study

    big = _cfg(hidden=2048, heads=16, seq=4096, expert_ffn=4096, ffn=8192)
    gemm = {}
    for p in ("bf16", "fp8-rowwise"):
        st = Study(lower_experts(big.with_split(precision=p)), training="always", hardware=DGX, execution="compiled",
                   attention="unfused", dataflow=True)
        gemm[p] = sum(st.roofline.fusion.row_time[i] for i, r in enumerate(st.analysis.rows)
                      if r.gemm_flops and "experts" in r.scope.split("/"))
    assert 0 < gemm["fp8-rowwise"] < gemm["bf16"]


def test_cli_plans_fp8_experts(capsys, tmp_path, monkeypatch):
    from mhlo_cost.cli import main

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    args = ["train-plan", "--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
            "--num-experts", "8", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "32", "--moe-shared-experts", "1",
            "--moe-dense-layers", "1", "-d", "8", "--global-batch", "16", "--hardware", "dgx-h100", "--no-cache",
            "--ep", "4", "--precision", "fp8-tensorwise", "--format", "csv"]
    assert main(args) == 0
    assert "ep_comm (all_to_all)" in capsys.readouterr().out
