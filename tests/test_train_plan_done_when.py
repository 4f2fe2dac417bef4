"""Issue 38's Done-when, items (a) and (b): the gaps an audit of the train-plan tests found, each filled against a
closed form worked out here from the option's definition (never from the code under test):

* HSDP under ZeRO 1, 2 and 3: every collective's bytes and group (reduce-scatter of the fp32 gradients over the
  sharding group of s ranks, all-reduce of the 1/s shard over the r replicas, bf16 parameter gathers), their seconds
  on one NVLink node ((s-1)/s x S for a gather or reduce-scatter ring, 2 (r-1)/r x S for an all-reduce ring, over
  300 GB/s x 0.8 as tests/test_train_plan_sharding.py takes Selene's NVLink), and memory per GPU under ZeRO 1 / 2;
* context parallelism with ZeRO: the state and the gradients shard over cp x d, the gradient collectives run over
  those cp x d ranks; the all-gathered K/V variant exposed whole (not overlapped);
* uneven pipeline stages: each stage's weights, gradients and optimizer state per GPU from its own layer count;
* compiled vs eager execution: the same collectives, bytes and memory of the weights, gradients and state;
* item (b): STDiT3 with ZeRO 2 + Ulysses on 8 and 64 GPUs and DeepSeek-V3 with EP on 256 GPUs, planned from the
  command line as docs/train-plan.md shows them, each printing its iteration time, memory per GPU and comm.

Layer parameters (one tensor rank of TINY's GPT layer): QKV, projection, fc1, fc2 weights and biases, two
LayerNorms, as tests/test_train_plan_sharding.py writes them out."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("optax")

from mhlo_cost.cli import main
from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost, layer_cost
from mhlo_cost.studies.plan.memory import memory
from mhlo_cost.studies.plan.sharding import cp_collectives, dp_collectives

TINY = dict(layers=4, hidden=64, heads=4, seq=32, vocab=128)
SELENE = resolve_profile("selene")
NVLINK = 300e9 * 0.8  # Selene's NVLink: achievable bytes/s per direction


def _params(h: int = 64, f: int = 256, t: int = 1) -> int:
    """One tensor rank's layer parameters: QKV, projection, fc1, fc2 weights and biases, two LayerNorms."""
    return (3 * h * h + h * h + 2 * h * f) // t + (3 * h + f) // t + 2 * h + 4 * h


def _fake(fwd: float, bwd: float, w: int, core: dict | None = None) -> LayerCost:
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    return LayerCost("k", "chip", dict(zero), dict(zero),
                     {"forward": fwd, "backward": bwd, "recompute": 0.0, "optimizer": 0.0},
                     weight_elems=w, weight_bytes=2 * w, **({"core_s": core} if core else {}))


def _rows(rows) -> list:
    return sorted((r.what, r.kind, r.nbytes, r.size, r.per) for r in rows)


# --- HSDP: shard within a group of s, replicate across r ------------------------------------------------------

