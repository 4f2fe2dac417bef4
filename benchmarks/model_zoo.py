"""The model zoo of issues 26 and 42 as one table: real models from transformers, diffusers and timm at small
sizes (configurations only, nothing downloaded), each lowered by ``mhlo-cost lower`` in this process, against
torch's FlopCounterMode and MemTracker on the same module and inputs. The models: issue 26's 27
(:mod:`model_zoo_models`), then issue 42's held-out families and 2024-2026 releases (:mod:`model_zoo_new`).

    python benchmarks/model_zoo.py                 # every model (about ten minutes on 2 cores)
    python benchmarks/model_zoo.py --only mixtral  # one (or several: --only llama,bert)

Columns: lowered (y, or n and the one-line reason); ours: GEMM + conv FLOPs of the report's summary
(``--conv-padding dense``, PyTorch's convention); FlopCounterMode on the same model (meta tensors, math attention;
mixture-of-experts models with eager experts on real tensors: one ``linear`` per expert on the tokens routed to
it, which the counter sees); difference (ours - counter); blocks found by the default collector / expected from
the configuration (layers per tower, blocks per stage); per block: blocks whose GEMM + conv equals the counter's
for that module / blocks that name a module; params: the report's ``params`` (the arguments the lowering names
as parameters, elements) / ``sum(p.numel() for p in model.parameters())`` of the built model, ``(!)`` where they
differ; eager peak: the report's eager estimate (:func:`mhlo_cost.roofline.memory.eager_profile`, flash SDPA
where the model calls SDPA; the zoo's transformers models use eager attention) / torch's MemTracker peak of one
no-grad forward of the same model and inputs under ``FakeTensorMode`` (bytes; expert layers run the static
dropless dispatch ``lower`` traces), and the ratio; backward (``lower --train``: dgrad + wgrad) against
FlopCounterMode (forward and ``loss.backward()`` under one counter, minus a forward alone) for three models. The
last line: ``N of M lowered, K with difference 0, blocks found = expected for B, params = numel for P, eager peak
within 10% of MemTracker for E``.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import inspect
import io
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from model_zoo_models import MODELS, MOE, NOTES, REAL, TRAIN  # noqa: E402

#: an input given by its value (``lower --input-value``): ``value:NAME=JSON:DTYPE``
VALUE = "value:"


def _argv(key: str, out: str, train: bool = False) -> list[str]:
    lib, name, config, sets, inputs, kwargs, _ = MODELS[key]
    argv = ["lower", f"--{lib}", name, "-o", out, "-q"] + (["--config", config] if config else [])
    argv += ["--train"] if train else []
    for k, v in sets.items():
        argv += ["--set", f"{k}={v if isinstance(v, str) else json.dumps(v, separators=(',', ':'))}"]
    argv += [a for i in inputs for a in (("--input-value", i.removeprefix(VALUE)) if i.startswith(VALUE)
                                          else ("--input", i))]
    return argv + [a for k, v in kwargs.items() for a in ("--kwarg", f"{k}={json.dumps(v)}")]


def _lower(key: str, out: str, train: bool = False) -> str | None:
    """Lower with ``mhlo-cost lower``; None, or the command's one-line error."""
    from mhlo_cost.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(_argv(key, out, train))
    if rc == 0:
        return None
    lines = [ln for ln in err.getvalue().splitlines() if ln.startswith("mhlo-cost: error:")]
    return (lines[-1].removeprefix("mhlo-cost: error: ") if lines else f"exit {rc}")[:160]


