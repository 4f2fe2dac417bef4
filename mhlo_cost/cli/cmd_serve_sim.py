"""``mhlo-cost serve --isl 1024 --osl 128 --concurrency 64``: the serving simulation's options and command
(:mod:`mhlo_cost.studies.serve.simstudy`). Any of ``--isl``, ``--osl``, ``--concurrency``, ``--request-rate``,
``--trace`` makes ``serve`` a simulation instead of one step."""
from __future__ import annotations

import argparse
from fractions import Fraction

from .common import EXIT_OK, UserError, claim_output, positive_int, write_output

#: The options that ask for a simulation (any one).
SIM_FLAGS = ("isl", "osl", "concurrency", "request_rate", "trace")
#: serve's one-step and sweep options, which a simulation does not take.
STEP_ONLY = ("decode", "prefill", "batch", "tokens", "context", "batches", "contexts", "tps")


def _number(value: str) -> Fraction | None:
    """``value`` as an exact fraction (``0.1`` is 1/10, ``1e300`` a whole number); None where it is no finite number."""
    try:
        return Fraction(value.strip())
    except (ValueError, ZeroDivisionError):
        return None


def _rate(value: str) -> float:
    r = _number(value)
    try:
        rate = float(r) if r is not None and r > 0 else 0.0  # (an underflow: 0)
    except OverflowError:
        rate = 0.0
    if not rate > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of requests per second, got {value!r}")
    return rate


def _fraction(value: str) -> float:
    r = _number(value)
    if r is None or not 0 < r <= 1:
        raise argparse.ArgumentTypeError(f"must be a fraction in (0, 1], got {value!r}")
    return float(r)


def _unit(value: str) -> float:
    r = _number(value)
    if r is None or not 0 <= r <= 1:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1], got {value!r}")
    return float(r)


def _cost(value: str) -> float:
    r = _number(value)
    if r is None or r < 0 or r > 1000:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1000], got {value!r}")
    return float(r)


def _speculation(args):
    """The Speculation of --spec-*; None without --spec-tokens (the others alone are refused)."""
    from ..studies.serve.spec import Speculation

    if args.spec_tokens is None:
        if args.spec_acceptance is not None or args.spec_draft_cost is not None:
            raise UserError("--spec-acceptance and --spec-draft-cost go with --spec-tokens K")
        return None
    if args.spec_acceptance is None:
        raise UserError("--spec-tokens needs --spec-acceptance ALPHA (the chance a drafted token is accepted)")
    return Speculation(args.spec_tokens, args.spec_acceptance, args.spec_draft_cost or 0.0)


def _split(value: str) -> tuple[int, int]:
    """``P:D`` as two whole numbers >= 1."""
    p, sep, d = value.partition(":")
    if sep and p.strip().isdigit() and d.strip().isdigit() and int(p) >= 1 and int(d) >= 1:
        return int(p), int(d)
    raise argparse.ArgumentTypeError(f"must be P:D, prefill and decode instances (whole numbers >= 1), got {value!r}")


def _gbps(value: str):
    r = _number(value)
    if r is None or not 0 < r <= 10 ** 6:
        raise argparse.ArgumentTypeError(f"must be a number of GB/s in (0, 1e6], got {value!r}")
    return r


def _parallel(args):
    """The Parallel of --pp, --dp, --disaggregate, --link-gbps; None where none is given."""
    from ..studies.serve.simpools import Parallel

    given = (args.pp, args.dp, args.disaggregate, args.link_gbps)
    if all(v is None for v in given):
        return None
    return Parallel(args.pp or 1, args.dp or 1, args.disaggregate, args.link_gbps)


def _gib(value: str) -> int:
    """GiB as whole bytes, exactly (half a byte rounds to even)."""
    r = _number(value)
    if r is None or r < 0:
        raise argparse.ArgumentTypeError(f"must be a number of GiB >= 0, got {value!r}")
    return round(r * (1 << 30))


