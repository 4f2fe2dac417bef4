"""``mhlo-cost sweep``: the whole strategy table in one command, on this machine or a Dask cluster.

A grid from flags (``--shape``, ``--parallel``, ``--devices`` or ``--strategies``, ``--hardware``, ``--dtype``,
``--precision``)
or from a TOML spec (``--spec``; flags given override its keys); every model option of ``lower`` applies to
the whole grid. Each point is lowered and analysed once, every hardware profile applied to that analysis,
and results cached on disk (``--cache-dir``). The work is in :mod:`mhlo_cost.studies.sweep`.

Exit 0 when every point that could be built ran; 1 when some failed (the table has their rows and reasons,
stderr one line saying how many); 2 when none ran, or the grid or its settings are unusable.
"""
from __future__ import annotations

import argparse
import sys

from ..files.read import FileRefused, read_settings
from .cache import add_cache, cache_note, cache_root
from .cmd_lower import PARALLEL
from .common import EXIT_MOVED as EXIT_SOME_FAILED
from .common import EXIT_OK, UserError, add_force, add_progress, add_quiet, claim_output


def register(sub) -> None:
    p = sub.add_parser("sweep", help="a grid of models x shapes x strategies x devices x chips in one table",
                       description="Lower and analyse every point of a grid once, estimate it on every hardware "
                                   "profile, and write one tidy table (CSV, JSON, Parquet, markdown).")
    g = p.add_argument_group("the grid (flags, or a --spec TOML file with the same keys)")
    g.add_argument("--spec", metavar="FILE", help="a TOML spec: model, shape, parallel, devices, strategies, hardware, "
                                                  "dtype, precision, steps, fuse, [options] (flags given override it)")
    g.add_argument("--model", choices=["stdit3", "gpt"], help="a bundled model (default stdit3)")
    g.add_argument("--shape", nargs="+", metavar="SHAPE", help="stdit3 video shapes (FRAMES_WIDTH_HEIGHT)")
    g.add_argument("--parallel", nargs="+", choices=PARALLEL, metavar="P",
                   help=f"strategies ({', '.join(PARALLEL)}), crossed with --devices")
    g.add_argument("--devices", nargs="+", type=int, metavar="N", help="device counts, crossed with --parallel")
    g.add_argument("--strategies", nargs="+", metavar="P:N",
                   help="(parallel, devices) pairs instead of the product: none:1 ulysses:8 ring:16")
    g.add_argument("--hardware", nargs="+", metavar="NAME", help="chips or systems (mhlo-cost hardware lists them)")
    g.add_argument("--hardware-file", metavar="FILE", help="TOML file of your own profiles (searched first)")
    g.add_argument("--dtype", nargs="+", metavar="DTYPE", help="bf16 (default), f16, f32")
    g.add_argument("--precision", nargs="+", metavar="RECIPE",
                   help="precision recipes crossed like --dtype (default bf16): fp8-tensorwise, fp8-rowwise, "
                        "fp8-blockwise-128, mxfp8, nvfp4, w4a16-awq, w8a8-int8, w8a16; the blocks' linears stored "
                        "and run as the recipe says (stdit3: none, ulysses, ring; megatron: the tensorwise and rowwise "
                        "ones; gpt); a precision column")
    g.add_argument("--steps", type=int, metavar="K", help="a run is K steps (sampling steps; default 1)")
    g.add_argument("--execution", choices=("eager", "compiled", "inductor", "unfused"),
                   help="as report --execution (default unfused); the table's execution column says it")
    g.add_argument("--fuse", choices=("none", "elementwise"), help="as report --fuse (default none)")
    g.add_argument("--conv-padding", choices=("xla", "dense"), help="as report --conv-padding (default xla)")
    m = p.add_argument_group("model options (as lower; the whole grid)")
    m.add_argument("--small", action="store_true", default=None, help="stdit3: the reduced test configuration")
    for opt in ("depth", "hidden", "heads", "batch", "tokens", "layers"):
        m.add_argument(f"--{opt}", type=int, metavar="N")
    m.add_argument("--scan", action="store_true", default=None, help="gpt: the layers as one lax.scan")
    m.add_argument("--deployed", action="store_true", default=None,
                   help="stdit3: the torch module as OpenSora 1.2 deploys it, lowered with torchax (as lower "
                        "--deployed; no parallel strategy: those points are skipped with the reason)")
    r = p.add_argument_group("where it runs")
    r.add_argument("--scheduler", metavar="tcp://HOST:8786", help="a Dask distributed scheduler (default: this "
                                                                  "machine, a process per core)")
    r.add_argument("-j", "--jobs", type=int, metavar="N", help="local worker processes (default: the cores)")
    r.add_argument("--worker-timeout", type=_seconds, metavar="S",
                   help="with --scheduler: how long the sweep waits with no worker in the cluster before it stops "
                        "with an error (default 60: mhlo_cost.studies.sweep.run.WORKER_TIMEOUT)")
    add_cache(r, "each point's IR hash and rows")
    o = p.add_argument_group("output")
    o.add_argument("--best", action="store_true", help="only what fits, ranked per (shape, hardware) by time")
    o.add_argument("--format", choices=("csv", "json", "parquet", "markdown"),
                   help="default: from -o's extension (.csv .json .parquet .md), else markdown")
    o.add_argument("-o", "--output", metavar="FILE", help="write the table here (default stdout)")
    add_force(o)
    add_quiet(o)
    add_progress(o)
    p.set_defaults(func=cmd_sweep)


