"""STDiT3-XL/2's memory per device beside the published ``alloc_mem(GB)`` column.

For each video shape (default: the four published ones) the bf16 model is lowered from shapes alone on one
device and under Megatron, 2D, Ulysses and Ring-Attention on 16 devices (``mhlo_cost/lower/models/parallel.py``),
then analysed: arguments (parameters and inputs) and the peak of live bytes per device, unfused (every op its
own kernel: each intermediate stored) and fused (``--fuse elementwise``: values made and used inside one
fused kernel never stored). The published column (the OpenSora analysis this project reproduces) gives
7.0 GB per chip for Megatron on 16 chips at 204_640_360 and 3.7 GB for 2D and Ulysses; it is printed where
there is a figure. Sizes are decimal GB (1e9 bytes); every count is an exact integer until printed.

    python benchmarks/stdit3_memory.py [--shapes 204_640_360 ...] [--strategies none megatron ...] [--small]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # lowering needs no accelerator
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHAPES = ("204_640_360", "408_640_360", "51_1280_720", "102_1280_720")
STRATEGIES = ("none", "megatron", "2d", "ulysses", "ring")
DEVICES = 16
#: Published alloc_mem (GB per chip) by (shape, strategy).
PUBLISHED = {("204_640_360", "megatron"): 7.0, ("204_640_360", "2d"): 3.7, ("204_640_360", "ulysses"): 3.7}


def measure(shape: str, strategy: str, small: bool = False) -> dict:
    """The memory figures of STDiT3 (bf16) at ``shape`` under ``strategy`` (16 devices unless 'none')."""
    import dataclasses

    from mhlo_cost.roofline.memory import fused_profile
    from mhlo_cost.lower.models import parallel, stdit3
    from mhlo_cost.lower.models.config import STDiT3Config
    from mhlo_cost.analysis import AnalysisOptions, analyze

    cfg = STDiT3Config().small() if small else STDiT3Config().with_shape(shape)
    cfg = dataclasses.replace(cfg, dtype="bfloat16")
    t0 = time.perf_counter()
    if strategy == "none":
        lowered = stdit3.lower(cfg)
    else:
        lowered = parallel.lower(cfg, parallel.make_plan(strategy, 4 if small else DEVICES, cfg=cfg))
    analysis = analyze(lowered.as_text(debug_info=True), AnalysisOptions(dataflow=True))
    mem, fused, flash = analysis.memory, fused_profile(analysis), fused_profile(analysis, attention="fused")
    where, fwhere, awhere = (analysis.rows[p.peak_row].scope if p.peak_row is not None else "(arguments)"
                             for p in (mem, fused, flash))
    return {"shape": shape, "strategy": strategy, "devices": 1 if strategy == "none" else (4 if small else DEVICES),
            "params": mem.param_bytes, "inputs": mem.input_bytes, "peak": mem.peak_bytes,
            "peak_fused": fused.peak_bytes, "peak_flash": flash.peak_bytes, "where": where, "where_fused": fwhere,
            "where_flash": awhere, "ops": len(analysis.rows),
            "seconds": time.perf_counter() - t0}


def _gb(b: int) -> str:
    return f"{b / 1e9:8.2f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=list(SHAPES))
    p.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    p.add_argument("--small", action="store_true", help="the reduced test configuration (4 devices): a smoke run")
    args = p.parse_args(argv)
    print("STDiT3-XL/2, bf16, batch 2; per device, GB (1e9 bytes)")
    print("fused: --fuse elementwise --attention unfused; flash: --fuse elementwise (attention as one kernel)")
    print(f"{'shape':13} {'strategy':9} {'dev':>3} {'params':>8} {'inputs':>8} {'unfused':>8} {'fused':>8} "
          f"{'flash':>8} {'published':>9}  where (unfused | fused | flash)")
    for shape in args.shapes:
        for strategy in args.strategies:
            m = measure(shape, strategy, args.small)
            pub = PUBLISHED.get((shape, strategy))
            print(f"{shape:13} {strategy:9} {m['devices']:3d} {_gb(m['params'])} {_gb(m['inputs'])} "
                  f"{_gb(m['peak'])} {_gb(m['peak_fused'])} {_gb(m['peak_flash'])} "
                  f"{('%9.1f' % pub) if pub else ' ' * 9}  {m['where']} | {m['where_fused']} | {m['where_flash']}  "
                  f"({m['ops']} ops, {m['seconds']:.0f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
