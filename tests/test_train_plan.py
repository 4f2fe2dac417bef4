"""Training at scale (mhlo_cost.studies.plan): the composition checked against closed forms worked out here.

Korthikanti et al. 2022 (Table 2) for the activation bytes per layer, the 1F1B / interleaved bubble,
Megatron's model-FLOPs formula (Narayanan et al. 2021), the ring all_reduce's 2(n-1)/n x size on the link.
"""
from __future__ import annotations

from fractions import Fraction

import pytest

pytest.importorskip("optax")

from mhlo_cost.cli import main
from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost, layer_cost
from mhlo_cost.studies.plan.memory import memory

TINY = dict(layers=4, hidden=64, heads=4, seq=32, vocab=128)
SELENE = resolve_profile("selene")


def _korthikanti(s, b, h, a, t, sp, recompute) -> Fraction:
    if recompute == "full":
        return Fraction(2 * s * b * h, t if sp else 1)
    attn = Fraction(5 * a * s, h) if recompute == "none" else 0
    if sp:
        return Fraction(s * b * h, t) * (34 + attn)
    return s * b * h * (10 + Fraction(24, t) + attn / t)


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("t,sp", [(1, False), (2, False), (2, True), (4, True)])
def test_activations_per_layer_are_korthikanti(recompute, t, sp):
    cfg = ScaleConfig(**TINY, t=t, sp=sp, micro_batch=2, global_batch=2, recompute=recompute)
    cost = layer_cost(cfg, SELENE)
    assert cost.activation_bytes == _korthikanti(32, 2, 64, 4, t, sp, recompute)


def test_first_stage_holds_p_microbatches_and_interleaving_adds():
    cfg = ScaleConfig(**{**TINY, "layers": 12}, t=2, sp=True, p=2, micro_batch=1, global_batch=8,
                      recompute="none")
    per_layer = _korthikanti(32, 1, 64, 4, 2, True, "none")
    assert memory(cfg, layer_cost(cfg, SELENE))["activations"] == 6 * 2 * per_layer  # L/p layers x p mbs
    v3 = cfg.with_split(interleave=3)
    held = 6 * 2 * (1 + Fraction(1, 2 * 3)) * per_layer
    assert memory(v3, layer_cost(v3, SELENE))["activations"] == held


def test_weights_gradients_optimizer_are_2_4_12_bytes_per_parameter():
    cfg = ScaleConfig(**TINY, t=2, global_batch=1)
    h, f, t = 64, 256, 2
    params = (3 * h * h + h * h + 2 * h * f) // t + (3 * h + f) // t + 2 * h + 4 * h  # weights, biases, norms
    e = 2 * 128 // t * h  # one stage: the embedding and the untied LM head, V/t x h each
    m = memory(cfg, layer_cost(cfg, SELENE))
    assert m["weights"] == 2 * (params * 4 + e) and m["gradients"] == 4 * (params * 4 + e)
    assert m["optimizer_state"] == (12 * params + 4) * 4 + 12 * e  # fp32 master + 2 moments, AdamW's int32 step
    assert m["embedding_state"] == 18 * e
    zero = memory(cfg.with_split(d=2, dp_comm="zero"), layer_cost(cfg, SELENE))
    assert zero["optimizer_state"] == (12 * params + 4) * 4 // 2 + 12 * e // 2


def _fake(fwd=1.0, bwd=2.0, rec=0.5, opt=0.25) -> LayerCost:
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    return LayerCost("k", "chip", dict(zero), dict(zero),
                     {"forward": fwd, "backward": bwd, "recompute": rec, "optimizer": opt},
                     weight_elems=1000, weight_bytes=2000)


@pytest.mark.parametrize("p,v,m", [(1, 1, 4), (4, 1, 8), (4, 2, 8), (8, 3, 24)])
def test_pipeline_bubble_and_iteration(p, v, m):
    from mhlo_cost.machines.hardware import get_profile

    chip = get_profile("a100")  # a chip: no topology, so no communication
    # (op: the program's recompute phase, 0.5, as charged; selective charges the core attention's forward)
    cfg = ScaleConfig(**{**TINY, "layers": 24}, p=p, interleave=v, micro_batch=1, global_batch=m, recompute="op")
    it = compose(cfg, _fake(), chip)
    lps = 24 // p
    per_mb = lps * (1.0 + 2.0 + 0.5)
    assert it.bubble == pytest.approx((p - 1) / v * per_mb)
    assert it.total == pytest.approx((m + (p - 1) / v) * per_mb + lps * 0.25)
    assert Fraction(it.counts["bubble_fraction"]) == Fraction(p - 1, v * m)
    assert it.counts["p2p_transfers"] == (2 * v * m if p > 1 else 0)


