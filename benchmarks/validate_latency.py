"""The latency estimate against measured runs on the local device: a corpus of JAX programs, each timed
(warm-up, ``block_until_ready``, several runs) and predicted by mhlo-cost from its lowered IR on a
calibrated profile of the same device (the default estimate: ``--fuse elementwise``, attention fused).

The profile and the programs are measured with the same statistic (``--statistic``): the median run
(default: a run as it goes under the machine's load of the moment) or the fastest (the device alone). A
profile calibrated on fastest runs predicts fastest runs; set against median runs on a shared machine it is
off by the other load, not by the model; and a profile calibrated a minute before the programs run is off by
how the load changed in between. So the script alternates and repeats: ``--rounds`` rounds, each a fresh
calibration followed at once by a share of every program's runs; a program's ratio is the median over
rounds of its ratio to the round's own profile.

Prints a table (program, predicted, measured median, ratio, fastest run, ratio) and last
``median |error| = X% (worst: NAME Y%)`` against the run of ``--statistic`` (the line before: the other).

    python benchmarks/validate_latency.py [--hardware-file cpu.toml --hardware calibrated] [--runs 9]
                                          [--statistic median|fastest] [--rounds 3]

Without ``--hardware-file`` it calibrates every round (``mhlo-cost calibrate`` with the same statistic, about
20 s on a CPU); a given file is used in every round as it is (its header says which statistic it took).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

F32, BF16 = jnp.float32, jnp.bfloat16


def _arr(shape, dtype, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32) * 0.1, dtype=dtype)


def _matmul(m, k, n, dt):
    return lambda x, y: x @ y, (_arr((m, k), dt), _arr((k, n), dt, 1))


def _chain(x):
    return jnp.tanh(x * 1.5 + 0.5) * x - 0.25


def _layer_norm(x):
    xf = x.astype(F32)
    m = xf.mean(-1, keepdims=True)
    v = ((xf - m) ** 2).mean(-1, keepdims=True)
    return ((xf - m) * jax.lax.rsqrt(v + 1e-5)).astype(x.dtype)


def _rms_norm(x):
    xf = x.astype(F32)
    return (xf * jax.lax.rsqrt((xf * xf).mean(-1, keepdims=True) + 1e-6)).astype(x.dtype)


def _attention(q, k, v):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(q.shape[-1]).astype(np.float32)
    p = jax.nn.softmax(s.astype(F32), -1).astype(q.dtype)
    return jnp.einsum("bhqk,bhkd->bhqd", p, v)


def _mlp(x, w1, w2):
    return jax.nn.gelu(x @ w1) @ w2


def _train_step(params, x, y):
    def loss(p):
        h = jax.nn.gelu(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] - y) ** 2)

    g = jax.grad(loss)(params)
    return jax.tree.map(lambda a, b: a - 1e-3 * b, params, g)


def _gpt():
    from mhlo_cost.lower.models import gpt

    cfg = gpt.GPTConfig(vocab=512, hidden=128, heads=4, layers=2, seq=128, batch=2, dtype="float32")
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, cfg.vocab, (cfg.batch, cfg.seq)), jnp.int32)
    return gpt.make_forward(cfg), (gpt.init_params(cfg, jax.random.PRNGKey(0)), tokens)


def _stdit3():
    from mhlo_cost.lower.models import stdit3
    from mhlo_cost.lower.models.config import STDiT3Config

    cfg = STDiT3Config().small()
    shapes = stdit3.input_shapes(cfg)
    args = [_arr(s.shape, s.dtype, i) for i, s in enumerate(shapes)]
    return stdit3.make_forward(cfg), (stdit3.init_params(cfg, jax.random.PRNGKey(0)), *args)


def corpus() -> list:
    """(name, function, arguments) of each program."""
    qkv = lambda dt, s: tuple(_arr((2, 8, s, 64), dt, i) for i in range(3))  # noqa: E731
    mlp_params = {"w1": _arr((256, 1024), F32, 1), "b1": _arr((1024,), F32, 2), "w2": _arr((1024, 256), F32, 3)}
    return [
        ("matmul f32 256", *_matmul(256, 256, 256, F32)),
        ("matmul f32 512", *_matmul(512, 512, 512, F32)),
        ("matmul f32 1024", *_matmul(1024, 1024, 1024, F32)),
        ("matmul f32 2048x256x2048", *_matmul(2048, 256, 2048, F32)),
        ("matmul f32 128x4096x128", *_matmul(128, 4096, 128, F32)),
        ("matmul bf16 512", *_matmul(512, 512, 512, BF16)),
        ("matmul bf16 1024", *_matmul(1024, 1024, 1024, BF16)),
        ("batched matmul f32 32x128", lambda x, y: x @ y, (_arr((32, 128, 128), F32), _arr((32, 128, 128), F32, 1))),
        ("elementwise chain f32 4M", _chain, (_arr((1 << 22,), F32),)),
        ("elementwise chain bf16 4M", _chain, (_arr((1 << 22,), BF16),)),
        ("add f32 4M", lambda x, y: x + y, (_arr((1 << 22,), F32), _arr((1 << 22,), F32, 1))),
        ("gelu f32 2M", jax.nn.gelu, (_arr((1 << 21,), F32),)),
        ("row sum f32 4096x1024", lambda x: x.sum(-1), (_arr((4096, 1024), F32),)),
        ("column max f32 4096x1024", lambda x: x.max(0), (_arr((4096, 1024), F32),)),
        ("softmax f32 2048x1024", lambda x: jax.nn.softmax(x, -1), (_arr((2048, 1024), F32),)),
        ("layer norm f32 4096x1024", _layer_norm, (_arr((4096, 1024), F32),)),
        ("rms norm bf16 4096x1024", _rms_norm, (_arr((4096, 1024), BF16),)),
        ("attention f32 2x8x256x64", _attention, qkv(F32, 256)),
        ("attention f32 2x8x512x64", _attention, qkv(F32, 512)),
        ("mlp f32 1024x512x2048", _mlp, (_arr((1024, 512), F32), _arr((512, 2048), F32, 1),
                                         _arr((2048, 512), F32, 2))),
        ("gpt small f32", *_gpt()),
        ("stdit3 small f32", *_stdit3()),
        ("training step mlp f32", _train_step, (mlp_params, _arr((512, 256), F32, 4), _arr((512, 256), F32, 5))),
    ]


def analyses(programs) -> list:
    """The dataflow analysis of each program's lowered IR (lowered once; priced on every round's profile)."""
    from mhlo_cost.analysis import AnalysisOptions, analyze

    return [analyze(jax.jit(fn).lower(*args).as_text(debug_info=True), AnalysisOptions(dataflow=True))
            for _, fn, args in programs]


def predict(analysis, hw, attention: str) -> float:
    """mhlo-cost's estimate (``--fuse elementwise``) of one analysed program on ``hw``."""
    from mhlo_cost.roofline import Roofline

    return Roofline(analysis, hw, fuse_mode="elementwise", attention=attention).totals()["est_time_fused_s"]


