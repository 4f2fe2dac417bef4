"""The compile gain (eager time / torch.compile time) against published and measured pairs
(benchmarks/data/published_compile_gain.toml).

For each pair: lower the program at one and two layers (the depth a pair measured, for STDiT3), price it as
PyTorch eager runs it (``--execution eager``) and as Inductor compiles it (``--execution inductor``; CUDA graphs
where the pair's mode replays them: reduce-overhead, max-autotune; a training step with its phases recorded, so
that Inductor compiles its forward and backward as two graphs and leaves the optimizer eager), scale both to the
pair's layer count
(``t(L) = t(1) + (L - 1) (t(2) - t(1))``; Inductor as the torch release the pair's ``torch`` names, where its source
names one) and print the predicted gain beside the measured one, their ratio, and
whether the prediction is on the measured side of 1 (faster or slower compiled). The last line says how many
predicted gains are within 15% of the measured ones and how many are on their direction. Nothing here is
fitted to these pairs.

    PYTHONPATH=. python benchmarks/validate_compile_gain.py [--data FILE] [--only ID]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
GRAPHS = ("reduce-overhead", "max-autotune")


def _texts_stdit3(p: dict) -> dict[int, str]:
    """{depth: IR} of the deployed STDiT3 module at the pair's depth, as benchmarks/validate_measured.py lowers it."""
    from mhlo_cost import lower_model
    from mhlo_cost.lower.models import stdit3_torch
    from mhlo_cost.lower.models.config import STDiT3Config

    cfg = dataclasses.replace(STDiT3Config().with_shape(p["shape"]), depth=p["depth"], dtype=p["dtype"],
                              batch=p["batch"])
    specs = [f"{'x'.join(map(str, s))}:{str(t).replace('torch.', '')}" for s, t in stdit3_torch.input_specs(cfg)]
    return {p["depth"]: lower_model(stdit3_torch.build(cfg, deployed=True), *specs, frontend="torchax").text}


def _texts_decode(p: dict) -> dict[int, str]:
    """{layers: IR} of the decode step at one and two layers (the step validate_decode.py lowers, cached)."""
    from mhlo_cost.files.cache import default_root
    from mhlo_cost.studies.serve import StepRequest
    from mhlo_cost.studies.serve.grid import StepCache

    cache = StepCache(default_root())
    out = {}
    for n in (1, 2):
        over = dict(p["set"], num_hidden_layers=n)
        req = StepRequest(mode="decode", batch=p["batch"], context=p["context"], hf=p["hf"], config=p["config"],
                          overrides=tuple(sorted(over.items())), dtype=p["dtype"])
        out[n] = cache.step(req)[0].lowered.text
    return out


def _texts_train(p: dict) -> dict[int, str]:
    """{layers: IR} of the bundled GPT's training step at the pair's width, one and two layers (the closest
    decoder the training lowering has: LayerNorm and a GELU MLP where Llama has RMSNorm and SwiGLU)."""
    from mhlo_cost.lower.models.gpt import GPTConfig
    from mhlo_cost.lower.training import lower_train_step

    s = p["set"]
    out = {}
    for n in (1, 2):
        cfg = GPTConfig(vocab=s["vocab_size"], hidden=s["hidden_size"], heads=s["num_attention_heads"], layers=n,
                        seq=p["seq"], batch=p["batch"], mlp_ratio=round(s["intermediate_size"] / s["hidden_size"]),
                        dtype=p["dtype"])
        out[n] = lower_train_step("gpt", cfg).text
    return out


def _texts_hf(p: dict) -> dict[int, str]:
    """{0: IR} of a whole transformers model from its configuration (``mhlo-cost lower --hf``; no weights)."""
    import json
    import tempfile

    from mhlo_cost.cli import main as cli

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "model.mlir")
        argv = ["lower", "--hf", p["hf"], "--input", p["input"], "-o", out, "-q"]
        for k, v in p.get("set", {}).items():
            argv += ["--set", f"{k}={json.dumps(v, separators=(',', ':'))}"]
        if cli(argv) != 0:
            raise SystemExit(f"{p['id']}: lowering failed")
        with open(out, encoding="utf-8") as f:
            return {0: f.read()}


TEXTS = {"stdit3": _texts_stdit3, "decode": _texts_decode, "train": _texts_train, "hf": _texts_hf}


def _times(text: str, hw, p: dict) -> tuple[float, float]:
    """(eager step, Inductor step) seconds of one program."""
    from mhlo_cost.analysis import AnalysisOptions, analyze
    from mhlo_cost.roofline import Roofline

    a = analyze(text, AnalysisOptions(dataflow=True, records=("layouts",),
                                      phases=p["kind"] == "train"))  # a training step's graphs
    rf = Roofline(a, hw, execution="inductor", cudagraphs=p["mode"] in GRAPHS, sdpa=p.get("sdpa", "auto"),
                  torch_version=p.get("torch"))  # the torch release the source names (None: a current one)
    tot = rf.totals()
    return tot["est_time_eager_overlap_s"], tot["est_time_fused_overlap_s"]


def predicted(p: dict) -> tuple[float, float]:
    """The predicted (eager, Inductor) seconds of a pair's step, scaled to its layer count."""
    from mhlo_cost.machines.hardware import get_profile

    hw = get_profile(p["gpu"])
    texts = TEXTS[p["kind"]](p)
    times = {n: _times(t, hw, p) for n, t in texts.items()}
    if len(times) == 1:
        return next(iter(times.values()))
    layers = p["set"]["num_hidden_layers"]
    e = times[1][0] + (layers - 1) * (times[2][0] - times[1][0])
    i = times[1][1] + (layers - 1) * (times[2][1] - times[1][1])
    return e, i


def measured(p: dict) -> tuple[float, float]:
    """The measured (eager, compiled) seconds of one step: a time as given, a throughput as the tokens of one
    step (decode: the batch; training: batch x sequence, per GPU) over it."""
    if p["unit"] in ("ms", "s"):
        scale = 1e-3 if p["unit"] == "ms" else 1.0
        return p["eager"] * scale, p["compiled"] * scale
    tokens = p["batch"] * p.get("seq", 1)
    return tokens / p["eager"], tokens / p["compiled"]


def main(argv=None) -> int:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(HERE, "data", "published_compile_gain.toml"))
    ap.add_argument("--only", metavar="ID", help="one pair")
    args = ap.parse_args(argv)
    with open(args.data, "rb") as f:
        pairs = tomllib.load(f)["pair"]
    if args.only:
        pairs = [p for p in pairs if p["id"] == args.only]
    print(f"{'id':<38} {'gpu':<5} {'mode':<15} {'measured':>8} {'predicted':>9} {'pred/meas':>9} {'direction':>9} "
          f"{'eager est/meas':>14} {'compiled est/meas':>17}")
    errors, same_way = [], 0
    for p in pairs:
        (me, mc), (pe, pc) = measured(p), predicted(p)
        m, g = me / mc, pe / pc
        way = (m > 1) == (g > 1)
        same_way += way
        errors.append(abs(g / m - 1))
        print(f"{p['id']:<38} {p['gpu']:<5} {p['mode']:<15} {m:>8.3f} {g:>9.3f} {g / m:>9.3f} "
              f"{'same' if way else 'OPPOSITE':>9} {pe / me:>14.3f} {pc / mc:>17.3f}", flush=True)
    within = sum(e <= 0.15 for e in errors)
    print(f"{within} of {len(errors)} within 15% (predicted gain / measured); {same_way} of {len(errors)} on the "
          f"measured direction; median |error| {statistics.median(errors):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
