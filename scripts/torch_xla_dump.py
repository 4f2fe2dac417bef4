#!/usr/bin/env python
"""Lower a torch module to StableHLO with torch-xla; runs inside .venv-torch-xla (torch 2.9 + torch-xla 2.9).

Not meant to be called by hand: ``mhlo_cost.lower.frontends.torch_xla_frontend`` runs it as a subprocess of
``.venv-torch-xla/bin/python`` (the main environment has torch 2.13 and jax, this one torch 2.9 and
torch-xla) and reads back the file it writes. It imports only the torch model files of mhlo_cost, not the
package (whose ``__init__`` needs jax and pandas), so the venv needs neither.

    PJRT_DEVICE=CPU .venv-torch-xla/bin/python scripts/torch_xla_dump.py \\
        --model stdit3 --config '{"depth": 2, "hidden": 64, ...}' --out /tmp/m.mlirbc
    ... --module mypkg.mymod:factory --input-shape 2,16,64 --dtype float32 --out /tmp/m.mlir --text

torch-xla needs real tensors, so the module is built on the CPU with random weights: keep the
configuration small. The output is the StableHLO of ``torch.export`` -> ``exported_program_to_stablehlo``:
MLIR bytecode by default (what torch-xla's ``get_stablehlo_bytecode`` gives), or text (``--text``).
Prints one JSON line: {"path", "format", "bytes", "seconds", "peak_rss_mb", "locations"}.

Locations: torch-xla names each StableHLO op after its HLO instruction (``broadcast.167``). Unless
``--no-locations``, every FX node's results are tagged, while torch-xla traces the exported graph, with
the node's module path from ``torch.export``'s ``nn_module_stack`` plus its aten op, written like JAX's
name stack: ``spatial_blocks.0/attn/qkv/addmm`` (``t_block.1/addmm`` for a ``Sequential`` child; a bare
``addmm`` outside any submodule). torch-xla's ``write_mlir_debuginfo`` carries that tag through the HLO
metadata (``XLA_HLO_DEBUG=1``) into the op's MLIR ``NameLoc``, so the analyzer reads scopes from it as from
the JAX and torchax lowerings, whatever order XLA puts the ops in. The bytecode holds these locations;
the text form (``--text``, torch-xla's printer) writes them in a form MLIR does not re-parse: it is for
reading only (``torch_xla_frontend`` asks for bytecode and prints text with jaxlib).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import resource
import sys
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _import_models_without_package():
    """Make ``mhlo_cost.lower.models.*`` importable without running ``mhlo_cost/__init__.py`` (jax, pandas)."""
    if "mhlo_cost" not in sys.modules:
        pkg = types.ModuleType("mhlo_cost")
        pkg.__path__ = [os.path.join(ROOT, "mhlo_cost")]
        sys.modules["mhlo_cost"] = pkg
    return importlib.import_module("mhlo_cost.lower.models.stdit3_torch"), importlib.import_module(
        "mhlo_cost.lower.models.config")


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


_INDEX = re.compile(r"\[\s*'?([^'\]]+?)'?\s*\]")


def _module_path(path: str) -> str:
    """A module path as torch.export records it, dotted: ``L['self'].blocks[0].attn`` -> ``blocks.0.attn``."""
    path = str(path).replace("._modules", "")
    path = _INDEX.sub(r".\1", path)
    for prefix in ("L.self.", "L__self__.", "self."):
        if path.startswith(prefix):
            path = path[len(prefix):]
    if path in ("L.self", "L__self__", "self"):
        return ""
    return path.strip(".")


_CONTAINERS = ("Sequential", "ModuleList", "ModuleDict")


def _is_container(value) -> bool:
    """A Sequential / ModuleList / ModuleDict entry of the stack: its children keep it in their own name
    (``t_block.1``), as the torchax frontend writes them."""
    kind = value[1] if isinstance(value, (tuple, list)) and len(value) > 1 else ""
    name = kind if isinstance(kind, str) else getattr(kind, "__qualname__", "")
    return name.rsplit(".", 1)[-1] in _CONTAINERS


def module_scope(node) -> str:
    """``spatial_blocks.0/attn/qkv``: the node's module stack, each module's path relative to the one that
    called it (a ``ModuleList`` is never called, so ``spatial_blocks.0`` stays one component)."""
    stack = node.meta.get("nn_module_stack") or {}
    parts: list[str] = []
    parent = ""
    for value in stack.values():
        path = _module_path(value[0] if isinstance(value, (tuple, list)) else value)
        if not path or path == parent or _is_container(value):
            continue
        local = path[len(parent) + 1:] if parent and path.startswith(parent + ".") else path
        parts.append(local)
        parent = path
    return "/".join(parts)


def location_name(node) -> str:
    """The location name of a call_function node's ops: ``<module scope>/<aten op>``."""
    target = node.target
    op = getattr(target, "_opname", None) or getattr(target, "__name__", None) or str(target)
    op = re.sub(r"[^\w-]+", "_", str(op)).strip("_") or "op"
    scope = module_scope(node)
    return f"{scope}/{op}" if scope else op


def _install_scope_locations() -> None:
    """Make torch-xla's exporter tag every call_function node's results with :func:`location_name`.

    torch-xla's own ``export_node_metadata`` writes the whole node metadata as JSON (stack traces: the
    small STDiT3's bytecode grows ninefold) and retags the graph outputs with the output node's empty
    metadata; this writes only the module path, for call_function nodes only.
    """
    import torch
    import torch.utils._pytree as pytree
    import torch_xla.stablehlo as tx_stablehlo
    # Importing it sets XLA_HLO_DEBUG=1, which carries the tag through the HLO metadata into MLIR. It must
    # be set after torch_xla is imported (as torch-xla's own export_node_metadata does): set before the
    # import, lowering the tagged graph fails at random in torch-xla 2.9 (std::bad_alloc, "basic_string:
    # construction from null" while lowering a prim::Constant or device_data node).
    from torch_xla.experimental.xla_mlir_debuginfo import write_mlir_debuginfo

    os.environ["XLA_HLO_DEBUG"] = "1"

    base = tx_stablehlo.XLAExportInterpreter
    if getattr(base, "_mhlo_cost_scoped", False):
        return

    class ScopedInterpreter(base):
        _mhlo_cost_scoped = True

        def run_node(self, n):
            res = super().run_node(n)
            if n.op == "call_function":
                name = location_name(n)
                pytree.tree_map_only(torch.Tensor, lambda x: write_mlir_debuginfo(x, name), res)
            return res

    tx_stablehlo.XLAExportInterpreter = ScopedInterpreter


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
    p.add_argument("--text", action="store_true",
                   help="write StableHLO text instead of bytecode (for reading: with locations it does not re-parse)")
    p.add_argument("--no-locations", dest="locations", action="store_false",
                   help="leave torch-xla's instruction-name locations (no module paths)")
    args = p.parse_args(argv)

    os.environ.setdefault("PJRT_DEVICE", "CPU")
    t0 = time.perf_counter()
    import torch
    from torch_xla.stablehlo import StableHLOExportOptions, exported_program_to_stablehlo

    if args.locations:
        _install_scope_locations()
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
        "locations": bool(args.locations),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
