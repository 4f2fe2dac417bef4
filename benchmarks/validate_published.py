"""The GPU estimate against published measurements: every figure of ``benchmarks/data/published_gpu.toml``
(library GEMMs, attention kernels, norm kernels, training steps on A100 / H100 / H200, each with its source and
exact configuration) written as a program lowered from shapes and priced with the execution model that the
measured code runs as: ``compiled`` (``--fuse elementwise``, each attention one kernel of the library measured).

Prints one line per figure (estimate, measurement, ratio), then per category and overall the median and the
90th percentile of |error| and the direction (the median of estimate / measured), for the fitting half (even
rows: the profile numbers that come from measurements were read off these rows only, see
``mhlo_cost/machines/data/hardware.toml``) and for the held-out half (odd rows); last line
``median |error| = X% (held out)``.

    python benchmarks/validate_published.py [--only ID-SUBSTRING] [--write-accuracy]

``--write-accuracy`` rewrites ``mhlo_cost/machines/data/accuracy.toml`` (the statement printed beside every estimate)
from the held-out rows. Lowering the four GPT training steps takes a few minutes on a busy CPU.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys
import tomllib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from mhlo_cost.analysis import AnalysisOptions, analyze  # noqa: E402
from mhlo_cost.machines.hardware import get_profile  # noqa: E402
from mhlo_cost.roofline.estimate import Roofline  # noqa: E402

DATA = os.path.join(ROOT, "benchmarks", "data", "published_gpu.toml")
ACCURACY = os.path.join(ROOT, "mhlo_cost", "machines", "data", "accuracy.toml")
CATEGORIES = ("gemm", "attention_fwd", "attention_bwd", "memory", "model")
F32 = jnp.float32


def _s(shape, dtype):
    return jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype))


# -- the programs, from shapes ----------------------------------------------------------------------------
def matmul(batch, m, n, k, dtype):
    a, b = (_s((batch, m, k), dtype), _s((batch, k, n), dtype)) if batch > 1 else (_s((m, k), dtype),
                                                                                  _s((k, n), dtype))
    return jnp.matmul, (a, b)


def gated_mlp(tokens, hidden, inter, act, dtype):
    def mlp(x, wg, wu, wd):
        g = x @ wg
        h = (jax.nn.silu(g) if act == "silu" else jax.nn.gelu(g, approximate=True)) * (x @ wu)
        return h @ wd
    return mlp, (_s((tokens, hidden), dtype), _s((hidden, inter), dtype), _s((hidden, inter), dtype),
                 _s((inter, hidden), dtype))


def attention(batch, heads, seq, head_dim, causal, dtype, library):
    def attn(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=F32) / math.sqrt(head_dim)
        if causal:
            i = jax.lax.iota(jnp.int32, seq)
            s = jnp.where(i[:, None] >= i[None, :], s, -jnp.inf)
        p = jax.nn.softmax(s, axis=-1).astype(q.dtype)
        return jnp.einsum("bhqk,bhkd->bhqd", p, v)
    x = _s((batch, heads, seq, head_dim), dtype)
    return attn, (x, x, x)


def attention_bwd(batch, heads, seq, head_dim, causal, dtype, library):
    """The forward and its VJP (what a training step runs); the backward kernels' time is this program's
    estimate less the forward's (:func:`estimated_s`)."""
    fwd, (x, _, _) = attention(batch, heads, seq, head_dim, causal, dtype, library)

    def step(q, k, v, do):  # the output kept, as a training step keeps it: the forward kernel whole
        o, pull = jax.vjp(fwd, q, k, v)
        return o, pull(do)
    return step, (x, x, x, x)


def rms_norm(rows, cols, dtype):
    def f(x, w):
        xf = x.astype(F32)
        y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-6)
        return (y * w.astype(F32)).astype(x.dtype)
    return f, (_s((rows, cols), dtype), _s((cols,), dtype))


def layer_norm(rows, cols, dtype):
    def f(x, w, b):
        xf = x.astype(F32)
        m = jnp.mean(xf, axis=-1, keepdims=True)
        v = jnp.mean((xf - m) ** 2, axis=-1, keepdims=True)
        return (((xf - m) * jax.lax.rsqrt(v + 1e-6)) * w + b).astype(x.dtype)
    return f, (_s((rows, cols), dtype), _s((cols,), dtype), _s((cols,), dtype))


BUILDERS = {"matmul": matmul, "gated_mlp": gated_mlp, "attention": attention, "attention_bwd": attention_bwd,
            "rms_norm": rms_norm, "layer_norm": layer_norm}
ATTENTION = ("attention", "attention_bwd")  # builders that take the library (the profile's, not the program's)


def _gpt_cfg(p):
    from mhlo_cost.lower.models.gpt import GPTConfig
    return GPTConfig(vocab=p["vocab"], hidden=p["hidden"], heads=p["heads"], layers=p["layers"], seq=p["seq"],
                     batch=p["batch"], dtype=p["dtype"], scan=True)


def lowered_text(m) -> str:
    p = dict(m["params"])
    if m["program"] == "gpt_train":
        from mhlo_cost.lower.training import lower_train_step
        return lower_train_step("gpt", _gpt_cfg(p), locations=False).text
    p.pop("library", None) if m["program"] not in ATTENTION else None
    fn, args = BUILDERS[m["program"]](**p)
    return jax.jit(fn).lower(*args).as_text()


# -- the measured side --------------------------------------------------------------------------------------
def _gpt_params(p) -> int:
    from mhlo_cost.lower.models.gpt import param_shapes
    return sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(param_shapes(_gpt_cfg(p))))


