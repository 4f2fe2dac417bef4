"""``train-plan --sweep GPUS``'s options: the values of each dimension of the sweep (``--sweep-tp``, ``--sweep-cp``,
``--sweep-micro-batch``, ``--sweep-recompute``, ``--sweep-interleave``, ``--sweep-zero``, ``--sweep-dp-shard``,
``--sweep-ep``, ``--sweep-precision``) and where its layers are lowered (``--scheduler``, ``-j/--jobs``), mapped
onto :class:`mhlo_cost.studies.plan.search.Space`."""
from __future__ import annotations

import argparse

from .common import UserError

RECOMPUTES = ("none", "selective", "full", "op")
TENSOR = (1, 2, 4, 8, 16, 32, 64)  # the tensor degrees the sweep walks (mhlo_cost.studies.plan.search._degrees)


def _list(kind: str, zero: bool = False):
    """A parser of a comma-separated list of ``kind`` (``int``: integers, positive unless ``zero``; else words),
    each once, in the order given."""

    def parse(value: str) -> tuple:
        words = [w.strip() for w in value.split(",")]
        if kind == "word":
            if not all(words):
                raise argparse.ArgumentTypeError(f"not a comma-separated list: {value!r}")
            return tuple(dict.fromkeys(words))
        try:
            out = tuple(dict.fromkeys(int(w) for w in words))
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {value!r}") from None
        if min(out) < (0 if zero else 1):
            raise argparse.ArgumentTypeError(f"not a list of {'non-negative' if zero else 'positive'} integers: "
                                             f"{value!r}")
        return out

    return parse


#: option, dest, parser, help (each with --sweep only).
OPTIONS = (
    ("--sweep-tp", "sweep_tp", _list("int"), "N,N,...", "the tensor degrees to try (default 1,2,4,8; sequence "
                                                         "parallelism on above 1)"),
    ("--sweep-cp", "sweep_cp", _list("int", zero=True), "N,N,...", "the context-parallel degrees to try (default 1)"),
    ("--sweep-micro-batch", "sweep_micro_batch", _list("int"), "N,N,...", "the micro-batch sizes to try "
                                                                          "(default 1,2,4)"),
    ("--sweep-recompute", "sweep_recompute", _list("word"), "R,R,...",
     f"the recompute policies to try ({', '.join(RECOMPUTES)}; default full,selective)"),
    ("--sweep-interleave", "sweep_interleave", _list("int"), "V,V,...",
     "the virtual stages per device to try (with a pipeline degree above 1; default 1,2,3)"),
    ("--sweep-zero", "sweep_zero", _list("int", zero=True), "Z,Z,...",
     "the ZeRO stages to try (0-3, 3: FSDP; default: the one given, or 0)"),
    ("--sweep-dp-shard", "sweep_dp_shard", _list("int", zero=True), "N,N,...",
     "HSDP: the sharding groups to try (each replica's state sharded over N data-parallel ranks x cp, replicated "
     "across d / N; with a ZeRO stage 1-3; 0: all d, no HSDP; default 0)"),
    ("--sweep-ep", "sweep_ep", _list("int"), "N,N,...",
     "a mixture-of-experts model: the expert-parallel degrees to try (default: --ep, or 1)"),
    ("--sweep-precision", "sweep_precision", _list("word"), "P,P,...",
     "the linears' precision recipes to try (bf16, fp8-tensorwise, fp8-rowwise; default: --precision, or bf16)"),
)


def register(p) -> None:
    """The sweep's options on the train-plan parser."""
    g = p.add_argument_group("the sweep (--sweep GPUS): each dimension's values, and where its layers are lowered")
    for opt, dest, parse, metavar, text in OPTIONS:
        g.add_argument(opt, dest=dest, type=parse, metavar=metavar, help=f"with --sweep: {text}")
    g.add_argument("--scheduler", metavar="tcp://HOST:8786",
                   help="with --sweep: lower the distinct layers on this Dask distributed cluster (as mhlo-cost sweep; "
                        "default: this machine)")
    g.add_argument("-j", "--jobs", type=int, metavar="N",
                   help="with --sweep: local worker processes lowering the distinct layers (default: the cores; 1: "
                        "in this process)")