def _tensors(key: str, model, device: str | None = None):
    """The model's inputs: zeros (on ``device``; by default where the counter's model is), or (mixture of
    experts) real random token ids."""
    import torch

    from mhlo_cost.lower.frontends.inputs import parse_input

    def make(spec):
        if spec.startswith(VALUE):  # NAME=JSON:DTYPE, given by value
            value, _, dtype = spec.partition("=")[2].rpartition(":")
            return torch.tensor(json.loads(value), dtype=getattr(torch, dtype), device=device or "cpu")
        s = parse_input(spec)
        dtype = getattr(torch, s.dtype or "float32")
        if key in MOE:
            return torch.randint(0, model.config.vocab_size, s.shape, dtype=dtype)
        return torch.zeros(s.shape, dtype=dtype, device=device or ("cpu" if key in REAL else "meta"))

    inputs = MODELS[key][4]
    pos = [make(i) for i in inputs if "=" not in i]
    kw = {k.removeprefix(VALUE): make(i) if i.startswith(VALUE) else make(v)
          for i in inputs if "=" in i for k, v in [i.split("=", 1)]}
    return pos, {**kw, **MODELS[key][5]}


def _model(key: str):
    """The module FlopCounterMode runs: meta tensors; mixture of experts with eager experts and real weights;
    the models of ``REAL`` (whose forward reads a value: ``.item()``) with real weights."""
    import torch

    from mhlo_cost.lower.frontends import hub

    lib, name, config, sets, *_ = MODELS[key]
    if key in REAL:
        torch.manual_seed(0)
        return _cpu_model(key)
    if key not in MOE:
        return hub.build(lib, name, config, sets)
    cls = getattr(hub.import_library("hf"), name)
    cfg = hub.hf_config(cls, config, sets)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    torch.manual_seed(0)
    return cls(cfg)


def _cpu_model(key: str):
    """The model built on the CPU with real (initialised) weights: the library calls ``lower`` makes on ``meta``."""
    from mhlo_cost.lower.frontends import hub

    lib, name, config, sets, *_ = MODELS[key]
    if lib == "timm":
        return hub.import_library("timm").create_model(name, pretrained=False, **sets)
    cls = getattr(hub.import_library(lib), name)
    if lib == "diffusers":
        return cls.from_config(dict(sets))
    cfg = hub.hf_config(cls, config, sets)
    for k in ("attn_implementation", "experts_implementation"):
        if k in sets:
            setattr(cfg, "_" + k, sets[k])
    return cls(cfg)


def _per_module(counter) -> dict[str, int]:
    return {k.split(".", 1)[1] if "." in k else "": sum(v.values()) for k, v in counter.get_flop_counts().items()}


def flop_counter(key: str) -> tuple[dict[str, int], object]:
    """FlopCounterMode per module ('' the whole model) of one forward, and the model (for its configuration)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    model = _model(key).eval()
    pos, kw = _tensors(key, model)
    with FlopCounterMode(display=False) as fc, sdpa_kernel(SDPBackend.MATH), torch.no_grad():
        model(*pos, **kw)
    return _per_module(fc), model


def backward_counter(key: str) -> int:
    """FlopCounterMode's backward: forward + ``loss.backward()`` under one counter, minus a forward alone (mse
    on the output the loss of ``lower --train`` reads)."""
    from torch.utils.flop_counter import FlopCounterMode

    model = _model(key).train()
    pos, kw = _tensors(key, model)
    with FlopCounterMode(display=False) as fwd:
        model(*pos, **kw)
    with FlopCounterMode(display=False) as both:
        out = model(*pos, **kw)
        y = out if TRAIN[key] == "output" else out[TRAIN[key]]
        (y.float() ** 2).mean().backward()
    return both.get_total_flops() - fwd.get_total_flops()


def backward_ours(key: str, tmp: str) -> int | str:
    from mhlo_cost.analysis import AnalysisOptions, analyze
    from mhlo_cost.analysis.training import phase_frame

    path = os.path.join(tmp, f"{key}.train.mlir")
    err = _lower(key, path, train=True)
    if err:
        return err
    a = analyze(path, AnalysisOptions(conv_padding="dense", phases=True))
    df = phase_frame(a, a.phases).set_index("phase")
    return sum(int(df.loc[k, "gemm_flops"]) + int(df.loc[k, "conv_flops"])
               for k in ("backward/dgrad", "backward/wgrad") if k in df.index)


def _per_block(a, blocks, per_module) -> str:
    """Blocks whose GEMM + conv equals the counter's for the module of the same path / blocks naming a module."""
    got = {b.name: 0 for b in blocks.blocks}
    for r, ids in zip(a.rows, blocks.row_blocks):
        for i in ids:
            got[blocks.blocks[i].name] += r.gemm_flops + r.conv_flops
    named = {n: f for n, f in got.items() if n.replace("/", ".") in per_module}
    return f"{sum(f == per_module[n.replace('/', '.')] for n, f in named.items())}/{len(named)}"


