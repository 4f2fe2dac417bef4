"""``serve --execution eager`` against the published eager decode figures (the ``decode`` pairs of
benchmarks/data/published_compile_gain.toml: each pair's ``eager`` side, a decode step of batch 1 in plain
PyTorch with a KV cache grown by concatenation).

For each pair: lower the transformers decode step with ``DynamicCache`` (what plain ``generate`` runs) at one and
two layers, price it with the eager execution model on the pair's chip, scale to the pair's layer count
(``t(L) = t(1) + (L - 1) (t(2) - t(1))``, as benchmarks/validate_compile_gain.py does) and print the estimate
beside the measured step, their ratio (estimate / measured), and, for reference, the same ratio of the
static-cache step priced by ``report --execution eager`` (what the tool could say before). Nothing is fitted.

    PYTHONPATH=. python benchmarks/validate_eager_decode.py [--data FILE] [--only ID]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))


def _time_s(pair: dict, cache: str, execution: str) -> float:
    """The step's seconds at the pair's layer count, from lowerings at one and two layers."""
    from mhlo_cost.files.cache import default_root
    from mhlo_cost.machines.hardware import get_profile
    from mhlo_cost.studies.serve import StepRequest
    from mhlo_cost.studies.serve.grid import StepCache
    from mhlo_cost.studies.serve.serve import figures

    steps = StepCache(default_root())
    hw = get_profile(pair["gpu"])
    t = {}
    for n in (1, 2):
        over = dict(pair["set"], num_hidden_layers=n)
        req = StepRequest(mode="decode", batch=pair["batch"], context=pair["context"], hf=pair["hf"],
                          config=pair["config"], overrides=tuple(sorted(over.items())), dtype=pair["dtype"],
                          cache=cache)
        t[n] = figures(steps.step(req)[0], hw, execution=execution, blocks=False).step_time_s
    layers = pair["set"]["num_hidden_layers"]
    return t[1] + (layers - 1) * (t[2] - t[1])


def _measured_s(pair: dict) -> float:
    """The measured eager step in seconds (a pair's unit: ms per step, or tokens/s at its batch)."""
    v = pair["eager"]
    return v / 1e3 if pair["unit"] == "ms" else pair["batch"] / v


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(HERE, "data", "published_compile_gain.toml"))
    ap.add_argument("--only", help="one pair's id")
    args = ap.parse_args(argv)
    with open(args.data, "rb") as f:
        pairs = [p for p in tomllib.load(f)["pair"] if p["kind"] == "decode" and (not args.only or p["id"] == args.only)]
    print(f"{'id':36s} {'gpu':5s} {'ctx':>5s} {'measured_ms':>11s} {'eager_ms':>9s} {'ratio':>6s} "
          f"{'static_eager_ms':>15s} {'ratio':>6s}")
    ratios = []
    for p in pairs:
        measured = _measured_s(p)
        dyn = _time_s(p, "dynamic", "eager")
        static = _time_s(p, "static", "eager")
        ratios.append(dyn / measured)
        print(f"{p['id']:36s} {p['gpu']:5s} {p['context']:5d} {measured * 1e3:11.2f} {dyn * 1e3:9.2f} "
              f"{dyn / measured:6.3f} {static * 1e3:15.2f} {static / measured:6.3f}")
    if ratios:
        errs = [abs(r - 1) for r in ratios]
        print(f"{len(ratios)} eager decode figures: median |error| {statistics.median(errs):.1%}, "
              f"ratios {', '.join(f'{r:.3f}' for r in ratios)} (estimate / measured; nothing fitted)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
