"""A transformer layer's training step, priced against what this project measured on a lent H200
(``benchmarks/data/measured_h200_train.toml``, made by ``benchmarks/gpu_train_measure.py``, issue 38).

Each measured row is one layer's forward and backward (the gradient of its output given; no loss, no optimizer),
bf16: NeMo's GPT-3 5B layer at micro-batch 1, 2, 4 and torchtitan's Llama 3 8B block at 1, 2, eager, and both at
micro-batch 1 under ``torch.compile``. The same modules (``benchmarks/gpu_train_layers.py``: ``Stack``) are lowered
here through torchax from shapes, as one step: ``jax.vjp`` of the stack's forward with the output's cotangent given
(the gradients of the parameters and of the input, what ``model(x).backward(g)`` computes), at depth 1 and 2, and
priced on the ``h200`` profile with the execution model the measured code runs as (``eager``, SDPA on the backend
PyTorch 2.11 dispatched to; ``inductor`` for the compiled rows); per layer = depth 2 - depth 1, as measured.

Prints estimate / measured per row, then the change of the time per token from micro-batch 1 to N, estimated and
measured (the issue's question: does a larger micro-batch make a token cheaper?), and per kind the median |error|.
All rows are held out: no profile number was read off them.

    python benchmarks/validate_train_layers.py [--only SUBSTRING] [--sdpa BACKEND] [--clock peak|sustained|average]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tomllib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

DATA = os.path.join(ROOT, "benchmarks", "data", "measured_h200_train.toml")
#: The walk's records the estimate reads, as the command line's study asks for them (studies/study.py): index masks
#: (the attention's causal blocks) and the views' layouts (the copies eager PyTorch makes).
RECORDS = ("masks", "layouts")
#: The measured row's kind -> the execution model that prices it.
EXECUTION = {"layer": "eager", "compiled": "inductor"}


def layer_step_text(kind: str, depth: int, micro_batch: int, shape: dict) -> str:
    """StableHLO of one forward + backward of ``depth`` layers of ``kind`` (``gpt``, ``llama``), bf16, from
    shapes: the output, and the gradients of the parameters and of the input for the output's cotangent given."""
    import jax
    import jax.numpy as jnp
    import torch

    from gpu_train_layers import Stack
    from mhlo_cost.lower.training.torchax_steps import module_forward

    with torch.device("meta"):
        module = Stack(kind, depth, **shape).to(torch.bfloat16)
    forward, params, buffers = module_forward(module)
    x = jax.ShapeDtypeStruct((micro_batch, shape["seq"], shape["hidden"]), jnp.bfloat16)

    def step(params, buffers, x, g):  # the output is returned too: torch computes it (fc2's forward is no dead code)
        out, vjp = jax.vjp(lambda p, xx: forward(p, buffers, (xx,), {}), params, x)
        return out, vjp(g)

    return jax.jit(step).lower(params, buffers, x, x).as_text(debug_info=True)


def layer_estimate(kind: str, micro_batch: int, shape: dict, hw, execution: str, sdpa: str = "auto",
                   average: bool = False) -> dict:
    """Seconds of one layer's step (depth 2 - depth 1) and its parts: ``kernels`` (per layer), ``fixed``
    (their launch overhead plus fill and drain), ``gemm`` (the dot kernels' time); ``average``: each depth's
    program at its own step-average clock (:func:`at_step_clock`)."""
    from mhlo_cost.analysis import AnalysisOptions, analyze
    from mhlo_cost.roofline import Roofline

    parts = []
    for depth in (1, 2):
        a = analyze(layer_step_text(kind, depth, micro_batch, shape), AnalysisOptions(dataflow=True, records=RECORDS))
        at = at_step_clock(a, hw, execution, sdpa) if average else hw
        parts.append(breakdown(Roofline(a, at, execution=execution, sdpa=sdpa)))
    return {k: parts[1][k] - parts[0][k] for k in parts[0]}


def at_step_clock(a, hw, execution: str, sdpa: str):
    """``hw`` at the clock at which the program ``a`` run back to back holds its power limit on average
    (:func:`mhlo_cost.machines.clock.step_average`): its dot kernels' time at the peak's clock, its kernels' fixed
    costs as waits, the rest memory-bound (the sustained clock where the profile has no power of those)."""
    import dataclasses

    from mhlo_cost.machines.clock import at_clocks, step_average
    from mhlo_cost.roofline import Roofline

    peak = dataclasses.replace(hw, sustained=False)
    b = breakdown(Roofline(a, peak, execution=execution, sdpa=sdpa))
    attention = (b["attention"], b["tensor"]) if b["tensor"] > 0 else (0.0, 0.0)  # at its own activity's power
    clocks = step_average(peak, b["gemm"] - attention[0], max(b["time"] - b["gemm"] - b["fixed"], 0.0), b["fixed"],
                          attention)
    return at_clocks(peak, clocks) if clocks else dataclasses.replace(hw, sustained=True)


