"""train-plan's per-layer forward + backward time against one layer timed on a GPU.

The measurement: ``benchmarks/gpu_train_measure.py`` run 1 on a lent H200 (torch 2.11, bf16;
``benchmarks/data/measured_h200_train_run1.jsonl``, its ``layer`` rows): ONE layer's forward and backward
(``layer_ms``: the time of two stacked layers halved, no optimizer), PyTorch eager and ``torch.compile`` (default
mode), of

* torchtitan's Llama 3 8B block (``benchmarks/gpu_train_layers.py`` LlamaLayer: RMSNorm, wq/wk/wv without bias,
  complex RoPE, repeat_kv, causal SDPA, SwiGLU) at micro-batch 1 and 2, seq 8192;
* NeMo's GPT-3 5B layer (GPTLayer: LayerNorm, biased linears, causal SDPA, GELU) at micro-batch 1, 2, 4, seq 2048.

The estimate: train-plan's layer (:func:`mhlo_cost.studies.plan.costs.analyse_layer`; ``arch`` llama or gpt) on the
``h200`` profile, t = p = d = cp = 1, no dropout, no recompute, fused attention, as ``execution`` eager and
inductor; its forward + backward + recompute seconds (none without recompute: studies/plan/recompute.py; the
optimizer left out, as the measurement leaves it out).
Nothing here is fitted to these rows. Prints per row the measured and estimated milliseconds and their ratio, and
the compile gain (eager / compiled) measured and estimated.

    PYTHONPATH=. python benchmarks/validate_train_plan_layers.py [--data FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

DATA = os.path.join(ROOT, "benchmarks", "data", "measured_h200_train_run1.jsonl")
#: The timed layers' shapes (benchmarks/gpu_train_layers.py SHAPES) and the train-plan architecture of each.
SHAPES = {
    "llama": dict(hidden=4096, heads=32, kv_heads=8, ffn=14336, mlp_kind="swiglu", arch="llama"),
    "gpt": dict(hidden=4096, heads=32, ffn=16384, mlp_kind="gelu", arch="gpt"),
}
#: The measurement's row kinds (``layer``: eager; ``compiled``: torch.compile, default mode) as train-plan's
#: execution models.
EXECUTIONS = {"layer": "eager", "compiled": "inductor"}


def measured(path: str = DATA) -> list[dict]:
    """The timed layers of the measurement, each with ``execution`` (eager / inductor) and ``layer_ms``."""
    out = []
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if row.get("kind") in EXECUTIONS:
                out.append(dict(row, execution=EXECUTIONS[row["kind"]]))
    return out


def layer_config(row: dict):
    """The :class:`~mhlo_cost.studies.plan.config.ScaleConfig` of one timed layer (one layer, one device)."""
    from mhlo_cost.studies.plan.config import ScaleConfig

    return ScaleConfig(layers=1, vocab=1024, seq=row["seq"], micro_batch=row["micro_batch"], dropout=False,
                       attention="fused", execution=row["execution"], **SHAPES[row["layer"]])


def estimate_ms(row: dict, hw) -> float:
    """train-plan's forward + backward (+ what the backward recomputes: nothing without recompute, as
    :mod:`mhlo_cost.studies.plan.recompute` prices it) of the row's layer, milliseconds."""
    from mhlo_cost.studies.plan.costs import analyse_layer
    from mhlo_cost.studies.plan.recompute import recompute_seconds

    cfg = layer_config(row)
    cost = analyse_layer(cfg, hw)
    t = cost.time_s
    return (t["forward"] + t["backward"] + recompute_seconds(cfg, t, cost.core_s)) * 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=DATA)
    args = ap.parse_args(argv)
    from mhlo_cost.network import resolve_profile

    hw = resolve_profile("h200")
    rows = measured(args.data)
    est = {}
    print(f"{'layer':8s} {'mb':>3s} {'seq':>5s} {'execution':9s} {'measured':>9s} {'estimate':>9s} {'ratio':>6s}")
    for r in rows:
        e = est[(r["layer"], r["micro_batch"], r["execution"])] = estimate_ms(r, hw)
        print(f"{r['layer']:8s} {r['micro_batch']:3d} {r['seq']:5d} {r['execution']:9s} {r['layer_ms']:9.3f} "
              f"{e:9.3f} {e / r['layer_ms']:6.3f}")
    meas = {(r["layer"], r["micro_batch"], r["execution"]): r["layer_ms"] for r in rows}
    for (layer, mb, ex), m in sorted(meas.items()):
        if ex == "inductor" and (layer, mb, "eager") in meas:
            g_m, g_e = meas[(layer, mb, "eager")] / m, est[(layer, mb, "eager")] / est[(layer, mb, ex)]
            print(f"compile gain {layer} mb{mb}: measured {g_m:.3f}, estimated {g_e:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