def evaluate(programs, profile, attention: str, runs: int, rounds: int) -> list:
    """Per program (predicted, median run, fastest run, predicted / median, predicted / fastest), in
    ``rounds`` alternating rounds: each round takes ``profile(round)`` (a fresh calibration, or the given file)
    and then times every program for its share of the runs, so that a round's profile and runs see the same
    load. Times are over all rounds' runs; predicted and the ratios are the median over rounds."""
    from mhlo_cost.roofline.calibrate import run_times

    an = analyses(programs)
    jitted = [jax.jit(fn) for _, fn, _ in programs]
    per: list[list[tuple]] = [[] for _ in programs]
    for r in range(rounds):
        hw = profile(r)
        for i, (f, (_, _, args)) in enumerate(zip(jitted, programs)):
            p = predict(an[i], hw, attention)
            ts = run_times(f, *args, runs=-(-runs // rounds), min_total=1.0 / rounds)
            per[i].append((p, ts, p / statistics.median(ts), p / min(ts)))
    med = statistics.median
    return [(med(x[0] for x in rs), med(t for x in rs for t in x[1]), min(t for x in rs for t in x[1]),
             med(x[2] for x in rs), med(x[3] for x in rs)) for rs in per]


def _summary(errors: list, what: str) -> str:
    worst = max(errors)
    return (f"median |error| = {100 * statistics.median(e for e, _ in errors):.1f}% "
            f"(worst: {worst[1]} {100 * worst[0]:.1f}%){what}")


def _profile(args):
    """round -> profile: the given file's, or a fresh calibration (with ``--statistic``) every round."""
    from mhlo_cost.machines.hardware import load_profiles
    from mhlo_cost.roofline.calibrate import calibrate, profile_toml

    def load(path):
        profiles = load_profiles(path)
        return profiles[args.hardware] if args.hardware else next(iter(profiles.values()))

    if args.hardware_file is not None:
        hw = load(args.hardware_file)
        return lambda r: hw

    def fresh(r):
        print(f"round {r + 1}: calibrating (mhlo-cost calibrate, {args.statistic} runs) ...", file=sys.stderr)
        path = os.path.join(tempfile.mkdtemp(), "calibrated.toml")
        with open(path, "w") as f:
            f.write(profile_toml(calibrate(progress=lambda m: print("  " + m, file=sys.stderr),
                                           statistic=args.statistic)))
        return load(path)
    return fresh


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hardware-file", help="a calibrated profile of this device (default: calibrate now)")
    ap.add_argument("--hardware", help="the profile's name in that file (default: its first)")
    ap.add_argument("--runs", type=int, default=9, help="timed runs per program (at least; 1 s in all)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds over the corpus (default 3)")
    ap.add_argument("--statistic", choices=("median", "fastest"), default="median",
                    help="the run compared with, and the one the calibration takes (default: median)")
    ap.add_argument("--attention", choices=("fused", "unfused"),
                    help="default: unfused on a CPU (XLA:CPU has no flash-attention kernel), fused elsewhere")
    args = ap.parse_args(argv)
    profile = _profile(args)
    dev = jax.devices()[0]
    attention = args.attention or ("unfused" if dev.platform == "cpu" else "fused")
    print(f"device: {dev.platform} {getattr(dev, 'device_kind', '')}; profile: {args.hardware_file or 'calibrated each round'}; attention: {attention}; "
          f"statistic: {args.statistic}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"{'program':<28} {'predicted_ms':>12} {'measured_ms':>12} {'ratio':>7} {'fastest_ms':>11} {'ratio':>7}")
    med, best = [], []
    programs = corpus()
    for (name, _, _), (p, m, b, rm, rb) in zip(programs, evaluate(programs, profile, attention, args.runs,
                                                                     max(1, args.rounds))):
        med.append((abs(rm - 1), name))
        best.append((abs(rb - 1), name))
        print(f"{name:<28} {p * 1e3:>12.4f} {m * 1e3:>12.4f} {rm:>7.3f} {b * 1e3:>11.4f} {rb:>7.3f}")
    if args.statistic == "median":
        print(_summary(best, " against the fastest run"))
        print(_summary(med, " against the median run"))
    else:
        print(_summary(med, " against the median run"))
        print(_summary(best, " against the fastest run"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
