"""STDiT3-XL/2 on a 16-chip mesh of SRAM-centric chips (4 x 4 chips of 4 x 4 cores): the published mesh table's
rows, with what the IR fixes and what the chip's figures decide.

For each video shape x strategy (Megatron, 2D (2 x 8), Ulysses, Ring; 16 devices) the bf16 model is lowered from
shapes (``lower --model stdit3 --parallel ...``), analysed once with its data flow, and priced by
:mod:`mhlo_cost.roofline.dataflow` on a dataflow system (default ``dataflow-4x4-mesh16``, a TEMPLATE: every chip
figure an ESTIMATE, ``mhlo_cost/machines/data/dataflow.toml``). Printed per device, one forward:

* from the IR alone (exact counts, any chip): GEMM and vector TFLOPs, comm volume (GB, nccl-tests bus convention),
  the memory peak (GB; fused, attention one kernel), the weights (GB); beside them the independent closed forms of
  ``tests/stdit3_formula.py``: 16 x the GEMM FLOPs over the whole unsharded model's (1.00: split evenly; above:
  work repeated on every device) and the comm volume's ratio to its closed form;
* from the chip's figures: the blocks whose weights stay in SRAM (resident / all), the blocks that spill
  activations, the DRAM traffic, the longest collective path in chip hops, the SRAM policy the least DRAM
  traffic chose (w-first: weights first; a-first: activations first), the latency of one forward and of a
  30-step run, what bounds the most time, and utilisation (GEMM FLOPs / (latency x the bf16 matrix peak));
  beside it, ``as GPU``: the same chip priced as a GPU would be (its DRAM as HBM, every fused kernel's bytes
  through it, collectives by the alpha-beta model of one link: ``Roofline(..., fuse_mode="elementwise")``), ms.

The published figures we can source are in ``benchmarks/data/published_stdit3_mesh.toml`` (printed at the end);
that file says which of the published columns the IR reproduces and what each other column needs.

    python benchmarks/stdit3_dataflow.py [--shape 204_640_360 ...] [--strategy megatron ...]
        [--system dataflow-4x4-mesh16] [--profile-file my_dataflow.toml] [--small]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import tomllib
from collections import Counter

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # lowering needs no accelerator
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

SHAPES = ("204_640_360", "408_640_360", "51_1280_720", "102_1280_720")
STRATEGIES = ("megatron", "2d", "ulysses", "ring")
DEVICES = 16
STEPS = 30
PUBLISHED = os.path.join(HERE, "data", "published_stdit3_mesh.toml")


def point(cfg, strategy: str, devices: int, system) -> dict:
    """The IR's figures and the dataflow price of ``cfg`` under ``strategy`` on ``devices`` devices."""
    from stdit3_formula import comm_bytes, gemm_flops

    from mhlo_cost.analysis import AnalysisOptions, analyze
    from mhlo_cost.analysis.collectors import assign_blocks
    from mhlo_cost.lower.models import parallel
    from mhlo_cost.roofline import Roofline
    from mhlo_cost.roofline.dataflow import block_loads, price_blocks
    from mhlo_cost.roofline.memory import fused_profile

    plan = parallel.make_plan(strategy, devices, None, cfg)
    analysis = analyze(parallel.lower(cfg, plan).as_text(debug_info=True), AnalysisOptions(dataflow=True))
    memory = fused_profile(analysis, attention="fused")
    loads = block_loads(analysis, assign_blocks(analysis), memory, system.chip)
    prices = price_blocks(loads, system)
    policy = "w-first" if prices == price_blocks(loads, system, "weights-first") else "a-first"
    as_gpu = Roofline(analysis, system.chip.as_hardware(), fuse_mode="elementwise").totals()["est_time_fused_s"]
    s = analysis.summary
    gemm = s["gemm_flops"] + s["conv_flops"]
    latency = sum(p.time_s for p in prices)
    bound = Counter()
    for p in prices:
        bound[p.bound] += p.time_s
    weighted = [p for p in prices if p.weights != "none"]
    return {
        "gemm": gemm, "vector": s["vector_flops"], "comm": s["comm_bytes"], "peak": memory.peak_bytes,
        "weights": memory.param_bytes,
        "gemm_ratio": devices * s["gemm_flops"] / gemm_flops(cfg)["total"],
        "comm_ratio": s["comm_bytes"] / comm_bytes(cfg, strategy, tuple(plan.mesh_shape))["total"],
        "resident": sum(p.weights == "resident" for p in weighted), "weighted": len(weighted),
        "spilling": sum(p.spill_bytes > 0 for p in prices), "blocks": len(prices),
        "dram": sum(p.dram_bytes for p in prices), "hops": max((p.hops for p in prices), default=0),
        "policy": policy, "latency": latency, "as_gpu": as_gpu, "bound": bound.most_common(1)[0][0] if bound else "-",
        "util": gemm / (latency * system.chip.matrix_flops["bf16"]) if latency else 0.0,
    }