def add_sim_options(p) -> None:
    g = p.add_argument_group(
        "a serving simulation (continuous batching as vLLM V1 runs it; any of --isl, --osl, --concurrency, "
        "--request-rate, --trace asks for one)")
    g.add_argument("--isl", metavar="N|uniform:LO:HI|normal:MEAN:STD",
                   help="input tokens per request: fixed, or drawn (normal: rounded, clipped to [1, 2 x MEAN])")
    g.add_argument("--osl", metavar="N|uniform:LO:HI|normal:MEAN:STD", help="output tokens per request (as --isl)")
    g.add_argument("--concurrency", type=positive_int, metavar="C",
                   help="closed loop: C requests in flight, the next sent when one finishes")
    g.add_argument("--request-rate", type=_rate, metavar="R", help="open loop: Poisson arrivals, R requests/s")
    g.add_argument("--trace", metavar="FILE", help="requests from a file: CSV with the header "
                   "arrival_s,input_tokens,output_tokens, or JSON Lines with those keys")
    g.add_argument("--num-requests", type=positive_int, metavar="N",
                   help="requests to simulate (default 10 x --concurrency, or 1000 at a --request-rate)")
    g.add_argument("--seed", type=int, default=0, help="the seed of drawn lengths and arrivals (default 0)")
    g.add_argument("--max-num-batched-tokens", type=positive_int, default=8192, metavar="N",
                   help="the token budget of a step (vLLM's; default 8192)")
    g.add_argument("--max-num-seqs", type=positive_int, default=256, metavar="N",
                   help="sequences in a step at most (default 256)")
    g.add_argument("--block-size", type=positive_int, default=16, metavar="N", help="tokens per KV block (default 16)")
    g.add_argument("--gpu-memory-utilization", type=_fraction, default=0.9, metavar="F",
                   help="the fraction of the device's memory the server takes (default 0.9)")
    g.add_argument("--num-gpu-blocks", type=positive_int, metavar="N",
                   help="the KV blocks given outright (vLLM's num_gpu_blocks_override; default: from the memory)")
    g.add_argument("--spec-tokens", type=positive_int, metavar="K",
                   help="speculative decoding: K drafted tokens per decoding sequence, verified in one step of "
                   "K+1 tokens (needs --spec-acceptance)")
    g.add_argument("--spec-acceptance", type=_unit, metavar="ALPHA",
                   help="the chance each drafted token is accepted, in [0, 1]: (1 - ALPHA^(K+1))/(1 - ALPHA) "
                   "tokens per verify step")
    g.add_argument("--spec-draft-cost", type=_cost, metavar="F",
                   help="a drafted token's cost in target decode steps (default 0: n-gram drafts; a draft model "
                   "of a tenth of the target's weights: about 0.1)")
    g.add_argument("--allreduce", choices=("vllm", "nccl"),
                   help="with --tp: whose all-reduce the step runs: vllm (its one-shot / two-shot custom all-reduce "
                   "for messages under 8 MiB on NVLink, NCCL's ring above; the default) or nccl (the ring always)")
    _add_parallel_options(g)
    g.add_argument("--graph-reserve-gib", type=_gib, default=1 << 30, metavar="GIB",
                   help="memory kept for CUDA graphs and outside torch (default 1; vLLM measures it on the device)")



def _add_parallel_options(g) -> None:
    """The simulation's decode kernel and its parallel layouts: --heads-per-kv-read, --pp, --dp, --disaggregate,
    --link-gbps."""
    g.add_argument("--heads-per-kv-read", type=positive_int, metavar="N",
                   help="the decode attention kernel reads a key/value group's cache once per N query heads "
                   "(TensorRT-LLM up to v0.6's masked MHA: 1; TurboMind v0.1: 4); default: once per group, as "
                   "XQA, FlashAttention and FlashInfer read it")
    g.add_argument("--pp", type=positive_int, metavar="N",
                   help="pipeline parallel over N stages of --tp GPUs each (vLLM's pipeline_parallel_size): the "
                   "layers split as vLLM splits them, each stage priced from its own kernels, weights and KV; N "
                   "virtual engines keep N steps in flight; the gain is against N replicas of the same --tp")
    g.add_argument("--dp", type=positive_int, metavar="N",
                   help="N data-parallel replicas (of --tp x --pp GPUs each), each request to the least loaded; "
                   "throughput in total and per GPU; the gain is against one replica")
    g.add_argument("--disaggregate", type=_split, metavar="P:D",
                   help="P prefill and D decode instances of --tp GPUs: prompts on the first, the KV cache sent "
                   "on the link, decoding on the second (TTFT includes the transfer); the gain is against P+D "
                   "colocated replicas")
    g.add_argument("--link-gbps", type=_gbps, metavar="GBPS",
                   help="--pp's sends and --disaggregate's KV transfers at GBPS GB/s per GPU (another tier: "
                   "e.g. 50 for 400 Gb/s InfiniBand; default the chip's link, NVLink where the profile has it)")

