"""The roofline estimate of an OpenSora 1.2 STDiT3-XL/2 sampling run beside the published measurement.

Lowers STDiT3 at ``--shape`` (default 204_640_360: 204 frames of 640x360, batch 2 for classifier-free
guidance, bf16) from shapes, estimates one forward on a hardware profile (default: one A100 SXM 80GB), and
multiplies by the sampling steps (default 30). Each shape is set beside its own published single-A100
measurement of a 30-step run (:data:`MEASURED_S`: 99.00 s at 204_640_360, at a model FLOP utilisation of
0.253; 202.3 s at 408_640_360; 104.24 s at 51_1280_720; 206.92 s at 102_1280_720), per forward (measured /
30) and per run of ``--steps``; a shape with no measurement (``--small``, another shape) gets none. Printed
beside it: the old bounds (every GEMM at the datasheet peak: unfused, every op its own kernel, 221.8 s at
204_640_360; fused elementwise with attention as separate kernels, 38.5 s), the steps from those to the compiled
estimate (GEMM efficiency model, attention as one kernel), and ``--execution eager`` (PyTorch eager: one kernel
per aten call of the torch STDiT3 lowered through torchax, at depth 1 and 2 and scaled by blocks,
:func:`eager_per_forward`) on the counting module (every attention as flash SDPA) and on the module as OpenSora
1.2 deploys it (``build(cfg, deployed=True)``: the all-ones temporal mask, fused LayerNorm, flash where it calls
flash, the temporal attention's math written out, per-sample cross-attention), each with its ratio to the
measurement, and what the compiled and the deployed eager times are made of. Also ``--execution eager`` on the
default lowering (``lower --model stdit3``: the JAX model, whose jnp calls are its framework ops: its GELU and each
linear one call, as the counting torch module's ``F.gelu`` and ``addmm``, so the two price within 5% of each other;
``lower --model stdit3 --deployed`` adds what OpenSora's sampling runs besides). Every shape at once, and 8 x A100
Ulysses: ``benchmarks/stdit3_scaling.py``.

    python benchmarks/stdit3_roofline.py [--hardware a100] [--steps 30] [--shape 204_640_360]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # lowering needs no accelerator
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: The published single-A100 measurements of STDiT3-XL/2 (batch 2, bf16), seconds for 30 sampling steps, per shape.
MEASURED_S = {"204_640_360": 99.00, "408_640_360": 202.3, "51_1280_720": 104.24, "102_1280_720": 206.92}
MEASURED_STEPS = 30
MEASURED_UTILISATION = 0.253  # published for 204_640_360


def measured_per_forward(shape: str, small: bool = False) -> float | None:
    """Seconds per forward of the published run of ``shape`` (its 30-step time / 30); None where there is none."""
    measured = None if small else MEASURED_S.get(shape)
    return None if measured is None else measured / MEASURED_STEPS


def _estimates(analysis, hw):
    """The estimates from the old bounds to the new default, as (label, seconds per forward, Roofline)."""
    from mhlo_cost.roofline import Roofline

    peak = dataclasses.replace(hw, gemm=None)
    unfused = Roofline(analysis, peak)
    old = Roofline(analysis, peak, fuse_mode="elementwise", attention="unfused")
    eff = Roofline(analysis, hw, fuse_mode="elementwise", attention="unfused")
    new = Roofline(analysis, hw, fuse_mode="elementwise")
    return [
        ("old: unfused, GEMMs at peak", unfused.totals()["est_time_s"], unfused),
        ("old: fused elementwise, at peak", old.totals()["est_time_fused_s"], old),
        ("+ GEMM efficiency model", eff.totals()["est_time_fused_s"], eff),
        ("+ attention as one kernel (compiled)", new.totals()["est_time_fused_s"], new),
    ]


def _eager_rooflines(shape: str, hw, small: bool = False, deployed: bool = False) -> list:
    """``--execution eager`` Rooflines of the torch STDiT3 lowered through torchax at depth 1 and 2: as OpenSora
    1.2 deploys it (``deployed``: :mod:`mhlo_cost.lower.models.stdit3_torch_deployed`, its attention as written:
    flash where it calls flash, math where it writes the math out), or the counting module (every attention
    taken as flash SDPA)."""
    from mhlo_cost import lower_model
    from mhlo_cost.analysis import AnalysisOptions, analyze
    from mhlo_cost.lower.models import stdit3_torch
    from mhlo_cost.lower.models.config import STDiT3Config
    from mhlo_cost.roofline import Roofline

    out = []
    for d in (1, 2):
        base = STDiT3Config().small() if small else STDiT3Config().with_shape(shape)
        cfg = dataclasses.replace(base, depth=d, dtype="bfloat16")
        model = stdit3_torch.build(cfg, deployed=deployed)  # meta: nothing allocated
        specs = [(s, str(t).replace("torch.", "")) for s, t in stdit3_torch.input_specs(cfg)]
        text = lower_model(model, *[f"{'x'.join(map(str, s))}:{t}" for s, t in specs], frontend="torchax").text
        out.append(Roofline(analyze(text, AnalysisOptions(dataflow=True)), hw, execution="eager",
                            written="math" if deployed else "sdpa"))
    return out


def _scaled(one: float, two: float, depth: int) -> float:
    """T(depth) = T(1) + (depth - 1) x (T(2) - T(1)): exact for eager, whose kernels never span a block."""
    return one + (depth - 1) * (two - one)


def eager_per_forward(shape: str, hw, depth: int = 28, small: bool = False, rooflines=None,
                      deployed: bool = False) -> tuple[float, int]:
    """(seconds per forward, kernels per forward) of ``--execution eager`` on the torch STDiT3 lowered through
    torchax (whose locations carry each aten call), at depth 1 and 2 and scaled by blocks:
    T(depth) = T(1) + (depth - 1) x (T(2) - T(1)). Exact for the eager model: its kernels are aten calls, each
    inside one block (the scope carries the block's index), and the blocks are identical."""
    r1, r2 = rooflines or _eager_rooflines(shape, hw, small, deployed)
    return (_scaled(r1.totals()["est_time_fused_s"], r2.totals()["est_time_fused_s"], depth),
            round(_scaled(len(r1.fusion.kernels), len(r2.fusion.kernels), depth)))


def eager_class(rows, k) -> str:
    """The kind of an eager kernel: attention (spatial, temporal or cross, by scope), GEMM (a dot or convolution:
    a Linear, its bias), norm (a reduction: LayerNorm's and RMSNorm's means, a softmax outside attention),
    conversion (only dtype converts besides views) or elementwise."""
    from mhlo_cost.walk.row import short_name

    names = {short_name(rows[i].op) for i in k.members}
    scope = rows[k.members[0]].scope
    if k.attention:
        return "attention, " + ("cross" if "cross" in scope else "temporal" if "temporal" in scope else "spatial")
    if k.has_dot:
        return "GEMM"
    if "reduce" in names:
        return "norm (reductions)"
    if "convert" in names and names <= {"convert", "reshape", "broadcast_in_dim", "transpose", "constant"}:
        return "dtype conversion"
    return "elementwise"


def eager_made_of(rooflines, depth: int = 28) -> dict:
    """Seconds per forward of the eager estimate by kind of kernel (:func:`eager_class`), kernels of each kind,
    and the launch overhead and the host-bound time within them, depth-scaled as :func:`eager_per_forward`."""
    per = []
    for rf in rooflines:
        acc: dict = {}
        for k in rf.fusion.kernels:
            c = acc.setdefault(eager_class(rf.analysis.rows, k), [0.0, 0])
            c[0] += k.time_s
            c[1] += k.multiplicity
        acc["of which launch overhead"] = [sum(k.overhead_s for k in rf.fusion.kernels), 0]
        acc["of which host-bound (dispatch)"] = [sum(max(0.0, k.time_s - max(k.compute_s, k.memory_s) - k.overhead_s)
                                                     for k in rf.fusion.kernels), 0]
        per.append(acc)
    keys = sorted(set(per[0]) | set(per[1]), key=lambda s: (s.startswith("of which"), s))
    return {key: (_scaled(per[0].get(key, [0, 0])[0], per[1].get(key, [0, 0])[0], depth),
                  round(_scaled(per[0].get(key, [0, 0])[1], per[1].get(key, [0, 0])[1], depth))) for key in keys}


def _eager_rows(rows: list, analysis, hw, args, depth: int) -> list:
    """Append the ``--execution eager`` rows to ``rows``: on the default lowering (the JAX model, ``analysis``),
    on the counting torch module and on the module as deployed; return the deployed one's Rooflines."""
    from mhlo_cost.roofline import Roofline

    default = Roofline(analysis, hw, execution="eager", written="sdpa")
    rows.append((f"eager, default lowering: JAX ({len(default.fusion.kernels)} kernels)",
                 default.totals()["est_time_fused_s"], None))
    counting_s, counting_kernels = eager_per_forward(args.shape, hw, depth, args.small, deployed=False)
    rows.append((f"eager, counting module ({counting_kernels} kernels)", counting_s, None))
    eager_rfs = _eager_rooflines(args.shape, hw, args.small, deployed=True)
    eager_s, eager_kernels = eager_per_forward(args.shape, hw, depth, args.small, eager_rfs)
    rows.append((f"eager as deployed (--deployed, {eager_kernels} kernels)", eager_s, None))
    return eager_rfs


def _made_of(rf) -> dict:
    """Seconds per forward of the fused estimate by kind of kernel: GEMM (with epilogues), attention, other;
    and the launch overhead within them."""
    out = {"GEMM kernels": 0.0, "attention kernels": 0.0, "other kernels": 0.0}
    for k in rf.fusion.kernels:
        key = "attention kernels" if k.attention else ("GEMM kernels" if k.has_dot else "other kernels")
        out[key] += k.time_s
    out["of which launch overhead"] = sum(k.overhead_s for k in rf.fusion.kernels)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hardware", default="a100")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--shape", default="204_640_360")
    p.add_argument("--small", action="store_true", help="the small test configuration (a quick look)")
    args = p.parse_args(argv)

    from mhlo_cost.machines.hardware import get_profile
    from mhlo_cost.lower.models import stdit3
    from mhlo_cost.lower.models.config import STDiT3Config
    from mhlo_cost.analysis import AnalysisOptions, analyze

    t0 = time.perf_counter()
    cfg = STDiT3Config().small() if args.small else STDiT3Config().with_shape(args.shape)
    analysis = analyze(stdit3.lower(cfg).as_text(debug_info=True), AnalysisOptions(dataflow=True))
    hw = get_profile(args.hardware)
    rows = _estimates(analysis, hw)
    new = rows[3][2]
    flops = new.flops
    g = hw.gemm
    print(f"STDiT3-XL/2 at {args.shape}, {args.steps} steps, one {hw.name} (bf16 peak "
          f"{hw.matrix_peak('bf16') / 1e12:.1f} TFLOP/s, HBM {hw.hbm_bandwidth / 1e9:.0f} GB/s; GEMM model: "
          f"{g.efficiency if g else 1:g} of peak, {g.compute_units if g else 0} units); "
          f"estimated in {time.perf_counter() - t0:.1f} s")
    print(f"  model FLOPs per forward: {flops / 1e12:.2f} TFLOP; "
          f"{new.totals().get('attention_kernels', 0)} attention kernels per forward")
    per_fwd = measured_per_forward(args.shape, args.small)  # this shape's own measurement, or None
    print(f"\n  {'':<46}{'per forward':>12}{'run':>11}{'vs measured' if per_fwd else '':>13}")
    eager_rfs = _eager_rows(rows, analysis, hw, args, cfg.depth)
    for name, fwd, _ in rows:
        ratio = f"{fwd / per_fwd:>12.3f}x" if per_fwd else ""
        print(f"  {name:<46}{fwd:>11.3f}s{fwd * args.steps:>10.2f}s{ratio}")
    if per_fwd:
        print(f"  {'measured (published, 1x A100)':<46}{per_fwd:>11.3f}s{per_fwd * args.steps:>10.2f}s{1:>12.3f}x")
    print("\n  the compiled estimate per forward is made of:")
    for name, t in _made_of(new).items():
        print(f"    {name:<28}{t:>9.3f} s")
    print("\n  the eager estimate as deployed per forward is made of:")
    for name, (t, n) in eager_made_of(eager_rfs, cfg.depth).items():
        print(f"    {name:<32}{t:>9.3f} s" + (f"{n:>7} kernels" if n else ""))
    if per_fwd is None:
        print(f"\n  no published measurement for {'--small' if args.small else args.shape} (measured: "
              f"{', '.join(MEASURED_S)}, {MEASURED_STEPS} steps on one A100)")
        return 0
    gap = per_fwd - rows[-1][1]
    print(f"\n  gap to the measurement of {args.shape} ({MEASURED_S[args.shape]:g} s for {MEASURED_STEPS} steps on "
          f"one A100), eager: {gap:.3f} s per forward ({gap * args.steps:.1f} s per run); see README "
          "'Latency: calibration, GEMM efficiency, attention' for what it is made of")
    return 0


if __name__ == "__main__":
    sys.exit(main())
