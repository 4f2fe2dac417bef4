"""What every command shares: the one-line error, progress on stderr, loading, -o, option helpers."""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Callable

from ..files.written import head, record_output, wrote_before
from .progress import ACTIVE_PROGRESS, Progress, progress_wanted, stop_progress  # noqa: F401 (the commands' names)

EXIT_OK, EXIT_MOVED, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 70
#: The oldest jax / jaxlib whose MLIR bindings the loader works with (pyproject says the same): 0.6 has no
#: ``_jax_mlir_ext``, 0.7.2 to 0.10.0 no ``ir.NameLoc``.
MIN_JAX = (0, 10, 1)


class UserError(Exception):
    """A problem with the input or the options, reported as one line."""


def _size(path: str) -> str:
    try:
        n = Path(path).stat().st_size
    except OSError:
        return ""
    return f", {n / 1e6:.1f} MB" if n >= 1e5 else ""


SAID: set = set()  # the lines said this run: each once


def say(args, text: str, note: bool = False) -> None:
    """``mhlo-cost: text`` on stderr, once per run; a ``note`` (what was found, what was written, facts
    that change no figure) never under ``-q``."""
    if (note and getattr(args, "quiet", False)) or text in SAID:
        return
    SAID.add(text)
    for p in ACTIVE_PROGRESS:  # a line drawn in place on a terminal ends first
        p.clear()
    print(f"mhlo-cost: {text}", file=sys.stderr)


def require_jax() -> None:
    """A one-line error, before any import of the bindings, where the installed jaxlib is too old."""
    from importlib.metadata import PackageNotFoundError, version

    want = ".".join(map(str, MIN_JAX))
    for dist in ("jax", "jaxlib"):
        try:
            found = version(dist)
        except PackageNotFoundError:
            raise UserError(f"{dist} is not installed: pip install 'jax>={want}' 'jaxlib>={want}'") from None
        nums = tuple(int(p) if p.isdigit() else 0 for p in found.split(".")[:3])
        if nums < MIN_JAX:
            raise UserError(f"{dist} {found} is too old (its MLIR bindings lack what the loader needs): "
                            f"pip install -U 'jax>={want}' 'jaxlib>={want}'")


def read_input(path: str) -> bytes:
    """The bytes of the file ``path`` (``-``: standard input). A command-line argument is always a path, never
    MLIR text: a regular file, read with a limit; a FIFO, a device or a directory is refused unopened."""
    from ..files.read import FileRefused, read_file, read_stream

    try:
        data = read_stream(sys.stdin.buffer, "-") if path == "-" else read_file(path)
    except FileRefused as e:
        raise UserError(str(e)) from None
    if not data and path == "-":
        raise UserError("-: standard input is empty, expected MLIR")
    return data


def open_study(path: str, args, progress: Progress, hw=None, training: bool | str = False):
    """The study of ``path`` (``-``: standard input) under the options (``hw``: the profile
    :func:`hardware_from_options` resolved); its analysis made now, its warnings said (``--strict``: refused).
    ``training``: a training step's phases where the IR holds a backward (``"always"``: whatever it holds)."""
    return open_answer(path, args, progress, hw, training)[0]


