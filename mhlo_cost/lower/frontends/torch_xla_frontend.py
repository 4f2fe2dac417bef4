"""torch-xla frontend (optional): the torch model lowered by torch-xla, in its own virtual environment.

torch-xla 2.9 pins torch 2.9 while the main environment runs torch 2.13 with torchax, so the lowering runs
in ``.venv-torch-xla`` (made by ``scripts/setup_torch_xla_env.sh``) as a subprocess:
``.venv-torch-xla/bin/python scripts/torch_xla_dump.py`` builds the module on the CPU with random weights
(torch-xla needs real tensors: keep configurations small), exports it with ``torch.export``, converts it
with ``torch_xla.stablehlo.exported_program_to_stablehlo`` and writes StableHLO bytecode, which is read
back here.

Locations: torch-xla names an op after its HLO instruction (``broadcast.167``), and XLA reorders a few ops
(the caption kv projections are hoisted), so positional block finding is unreliable on its output. With
``locations=True`` (the default) the dump script tags every FX node's results with its module path from
``torch.export``'s ``nn_module_stack`` (``spatial_blocks.0/attn/qkv/addmm``) through torch-xla's
``write_mlir_debuginfo`` (``XLA_HLO_DEBUG=1`` metadata), which the bytecode keeps as op locations: the
scope collector then finds the same blocks as on the JAX and torchax lowerings, with the same GEMM FLOPs
per block. The portable artifact (VHLO) torch-xla writes is turned back into plain StableHLO here:
``bytecode`` is StableHLO MLIR bytecode, ``text=True`` its text (both re-parse; torch-xla's own printer
writes the debug locations in a form that does not).

The interpreter is ``$MHLO_COST_TORCH_XLA_PYTHON`` if set, else ``<repo>/.venv-torch-xla/bin/python``.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from . import FrontendError, Lowered

MODELS = ("stdit3",)

ROOT = Path(__file__).resolve().parents[3]
DUMP_SCRIPT = ROOT / "scripts" / "torch_xla_dump.py"
VENV = ROOT / ".venv-torch-xla"
SETUP_HINT = "run scripts/setup_torch_xla_env.sh"
#: Refuse configurations whose random weights would need more memory than this (torch-xla needs real
#: tensors); pass ``max_param_bytes`` to lower() to change it.
MAX_PARAM_BYTES = 4 << 30


def _error(msg: str) -> Exception:
    return FrontendError(msg)


def venv_python() -> Path:
    """The interpreter of the torch-xla environment (it need not exist: see :func:`available`)."""
    env = os.environ.get("MHLO_COST_TORCH_XLA_PYTHON")
    return Path(env) if env else VENV / "bin" / "python"


def available() -> bool:
    return venv_python().exists() and DUMP_SCRIPT.exists()


def _check_available() -> Path:
    py = venv_python()
    if not py.exists():
        raise _error(f"the torch-xla frontend needs its virtual environment ({py} is missing): {SETUP_HINT}")
    if not DUMP_SCRIPT.exists():
        raise _error(f"the torch-xla frontend needs {DUMP_SCRIPT} (a source checkout of mhlo-cost)")
    return py


def _param_bytes(cfg) -> int:
    """A close estimate of STDiT3's weight bytes for ``cfg`` (linear layers dominate)."""
    c, m = cfg.hidden, cfg.mlp_hidden
    block = 3 * c * c + c * c + c * c + 2 * c * c + c * c + 2 * c * m
    n = 2 * cfg.depth * block + cfg.caption_channels * (c + cfg.caption_tokens) + 2 * cfg.freq_dim * c \
        + 9 * c * c
    itemsize = 2 if cfg.dtype in ("bfloat16", "float16") else 4
    return n * itemsize


