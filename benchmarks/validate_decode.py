"""Decode estimates against published single-batch measurements (benchmarks/data/published_decode.toml).

For each measurement: lower the decode step of the model's configuration (transformers class from shapes, the
static KV cache an argument; cached on disk, so a second run only estimates), estimate it on the GPU's
profile with mhlo-cost's roofline (compiled: fused kernels; tensor parallel scaled from the one-device program
with two all_reduces per layer) and print estimated/measured time per token. The last line says how many are
within 15% and the median |error|. Each entry is estimated with its kernels launched as the measured program
launched them (``launch``: ``cuda-graphs`` for torch.compile's reduce-overhead / max-autotune decode, no host
launch per kernel); the ``stream`` column is the same step with one host launch per kernel, for comparison.
Nothing here is fitted to these numbers.

    PYTHONPATH=. python benchmarks/validate_decode.py [--data FILE] [--no-cache]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))


def _figures(cache, req, hw, tp: int, launch: str):
    """The decode figures of ``req`` on ``hw`` (cached on disk)."""
    from mhlo_cost.studies.serve.serve import figures, launched

    hw = launched(hw, launch)
    fig = cache.figures(req, hw, tp)
    if fig is None:
        step, _ = cache.step(req)
        fig = figures(step, hw, tp, blocks=False, launch=launch)
        cache.put(req, hw, tp, fig)
    return fig


def main(argv=None) -> int:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=os.path.join(HERE, "data", "published_decode.toml"))
    p.add_argument("--no-cache", action="store_true")
    args = p.parse_args(argv)
    from mhlo_cost.machines.hardware import get_profile
    from mhlo_cost.studies.serve import StepRequest
    from mhlo_cost.files.cache import default_root
    from mhlo_cost.studies.serve.grid import StepCache

    with open(args.data, "rb") as f:
        data = tomllib.load(f)["measurement"]
    cache = StepCache(None if args.no_cache else default_root())
    errors = []
    print(f"{'id':<30} {'gpu':<14} {'tp':>2} {'launch':<11} {'measured ms':>11} {'estimated ms':>12} "
          f"{'est/meas':>8} {'stream ms':>9}")
    for m in data:
        req = StepRequest(mode="decode", batch=m["batch"], context=m["context"], hf=m["hf"], config=m["config"],
                          overrides=tuple(sorted(m["set"].items())), dtype=m["dtype"])
        launch = m.get("launch", "stream")
        est = {mode: _figures(cache, req, get_profile(m["gpu"]), m["tp"], mode)
               for mode in dict.fromkeys((launch, "stream"))}
        measured = m["time_per_token_s"] if "time_per_token_s" in m else m["batch"] / m["tokens_per_s"]
        fig = est[launch]
        ratio = fig.step_time_s / measured
        errors.append(abs(ratio - 1))
        print(f"{m['id']:<30} {fig.hardware:<14} {m['tp']:>2} {launch:<11} {measured * 1e3:>11.3f} "
              f"{fig.step_time_s * 1e3:>12.3f} {ratio:>8.3f} {est['stream'].step_time_s * 1e3:>9.3f}")
    within = sum(e <= 0.15 for e in errors)
    print(f"{within} of {len(errors)} within 15% (estimated time per token / measured); "
          f"median |error| {statistics.median(errors):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
