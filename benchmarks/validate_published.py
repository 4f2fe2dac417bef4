"""The GPU estimate against published measurements: every figure of ``benchmarks/data/published_gpu.toml``
(library GEMMs, attention kernels of FlashAttention-2 / -3 and cuDNN at head dims 64 / 128 / 256, norm kernels of
Liger, cuDNN, torch and torch.compile, training steps on A100 / H100 / H200, each with its source and exact
configuration) written as a program lowered from shapes and priced with the execution model that the measured code
runs as: ``compiled`` (``--fuse elementwise``, each attention one kernel of the library measured); torch's own eager
norm kernels (``impl = "torch"``) as the torch call lowered through torchax and run by ``--execution eager``.
Whole models of other sources (``benchmarks/data/published_models.toml``: timm's benchmark tables, transformers'
torch.compile guide, gpt-fast's decode) are lowered from their library's configuration and priced with the execution
the measured code ran as (``eager``, ``inductor``, CUDA graphs; :mod:`published_models`); they are category ``model``
(with ``model eager`` / ``model inductor`` lines) and count in the line with eager kernels, not in the compiled lines
or the compiled statement ``--write-accuracy`` writes.

Held out by source: the profile values fitted to these rows (``benchmarks/data/published_fits.toml``) are refitted
on every run, once on all rows (the value the shipped profiles should hold: a line says where they differ) and once
without each source; each source's rows are priced with the values fitted WITHOUT it (``benchmarks/held_out.py``).
Prints the fits, one line per figure (estimate, measurement, ratio, source), then per category, per library and per
source the held-out n, median and 90th percentile of |error| and the direction (the median of estimate / measured);
last line ``median |error| = X% (held out)`` over every held-out row of a kernel the compiled estimate describes
(torch's eager norm kernels are reported beside it, as ``memory_eager``: the eager execution model's figure, kept out
of the compiled accuracy statement).

    python benchmarks/validate_published.py [--only ID-SUBSTRING] [--write-accuracy]

``--write-accuracy`` rewrites ``mhlo_cost/machines/data/accuracy.toml`` (the statement printed beside every estimate)
from the held-out rows. Lowering the four GPT training steps takes a few minutes on a busy CPU.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import held_out  # noqa: E402
import norm_rows  # noqa: E402
import published_models as pm  # noqa: E402

DATA = os.path.join(ROOT, "benchmarks", "data", "published_gpu.toml")
MODELS = os.path.join(ROOT, "benchmarks", "data", "published_models.toml")  # whole models (published_models.py)
FITS = os.path.join(ROOT, "benchmarks", "data", "published_fits.toml")
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


def torch_norm(program, rows, cols, dtype):
    """The torch call a torch eager norm row measured (``torch.nn.functional.rms_norm`` / ``layer_norm`` with a
    weight, and a bias for LayerNorm), lowered through torchax: one framework call, which the eager execution
    model runs as one kernel (what ``lower --module`` then ``report --execution eager`` price)."""
    import torch

    from mhlo_cost.lower.frontends.torchax_frontend import lower_module

    class Norm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(cols))
            self.b = torch.nn.Parameter(torch.zeros(cols)) if program == "layer_norm" else None

        def forward(self, x):
            if self.b is None:
                return torch.nn.functional.rms_norm(x, (cols,), self.w, 1e-6)
            return torch.nn.functional.layer_norm(x, (cols,), self.w, self.b, 1e-5)
    return lower_module(Norm(), [(rows, cols)], dtype=dtype).text


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
    if is_torch_eager(m):
        return torch_norm(m["program"], **p)
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


def measured_s(m, count=None) -> float:
    """The measured time of row ``m`` in seconds; a TFLOP/s figure is turned into one with ``count(m)``, the
    source's FLOP count (default: ``counted_flops``); a whole-model row's as :func:`published_models.measured_s`."""
    if pm.is_model_program(m):
        return pm.measured_s(m)
    if m["unit"] == "ms":
        return m["measured"] * 1e-3
    if m["unit"] == "TFLOP/s":
        return (count or counted_flops)(m) / (m["measured"] * 1e12)
    raise ValueError(f"{m['id']}: unknown unit {m['unit']!r}")


def estimated_s(m, profiles=None) -> float:
    """The compiled estimate of the measured call; of an attention backward, the forward + VJP program's less the
    forward's (the measured call is the backward kernels alone). ``profiles`` (from a hardware file) are searched
    before the shipped ones."""
    hw = get_profile(m["chip"], profiles)
    if pm.is_model_program(m):  # a whole model, priced with the execution it ran as
        return pm.estimated_s(m, hw)
    lib = m["params"].get("library")
    if lib and hw.attention is not None and hw.attention.get(lib) is not None:
        hw = dataclasses.replace(hw, attention=dataclasses.replace(hw.attention, library=lib))

    def est(program):
        if is_torch_eager(m):  # torch's own kernel: the torch call, run by the eager execution model
            rf = Roofline(_analysis(dict(m, program=program)), hw, execution="eager")
        else:
            rf = Roofline(_analysis(dict(m, program=program)), hw, fuse_mode="elementwise")
        return rf.totals()["est_time_fused_s"]
    if m["program"] == "attention_bwd":
        return est("attention_bwd") - est("attention")
    return est(m["program"])


def is_torch_eager(m) -> bool:
    """A torch eager norm row (``impl = "torch"``): priced from the torch call with ``--execution eager``."""
    return m.get("impl") == "torch" and m["program"] in ("rms_norm", "layer_norm")


_ANALYSES: dict = {}


def _analysis(m):
    """The analysis of a row's program (lowered and walked once per program and shapes: the fits reprice rows)."""
    key = (m["program"], is_torch_eager(m), tuple(sorted(m["params"].items())))
    if key not in _ANALYSES:
        _ANALYSES[key] = analyze(lowered_text(m), AnalysisOptions(dataflow=True, records=("layouts",)))
    return _ANALYSES[key]