def published() -> dict:
    with open(PUBLISHED, "rb") as f:
        return tomllib.load(f)


def _header(system) -> str:
    c = system.chip
    print(f"STDiT3-XL/2, bf16, batch 2, one forward per device on {system.name} ({system.devices} chips of "
          f"{c.core_count} cores, {c.sram_bytes / 1e6:.0f} MB SRAM each; {system.description})")
    print("IR: exact counts, any chip | chip: the profile's figures (ESTIMATE where the profile says so)")
    head = (f"{'shape':<13}{'strategy':<9}{'GEMM TF':>9}{'vec TF':>8}{'n x/f':>7}{'comm GB':>9}{'/f':>6}"
            f"{'mem GB':>8}{'wts GB':>8}{'wts in SRAM':>13}{'spill':>7}{'DRAM GB':>9}{'hops':>5}"
            f"{'SRAM':>8}{'fwd ms':>9}{'30-step s':>10}{'util':>7}{'as GPU':>9}  bound")
    return head


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", nargs="+", default=list(SHAPES), choices=SHAPES)
    p.add_argument("--strategy", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    p.add_argument("--system", default="dataflow-4x4-mesh16")
    p.add_argument("--profile-file", default=None, help="a dataflow TOML of your own (dataflow_template.toml)")
    p.add_argument("--small", action="store_true", help="the reduced test configuration on 4 devices: a smoke run")
    args = p.parse_args(argv)

    import dataclasses

    from mhlo_cost.lower.models.config import STDiT3Config
    from mhlo_cost.machines.dataflow import get_dataflow_system

    system = get_dataflow_system(args.system, args.profile_file)
    devices = 4 if args.small else DEVICES
    head = _header(system)
    print(head)
    print("-" * len(head))
    t0, shapes = time.perf_counter(), ["small"] if args.small else args.shape
    for shape in shapes:
        cfg = STDiT3Config().small() if args.small else STDiT3Config().with_shape(shape)
        cfg = dataclasses.replace(cfg, dtype="bfloat16")
        for strategy in args.strategy:
            f = point(cfg, strategy, devices, system)
            print(f"{shape:<13}{strategy:<9}{f['gemm'] / 1e12:>9.2f}{f['vector'] / 1e12:>8.3f}{f['gemm_ratio']:>7.2f}"
                  f"{f['comm'] / 1e9:>9.2f}{f['comm_ratio']:>6.2f}{f['peak'] / 1e9:>8.2f}{f['weights'] / 1e9:>8.2f}"
                  f"{f['resident']:>6d} / {f['weighted']:<4d}{f['spilling']:>7d}{f['dram'] / 1e9:>9.2f}"
                  f"{f['hops']:>5d}{f['policy']:>8}"
                  f"{f['latency'] * 1e3:>9.1f}{f['latency'] * STEPS:>10.2f}{100 * f['util']:>6.1f}%"
                  f"{f['as_gpu'] * 1e3:>9.1f}  {f['bound']}",
                  flush=True)
    print(f"\n{len(shapes) * len(args.strategy)} points in {time.perf_counter() - t0:.0f} s")
    pub = published()
    print(f"\nPublished ({pub['source']['title']}, {pub['source']['url']}):")
    for row in pub["figure"]:
        print(f"  {row['shape']:<13}{row['strategy']:<9}{row['chip']:<10}{row['column']:<14}{row['value']:>8} "
              f"{row['unit']:<4} {row['note']}")
    print("\nColumns:")
    for col in pub["column"]:
        print(f"  {col['name']:<22}{col['reproduced']:<5} {col['needs']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
