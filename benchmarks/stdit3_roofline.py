"""The roofline estimate of an OpenSora 1.2 STDiT3-XL/2 sampling run beside the published measurement.

Lowers STDiT3 at 204_640_360 (204 frames of 640x360, batch 2 for classifier-free guidance, bf16) from
shapes, estimates one forward on a hardware profile (default: one A100 SXM 80GB), and multiplies by the
sampling steps (default 30). The published single-A100 figure for this configuration is 99.00 s for
30 steps at a model FLOP utilisation of 0.253. Printed: the unfused estimate (every op its own kernel, an
upper bound on the memory traffic of a good compiler), the fused one (``--fuse elementwise``), each with
its ratio to the measurement, the per-block-kind estimates, and where the time goes.

    python benchmarks/stdit3_roofline.py [--hardware a100] [--steps 30] [--shape 204_640_360]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # lowering needs no accelerator
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: The published single-A100 measurement of STDiT3-XL/2 at 204_640_360, 30 sampling steps.
MEASURED_S = 99.00
MEASURED_UTILISATION = 0.253


def estimate(shape: str = "204_640_360", hardware: str = "a100", steps: int = 30, small: bool = False):
    """(Roofline, summary dict, per-kind block means DataFrame) of STDiT3 at ``shape`` on ``hardware``."""
    from mhlo_cost.collectors import assign_blocks
    from mhlo_cost.hardware import get_profile
    from mhlo_cost.models import stdit3
    from mhlo_cost.models.config import STDiT3Config
    from mhlo_cost.roofline import Roofline, analyze_dataflow

    cfg = STDiT3Config().small() if small else STDiT3Config().with_shape(shape)
    text = stdit3.lower(cfg).as_text(debug_info=True)
    analysis = analyze_dataflow(text)
    rf = Roofline(analysis, get_profile(hardware), fuse_mode="elementwise")
    blocks = rf.block_frame(assign_blocks(analysis))
    body = blocks[blocks["kind"] != ""]
    cols = ["est_time_s", "est_compute_s", "est_memory_s", "gemm_time_s", "est_time_fused_s", "gemm_time_fused_s",
            "vector_time_fused_s", "compute_bound_fused_s"]
    per_kind = body.groupby("kind", sort=False)[cols].mean()
    per_kind["bound"] = [body[body["kind"] == k]["bound"].mode().iloc[0] for k in per_kind.index]
    return rf, rf.summary(steps), per_kind


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hardware", default="a100")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--shape", default="204_640_360")
    args = p.parse_args(argv)

    t0 = time.perf_counter()
    rf, s, per_kind = estimate(args.shape, args.hardware, args.steps)
    took = time.perf_counter() - t0
    hw = rf.hw
    print(f"STDiT3-XL/2 at {args.shape}, {args.steps} steps, one {hw.name} "
          f"(bf16 peak {s['reference_peak_tflops']:.1f} TFLOP/s, HBM {hw.hbm_bandwidth / 1e9:.0f} GB/s); "
          f"estimated in {took:.1f} s")
    print(f"  model FLOPs per forward: {s['flops'] / 1e12:.2f} TFLOP "
          f"(compute floor at peak: {s['flops'] / (s['reference_peak_tflops'] * 1e12):.3f} s per forward)")
    print()
    print(f"  {'':<34}{'per forward':>12}{'run':>11}{'util.':>8}{'vs measured':>13}")

    def line(name, fwd, util):
        run = fwd * args.steps
        print(f"  {name:<34}{fwd:>11.3f}s{run:>10.2f}s{util:>8.3f}{run / MEASURED_S:>12.3f}x")

    line("roofline, unfused (every op)", s["est_time_s"], s["utilisation"])
    line("roofline, fused elementwise", s["est_time_fused_s"], s["utilisation_fused"])
    line("measured (published, 1x A100)", MEASURED_S / args.steps, MEASURED_UTILISATION)
    print()
    print(f"  unfused: compute-bound ops {s['compute_bound_s']:.3f} s, memory-bound ops {s['memory_bound_s']:.3f} s, "
          f"launch overhead {s['est_overhead_s']:.3f} s over {s['kernels']} kernels "
          f"({s['free_ops']} ops need no kernel)")
    print(f"  fused: {s['fused_kernels']} kernels moving {s['fused_bytes'] / 1e12:.2f} TB per forward")
    print()
    print("  per block (mean over the blocks of a kind), per forward:")
    for kind, r in per_kind.iterrows():
        print(f"    {kind:<9} unfused {r.est_time_s * 1e3:7.2f} ms (compute {r.est_compute_s * 1e3:.2f}, "
              f"memory {r.est_memory_s * 1e3:.2f})   fused {r.est_time_fused_s * 1e3:6.2f} ms "
              f"(GEMM kernels {r.gemm_time_fused_s * 1e3:.2f}, others {r.vector_time_fused_s * 1e3:.2f}; "
              f"compute-bound {r.compute_bound_fused_s * 1e3:.2f})  bound: {r.bound}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
