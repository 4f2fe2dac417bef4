"""STDiT3-XL/2 eager on one A100 and on 8 x A100 under Ulysses, every published time beside its estimate.

Four shapes (204_640_360, 408_640_360, 51_1280_720, 102_1280_720), 30 sampling steps, batch 2 (classifier-free
guidance), bf16. Per shape, seconds per 30-step run and the ratio estimate / published of:

* ``jax``: ``--execution eager`` on the default lowering (``lower --model stdit3``: the JAX model);
* ``deployed``: on ``lower --model stdit3 --deployed`` (the torch module as OpenSora 1.2 runs it, torchax);
* ``ulysses8``: on ``lower --model stdit3 --parallel ulysses --devices 8`` (JAX, shard_map with its all_to_alls)
  on a DGX A100 (NVLink, NCCL's all_to_all);
* ``ulysses8 deployed``: the deployed module's one-device eager time split as the Ulysses lowering splits the
  JAX model's (ulysses8 x deployed / jax: the same kernels on an eighth of the tokens, plus the all_to_alls);
  the torch module has no parallel strategy of its own (``lower --deployed --parallel`` says why).

Then what the published table itself says about the 8-device runs: ``excess = T8 - T1 / 8``, the time an
8-device run takes beyond a perfect split of the one-device run (communication, and any work each device
does whole). Every estimate is the depth-1 / depth-2 lowering scaled to 28 blocks (exact for eager: its
kernels never span a block). Nothing here is fitted to the published times.

    python benchmarks/stdit3_scaling.py [--shape 51_1280_720 ...] [--devices 8] [--system dgx-a100]
"""
from __future__ import annotations

import argparse
import os
import sys
import tomllib

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # lowering needs no accelerator
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from stdit3_roofline import MEASURED_S, MEASURED_STEPS, eager_per_forward  # noqa: E402

PUBLISHED = os.path.join(HERE, "data", "published_stdit3_mesh.toml")
SHAPES = tuple(MEASURED_S)
DEPTH = 28


def measured_ulysses(devices: int = 8) -> dict[str, float]:
    """The published ``devices`` x A100 Ulysses times (seconds, 30 steps) per shape, from the data file."""
    with open(PUBLISHED, "rb") as f:
        pub = tomllib.load(f)
    return {r["shape"]: r["value"] for r in pub["figure"]
            if r["strategy"] == "ulysses" and r["chip"] == f"{devices} x a100" and r["column"] == "latency"}


def _jax_eager(shape: str, hw, parallel: str = "none", devices: int | None = None) -> tuple[float, float]:
    """(seconds, comm seconds) per forward of ``--execution eager`` on the JAX lowering (``parallel`` on
    ``devices``), depth 1 and 2 scaled to 28 blocks."""
    from mhlo_cost.analysis import AnalysisOptions, analyze
    from mhlo_cost.lower.frontends.bundled import bundled_config
    from mhlo_cost.lower.frontends.jax_frontend import lower
    from mhlo_cost.roofline import Roofline

    got = []
    for depth in (1, 2):
        cfg, _ = bundled_config("stdit3", parallel=parallel, devices=devices, shape=shape, depth=depth)
        rf = Roofline(analyze(lower("stdit3", cfg).text, AnalysisOptions(dataflow=True)), hw, execution="eager",
                      written="sdpa")
        tot = rf.totals()
        got.append((tot["est_time_fused_s"], tot.get("comm_time_s", 0.0)))
    (a1, c1), (a2, c2) = got
    return a1 + (DEPTH - 1) * (a2 - a1), c1 + (DEPTH - 1) * (c2 - c1)


def estimates(shape: str, devices: int = 8, system: str = "dgx-a100") -> dict:
    """Seconds per 30-step run of each estimate of ``shape`` (see the module's list), and the comm within
    the Ulysses one."""
    from mhlo_cost.machines.hardware import get_profile
    from mhlo_cost.network import resolve_profile

    a100 = get_profile("a100")
    jax1, _ = _jax_eager(shape, a100)
    dep1, _ = eager_per_forward(shape, a100, DEPTH, deployed=True)
    uly, comm = _jax_eager(shape, resolve_profile(system), "ulysses", devices)
    k = MEASURED_STEPS
    return {"jax": jax1 * k, "deployed": dep1 * k, "ulysses8": uly * k, "ulysses8 deployed": uly * dep1 / jax1 * k,
            "ulysses8 comm": comm * k}


def excess(one: float, many: float, devices: int) -> float:
    """Seconds a ``devices``-device run takes beyond a perfect split of the one-device run: T_n - T_1 / n."""
    return many - one / devices


# Each 1280x720 shape beside the 640x360 shape of (nearly) the same tokens T x S: 54,000 / 55,200 and
# 108,000 / 110,400 (the data file's S and T).
PARTNERS = {"51_1280_720": "204_640_360", "102_1280_720": "408_640_360"}


def measured_forward_h200() -> dict[str, float]:
    """Seconds per forward of the deployed STDiT3 (bf16, batch 2, eager) measured on the lent H200, per shape
    (``benchmarks/data/measured_h200.toml``, the ``stdit3`` rows): one-device forwards with no per-run work in them."""
    with open(os.path.join(HERE, "data", "measured_h200.toml"), "rb") as f:
        rows = tomllib.load(f)["m"]
    return {r["shape"]: r["measured_s"] for r in rows if r.get("kind") == "stdit3" and r.get("module") == "deployed"}


