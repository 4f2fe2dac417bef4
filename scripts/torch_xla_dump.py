#!/usr/bin/env python
"""Lower a torch module to StableHLO with torch-xla; runs inside .venv-torch-xla (torch 2.9 + torch-xla 2.9).

Not meant to be called by hand: ``mhlo_cost.frontends.torch_xla_frontend`` runs it as a subprocess of
``.venv-torch-xla/bin/python`` (the main environment has torch 2.13 and jax, this one torch 2.9 and
torch-xla) and reads back the file it writes. It imports only the torch model files of mhlo_cost, not the
package (whose ``__init__`` needs jax and pandas), so the venv needs neither.

    PJRT_DEVICE=CPU .venv-torch-xla/bin/python scripts/torch_xla_dump.py \\
        --model stdit3 --config '{"depth": 2, "hidden": 64, ...}' --out /tmp/m.mlirbc
    ... --module mypkg.mymod:factory --input-shape 2,16,64 --dtype float32 --out /tmp/m.mlir --text

torch-xla needs real tensors, so the module is built on the CPU with random weights: keep the
configuration small. The output is the StableHLO of ``torch.export`` -> ``exported_program_to_stablehlo``:
MLIR bytecode by default (what torch-xla's ``get_stablehlo_bytecode`` gives), or text without locations
(``--text``). Prints one JSON line: {"path", "format", "bytes", "seconds", "peak_rss_mb"}.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import sys
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _import_models_without_package():
    """Make ``mhlo_cost.models.*`` importable without running ``mhlo_cost/__init__.py`` (jax, pandas)."""
    if "mhlo_cost" not in sys.modules:
        pkg = types.ModuleType("mhlo_cost")
        pkg.__path__ = [os.path.join(ROOT, "mhlo_cost")]
        sys.modules["mhlo_cost"] = pkg
    return importlib.import_module("mhlo_cost.models.stdit3_torch"), importlib.import_module(
        "mhlo_cost.models.config")


def _resolve(spec: str):
    mod_name, _, attr = spec.partition(":")
    if not attr:
        raise SystemExit(f"--module expects package.module:factory, got {spec!r}")
    obj = importlib.import_module(mod_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def build(args):
    import torch

    if args.model:
        if args.model != "stdit3":
            raise SystemExit(f"torch-xla frontend: unknown model {args.model!r} (known: stdit3)")
        st, config = _import_models_without_package()
        fields = json.loads(args.config) if args.config else {}
        if "patch" in fields:
            fields["patch"] = tuple(fields["patch"])
        cfg = config.STDiT3Config(**fields)
        module = st.build(cfg, "cpu", seed=args.seed)
        inputs = st.example_inputs(cfg, "cpu", seed=args.seed)
        return module.eval(), inputs
    obj = _resolve(args.module)
    torch.manual_seed(args.seed)
    module = obj if isinstance(obj, torch.nn.Module) else obj()
    dtype = getattr(torch, args.dtype)
    module = module.to(dtype).eval()
    g = torch.Generator().manual_seed(args.seed)
    inputs = []
    for s in args.input_shape:
        shape = tuple(int(d) for d in s.split(",") if d)
        inputs.append(torch.randn(*shape, generator=g).to(dtype))
    return module, tuple(inputs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="bundled model name (stdit3)")
    src.add_argument("--module", help="package.module:factory of a torch.nn.Module (or a module instance)")
    p.add_argument("--config", help="JSON object of STDiT3Config fields (for --model)")
    p.add_argument("--input-shape", action="append", default=[], help="comma-separated shape (per input)")
    p.add_argument("--dtype", default="float32", help="dtype of --module parameters and inputs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="output file")
    p.add_argument("--text", action="store_true", help="write StableHLO text instead of bytecode")
    args = p.parse_args(argv)

    os.environ.setdefault("PJRT_DEVICE", "CPU")
    t0 = time.perf_counter()
    import torch
    from torch_xla.stablehlo import StableHLOExportOptions, exported_program_to_stablehlo

    module, inputs = build(args)
    with torch.no_grad():
        exported = torch.export.export(module, tuple(inputs))
    # export_weights=False: the weights are not wanted (and numpy cannot hold bfloat16 ones).
    options = StableHLOExportOptions(include_human_readable_text=args.text, export_weights=False)
    shlo = exported_program_to_stablehlo(exported, options)
    if args.text:
        data = shlo.get_stablehlo_text("forward").encode()
    else:
        data = shlo.get_stablehlo_bytecode("forward")
    with open(args.out, "wb") as f:
        f.write(data)
    print(json.dumps({
        "path": args.out, "format": "text" if args.text else "bytecode", "bytes": len(data),
        "seconds": round(time.perf_counter() - t0, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
