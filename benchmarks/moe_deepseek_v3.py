"""DeepSeek-V3 planned end to end with expert parallelism (train-plan's MoE layers, mhlo_cost.studies.plan.moe):
iteration time, memory per GPU and communication per step, on 256 H100 and as the model was trained.

The published configuration (DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv 2412.19437): 2048 H800 GPUs,
16-way pipeline parallelism, 64-way expert parallelism spanning 8 nodes, ZeRO-1 data parallelism, no tensor
parallelism (section 3.2); sequence 4K, batch 15,360 sequences after its warm-up (section 4.2); "each trillion
tokens requires only 180K H800 GPU hours, i.e., 3.7 days on our cluster with 2048 H800 GPUs" (section 1). That is
a whole-run figure (FP8 GEMMs, DualPipe overlapping the all_to_all with compute, node-limited routing sending a
token to at most 4 nodes, MLA attention, the MTP module, recompute of the norms and MLA up-projections only): the
estimate here runs bf16 GEMMs, multi-head attention at the same hidden size and heads, no node-limited routing,
and either no overlap of the all_to_all (Megatron's dispatcher) or DualPipe-style overlap (--moe-a2a-overlap),
so it is a comparison, not a validation. The 61 layers split 4 + 14 x 4 + 1 on the 16 stages (the report does
not say how).

    PYTHONPATH=. python benchmarks/moe_deepseek_v3.py [--cache DIR]
"""
from __future__ import annotations

import argparse
from pathlib import Path

from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.config import model_config
from mhlo_cost.studies.plan.plan import breakdown_frame, facts, plan

H800 = Path(__file__).parent / "data" / "h800_cluster.toml"
PUBLISHED_GPU_HOURS_PER_T = 180_000  # H800 GPU hours per trillion tokens (report, section 1)
TRAINED = dict(p=16, d=128, ep=64, global_batch=15360, micro_batch=1, zero=1, first_stage_layers=4,
               last_stage_layers=1, attention="fused", recompute="full")
ON_256 = dict(p=16, d=16, ep=16, global_batch=1920, micro_batch=1, zero=1, first_stage_layers=4,
              last_stage_layers=1, attention="fused", recompute="full")


def _show(title: str, p) -> None:
    print(f"\n== {title}")
    print(breakdown_frame(p).to_string(index=False))
    for line in facts(p):
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=None, help="cache root for the lowered layers' analyses")
    args = ap.parse_args()
    h100 = resolve_profile("dgx-h100")
    h800 = resolve_profile("h800-cluster", H800)
    base = model_config("deepseek-v3")
    for overlap in (False, True):
        cfg = base.with_split(**ON_256, ep_overlap=overlap)
        _show(f"DeepSeek-V3 on 256 H100 (dgx-h100), {cfg.label()}", plan(cfg, h100, args.cache))
    rows = []
    for overlap, recompute in ((False, "full"), (True, "full"), (True, "selective")):
        cfg = base.with_split(**TRAINED, ep_overlap=overlap).with_split(recompute=recompute)
        p = plan(cfg, h800, args.cache)
        _show(f"DeepSeek-V3 as trained: 2048 H800, {cfg.label()}", p)
        tokens = cfg.global_batch * cfg.seq
        hours = p.iteration.total * cfg.gpus / 3600 * 1e12 / tokens
        rows.append((cfg.label(), p.iteration.total, hours, p.memory))
    print("\n== GPU hours per trillion tokens (published: 180K H800 GPU hours, a whole-run figure)")
    for label, it, hours, mem in rows:
        print(f"{label}: iteration {it:.2f} s for {15360 * 4096:,} tokens -> {hours / 1e3:.0f}K GPU hours per "
              f"trillion tokens, {hours / PUBLISHED_GPU_HOURS_PER_T:.2f}x the published figure; "
              f"{mem['total'] / 2 ** 30:.1f} GiB per GPU ({'fits' if mem['fits'] else 'does NOT fit'} in bf16 as "
              "priced)")


if __name__ == "__main__":
    main()
