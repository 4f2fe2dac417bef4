"""Calibration: microbenchmarks through JAX on the local default device, written as a hardware profile.

What is measured (each the fastest of several timed runs after a warm-up, ``block_until_ready``: the
device's rate when nothing else runs beside it; other load on a shared machine only adds time; with
``statistic="median"`` the median run instead: the rate under the machine's load of the moment, to compare
with programs' median runs under the same load):

* **matmul** per dtype (f32, bf16) over square sizes: the best achieved FLOP/s is the profile's matrix
  rate, and achieved / best at each size's FLOPs is the GEMM efficiency curve (:mod:`mhlo_cost.machines.gemm`);
* **stream bandwidth**: ``y = 2 x`` over a 16 MB f32 array (1 GiB on an accelerator; read + write bytes /
  time), the profile's ``hbm_bandwidth`` (on a CPU: DRAM, output allocation included, as a program pays it);
* **vector rate**: 32 multiply-adds per element of a 1 Mi-element array (f32, bf16), fused into one loop;
* **transcendental rate**: 8 independent special functions per element (exp and tanh), summed;
* **row-reduction fusion**: ``x - max(x, row)`` against ``2 x`` over the same array: a ratio above
  :data:`ROW_PASS_LIMIT` means the reduction is a pass of its own (``row_fusion = false``: XLA:CPU);
* **fixed cost of a kernel**: the slope of the time of chains of 1 and 41 tiny unfusable kernels (8 x 8
  dot + sine), so that a program's call overhead is not counted once per kernel.

:func:`calibrate` returns a :class:`Calibration`; :func:`profile_toml` writes it as a TOML profile that
``--hardware-file`` reads (with how each figure was measured, in comments).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

_SIZES = {"f32": (64, 128, 256, 512, 1024, 1536), "bf16": (64, 128, 256, 512, 1024)}
_QUICK_SIZES = {"f32": (32, 64, 128), "bf16": (32, 64)}
#: On an accelerator (a GPU, a TPU) the CPU's sizes measure its launch latency, not its rates: matmuls up to
#: 8192^3, a 1 GiB stream, 64 Mi elements of vector work (measured on an H200: the CPU sizes gave 34 TFLOP/s
#: bf16 and 0.54 TB/s, these sizes its rates).
_ACCEL_SIZES = {"f32": (256, 1024, 2048, 4096, 8192), "bf16": (256, 1024, 2048, 4096, 8192)}
#: (stream elements, vector elements, row-fusion rows) on the CPU and on an accelerator.
_ARRAYS = {"cpu": (1 << 22, 1 << 20, 4096), "accelerator": (1 << 28, 1 << 26, 65536)}
ROW_PASS_LIMIT = 1.25


@dataclass
class Calibration:
    device: str
    matmul: dict = field(default_factory=dict)  # dtype key -> [(flops of one dot, achieved FLOP/s)]
    bandwidth: float = 0.0  # bytes/s
    vector_f32: float = 0.0  # FLOP/s
    vector_bf16: float = 0.0
    transcendental: float = 0.0  # /s
    kernel_cost: float = 0.0  # s per extra small kernel
    call_cost: float = 0.0  # s of one call of a one-kernel program (reported, not in the profile)
    row_pass_ratio: float = 1.0  # x - max(x) over 2x: > ROW_PASS_LIMIT means no row-reduction fusion
    quick: bool = False
    statistic: str = "fastest"  # a key of STATISTICS: which run of each figure's runs it is
    stream_bytes: int = 1 << 25  # read + written bytes of the stream benchmark
    capacity_bytes: int = 0  # the device's memory, where JAX reports it (0: not known)


def run_times(fn, *args, runs: int = 5, min_total: float = 0.05) -> list[float]:
    """Wall times of ``fn(*args)`` (warm-up first; at least ``runs`` runs, more while under ``min_total``
    seconds in all, at most 2000)."""
    import jax

    jax.block_until_ready(fn(*args))
    ts: list[float] = []
    while len(ts) < runs or (sum(ts) < min_total and len(ts) < 2000):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t)
    return ts


STATISTICS = {"fastest": min, "median": statistics.median}


def _matmul(dtype: str, sizes, runs: int, min_total: float, pick=min) -> list:
    import jax
    import jax.numpy as jnp

    f = jax.jit(lambda a, b: a @ b)
    out = []
    for s in sizes:
        x = jnp.full((s, s), 0.5, dtype=jnp.dtype({"f32": "float32", "bf16": "bfloat16"}[dtype]))
        flops = 2 * s**3
        out.append((flops, flops / pick(run_times(f, x, x, runs=runs, min_total=min_total))))
    return out


def _stream(n: int, runs: int, budget: float, pick=min) -> float:
    import jax
    import jax.numpy as jnp

    x = jnp.ones((n,), jnp.float32)
    return 8 * n / pick(run_times(jax.jit(lambda a: a * 2.0), x, runs=runs, min_total=budget))


def _vector(n: int, runs: int, budget: float, pick=min) -> tuple[float, float, float]:
    """(f32 FLOP/s, bf16 FLOP/s, transcendentals/s): 32 multiply-adds per element in each dtype, and 8
    independent special functions per element (exp and tanh: softmax, GELU, SiLU)."""
    import jax
    import jax.numpy as jnp

    def fma(a):
        for _ in range(32):
            a = a * 0.999 + 0.001
        return a

    def special(a):  # independent, as in programs (a chain of them runs several times slower on XLA:CPU)
        return sum(jnp.exp(a * (0.1 * i)) if i % 2 else jnp.tanh(a * (0.1 * i)) for i in range(1, 9))

    out = []
    for dt in (jnp.float32, jnp.bfloat16):
        x = jnp.ones((n,), dt)
        out.append(64 * n / pick(run_times(jax.jit(fma), x, runs=runs, min_total=budget)))
    x = jnp.ones((n,), jnp.float32)
    return out[0], out[1], 8 * n / pick(run_times(jax.jit(special), x, runs=runs, min_total=budget))


def _kernel_cost(runs: int, budget: float, pick=min) -> tuple[float, float]:
    import jax
    import jax.numpy as jnp

    w = jnp.full((8, 8), 0.1, jnp.float32)

    def chain(k):
        def f(a):
            for _ in range(k):
                a = jnp.sin(a @ w)
            return a
        return jax.jit(f)

    z = jnp.ones((8, 8), jnp.float32)
    one = pick(run_times(chain(1), z, runs=runs * 4, min_total=budget))
    many = pick(run_times(chain(41), z, runs=runs * 4, min_total=budget))
    return max((many - one) / 40, 1e-8), one


def _row_fusion(rows: int, runs: int, budget: float, pick=min) -> float:
    """Time of ``x - max(x, row)`` over that of ``2 x`` on the same array: about 1 where the compiler runs a
    row reduction and its broadcast-back consumer as one pass, 1.5 or more where the reduction is a pass of
    its own (it then reads the input twice)."""
    import jax
    import jax.numpy as jnp

    x = jnp.ones((rows, 1024), jnp.float32)
    one, row = jax.jit(lambda a: a * 2.0), jax.jit(lambda a: a - a.max(-1, keepdims=True))
    ts: list[list[float]] = [[], []]
    for _ in range(max(3, int(budget / 0.05))):  # interleaved, so that both see the same quiet moments
        for j, f in enumerate((one, row)):
            ts[j] += run_times(f, x, runs=3, min_total=0.0)
    return pick(ts[1]) / pick(ts[0])


def step_count(quick: bool = False) -> int:
    """How many times :func:`calibrate` calls its ``progress``: a matmul per dtype, then four."""
    return len(_QUICK_SIZES if quick else _SIZES) + 4


def calibrate(quick: bool = False, progress=lambda msg: None, statistic: str = "fastest") -> Calibration:
    """Run the microbenchmarks on JAX's default device (``quick``: tiny sizes, for tests); each figure from
    the ``statistic`` of its runs (a key of :data:`STATISTICS`)."""
    import jax

    pick = STATISTICS[statistic]
    dev = jax.devices()[0]
    cal = Calibration(device=f"{dev.platform}: {getattr(dev, 'device_kind', '') or dev}", quick=quick,
                      statistic=statistic)
    runs = 3 if quick else 7
    budget = 0.01 if quick else 1.0  # seconds of runs per figure: the more, the likelier a quiet moment
    accel = dev.platform != "cpu" and not quick
    stream_n, vector_n, rows = (1 << 16, 1 << 12, 64) if quick else _ARRAYS["accelerator" if accel else "cpu"]
    cal.stream_bytes = 8 * stream_n
    stats = dev.memory_stats() if accel and hasattr(dev, "memory_stats") else None
    cal.capacity_bytes = int((stats or {}).get("bytes_limit", 0))
    for dtype, sizes in (_QUICK_SIZES if quick else _ACCEL_SIZES if accel else _SIZES).items():
        progress(f"matmul {dtype} {' '.join(map(str, sizes))}")
        cal.matmul[dtype] = _matmul(dtype, sizes, runs, budget, pick)
    progress("stream bandwidth")
    cal.bandwidth = _stream(stream_n, runs, budget, pick)
    progress("vector and transcendental rates")
    cal.vector_f32, cal.vector_bf16, cal.transcendental = _vector(vector_n, runs, budget, pick)
    progress("row-reduction fusion")
    cal.row_pass_ratio = _row_fusion(rows, runs, budget, pick)
    progress("small-kernel fixed cost")
    cal.kernel_cost, cal.call_cost = _kernel_cost(runs, budget, pick)
    return cal


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def profile_toml(cal: Calibration, name: str = "calibrated") -> str:
    """The calibration as a ``[profile.<name>]`` TOML table (figures in the file's units: TFLOP/s, GB/s, us)."""
    peaks = {d: max(r for _, r in pts) for d, pts in cal.matmul.items()}
    lines = [
        f"# Measured by `mhlo-cost calibrate`{' --quick' if cal.quick else ''} on {cal.device}.",
        f"# Each figure: the {cal.statistic} of several timed runs after a warm-up (jax.block_until_ready).",
        f"# One call of a one-kernel program took {_fmt(cal.call_cost * 1e6)} us (not part of the profile).",
        "schema_version = 1", "", f"[profile.{name}]",
        f'description = "calibrated on {cal.device}"',
        'source = "mhlo-cost calibrate (JAX microbenchmarks: matmul, y = 2x stream, FMA chains, special-function chain, '
        'kernel chain)"',
        f"hbm_bandwidth_gb_s = {_fmt(cal.bandwidth / 1e9)}   # y = 2x over a {_fmt(cal.stream_bytes / 2e6)} MB f32 "
        "array, read + write bytes",
        f"hbm_capacity_gb = {_fmt(cal.capacity_bytes / 1e9)}   # the device's memory limit (JAX memory_stats)"
        if cal.capacity_bytes else "hbm_capacity_gb = 16            # not measured",
        "link_bandwidth_gb_s = 1         # not measured: one device",
        "hop_latency_us = 1              # not measured: one device",
        f"kernel_overhead_us = {_fmt(cal.kernel_cost * 1e6)}   # extra time per small kernel in a chain",
        f"transcendental_tops = {_fmt(cal.transcendental / 1e12)}   # 8 independent exp / tanh per element",
        f"row_fusion = {'true' if cal.row_pass_ratio <= ROW_PASS_LIMIT else 'false'}"
        f"   # x - max(x, row) took {cal.row_pass_ratio:.2f} x the time of 2x (one pass: ~1)",
        "", f"[profile.{name}.matrix_tflops]",
    ]
    lines += [f"{d} = {_fmt(p / 1e12)}   # best matmul over the sizes" for d, p in sorted(peaks.items())]
    lines += ["", f"[profile.{name}.vector_tflops]",
              f"f32 = {_fmt(cal.vector_f32 / 1e12)}   # 32 multiply-adds per element, one fused loop",
              f"bf16 = {_fmt(cal.vector_bf16 / 1e12)}   # the same in bf16",
              f"int32 = {_fmt(cal.vector_f32 / 1e12)}   # not measured: taken as the f32 rate",
              "", f"[profile.{name}.gemm]", "efficiency = 1", "compute_units = 0",
              "", f"[profile.{name}.gemm.curve]   # [GFLOP of one dot, achieved / best]"]
    for d, pts in sorted(cal.matmul.items()):
        pairs = ", ".join(f"[{_fmt(f / 1e9)}, {_fmt(min(1.0, max(1e-4, r / peaks[d])))}]" for f, r in pts)
        lines.append(f"{d} = [{pairs}]")
    return "\n".join(lines) + "\n"
