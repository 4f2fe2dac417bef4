"""PyTorch's context parallel traced by torch.compile (``--execution inductor``): every exchange waited for where it
is issued (functional collectives call ``wait_tensor`` at once while tracing; Inductor does not reorder by default),
so all of it is exposed; with ``--inductor-comm-reorder`` the eager overlap comes back. Each case against a closed
form worked out here from the collectives' own times (the network model's, :func:`mhlo_cost.network.estimate`,
checked against nccl-tests factors elsewhere): what is checked is how much of each the schedule exposes."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("optax")

from mhlo_cost.cli import main
from mhlo_cost.network import estimate, resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost

SELENE = resolve_profile("selene")
CP = 4
KV = 2 * 1 * (65536 // CP) * 8192 * 2  # one rank's K and V, bf16: b 1, s/cp positions, hidden 8192
RING = tuple((c, (c + 1) % CP) for c in range(CP))


def _t(kind, nbytes, groups) -> float:
    return estimate(SELENE.topology, kind, nbytes, groups).time_s


def _fake(core=None) -> LayerCost:
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    return LayerCost("k", "chip", dict(zero), dict(zero),
                     {"forward": 1.0, "backward": 1.0, "recompute": 0.0, "optimizer": 0.0},
                     weight_elems=1000, weight_bytes=2000, **({"core_s": core} if core else {}))


def _cfg(**kw) -> ScaleConfig:
    base = dict(layers=2, hidden=8192, heads=64, seq=65536, vocab=128, cp=CP, micro_batch=1, global_batch=1,
                cp_comm="torch-allgather", attention="fused", execution="inductor")
    return ScaleConfig(**{**base, **kw})


AG = _t("all_gather", CP * KV, (tuple(range(CP)),))  # the K/V all-gather, cp x the local K and V
DKV = _t("collective_permute", 2 * KV, RING)  # the fp32 dK/dV passed to the next rank
PERM = _t("collective_permute", KV, RING)  # alltoall's K/V pass
#: attention long enough to hide every transfer it could overlap (each block outlasts its transfer)
LONG = {"forward": CP * (AG + PERM) + 1.0, "backward": CP * (AG + PERM + DKV) + 1.0}


def test_traced_exchanges_are_all_exposed_however_long_the_attention():
    """Two layers, one micro-batch: forward the all-gather, backward the all-gather and cp dK/dV passes, whole."""
    traced = compose(_cfg(), _fake(LONG), SELENE)
    assert traced.cp_comm == pytest.approx(2 * (AG + AG + CP * DKV), rel=1e-9)


def test_with_inductors_reordering_the_eager_overlap_is_back():
    """Eager's closed form: only the last dK/dV pass (waited for after the loop) whole, and of each hidden transfer
    (the two all-gathers, cp - 1 dK/dV passes) the 24/108 of its time the SMs of NCCL's 24 channels take from the
    block beside it on this 108-SM chip."""
    hidden = 2 * (DKV + (2 * AG + (CP - 1) * DKV) * 24 / 108)
    assert compose(_cfg(inductor_comm_reorder=True), _fake(LONG), SELENE).cp_comm == pytest.approx(hidden, rel=1e-9)
    assert compose(_cfg(execution="eager"), _fake(LONG), SELENE).cp_comm == pytest.approx(hidden, rel=1e-9)


def test_traced_full_recompute_runs_the_forward_exchange_again_exposed():
    traced = compose(_cfg(recompute="full"), _fake(LONG), SELENE)
    assert traced.cp_comm == pytest.approx(2 * (AG + (AG + CP * DKV) + AG), rel=1e-9)


def test_traced_alltoall_exposes_each_of_the_cp_minus_1_kv_passes():
    traced = compose(_cfg(cp_comm="torch-alltoall"), _fake(LONG), SELENE)
    assert traced.cp_comm == pytest.approx(2 * ((CP - 1) * PERM + (CP - 1) * PERM + CP * DKV), rel=1e-9)


def test_megatrons_ring_is_not_traced():
    """Megatron's p2p ring (Transformer Engine's, not a traced functional collective) overlaps as before."""
    p2p = dict(cp_comm="p2p")
    assert (compose(_cfg(**p2p), _fake(LONG), SELENE).cp_comm
            == pytest.approx(compose(_cfg(execution="eager", **p2p), _fake(LONG), SELENE).cp_comm, rel=1e-12))


ARGS = ["train-plan", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "64", "--vocab", "128",
        "--micro-batch", "1", "--global-batch", "1", "--cp", "2", "--cp-comm-type", "torch-allgather",
        "--attention", "fused", "--format", "json"]


def test_the_option_reaches_the_plan_and_its_exposure(capsys):
    assert main(ARGS + ["--execution", "inductor"]) == 0
    waited = json.loads(capsys.readouterr().out)
    assert main(ARGS + ["--execution", "inductor", "--inductor-comm-reorder"]) == 0
    reordered = json.loads(capsys.readouterr().out)
    assert main(ARGS + ["--execution", "eager"]) == 0
    eager = json.loads(capsys.readouterr().out)
    # the option must reach the plan: waited-for exchanges are exposed whole, reordered ones overlap as in eager
    assert waited["config"]["cp_comm_s"] > reordered["config"]["cp_comm_s"] > 0
    assert reordered["config"]["cp_comm_s"] == pytest.approx(eager["config"]["cp_comm_s"], rel=1e-9)


def test_the_option_without_inductor_is_one_line(capsys):
    assert main(ARGS + ["--inductor-comm-reorder"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mhlo-cost: error:") and "inductor" in err and err.count("\n") == 1


def test_stdit3_refuses_the_option_in_one_line(capsys):
    """STDiT3's plan (ColossalAI, not torch.compile's traced context parallel) does not take it."""
    assert main(["train-plan", "--model", "stdit3", "--inductor-comm-reorder"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mhlo-cost: error:") and "--inductor-comm-reorder" in err and err.count("\n") == 1