def memtracker_peak(key: str) -> int:
    """torch's MemTracker peak (bytes, all categories: parameters, buffers, inputs, activations) of one no-grad
    forward of the same model, configuration and inputs (``use_cache=False`` where the forward takes it), built
    under ``FakeTensorMode`` (nothing allocated; the models of ``REAL``, whose forward reads values, for real on
    the CPU);
    expert layers run the static dropless dispatch ``lower`` traces (a fake router's choice has no data)."""
    import torch
    from torch._subclasses.fake_tensor import FakeCopyMode, FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    from mhlo_cost.lower.frontends.moe import Routing, static_experts

    if key in REAL:  # the forward reads values (.item(), .tolist()): fake tensors hold none; the model is small
        fake = contextlib.nullcontext()
        model = _cpu_model(key).eval()
    else:
        fake = FakeTensorMode(allow_non_fake_inputs=True)  # a plain tensor kept as an attribute joins in
        with FakeCopyMode(fake):  # built for real (initialisers read values), copied into fake tensors
            model = copy.deepcopy(_cpu_model(key)).eval()
    for p in model.parameters():  # MemTracker hooks every parameter (Whisper freezes its positions)
        p.requires_grad_(True)
    with fake:
        pos, kw = _tensors(key, model, device="cpu")
        if "use_cache" in inspect.signature(model.forward).parameters:  # the lowering keeps no cache object:
            kw.setdefault("use_cache", False)  # with one, MemTracker alone would hold every layer's keys and values
        mt = MemTracker()
        mt.track_external(model, *pos, *[v for v in kw.values() if isinstance(v, torch.Tensor)])
        with mt, torch.no_grad(), static_experts(model, Routing(), []):
            model(*pos, **kw)
        peak = mt.get_tracker_snapshot("peak")
    return int(sum(v["Total"] for v in peak.values()))


def _measure(row: dict, key: str, path: str) -> None:
    """The FLOPs, blocks and params columns of a lowered model (into ``row``)."""
    from mhlo_cost.analysis import AnalysisOptions, analyze
    from mhlo_cost.analysis.collectors import assign_blocks
    from mhlo_cost.roofline.memory import eager_profile

    a = analyze(path, AnalysisOptions(conv_padding="dense", dataflow=True))
    blocks = assign_blocks(a)
    ours = a.summary["gemm_flops"] + a.summary["conv_flops"]
    per_module, model = flop_counter(key)
    expected = MODELS[key][6](model)
    numel = sum(p.numel() for p in model.parameters())
    row.update(ours=f"{ours:,}", counter=f"{per_module['']:,}", diff=f"{ours - per_module['']:+,}",
               blocks=f"{blocks.count}/{expected}", per_block=_per_block(a, blocks, per_module),
               params=f"{a.summary['params']:,} / {numel:,}" + ("" if a.summary["params"] == numel else " (!)"))
    row["_diff0"], row["_blocks_ok"] = ours == per_module[""], blocks.count == expected
    row["_params_ok"] = a.summary["params"] == numel
    if key in NOTES:
        row["note"] = NOTES[key]
    elif blocks.count != expected:
        row["note"] = f"blocks found: {', '.join(b.name for b in blocks.blocks)}"[:200]
    row["_eager"] = eager_profile(a).peak_bytes


