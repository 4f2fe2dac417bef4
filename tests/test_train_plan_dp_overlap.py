"""The data-parallel reduction overlapped as Megatron-Core's DistributedDataParallel runs it (``ddp="megatron"``),
and the word embedding / LM head in the data-parallel collectives and the optimizer step, each against a closed form
worked out here. Collective times are the network model's own (:func:`mhlo_cost.network.estimate`, checked against
nccl-tests factors elsewhere); what is checked is which collectives (how many bytes, which ranks) the schedule
leaves exposed and when."""
from __future__ import annotations

import pytest

from mhlo_cost.network import estimate, resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost
from mhlo_cost.studies.plan.dp_overlap import (bucket_elems, buckets, gather_exposed, layer_pieces, reduce_exposed,
                                               stage_extra, stage_units, torch_bucketed)
from mhlo_cost.studies.plan.sharding import dp_collectives, optimizer_extra_elems

SELENE = resolve_profile("selene")
TINY = dict(layers=4, hidden=64, heads=4, seq=32, vocab=128)  # V/t x h = 4096 with t = 2
MEGATRON = dict(zero=1, dp_overlap=True, ddp="megatron", overlap_param_gather=True)


def _fake(fwd, bwd, w, opt=0.0) -> LayerCost:
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    return LayerCost("k", "chip", dict(zero), dict(zero),
                     {"forward": fwd, "backward": bwd, "recompute": 0.0, "optimizer": opt},
                     weight_elems=w, weight_bytes=2 * w)


def _t(kind, nbytes, groups) -> float:
    return estimate(SELENE.topology, kind, nbytes, groups).time_s


def test_the_default_bucket_is_40m_elements_or_1m_per_data_rank():
    """Megatron-Core: ``max(40000000, 1000000 x get_data_parallel_world_size())``, the data ranks without the
    context ranks (the call takes no ``with_context_parallel``); a given size wins."""
    assert bucket_elems(ScaleConfig(**TINY, d=8, cp=2)) == 40_000_000
    assert bucket_elems(ScaleConfig(**TINY, d=64)) == 64_000_000
    assert bucket_elems(ScaleConfig(**TINY, d=32, cp=2)) == 40_000_000
    assert bucket_elems(ScaleConfig(**TINY, d=48, cp=2)) == 48_000_000
    assert bucket_elems(ScaleConfig(**TINY, d=64, ddp_bucket_size=128 * 2 ** 20)) == 134_217_728


def test_a_bucket_closes_once_it_holds_the_bucket_size():
    """Sizes 30, 30, 50, 10 into buckets of 50: 30 + 30 = 60 closes at the second; 50 alone; 10 left over."""
    assert buckets([(30, -4.0), (30, -3.0), (50, -2.0), (10, 0.0)], 50) == [(60, -3.0), (50, -2.0), (10, 0.0)]
    assert buckets([(100, -1.0)], 50) == [(100, -1.0)]


def test_reductions_queue_on_one_stream_and_only_their_tail_is_exposed():
    """Launched at -3, -1 and 0 taking 1, 1 and 2: the first ends at -2, the second at 0, the last at 2 (exposed 2).
    Launched at -2, -1, 0 taking 3, 1, 1: each waits for the one before: 1, 2, 3 (exposed 3)."""
    assert reduce_exposed([(-3.0, 1.0), (-1.0, 1.0), (0.0, 2.0)]) == 2.0
    assert reduce_exposed([(-2.0, 3.0), (-1.0, 1.0), (0.0, 1.0)]) == 3.0
    assert reduce_exposed([(-5.0, 1.0)]) == 0.0


def test_gathers_are_prefetched_one_ahead_and_a_wait_delays_the_rest():
    """Needed at 0, 2, 4 taking 1, 1, 5: the first two launched at the start (the first waited for: 1, the second
    done at 2, in time); the third launched when the second is needed (2 + the delay 1 = 3), done at 8, needed at
    4 + 1: a further wait of 3, 4 in all."""
    assert gather_exposed([(0.0, 1.0), (2.0, 1.0), (4.0, 5.0)]) == 4.0
    assert gather_exposed([(0.0, 1.0), (5.0, 1.0)]) == 1.0


