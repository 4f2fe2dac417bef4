"""train-plan's mechanisms of the training stacks behind the held-out rows, each against a closed form worked out
here: PyTorch's context parallel (torch.distributed.tensor.experimental: the K/V all-gather or per-step permute, the
fp32 dK/dV passed round the ring, the last pass exposed; the K/V heads torchtitan's Llama repeats before SDPA),
DeepSpeed's ZeRO 1 under its pipeline engine (the fp32 gradients all-reduced whole), and the tied embedding's
gradient all-reduce between the first and last pipeline stages. Collective times are the network model's own
(:func:`mhlo_cost.network.estimate`, checked against nccl-tests factors elsewhere); what is checked here is which
collectives run, their bytes and groups, and how much of each the schedule exposes."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost.cli import main
from mhlo_cost.network import estimate, resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost
from mhlo_cost.studies.plan.plan import plan
from mhlo_cost.studies.plan.sharding import (cp_collectives, dp_collectives, embedding_collective, embedding_elems,
                                              optimizer_extra_elems)

SELENE = resolve_profile("selene")
TINY = dict(layers=4, hidden=64, heads=4, seq=32, vocab=128)


def _fake(fwd, bwd, w, core=None) -> LayerCost:
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    return LayerCost("k", "chip", dict(zero), dict(zero),
                     {"forward": fwd, "backward": bwd, "recompute": 0.0, "optimizer": 0.0},
                     weight_elems=w, weight_bytes=2 * w, **({"core_s": core} if core else {}))


def _t(kind, nbytes, groups) -> float:
    return estimate(SELENE.topology, kind, nbytes, groups).time_s


# --- PyTorch's context parallel ----------------------------------------------------------------------------------

def test_torch_cp_gathers_kv_once_and_passes_fp32_dkv_cp_times():
    """8 query heads, 2 K/V heads, t 2, cp 4, b 2, s 64, head dim 8: one rank's K and V are 2 x 2 x 16 x 1 x 8 x
    2 bytes (kv/t = 1 head); repeated to the query heads (heads/t = 4) four times that."""
    cfg = ScaleConfig(layers=2, hidden=64, heads=8, kv_heads=2, seq=64, vocab=128, t=2, cp=4, micro_batch=2,
                      global_batch=2, cp_comm="torch-allgather")
    kv = 2 * 2 * (64 // 4) * 1 * 8 * 2
    rows = [(r.what, r.kind, r.nbytes, r.per, r.count, r.size) for r in cp_collectives(cfg)]
    assert rows == [("K, V", "all_gather", 4 * kv, "layer_forward", 1, 4),
                    ("K, V", "all_gather", 4 * kv, "layer_backward", 1, 4),
                    ("dK, dV (fp32)", "collective_permute", 2 * kv, "grad_step", 4, 4)]
    rep = cp_collectives(cfg.with_split(kv_repeat=True))
    assert [r.nbytes for r in rep] == [16 * kv, 16 * kv, 8 * kv]  # 4 heads where there was 1
    a2a = cp_collectives(cfg.with_split(cp_comm="torch-alltoall"))
    assert [(r.kind, r.nbytes, r.per) for r in a2a] == [("collective_permute", kv, "ring_step_forward"),
                                                       ("collective_permute", kv, "ring_step_backward"),
                                                       ("collective_permute", 2 * kv, "grad_step")]


def _cp_case(**kw):
    cfg = ScaleConfig(layers=2, hidden=8192, heads=64, seq=65536, vocab=128, cp=4, micro_batch=1, global_batch=1,
                      cp_comm="torch-allgather", **kw)
    kv = 2 * 1 * (65536 // 4) * 8192 * 2
    ag = _t("all_gather", 4 * kv, ((0, 1, 2, 3),))
    dkv = _t("collective_permute", 2 * kv, tuple((c, (c + 1) % 4) for c in range(4)))
    return cfg, ag, dkv


def test_torch_cp_exposes_the_gather_beyond_the_local_block_and_the_last_dkv_pass():
    """No attention time: everything exposed (forward: the all-gather; backward: the all-gather and cp fp32 dK/dV
    passes). Attention long enough to hide every overlapped transfer: the last dK/dV pass (waited for after the
    loop) is left, per layer and micro-batch, two layers, and 24/108 of each hidden one (the forward's and the
    backward's all-gather, 3 dK/dV passes: the SMs NCCL's 24 channels take from the block beside it)."""
    cfg, ag, dkv = _cp_case()
    bare = compose(cfg, _fake(1.0, 1.0, 1000), SELENE)
    assert bare.cp_comm == pytest.approx(2 * (ag + ag + 4 * dkv), rel=1e-9)
    long = {"forward": 4 * ag + 1.0, "backward": 4 * max(ag, dkv) + 1.0}  # each block outlasts its transfer
    hidden = compose(cfg, _fake(1.0, 1.0, 1000, long), SELENE)
    assert hidden.cp_comm == pytest.approx(2 * (dkv + (2 * ag + 3 * dkv) * 24 / 108), rel=1e-9)


def test_torch_cp_with_full_recompute_runs_the_forward_exchange_again():
    cfg, ag, dkv = _cp_case(recompute="full")
    bare = compose(cfg, _fake(1.0, 1.0, 1000), SELENE)
    assert bare.cp_comm == pytest.approx(2 * (ag + (ag + 4 * dkv) + ag), rel=1e-9)


def test_megatron_cp_is_unchanged_by_the_new_options():
    cfg, _, _ = _cp_case()
    p2p = cfg.with_split(cp_comm="p2p")
    assert [r.nbytes for r in cp_collectives(p2p)] == [2 * (65536 // 4) * 8192 * 2, 4 * (65536 // 4) * 8192 * 2]


# --- DeepSpeed's ZeRO 1 and the tied embedding ---------------------------------------------------------------------

def test_zero1_all_reduce_reduces_the_whole_fp32_gradients_and_gathers_bf16_weights():
    w, n = 1000, 4
    cfg = ScaleConfig(**TINY, t=2, d=4, global_batch=8, zero=1, dp_reduce="all_reduce")
    rows = [(r.kind, r.nbytes, r.per, r.size) for r in dp_collectives(cfg, _fake(1.0, 1.0, w), n)]
    assert rows == [("all_reduce", 4 * w * n, "iteration", 4), ("all_gather", 2 * w * n, "iteration", 4)]
    assert "ZeRO 1 only" in cfg.with_split(zero=3).invalid()
    assert "ZeRO 1 only" in cfg.with_split(zero=0).invalid()
    assert cfg.label().endswith("zero-ar")


def test_tied_embedding_all_reduces_its_gradient_between_first_and_last_stage():
    """t 2, p 4, d 2, V 128, h 64: every (tensor, data) rank's pair of stage 0 and stage 3 all-reduces V/t x h
    fp32 gradients after the flush, exposed: the iteration grows by exactly that collective's time."""
    cfg = ScaleConfig(**TINY, t=2, p=4, d=2, global_batch=8)
    tied = cfg.with_split(tied_embedding=True)
    c = embedding_collective(tied)
    assert (c.kind, c.nbytes, c.per) == ("all_reduce", 4 * (128 // 2) * 64, "iteration")
    # rank k + t (c + cp (r + d s)): stage 0 and stage 3 of each tensor rank k and data rank r
    assert sorted(c.groups) == sorted((k + 2 * r, k + 2 * r + 2 * 2 * 3) for k in range(2) for r in range(2))
    assert embedding_collective(cfg) is None and embedding_collective(tied.with_split(p=1, d=8)) is None
    cost = _fake(1e-3, 2e-3, 1000)
    base, more = compose(cfg, cost, SELENE), compose(tied, cost, SELENE)
    t = _t("all_reduce", c.nbytes, c.groups)
    assert t > 0
    assert more.total - base.total == pytest.approx(t, rel=1e-9)
    assert more.dp_exposed - base.dp_exposed == pytest.approx(t, rel=1e-9)


def test_the_stages_holding_the_embedding_count_it_once_each():
    """V 128, h 64, t 2: V/t x h = 4096 elements on the first stage (word embedding) and the last (LM head, or the
    tied copy); none in between; on one stage, 2 x 4096 untied and 4096 tied."""
    cfg = ScaleConfig(**TINY, t=2, p=4, d=2, global_batch=8)
    assert [embedding_elems(cfg, s) for s in range(4)] == [4096, 0, 0, 4096]
    assert [embedding_elems(cfg.with_split(tied_embedding=True), s) for s in range(4)] == [4096, 0, 0, 4096]
    assert embedding_elems(cfg.with_split(p=1, d=8), 0) == 2 * 4096
    assert embedding_elems(cfg.with_split(p=1, d=8, tied_embedding=True), 0) == 4096
    assert optimizer_extra_elems(cfg, 0) == 4096  # Megatron's DDP: every parameter in its gradient buffer
    assert optimizer_extra_elems(cfg.with_split(zero=3), 0) == 0  # FSDP: its embedding not priced yet
    assert optimizer_extra_elems(cfg.with_split(zero=1, dp_reduce="all_reduce"), 0) == 4096


def test_deepspeeds_bf16_optimizer_reduces_the_first_stages_embedding_with_its_layers():
    """t 2, p 2, d 2, 2 layers of w = 1000 a stage: DeepSpeed's BF16 optimizer all-reduces the stage's whole fp32
    gradient buffer, 4 x (2 w + 4096) bytes, and all-gathers its bf16 weights, 2 x (2 w + 4096), once per
    iteration after the first stage's last backward: exposed whole, the iteration's only data-parallel time."""
    w = 1000
    cfg = ScaleConfig(**TINY, t=2, p=2, d=2, global_batch=8, zero=1, dp_reduce="all_reduce")
    extra = optimizer_extra_elems(cfg, 0)
    rows = [(r.kind, r.nbytes, r.per) for r in dp_collectives(cfg, _fake(1.0, 1.0, w), 2, extra)]
    assert rows == [("all_reduce", 4 * (2 * w + 4096), "iteration"), ("all_gather", 2 * (2 * w + 4096), "iteration")]
    it = compose(cfg, _fake(1e-3, 2e-3, w), SELENE)
    groups = tuple(tuple(k + 2 * r for r in range(2)) for k in range(2))
    expected = _t("all_reduce", 4 * (2 * w + 4096), groups) + _t("all_gather", 2 * (2 * w + 4096), groups)
    assert expected > _t("all_reduce", 4 * 2 * w, groups) + _t("all_gather", 2 * 2 * w, groups)
    assert it.dp_exposed == pytest.approx(expected, rel=1e-9)


def test_the_first_stages_reduction_sets_the_end_when_it_is_the_largest():
    """Uneven stages 1 / 2 / 1 (the middle stage the slowest) under DeepSpeed's BF16 optimizer: the first stage
    holds 1 layer + the 4096-element embedding (6096 elements with w 2000), the middle 2 layers (4000): the first
    stage, which ends the schedule, reduces the more and its reduction is the one exposed."""
    w = 2000
    cfg = ScaleConfig(**TINY, t=2, p=3, d=2, global_batch=8, zero=1, dp_reduce="all_reduce",
                      first_stage_layers=1, last_stage_layers=1)
    assert cfg.stage_layers() == (1, 2, 1)
    it = compose(cfg, _fake(1e-3, 2e-3, w), SELENE)
    assert it.layer["slow_stage"] == 1
    groups = tuple(tuple(k + 2 * r for r in range(2)) for k in range(2))
    first = _t("all_reduce", 4 * (w + 4096), groups) + _t("all_gather", 2 * (w + 4096), groups)
    assert first > _t("all_reduce", 4 * 2 * w, groups) + _t("all_gather", 2 * 2 * w, groups)
    assert it.dp_exposed == pytest.approx(first, rel=1e-9)


# --- the command line ----------------------------------------------------------------------------------------------

ARGS = ["train-plan", "--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
        "--global-batch", "8", "--format", "json"]


def test_the_options_reach_the_plan(capsys):
    import json

    assert main(ARGS + ["--cp", "2", "--cp-comm-type", "torch-allgather", "--cp-kv-repeat"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["cp_comm"] == "torch-allgather"
    assert main(ARGS + ["-p", "2", "-d", "2", "--zero", "1", "--dp-reduce", "all_reduce",
                        "--share-embeddings-and-output-weights"]) == 0
    assert "zero-ar" in json.loads(capsys.readouterr().out)["config"]["config"]


@pytest.mark.parametrize("extra,says", [
    (["-d", "2", "--dp-reduce", "all_reduce"], "ZeRO 1 only"),
    (["--model", "stdit3", "--share-embeddings-and-output-weights"], "--share-embeddings-and-output-weights"),
])
def test_bad_combinations_are_one_line(capsys, extra, says):
    args = ARGS + extra if "stdit3" not in extra else ["train-plan"] + extra
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("mhlo-cost: error:") and says in err and err.count("\n") == 1



# --- memory of a flash-attention layer without recompute ------------------------------------------------------------

@pytest.mark.parametrize("t,sp", [(1, False), (2, False), (2, True)])
def test_fused_attention_keeps_no_scores_but_its_log_sum_exp(t, sp):
    """Korthikanti et al. 2022, Table 2 (no recompute): s b h (10 + 24/t + 5 a s/(h t)) bytes a layer keeps (with
    sequence parallelism s b h/t (34 + 5 a s/h)); a flash kernel keeps none of the 5 a s^2 b/t of the scores, their
    dropout mask and output, and adds its log-sum-exp, b x a/t x s fp32. The fused kernel's time is still the
    layer's as lowered (the scores' recompute inside the kernel, not JAX's remat)."""
    from fractions import Fraction

    from mhlo_cost.studies.plan.costs import analyse_layer
    from mhlo_cost.studies.plan.layer import lower_layer
    from mhlo_cost.studies.study import Study

    s, b, h, a = 32, 2, 64, 4
    cfg = ScaleConfig(layers=4, hidden=h, heads=a, seq=s, vocab=128, t=t, sp=sp, micro_batch=b, global_batch=b,
                      attention="fused")
    kept = Fraction(s * b * h, t) * 34 if sp else s * b * h * (10 + Fraction(24, t))
    cost = analyse_layer(cfg, SELENE)
    assert cost.saved_bytes == kept + 4 * b * (a // t) * s
    unfused = analyse_layer(cfg.with_split(attention="unfused"), SELENE)
    assert unfused.saved_bytes == kept + Fraction(5 * a * s * s * b, t)  # the unfused kernels keep the scores
    study = Study(lower_layer(cfg), training="always", hardware=SELENE, execution="compiled", attention="fused",
                  dataflow=True, split_phases=True)  # (as train-plan prices it: no kernel spans two phases)
    a, f = study.analysis, study.roofline.fusion
    # the backward's rows, but a flash kernel's whole time where it runs: the backward's kernel (its last row a
    # backward product) holds the scores it remakes, rows of the program's recompute
    flash = {i: a.phases.phase[k.members[-1]] for k in f.kernels if k.attention for i in k.members}
    rows = [i for i, r in enumerate(a.rows) if flash.get(i, a.phases.phase[i]) == "backward"
            and "tp_comm" not in r.scope.split("/")]
    assert any(a.phases.phase[i] == "recompute" and flash[i] == "backward" for i in flash)
    assert cost.time_s["backward"] == pytest.approx(sum(f.row_time[i] for i in rows), rel=1e-12)



# --- interleaved schedules over uneven stages ----------------------------------------------------------------------

def test_interleaved_uneven_stages_run_at_the_fullest_devices_pace():
    """14 layers on p 4, v 2, the first and last devices 3 layers (torchtitan's 126 on 8 x 2 in small): every slot
    takes the 4-layer devices' time; the bubble is (p - 1)/v of it; the first device holds its 3 layers' chunks,
    3/2 layers each, min(2(p - 1) + (v - 1) p + 1, m v) = min(11, 16) of them; a device of 1 layer cannot hold 2
    chunks."""
    from fractions import Fraction

    from mhlo_cost.studies.plan.memory import held_layer_microbatches

    cfg = ScaleConfig(layers=14, hidden=64, heads=4, seq=32, vocab=128, p=4, interleave=2, micro_batch=1,
                      global_batch=8, first_stage_layers=3, last_stage_layers=3, pipeline_split="torchtitan")
    assert cfg.invalid() is None and cfg.stage_layers() == (3, 4, 4, 3)
    assert "first stage's 3 layers" in cfg.with_split(pipeline_split="megatron").invalid()  # Megatron-Core refuses
    f, b = 1e-3, 2e-3
    it = compose(cfg, _fake(f, b, 1000), SELENE)
    assert it.bubble == pytest.approx(3 / 2 * 4 * (f + b), rel=1e-12)
    assert it.compute["forward"] == pytest.approx(8 * 4 * f, rel=1e-12)
    assert held_layer_microbatches(cfg, 0) == Fraction(3, 2) * 11
    assert "cannot hold 2 model chunks" in cfg.with_split(layers=8, first_stage_layers=1, last_stage_layers=1,
                                                          interleave=2).invalid()


def test_a_separate_gradient_accumulation_pass_runs_after_every_backward():
    """DeepSpeed's BF16 optimizer: 2 (zero) + 2 + 4 + 4 (hp += lp) bytes per weight element of the stage after
    each micro-batch's backward, in every one of the m + p - 1 slots (two kernels a layer, two for the
    embedding): the stage's 2 layers of w and its V x h = 128 x 64 embedding (first stage) or LM head (last).
    The optimizer step differs too: the BF16 optimizer takes the gradients' norm every step (.grad_clip, checked in
    test_train_plan_grad_clip), so the pass is compared outside it."""
    w = 1000
    cfg = ScaleConfig(**TINY, p=2, global_batch=8)  # 2 layers a stage, 8 micro-batches
    cost = _fake(1e-3, 2e-3, w)
    base, more = compose(cfg, cost, SELENE), compose(cfg.with_split(grad_accum_pass=True), cost, SELENE)
    one = SELENE.memory_time(12 * (w * 2 + 128 * 64), kernels=4 + 2)
    assert one > 0
    assert more.optimizer > base.optimizer
    assert more.total - base.total - (more.optimizer - base.optimizer) == pytest.approx((8 + 1) * one, rel=1e-9)
    assert more.compute["backward"] - base.compute["backward"] == pytest.approx(8 * one, rel=1e-9)


@pytest.mark.parametrize("extra", [dict(grad_accum_pass=True), dict(tied_embedding=True),
                                   dict(grad_accum_pass=True, tied_embedding=True, zero=1, dp_reduce="all_reduce")])
def test_every_stages_seconds_add_up_to_the_iteration(extra):
    from mhlo_cost.studies.plan.stages import components, stage_rows

    cfg = ScaleConfig(**TINY, t=2, p=2, d=2, global_batch=8, **extra)
    p = plan(cfg, SELENE)
    for row in stage_rows(p):
        assert sum(row[k] for k in components(cfg)) == pytest.approx(p.iteration.total, rel=1e-9), row["stage"]
