"""What every command shares: the one-line error, loading, -o, option helpers. Nothing here is global: a run's
stderr is its :class:`~mhlo_cost.files.console.Console`, handed to each command with its options."""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from ..files.console import Console, Progress  # noqa: F401 (the commands' names)

EXIT_OK, EXIT_MOVED, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 70


class UserError(Exception):
    """A problem with the input or the options, reported as one line."""


def _size(path: str) -> str:
    try:
        n = Path(path).stat().st_size
    except OSError:
        return ""
    return f", {n / 1e6:.1f} MB" if n >= 1e5 else ""


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


def study_options(args, path: str, progress: Progress, hw=None, training: bool | str = False):
    """The :class:`~mhlo_cost.studies.study.StudyOptions` the options ask of the file ``path`` (``-``: standard
    input), read now (``hw``: the profile :func:`hardware_from_options` resolved; ``training``: a training
    step's phases where the IR holds a backward, ``"always"``: whatever it holds)."""
    from ..ir.guard import prestart
    from ..studies.study import StudyOptions

    prestart(walk=True)  # the reader's child starts (and imports the walk) while this process reads the file
    progress.stage(f"parsing {'standard input' if path == '-' else path}{_size(path)}")
    return StudyOptions(
        read_input(path), name="<stdin>" if path == "-" else path, entry=getattr(args, "entry", None),
        conv_padding=getattr(args, "conv_padding", "xla"), training=training, hardware=hw,
        execution=getattr(args, "execution", None), fuse=getattr(args, "fuse", "none") or "none",
        attention=getattr(args, "attention", None), sdpa=getattr(args, "sdpa", None),
        steps=getattr(args, "steps", None), blocks=getattr(args, "blocks", "auto"),
        block_pattern=getattr(args, "block_pattern", None), norms_per_block=getattr(args, "norms_per_block", None),
        isolate=None, shapes=tuple(getattr(args, "shapes", None) or ()))


def open_study(path: str, args, console: Console, progress: Progress, hw=None, training: bool | str = False):
    """The study of ``path`` under the options, its analysis made now and its warnings said (``--strict``:
    refused): the first half of the one composition (:func:`mhlo_cost.studies.compose.open_study`)."""
    from ..studies import compose

    options = study_options(args, path, progress, hw, training)
    return compose.open_study(options, strict=getattr(args, "strict", False), stage=progress.stage,
                              say=console.say)[0]


def positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value!r}")
    return n


def shape_point(value: str) -> tuple:
    """``b=8,s=4096`` -> (("b", 8), ("s", 4096)): a symbolic program's point (--shapes); names are identifiers,
    values positive integers, each name once."""
    out = {}
    for item in value.split(","):
        name, eq, number = item.strip().partition("=")
        name = name.strip()
        if not eq or not name.isidentifier() or not number.strip().isdigit() or int(number) < 1:
            raise argparse.ArgumentTypeError(f"--shapes takes NAME=N pairs (N a positive integer), separated by "
                                             f"commas: got {item.strip()!r}")
        if name in out:
            raise argparse.ArgumentTypeError(f"--shapes names {name} twice")
        out[name] = int(number)
    return tuple(out.items())


def regex(value: str) -> str:
    import re

    try:
        re.compile(value)
    except re.error as e:
        raise argparse.ArgumentTypeError(f"not a regular expression: {value!r} ({e})") from None
    return value



def write_output(text: str | bytes, out: str | None) -> None:
    """``text`` to the file ``out`` (through the one writer: :func:`mhlo_cost.files.write.write`), or to stdout
    (None or ``-``)."""
    if out and out != "-":
        from ..files.write import write

        write(out, text)
    else:
        sys.stdout.write(text)


def claim_output(args, console: Console, path: str | None = None) -> None:
    """Before any work: the one output rule (:func:`mhlo_cost.files.write.claim`) for ``path`` (default
    ``args.output``; None or ``-``: stdout, nothing to claim) under ``--force``; mhlo-cost's own file replaced
    with a note."""
    path = getattr(args, "output", None) if path is None else path
    if path is None or path == "-":
        return
    if not path:  # (an empty name is not standard output: refused, never taken as none given)
        raise UserError("-o '': the output's name is empty; give a file, or - for standard output")
    from ..files.write import claim

    note = claim(path, force=bool(getattr(args, "force", False)))
    if note:
        console.say(note, note=True)