def test_interleaved_chunks_launch_at_their_last_backward_the_embeddings_chunk_last():
    """p 2, v 2, 2 layers a stage of w 1000: the first stage's chunk 1 (one layer) launches p = 2 chunk-backwards
    before the end, its chunk 0 (one layer + the 4096-element embedding) at the end; the last stage's chunk 1 holds
    the LM head, and its chunk 0 ends 1 chunk-backward before the first stage's."""
    cfg = ScaleConfig(**TINY, t=2, p=2, d=2, interleave=2, global_batch=8, **MEGATRON)
    assert stage_extra(cfg, 0, 4096) == (0, 4096) and stage_extra(cfg, 1, 4096) == (4096, 0)
    assert stage_units(cfg, 0, 2, 1000, (0, 4096), 0.5) == [(1000, -1.0), (5096, 0.0)]
    assert stage_units(cfg, 1, 2, 1000, (4096, 0), 0.5) == [(5096, -1.0), (1000, -0.5)]


def test_one_stage_buckets_its_last_backward_the_embedding_in_the_last_bucket():
    """p 1, 4 layers of 1000, untied head and embedding of 4096 each, buckets of 2500: the head alone (ready at the
    backward's start), then 3 layers (3000, after the third layer), then the last layer with the embedding (5096,
    at the end)."""
    cfg = ScaleConfig(**TINY, t=2, d=8, global_batch=8, ddp_bucket_size=2500, **MEGATRON)
    assert stage_extra(cfg, 0, 8192) == (4096, 4096)
    assert stage_units(cfg, 0, 4, 1000, (4096, 4096), 4.0) == [(4096, -4.0), (3000, -1.0), (5096, 0.0)]


def test_megatron_core_exposes_the_first_chunks_reduce_scatter_and_all_gather():
    """p 2, v 2, d 2, t 2, w 1000, layers of 1 ms forward / 2 ms backward (the tiny collectives take microseconds):
    the later chunks' reductions end under the cooldown and their gathers under the warm-up, so the iteration waits
    for the first stage's chunk 0 only, its layer and the embedding: a reduce-scatter of 4 x 5096 bytes and an
    all-gather of 2 x 5096 over the 2 data ranks of each tensor rank, where the old rule exposed the whole stage's
    reduction less one chunk's backward. The second stage's four collectives (its chunks' reduce-scatters before
    the first stage's end, its gathers under the forward) all run beside compute, on 24 of the A100's 108 SMs
    (NCCL's channels): 24/108 of them is added (the most any stage runs beside its compute)."""
    cfg = ScaleConfig(**TINY, t=2, p=2, d=2, interleave=2, global_batch=8, **MEGATRON)
    it = compose(cfg, _fake(1e-3, 2e-3, 1000), SELENE)
    groups = ((0, 2), (1, 3))
    beside = (_t("reduce_scatter", 4 * 1000, groups) + _t("reduce_scatter", 4 * 5096, groups)
              + _t("all_gather", 2 * 1000, groups) + _t("all_gather", 2 * 5096, groups))
    expected = _t("reduce_scatter", 4 * 5096, groups) + _t("all_gather", 2 * 5096, groups) + beside * 24 / 108
    assert expected > 0
    assert it.dp_exposed == pytest.approx(expected, rel=1e-9)
    whole = _t("reduce_scatter", 4 * 6096, groups) + _t("all_gather", 2 * 6096, groups)
    assert it.dp_total == pytest.approx(whole, rel=1e-9)  # the first stage's whole reduction is still counted


