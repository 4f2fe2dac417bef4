"""Whole-model rows of ``benchmarks/data/published_gpu.toml`` for ``benchmarks/validate_published.py``: a published
forward or decode step of a whole model, lowered from its library's configuration (no weights) and priced with the
execution model the measured code ran as.

Programs (a row's ``program``, its ``params``):
  timm    ``mhlo-cost lower --timm NAME --input BxCxHxW:DTYPE --dtype DTYPE`` (params: name, batch, image, dtype)
  hf      ``mhlo-cost lower --hf CLASS --input BxCxHxW:DTYPE`` with the row's ``set`` (params: hf, batch, image,
          dtype, set)
  decode  the decode step of ``mhlo-cost serve`` (batch, context, a transformers class and configuration with the
          row's ``set``, the static KV cache an argument), as ``benchmarks/validate_decode.py`` lowers it
A row's ``execution`` (``eager`` | ``inductor`` | ``compiled``) and ``cudagraphs`` (CUDA graphs replayed: no host
launch per kernel) are those of the measured code; the estimate is the program's time under them
(``report --execution E [--cudagraphs]``). Nothing is fitted on these rows.
"""
from __future__ import annotations

import json
import os
import tempfile

PROGRAMS = ("timm", "hf", "decode")
EXECUTIONS = ("eager", "inductor", "compiled")


def is_model_program(m: dict) -> bool:
    return m["program"] in PROGRAMS


def _lower_cli(argv: list[str], row_id: str) -> str:
    from mhlo_cost.cli import main as cli

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "model.mlir")
        if cli(argv + ["-o", out, "-q"]) != 0:
            raise SystemExit(f"{row_id}: lowering failed: mhlo-cost {' '.join(argv)}")
        with open(out, encoding="utf-8") as f:
            return f.read()


def _image_input(p: dict) -> str:
    return f"{p['batch']}x3x{p['image']}x{p['image']}:{p['dtype']}"


def _decode_text(p: dict) -> str:
    from mhlo_cost.files.cache import default_root
    from mhlo_cost.studies.serve import StepRequest
    from mhlo_cost.studies.serve.grid import StepCache

    req = StepRequest(mode="decode", batch=p["batch"], context=p["context"], hf=p["hf"], config=p["config"],
                      overrides=tuple(sorted(p["set"].items())), dtype=p["dtype"])
    return StepCache(default_root()).step(req)[0].lowered.text


def lowered_text(m: dict) -> str:
    """The IR of row ``m``'s whole-model program."""
    p = m["params"]
    if m["program"] == "timm":
        return _lower_cli(["lower", "--timm", p["name"], "--input", _image_input(p), "--dtype", p["dtype"]], m["id"])
    if m["program"] == "hf":
        argv = ["lower", "--hf", p["hf"], "--input", _image_input(p)]
        for k, v in p.get("set", {}).items():
            argv += ["--set", f"{k}={json.dumps(v, separators=(',', ':'))}"]
        return _lower_cli(argv, m["id"])
    if m["program"] == "decode":
        return _decode_text(p)
    raise ValueError(f"{m['id']}: no whole-model program {m['program']!r}")


_ANALYSES: dict = {}


def analysis(m: dict):
    """The analysis of row ``m``'s program (lowered and walked once per program and parameters)."""
    from mhlo_cost.analysis import AnalysisOptions, analyze

    key = (m["program"], json.dumps(m["params"], sort_keys=True))
    if key not in _ANALYSES:
        _ANALYSES[key] = analyze(lowered_text(m), AnalysisOptions(dataflow=True))
    return _ANALYSES[key]


def estimated_s(m: dict, hw) -> float:
    """The estimated time of row ``m``'s step on ``hw`` under the row's execution (and CUDA graphs)."""
    from mhlo_cost.roofline.estimate import Roofline

    execution = m["execution"]
    if execution not in EXECUTIONS:
        raise ValueError(f"{m['id']}: execution {execution!r} is none of {', '.join(EXECUTIONS)}")
    graphs = bool(m.get("cudagraphs", False))
    if graphs and execution != "inductor":
        raise ValueError(f"{m['id']}: cudagraphs is priced with execution 'inductor' only")
    rf = Roofline(analysis(m), hw, execution=execution, cudagraphs=graphs)
    return rf.totals()["est_time_fused_overlap_s"]


def measured_s(m: dict) -> float:
    """The measured time of one step: ``ms`` as given; ``tokens/s`` (decode) as the batch's tokens over it;
    ``samples/s`` as the batch over it."""
    if m["unit"] == "ms":
        return m["measured"] * 1e-3
    if m["unit"] in ("tokens/s", "samples/s"):
        return m["params"]["batch"] / m["measured"]
    raise ValueError(f"{m['id']}: unknown unit {m['unit']!r} for a whole-model row")