# -- the statistics -----------------------------------------------------------------------------------------
def p90(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, math.ceil(0.9 * len(xs)) - 1)]


def stats(ratios):
    errs = [abs(r - 1) for r in ratios]
    return statistics.median(errs), p90(errs), statistics.median(ratios)


def _line(label, ratios) -> str:
    if not ratios:
        return f"  {label:34} n=  0  (no figure)"
    med, q90, d = stats(ratios)
    way = "too slow" if d > 1 else "too fast"
    return f"  {label:34} n={len(ratios):3}  median |error| {med:6.1%}  p90 {q90:6.1%}  median ratio {d:.2f} ({way})"


def _compiled(m) -> bool:
    """A held-out row of a kernel the compiled estimate describes (not torch's eager norms, not a whole model run
    eager or by Inductor)."""
    return category(m) in CATEGORIES and m.get("execution", "compiled") == "compiled"


def summary_lines(results) -> list[str]:
    """Per category, per category and library (attention: the library; memory: the kernel's implementation) and
    per source: the held-out lines. ``results``: (row, ratio) of held-out rows."""
    lines = ["held out by source, per category:"]
    lines += [_line(cat, [r for m, r in results if cat == category(m)]) for cat in CATEGORIES + ("memory_eager",)]
    lines.append(_line("overall (compiled kernels)", [r for m, r in results if _compiled(m)]))
    lines.append(_line("overall with eager kernels", [r for _, r in results]))
    lines.append("per category and kernel:")
    kinds = sorted({(category(m), _kind(m)) for m, _ in results})
    lines += [_line(f"{c} {k}", [r for m, r in results if (category(m), _kind(m)) == (c, k)]) for c, k in kinds]
    lines.append("per source (each priced with the values fitted without it):")
    lines += [_line(src, [r for m, r in results if held_out.source_of(m) == src])
              for src in sorted({held_out.source_of(m) for m, _ in results})]
    return lines


def version_of(m) -> str:
    """The library version a row's configuration names (``cuDNN 9.19.1``), else ``-``."""
    hit = re.search(r"(?:cuDNN|FlashAttention-?[23]?|flash-attn)[ v]*([0-9]+\.[0-9][0-9.]*)", m.get("config", ""))
    return hit.group(1).rstrip(".") if hit else "-"