def _check_where(args) -> None:
    """Where the sweep runs: a local pool of --jobs processes, or a Dask cluster (whose workers are its own)."""
    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs must be a positive integer, got {args.jobs}")
    if args.jobs is not None and args.scheduler:
        raise UserError("--jobs sizes the local pool; with --scheduler the Dask cluster's workers run the points")


def _seconds(value: str) -> float:
    import math

    try:
        s = float(value)
    except ValueError:
        s = math.nan
    if not (math.isfinite(s) and s > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {value!r}")
    return s


def _settings(args) -> dict:
    from ..studies.sweep import read_spec

    settings = read_spec(args.spec) if args.spec else {}
    for key in ("model", "shape", "parallel", "devices", "strategies", "hardware", "dtype", "precision", "steps",
                "fuse", "conv_padding", "execution"):
        v = getattr(args, key)
        if v is not None:
            settings[key] = v
    # --strategies on the command line replaces the spec's parallel x devices, and the other way round
    flag_pairs = args.parallel is not None or args.devices is not None
    if args.strategies is not None and not flag_pairs:
        settings.pop("parallel", None)
        settings.pop("devices", None)
    elif flag_pairs and args.strategies is None:
        settings.pop("strategies", None)
    options = dict(settings.get("options") or {})
    options.update({k: getattr(args, k) for k in ("small", "depth", "hidden", "heads", "batch", "tokens", "layers",
                                                  "scan", "deployed") if getattr(args, k) is not None})
    settings["options"] = options
    return settings


def _hardware_toml(grid, path) -> str | None:
    """The text of --hardware-file (sent to the workers), once every name is checked to resolve."""
    from ..roofline import hardware_from_args

    for name in grid.hardware:
        hardware_from_args(name, path)  # HardwareError: one line, before any work
    if path is None:
        return None
    try:
        return read_settings(path, "a hardware file").decode("utf-8")
    except FileRefused as e:
        raise UserError(str(e)) from None


def _shape_notes(grid, console) -> None:
    """A STDiT3 shape that is not a published one: a warning (never hidden) with the tokens it means."""
    from ..lower.models.config import VideoShape, unpublished_shape_note

    for shape in sorted({p.shape for p in grid.points if p.model == "stdit3"}):
        try:
            VideoShape.parse(shape)
        except ValueError:  # the grid's default shape ("default"), or an error the points report
            continue
        note = unpublished_shape_note(shape)
        if note:
            console.say(f"warning: {note}")


def cmd_sweep(args, console) -> int:
    import os

    from ..studies.sweep import GridError, SweepError, make_grid, run_sweep
    from ..studies.sweep.table import best, format_of

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    fmt = format_of(args.output, args.format)
    claim_output(args, console)
    if fmt == "parquet" and args.output in (None, "", "-"):
        raise UserError("--format parquet needs -o FILE")
    _check_where(args)
    try:
        settings = _settings(args)
        if settings.get("training"):  # training configurations: delegated to mhlo_cost.studies.plan
            _training_only(args)
            return _training(args, console, settings, fmt)
        grid = make_grid(settings)
        _shape_notes(grid, console)
        hardware_toml = _hardware_toml(grid, args.hardware_file)
        cache = cache_root(args, console)
        console.say(f"sweep of {len(grid.points)} point(s) x {len(grid.hardware)} hardware profile(s) on "
                    f"{args.scheduler or 'this machine'}", note=True)
        bar = console.progress()
        df, stats = run_sweep(grid, hardware_toml, cache_dir=cache, scheduler=args.scheduler, jobs=args.jobs,
                              progress=bar.count if bar.enabled else False, note=cache_note(console),
                              **({"worker_timeout": args.worker_timeout} if args.worker_timeout else {}))
        bar.close()
    except (GridError, SweepError) as e:
        raise UserError(str(e)) from None
    nothing = _nothing_ran(df) if stats.computed + stats.cached == 0 else None
    if args.best:
        df = best(df)
    settings = {"steps": grid.steps, "fuse": grid.fuse, "conv_padding": grid.conv_padding, "options": grid.options}
    _emit(df, fmt, args.output, settings)
    if nothing is not None:  # the table (written) says why, point by point
        raise UserError(nothing)
    console.say(f"sweep done in {stats.seconds:.1f}s: {stats.computed} computed, {stats.cached} cached, "
                f"{stats.failed} failed", note=True)
    if stats.failed:
        console.say(_some_failed(df, stats))
        return EXIT_SOME_FAILED
    return EXIT_OK


def _emit(df, fmt: str, output, settings: dict) -> None:
    """The table on stdout, or written to ``output`` through the one writer."""
    from ..studies.sweep.table import write

    try:
        text = write(df, fmt, output, settings)
    except OSError as e:  # (pyarrow missing)
        raise UserError(f"{output}: cannot write: {e.strerror or e}") from None
    if text is not None:
        sys.stdout.write(text)


def _some_failed(df, stats) -> str:
    """One line: how many points failed of those that could be built, and the first one's reason."""
    failed = df[df["status"] == "failed"]
    first = f"; first: {failed['parallel'].iloc[0]}:{failed['devices'].iloc[0]}: {failed['reason'].iloc[0]}" \
        if len(failed) else ""
    return (f"sweep: {stats.failed} of {stats.total} point(s) failed{first} (their rows say why; exit "
            f"{EXIT_SOME_FAILED})")


def _nothing_ran(df) -> str:
    """One line: no point of the sweep ran, how many were skipped and failed, and the first reason."""
    status = list(df["status"]) if len(df) else []
    skipped, failed = status.count("skipped"), status.count("failed")
    first = next((r for s, r in zip(status, df["reason"]) if s in ("skipped", "failed") and r), "") if status else ""
    first = (str(first).splitlines() or [""])[0]
    return (f"no point of the sweep ran ({skipped} row(s) skipped, {failed} failed)"
            + (f"; first reason: {first}" if first else ""))


def _training_only(args) -> None:
    """A [training] spec is planned here, arithmetic after one lowering per layer shape: no worker pool, no Dask
    scheduler, the shipped system profiles. Options for those are refused, not dropped."""
    given = [o for o, v in (("--scheduler", args.scheduler), ("--jobs", args.jobs is not None),
                            ("--worker-timeout", args.worker_timeout is not None),
                            ("--hardware-file", args.hardware_file)) if v]
    if given:
        raise UserError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to a [training] spec "
                        "(planned in this process, on the shipped system profiles)")


def _training(args, console, settings: dict, fmt: str) -> int:
    """A spec with a [training] table: the splits planned by mhlo_cost.studies.plan, one row each (--best: ranked
    by iteration time among those that fit, as train-plan --sweep ranks them)."""
    import time

    from ..studies.sweep.table import best
    from ..studies.sweep.training import training_frame

    t0 = time.perf_counter()
    df = training_frame(settings, cache_root(args, console), cache_note(console))
    if not len(df):  # no split of the devices the spec allows: nothing to show
        raise UserError("no point of the sweep ran: no split of the spec's devices has the degrees its [training] "
                        "table lists")
    nothing = _nothing_ran(df) if not (df["status"] == "ok").any() else None
    if args.best and nothing is None:  # (nothing to rank where nothing ran)
        df = best(df)
    _emit(df, fmt, args.output, {"training": settings["training"]})
    if nothing is not None:  # every split skipped: the table (written) says why, row by row; as a grid sweep
        raise UserError(nothing)
    console.say(f"training sweep of {len(df)} row(s) done in {time.perf_counter() - t0:.1f}s", note=True)
    return EXIT_OK
