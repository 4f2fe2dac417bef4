"""``mhlo-cost baseline``, ``check`` and ``diff``: per-block counts for CI, and what moved."""
from __future__ import annotations

import math
import sys
from pathlib import Path

from ..files.read import is_regular
from .common import (EXIT_MOVED, EXIT_OK, UserError, add_common, add_force, add_output, add_progress, add_quiet,
                     claim_output, open_study, positive_int, regex, write_output)


def _counts(path: str, args, console, progress):
    """Counts of an IR file (analysed, blocks assigned) or of a baseline JSON file."""
    from ..studies.baseline import counts_from_analysis, read_baseline

    if _is_baseline(path):
        return read_baseline(path), None
    study = open_study(path, args, console, progress)
    df = study.block_frame(memory=False)
    return counts_from_analysis(study.analysis, df, study.blocks.method), study.analysis


def _is_baseline(path: str) -> bool:
    if path.endswith(".json"):
        return True
    if not is_regular(path):  # a FIFO is never opened; what it is, the reading of the IR says
        return False
    try:
        with open(path, "rb") as f:
            return f.read(64).lstrip()[:1] == b"{"
    except OSError:
        return False


def _metrics(value: str | None) -> tuple[str, ...]:
    from ..studies.baseline import METRICS

    if value is None:
        return METRICS
    chosen = tuple(m.strip() for m in value.split(",") if m.strip())
    if not chosen:  # `--metrics ,` would check nothing and pass: a false green in CI
        raise UserError(f"--metrics {value!r} names no metric; choose from {', '.join(METRICS)}")
    bad = [m for m in chosen if m not in METRICS]
    if bad:
        raise UserError(f"unknown metric(s) {', '.join(bad)}; choose from {', '.join(METRICS)}")
    return chosen


def cmd_baseline(args, console) -> int:
    """The one output rule (see :func:`mhlo_cost.files.write.claim`), and more, since a baseline is a reference
    to keep: an existing file is replaced with --force, or with --update where it reads whole as a baseline
    (--update names the file to replace and says what changed: consent, not a guess from its first bytes)."""
    from ..studies.baseline import BaselineError, compare, read_baseline, to_json
    from ..views.text import to_table

    out, old = Path(args.output), None
    if out.exists() and not args.force:  # before any work
        if not args.update:
            raise UserError(f"{out}: exists; --update compares and rewrites it, --force overwrites")
        try:
            old = read_baseline(out)
        except BaselineError as e:
            raise UserError(f"{out}: not a baseline ({e}); --force replaces it") from None
    if old is None:
        claim_output(args, console)
    else:
        _claim_update(args, console)
    progress = console.progress()
    counts, _ = _counts(args.file, args, console, progress)
    progress.done()
    if old is not None:
        moved = compare(old, counts)
        if len(moved):
            console.say(f"{out}: {len(moved)} count(s) changed:")
            sys.stderr.write(to_table(moved))
        else:
            console.say(f"{out}: no count changed")
    write_output(to_json(counts), str(out))
    return EXIT_OK


def _claim_update(args, console) -> None:
    """--update of a file that reads as a baseline: the output rule's checks (a folder, a folder that cannot be
    written), the file itself replaced as --update says."""
    from ..files.write import claim

    claim(args.output, force=True)
    console.say(f"replacing {args.output} (a baseline, --update)", note=True)


def cmd_check(args, console) -> int:
    from ..studies.baseline import compare, read_baseline
    from ..views.render import render_frame as render

    if not (args.rtol >= 0 and math.isfinite(args.rtol)):
        raise UserError(f"--rtol must be a finite number >= 0, got {args.rtol}")
    claim_output(args, console)
    base = read_baseline(args.baseline)
    progress = console.progress()
    now, _ = _counts(args.file, args, console, progress)
    progress.done()
    moved = compare(base, now, _metrics(args.metrics), args.rtol)
    if len(moved) == 0:
        console.say(f"{args.file}: every metric of {len(now.blocks)} blocks matches {args.baseline}")
        return EXIT_OK
    blocks = sorted(set(moved.block))
    console.say(f"{args.file}: {len(moved)} count(s) moved against {args.baseline} "
                f"(blocks: {', '.join(blocks[:6])}{' ...' if len(blocks) > 6 else ''})")
    write_output(render(moved, args.format, args.unit, wide=args.wide), args.output)
    return EXIT_MOVED


