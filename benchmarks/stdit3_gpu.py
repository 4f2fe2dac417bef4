"""Measure the JAX STDiT3 forward on a GPU and print it beside mhlo-cost's roofline estimate for that chip.

On a machine with an NVIDIA GPU (and a CUDA build of jax):

    python benchmarks/stdit3_gpu.py [--shape 204_640_360] [--iters 10] [--steps 30]

runs STDiT3-XL/2 (bf16, batch 2) with random weights, timing properly: one call to compile (reported
apart), ``--warmup`` untimed calls, then ``--iters`` timed calls each ended by ``block_until_ready``; the
median is reported, with min and max. It then times one spatial and one temporal block, each jitted
alone with inputs of the shapes they see inside the model, and compares each measurement with the
roofline (unfused and fused) of the very program it ran, lowered from the same function, on the profile
of the chip (``jax.devices()[0].device_kind``: H100 -> ``h100``, H200 -> ``h200``, A100 -> ``a100``;
``--hardware`` overrides).

    python benchmarks/stdit3_gpu.py --dry-run

runs the same code on CPU with the small test configuration (``STDiT3Config().small()``, 2 iterations)
to prove the script works where no GPU is; its times mean nothing and it compares them with the h100
profile only to exercise the printing.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: device_kind substrings -> hardware profile names (first match wins).
DEVICE_PROFILES = (("h200", "h200"), ("h100", "h100"), ("a100", "a100"))


def profile_for(device_kind: str) -> str | None:
    kind = device_kind.lower()
    for key, name in DEVICE_PROFILES:
        if key in kind:
            return name
    return None


def random_params(cfg, seed: int = 0):
    """Random weights of the shapes of ``param_shapes(cfg)``, drawn on the device (N(0, 0.02^2); ones for
    the RMSNorm scales) so that no 2 GB tree is generated on the host."""
    import jax
    import jax.numpy as jnp

    from mhlo_cost.lower.models import stdit3

    shapes = stdit3.param_shapes(cfg)
    leaves, treedef = jax.tree_util.tree_flatten(shapes)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))

    @jax.jit
    def draw(key, like):
        return (0.02 * jax.random.normal(key, like.shape, jnp.float32)).astype(like.dtype)

    out = []
    for k, leaf in zip(keys, leaves):
        if len(leaf.shape) == 1 and leaf.shape[0] == cfg.head_dim:  # q_norm / k_norm scales
            out.append(jnp.ones(leaf.shape, leaf.dtype))
        else:
            out.append(draw(k, jnp.zeros(leaf.shape, leaf.dtype)))
    return jax.tree_util.tree_unflatten(treedef, out)


def random_inputs(cfg, seed: int = 1):
    import jax
    import jax.numpy as jnp

    from mhlo_cost.lower.models import stdit3

    x, t, y, fps = stdit3.input_shapes(cfg)
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    return (jax.random.normal(k1, x.shape, jnp.float32).astype(x.dtype),
            jnp.full(t.shape, 500.0, t.dtype),
            jax.random.normal(k2, y.shape, jnp.float32).astype(y.dtype),
            jnp.full(fps.shape, 24.0, fps.dtype))


def time_fn(fn, args, warmup: int, iters: int) -> dict:
    """Compile (timed apart), warm up, then time ``iters`` calls each ended by block_until_ready."""
    import jax

    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    compile_s = time.perf_counter() - t0
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t0)
    return {"median": statistics.median(ts), "min": min(ts), "max": max(ts), "n": len(ts),
            "first_call": compile_s}


def estimate_of(jitted, args, hw):
    """(unfused, fused, FLOPs) of the program ``jitted`` runs on ``args``, lowered again from shapes."""
    import jax

    from mhlo_cost.analysis import AnalysisOptions, analyze
    from mhlo_cost.roofline import Roofline

    specs = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), args)
    text = jitted.lower(*specs).as_text(debug_info=True)
    rf = Roofline(analyze(text, AnalysisOptions(dataflow=True)), hw, fuse_mode="elementwise")
    tot = rf.totals()
    return tot["est_time_s"], tot["est_time_fused_s"], rf.flops, rf.reference_peak


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="204_640_360", help="video shape FRAMES_WIDTH_HEIGHT")
    p.add_argument("--iters", type=int, default=10, help="timed calls (median reported)")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls after the compiling one")
    p.add_argument("--steps", type=int, default=30, help="sampling steps of a run (for the run figure)")
    p.add_argument("--hardware", help="profile to compare with (default: from the device kind)")
    p.add_argument("--no-blocks", dest="blocks", action="store_false", help="skip the per-block timings")
    p.add_argument("--dry-run", action="store_true", help="CPU, small configuration, 2 iterations")
    args = p.parse_args(argv)
    if args.dry_run:
        os.environ["JAX_PLATFORMS"] = "cpu"
        args.iters, args.warmup = 2, 1

    import jax

    from mhlo_cost.machines.hardware import get_profile
    from mhlo_cost.lower.models import stdit3
    from mhlo_cost.lower.models.config import STDiT3Config

    dev = jax.devices()[0]
    kind = getattr(dev, "device_kind", dev.platform)
    name = args.hardware or profile_for(kind)
    if name is None:
        if not args.dry_run:
            print(f"stdit3_gpu.py: error: no hardware profile for device {kind!r} ({dev.platform}); "
                  "pass --hardware NAME, or --dry-run to exercise the script on CPU", file=sys.stderr)
            return 2
        name = "h100"
    hw = get_profile(name)
    cfg = STDiT3Config().small() if args.dry_run else STDiT3Config().with_shape(args.shape)
    label = "small test config (dry run)" if args.dry_run else f"STDiT3-XL/2 {args.shape}"
    print(f"device: {kind} ({dev.platform}); comparing with profile {hw.name}"
          + ("  [dry run: CPU times mean nothing]" if args.dry_run else ""))
    print(f"model: {label}, batch {cfg.batch}, T={cfg.tokens_t} S={cfg.tokens_s}, depth {cfg.depth}, {cfg.dtype}")

    if args.dry_run:
        params = stdit3.init_params(cfg, jax.random.PRNGKey(0))
    else:
        params = random_params(cfg)
    inputs = random_inputs(cfg)
    fwd = jax.jit(stdit3.make_forward(cfg))
    results = []  # (name, measured dict, unfused, fused, flops, peak)
    m = time_fn(fwd, (params, *inputs), args.warmup, args.iters)
    results.append(("forward", m, *estimate_of(fwd, (params, *inputs), hw)))

    if args.blocks:
        import jax.numpy as jnp

        c, b = cfg.hidden, cfg.batch
        n = cfg.tokens_t * cfg.tokens_s
        k = jax.random.split(jax.random.PRNGKey(2), 3)
        dt = stdit3.dtype_of(cfg)
        h = jax.random.normal(k[0], (b, n, c), jnp.float32).astype(dt)
        cap = jax.random.normal(k[1], (b, cfg.caption_tokens, c), jnp.float32).astype(dt)
        t_mod = (0.1 * jax.random.normal(k[2], (b, 6 * c), jnp.float32)).astype(dt)
        for kind_name, temporal, key in (("spatial block", False, "spatial_blocks"),
                                         ("temporal block", True, "temporal_blocks")):
            def block(p, x, y, t, _temporal=temporal):
                return stdit3.stdit3_block(p, x, y, t, cfg, temporal=_temporal, T=cfg.tokens_t, S=cfg.tokens_s)

            fn = jax.jit(block)
            bargs = (params[key][0], h, cap, t_mod)
            m = time_fn(fn, bargs, args.warmup, args.iters)
            results.append((kind_name, m, *estimate_of(fn, bargs, hw)))

    print()
    print(f"{'':<16}{'measured':>11}{'(min..max)':>22}{'roofline':>11}{'fused':>10}"
          f"{'meas/fused':>12}{'achieved util.':>16}")
    for what, m, unfused, fused, flops, peak in results:
        util = flops / (m["median"] * peak) if m["median"] > 0 else math.nan
        rng = f"({m['min'] * 1e3:.2f}..{m['max'] * 1e3:.2f} ms)"
        print(f"{what:<16}{m['median'] * 1e3:>9.2f}ms{rng:>22}{unfused * 1e3:>9.2f}ms{fused * 1e3:>8.2f}ms"
              f"{m['median'] / fused:>11.2f}x{util:>16.3f}")
    fwd_m = results[0][1]
    print()
    print(f"first call (compile + run) of the forward: {fwd_m['first_call']:.1f} s; "
          f"median of {fwd_m['n']} timed calls after {args.warmup} warm-up calls")
    print(f"a run of {args.steps} steps: measured {fwd_m['median'] * args.steps:.2f} s, "
          f"roofline {results[0][2] * args.steps:.2f} s unfused / {results[0][3] * args.steps:.2f} s fused")
    if len(results) == 3:
        per_pair = results[1][1]["median"] + results[2][1]["median"]
        print(f"{cfg.depth} x (spatial + temporal) blocks alone: {per_pair * cfg.depth * 1e3:.1f} ms "
              f"of the {fwd_m['median'] * 1e3:.1f} ms forward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