def test_without_the_param_gather_overlap_the_whole_all_gather_is_exposed():
    """The same stage with ``overlap_param_gather`` off: after the step each chunk's all-gather (one bucket a chunk:
    2 x 5096 and 2 x 1000 bytes) runs in turn, exposed whole, beside the first chunk's reduce-scatter; the second
    stage's two reduce-scatters ran beside its compute, on 24 of 108 SMs: 24/108 of them added."""
    cfg = ScaleConfig(**TINY, t=2, p=2, d=2, interleave=2, global_batch=8,
                      **(MEGATRON | {"overlap_param_gather": False}))
    it = compose(cfg, _fake(1e-3, 2e-3, 1000), SELENE)
    groups = ((0, 2), (1, 3))
    beside = _t("reduce_scatter", 4 * 1000, groups) + _t("reduce_scatter", 4 * 5096, groups)
    expected = (_t("reduce_scatter", 4 * 5096, groups) + _t("all_gather", 2 * 5096, groups)
                + _t("all_gather", 2 * 1000, groups) + beside * 24 / 108)
    assert it.dp_exposed == pytest.approx(expected, rel=1e-9)


def test_the_distributed_optimizer_reduces_gathers_and_steps_the_embedding():
    """Megatron's distributed optimizer (ZeRO 1, reduce_scatter), t 2, p 2, d 2, 2 layers of w 1000 a stage: the
    first stage reduce-scatters 4 x (2 w + 4096) bytes and all-gathers 2 x (2 w + 4096); its step takes its shard
    of the 4096 embedding elements too: (2 + 4096 / w) x the layer's step / 2."""
    w = 1000
    cfg = ScaleConfig(**TINY, t=2, p=2, d=2, global_batch=8, zero=1)
    extra = optimizer_extra_elems(cfg, 0)
    assert extra == 4096 and optimizer_extra_elems(cfg, 1) == 4096
    assert optimizer_extra_elems(cfg.with_split(zero=3), 0) == 0
    rows = [(r.kind, r.nbytes) for r in dp_collectives(cfg, _fake(1.0, 1.0, w), 2, extra)]
    assert rows == [("reduce_scatter", 4 * (2 * w + 4096)), ("all_gather", 2 * (2 * w + 4096))]
    it = compose(cfg, _fake(1e-3, 2e-3, w, opt=1e-3), SELENE)
    assert it.optimizer == pytest.approx((2 + 4096 / w) * 1e-3 / 2, rel=1e-12)
    replicated = compose(cfg.with_split(zero=0), _fake(1e-3, 2e-3, w, opt=1e-3), SELENE)
    assert replicated.optimizer == pytest.approx(2 * 1e-3, rel=1e-12)  # ZeRO 0: the layers' step only


@pytest.mark.parametrize("kw, why", [
    (dict(ddp="torch"), "ddp must be one of"),
    (dict(ddp="megatron"), "needs dp_overlap"),
    (dict(ddp="megatron", dp_overlap=True, zero=3), "needs dp_overlap"),
    (dict(overlap_param_gather=True), "need ddp megatron"),
    (dict(ddp="megatron", dp_overlap=True, overlap_param_gather=True), "distributed optimizer"),
    (dict(ddp_bucket_size=-1), "ddp_bucket_size must be"),
])
def test_megatron_options_that_cannot_go_together_are_refused(kw, why):
    assert why in ScaleConfig(**TINY, d=2, global_batch=2, **kw).invalid()


ARGS = ["train-plan", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128", "-d", "2",
        "--global-batch", "2"]