def run_dump(args: list[str], *, timeout: float | None = 1800, user_path: str | None = None) -> dict:
    """Run ``scripts/torch_xla_dump.py ARGS`` in the torch-xla venv; its JSON report. ``user_path`` (the
    user's folder, for a ``--module`` of theirs) is the one path added to the venv's own."""
    py = _check_available()
    env = dict(os.environ)
    env.setdefault("PJRT_DEVICE", "CPU")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # The venv's own packages only: no PYTHONPATH from the main environment.
    env.pop("PYTHONPATH", None)
    if user_path:
        env["PYTHONPATH"] = user_path
    # The dump script turns XLA_HLO_DEBUG on itself, after importing torch_xla; set before that (or with
    # XLA_IR_DEBUG), torch-xla 2.9 records Python frames per IR node and lowering the tagged graph fails.
    env.pop("XLA_HLO_DEBUG", None)
    env.pop("XLA_IR_DEBUG", None)
    proc = subprocess.run([str(py), str(DUMP_SCRIPT), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=str(ROOT))
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise _error(f"torch-xla lowering failed (exit {proc.returncode}):\n{tail}")
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise _error(f"torch-xla lowering printed no report:\n{proc.stdout[-2000:]}")


def _lowered(data: bytes, text: bool, info: dict):
    """torch-xla writes a StableHLO portable artifact (VHLO bytecode): deserialized here and written back
    as plain StableHLO bytecode, or printed as StableHLO text for ``text`` (a VHLO module printed as such
    is VHLO text, which the analyzer does not read; torch-xla's own printer writes debug locations in a
    form that does not re-parse)."""
    import io

    from ...ir.loader import load

    loaded = load(data)
    module = loaded.module
    with loaded.context:
        if text:
            return Lowered(text=module.operation.get_asm(enable_debug_info=True, large_elements_limit=None),
                           info=info)
        buf = io.BytesIO()
        module.operation.write_bytecode(buf)
    return Lowered(bytecode=buf.getvalue(), info=info)


def lower(model: str, cfg=None, *, locations: bool = True, text: bool = False,
          max_param_bytes: int = MAX_PARAM_BYTES, timeout: float | None = 1800):
    """Lower a bundled model ('stdit3') for ``cfg`` (None: ``STDiT3Config().small()``) with torch-xla.

    Returns a ``Lowered`` with ``bytecode`` (StableHLO MLIR bytecode; ``text=True``: StableHLO text) whose
    op locations name module paths (``spatial_blocks.0/attn/qkv/addmm``) unless ``locations=False``
    (then torch-xla's instruction names). Raises FrontendError (one sentence naming
    ``scripts/setup_torch_xla_env.sh``) when the torch-xla venv is missing.
    """
    if model not in MODELS:
        raise _error(f"torch-xla frontend: unknown model {model!r} (known: {', '.join(MODELS)})")
    from ..models.config import STDiT3Config

    cfg = cfg if cfg is not None else STDiT3Config().small()
    need = _param_bytes(cfg)
    if need > max_param_bytes:
        raise _error(f"torch-xla needs real weights: this configuration has about {need / 2**30:.1f} GiB of "
                     f"them (limit {max_param_bytes / 2**30:.1f} GiB); use a smaller one (--small) or the "
                     f"torchax frontend, which lowers from shapes")
    _check_available()
    fields = dataclasses.asdict(cfg)
    return _run(["--model", model, "--config", json.dumps(fields)], model, locations, text, timeout)


def _run(args: list[str], label: str, locations: bool, text: bool, timeout: float | None,
         user_path: str | None = None):
    """Run the worker in the torch-xla venv with ``args`` and read back its bytecode as a ``Lowered``."""
    with tempfile.TemporaryDirectory(prefix="mhlo-cost-txla-") as tmp:
        out = os.path.join(tmp, "model.mlirbc")
        report = run_dump(args + ["--out", out] + ([] if locations else ["--no-locations"]), timeout=timeout,
                          user_path=user_path)
        data = Path(out).read_bytes()
    info = {"frontend": "torch-xla", "model": label, "locations": bool(report.get("locations", False)),
            "subprocess_seconds": report.get("seconds"), "subprocess_peak_rss_mb": report.get("peak_rss_mb")}
    return _lowered(data, text, info)


def lower_module(module_spec: str, input_shapes, dtype: str = "float32", *, text: bool = False,
                 locations: bool = True, timeout: float | None = 1800):
    """Lower a user's module, named ``'package.module:factory'`` (importable in the torch-xla venv), with
    random inputs of ``input_shapes`` (tuples of ints) in ``dtype``. Returns a ``Lowered`` (module-path
    locations unless ``locations=False``)."""
    if not isinstance(module_spec, str):
        raise TypeError("the torch-xla frontend runs in another interpreter: name the module factory as "
                        "'package.module:factory'")
    _check_available()
    args = ["--module", module_spec, "--dtype", str(dtype)]
    for shape in input_shapes:
        args += ["--input-shape", ",".join(str(int(d)) for d in shape)]
    return _run(args, module_spec, locations, text, timeout, user_path=os.getcwd())  # found as python -m would


if __name__ == "__main__":  # pragma: no cover
    print("torch-xla venv python:", venv_python(), "(present)" if available() else f"(missing: {SETUP_HINT})",
          file=sys.stderr)