def counted_flops(m) -> int:
    """The source's FLOP count of the measured call (to turn a TFLOP/s figure into a time)."""
    p, rule = m["params"], m["flops"]
    if rule == "gemm":
        return 2 * p["batch"] * p["m"] * p["n"] * p["k"]
    if rule in ("attention", "attention_bwd"):
        f = 4 * p["batch"] * p["heads"] * p["seq"] ** 2 * p["head_dim"]
        f = f // 2 if p["causal"] else f
        return f if rule == "attention" else 5 * f // 2  # the backward: 2.5 x the forward (FlashAttention's count)
    if rule == "megatron":
        s = p["seq"]
        return p["batch"] * (6 * s * _gpt_params(p) + 12 * p["layers"] * p["hidden"] * s * s)
    raise ValueError(f"{m['id']}: no FLOP rule {rule!r} for a TFLOP/s figure")


def measured_s(m) -> float:
    if m["unit"] == "ms":
        return m["measured"] * 1e-3
    if m["unit"] == "TFLOP/s":
        return counted_flops(m) / (m["measured"] * 1e12)
    raise ValueError(f"{m['id']}: unknown unit {m['unit']!r}")


def estimated_s(m, profiles=None) -> float:
    """The compiled estimate of the measured call; of an attention backward, the forward + VJP program's less the
    forward's (the measured call is the backward kernels alone). ``profiles`` (from a hardware file) are searched
    before the shipped ones."""
    hw = get_profile(m["chip"], profiles)
    lib = m["params"].get("library")
    if lib and hw.attention is not None and hw.attention.get(lib) is not None:
        hw = dataclasses.replace(hw, attention=dataclasses.replace(hw.attention, library=lib))

    def est(text):
        rf = Roofline(analyze(text, AnalysisOptions(dataflow=True)), hw, fuse_mode="elementwise")
        return rf.totals()["est_time_fused_s"]
    if m["program"] == "attention_bwd":
        return est(lowered_text(m)) - est(lowered_text(dict(m, program="attention")))
    return est(lowered_text(m))


# -- the statistics -----------------------------------------------------------------------------------------
def p90(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, math.ceil(0.9 * len(xs)) - 1)]


def stats(ratios):
    errs = [abs(r - 1) for r in ratios]
    return statistics.median(errs), p90(errs), statistics.median(ratios)


def summary_lines(results, half: str):
    lines = []
    for cat in CATEGORIES + ("overall",):
        rs = [r for _, c, _, r in results if cat in (c, "overall")]
        if not rs:
            lines.append(f"  {half:9} {cat:14} n= 0  (no figure)")
            continue
        med, q90, d = stats(rs)
        way = "too slow" if d > 1 else "too fast"
        lines.append(f"  {half:9} {cat:14} n={len(rs):2}  median |error| {med:6.1%}  p90 {q90:6.1%}  "
                     f"median ratio {d:.2f} ({way})")
    return lines


def write_accuracy(held, path=ACCURACY):
    """mhlo_cost/machines/data/accuracy.toml: the held-out median |error| per chip and category."""
    out = ["# Written by benchmarks/validate_published.py --write-accuracy: the held-out (odd rows) median",
           "# |error| of the compiled estimate against published measurements, per chip and category.",
           "# Read by mhlo_cost/machines/accuracy.py for the line printed beside every estimate.", "",
           'source = "benchmarks/validate_published.py on benchmarks/data/published_gpu.toml"',
           'execution = "compiled"', ""]
    chips = sorted({chip for chip, _, _, _ in held})
    for chip in chips:
        out.append(f'[chip."{get_profile(chip).name}"]')
        for cat in CATEGORIES + ("overall",):
            rs = [r for ch, c, _, r in held if ch == chip and cat in (c, "overall")]
            if rs:
                med, _, d = stats(rs)
                out.append(f"{cat} = {{ median_error = {med:.3f}, median_ratio = {d:.3f}, n = {len(rs)} }}")
        out.append("")
    tail = chips_section(path)  # read before the file is truncated
    with open(path, "w") as f:
        f.write("\n".join(out) + tail)


#: Where benchmarks/validate_chips.py's per-chip table begins in accuracy.toml (kept when this script rewrites it).
CHIPS_MARKER = "# -- per chip: written by benchmarks/validate_chips.py"


def chips_section(path=ACCURACY) -> str:
    """The per-chip part of ``path`` (from :data:`CHIPS_MARKER` on; empty where there is none), which each writer
    of the file keeps."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return ""
    at = text.find(CHIPS_MARKER)
    return "" if at < 0 else "\n" + text[at:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="run only the figures whose id contains this")
    ap.add_argument("--write-accuracy", action="store_true")
    args = ap.parse_args(argv)
    with open(DATA, "rb") as f:
        corpus = tomllib.load(f)["m"]
    fit, held = [], []
    print(f"{'row':>3}  {'id':40} {'chip':5} {'estimate':>10} {'measured':>10} {'ratio':>6}")
    for i, m in enumerate(corpus):
        if args.only and args.only not in m["id"]:
            continue
        est, meas = estimated_s(m), measured_s(m)
        ratio = est / meas
        (fit if i % 2 == 0 else held).append((m["chip"], m["category"], m["id"], ratio))
        print(f"{i:3}  {m['id']:40} {m['chip']:5} {est * 1e3:8.3f}ms {meas * 1e3:8.3f}ms {ratio:6.2f}", flush=True)
    print("per category (ratio = estimate / measured; > 1: the estimate is slower than the measurement):")
    print("\n".join(summary_lines(fit, "fit") + summary_lines(held, "held-out")))
    if args.write_accuracy:
        write_accuracy(held)
    if held:
        print(f"median |error| = {stats([r for *_, r in held])[0]:.1%} (held out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