def open_answer(path: str, args, progress: Progress, hw=None, training: bool | str = False,
                render=None) -> tuple:
    """(the study, None) as :func:`open_study`; or, where ``render(study_options)`` gives a spec
    (:func:`mhlo_cost.studies.compose.spec`) and the reader's child answers it whole, (the study without its
    analysis, (text, [[line, is_note], ...]))."""
    from ..ir.guard import enabled, prestart
    from ..studies.study import Study, StudyOptions

    prestart(walk=True)  # the reader's child starts (and imports the walk) while this process reads the file
    progress.stage(f"parsing {'standard input' if path == '-' else path}{_size(path)}")
    data = read_input(path)
    options = StudyOptions(
        data, name="<stdin>" if path == "-" else path, entry=getattr(args, "entry", None),
        conv_padding=getattr(args, "conv_padding", "xla"), training=training, hardware=hw,
        execution=getattr(args, "execution", None), fuse=getattr(args, "fuse", "none") or "none",
        attention=getattr(args, "attention", None), sdpa=getattr(args, "sdpa", None),
        steps=getattr(args, "steps", None), blocks=getattr(args, "blocks", "auto"),
        block_pattern=getattr(args, "block_pattern", None), norms_per_block=getattr(args, "norms_per_block", None),
        isolate=enabled())
    checked: list = []  # jax's version, read while the child works (its metadata is slow to read)
    asked = render(options) if render is not None and options.isolate else None
    # (the views are imported meanwhile unless the child is asked to render: then they are rarely needed here)
    study = Study(options, stage=progress.stage, meanwhile=lambda: _meanwhile(checked, views=not asked),
                  check=require_jax)
    whole = None
    if not options.isolate:  # MHLO_COST_ISOLATE=0: parsed and walked here, the version checked first
        analysis = study.analysis
    else:  # parsed and walked once, in the child: this process imports no jaxlib
        try:
            whole = study.answer(asked) if asked else None
            analysis = study.analysis if whole is None else None
        except Exception:
            _jax_ok(checked)  # a jaxlib too old (or none) says so first
            raise
        _jax_ok(checked)
    if whole is not None:
        import json

        return study, json.loads(whole)
    _say_warnings(analysis, args)
    return study, None


def _say_warnings(analysis, args) -> None:
    """The analysis' warnings and unknown ops on stderr (``--strict``: an error)."""
    from ..walk.row import EMPTY_ENTRY

    for w in analysis.warnings:  # a fact about the counts (shard_map: per device) is a note
        if w.startswith(EMPTY_ENTRY) and getattr(args, "strict", False):
            raise UserError(f"{analysis.source}: {w} (--strict)")
        say(args, f"note: {w}" if "per device" in w else f"warning: {w}", note="per device" in w)
    unknown = sum(r.multiplicity for r in analysis.rows if r.kind == "unknown")
    if unknown:
        names = ", ".join(analysis.unknown[:5]) + (" ..." if len(analysis.unknown) > 5 else "")
        if getattr(args, "strict", False):
            raise UserError(f"{analysis.source}: {unknown} op(s) no rule knows: {names} (--strict)")
        say(args, f"warning: {unknown} op(s) no rule knows, counted as unknown: {names}")


def _meanwhile(checked: list, views: bool = True) -> None:
    """While the reader's child parses and walks: the version check of jax and jaxlib (its error kept in
    ``checked``), and the imports of the views."""
    try:
        require_jax()
        checked.append(None)
    except UserError as e:
        checked.append(e)
    if views:
        _import_the_views()


def _jax_ok(checked: list) -> None:
    """Raise the version check's error (made now where it was not made meanwhile)."""
    if not checked:
        require_jax()
    elif checked[0] is not None:
        raise checked[0]


def _import_the_views() -> None:
    """What the summary and the block views import, imported while the reader's child parses and walks."""
    import importlib

    for module in ("mhlo_cost.memory.profile", "mhlo_cost.analysis.collectors.repeat", "mhlo_cost.analysis.collectors.scope",
                   "mhlo_cost.views.figures", "mhlo_cost.views.headline", "mhlo_cost.views.pairs"):
        try:
            importlib.import_module(module)
        except ImportError:  # said where it is needed
            pass


def positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value!r}")
    return n


def regex(value: str) -> str:
    import re

    try:
        re.compile(value)
    except re.error as e:
        raise argparse.ArgumentTypeError(f"not a regular expression: {value!r} ({e})") from None
    return value



def write_output(text: str, out: str | None) -> None:
    """``text`` to ``out`` (recorded as mhlo-cost's, see :func:`claim_output`), or to stdout."""
    if out and out != "-":
        try:
            Path(out).write_text(text, encoding="utf-8")
        except OSError as e:
            raise UserError(f"{out}: cannot write: {e.strerror or e}") from None
        record_output(out)
    else:
        sys.stdout.write(text)