def add_force(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="replace an output file (-o, --plot) even if mhlo-cost did not write it")


def add_quiet(p: argparse.ArgumentParser) -> None:
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress and no notes on stderr (warnings and errors still show)")


def add_progress(p: argparse.ArgumentParser) -> None:
    p.add_argument("--progress", action="store_true",
                   help="stages and bars on stderr even when it is not a terminal (default: on a terminal only)")


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


def chip_names(value: str, opt: str) -> list[str]:
    """``a,b,c`` (the value of ``opt``) as a list of chip names: none empty, none twice."""
    names = [n.strip() for n in value.split(",")]
    if not all(names):
        raise UserError(f"{opt} takes names separated by commas, got {value!r}")
    if len(set(names)) != len(names):
        raise UserError(f"{opt} names a chip twice: {value!r}")
    return names


def compare_chips(args) -> list | None:
    """The profiles ``--hardware a,b,c`` names (one table across chips), None for one name or none."""
    name = getattr(args, "hardware", None)
    if name is None or "," not in name:
        return None
    names = chip_names(name, "--hardware")
    for opt in ("block", "scope", "steps", "top"):
        if getattr(args, opt, None) is not None:
            raise UserError(f"--hardware a,b,c compares every block across chips: it does not go with --{opt}")
    if getattr(args, "parts", False):
        raise UserError("--hardware a,b,c compares every block across chips: it does not go with --parts")
    from ..roofline import hardware_from_args

    single = argparse.Namespace(**{**vars(args), "hardware": names[0]})
    chips = [hardware_from_options(single)]
    return chips + [hardware_from_args(n, getattr(args, "hardware_file", None)) for n in names[1:]]


def compare_output(args, console, progress, chips) -> str:
    """The text of ``report`` / ``blocks --hardware a,b,c``: one program's blocks across ``chips`` (walked once)."""
    from ..studies.whatif import compare_table
    from ..views.render import render

    if len(args.file) > 1:
        raise UserError("--hardware a,b,c takes one file")
    study = open_study(args.file[0], args, console, progress, chips[0], training=True)
    table = compare_table(study, chips)
    if args.format == "html":
        from ..views.html.compare import compare_page

        return compare_page(table, None if args.unit == "raw" else args.unit)
    return render(table, args.format, args.unit, wide=args.wide)


def add_common(p: argparse.ArgumentParser, blocks: bool = True, many: bool = False) -> None:
    what = "MLIR file: .mlir text, .mlirbc bytecode or StableHLO artifact, optionally .gz; - reads standard input"
    p.add_argument("file", nargs="+" if many else None, help=what + ("; several give one table" if many else ""))
    p.add_argument("--entry", metavar="NAME", help="function to start from (default: main, or the only public one)")
    p.add_argument("--strict", action="store_true", help="fail when an op no rule knows is found")
    add_quiet(p)
    add_progress(p)
    p.add_argument("--shapes", type=shape_point, metavar="NAME=N,...",
                   help="a symbolic program (jax.export with symbolic dimensions): the value of each of its shape "
                        "symbols, named as the module names them (b=8,s=4096); the program is refined at that point "
                        "by StableHLO's shape refinement and counted as the static program it becomes")
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


def add_estimate(p: argparse.ArgumentParser, steps: bool = False, top: bool = False, many: bool = False) -> None:
    g = p.add_argument_group("roofline estimate")
    g.add_argument("--hardware", metavar="NAME", help="estimate time on this profile (mhlo-cost hardware lists them)"
                   + ("; A,B,C: each block's time, bound and ratio to the first chip, per chip (walked once)"
                      if many else ""))
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


class Parser(argparse.ArgumentParser):
    """One line and exit 2 for a bad command line, like every other bad input; ``argv``: the arguments parsed
    (for the hints of :func:`dash_hint`), handed on to the commands' parsers."""

    def __init__(self, *a, argv: list[str] | None = None, **kw):
        super().__init__(*a, **kw)
        self.argv = list(argv or [])

    def error(self, message):
        raise UserError(message + dash_hint(message, self.argv, self._option_string_actions, self.prog))


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