def check(args) -> None:
    """The sweep's options that cannot mean anything: one line, before any work."""
    given = [opt for opt, dest, *_ in OPTIONS if getattr(args, dest) is not None]
    given += [opt for opt, v in (("--scheduler", args.scheduler), ("--jobs", args.jobs)) if v is not None]
    if given and args.sweep is None:
        raise UserError(f"{given[0]} goes with --sweep GPUS")
    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs must be a positive integer, got {args.jobs}")
    if args.jobs is not None and args.scheduler:
        raise UserError("--jobs sizes the local pool; with --scheduler the Dask cluster's workers lower the layers")
    if args.sweep_tp is not None and any(t not in TENSOR for t in args.sweep_tp):
        raise UserError(f"--sweep-tp: the sweep's tensor degrees are powers of two up to 64 "
                        f"({', '.join(map(str, TENSOR))}), got {','.join(map(str, args.sweep_tp))}")
    if args.sweep_cp is not None and 0 in args.sweep_cp:
        raise UserError("--sweep-cp: a context-parallel degree is a positive integer, got 0")
    if args.sweep_zero is not None and max(args.sweep_zero) > 3:
        raise UserError(f"--sweep-zero: a ZeRO stage is 0, 1, 2 or 3, got {max(args.sweep_zero)}")
    if args.sweep_zero is not None and (args.zero is not None or args.fsdp or args.use_distributed_optimizer
                                        or args.dp_comm == "zero"):
        raise UserError("--sweep-zero sweeps the ZeRO stage; it does not go with --zero, --fsdp, "
                        "--use-distributed-optimizer or --dp-comm zero")
    bad = [r for r in args.sweep_recompute or () if r not in RECOMPUTES]
    if bad:
        raise UserError(f"--sweep-recompute: {bad[0]!r} is not one of {', '.join(RECOMPUTES)}")
    for opt, dest, same in (("--sweep-ep", "sweep_ep", "--ep"), ("--sweep-precision", "sweep_precision",
                                                                  "--precision")):
        if getattr(args, dest) is not None and getattr(args, same.lstrip("-")) is not None:
            raise UserError(f"{opt} sweeps what {same} sets; give one")


def space(args, base):
    """The :class:`~mhlo_cost.studies.plan.search.Space` of the options (``base``: the model's configuration)."""
    from ..machines.precision import PrecisionError, training_recipe
    from ..studies.plan.search import Space

    if args.sweep_ep is not None and not base.experts:
        raise UserError("--sweep-ep: the model has no experts (give --num-experts, or a mixture-of-experts model)")
    try:
        precisions = (tuple(dict.fromkeys(training_recipe(p).name for p in args.sweep_precision))
                      if args.sweep_precision else None)
    except PrecisionError as e:
        raise UserError(f"--sweep-precision: {e}") from None
    kw = {"cps": args.sweep_cp or (1,), "zeros": args.sweep_zero, "dp_shards": args.sweep_dp_shard or (0,),
          "eps": args.sweep_ep, "precisions": precisions}
    for dest, field in (("sweep_micro_batch", "micro_batches"), ("sweep_recompute", "recomputes"),
                        ("sweep_interleave", "interleaves")):
        if getattr(args, dest) is not None:
            kw[field] = getattr(args, dest)
    if args.sweep_tp is not None:
        tps = args.sweep_tp
        kw.update(max_t=max(tps), only=_TensorDegrees(tps))
    return Space(**kw)


class _TensorDegrees:
    """``only(t, p, d)``: the tensor degrees given (a class, not a closure: the Space is compared and shown)."""

    def __init__(self, tps: tuple):
        self.tps = tps

    def __call__(self, t: int, p: int, d: int) -> bool:
        return t in self.tps

    def __repr__(self) -> str:
        return f"tensor degrees {','.join(map(str, self.tps))}"