@pytest.mark.parametrize("zero", [1, 2, 3])
def test_hsdp_every_collective_bytes_and_group(zero):
    """d 8 = s 4 x r 2, t 2, 4 layers of P weights a device: ZeRO 3 gathers 2P bf16 forward and backward and
    reduce-scatters 4P fp32 per layer over s, then all-reduces the 4P/s shard over r; ZeRO 2 the same per layer
    without the gathers, and all-gathers 2 n P after the step; ZeRO 1 reduce-scatters 4 n P once an iteration and
    all-reduces its 4 n P / s shard over r."""
    cfg = ScaleConfig(**TINY, t=2, d=8, global_batch=8, zero=zero, dp_shard=4)
    s, r, n, P = 4, 2, 4, _params(t=2)
    rows = dp_collectives(cfg, layer_cost(cfg, SELENE), n)
    want = {
        3: [("parameters", "all_gather", 2 * P, s, "layer_forward"),
            ("parameters", "all_gather", 2 * P, s, "layer_backward"),
            ("gradients", "reduce_scatter", 4 * P, s, "layer_backward"),
            ("gradient shard", "all_reduce", 4 * P // s, r, "layer_backward")],
        2: [("gradients", "reduce_scatter", 4 * P, s, "layer_backward"),
            ("gradient shard", "all_reduce", 4 * P // s, r, "layer_backward"),
            ("parameters", "all_gather", 2 * n * P, s, "iteration")],
        1: [("gradients", "reduce_scatter", 4 * n * P, s, "iteration"),
            ("gradient shard", "all_reduce", 4 * n * P // s, r, "iteration"),
            ("parameters", "all_gather", 2 * n * P, s, "iteration")],
    }[zero]
    assert _rows(rows) == sorted(want)
    for row in rows:  # tensor rank 0's groups: s consecutive data ranks (t apart), or one rank of each group
        assert row.groups[0] == ((0, 2, 4, 6) if row.size == s else (0, 8))


def test_hsdp_seconds_on_one_node_are_the_rings_closed_forms():
    """t 1, d 8 on one Selene node (NVLink, 300 GB/s x 0.8), s 4 x r 2, FSDP, 4 layers of W = 500 M weights,
    2 micro-batches: per layer and micro-batch two gathers of 2W over 4 ranks (3/4 x 2W each), a reduce-scatter of 4W
    (3/4 x 4W) and the shard's all-reduce over 2 ranks (2 x 1/2 x 4W/4); the layer's compute (1 us) hides none of
    it."""
    w = 500_000_000
    cfg = ScaleConfig(**TINY, d=8, global_batch=16, zero=3, dp_shard=4)
    it = compose(cfg, _fake(1e-6, 1e-6, w), SELENE)
    gather = 3 / 4 * 2 * w / NVLINK
    scatter = 3 / 4 * 4 * w / NVLINK
    reduce = 2 * (2 - 1) / 2 * (4 * w // 4) / NVLINK
    assert it.dp_total == pytest.approx(2 * 4 * (2 * gather + scatter + reduce), rel=0.01)
    assert it.dp_exposed == pytest.approx(it.dp_total - 2 * 4 * 2e-6, rel=0.01)


@pytest.mark.parametrize("zero", [1, 2])
def test_hsdp_memory_per_gpu_under_zero1_and_zero2(zero):
    """d 4 = s 2 x r 2, t 2, 4 layers: the state (fp32 master + 2 moments, optax's int32 step count) over s; ZeRO 2's
    fp32 gradients over s plus the one layer being reduced; the bf16 weights whole. One stage: the embedding and the
    untied LM head, V/t x h each, sharded as the layers."""
    cfg = ScaleConfig(**TINY, t=2, d=4, global_batch=8, zero=zero, dp_shard=2)
    P, n, s, e = _params(t=2), 4, 2, 2 * 128 // 2 * 64
    m = memory(cfg, layer_cost(cfg, SELENE))
    assert m["optimizer_state"] == (12 * P + 4) * n // s + 12 * e // s
    assert m["gradients"] == (4 * P * n // s + 4 * P + 4 * e // s if zero == 2 else 4 * P * n + 4 * e)
    assert m["weights"] == 2 * P * n + 2 * e


# --- context parallelism with ZeRO ----------------------------------------------------------------------------

@pytest.mark.parametrize("zero", [1, 2, 3])
def test_cp_shards_zero_over_cp_times_d(zero):
    """cp 2 x d 2, t 1: the weights are replicated over the 4 context and data ranks, so ZeRO shards over 4 and the
    gradient collectives run over the 4 (ranks c + 2 r)."""
    cfg = ScaleConfig(**TINY, cp=2, d=2, global_batch=4, zero=zero)
    P, n, shard, e = _params(), 4, 4, 2 * 128 * 64  # e: the embedding and the untied LM head
    cost = layer_cost(cfg, SELENE)
    m = memory(cfg, cost)
    assert m["optimizer_state"] == (12 * P + 4) * n // shard + 12 * e // shard
    assert m["gradients"] == (4 * P * n // shard + 4 * P + 4 * e // shard if zero >= 2 else 4 * P * n + 4 * e)
    held = min(2, n)  # FSDP: the running and the prefetched layer, gathered
    assert m["weights"] == (2 * P * n // shard + 2 * P * held + 2 * e // shard if zero == 3 else 2 * P * n + 2 * e)
    rows = dp_collectives(cfg, cost, n)
    assert {r.size for r in rows} == {shard} and {r.groups[0] for r in rows} == {(0, 1, 2, 3)}
    grads = [r.nbytes for r in rows if r.what == "gradients"]
    assert grads == ([4 * P * n] if zero == 1 else [4 * P])


def test_cp_all_gathered_kv_is_exposed_whole():
    """cp 4 on one node, K and V b x s/cp x h bf16 each: forward all-gathers cp x that, the backward again and
    reduce-scatters dK/dV as large, each 3/4 x S over NVLink and none overlapped: the whole is exposed (2 layers,
    1 micro-batch), however long the attention."""
    cfg = ScaleConfig(layers=2, hidden=8192, heads=64, seq=65536, vocab=128, cp=4, micro_batch=1, global_batch=1,
                      cp_comm="all_gather")
    kv = 2 * 1 * (65536 // 4) * 8192 * 2
    assert [(c.kind, c.nbytes, c.per) for c in cp_collectives(cfg)] == [
        ("all_gather", 4 * kv, "layer_forward"), ("all_gather", 4 * kv, "layer_backward"),
        ("reduce_scatter", 4 * kv, "layer_backward")]
    one = 3 / 4 * 4 * kv / NVLINK
    core = {"forward": 10.0, "backward": 10.0}  # an attention far longer than the exchange
    it = compose(cfg, _fake(1.0, 1.0, 1000, core), SELENE)
    assert it.cp_comm == pytest.approx(2 * 3 * one, rel=0.01)


# --- uneven pipeline stages -----------------------------------------------------------------------------------

def test_uneven_stages_memory_follows_each_stages_layers():
    """9 layers on 4 stages, first 1 and last 2 (1, 3, 3, 2), ZeRO 1 over d 2: each stage's bf16 weights, fp32
    gradients and sharded state are its own layers', and the first stage's embedding and the last's LM head
    (V x h each, untied) with theirs."""
    cfg = ScaleConfig(**{**TINY, "layers": 9}, p=4, d=2, global_batch=8, zero=1, first_stage_layers=1,
                      last_stage_layers=2)
    P = _params()
    cost = layer_cost(cfg, SELENE)
    got = [memory(cfg, cost, stage=s) for s in range(4)]
    assert [(m["weights"], m["gradients"], m["optimizer_state"]) for m in got] == [
        (2 * (P * n + e), 4 * (P * n + e), (12 * P + 4) * n // 2 + 12 * e // 2)
        for n, e in ((1, 128 * 64), (3, 0), (3, 0), (2, 128 * 64))]


# --- compiled vs eager ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("execution", ["compiled", "eager", "inductor"])
def test_the_execution_changes_no_collective_and_no_state(execution):
    """FSDP over d 4, fused attention: how the step runs (fused kernels, PyTorch eager, torch.compile) leaves the
    collectives (2P gathered twice, 4P reduce-scattered per layer) and the bf16 shard + two gathered layers, fp32
    gradient shard + one layer, and the sharded state as they are."""
    cfg = ScaleConfig(**TINY, d=4, global_batch=4, zero=3, attention="fused", execution=execution)
    P, n = _params(), 4
    cost = layer_cost(cfg, SELENE)
    assert _rows(dp_collectives(cfg, cost, n)) == sorted([
        ("parameters", "all_gather", 2 * P, 4, "layer_forward"), ("parameters", "all_gather", 2 * P, 4,
                                                                  "layer_backward"),
        ("gradients", "reduce_scatter", 4 * P, 4, "layer_backward")])
    m = memory(cfg, cost)
    e = 2 * 128 * 64  # the embedding and the untied LM head, sharded as the layers
    assert (m["weights"], m["gradients"], m["optimizer_state"]) == (
        2 * P * n // 4 + 2 * 2 * P + 2 * e // 4, 4 * P * n // 4 + 4 * P + 4 * e // 4,
        (12 * P + 4) * n // 4 + 12 * e // 4)


# --- item (b): end to end from the command line ---------------------------------------------------------------

def _plan_text(argv, capsys) -> str:
    assert main(["train-plan", *argv, "--no-cache"]) == 0
    return capsys.readouterr().out


def _seconds(text: str) -> float:
    return float(re.search(r"^TOTAL\s+([0-9.e+-]+)", text, re.M).group(1))


@pytest.mark.slow
@pytest.mark.parametrize("gpus, extra", [(8, []), (64, ["-d", "8"])])
def test_stdit3_zero2_ulysses_on_8_and_64_gpus_from_the_command_line(gpus, extra, capsys):
    """docs/train-plan.md's STDiT3 commands: 51 frames of 1280x720 (T 15, 45 x 80 = 3600 tokens a frame), Ulysses
    8 within a DGX H100 node, ZeRO 2 over the 8 x d ranks: each spatial block's all_to_all moves (8-1)/8 of one
    rank's 15 x 3600/8 tokens x 1152 x 2 bytes; it prints the iteration, memory per GPU and comm per step."""
    text = _plan_text(["--model", "stdit3", "--shape", "51_1280_720", "--ulysses", "8", *extra, "--zero", "2",
                       "--hardware", "dgx-h100"], capsys)
    assert f"on {gpus} GPUs" in text and "zero2" in text and _seconds(text) > 0
    assert re.search(r"^memory per GPU .*total [0-9.]+ GiB; fits", text, re.M)
    sent = re.search(r"^comm per step per GPU: ([0-9,]+) bytes sent", text, re.M)
    assert sent and int(sent.group(1).replace(",", "")) > 0
    assert f"all_to_all of {2 * 15 * (3600 // 8) * 1152:,} bytes over 8 ranks" in text
    assert "reduce_scatter of" in text and f"over {gpus} ranks" in text


@pytest.mark.slow
def test_deepseek_v3_with_ep_on_256_gpus_from_the_command_line(capsys):
    """DeepSeek-V3 on 256 H100 as benchmarks/moe_deepseek_v3.py plans it (p 16, first stage 4 layers, last 1, d 16,
    EP 16, ZeRO 1, full recompute, 1920 sequences of 4096): 120 micro-batches of 1; each MoE layer's dispatch
    and combine move T k h bf16 = 4096 x 8 x 7168 x 2 bytes, (16-1)/16 of it sent; it prints the iteration, memory
    per GPU and the all-to-all's bytes per step."""
    text = _plan_text(["--model", "deepseek-v3", "-p", "16", "-d", "16", "--ep", "16", "--global-batch", "1920",
                       "--zero", "1", "--decoder-first-pipeline-num-layers", "4",
                       "--decoder-last-pipeline-num-layers", "1", "--attention", "fused", "--recompute", "full",
                       "--hardware", "dgx-h100"], capsys)
    assert "on 256 GPUs" in text and "120 micro-batches of 1" in text and _seconds(text) > 0
    assert re.search(r"^memory per GPU .*total [0-9.]+ GiB; fits", text, re.M)
    s = 4096 * 8 * 7168 * 2
    assert f"6 of S = {s:,} bytes over 16 ranks" in text  # dispatch, combine, each way, and the recompute's two
    assert f"{6 * s * 15 // 16:,} bytes sent per GPU" in text