#: The simulation's own options without a default, which one step or a sweep refuses.
SIM_ONLY = ("allreduce", "spec_tokens", "spec_acceptance", "spec_draft_cost", "num_gpu_blocks", "pp", "dp",
            "disaggregate", "link_gbps", "heads_per_kv_read")


def check_step(args) -> None:
    """One step or a sweep: the simulation's own options refused, in one line."""
    for k in SIM_ONLY:
        if getattr(args, k, None) is not None:
            raise UserError(f"--{k.replace('_', '-')} is an option of the serving simulation (--isl, --osl, "
                            "--concurrency, --request-rate or --trace)")


def simulating(args) -> bool:
    return any(getattr(args, k, None) is not None for k in SIM_FLAGS)


def _check(args) -> None:
    for k in STEP_ONLY:
        v = getattr(args, k, None)
        if v not in (None, False):
            flag = "--" + k.replace("_", "-")
            raise UserError(f"{flag} is an option of one step or a sweep; a serving simulation (--isl, --osl, "
                            "--concurrency, --request-rate, --trace) prices every step itself")


def cmd_simulate(args, console, profile, step_request) -> int:
    """The simulation's command; ``profile(args)``: the chip; ``step_request(args, batch, tokens)``: the model's
    step (``serve``'s own, passed in so that this module does not import the one that imports it)."""
    from ..studies.serve.server import ServerConfig
    from ..studies.limits import OptionError
    from ..studies.serve.simload import Lengths, LoadError
    from ..studies.serve.simstudy import SimOptions, SimStudy
    from .cache import cache_note, cache_root

    _check(args)
    if args.plot is not None and not args.plot.lower().endswith((".png", ".svg", ".pdf")):
        raise UserError(f"--plot {args.plot or repr(args.plot)}: the picture's name must end in .png, .svg or .pdf")
    claim_output(args, console)
    if args.plot is not None:
        claim_output(args, console, args.plot)
    req = step_request(args, None, None)
    try:
        server = ServerConfig(args.max_num_batched_tokens, args.max_num_seqs, args.block_size,
                              args.gpu_memory_utilization, args.graph_reserve_gib,
                              num_gpu_blocks=args.num_gpu_blocks)
        isl = Lengths.parse(args.isl, "--isl") if args.isl is not None else None
        osl = Lengths.parse(args.osl, "--osl") if args.osl is not None else None
        opts = SimOptions(req, profile(args), isl, osl, args.num_requests, args.concurrency, args.request_rate,
                          args.trace, args.seed, server, args.launch or "cuda-graphs", tp=args.tp or 1,
                          allreduce=args.allreduce or "vllm", heads_per_kv_read=args.heads_per_kv_read,
                          spec=_speculation(args), parallel=_parallel(args))
    except (LoadError, OptionError) as e:
        raise UserError(str(e)) from None
    root = cache_root(args, console)
    opts = SimOptions(**{**opts.__dict__, "cache": root is not None, "cache_dir": root})
    bar = console.progress()
    study = SimStudy(opts, stage=bar.stage, note=cache_note(console))
    try:
        study.workload  # a bad trace or workload: said before anything is lowered
    except LoadError as e:
        raise UserError(str(e)) from None
    return write_view(study, bar, args, console, study.plot)


def write_view(study, bar, args, console, draw) -> int:
    """``study.view()`` rendered in ``args.format`` to ``args.output``; with ``args.plot``, ``draw(path)`` makes
    the picture through the one writer. Serve's step, sweep and simulation all end here."""
    from ..files.write import replacing
    from ..lower.frontends import FrontendError
    from ..lower.frontends.api import LowerFailed
    from ..views.render import render

    try:
        table = study.view()
    except (FrontendError, LowerFailed, ValueError) as e:
        raise UserError(str(e)) from None
    bar.close()
    write_output(render(table, args.format, "raw", wide=True), args.output)
    if args.plot:
        with replacing(args.plot) as tmp:
            draw(tmp)
        console.say(f"plot written to {args.plot}", note=True)
    return EXIT_OK
