#!/usr/bin/env python3
"""Dump the StableHLO of a bundled model (OpenSora 1.2 STDiT3, a small GPT) for mhlo-cost.

Examples (from the repository root):

    python scripts/dump_mhlo.py --list
    python scripts/dump_mhlo.py --model stdit3 --shape 204_640_360 -o out/stdit3_204_640_360.mlir.gz
    python scripts/dump_mhlo.py --model gpt --scan -o out/gpt.mlirbc
    python scripts/dump_mhlo.py --model stdit3 --small --no-locations > small.mlir
    python scripts/dump_mhlo.py --model stdit3 --parallel megatron --devices 16 -o out/stdit3_tp16.mlir.gz
    python scripts/dump_mhlo.py --model stdit3 --parallel 2d --devices 16 --mesh 2x8 -o out/stdit3_2d.mlir.gz

``--parallel`` lowers STDiT3 under a parallel strategy (megatron tensor parallel, 2d tensor parallel,
DeepSpeed-Ulysses, Ring-Attention; see ``mhlo_cost/models/parallel.py``) with ``jax.shard_map`` over an
abstract mesh of ``--devices`` devices, so the collectives are explicit and no devices are needed.

The file name chooses the format: ``.mlir`` text, ``.mlirbc`` bytecode, either with ``.gz`` gzipped.
Without ``-o`` the text goes to stdout. Progress, time and peak RSS go to stderr.
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # quiet XLA's C++ start-up logging
os.environ.setdefault("JAX_PLATFORMS", "cpu")  # lowering needs no accelerator

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:  # run from a checkout without the package installed
    sys.path.insert(0, _ROOT)


#: --parallel choices (the same as mhlo_cost.models.parallel.STRATEGIES; kept here so --help imports no jax)
PARALLEL = ("none", "megatron", "2d", "ulysses", "ring")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not the usage block
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(frontends) -> argparse.ArgumentParser:
    p = _Parser(prog="dump_mhlo.py", description="Lower a bundled model to StableHLO and write it.")
    p.add_argument("--model", choices=["stdit3", "gpt"], help="model to lower")
    p.add_argument("--module", metavar="PKG.MOD:FACTORY",
                   help="your own model instead: a factory returning an nn.Module (torchax, torch-xla) or a "
                        "function (jax); needs --input-shape")
    p.add_argument("--input-shape", action="append", default=[], metavar="D0,D1,...",
                   help="shape of one input of --module, repeat for several (e.g. --input-shape 2,16,64)")
    p.add_argument("--shape", help="stdit3 video shape FRAMES_WIDTH_HEIGHT (default 204_640_360)")
    p.add_argument("--batch", type=int, help="batch size (default 2)")
    p.add_argument("--tokens", type=int, help="caption tokens (stdit3, default 300) / sequence length (gpt)")
    p.add_argument("--dtype", choices=["bf16", "f16", "f32"], help="parameter and activation dtype")
    p.add_argument("--depth", type=int, help="stdit3: spatial (= temporal) blocks (default 28)")
    p.add_argument("--hidden", type=int, help="hidden size")
    p.add_argument("--heads", type=int, help="attention heads")
    p.add_argument("--layers", type=int, help="gpt: layers")
    p.add_argument("--scan", action="store_true", help="gpt: run the layers as one lax.scan")
    p.add_argument("--small", action="store_true", help="stdit3: the reduced test configuration")
    p.add_argument("--frontend", choices=list(frontends), default="jax", help="how to lower (default jax)")
    p.add_argument("--parallel", choices=PARALLEL, default="none",
                   help="stdit3: lower under a parallel strategy with explicit collectives (default none)")
    p.add_argument("--devices", type=int, metavar="N", help="devices of the parallel strategy (e.g. 16)")
    p.add_argument("--mesh", metavar="NXxNY", help="2d: the mesh, N_x (batch) x N_y (default 2 x N/2)")
    p.add_argument("-o", "--output", metavar="FILE", help=".mlir / .mlirbc, optionally .gz (default: stdout)")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    p.add_argument("--no-locations", dest="locations", action="store_false",
                   help="omit op locations (named scopes) from the output")
    p.add_argument("--list", action="store_true", help="list models and named video shapes, then exit")
    return p


def list_models(out=sys.stdout) -> None:
    from mhlo_cost.frontends import FRONTENDS, MODELS
    from mhlo_cost.models.config import NAMED_SHAPES, STDiT3Config, VideoShape

    print("models: " + ", ".join(MODELS), file=out)
    print("frontends: " + ", ".join(FRONTENDS), file=out)
    print("stdit3 video shapes (latent T x H x W -> tokens T, S):", file=out)
    for name in NAMED_SHAPES:
        c = STDiT3Config().with_shape(VideoShape.parse(name))
        print(f"  {name:<14} latent {c.latent_t}x{c.latent_h}x{c.latent_w}  T={c.tokens_t}  S={c.tokens_s}  "
              f"tokens/sample={c.tokens_t * c.tokens_s}", file=out)


def _parallel(args, cfg):
    """(cfg, text for the progress line): cfg wrapped with its parallel plan where --parallel asks for one."""
    from mhlo_cost.frontends import FrontendError

    if args.parallel == "none":
        if args.devices is not None or args.mesh is not None:
            raise FrontendError("--devices and --mesh need a --parallel strategy")
        return cfg, ""
    if args.model != "stdit3":
        raise FrontendError(f"--parallel applies to stdit3 only, not {args.model}")
    if args.frontend != "jax":
        raise FrontendError("--parallel needs the jax frontend")
    from mhlo_cost.models import parallel

    devices = args.devices
    if devices is None:
        if args.mesh is None:
            raise FrontendError(f"--parallel {args.parallel} needs --devices N")
        nx, ny = parallel.parse_mesh(args.mesh)
        devices = nx * ny
    plan = parallel.make_plan(args.parallel, devices, args.mesh, cfg)
    return parallel.ShardedConfig(cfg, plan), f", {plan.describe()}"


def main(argv=None) -> int:
    from mhlo_cost.frontends import FRONTENDS, DTYPES, FrontendError, describe, dump, make_config

    args = build_parser(FRONTENDS).parse_args(argv)
    if args.list:
        list_models()
        return 0
    if args.model is None and args.module is None:
        print("dump_mhlo.py: error: --model or --module is required (or --list)", file=sys.stderr)
        return 2
    if args.module is not None:
        return dump_module(args)
    if args.output and os.path.exists(args.output) and not args.force:
        print(f"dump_mhlo.py: error: {args.output} exists; pass --force to overwrite it", file=sys.stderr)
        return 2
    try:
        cfg = make_config(args.model, shape=args.shape, small=args.small, batch=args.batch, tokens=args.tokens,
                          dtype=args.dtype and DTYPES[args.dtype], depth=args.depth, hidden=args.hidden,
                          heads=args.heads, layers=args.layers, scan=args.scan)
        cfg, plan_text = _parallel(args, cfg)
        where = args.output or "stdout"
        print(f"lowering {describe(args.model, cfg)}{plan_text} with {args.frontend} -> {where}", file=sys.stderr)
        res = dump(args.model, cfg, args.output, frontend=args.frontend, locations=args.locations,
                   force=args.force)
        if args.output is None:
            sys.stdout.write(res.text)
        print(f"{res.format} {res.nbytes / 1e6:.2f} MB{' written to ' + args.output if args.output else ''} "
              f"in {res.seconds:.2f} s, peak RSS {res.peak_rss_mb:.0f} MiB", file=sys.stderr)
    except (FrontendError, OSError, ValueError) as e:
        print(f"dump_mhlo.py: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # anything else: still one line, no traceback
        print(f"dump_mhlo.py: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


def dump_module(args) -> int:
    from mhlo_cost.frontends import DTYPES, FrontendError, dump

    try:
        if args.model is not None:
            raise FrontendError("--module and --model exclude each other")
        if not args.input_shape:
            raise FrontendError("--module needs at least one --input-shape")
        try:
            shapes = [tuple(int(d) for d in s.split(",")) for s in args.input_shape]
        except ValueError:
            raise FrontendError(f"--input-shape wants comma-separated integers, got {args.input_shape}") from None
        where = args.output or "stdout"
        print(f"lowering {args.module} with inputs {shapes} with {args.frontend} -> {where}", file=sys.stderr)
        res = dump("", None, args.output, frontend=args.frontend, locations=args.locations, force=args.force,
                   module=args.module, input_shapes=shapes, dtype=DTYPES[args.dtype or "f32"])
        if args.output is None:
            sys.stdout.write(res.text)
        print(f"{res.format} {res.nbytes / 1e6:.2f} MB{' written to ' + args.output if args.output else ''} "
              f"in {res.seconds:.2f} s, peak RSS {res.peak_rss_mb:.0f} MiB", file=sys.stderr)
    except Exception as e:  # one line, no traceback
        msg = str(e) if isinstance(e, (FrontendError, OSError, ValueError)) else f"{type(e).__name__}: {e}"
        print(f"dump_mhlo.py: error: {msg}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
