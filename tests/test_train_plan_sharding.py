"""train-plan's data-parallel sharding (ZeRO 1-3, FSDP, HSDP), context parallelism and uneven pipelines, checked
against closed forms worked out here: each collective's bytes from the layer's parameter count (written out from
the sizes), memory per GPU from 2/4/12 bytes per parameter over the sharding degree, Korthikanti's activation
bytes over cp, Megatron's model-FLOPs formula, and the ring collectives' (n-1)/n x S on an NVLink link
(300 GB/s x 0.8 on Selene, as tests/test_train_plan.py uses)."""
from __future__ import annotations

from fractions import Fraction

import pytest

pytest.importorskip("optax")

from mhlo_cost.cli import main
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.network import estimate, resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost, layer_cost
from mhlo_cost.studies.plan.memory import memory
from mhlo_cost.studies.plan.plan import plan
from mhlo_cost.studies.plan.sharding import cp_collectives, dp_collectives

TINY = dict(layers=4, hidden=64, heads=4, seq=32, vocab=128)
SELENE = resolve_profile("selene")
NVLINK = 300e9 * 0.8  # Selene's NVLink: achievable bytes/s per direction


def _params(h=64, f=256, t=2) -> int:
    """One tensor rank's layer parameters: QKV, projection, fc1, fc2 weights and biases, two LayerNorms."""
    return (3 * h * h + h * h + 2 * h * f) // t + (3 * h + f) // t + 2 * h + 4 * h


def _korthikanti(s, b, h, a, t, sp) -> Fraction:
    """Korthikanti et al. 2022, Table 2, no recompute: bytes one layer keeps per micro-batch."""
    if sp:
        return Fraction(s * b * h, t) * (34 + Fraction(5 * a * s, h))
    return s * b * h * (10 + Fraction(24, t) + Fraction(5 * a * s, h * t))


def _by(rows, per, kind):
    return [r for r in rows if r.per == per and r.kind == kind]


# --- ZeRO / FSDP / HSDP: bytes of each collective ------------------------------------------------------------

def test_fsdp_gathers_parameters_twice_and_reduce_scatters_fp32_gradients_per_layer():
    cfg = ScaleConfig(**TINY, t=2, d=4, global_batch=8, zero=3)
    P = _params()
    rows = dp_collectives(cfg, layer_cost(cfg, SELENE), 4)
    assert [(r.nbytes, r.size) for r in _by(rows, "layer_forward", "all_gather")] == [(2 * P, 4)]
    assert [(r.nbytes, r.size) for r in _by(rows, "layer_backward", "all_gather")] == [(2 * P, 4)]
    assert [(r.nbytes, r.size) for r in _by(rows, "layer_backward", "reduce_scatter")] == [(4 * P, 4)]
    assert not [r for r in rows if r.per == "iteration"]  # the parameters stay sharded: no gather after the step
    kept = dp_collectives(cfg.with_split(reshard_after_forward=False), layer_cost(cfg, SELENE), 4)
    assert not _by(kept, "layer_backward", "all_gather")  # reshard-after-forward off: no second gather


def test_zero1_and_zero2_collectives():
    cfg = ScaleConfig(**TINY, t=2, d=4, global_batch=8)
    cost, P, n = layer_cost(cfg, SELENE), _params(), 4
    one = dp_collectives(cfg.with_split(zero=1), cost, n)
    assert {(r.kind, r.nbytes, r.per) for r in one} == {("reduce_scatter", 4 * P * n, "iteration"),
                                                        ("all_gather", 2 * P * n, "iteration")}
    assert dp_collectives(cfg.with_split(dp_comm="zero"), cost, n) == one  # the old spelling is ZeRO 1
    two = dp_collectives(cfg.with_split(zero=2), cost, n)
    assert {(r.kind, r.nbytes, r.per) for r in two} == {("reduce_scatter", 4 * P, "layer_backward"),
                                                        ("all_gather", 2 * P * n, "iteration")}
    none = dp_collectives(cfg, cost, n)
    assert [(r.kind, r.nbytes, r.size) for r in none] == [("all_reduce", 4 * P * n, 4)]


