"""Full recompute under torch.compile (issue 38, torchtitan's 70B / 405B rows: ``execution`` inductor, ``recompute``
full). torchtitan 9dec370 wraps each block in ``ptd_checkpoint_wrapper`` (``apply_ac``) and then compiles it
(``apply_compile``, torchtitan/parallelisms/parallelize_llama.py); AOTAutograd's min-cut partitioner
(torch/_functorch/partitioners.py) recomputes, of the checkpointed region, the nodes the backward graph reads,
collectives of the user's AC region included. Worked out here on the block as torchtitan's DTensor plan runs it:
the backward reads each mm's input (its weight gradient, tools/autograd/derivatives.yaml ``mm``), SDPA's q, k, v and
output, SiLU's input, the product's two inputs and the residual add's output (the ffn norm's input); nothing inside
the region is saved, so what those need is recomputed, transitively: every op but w2's mm and its reduce_scatter.
Megatron's reentrant ``tensor_parallel.checkpoint`` (``compiled``) and the eager rows keep the whole forward."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost.studies.plan.compose import tp_collectives
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.recompute import recompute_flops, recompute_seconds

#: One block's forward (name, op kind, inputs), the norms folded into the gathers that read their output.
BLOCK = [("ag1", "all_gather", ["x"]), ("wq", "mm", ["ag1"]), ("wk", "mm", ["ag1"]), ("wv", "mm", ["ag1"]),
         ("sdpa", "sdpa", ["wq", "wk", "wv"]), ("wo", "mm", ["sdpa"]), ("rs1", "reduce_scatter", ["wo"]),
         ("h", "add", ["x", "rs1"]), ("ag2", "all_gather", ["h"]), ("w1", "mm", ["ag2"]), ("w3", "mm", ["ag2"]),
         ("silu", "silu", ["w1"]), ("mul", "mul", ["silu", "w3"]), ("w2", "mm", ["mul"]),
         ("rs2", "reduce_scatter", ["w2"]), ("out", "add", ["h", "rs2"])]


def _recomputed() -> set[str]:
    ops = {n: ins for n, _, ins in BLOCK}
    need = [i for _, k, ins in BLOCK if k == "mm" for i in ins] + ["wq", "wk", "wv", "sdpa", "w1", "mul", "w3", "h"]
    out, todo = set(), list(need)
    while todo:
        n = todo.pop()
        if n in ops and n not in out:
            out.add(n)
            todo.extend(ops[n])
    return out


SMALL = dict(layers=2, hidden=64, heads=4, seq=32, vocab=128, global_batch=1, recompute="full")


@pytest.mark.parametrize("sp", [True, False])
def test_the_recompute_runs_every_collective_but_the_last(sp):
    again = _recomputed()
    assert {n for n, _, _ in BLOCK} - again == {"w2", "rs2", "out"}
    cfg = ScaleConfig(**SMALL, t=2, sp=sp, execution="inductor")
    bwd, eager = {}, {}
    for kind, n in tp_collectives(cfg)["backward"]:
        bwd[kind] = bwd.get(kind, 0) + n
    for kind, n in tp_collectives(cfg.with_split(execution="eager"))["backward"]:
        eager[kind] = eager.get(kind, 0) + n
    if sp:  # the backward's own 2 + 2, then the recompute's ag1, ag2 and rs1 (eager: the whole forward's 2 + 2)
        assert bwd == {"all_gather": 2 + 2, "reduce_scatter": 2 + 1}
        assert eager == {"all_gather": 2 + 2, "reduce_scatter": 2 + 2}
    else:  # all_reduces: the backward's 2, the recompute's wo one (eager: 2)
        assert bwd == {"all_reduce": 2 + 1} and eager == {"all_reduce": 2 + 2}


def test_the_recompute_flops_are_the_forward_but_w2():
    """A Llama layer (h 256, 8 heads of 32, 2 kv heads, ffn 512, t 2, b 2, s 64, sequence parallel) lowered and
    walked: the recompute's GEMM FLOPs are the forward's less w2's 2 b s (ffn/t) h, every GEMM written out here."""
    from mhlo_cost.network import resolve_profile
    from mhlo_cost.studies.plan.costs import layer_cost

    b, s, h, a, kv, f, t = 2, 64, 256, 8, 2, 512, 2
    d = h // a
    cfg = ScaleConfig(layers=2, hidden=h, heads=a, kv_heads=kv, ffn=f, seq=s, vocab=128, micro_batch=b,
                      global_batch=b, t=t, sp=True, arch="llama", mlp_kind="swiglu", attention="fused",
                      execution="inductor", recompute="full")
    cost = layer_cost(cfg, resolve_profile("h100-sxm"))
    proj = 2 * b * s * h * (h // t + 2 * kv * d // t + h // t)  # wq, wk, wv, wo
    scores = 2 * 2 * b * (a // t) * s * s * d  # q k^T and p v, as the program writes them
    w13, w2 = 2 * b * s * h * 2 * (f // t), 2 * b * s * (f // t) * h
    assert cost.gemm_flops["forward"] == proj + scores + w13 + w2
    assert recompute_flops(cfg, cost.gemm_flops) == proj + scores + w13
    assert recompute_flops(cfg.with_split(execution="eager"), cost.gemm_flops) == proj + scores + w13 + w2


def test_the_recompute_seconds_take_the_forward_attention():
    """The program's recompute phase with its attention (scope core) at the forward's call's seconds: 3 - 1.25 +
    1 (the remade attention's 1.25 s replaced by the forward's 1 s); eager and Megatron: the forward, 5."""
    time_s = {"forward": 5.0, "backward": 9.0, "recompute": 3.0, "optimizer": 0.0}
    core = {"forward": 1.0, "backward": 2.0, "recompute": 1.25, "optimizer": 0.0}
    cfg = ScaleConfig(**SMALL, execution="inductor", attention="fused")
    assert recompute_seconds(cfg, time_s, core) == 2.75
    assert recompute_seconds(cfg.with_split(execution="eager"), time_s, core) == 5.0
    assert recompute_seconds(cfg.with_split(execution="compiled"), time_s, core) == 5.0
    assert recompute_seconds(cfg.with_split(recompute="op"), time_s, core) == 3.0


def test_a_moe_model_keeps_the_whole_forward():
    """A MoE model's full recompute under torch.compile is priced as the whole forward, as its token exchange
    (moe_sharding: every forward collective again), launches and TP overlap are: the recompute seconds are the
    forward's 5, its collectives all of the forward's (the last scatter too)."""
    from mhlo_cost.studies.plan.recompute import compiled_full, recomputed_collectives

    time_s = {"forward": 5.0, "backward": 9.0, "recompute": 3.0, "optimizer": 0.0}
    cfg = ScaleConfig(**SMALL, execution="inductor", attention="fused", experts=4, top_k=2, t=2, sp=True)
    assert compiled_full(cfg.with_split(experts=0, top_k=0))
    assert not compiled_full(cfg)
    assert recompute_seconds(cfg, time_s, {"forward": 1.0, "recompute": 1.25}) == 5.0
    fwd = (("all_gather", 2), ("reduce_scatter", 2))
    assert recomputed_collectives(cfg, fwd) == fwd
