"""The compile gain (eager time / torch.compile time) against every published and measured eager-vs-compile pair
we hold.

Two files, one number in one place:
- ``benchmarks/data/published_models.toml`` (the whole-model rows of ``validate_published.py``): an ``eager`` row
  and an ``inductor`` row that agree in program, chip, parameters (model, batch, image, dtype, autocast, ``set``),
  torch release, unit and published table (the same file at the same commit; timm's compiled twin of a CSV is its
  name with ``-dynamo``) make a pair (:func:`model_pairs`):
  the transformers guide's torch.compile table (ViT, BEiT, ConvNeXt-L, ResNet-50 on A100 at batch 1, 4 and 16) and
  timm's benchmark CSVs (eager against ``-dynamo`` of one commit, RTX 4090 and RTX 5090, batch 1024);
- ``benchmarks/data/published_compile_gain.toml``: the pairs that are not rows there (the deployed STDiT3 measured
  on a lent H200, gpt-fast's decode, torchtitan's training step, cloudai's decode).

For each pair: lower the program (at one and two layers where the pair's program is a decoder, scaled to its layer
count, ``t(L) = t(1) + (L - 1) (t(2) - t(1))``), price it as PyTorch eager runs it and as Inductor compiles it
(``--execution inductor``, whose summary gives both: :mod:`mhlo_cost.roofline.gain`; CUDA graphs where the pair's
mode replays them: reduce-overhead, max-autotune; a training step with its phases recorded, so that Inductor
compiles its forward and backward as two graphs and leaves the optimizer eager; Inductor as the torch release the
pair's source names, where it names one) and print the predicted gain beside the measured one, their ratio, and
whether the prediction is on the measured side of 1 (faster or slower compiled). The last lines say, per source and
in all, how many predicted gains are within 15% of the measured ones and how many are on their direction. Nothing
here is fitted to these pairs.

    PYTHONPATH=. python benchmarks/validate_compile_gain.py [--data FILE] [--models FILE] [--only ID] [--list]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import published_models as pm  # noqa: E402

DATA = os.path.join(HERE, "data", "published_compile_gain.toml")
MODELS = os.path.join(HERE, "data", "published_models.toml")
GRAPHS = ("reduce-overhead", "max-autotune")
#: A source's publisher: the repository at the commit its file is read at (``.../owner/name/blob/<commit>/``).
_TREE = re.compile(r"https://github\.com/[^/]+/[^/]+/blob/[0-9a-f]{40}/")


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


TEXTS = {"stdit3": _texts_stdit3, "decode": _texts_decode, "train": _texts_train}


def publisher(m: dict) -> str:
    """The repository and commit a row's source file is read at (its whole source where it is not such a file)."""
    hit = _TREE.match(m["source"])
    return hit.group(0) if hit else m["source"]


def source_table(m: dict) -> str:
    """The published table a row is read from, its compiled twin named as its eager one: timm publishes a run's
    torch.compile figures as the eager CSV's name with ``-dynamo`` (torch release, CUDA, layout and chip are in
    that name, not in the row), so two CSVs of one commit are two configurations."""
    return re.sub(r"-dynamo(?=\.csv\b)", "", m["source"])


def pair_key(m: dict) -> tuple:
    """What an eager row and an Inductor row must agree in to be one pair: the program and its parameters (model,
    batch, image, dtype, autocast, ``set``), the chip, the torch release, the unit and the published table (the
    same file at the same commit, :func:`source_table`)."""
    return (m["program"], m["chip"], json.dumps(m["params"], sort_keys=True), m.get("torch"), m["unit"],
            source_table(m))


def model_pairs(rows: list[dict]) -> list[dict]:
    """The pairs of ``published_models.toml``'s rows: each ``eager`` row with the ``inductor`` row of the same
    :func:`pair_key`, in the order of the eager rows. A row without its other side is no pair; two rows of one
    side and key are refused (the data would not say which of them is the pair's)."""
    sides: dict[str, dict] = {"eager": {}, "inductor": {}}
    for m in rows:
        side = sides.get(m["execution"])
        if side is None:
            continue
        # an Inductor row's CUDA graphs (reduce-overhead) make another compiled side of the same eager row
        k = pair_key(m) + ((bool(m.get("cudagraphs")),) if m["execution"] == "inductor" else ())
        if k in side:
            raise ValueError(f"{side[k]['id']} and {m['id']}: two {m['execution']} rows of one configuration")
        side[k] = m
    return [_model_pair(e, sides["inductor"][k + (g,)]) for k, e in sides["eager"].items()
            for g in (False, True) if k + (g,) in sides["inductor"]]


def _model_pair(e: dict, c: dict) -> dict:
    graphs = "-cudagraphs" if c.get("cudagraphs") else ""
    return {"id": e["id"].replace("-eager", "") + graphs, "kind": "model", "gpu": e["chip"], "torch": c.get("torch"),
            "mode": "reduce-overhead" if c.get("cudagraphs") else "default", "eager_row": e, "compiled_row": c,
            "source": publisher(e)}


def load_pairs(data: str = DATA, models: str = MODELS) -> list[dict]:
    """Every pair: those of ``data`` (programs that are no whole-model row), then those made of ``models``' rows."""
    with open(data, "rb") as f:
        own = tomllib.load(f)["pair"]
    with open(models, "rb") as f:
        return own + model_pairs(tomllib.load(f)["m"])