def test_hsdp_reduce_scatters_within_and_all_reduces_the_shard_across():
    cfg = ScaleConfig(**TINY, t=2, d=8, global_batch=8, zero=3, dp_shard=4)
    assert (cfg.shard_degree, cfg.replicate_degree) == (4, 2)
    P = _params()
    rows = dp_collectives(cfg, layer_cost(cfg, SELENE), 4)
    ar = _by(rows, "layer_backward", "all_reduce")
    assert [(r.nbytes, r.size) for r in ar] == [(4 * P // 4, 2)]
    assert ar[0].groups[0] == (0, 8)  # tensor rank 0 of the first rank of each sharding group (t = 2 x 4 apart)
    assert [r.size for r in _by(rows, "layer_backward", "reduce_scatter")] == [4]


# --- memory per GPU -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("zero,shard_opts,shard", [(1, {}, 4), (2, {}, 4), (3, {}, 4), (3, {"dp_shard": 2}, 2)])
def test_memory_shards_optimizer_gradients_parameters(zero, shard_opts, shard):
    cfg = ScaleConfig(**TINY, t=2, d=4, global_batch=8, zero=zero, **shard_opts)
    P, n, e = _params(), 4, 2 * 128 // 2 * 64  # e: one stage's embedding and untied LM head, V/t x h each
    m = memory(cfg, layer_cost(cfg, SELENE))
    # fp32 master + 2 moments (+ AdamW's step count), the embedding's and head's sharded as the layers'
    assert m["optimizer_state"] == (12 * P + 4) * n // shard + 12 * e // shard
    grads = 4 * P * n // shard + 4 * P + 4 * e // shard if zero >= 2 else 4 * (P * n + e)  # + one layer reduced
    assert m["gradients"] == grads
    weights = 2 * P * n // shard + 2 * (2 * P) + 2 * e // shard if zero == 3 else 2 * (P * n + e)  # + two layers
    assert m["weights"] == weights
    if zero == 3:
        kept = memory(cfg.with_split(reshard_after_forward=False), layer_cost(cfg, SELENE))
        assert kept["weights"] == 2 * P * n // shard + 2 * P * n + 2 * e // shard  # every layer left gathered


def test_fsdp_on_a_stage_of_one_layer_holds_one_unsharded_layer():
    # 4 layers on 4 stages: one layer a stage, nothing to prefetch; keeping it gathered costs the same
    cfg = ScaleConfig(**TINY, t=2, p=4, d=4, global_batch=8, zero=3)
    P, e = _params(), 128 // 2 * 64  # the first stage's embedding (V/t x h), sharded as the layer
    for reshard in (True, False):
        m = memory(cfg.with_split(reshard_after_forward=reshard), layer_cost(cfg, SELENE))
        assert m["weights"] == 2 * P // 4 + 2 * P + 2 * e // 4


# --- FSDP's overlap -------------------------------------------------------------------------------------------

def _fake(fwd, bwd, w, core=None) -> LayerCost:
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    return LayerCost("k", "chip", dict(zero), dict(zero),
                     {"forward": fwd, "backward": bwd, "recompute": 0.0, "optimizer": 0.0},
                     weight_elems=w, weight_bytes=2 * w, **({"core_s": core} if core else {}))


def test_fsdp_exposes_what_the_layer_compute_does_not_hide():
    """4 GPUs of one node, 2 micro-batches of 4 layers: the forward's gather of 2W = 1 GB takes 3/4 x 1 GB over
    NVLink (3.1 ms) against 1 ms of the layer's forward: 2.1 ms exposed per layer; the backward's gather and
    reduce-scatter (3.1 + 6.25 ms) hide under its 20 ms, which runs on 108 - 24 SMs while they run (NCCL's 24
    channels on an A100 node): 24/108 of them exposed."""
    w = 500_000_000
    cfg = ScaleConfig(**TINY, d=4, global_batch=8, zero=3)
    it = compose(cfg, _fake(1e-3, 20e-3, w), SELENE)
    gather = 3 / 4 * 2 * w / NVLINK
    scatter = 3 / 4 * 4 * w / NVLINK
    assert it.dp_total == pytest.approx(2 * 4 * (2 * gather + scatter), rel=0.01)
    assert it.dp_exposed == pytest.approx(2 * 4 * (gather - 1e-3 + (gather + scatter) * 24 / 108), rel=0.01)
    assert it.total == pytest.approx(2 * 4 * (1e-3 + 20e-3) + it.dp_exposed, rel=1e-9)
    slow = compose(cfg, _fake(1e-3, 1e-3, w), SELENE)  # the backward hides 1 ms of its 9.4 ms
    assert slow.dp_exposed == pytest.approx(2 * 4 * (gather - 1e-3 + gather + scatter - 1e-3), rel=0.01)


# --- context parallelism --------------------------------------------------------------------------------------

@pytest.mark.parametrize("t,sp", [(1, False), (2, False), (2, True)])
def test_cp_splits_each_layers_activations_cp_ways(t, sp):
    cfg = ScaleConfig(**TINY, t=t, sp=sp, cp=2, micro_batch=2, global_batch=2)
    assert layer_cost(cfg, SELENE).activation_bytes == _korthikanti(32, 2, 64, 4, t, sp) / 2


def test_cp_keeps_megatrons_model_flops_and_counts_its_gpus():
    b, s, h, n, vcb = 2, 32, 64, 4, 128
    cfg = ScaleConfig(**TINY, t=2, sp=True, cp=2, micro_batch=1, global_batch=b, recompute="selective")
    c = plan(cfg, SELENE).iteration.counts
    assert c["model_flops"] == 72 * b * s * n * h * h * (1 + Fraction(s, 6 * h) + Fraction(vcb, 12 * h * n))
    assert cfg.gpus == 4


def test_ring_attention_sends_local_kv_cp_minus_1_times():
    cfg = ScaleConfig(**TINY, t=2, cp=4, micro_batch=2, global_batch=2, kv_heads=2)
    kv = 2 * 2 * (32 // 4) * (2 // 2) * (64 // 4) * 2  # K and V: b x s/cp x kv/t x head dim, bf16
    rows = cp_collectives(cfg)
    assert [(r.per, r.nbytes, r.size) for r in rows] == [("ring_step_forward", kv, 4),
                                                         ("ring_step_backward", 2 * kv, 4)]
    ag = cp_collectives(cfg.with_split(cp_comm="all_gather"))
    assert [(r.kind, r.nbytes, r.per) for r in ag] == [("all_gather", 4 * kv, "layer_forward"),
                                                       ("all_gather", 4 * kv, "layer_backward"),
                                                       ("reduce_scatter", 4 * kv, "layer_backward")]


def test_ring_steps_hide_under_the_attention():
    cfg = ScaleConfig(layers=2, hidden=8192, heads=64, seq=65536, vocab=128, cp=4, micro_batch=1, global_batch=1)
    kv = 2 * 1 * (65536 // 4) * 8192 * 2
    pairs = tuple((c, (c + 1) % 4) for c in range(4))
    step_f = estimate(SELENE.topology, "collective_permute", kv, pairs).time_s
    step_b = estimate(SELENE.topology, "collective_permute", 2 * kv, pairs).time_s
    bare = compose(cfg, _fake(1.0, 1.0, 1000), SELENE)  # no attention time: every step exposed
    assert bare.cp_comm == pytest.approx(2 * 3 * (step_f + step_b), rel=1e-9)
    core = {"forward": 4 * step_f + 0.5, "backward": 4 * step_b - 4 * step_b / 2}  # a step: hidden, half hidden
    part = compose(cfg, _fake(1.0, 1.0, 1000, core), SELENE)
    # a hidden step still holds 24 of the 108 SMs (NCCL's channels) beside its block: 24/108 of it exposed
    assert part.cp_comm == pytest.approx(2 * 3 * (step_f * 24 / 108 + step_b / 2), rel=1e-9)


# --- uneven pipelines -----------------------------------------------------------------------------------------

def test_uneven_splits_as_megatron_makes_them():
    llama = ScaleConfig(layers=126, hidden=256, heads=4, seq=128, vocab=1024, p=16)
    assert "does not divide layers 126" in llama.invalid()
    both = llama.with_split(account_embedding=True, account_loss=True)
    assert both.stage_layers() == (7,) + (8,) * 14 + (7,) and both.invalid() is None
    given = llama.with_split(first_stage_layers=6, last_stage_layers=8)
    assert given.stage_layers() == (6,) + (8,) * 15
    assert "no even split" in llama.with_split(first_stage_layers=5, last_stage_layers=6).invalid()
    assert "interleave" in both.with_split(interleave=2).invalid()


def test_the_slowest_stage_sets_the_pace():
    """Stages of 1, 3, 3, 2 layers (first 1, last 2): per micro-batch the slowest holds 3 x (F + B); 1F1B's
    m + p - 1 slots at that pace; the activations each stage holds: its layers x min(p - s, m)."""
    cfg = ScaleConfig(**{**TINY, "layers": 9}, p=4, micro_batch=1, global_batch=8, first_stage_layers=1,
                      last_stage_layers=2)
    assert cfg.stage_layers() == (1, 3, 3, 2)
    it = compose(cfg, _fake(1.0, 2.0, 1000), get_profile("a100"))
    assert it.total == pytest.approx((8 + 4 - 1) * 3 * 3.0)
    assert it.bubble == pytest.approx(3 * 3 * 3.0)
    act = _fake(1.0, 2.0, 1000)
    act = LayerCost(**{**act.__dict__, "saved_bytes": 100})
    assert [memory(cfg, act, stage=s)["activations"] for s in range(4)] == [1 * 4 * 100, 3 * 3 * 100,
                                                                          3 * 2 * 100, 2 * 1 * 100]


# --- the command ----------------------------------------------------------------------------------------------

ARGS = ["train-plan", "--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
        "--global-batch", "8", "--format", "json"]


def test_command_options_and_their_spellings(capsys):
    import json

    assert main(ARGS + ["-d", "4", "--fsdp", "--dp-replicate", "2", "--cp", "2"]) == 0
    row = json.loads(capsys.readouterr().out)["config"]
    assert (row["zero"], row["shard"], row["replicate"], row["cp"]) == (3, 4, 2, 2)
    assert main(ARGS + ["-d", "2", "--use-distributed-optimizer"]) == 0
    a = json.loads(capsys.readouterr().out)["config"]
    assert main(ARGS + ["-d", "2", "--dp-comm", "zero"]) == 0
    assert json.loads(capsys.readouterr().out)["config"] == a
    assert main(ARGS + ["--layers", "6", "-p", "4", "--account-for-embedding-in-pipeline-split",
                        "--account-for-loss-in-pipeline-split"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["stage_layers"] == "1/2/2/1"


@pytest.mark.parametrize("extra,says", [
    (["--fsdp", "--zero", "2"], "name different ZeRO stages"),
    (["--cp", "3"], "does not divide seq"),
    (["-d", "4", "--dp-shard", "3", "--zero", "1"], "does not divide the data degree"),
    (["--fsdp-reshard-after-forward", "never"], "FSDP (zero 3) only"),
    (["--sweep", "4", "--cp", "2"], "--cp does not go with --sweep"),
])
def test_bad_combinations_are_one_line(capsys, extra, says):
    assert main(ARGS + extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("mhlo-cost: error:") and says in err and err.count("\n") == 1


# --- the sweep over the new dimensions ------------------------------------------------------------------------

def test_sweep_adds_cp_and_zero_with_a_reason_for_each_rejected(tmp_path):
    from mhlo_cost.studies.plan.search import split_count, splits, sweep

    base = ScaleConfig(**TINY, global_batch=8)
    kw = dict(micro_batches=(1,), recomputes=("selective",), interleaves=(1,), cps=(1, 2, 3), zeros=(1, 3))
    made = list(splits(base, 4, **kw))
    assert len(made) == split_count(4, **kw)
    assert {(c.cp, c.zero_stage) for c, why in made if why is None} == {(1, 1), (1, 3), (2, 1), (2, 3)}
    assert [why for c, why in made if c.cp == 3] == ["context-parallel degree 3 does not divide 4 GPUs"]
    df, skipped = sweep(base, 4, SELENE, tmp_path, **kw)
    assert set(df["cp"]) == {1, 2} and set(df["zero"]) == {1, 3} and all(skipped["reason"])
    assert list(df["iteration_s"][df["fits"]]) == sorted(df["iteration_s"][df["fits"]])


def test_sweep_takes_megatrons_embedding_and_loss_split_where_p_does_not_divide():
    from mhlo_cost.studies.plan.search import splits

    base = ScaleConfig(**{**TINY, "layers": 6}, global_batch=8)
    p4 = [c for c, why in splits(base, 4, micro_batches=(1,), recomputes=("selective",), interleaves=(1,))
          if c.p == 4]
    assert [c.stage_layers() for c in p4] == [(1, 2, 2, 1)] and p4[0].invalid() is None


@pytest.mark.parametrize("extra,says", [
    (["--sweep-cp", "2"], "--sweep-cp goes with --sweep"),
    (["--sweep", "4", "--sweep-zero", "1", "--fsdp"], "--sweep-zero sweeps the ZeRO stage"),
    (["--sweep", "4", "--sweep-cp", "1,0"], "--sweep-cp: a context-parallel degree is a positive integer"),
])
def test_sweep_options_are_checked(capsys, extra, says):
    assert main(ARGS + extra) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1
