"""Whole-model rows of ``benchmarks/data/published_gpu.toml`` for ``benchmarks/validate_published.py``: a published
forward or decode step of a whole model, lowered from its library's configuration (no weights) and priced with the
execution model the measured code ran as.

Programs (a row's ``program``, its ``params``):
  timm    ``mhlo-cost lower --timm NAME --input BxCxHxW:DTYPE --dtype DTYPE [--amp AMP]`` (params: name, batch, image,
          dtype, amp: the autocast dtype where the measured code ran the forward under CUDA autocast, timm's
          ``benchmark.py --amp``; the row's ``amp_source`` quotes where the source says so)
  hf      ``mhlo-cost lower --hf CLASS --input BxCxHxW:DTYPE`` with the row's ``set`` (params: hf, batch, image,
          dtype, set)
  decode  the decode step of ``mhlo-cost serve`` (batch, context, a transformers class and configuration with the
          row's ``set``, the static KV cache an argument), as ``benchmarks/validate_decode.py`` lowers it
A row's ``execution`` (``eager`` | ``inductor`` | ``compiled``) and ``cudagraphs`` (CUDA graphs replayed: no host
launch per kernel) are those of the measured code; the estimate is the program's time under them
(``report --execution E [--cudagraphs]``). Nothing is fitted on these rows.
"""
from __future__ import annotations

import functools
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
        amp = ["--amp", p["amp"]] if p.get("amp") else []
        return _lower_cli(["lower", "--timm", p["name"], "--input", _image_input(p), "--dtype", p["dtype"]] + amp,
                          m["id"])
    if m["program"] == "hf":
        argv = ["lower", "--hf", p["hf"], "--input", _image_input(p)]
        for k, v in p.get("set", {}).items():
            argv += ["--set", f"{k}={json.dumps(v, separators=(',', ':'))}"]
        return _lower_cli(argv, m["id"])
    if m["program"] == "decode":
        return _decode_text(p)
    raise ValueError(f"{m['id']}: no whole-model program {m['program']!r}")


def analysis(m: dict):
    """The analysis of row ``m``'s program (lowered and walked once per program and parameters)."""
    return _analysis(m["program"], json.dumps(m["params"], sort_keys=True))


@functools.lru_cache(maxsize=32)  # bounded: the file holds 22 distinct programs
def _analysis(program: str, params: str):
    from mhlo_cost.analysis import AnalysisOptions, analyze

    return analyze(lowered_text({"program": program, "params": json.loads(params), "id": f"{program} {params}"}),
                   AnalysisOptions(dataflow=True, records=("layouts",)))


def estimated_s(m: dict, hw) -> float:
    """The estimated time of row ``m``'s step on ``hw`` under the row's execution (and CUDA graphs)."""
    from mhlo_cost.roofline.estimate import Roofline

    execution = m["execution"]
    if execution not in EXECUTIONS:
        raise ValueError(f"{m['id']}: execution {execution!r} is none of {', '.join(EXECUTIONS)}")
    graphs = bool(m.get("cudagraphs", False))
    if graphs and execution != "inductor":
        raise ValueError(f"{m['id']}: cudagraphs is priced with execution 'inductor' only")
    rf = Roofline(analysis(m), hw, execution=execution, cudagraphs=graphs, torch_version=m.get("torch"))
    return rf.totals()["est_time_fused_overlap_s"]


def measured_s(m: dict) -> float:
    """The measured time of one step: ``ms`` as given; ``tokens/s`` (decode) as the batch's tokens over it;
    ``samples/s`` as the batch over it."""
    if m["unit"] == "ms":
        return m["measured"] * 1e-3
    if m["unit"] in ("tokens/s", "samples/s"):
        return m["params"]["batch"] / m["measured"]
    raise ValueError(f"{m['id']}: unknown unit {m['unit']!r} for a whole-model row")


def _kind(k) -> str:
    if getattr(k, "attention", None):
        return "attention"
    return "gemm/conv" if k.has_dot else "memory-bound"