def claim_output(args, path: str | None = None, ours: Callable[[bytes], bool] | None = None,
                 what: str = "") -> None:
    """Before any work: refuse ``path`` (default ``args.output``) where it is a file mhlo-cost did not write and
    ``--force`` is not given; ``ours(first bytes)``: a file this command may replace as its own."""
    path = getattr(args, "output", None) if path is None else path
    if not path or path == "-" or not os.path.lexists(path):
        return
    if os.path.isdir(path):
        raise UserError(f"{path}: is a folder; -o names a file")
    if getattr(args, "force", False):
        return
    if wrote_before(path) or (ours is not None and ours(head(path))):
        say(args, f"replacing {path} ({what or 'written by mhlo-cost before'})", note=True)
        return
    raise UserError(f"{path} exists and mhlo-cost did not write it: add --force to replace it")


def add_force(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true", help="replace -o's file even if mhlo-cost did not write it")


def add_progress(p: argparse.ArgumentParser) -> None:
    p.add_argument("--progress", action="store_true",
                   help="stages and bars on stderr even when it is not a terminal (default: on a terminal only)")


def study_blocks(study, args, quiet: bool = False):
    """The study's blocks, their warnings and what was found said (not when ``quiet``)."""
    blocks = study.blocks
    if not quiet:
        for w in blocks.warnings:
            say(args, f"warning: {w}")
        if blocks.blocks:  # where none was found, the table's rows say so (grouped by scope)
            say(args, blocks.found(), note=True)
    return blocks


def study_roofline(study, args):
    """The study's estimate (None without a profile), its unknown ops said."""
    rf = study.roofline
    if rf is not None and rf.unknown_ops:
        say(args, f"warning: {rf.unknown_ops} unknown op(s) are estimated at 0 s")
    return rf


# -- roofline options (--hardware, --hardware-file, --fuse, --steps, --top) ------------------------------------


def hardware_from_options(args, top_needs_hardware: bool = True):
    """The profile the options name (None without --hardware / --hardware-file); checked before any work."""
    name, path = getattr(args, "hardware", None), getattr(args, "hardware_file", None)
    if name is None and path is None:  # no profile: the roofline (and pandas) stay unloaded
        hw = None
    else:
        from ..roofline import hardware_from_args

        hw = hardware_from_args(name, path)
    if hw is None:  # --fuse alone gives the fused memory estimate
        given = [o for o, v in (("--steps", getattr(args, "steps", None) is not None),
                                ("--top", top_needs_hardware and getattr(args, "top", None) is not None)) if v]
        if given:
            raise UserError(f"{', '.join(given)} need(s) a hardware profile: add --hardware NAME "
                            "(mhlo-cost hardware lists them) or --hardware-file FILE")
    for opt in ("steps", "top"):
        v = getattr(args, opt, None)
        if v is not None and v < 1:
            raise UserError(f"--{opt} must be a positive integer, got {v}")
    from ..machines.execution import execution_of

    ex = getattr(args, "execution", None)
    if ex is not None and getattr(args, "fuse", "none") not in (None, "none") and ex != "compiled":
        raise UserError(f"--fuse elementwise is --execution compiled; it does not go with --execution {ex}")
    model = execution_of(getattr(args, "fuse", None), ex)
    if getattr(args, "attention", None) and model != "compiled":
        raise UserError("--attention goes with --fuse elementwise")  # (= --execution compiled)
    if getattr(args, "sdpa", None) and model != "eager":
        raise UserError("--sdpa goes with --execution eager")
    return hw


def add_common(p: argparse.ArgumentParser, blocks: bool = True, many: bool = False) -> None:
    what = "MLIR file: .mlir text, .mlirbc bytecode or StableHLO artifact, optionally .gz; - reads standard input"
    p.add_argument("file", nargs="+" if many else None, help=what + ("; several give one table" if many else ""))
    p.add_argument("--entry", metavar="NAME", help="function to start from (default: main, or the only public one)")
    p.add_argument("--strict", action="store_true", help="fail when an op no rule knows is found")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="nothing on stderr but errors (no progress, no blocks found, no warnings)")
    add_progress(p)
    p.add_argument("--conv-padding", choices=("xla", "dense"), default="xla",
                   help="convolution FLOPs: xla (default) skips padded positions as XLA does; dense counts them "
                        "as PyTorch's counters and papers do")
    if blocks:
        p.add_argument("--blocks", choices=("auto", "scope", "rms", "repeat", "stages"), default="auto",
                       help="how ops are grouped into blocks (default: auto: scope, then repeat, then rms; "
                            "stages: the outermost scope groups, stages rather than their blocks)")
        p.add_argument("--block-pattern", metavar="REGEX", type=regex, help="regex naming a block in scope paths")
        p.add_argument("--norms-per-block", type=positive_int, metavar="N", help="normalisations per block (rms)")