def cmd_diff(args, console) -> int:
    from ..studies.baseline import counts_frame, side_by_side
    from ..views.render import render_frame as render

    given = [o for o, v in (("--blocks", args.blocks != "auto"), ("--block-pattern", args.block_pattern),
                            ("--norms-per-block", args.norms_per_block)) if v]
    if given and args.by != "block":
        raise UserError(f"{', '.join(given)} find(s) the blocks of --by block; --by {args.by} groups no blocks")
    claim_output(args, console)
    progress = console.progress()
    frames = []
    for path in (args.a, args.b):
        counts, analysis = _counts(path, args, console, progress) if args.by == "block" or _is_baseline(path) else (
            None, open_study(path, args, console, progress).analysis)
        if args.by == "block":
            frames.append(counts_frame(counts))
        elif analysis is None:
            raise UserError(f"{path}: a baseline holds blocks only; use --by block")
        else:
            key = "op" if args.by == "opname" else args.by
            frames.append(analysis.group(key).rename(columns={key: "key"}))
    progress.done()
    key = "block" if args.by == "block" else "key"
    metrics = tuple(m for m in _metrics(args.metrics) if m in frames[0].columns and m in frames[1].columns)
    df = side_by_side(frames[0], frames[1], key, metrics)
    if key == "key":
        df = df.rename(columns={"key": args.by})
    write_output(render(df, args.format, args.unit, wide=args.wide), args.output)
    return EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("baseline", help="write per-block FLOP counts as a baseline JSON for CI")
    add_common(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="baseline file to write (.flops.json)")
    p.add_argument("--update", action="store_true", help="rewrite an existing baseline, saying what changed")
    add_force(p)
    p.set_defaults(func=cmd_baseline)

    p = sub.add_parser("check", help="exit 1 when a block's counts moved from the baseline")
    add_common(p)
    p.add_argument("--baseline", required=True, metavar="FILE")
    p.add_argument("--rtol", type=float, default=0.0, help="relative tolerance (default 0: exact)")
    p.add_argument("--metrics", metavar="LIST", help="comma-separated metrics to check (default: all)")
    add_output(p)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("diff", help="two IR files, or a file and a baseline, side by side",
                       description="Two IR files, or a file and a baseline JSON, side by side: per metric the value "
                                   "in A, in B, the change and the percent change; rows that changed first.")
    p.add_argument("a", help="the first: an MLIR file or a baseline (.json)")
    p.add_argument("b", help="the second: an MLIR file or a baseline (.json)")
    p.add_argument("--by", choices=("block", "opname", "kind"), default="block",
                   help="block (default; a baseline holds only these), opname (summed per op name) or kind")
    p.add_argument("--metrics", metavar="LIST", help="comma-separated metrics (default: all)")
    p.add_argument("--entry", metavar="NAME", help="function to start from (default: main, or the only public one)")
    p.add_argument("--strict", action="store_true", help="fail when an op no rule knows is found")
    add_quiet(p)
    add_progress(p)
    p.add_argument("--blocks", choices=("auto", "scope", "rms", "repeat", "stages"), default="auto",
                   help="how ops are grouped into blocks (default: auto)")
    p.add_argument("--block-pattern", metavar="REGEX", type=regex, help="regex naming a block in scope paths")
    p.add_argument("--norms-per-block", type=positive_int, metavar="N", help="normalisations per block (rms)")
    add_output(p)
    p.set_defaults(func=cmd_diff)
