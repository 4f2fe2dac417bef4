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


def test_the_recompute_seconds_are_the_forward_but_w2():
    """A Llama layer (h 1024, 8 heads, 2 kv heads, ffn 4096, s 2048, no dropout) lowered and priced: the compiled
    full recompute (the partitioner's rule worked out above: every op but w2's mm and what reads it) is the forward's
    seconds less the forward's kernels from w2's GEMM on (the GEMM and the residual add, read off the roofline's
    forward kernels), within 5% (the backward graph fuses the remade norms and SiLU with its own kernels); its
    attention is the forward's SDPA call again, the same flash kernel. Eager and Megatron re-run the whole forward:
    over 15% more here."""
    from mhlo_cost.network import resolve_profile
    from mhlo_cost.studies.plan.costs import dense_layer, layer_cost
    from mhlo_cost.studies.study import Study

    cfg = ScaleConfig(layers=2, hidden=1024, heads=8, kv_heads=2, ffn=4096, seq=2048, vocab=128, micro_batch=1,
                      global_batch=1, arch="llama", mlp_kind="swiglu", attention="fused", dropout=False,
                      execution="inductor", recompute="full")
    hw = resolve_profile("h100-sxm")
    cost = layer_cost(cfg, hw)
    st = Study(dense_layer(cfg), training="always", hardware=hw, split_phases=True, execution=cfg.execution,
               attention=cfg.attention, dataflow=True)
    kernels, phase = st.roofline.fusion.kernels, st.analysis.phases.phase
    forward = [k for k in kernels if phase[k.members[-1]] == "forward"]
    w2 = max(i for i, k in enumerate(forward) if k.has_dot)
    assert len(forward) - w2 == 2  # w2's GEMM and the residual add
    flash = {phase[k.members[-1]]: k.time_s for k in kernels if getattr(k, "backend", "") == "flash"}
    assert flash["recompute"] == flash["forward"] > 0.0
    expect = cost.time_s["forward"] - sum(k.time_s for k in forward[w2:])
    got = recompute_seconds(cfg, cost.time_s, cost.core_s)
    assert got == pytest.approx(expect, rel=0.05)
    for other in (cfg.with_split(execution="eager"), cfg.with_split(execution="compiled")):
        assert recompute_seconds(other, cost.time_s, cost.core_s) == cost.time_s["forward"] > 1.15 * got


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