def add_output(p: argparse.ArgumentParser, formats=("table", "csv", "json", "markdown"), default="table") -> None:
    p.add_argument("--format", choices=formats, default=default)
    p.add_argument("--unit", choices=tuple(["raw", "K", "M", "G", "T"]), default="raw",
                   help="display unit for FLOPs and bytes (decimal); raw prints exact integers")
    p.add_argument("-o", "--output", metavar="OUT", help="write to a file instead of stdout")
    add_force(p)
    p.add_argument("--wide", action="store_true", help="table: every column (default: cut to 120 characters)")


def add_filters(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("filters (every view)")
    g.add_argument("--block", metavar="NAME", help="only this block's ops (--by block: its row)")
    g.add_argument("--scope", metavar="REGEX", type=regex, help="only ops whose scope path matches (re.search)")


def add_estimate(p: argparse.ArgumentParser, steps: bool = False, top: bool = False) -> None:
    g = p.add_argument_group("roofline estimate")
    g.add_argument("--hardware", metavar="NAME", help="estimate time on this profile (mhlo-cost hardware lists them)")
    g.add_argument("--hardware-file", metavar="FILE", help="TOML file of your own profiles (searched first)")
    g.add_argument("--execution", choices=("eager", "compiled", "unfused"),
                   help="how the program is run, for time and memory: eager = PyTorch eager (one kernel per "
                        "framework op, views free, attention the SDPA kernel); compiled = a fusing compiler "
                        "(jax.jit, XLA, torch.compile: elementwise chains fused, attention one kernel); unfused "
                        "(the default: every IR op its own kernel, an upper bound that needs no data flow)")
    g.add_argument("--fuse", choices=("none", "elementwise"), default="none",
                   help="the older spelling: elementwise = --execution compiled, none = --execution unfused")
    g.add_argument("--sdpa", choices=("flash", "cudnn", "mem_efficient", "math"),
                   help="with --execution eager: the attention kernel (default flash, FlashAttention-2, where the "
                        "dtype and head dim allow, else mem_efficient; cudnn: cuDNN's, which PyTorch picks on "
                        "H100/H200; math: its ops one by one)")
    # attention as one kernel
    g.add_argument("--attention", choices=("fused", "unfused"),
                   help="with --execution compiled: fused (default) prices each attention (dot, softmax, dot) as one "
                        "flash-attention kernel; unfused as its separate kernels")
    if steps:
        g.add_argument("--steps", type=int, metavar="K", help="summary: a run of K forwards (sampling steps)")
    if top:
        g.add_argument("--top", type=int, metavar="N",
                       help="--by op: the N slowest ops, slowest first (without --hardware: the N with most FLOPs)")


#: The arguments main() was given (for the hints below).
ARGV: list[str] = []


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2, like every other bad input
        raise UserError(message + dash_hint(message, ARGV, self._option_string_actions, self.prog))


def dash_hint(message: str, argv: list[str], options, prog: str = "mhlo-cost COMMAND") -> str:
    """Where argparse took a file name or a value beginning with ``-`` for an option: how to write it."""
    m = re.match(r"argument ([\w/-]+): expected one argument", message)
    if m:
        names = m.group(1).split("/")
        for opt in names:
            nxt = argv[argv.index(opt) + 1] if opt in argv[:-1] else ""
            if nxt.startswith("-"):  # ``-o=x`` would give "=x": the long name takes the '='
                return f" (a value beginning with '-' is written with '=': {max(names, key=len)}={nxt})"
        return ""
    if "arguments are required" not in message and "unrecognized arguments" not in message:
        return ""
    for arg in argv[:argv.index("--")] if "--" in argv else argv:
        if (arg.startswith("-") and len(arg) > 1 and arg.split("=")[0] not in options
                and ("." in arg or "/" in arg or os.path.exists(arg))):
            return (f" ({arg} was read as an option: a file name beginning with '-' goes after '--', as in "
                    f"`{prog} [OPTIONS] -- {arg}`, or is written ./{arg})")
    return ""