def test_the_command_line_refuses_the_param_gather_overlap_without_the_distributed_optimizer(capsys):
    from mhlo_cost.cli import main

    assert main(ARGS + ["--overlap-grad-reduce", "--overlap-param-gather"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mhlo-cost: error:") and "distributed optimizer" in err and err.count("\n") == 1


def test_the_command_line_prices_megatron_cores_overlap(capsys, tmp_path, monkeypatch):
    """``--overlap-grad-reduce --overlap-param-gather --zero 1`` on a model far smaller than the default bucket
    (40M elements): one bucket, all of the stage's gradients and embeddings, made at the backward's end and
    gathered before the forward's start, so exposed as whole as without the overlap; with buckets of 1000 elements
    (one a layer) the plan changes."""
    import json

    from mhlo_cost.cli import main

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    over = ["--overlap-grad-reduce", "--overlap-param-gather"]
    runs = []
    for extra in ([], over, over + ["--ddp-bucket-size", "1000"]):
        assert main(ARGS + ["--zero", "1", "--format", "json"] + extra) == 0
        runs.append(json.loads(capsys.readouterr().out)["config"]["dp_exposed_s"])
    assert runs[0] > 0
    assert runs[1] == pytest.approx(runs[0], rel=1e-12)
    assert runs[2] != pytest.approx(runs[0], rel=1e-6)


TORCH_DDP = dict(torch_ddp=True, dp_overlap=True, grad_reduce_fp32=False, tied_embedding=True)


def test_a_layer_is_made_in_pieces_of_a_bucket_at_most_in_proportion_to_its_weights():
    """10 weights over 1 s from 0 in pieces of at most 4: 3 pieces (cuts 0, 3, 6, 10), each ready at its share."""
    assert layer_pieces(10, 0.0, 1.0, 4) == [(3, 0.3), (3, 0.6), (4, 1.0)]
    assert layer_pieces(8, -2.0, 1.0, 8) == [(8, -1.0)]


def test_pytorch_ddps_first_bucket_closes_at_its_own_smaller_cap():
    """First cap 500 000, then 1 000 000: 300 000 + 300 000 closes the first at -2; 900 000 + 200 000 the next."""
    params = [(300_000, -3.0), (300_000, -2.0), (900_000, -1.5), (200_000, -1.0), (5, 0.0)]
    assert buckets(params, 1_000_000, 500_000) == [(600_000, -2.0), (1_100_000, -1.0), (5, 0.0)]


def test_pytorch_ddps_buckets_are_25_mib_of_its_2_byte_gradients():
    """torch/nn/parallel/distributed.py: bucket_cap_mb = 25, x 1024 x 1024 bytes; 2-byte gradients: 13 107 200
    elements. Only with dp_overlap on one stage; Megatron-Core's rule otherwise."""
    assert bucket_elems(ScaleConfig(**TINY, d=8, global_batch=8, **TORCH_DDP)) == 25 * 1024 * 1024 // 2
    pipelined = ScaleConfig(**TINY, d=8, p=2, global_batch=8, **TORCH_DDP)
    assert not torch_bucketed(pipelined) and bucket_elems(pipelined) == 40_000_000  # Megatron-Core's default


def test_pytorch_ddp_exposes_the_reduction_of_its_last_bucket_with_the_tied_embedding():
    """One stage, 4 layers of 30 000 000 weights, 1 s of backward each (a micro-batch: 4 s); buckets of 13 107 200
    elements: each layer in 3 pieces of 10 000 000 (ready at 1/3, 2/3, 1 of its backward); the first bucket
    (1 MiB: 524 288) closes on the first piece, then every two pieces close one (20 000 000), the twelfth piece and
    the tied embedding (V x h = 8192, made last) the last, at the backward's end: its all-reduce (2-byte gradients,
    8 data ranks) is what the iteration waits for (the others, tiny against the layers' seconds, end before it);
    the rest run beside the backward on 24 of the A100's 108 SMs (NCCL's channels)."""
    cfg = ScaleConfig(**TINY, d=8, global_batch=8, **TORCH_DDP)
    w = 30_000_000
    units = stage_units(cfg, 0, 4, w, (0, 8192), 4.0)
    assert [e for e, _ in units] == [10_000_000] + [20_000_000] * 5 + [10_008_192]
    assert [round(at, 9) for _, at in units] == [round(-4 + 1 / 3, 9), -3.0, round(-2 - 1 / 3, 9),
                                                 round(-1 - 2 / 3, 9), -1.0, round(-1 / 3, 9), 0.0]
    it = compose(cfg, _fake(1.0, 1.0, w), SELENE)
    group = (tuple(range(8)),)
    last = _t("all_reduce", 2 * 10_008_192, group)
    beside = _t("all_reduce", 2 * 10_000_000, group) + 5 * _t("all_reduce", 2 * 20_000_000, group)
    assert 0 < last < 1.0 / 3
    assert it.dp_exposed == pytest.approx(last + beside * 24 / 108, rel=1e-9)