def table_lines(results, cat="attention_bwd") -> list[str]:
    """Every row of category ``cat``, grouped by source: library, version, head dim, causal, seq, measured and
    predicted (ms), ratio, and whether it is held out. ``results``: (row, ratio, held)."""
    out = [f"every {cat} row, by source (ratio = estimate / measured):",
           f"  {'source':24} {'library':7} {'version':8} {'d':>4} {'causal':6} {'seq':>6} {'measured':>10} "
           f"{'predicted':>10} {'ratio':>6}  held out"]
    mine = [(m, r, h) for m, r, h in results if m["category"] == cat]
    for m, r, h in sorted(mine, key=lambda x: (held_out.source_of(x[0]), _kind(x[0]), x[0]["params"]["head_dim"],
                                              x[0]["params"]["causal"], x[0]["params"]["seq"])):
        p, meas = m["params"], measured_s(m) * 1e3
        out.append(f"  {held_out.source_of(m)[:24]:24} {_kind(m):7} {version_of(m):8} {p['head_dim']:4} "
                   f"{'yes' if p['causal'] else 'no':6} {p['seq']:6} {meas:8.3f}ms {r * meas:8.3f}ms {r:6.2f}  "
                   f"{'yes' if h else 'no'}")
    return out


def category(m) -> str:
    """A row's category in the summaries: its own, or ``memory_eager`` for a torch eager kernel (``impl = "torch"``),
    which the compiled estimate does not describe (one ATen kernel per op, at the rate torch's kernel reaches)."""
    return "memory_eager" if m.get("impl") == "torch" else m["category"]


def _kind(m) -> str:
    return m["params"].get("library") or m.get("impl") or m.get("execution") or "-"


def write_accuracy(held, path=ACCURACY):
    """mhlo_cost/machines/data/accuracy.toml: the held-out median |error| per chip and category."""
    out = ["# Written by benchmarks/validate_published.py --write-accuracy: the held-out (leave one source out)",
           "# median |error| of the compiled estimate against published measurements, per chip and category.",
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


def _ratio(m, profiles) -> float:
    return estimated_s(m, {("fit", m["chip"]): profiles[m["chip"]]}) / measured_s(m)


def load_corpus(paths=(DATA, MODELS)) -> list[dict]:
    """Every row of the corpus files, in file order."""
    rows = []
    for path in paths:
        with open(path, "rb") as f:
            rows += tomllib.load(f)["m"]
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="run only the figures whose id contains this (the fits use those rows only)")
    ap.add_argument("--fits", default=FITS, help="the fitted values (default: benchmarks/data/published_fits.toml)")
    ap.add_argument("--write-accuracy", action="store_true")
    args = ap.parse_args(argv)
    corpus = [m for m in load_corpus() if not args.only or args.only in m["id"]]
    base = {c: get_profile(c) for c in sorted({m["chip"] for m in corpus})}
    results, lines = held_out.loso(held_out.load(args.fits), corpus, base, _ratio)
    print("\n".join(lines))
    print(f"{'id':44} {'chip':5} {'estimate':>10} {'measured':>10} {'ratio':>6}  source")
    for m, ratio in ((m, r) for m, r, _ in results):
        meas = measured_s(m)
        print(f"{m['id']:44} {m['chip']:5} {ratio * meas * 1e3:8.3f}ms {meas * 1e3:8.3f}ms {ratio:6.2f}  "
              f"{held_out.source_of(m)}", flush=True)
    print("\n".join(table_lines(results)))
    print("\n".join(norm_rows.table_lines(results, measured_s)))
    print("\n".join(pm.breakdown_lines(results, measured_s)))
    held = [(m, r) for m, r, h in results if h]
    out = [m["id"] for m, _, h in results if not h]
    if out:
        print(f"not held out ({len(out)} rows: a value their pricing uses has no row outside their source): "
              + ", ".join(out))
    print("ratio = estimate / measured; > 1: the estimate is slower than the measurement")
    print("\n".join(summary_lines(held)))
    compiled = [(m, r) for m, r in held if _compiled(m)]
    if args.write_accuracy:  # the statement of the compiled estimate: whole models run eager or by Inductor left out
        write_accuracy([(m["chip"], m["category"], m["id"], r) for m, r in compiled])
    if compiled:
        print(f"median |error| = {stats([r for _, r in compiled])[0]:.1%} (held out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