def t1_room(t1_hi: float, t1_lo: float, forward_ratio: float) -> float:
    """What a one-device run holds beyond ``forward_ratio`` times another's: T1_hi - r T1_lo.

    Write each published one-device run as T1 = F + V (F its 30 forwards, V any per-run work the timer spans).
    With r = F_hi / F_lo taken from forwards measured without any per-run work, T1_hi - r T1_lo = V_hi - r V_lo:
    the room the published one-device times leave for a per-run term that is larger at the higher resolution."""
    return t1_hi - forward_ratio * t1_lo


def beyond_tokens(excess_hi: float, excess_lo: float, tokens_hi: int, tokens_lo: int) -> float:
    """The part of one excess that another's, scaled by tokens, cannot account for: E_hi - E_lo N_hi / N_lo.

    Under Ulysses every all_to_all of OpenSora 1.2 moves B x T x S x C elements per device (the spatial blocks'
    q/k/v and output, the cross-attention's q and output: ``opensora/models/layers/blocks.py``
    ``SeqParallelAttention`` and ``SeqParallelMultiHeadCrossAttention``, ``opensora/acceleration/communications.py``
    ``_all_to_all``), in the same messages per peer at equal T x S; so do the copies around them and the gather
    after the last block. Whatever the link (the source names none), what grows with T x S at the low resolution
    scales by N_hi / N_lo at the high one; the rest of E_hi grows with something else."""
    return excess_hi - excess_lo * tokens_hi / tokens_lo


def _print_row(shape: str, est: dict, t1: float, t8: float | None, devices: int) -> None:
    r = [f"{est['jax']:>8.2f}{est['jax'] / t1:>7.3f}x", f"{est['deployed']:>8.2f}{est['deployed'] / t1:>7.3f}x"]
    for key in ("ulysses8", "ulysses8 deployed"):
        r.append(f"{est[key]:>8.2f}" + (f"{est[key] / t8:>7.3f}x" if t8 else f"{'':>8}"))
    speed = f"{t1 / t8:>6.2f} {est['deployed'] / est['ulysses8 deployed']:>5.2f}" if t8 else ""
    print(f"  {shape:<13}{t1:>8.2f}{t8 or float('nan'):>7.2f} " + " ".join(r) + f" {speed}")


def _print_partners(pub8: dict, devices: int) -> None:
    """Each 1280x720 shape against its 640x360 partner of equal tokens, from published and measured times only."""
    with open(PUBLISHED, "rb") as f:
        tokens = {s["name"]: s["S"] * s["T"] for s in tomllib.load(f)["shape"]}
    h200 = measured_forward_h200()
    pairs = [(hi, lo) for hi, lo in PARTNERS.items() if {hi, lo} <= set(pub8) and {hi, lo} <= set(h200)]
    if not pairs:
        return
    print(f"\n  1280x720 against 640x360 at equal tokens (published and measured times only, s per run): the\n"
          f"  {devices}-device excess not covered by the 640x360 one scaled by tokens, and the room T1 leaves for a\n"
          "  per-run term (T1_hi - r T1_lo, r the ratio of the deployed forwards measured on the H200):")
    for hi, lo in pairs:
        e_hi, e_lo = excess(MEASURED_S[hi], pub8[hi], devices), excess(MEASURED_S[lo], pub8[lo], devices)
        r = h200[hi] / h200[lo]
        print(f"  {hi:<13}vs {lo:<12} beyond tokens {beyond_tokens(e_hi, e_lo, tokens[hi], tokens[lo]):>6.2f} s"
              f"   T1 room {t1_room(MEASURED_S[hi], MEASURED_S[lo], r):>5.2f} s (r = {r:.3f})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", nargs="+", default=list(SHAPES))
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--system", default="dgx-a100")
    args = p.parse_args(argv)
    pub8 = measured_ulysses(args.devices)
    print(f"STDiT3-XL/2 eager, {MEASURED_STEPS}-step runs (s): published 1 x A100 (T1) and {args.devices} x A100 "
          f"Ulysses (T{args.devices}); each estimate and its ratio to the published time")
    print(f"  {'shape':<13}{'T1':>8}{'T' + str(args.devices):>7} {'jax':>16} {'deployed':>16} {'ulysses8':>16} "
          f"{'ulysses8 dep.':>16} {'speed-up pub/est':>12}")
    rows = {}
    for shape in args.shape:
        rows[shape] = est = estimates(shape, args.devices, args.system)
        _print_row(shape, est, MEASURED_S[shape], pub8.get(shape), args.devices)
    print(f"\n  the published table's excess of the {args.devices}-device run over T1/{args.devices} "
          "(s per run), and the estimate's (its all_to_alls, and what it runs whole on each device):")
    for shape, est in rows.items():
        if shape in pub8:
            pub_x = excess(MEASURED_S[shape], pub8[shape], args.devices)
            est_x = excess(est["deployed"], est["ulysses8 deployed"], args.devices)
            print(f"  {shape:<13}published {pub_x:>6.2f} s   estimate {est_x:>6.2f} s "
                  f"(all_to_all {est['ulysses8 comm']:.2f} s)")
    _print_partners(pub8, args.devices)
    return 0


if __name__ == "__main__":
    sys.exit(main())
