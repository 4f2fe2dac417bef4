"""Decode estimates against published single-batch measurements (benchmarks/data/published_decode.toml).

For each measurement: lower the decode step of the model's configuration (transformers class from shapes, the
static KV cache an argument; cached on disk, so a second run only estimates), estimate it on the GPU's
profile with mhlo-cost's roofline (compiled: fused kernels; tensor parallel scaled from the one-device program
with two all_reduces per layer) and print estimated/measured time per token. The last line says how many are
within 15%. Nothing here is fitted to these numbers.

    PYTHONPATH=. python benchmarks/validate_decode.py [--data FILE] [--no-cache]
"""
from __future__ import annotations

import argparse
import os
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None) -> int:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=os.path.join(HERE, "data", "published_decode.toml"))
    p.add_argument("--no-cache", action="store_true")
    args = p.parse_args(argv)
    from mhlo_cost.hardware import get_profile
    from mhlo_cost.inference import StepRequest
    from mhlo_cost.inference.grid import StepCache, default_dir
    from mhlo_cost.inference.serve import figures

    with open(args.data, "rb") as f:
        data = tomllib.load(f)["measurement"]
    cache = StepCache(None if args.no_cache else default_dir())
    within = 0
    print(f"{'id':<34} {'gpu':<14} {'tp':>2} {'measured ms':>11} {'estimated ms':>12} {'est/meas':>8}")
    for m in data:
        req = StepRequest(mode="decode", batch=m["batch"], context=m["context"], hf=m["hf"], config=m["config"],
                          overrides=tuple(sorted(m["set"].items())), dtype=m["dtype"])
        hw = get_profile(m["gpu"])
        fig = cache.figures(req, hw, m["tp"])
        if fig is None:
            step, _ = cache.step(req)
            fig = figures(step, hw, m["tp"], blocks=False)
            cache.put(req, hw, m["tp"], fig)
        measured = m["time_per_token_s"] if "time_per_token_s" in m else m["batch"] / m["tokens_per_s"]
        ratio = fig.step_time_s / measured
        within += abs(ratio - 1) <= 0.15
        print(f"{m['id']:<34} {hw.name:<14} {m['tp']:>2} {measured * 1e3:>11.3f} {fig.step_time_s * 1e3:>12.3f} "
              f"{ratio:>8.3f}")
    print(f"{within} of {len(data)} within 15% (estimated time per token / measured)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
