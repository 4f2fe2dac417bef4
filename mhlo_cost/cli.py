"""The ``mhlo-cost`` command line.

Every failure a user can cause ends as one line on stderr, ``mhlo-cost: error: ...``, and exit code 2
(1 for ``check`` when a metric moved). No traceback reaches the terminal unless MHLO_COST_DEBUG=1.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import time
from pathlib import Path

from . import __version__

EXIT_OK, EXIT_MOVED, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 70


class UserError(Exception):
    """A problem with the input or the options, reported as one line."""


_ACTIVE: list["Progress"] = []  # closed by main() however a command ends


class Progress:
    """Stage messages on stderr, shown only once work has taken more than ``delay`` seconds.

    A timer thread prints them; once the command ends (:meth:`done`, or :func:`main` closing every
    instance on an error) nothing more is printed, even by a timer that already fired.
    """

    def __init__(self, enabled: bool = True, delay: float = 1.0):
        self.enabled = enabled
        self.delay = delay
        self.t0 = time.perf_counter()
        self.shown = False
        self.closed = False
        self._stage = ""
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        _ACTIVE.append(self)

    def stage(self, text: str) -> None:
        if not self.enabled:
            return
        with self._lock:
            self._cancel()
            self._stage = text
            if self.closed:
                return
            if not self.shown:
                remaining = max(0.0, self.delay - (time.perf_counter() - self.t0))
                self._timer = threading.Timer(remaining, self._print)
                self._timer.daemon = True
                self._timer.start()
                return
        self._print()

    def _print(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.shown = True
            print(f"mhlo-cost: {self._stage} ({time.perf_counter() - self.t0:.1f}s)", file=sys.stderr, flush=True)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self, report: bool = False) -> None:
        """No more lines; with ``report``, a closing "done" line where stage lines were shown."""
        with self._lock:
            was_open = not self.closed
            self.closed = True
            self._cancel()
            if report and was_open and self.shown and self.enabled:
                print(f"mhlo-cost: done in {time.perf_counter() - self.t0:.1f}s", file=sys.stderr, flush=True)

    def done(self) -> None:
        self.close(report=True)


def _size(path: str) -> str:
    try:
        n = Path(path).stat().st_size
    except OSError:
        return ""
    return f", {n / 1e6:.1f} MB" if n >= 1e5 else ""


def load_analysis(path: str, args, progress: Progress, dataflow: bool = False):
    from .analysis import analyze
    from .loader import load

    progress.stage(f"parsing {path}{_size(path)}")
    loaded = load(path)
    progress.stage("counting")
    if dataflow:  # rows plus the producers of every operand, for --fuse
        from .roofline import analyze_dataflow

        analysis = analyze_dataflow(loaded, entry=getattr(args, "entry", None))
    else:
        analysis = analyze(loaded, entry=getattr(args, "entry", None))
    for w in analysis.warnings:
        print(f"mhlo-cost: warning: {w}", file=sys.stderr)
    unknown = analysis.summary["unknown_ops"]
    if unknown:
        names = ", ".join(analysis.unknown[:5]) + (" ..." if len(analysis.unknown) > 5 else "")
        if getattr(args, "strict", False):
            raise UserError(f"{analysis.source}: {unknown} op(s) no rule knows: {names} (--strict)")
        print(f"mhlo-cost: warning: {unknown} op(s) no rule knows, counted as unknown: {names}", file=sys.stderr)
    return analysis


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value!r}")
    return n


def _regex(value: str) -> str:
    import re

    try:
        re.compile(value)
    except re.error as e:
        raise argparse.ArgumentTypeError(f"not a regular expression: {value!r} ({e})") from None
    return value


def _parse_by(value: str) -> tuple[str, int | None]:
    by, _, depth = value.partition(":")
    choices = ("summary", "op", "kind", "scope", "block", "comm")
    if by not in choices:
        raise argparse.ArgumentTypeError(f"--by must be one of {', '.join(choices)} (scope:DEPTH), got {value!r}")
    if depth:
        if by != "scope" or not depth.isdigit() or int(depth) < 1:
            raise argparse.ArgumentTypeError(f"only scope takes a depth, a positive integer: got {value!r}")
        return by, int(depth)
    return by, None


def _write(text: str, out: str | None) -> None:
    if out and out != "-":
        try:
            Path(out).write_text(text, encoding="utf-8")
        except OSError as e:
            raise UserError(f"{out}: cannot write: {e.strerror or e}") from None
    else:
        sys.stdout.write(text)


def _block_frame(analysis, args, parts: bool = False, roofline=None):
    from .blocks import block_table
    from .collectors import assign_blocks

    blocks = assign_blocks(analysis, method=args.blocks, pattern=args.block_pattern,
                           norms_per_block=args.norms_per_block)
    print(f"mhlo-cost: blocks by {blocks.method}: {blocks.count} found", file=sys.stderr)
    if roofline is not None:
        return roofline.block_frame(blocks, parts=parts)
    return block_table(analysis, blocks, parts=parts)


# -- roofline options (--hardware, --hardware-file, --fuse, --steps, --top) ------------------------------------


def _hardware(args):
    """The profile the options name (None without --hardware / --hardware-file); checked before any work."""
    from .roofline import hardware_from_args

    name, path = getattr(args, "hardware", None), getattr(args, "hardware_file", None)
    hw = hardware_from_args(name, path)
    fuse = getattr(args, "fuse", "none")
    if hw is None:
        given = [o for o, v in (("--fuse", fuse != "none"), ("--steps", getattr(args, "steps", None) is not None),
                                ("--top", getattr(args, "top", None) is not None)) if v]
        if given:
            raise UserError(f"{', '.join(given)} need(s) a hardware profile: add --hardware NAME "
                            "(mhlo-cost hardware lists them) or --hardware-file FILE")
    for opt in ("steps", "top"):
        v = getattr(args, opt, None)
        if v is not None and v < 1:
            raise UserError(f"--{opt} must be a positive integer, got {v}")
    return hw


def _roofline(analysis, hw, args, progress: Progress):
    from .roofline import Roofline

    progress.stage(f"estimating on {hw.name}")
    rf = Roofline(analysis, hw, fuse_mode=getattr(args, "fuse", "none"))
    if rf.unknown_ops:
        print(f"mhlo-cost: warning: {rf.unknown_ops} unknown op(s) are estimated at 0 s", file=sys.stderr)
    return rf


def _timed_group(analysis, rf, by: str, depth, df):
    """est_time_s (and est_time_fused_s) per group of a --by kind/op/scope table."""
    keys = analysis.keys(by, depth)
    label = df.columns[0]
    acc: dict = {}
    fused: dict = {}
    for r, k, t in zip(analysis.rows, keys, rf.times):
        acc[k] = acc.get(k, 0.0) + t.time_s
        if rf.fusion is not None:
            fused[k] = fused.get(k, 0.0) + rf.fusion.row_time[r.index] + t.comm_s
    df = df.copy()
    df["est_time_s"] = [acc.get(k, 0.0) for k in df[label]]
    if rf.fusion is not None:
        df["est_time_fused_s"] = [fused.get(k, 0.0) for k in df[label]]
    return df


def _comm_frame(analysis):
    import pandas as pd

    from .analysis import int_series

    rows = [r for r in analysis.rows if r.kind == "collective"]
    return pd.DataFrame({
        "op": [r.comm_kind for r in rows],
        "scope": [r.scope for r in rows],
        "group_size": int_series([r.group_size for r in rows]),
        "num_groups": int_series([r.num_groups for r in rows]),
        "shape": [r.shape for r in rows],
        "dtype": [r.dtype for r in rows],
        "multiplicity": int_series([r.multiplicity for r in rows]),
        "comm_bytes": int_series([r.comm_bytes for r in rows]),
        "location": [r.location for r in rows],
    })


def _meta(analysis) -> dict:
    return {"tool": "mhlo-cost", "version": __version__, "source": analysis.source, "entry": analysis.entry}


def cmd_report(args) -> int:
    from .report import render, summary_frame

    hw = _hardware(args)
    by, depth = args.by
    if args.top is not None and by != "op":
        raise UserError("--top goes with --by op")
    if args.steps is not None and by != "summary":
        raise UserError("--steps goes with --by summary (a run's total time and utilisation)")
    progress = Progress(enabled=not args.quiet)
    analysis = load_analysis(args.file, args, progress, dataflow=hw is not None and args.fuse != "none")
    rf = _roofline(analysis, hw, args, progress) if hw is not None else None
    progress.stage("grouping")
    if rf is not None and by == "summary":
        df = rf.summary_frame(args.steps or 1, counts=analysis.summary)
    elif rf is not None and by == "op":
        df = rf.kernel_frame(args.top) if rf.fusion is not None else rf.op_frame(args.top)
    elif by == "summary":
        df = summary_frame(analysis.summary)
    elif by == "block":
        df = _block_frame(analysis, args, roofline=rf)
    elif by == "comm":
        df = _comm_frame(analysis)
        if rf is not None:
            df["comm_time_s"] = [t.comm_s for r, t in zip(analysis.rows, rf.times) if r.kind == "collective"]
    elif by == "op" and args.format != "table":
        df = analysis.ops  # every op occurrence
    else:
        df = analysis.group("op" if by == "op" else by, depth)
        if rf is not None:
            df = _timed_group(analysis, rf, "op" if by == "op" else by, depth, df)
    title = f"{analysis.source} (entry @{analysis.entry}), by {by}" + (f":{depth}" if depth else "")
    if rf is not None:
        title += f", on {hw.name}" + (", fused elementwise" if rf.fusion is not None else "")
    text = render(df, args.format, args.unit, summary=analysis.summary, meta=_meta(analysis), title=title)
    progress.done()
    _write(text, args.output)
    return EXIT_OK


def cmd_blocks(args) -> int:
    from .report import render

    hw = _hardware(args)
    progress = Progress(enabled=not args.quiet)
    analysis = load_analysis(args.file, args, progress, dataflow=hw is not None and args.fuse != "none")
    rf = _roofline(analysis, hw, args, progress) if hw is not None else None
    df = _block_frame(analysis, args, parts=args.parts, roofline=rf)
    progress.done()
    fmt = args.format
    _write(render(df, fmt, args.unit, summary=analysis.summary, meta=_meta(analysis)), args.output)
    return EXIT_OK


def _counts(path: str, args, progress: Progress):
    """Counts of an IR file (analysed, blocks assigned) or of a baseline JSON file."""
    from .baseline import counts_from_analysis, read_baseline

    if _is_baseline(path):
        return read_baseline(path), None
    analysis = load_analysis(path, args, progress)
    from .blocks import block_table
    from .collectors import assign_blocks

    blocks = assign_blocks(analysis, method=args.blocks, pattern=args.block_pattern,
                           norms_per_block=args.norms_per_block)
    df = block_table(analysis, blocks)
    return counts_from_analysis(analysis, df, blocks.method), analysis


def _is_baseline(path: str) -> bool:
    if path.endswith(".json"):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(64).lstrip()[:1] == b"{"
    except OSError:
        return False


def _metrics(value: str | None) -> tuple[str, ...]:
    from .baseline import METRICS

    if not value:
        return METRICS
    chosen = tuple(m.strip() for m in value.split(",") if m.strip())
    bad = [m for m in chosen if m not in METRICS]
    if bad:
        raise UserError(f"unknown metric(s) {', '.join(bad)}; choose from {', '.join(METRICS)}")
    return chosen


def cmd_baseline(args) -> int:
    from .baseline import BaselineError, compare, read_baseline, to_json
    from .report import to_table

    progress = Progress(enabled=not args.quiet)
    counts, _ = _counts(args.file, args, progress)
    progress.done()
    text = to_json(counts)
    out = Path(args.output)
    if out.exists() and not (args.update or args.force):
        raise UserError(f"{out}: exists; --update compares and rewrites it, --force overwrites")
    if args.update and out.exists():
        try:
            old = read_baseline(out)
        except BaselineError:
            old = None
        if old is not None:
            moved = compare(old, counts)
            if len(moved):
                print(f"mhlo-cost: {out}: {len(moved)} count(s) changed:", file=sys.stderr)
                sys.stderr.write(to_table(moved))
            else:
                print(f"mhlo-cost: {out}: no count changed", file=sys.stderr)
    _write(text, str(out))
    return EXIT_OK


def cmd_check(args) -> int:
    from .baseline import compare, read_baseline
    from .report import render

    if not (args.rtol >= 0 and math.isfinite(args.rtol)):
        raise UserError(f"--rtol must be a finite number >= 0, got {args.rtol}")
    base = read_baseline(args.baseline)
    progress = Progress(enabled=not args.quiet)
    now, _ = _counts(args.file, args, progress)
    progress.done()
    moved = compare(base, now, _metrics(args.metrics), args.rtol)
    if len(moved) == 0:
        print(f"mhlo-cost: {args.file}: every metric of {len(now.blocks)} blocks matches {args.baseline}",
              file=sys.stderr)
        return EXIT_OK
    blocks = sorted(set(moved.block))
    print(f"mhlo-cost: {args.file}: {len(moved)} count(s) moved against {args.baseline} "
          f"(blocks: {', '.join(blocks[:6])}{' ...' if len(blocks) > 6 else ''})", file=sys.stderr)
    _write(render(moved, args.format, args.unit), args.output)
    return EXIT_MOVED


def cmd_diff(args) -> int:
    from .baseline import counts_frame, side_by_side
    from .report import render

    progress = Progress(enabled=not args.quiet)
    frames = []
    for path in (args.a, args.b):
        counts, analysis = _counts(path, args, progress) if args.by == "block" or _is_baseline(path) else (
            None, load_analysis(path, args, progress))
        if args.by == "block":
            frames.append(counts_frame(counts))
        elif analysis is None:
            raise UserError(f"{path}: a baseline holds blocks only; use --by block")
        else:
            frames.append(analysis.group(args.by).rename(columns={args.by: "key"}))
    progress.done()
    key = "block" if args.by == "block" else "key"
    metrics = tuple(m for m in _metrics(args.metrics) if m in frames[0].columns and m in frames[1].columns)
    df = side_by_side(frames[0], frames[1], key, metrics)
    if key == "key":
        df = df.rename(columns={"key": args.by})
    _write(render(df, args.format, args.unit), args.output)
    return EXIT_OK


def cmd_plot(args) -> int:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UserError("plot needs matplotlib: pip install 'mhlo-cost[plot]'") from None
    from .plot import plot_blocks

    hw = _hardware(args)
    if not args.output.lower().endswith((".png", ".svg", ".pdf")):
        raise UserError(f"{args.output}: the picture's name must end in .png, .svg or .pdf")
    progress = Progress(enabled=not args.quiet)
    analysis = load_analysis(args.file, args, progress, dataflow=hw is not None and args.fuse != "none")
    rf = _roofline(analysis, hw, args, progress) if hw is not None else None
    df = _block_frame(analysis, args, roofline=rf)
    progress.stage("drawing")
    title = args.title or (f"{Path(analysis.source).name}: per block"
                           + (f", estimated time on {hw.name}" if hw is not None else ", FLOPs"))
    try:
        plot_blocks(df, args.output, title=title, fused=rf is not None and rf.fusion is not None)
    except OSError as e:
        raise UserError(f"{args.output}: cannot write: {e.strerror or e}") from None
    progress.done()
    print(f"mhlo-cost: wrote {args.output}", file=sys.stderr)
    return EXIT_OK


def cmd_hardware(args) -> int:
    from .hardware import list_profiles

    import pandas as pd
    from .report import render

    profiles = list_profiles()
    df = pd.DataFrame({
        "name": [p.name for p in profiles],
        "bf16_tflops": [p.matrix_peak("bf16") / 1e12 for p in profiles],
        "hbm_gb_s": [p.hbm_bandwidth / 1e9 for p in profiles],
        "link_gb_s": [p.link_bandwidth / 1e9 for p in profiles],
        "description": [p.description for p in profiles],
    })
    sys.stdout.write(render(df, "table", "raw"))
    return EXIT_OK


def _common(p: argparse.ArgumentParser, blocks: bool = True) -> None:
    p.add_argument("file", help="MLIR file: .mlir text, .mlirbc bytecode or StableHLO artifact, optionally .gz")
    p.add_argument("--entry", metavar="NAME", help="function to start from (default: main, or the only public one)")
    p.add_argument("--strict", action="store_true", help="fail when an op no rule knows is found")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress messages on stderr")
    if blocks:
        p.add_argument("--blocks", choices=("auto", "scope", "rms", "repeat"), default="auto",
                       help="how ops are grouped into blocks (default: auto: scope, then repeat, then rms)")
        p.add_argument("--block-pattern", metavar="REGEX", type=_regex, help="regex naming a block in scope paths")
        p.add_argument("--norms-per-block", type=_positive, metavar="N", help="normalisations per block (rms)")


def _output(p: argparse.ArgumentParser, formats=("table", "csv", "json", "markdown"), default="table") -> None:
    p.add_argument("--format", choices=formats, default=default)
    p.add_argument("--unit", choices=tuple(["raw", "K", "M", "G", "T"]), default="raw",
                   help="display unit for FLOPs and bytes (decimal); raw prints exact integers")
    p.add_argument("-o", "--output", metavar="OUT", help="write to a file instead of stdout")


def _estimate(p: argparse.ArgumentParser, steps: bool = False, top: bool = False) -> None:
    g = p.add_argument_group("roofline estimate")
    g.add_argument("--hardware", metavar="NAME", help="estimate time on this profile (mhlo-cost hardware lists them)")
    g.add_argument("--hardware-file", metavar="FILE", help="TOML file of your own profiles (searched first)")
    g.add_argument("--fuse", choices=("none", "elementwise"), default="none",
                   help="elementwise: also estimate with elementwise chains fused into their producer kernel")
    if steps:
        g.add_argument("--steps", type=int, metavar="K", help="summary: a run of K forwards (sampling steps)")
    if top:
        g.add_argument("--top", type=int, metavar="N", help="--by op: the N slowest ops, slowest first")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2, like every other bad input
        raise UserError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mhlo-cost", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"mhlo-cost {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("report", help="what a model costs: summary, or grouped by op, kind, scope or block")
    _common(p)
    p.add_argument("--by", type=_parse_by, default=("summary", None),
                   help="summary (default), op, kind, scope[:DEPTH], block or comm")
    _estimate(p, steps=True, top=True)
    _output(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("blocks", help="one row per transformer block (CSV by default)")
    _common(p)
    p.add_argument("--parts", action="store_true", help="one row per block part (attn, cross_attn, mlp, ...)")
    _estimate(p)
    _output(p, default="csv")
    p.set_defaults(func=cmd_blocks)

    p = sub.add_parser("plot", help="a picture of the blocks: stacked GEMM / vector / comm time (or FLOPs)")
    _common(p)
    _estimate(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="picture to write (.png, .svg, .pdf)")
    p.add_argument("--title", help="the picture's title")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("baseline", help="write per-block FLOP counts as a baseline JSON for CI")
    _common(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="baseline file to write (.flops.json)")
    p.add_argument("--update", action="store_true", help="rewrite an existing baseline, saying what changed")
    p.add_argument("--force", action="store_true", help="overwrite an existing baseline silently")
    p.set_defaults(func=cmd_baseline)

    p = sub.add_parser("check", help="exit 1 when a block's counts moved from the baseline")
    _common(p)
    p.add_argument("--baseline", required=True, metavar="FILE")
    p.add_argument("--rtol", type=float, default=0.0, help="relative tolerance (default 0: exact)")
    p.add_argument("--metrics", metavar="LIST", help="comma-separated metrics to check (default: all)")
    _output(p)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("diff", help="two IR files, or a file and a baseline, side by side")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--by", choices=("block", "op", "kind"), default="block")
    p.add_argument("--metrics", metavar="LIST", help="comma-separated metrics (default: all)")
    p.add_argument("--entry", metavar="NAME")
    p.add_argument("--strict", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("--blocks", choices=("auto", "scope", "rms", "repeat"), default="auto")
    p.add_argument("--block-pattern", metavar="REGEX", type=_regex)
    p.add_argument("--norms-per-block", type=_positive, metavar="N")
    _output(p)
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("hardware", help="list the shipped hardware profiles")
    p.set_defaults(func=cmd_hardware)
    return parser


def main(argv: list[str] | None = None) -> int:
    from .baseline import BaselineError
    from .hardware import HardwareError
    from .loader import LoadError
    from .visitors.base import AnalysisError

    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except SystemExit as e:  # --help, --version
        return int(e.code or 0)
    except (UserError, LoadError, AnalysisError, HardwareError, BaselineError) as e:
        print(f"mhlo-cost: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("mhlo-cost: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as e:  # a bug: still one line, with a way to see more
        if os.environ.get("MHLO_COST_DEBUG"):
            raise
        print(f"mhlo-cost: internal error: {type(e).__name__}: {e} (MHLO_COST_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return EXIT_INTERNAL
    finally:
        while _ACTIVE:
            _ACTIVE.pop().close()


if __name__ == "__main__":
    sys.exit(main())