def _times(a, hw, p: dict) -> tuple[float, float]:
    """(eager step, Inductor step) seconds of one analysed program."""
    from mhlo_cost.roofline import Roofline

    rf = Roofline(a, hw, execution="inductor", cudagraphs=p["mode"] in GRAPHS, sdpa=p.get("sdpa", "auto"),
                  torch_version=p.get("torch"))  # the torch release the source names (None: a current one)
    tot = rf.totals()
    return tot["est_time_eager_overlap_s"], tot["est_time_fused_overlap_s"]


def _analyses(p: dict) -> dict:
    """{layers: analysis} of a pair's program (``{0: ...}``: the whole program, not scaled)."""
    from mhlo_cost.analysis import AnalysisOptions, analyze

    if p["kind"] == "model":
        return {0: pm.analysis(p["compiled_row"])}  # lowered once per program and parameters, both chips
    opts = AnalysisOptions(dataflow=True, records=("layouts",), phases=p["kind"] == "train")  # a step's graphs
    return {n: analyze(t, opts) for n, t in TEXTS[p["kind"]](p).items()}


def predicted(p: dict) -> tuple[float, float]:
    """The predicted (eager, Inductor) seconds of a pair's step, scaled to its layer count."""
    from mhlo_cost.machines.hardware import get_profile

    hw = get_profile(p["gpu"])
    times = {n: _times(a, hw, p) for n, a in _analyses(p).items()}
    if len(times) == 1:
        return next(iter(times.values()))
    layers = p["set"]["num_hidden_layers"]
    e = times[1][0] + (layers - 1) * (times[2][0] - times[1][0])
    i = times[1][1] + (layers - 1) * (times[2][1] - times[1][1])
    return e, i


def measured(p: dict) -> tuple[float, float]:
    """The measured (eager, compiled) seconds of one step: a whole-model pair's two rows as
    :func:`published_models.measured_s` reads them; else a time as given, a throughput as the tokens of one step
    (decode: the batch; training: batch x sequence, per GPU) over it."""
    if p["kind"] == "model":
        return pm.measured_s(p["eager_row"]), pm.measured_s(p["compiled_row"])
    if p["unit"] in ("ms", "s"):
        scale = 1e-3 if p["unit"] == "ms" else 1.0
        return p["eager"] * scale, p["compiled"] * scale
    tokens = p["batch"] * p.get("seq", 1)
    return tokens / p["eager"], tokens / p["compiled"]


def group(p: dict) -> str:
    """The source a pair is counted under: the publisher's repository (and the chip, for a table of model rows),
    else the host of its source, else the pair's own id (a measurement of ours)."""
    src = p["source"]
    hit = re.search(r"github\.com/([^/]+/[^/#?]+)", src) or re.search(r"https?://([^/ ]+)", src)
    name = hit.group(1) if hit else p["id"].split("-")[0]
    return f"{name} {p['gpu']}" if p["kind"] == "model" else name


def score(results: list[tuple[dict, float, float]]) -> tuple[int, int, float]:
    """(within 15%, on the measured direction, median |error|) of (pair, measured gain, predicted gain) rows."""
    errors = [abs(g / m - 1) for _, m, g in results]
    same = sum((m > 1) == (g > 1) for _, m, g in results)
    return sum(e <= 0.15 for e in errors), same, statistics.median(errors) if errors else float("nan")


def summary_lines(results: list[tuple[dict, float, float]]) -> list[str]:
    """Per source and in all: how many predicted gains are within 15% and on the measured direction."""
    groups: dict[str, list] = {}
    for r in results:
        groups.setdefault(group(r[0]), []).append(r)
    out = []
    for name, rows in groups.items():
        w, s, med = score(rows)
        out.append(f"  {name:<44} {len(rows):>3} pairs  {w:>3} within 15%  {s:>3} on direction  median {med:.1%}")
    w, s, med = score(results)
    n = len(results)
    return out + [f"{w} of {n} within 15% (predicted gain / measured); {s} of {n} on the measured direction; "
                  f"median |error| {med:.1%}"]


def _describe(p: dict) -> str:
    if p["kind"] == "model":
        return f"{p['eager_row']['id']} / {p['compiled_row']['id']}"
    return p["source"].split(" ")[0]


def main(argv=None) -> int:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=DATA, help="pairs that are no whole-model row (published_compile_gain.toml)")
    ap.add_argument("--models", default=MODELS, help="whole-model rows to pair (published_models.toml)")
    ap.add_argument("--only", metavar="ID", help="the pairs whose id contains ID")
    ap.add_argument("--list", action="store_true", help="list the pairs and their measured gains; price none")
    args = ap.parse_args(argv)
    pairs = [p for p in load_pairs(args.data, args.models) if not args.only or args.only in p["id"]]
    if args.list:
        for p in pairs:
            me, mc = measured(p)
            print(f"{p['id']:<38} {p['gpu']:<8} {p['mode']:<15} {me / mc:>8.3f}  {_describe(p)}")
        print(f"{len(pairs)} pairs")
        return 0
    print(f"{'id':<38} {'gpu':<8} {'mode':<15} {'measured':>8} {'predicted':>9} {'pred/meas':>9} {'direction':>9} "
          f"{'eager est/meas':>14} {'compiled est/meas':>17}")
    results = []
    for p in pairs:
        (me, mc), (pe, pc) = measured(p), predicted(p)
        m, g = me / mc, pe / pc
        results.append((p, m, g))
        print(f"{p['id']:<38} {p['gpu']:<8} {p['mode']:<15} {m:>8.3f} {g:>9.3f} {g / m:>9.3f} "
              f"{'same' if (m > 1) == (g > 1) else 'OPPOSITE':>9} {pe / me:>14.3f} {pc / mc:>17.3f}", flush=True)
    print("\n".join(summary_lines(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