def test_full_recompute_reruns_the_forward():
    from mhlo_cost.machines.hardware import get_profile

    cfg = ScaleConfig(**TINY, micro_batch=1, global_batch=2, recompute="full")
    it = compose(cfg, _fake(rec=0.1), get_profile("a100"))
    assert it.compute["recompute"] == pytest.approx(2 * 4 * 1.0)  # m x L x F


def test_model_flops_are_megatrons_formula():
    b, s, h, n, vcb = 2, 32, 64, 4, 128
    cfg = ScaleConfig(**TINY, t=2, sp=True, micro_batch=1, global_batch=b, recompute="selective")
    from mhlo_cost.studies.plan.plan import plan

    c = plan(cfg, SELENE).iteration.counts
    formula = 72 * b * s * n * h * h * (1 + Fraction(s, 6 * h) + Fraction(vcb, 12 * h * n))
    assert c["model_flops"] == formula  # exact: forward + backward of every layer and the logits
    assert c["hardware_flops"] > c["model_flops"]  # selective recompute: QK^T again
    assert c["rule_6nd"] == 6 * b * s * 12 * n * h * h


def test_tp_all_reduce_moves_2_n_minus_1_over_n_of_the_buffer():
    """Two all_reduces forward, two backward, of b x s x h bf16 over t GPUs of one NVLink node: each
    2 (t-1)/t x S over the link's achievable 300 GB/s x 0.8 (latency terms are microseconds)."""
    cfg = ScaleConfig(layers=1, hidden=8192, heads=64, seq=4096, vocab=128, t=8, micro_batch=8, global_batch=8)
    it = compose(cfg, _fake(0, 0, 0, 0), SELENE)
    size = 8 * 4096 * 8192 * 2
    one = 2 * 7 / 8 * size / (300e9 * 0.8)
    assert it.tp_comm == pytest.approx(4 * one, rel=0.01)


def test_invalid_splits_say_why():
    assert "does not divide heads" in ScaleConfig(**TINY, t=3).invalid()
    assert "divide layers" in ScaleConfig(**TINY, p=3).invalid()
    assert "global batch" in ScaleConfig(**TINY, d=2, global_batch=3).invalid()
    assert ScaleConfig(**TINY).invalid() is None


def test_selene_profile():
    topo = SELENE.topology
    assert SELENE.chip == "a100-sxm-80gb" and topo.devices_per_node == 8
    assert topo.inter.bandwidth == 25e9 and topo.nics_per_node == 8  # 200 Gb/s HDR per GPU


def test_train_plan_command(capsys, tmp_path):
    args = ["train-plan", "--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
            "-t", "2", "--sp", "-p", "2", "--global-batch", "4", "--recompute", "selective"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "pipeline bubble" in out and "MFU" in out and "fits" in out
    assert main(args + ["--format", "json"]) == 0
    import json

    payload = json.loads(capsys.readouterr().out)
    assert payload["counts"]["bubble_fraction"] == "1/4"
    assert main(args[:-2] + ["-t", "3"]) == 2
    assert "mhlo-cost: error: invalid training configuration" in capsys.readouterr().err


def test_sweep_ranks_and_skips(tmp_path):
    from mhlo_cost.studies.plan.search import sweep

    base = ScaleConfig(**TINY, global_batch=8)
    df, skipped = sweep(base, 4, SELENE, tmp_path, micro_batches=(1,), recomputes=("selective",), interleaves=(1, 2))
    assert list(df["iteration_s"][df["fits"]]) == sorted(df["iteration_s"][df["fits"]])
    assert len(skipped) and all(skipped["reason"])
    assert set(df["t"]) == {1, 2, 4}
