"""The estimate against what this project measured on lent GPUs (``benchmarks/data/measured_h200.toml`` and
``measured_h100.toml``, made by ``benchmarks/gpu_measure.py``): each measured program written from shapes, priced
on the ``h200`` / ``h100`` profile with the execution model the measured code runs as, estimate / measured per row.
The H100's rows are all held out: its eager fields were set from the H200 before it was measured.

* ``eager_kernel``: single elementwise ops of PyTorch eager (contiguous, broadcast, permuted, converting, over
  a size ramp), priced ``--execution eager``; the rows of role ``fit`` are the ones the profile's ``[MEAS]``
  numbers were read off (reported apart), the others are held out;
* ``reduction``: PyTorch eager's LayerNorm, softmax and mean over rows of 32-4096 elements, priced ``eager``
  (the mean one ``jnp`` call; LayerNorm and softmax lowered from torch through torchax: one aten call);
* ``corpus``: the programs of the published corpus (``benchmarks/data/published_gpu.toml``: torch.matmul,
  LayerNorm, RMSNorm, SDPA forward on the flash (FlashAttention-2) and cuDNN backends, gated MLPs), one kernel
  each but the gated MLP (eager, 8 kernels); all held out;
* ``stdit3``: one forward of STDiT3-XL/2 as OpenSora 1.2 deploys it (batch 2, bf16), ``--execution eager``
  (lowered at depth 1 and 2 and scaled by blocks, as ``benchmarks/stdit3_roofline.py``); ``compiled``: the
  same module at depth 2 under ``torch.compile`` against ``--execution compiled``. Held out.

Prints one line per row, then per kind the median |error| and the median ratio (> 1: the estimate is slower
than the measurement); last line ``median |error| = X% (held out)``.

    python benchmarks/validate_measured.py [--skip-stdit3] [--only SUBSTRING] [--write-accuracy]

``--write-accuracy`` (a whole run) writes ``mhlo_cost/machines/data/accuracy_eager.toml``: the held-out median |error| of
the rows priced ``eager`` (``model``: STDiT3's forwards; ``kernels``: single eager ops, reductions, gated MLPs),
which ``mhlo_cost.machines.accuracy`` prints beside an eager estimate on that chip.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tomllib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from mhlo_cost.analysis import AnalysisOptions, analyze  # noqa: E402
from mhlo_cost.machines.hardware import get_profile  # noqa: E402
from mhlo_cost.roofline import Roofline  # noqa: E402

#: (measurements, the profile that prices them): the H200's and the H100's.
DATA = ((os.path.join(ROOT, "benchmarks", "data", "measured_h200.toml"), "h200"),
        (os.path.join(ROOT, "benchmarks", "data", "measured_h100.toml"), "h100"))
ACCURACY = os.path.join(ROOT, "mhlo_cost", "machines", "data", "accuracy_eager.toml")
LIBRARY = {"flash": "fa2", "cudnn": "cudnn"}
#: The walk's record the eager model reads for the copies PyTorch makes: the views' layouts (roofline/strides.py).
LAYOUTS = ("layouts",)
B, T, S, C = 2, 60, 920, 1152  # STDiT3's activations at 204_640_360: [2, 60 x 920, 1152]


def _s(shape, dtype=jnp.bfloat16):
    return jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype))


def eager_program(name: str):
    """(function, argument specs) of an ``eager_kernel`` row, as gpu_measure.py runs it in torch."""
    x, v, xf = _s((B, T * S, C)), _s((B, 1, C)), _s((B, T * S, C), jnp.float32)
    x4 = _s((B, T, S, C))
    table = {
        "add contiguous bf16": (lambda a, b: a + b, (x, x)),
        "add broadcast [B,1,C] bf16": (lambda a, b: a + b, (x, v)),
        "mul broadcast (1+scale) bf16": (lambda a, b: a * (1 + b), (x, v)),
        "add bf16+f32 -> f32": (lambda a, b: a + b, (x, xf)),
        "to f32 (contiguous)": (lambda a: a.astype(jnp.float32), (x,)),
        "transposed -> contiguous copy": (lambda a: jnp.swapaxes(a, 1, 2).reshape(B * S, T, C), (x4,)),
        "add transposed + contiguous": (lambda a, b: jnp.swapaxes(a, 1, 2) + jnp.swapaxes(b, 1, 2), (x4, x4)),
        "where [B,T,1,1] mask": (lambda m, a, b: jnp.where(m, a, b), (_s((B, T, 1, 1), jnp.bool_), x4, x4)),
        "gelu tanh bf16": (lambda a: jax.nn.gelu(a, approximate=True), (x,)),
    }
    if name.startswith("add broadcast ") and name.endswith(" elements"):
        e = int(name.split()[2])
        return (lambda a, b: a + b), (_s((e // 1024, 1024)), _s((1, 1024)))
    return table[name]


def reduction_program(name: str):
    """(function, argument specs) of a ``reduction`` row, as gpu_measure.py runs it in torch (one aten call)."""
    if name.startswith("mean f32 rows of "):
        row = int(name.split()[-1])
        return (lambda a: a.mean(-1, keepdims=True)), (_s((2**27 // row, row), jnp.float32),)
    table = {"mean f32 [120,16,920,72] over 72": (lambda a: a.mean(-1, keepdims=True),
                                                  (_s((120, 16, 920, 72), jnp.float32),))}
    return table[name]


def torch_call_estimate(name: str, hw) -> float:
    """A one-aten-call row (``F.layer_norm``, ``softmax``) lowered from torch through torchax, so that its IR ops
    carry one source position: one eager kernel, as PyTorch runs it."""
    import torch
    import torch.nn.functional as F

    from mhlo_cost import lower_model

    class Call(torch.nn.Module):
        def forward(self, x):
            return F.layer_norm(x, (x.shape[-1],), eps=1e-6) if "layer_norm" in name else x.softmax(-1)

    spec = "2x55200x1152:bfloat16" if "layer_norm" in name else "1840x16x60x60:float32"
    text = lower_model(Call(), spec, frontend="torchax").text
    rf = Roofline(analyze(text, AnalysisOptions(dataflow=True, records=LAYOUTS)), hw, execution="eager")
    return rf.totals()["est_time_fused_s"]


def corpus_estimate(m: dict, hw) -> float | None:
    from validate_published import BUILDERS

    p = dict(m["params"])
    if m["program"] in ("add", "copy") or m["variant"].endswith("+bwd"):
        return None  # the streams the profile's efficiency was read off; backward: no builder here yet
    if m["program"] == "attention":
        lib = p["library"] = LIBRARY[m["variant"]]
        hw = dataclasses.replace(hw, attention=dataclasses.replace(hw.attention, library=lib))
    fn, args = BUILDERS[m["program"]](**p)
    execution = "eager" if m["program"] == "gated_mlp" else "compiled"
    return _priced(fn, args, hw, execution)


def _priced(fn, args, hw, execution: str) -> float:
    text = jax.jit(fn).lower(*args).as_text(debug_info=True)
    rf = Roofline(analyze(text, AnalysisOptions(dataflow=True, records=LAYOUTS)), hw, execution=execution)
    return rf.totals()["est_time_fused_s"]


def stdit3_estimate(shape: str, hw, execution: str, depth: int = 28, sdpa: str = "cudnn") -> float:
    """Seconds per forward; eager attention on cuDNN, the SDPA backend PyTorch 2.11 ran on the H200 (its kernel
    names in the data file)."""
    from mhlo_cost import lower_model
    from mhlo_cost.lower.models import stdit3_torch
    from mhlo_cost.lower.models.config import STDiT3Config

    times = []
    for d in (1, 2):
        cfg = dataclasses.replace(STDiT3Config().with_shape(shape), depth=d, dtype="bfloat16")
        specs = [f"{'x'.join(map(str, s))}:{str(t).replace('torch.', '')}" for s, t in stdit3_torch.input_specs(cfg)]
        text = lower_model(stdit3_torch.build(cfg, deployed=True), *specs, frontend="torchax").text
        a = analyze(text, AnalysisOptions(dataflow=True, records=LAYOUTS))
        rf = Roofline(a, hw, execution=execution, written="math", sdpa=sdpa)
        times.append(rf.totals()["est_time_fused_s"])
    return times[0] + (depth - 1) * (times[1] - times[0])


def rows_of(m: dict, hw, skip_stdit3: bool):
    """(label, estimate s, measured s) of one measured row (several for a ``compiled`` row)."""
    kind = m["kind"]
    if kind == "eager_kernel":
        fn, args = eager_program(m["name"])
        yield m["name"], _priced(fn, args, hw, "eager"), m["measured_ms"] * 1e-3
    elif kind == "reduction" and ("layer_norm" in m["name"] or "softmax" in m["name"]):
        yield m["name"], torch_call_estimate(m["name"], hw), m["measured_ms"] * 1e-3
    elif kind == "reduction":
        fn, args = reduction_program(m["name"])
        yield m["name"], _priced(fn, args, hw, "eager"), m["measured_ms"] * 1e-3
    elif kind == "corpus":
        est = corpus_estimate(m, hw)
        if est is not None:
            yield f"{m['program']} {m['variant']} {m['params']}", est, m["measured_ms"] * 1e-3
    elif kind == "stdit3" and m["module"] == "deployed" and not skip_stdit3:
        yield f"STDiT3 eager {m['shape']}", stdit3_estimate(m["shape"], hw, "eager"), m["measured_s"]
    elif kind == "compiled" and not skip_stdit3:
        for execution, key in (("eager", "eager_ms"), ("compiled", "compiled_ms")):
            est = stdit3_estimate(m["shape"], hw, execution, depth=m["depth"])
            yield f"STDiT3 depth {m['depth']} {execution} {m['shape']}", est, m[key] * 1e-3


def eager_category(m: dict, label: str) -> str | None:
    """The accuracy category of a row priced eager (None: priced compiled)."""
    if m["kind"] == "stdit3" or (m["kind"] == "compiled" and " eager " in label):
        return "model"
    if m["kind"] in ("eager_kernel", "reduction") or (m["kind"] == "corpus" and m["program"] == "gated_mlp"):
        return "kernels"
    return None


def write_accuracy(rows, path: str = ACCURACY) -> None:
    """``rows``: (chip profile name, category, ratio) of the held-out rows priced eager."""
    out = ["# Written by benchmarks/validate_measured.py --write-accuracy: the held-out median |error| of the eager",
           "# estimate against what this project measured on lent GPUs (benchmarks/data/measured_*.toml).",
           "# Read by mhlo_cost/machines/accuracy.py for the line printed beside an eager estimate.", "",
           'source = "benchmarks/validate_measured.py on benchmarks/data/measured_h200.toml and measured_h100.toml"',
           'execution = "eager"']
    for chip in sorted({c for c, _, _ in rows}):
        out += ["", f'[chip."{chip}"]']
        for cat in ("model", "kernels", "overall"):
            rs = [r for ch, c, r in rows if ch == chip and cat in (c, "overall")]
            if rs:
                med = statistics.median(abs(r - 1) for r in rs)
                out.append(f"{cat} = {{ median_error = {med:.3f}, median_ratio = {statistics.median(rs):.3f}, "
                           f"n = {len(rs)} }}")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def summary(results) -> list[str]:
    lines = []
    groups = list(dict.fromkeys(g for g, *_ in results))  # in the order first seen
    for group in groups + ["all held out"]:
        rs = [r for g, role, r in results if (g == group or group == "all held out") and
              (role == "held_out" or group != "all held out")]
        if group == "all held out":
            rs = [r for _, role, r in results if role == "held_out"]
        if rs:
            errs = [abs(r - 1) for r in rs]
            lines.append(f"  {group:28} n={len(rs):2}  median |error| {statistics.median(errs):6.1%}  "
                         f"max {max(errs):6.1%}  median ratio {statistics.median(rs):.2f}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-stdit3", action="store_true", help="leave out the STDiT3 rows (minutes of lowering)")
    ap.add_argument("--only", help="only the rows whose label contains this")
    ap.add_argument("--write-accuracy", action="store_true", help="write mhlo_cost/machines/data/accuracy_eager.toml")
    args = ap.parse_args(argv)
    results, eager_rows = [], []
    for path, chip in DATA:
        with open(path, "rb") as f:
            data = tomllib.load(f)
        hw = get_profile(chip)
        print(f"measured on: {data['machine']['gpu']}, torch {data['machine']['torch']}; priced on {hw.name}")
        for m in data["m"]:
            for label, est, meas in rows_of(m, hw, args.skip_stdit3):
                if args.only and args.only not in label:
                    continue
                group = f"{chip} {m['kind']} ({m['role']})" if m["role"] == "fit" else f"{chip} {m['kind']}"
                results.append((group, m["role"], est / meas))
                if m["role"] == "held_out" and eager_category(m, label):
                    eager_rows.append((hw.name, eager_category(m, label), est / meas))
                print(f"  {m['role']:8} {label[:70]:70} {est * 1e3:10.3f}ms {meas * 1e3:10.3f}ms {est / meas:6.2f}",
                      flush=True)
    print("per kind (ratio = estimate / measured):")
    print("\n".join(summary(results)))
    if args.write_accuracy:
        if args.skip_stdit3 or args.only:
            raise SystemExit("--write-accuracy needs the whole run (no --skip-stdit3, no --only)")
        write_accuracy(eager_rows)
    held = [r for _, role, r in results if role == "held_out"]
    if held:
        print(f"median |error| = {statistics.median(abs(r - 1) for r in held):.1%} (held out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
