"""STDiT3-XL/2's four parallel strategies on 16 devices of two real systems: comm time, exposed comm, volume.

For each of the four published video shapes and each strategy (Megatron, 2D (2 x 8), Ulysses, Ring; 16
devices), lowers the model from shapes, counts it once with its data flow, and estimates it on

* ``dgx-h100`` (16 devices: 2 nodes of 8 H100 on NVLink, 8 x 400 Gb/s InfiniBand per node), and
* ``mesh-4x4`` (the 16-chip 4 x 4 mesh template: the same chip, 100 GB/s links to its neighbours).

Printed per (shape, strategy, system): the communication volume per device per forward (nccl-tests bus
convention, the same on both systems), the comm time of one spatial and one temporal block (means over the
28 of each), the total comm time of a forward, how much of it compute cannot hide (exposed, with the fused
compute times, ``--fuse elementwise``), and the forward's time with that overlap; then which algorithm and
tier carry the most comm time. All times are per forward, in milliseconds.

    python benchmarks/stdit3_comm.py [--shape 204_640_360 ...] [--strategy megatron ...] [--systems dgx-h100 mesh-4x4]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # lowering needs no accelerator
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHAPES = ("204_640_360", "408_640_360", "51_1280_720", "102_1280_720")
STRATEGIES = ("megatron", "2d", "ulysses", "ring")
SYSTEMS = ("dgx-h100", "mesh-4x4")
DEVICES = 16


def analysis_of(shape: str, strategy: str):
    """The data-flow analysis of STDiT3 at ``shape`` under ``strategy`` on 16 devices."""
    from mhlo_cost.lower.models import parallel
    from mhlo_cost.lower.models.config import STDiT3Config
    from mhlo_cost.analysis import AnalysisOptions, analyze

    cfg = STDiT3Config().with_shape(shape)
    plan = parallel.make_plan(strategy, DEVICES, None, cfg)
    return analyze(parallel.lower(cfg, plan).as_text(debug_info=True), AnalysisOptions(dataflow=True))


def figures(analysis, blocks, system: str) -> dict:
    """Per-forward comm figures of one analysis on one system (seconds, bytes)."""
    from mhlo_cost.network import resolve_profile
    from mhlo_cost.roofline import Roofline

    rf = Roofline(analysis, resolve_profile(system), fuse_mode="elementwise")
    df = rf.block_frame(blocks)
    body = df[df["kind"] != ""]
    mean = body.groupby("kind")[["comm_time_s", "comm_exposed_s"]].mean()
    tot = rf.totals()
    exposed = rf.exposure(fused=True).exposed
    carriers = Counter()
    for r in analysis.rows:
        if r.kind == "collective":
            d = rf.comm_detail(r.index)
            carriers[f"{r.comm_kind} {d.algorithm} {d.tier}"] += rf.times[r.index].comm_s
    return {
        "volume": analysis.summary["comm_bytes"],
        "spatial": mean["comm_time_s"].get("spatial", 0.0),
        "temporal": mean["comm_time_s"].get("temporal", 0.0),
        "comm": tot["comm_time_s"],
        "exposed": sum(exposed),
        "forward": tot["est_time_fused_overlap_s"],
        "compute": tot["est_time_fused_s"] - tot["comm_time_s"],
        "carrier": carriers.most_common(1)[0][0] if carriers else "-",
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", nargs="+", default=list(SHAPES), choices=SHAPES)
    p.add_argument("--strategy", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    p.add_argument("--systems", nargs="+", default=list(SYSTEMS))
    args = p.parse_args(argv)

    from mhlo_cost.analysis.collectors import assign_blocks

    print(f"STDiT3-XL/2, bf16, batch 2, one forward on {DEVICES} devices; times in ms per forward "
          "(exposed: with fused compute)")
    head = (f"{'shape':<13}{'strategy':<10}{'system':<10}{'comm GB':>9}{'spatial':>9}{'temporal':>9}"
            f"{'comm':>9}{'exposed':>9}{'exp %':>7}{'compute':>9}{'forward':>9}  most comm time in")
    print(head)
    print("-" * len(head))
    t0 = time.perf_counter()
    for shape in args.shape:
        for strategy in args.strategy:
            analysis = analysis_of(shape, strategy)
            blocks = assign_blocks(analysis)
            for system in args.systems:
                f = figures(analysis, blocks, system)
                pct = 100 * f["exposed"] / f["comm"] if f["comm"] else 0.0
                print(f"{shape:<13}{strategy:<10}{system:<10}{f['volume'] / 1e9:>9.2f}{f['spatial'] * 1e3:>9.3f}"
                      f"{f['temporal'] * 1e3:>9.3f}{f['comm'] * 1e3:>9.2f}{f['exposed'] * 1e3:>9.2f}{pct:>6.0f}%"
                      f"{f['compute'] * 1e3:>9.2f}{f['forward'] * 1e3:>9.2f}  {f['carrier']}", flush=True)
    print(f"\n{len(args.shape) * len(args.strategy)} lowerings and {len(args.shape) * len(args.strategy) * len(args.systems)}"
          f" estimates in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