def kernel_parts(m: dict, hw) -> tuple[dict, list, float]:
    """Row ``m``'s kernels on ``hw`` by kind (GEMM / convolution, attention, the memory-bound rest):
    ({kind: (kernels, seconds, bytes)}, [host-bound kernels, their host time over their device time], launch gaps)."""
    from mhlo_cost.roofline.estimate import Roofline

    rf = Roofline(analysis(m), hw, execution=m["execution"], cudagraphs=bool(m.get("cudagraphs", False)),
                  torch_version=m.get("torch"))
    parts, host, gaps = {}, [0, 0.0], 0.0
    for k in rf.fusion.kernels:
        n, t, b = parts.get(_kind(k), (0, 0.0, 0))
        parts[_kind(k)] = (n + k.multiplicity, t + k.time_s, b + (k.bytes_read + k.bytes_written))
        device = max(k.compute_s, k.memory_s) + k.overhead_s
        if getattr(k, "host_s", 0.0) > device:
            host = [host[0] + k.multiplicity, host[1] + k.host_s - device]
        gaps += k.overhead_s
    return parts, host, gaps


#: Ops that stay in a kernel without being a call of their own (views, dtype casts).
_PASSIVE = frozenset({"reshape", "broadcast_in_dim", "transpose", "constant", "bitcast", "slice", "convert"})


def merged_calls(m: dict, hw) -> tuple[int, int]:
    """Eager only: (calls, bytes) of the module calls that share a kernel with the call before them (an eager
    kernel whose rows, views aside, span more than one module scope), and the bytes their own passes would move
    (each reads and writes its output once, as an in-place activation does)."""
    from mhlo_cost.roofline.estimate import Roofline

    a = analysis(m)
    calls = extra = 0
    for k in Roofline(a, hw, execution="eager").fusion.kernels:
        scopes: dict = {}
        for i in k.members:
            if a.rows[i].op.split(".")[-1] not in _PASSIVE:
                scopes[a.rows[i].scope] = a.rows[i]  # in order of first appearance, the scope's last row
        for r in list(scopes.values())[1:]:
            calls += 1
            extra += 2 * r.bytes_written * r.multiplicity
    return calls, extra


def breakdown(m: dict, hw) -> str:
    """Where row ``m``'s estimate on ``hw`` goes (:func:`kernel_parts`; eager: :func:`merged_calls`), one line."""
    parts, host, gaps = kernel_parts(m, hw)
    total = sum(t for _, t, _ in parts.values()) or 1.0
    out = [f"{name} {n} kernels {t * 1e3:.2f} ms ({t / total:.0%}, {b / 1e9:.2f} GB)"
           for name, (n, t, b) in sorted(parts.items())]
    out.append(f"host-bound {host[0]} kernels (+{host[1] * 1e3:.2f} ms over their device time)")
    out.append(f"launch gaps {gaps * 1e3:.2f} ms")
    if m["execution"] == "eager":
        calls, extra = merged_calls(m, hw)
        out.append(f"{calls} module calls share the kernel of the call before them (their own passes: "
                   f"{extra / 1e9:.2f} GB)")
    return "; ".join(out)


def breakdown_lines(results, measured, off: float = 0.25) -> list[str]:
    """The breakdown (:func:`breakdown`, on the shipped profile) of every whole-model row whose estimate is more
    than ``off`` from its measurement. ``results``: (row, ratio, held); ``measured(row)``: seconds."""
    from mhlo_cost.machines.hardware import get_profile

    far = [(m, r) for m, r, _ in results if is_model_program(m) and abs(r - 1) > off]
    out = [f"whole-model rows more than {off:.0%} off: where the estimate goes (shipped profile)"] if far else []
    for m, r in far:
        out.append(f"  {m['id']} ({r:.2f}: {r * measured(m) * 1e3:.2f} ms against {measured(m) * 1e3:.2f} ms): "
                   + breakdown(m, get_profile(m["chip"])))
    return out