def breakdown(rf) -> dict:
    """The step's estimate (``time``), its kernels, their fixed costs, the GEMM kernels' time (the fused attention's
    with them), the fused attention kernels' time and their products' at the tensor cores' full issue rate."""
    kernels, hw = rf.fusion.kernels, rf.hw
    # a memory-bound kernel's fill and drain (the profile's memory model) adds to its time like the launch overhead
    fixed = sum(k.overhead_s + (hw.memory_fixed(k.multiplicity) if k.memory_s > k.compute_s else 0.0)
                for k in kernels)
    dots = sum(k.time_s for k in kernels if any(rf.analysis.rows[i].kind == "dot" for i in k.members))
    return {"time": rf.totals()["est_time_fused_s"], "kernels": sum(k.multiplicity for k in kernels),
            "fixed": fixed, "gemm": dots, "attention": sum(k.time_s for k in kernels if k.attention),
            "tensor": sum(k.tensor_s for k in kernels if k.attention)}


def per_token_change(rows: list[dict]) -> list[tuple[str, int, float, float]]:
    """(model, micro-batch N, estimated, measured) change of the time per token from micro-batch 1 to N of each
    (model, kind) with a micro-batch-1 row: t_N / (N t_1) - 1 (negative: a token is cheaper at N)."""
    out = []
    base = {(r["model"], r["kind"]): r for r in rows if r["micro_batch"] == 1}
    for r in rows:
        b = base.get((r["model"], r["kind"]))
        if b is None or r["micro_batch"] == 1:
            continue
        n = r["micro_batch"]
        out.append((f"{r['model']} {r['kind']}", n, r["estimate_s"] / (n * b["estimate_s"]) - 1,
                    r["measured_s"] / (n * b["measured_s"]) - 1))
    return out


def summary(rows: list[dict]) -> list[str]:
    """Per kind and overall: n, median and max |error| of estimate / measured."""
    lines = []
    for kind in list(dict.fromkeys(r["kind"] for r in rows)) + ["all"]:
        rs = [r["estimate_s"] / r["measured_s"] for r in rows if kind in (r["kind"], "all")]
        errs = [abs(x - 1) for x in rs]
        lines.append(f"  {kind:10} n={len(rs):2}  median |error| {statistics.median(errs):6.1%}  max {max(errs):6.1%}"
                     f"  median ratio {statistics.median(rs):.2f}")
    return lines


def load(path: str = DATA) -> list[dict]:
    with open(path, "rb") as f:
        return tomllib.load(f)["m"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="only the rows whose model or kind contains this")
    ap.add_argument("--sdpa", default="auto", help="the eager rows' SDPA backend (default: PyTorch's own choice)")
    ap.add_argument("--clock", choices=("peak", "sustained", "average"), default="sustained",
                    help="the dots' clock: what a product stream holds at 700 W (default, as train-plan's), the "
                         "peak's, or the one each program's own average power holds at the limit")
    args = ap.parse_args(argv)
    from mhlo_cost.machines.clock import sustained
    from mhlo_cost.machines.hardware import get_profile

    hw = get_profile("h200")
    hw = sustained(hw) if args.clock == "sustained" else hw
    rows = []
    print(f"{'row':34} {'estimate':>10} {'measured':>10} {'ratio':>6}  kernels  fixed ms  gemm ms")
    for m in load():
        label = f"{m['model']} {m['kind']} mb{m['micro_batch']}"
        if args.only and args.only not in label:
            continue
        shape = {k: m[k] for k in ("hidden", "heads", "kv_heads", "ffn", "seq") if k in m}
        est = layer_estimate(m["layer"], m["micro_batch"], shape, hw, EXECUTION[m["kind"]],
                             args.sdpa if m["kind"] == "layer" else "auto", average=args.clock == "average")
        meas = m["layer_ms"] * 1e-3
        rows.append({**m, "estimate_s": est["time"], "measured_s": meas})
        print(f"{label:34} {est['time'] * 1e3:8.3f}ms {m['layer_ms']:8.3f}ms {est['time'] / meas:6.2f}  "
              f"{est['kernels']:7d} {est['fixed'] * 1e3:9.3f} {est['gemm'] * 1e3:8.3f}", flush=True)
    print("time per token, micro-batch 1 -> N (t_N / (N t_1) - 1):")
    for name, n, est, meas in per_token_change(rows):
        print(f"  {name:24} mb1 -> mb{n}: estimate {est:+6.1%}  measured {meas:+6.1%}")
    print("per kind (ratio = estimate / measured):")
    print("\n".join(summary(rows)))
    errs = [abs(r["estimate_s"] / r["measured_s"] - 1) for r in rows]
    print(f"median |error| = {statistics.median(errs):.1%} (held out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