def _peak(row: dict, key: str) -> None:
    """The eager-peak column: ours / MemTracker's (bytes) and the ratio; a failure of either is the cell."""
    try:
        ref = memtracker_peak(key)
    except Exception as e:  # noqa: BLE001 - a cell, never a crash of the table
        row["peak"] = f"MemTracker: {_why(e)}"[:120]
        return
    ours = row["_eager"]
    row["peak"] = f"{ours:,} / {ref:,} ({ours / ref:.3f})"
    row["_peak_ok"] = abs(ours / ref - 1) <= 0.10


def _why(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:140]}" if str(e).strip() else type(e).__name__


def run_one(key: str, tmp: str, backward: bool = True) -> dict:
    """One row of the table; a failure anywhere is the row's note, never an exception."""
    row = {k: "" for k, _ in COLUMNS} | {"model": key, "lowered": "n"}
    t0 = time.perf_counter()
    path = os.path.join(tmp, f"{key}.mlir")
    try:
        err = _lower(key, path)
        row["seconds"] = f"{time.perf_counter() - t0:.1f}"
        if err:
            row["note"] = err
            return row
        row["lowered"] = "y"
        _measure(row, key, path)
        _peak(row, key)
        if backward and key in TRAIN:
            mine, ref = backward_ours(key, tmp), backward_counter(key)
            row["backward"] = f"{mine:,} / {ref:,} ({mine - ref:+,})" if isinstance(mine, int) else f"n: {mine}"
    except Exception as e:  # noqa: BLE001 - a row, never a crash of the table
        row["note"] = f"{row['note']}; {_why(e)}" if row["note"] else _why(e)
    return row


def _warm(libraries) -> None:
    """Import the libraries, torch and JAX once, so that the first row's seconds are its own."""
    from mhlo_cost.lower.frontends import hub

    for lib in sorted(libraries):
        with contextlib.suppress(Exception):
            hub.import_library(lib)
    with contextlib.suppress(Exception):
        import jax  # noqa: F401

        from mhlo_cost.lower.frontends import torchax_frontend  # noqa: F401


COLUMNS = [("model", "model"), ("lowered", "lowered"), ("ours", "GEMM+conv (ours)"),
           ("counter", "FlopCounterMode"), ("diff", "difference"), ("blocks", "blocks found/expected"),
           ("per_block", "per block = counter"), ("params", "params ours / numel"),
           ("peak", "eager peak ours / MemTracker bytes (ratio)"), ("backward", "backward ours / counter (diff)"),
           ("seconds", "lower s"), ("note", "note")]


def table(rows: list[dict]) -> str:
    out = ["| " + " | ".join(h for _, h in COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    out += ["| " + " | ".join(str(r[k]).replace("|", "/") for k, _ in COLUMNS) + " |" for r in rows]
    lowered = sum(r["lowered"] == "y" for r in rows)
    zero = sum(bool(r.get("_diff0")) for r in rows)
    ok = sum(bool(r.get("_blocks_ok")) for r in rows)
    params = sum(bool(r.get("_params_ok")) for r in rows)
    peak = sum(bool(r.get("_peak_ok")) for r in rows)
    out.append("")
    out.append(f"{lowered} of {len(rows)} lowered, {zero} with difference 0, blocks found = expected for {ok}, "
               f"params = numel for {params}, eager peak within 10% of MemTracker for {peak}")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", help="comma-separated model names (" + ", ".join(MODELS) + ")")
    p.add_argument("--no-backward", action="store_true", help="skip the three training-step lowerings")
    args = p.parse_args(argv)
    keys = args.only.split(",") if args.only else list(MODELS)
    unknown = [k for k in keys if k not in MODELS]
    if unknown:
        print(f"model_zoo: error: unknown model {', '.join(unknown)} (one of {', '.join(MODELS)})", file=sys.stderr)
        return 2
    _warm({MODELS[k][0] for k in keys})
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for key in keys:
            rows.append(run_one(key, tmp, backward=not args.no_backward))
            print(f"# {key}: lowered {rows[-1]['lowered']} {rows[-1]['diff']} {rows[-1]['note']}", file=sys.stderr,
                  flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
