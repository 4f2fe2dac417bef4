"""The ``mhlo-cost`` command line.

Every failure a user can cause ends as one line on stderr, ``mhlo-cost: error: ...``, and exit code 2
(1 for ``check`` when a metric moved). No traceback reaches the terminal unless MHLO_COST_DEBUG=1.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from types import MappingProxyType

from .. import __version__
from .common import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OK, Parser, UserError

#: The command modules (imported by :func:`build_parser`, after the reader's child is started), in the order
#: ``--help`` lists them; each has ``register(subparsers)``.
COMMANDS = ("cmd_lower", "cmd_report", "cmd_blocks", "cmd_plot", "cmd_sweep", "cmd_serve", "cmd_train_plan",
            "cmd_calibrate", "cmd_baseline", "cmd_hardware", "cmd_rules", "cmd_whatif")
#: The module of each command name (each module's ``register`` adds these; ``tests/test_cli_startup.py`` holds
#: them to it): a command line naming its command imports that module alone.
#: Read-only (a mapping proxy): no module-level state a run could leave for the next.
MODULE_OF = MappingProxyType({
    "lower": "cmd_lower", "report": "cmd_report", "blocks": "cmd_blocks", "plot": "cmd_plot", "sweep": "cmd_sweep",
    "serve": "cmd_serve", "train-plan": "cmd_train_plan", "calibrate": "cmd_calibrate", "baseline": "cmd_baseline",
    "check": "cmd_baseline", "diff": "cmd_baseline", "hardware": "cmd_hardware", "rules": "cmd_rules",
    "whatif": "cmd_whatif"})
#: The commands whose input the reader's child parses and walks (:func:`mhlo_cost.cli.common.open_study`).
WALKING = frozenset({"report", "blocks", "plot", "baseline", "check", "diff", "whatif"})


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser; ``argv``: the arguments it will parse (for its hints). Where ``argv`` begins
    with a command's name, only that command's module is imported and registered (what it parses is the same:
    a command's own options are its module's alone); otherwise (``--help``, ``--version``, a name no command
    has) every command is, in :data:`COMMANDS` order."""
    from functools import partial

    parser = Parser(prog="mhlo-cost", description="What a model costs, transformer block by transformer block, "
                                                  "from its MLIR (MHLO or StableHLO).", argv=argv)
    parser.add_argument("--version", action="version", version=f"mhlo-cost {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=partial(Parser, argv=argv))
    sub.required = True
    named = MODULE_OF.get(argv[0]) if argv else None
    for name in (named,) if named is not None else COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def _start_reader(argv: list[str]) -> None:
    """For a command that walks its input in the reader's child, start the child now: its interpreter and
    jaxlib start while this process imports the commands and reads the input."""
    if argv and argv[0] in WALKING and "-h" not in argv and "--help" not in argv:
        from ..ir.guard import prestart

        prestart(walk=True)


#: The errors a user's input causes, by module: looked up only where that module is loaded (it cannot have
#: raised otherwise), so that --version and --help import neither jax nor pandas.
_INPUT_ERRORS = (("mhlo_cost.studies.baseline", "BaselineError"), ("mhlo_cost.machines.hardware", "HardwareError"),
                 ("mhlo_cost.studies.limits", "OptionError"),
                 ("mhlo_cost.ir.loader", "LoadError"), ("mhlo_cost.walk.row", "AnalysisError"),
                 ("mhlo_cost.views.table", "ViewError"), ("mhlo_cost.files.cache", "CacheError"),
                 ("mhlo_cost.files.write", "OutputError"), ("mhlo_cost.roofline.sdpa", "BackendError"))


def _input_errors() -> tuple:
    found = [UserError]
    for module, name in _INPUT_ERRORS:
        if module in sys.modules:
            found.append(getattr(sys.modules[module], name))
    return tuple(found)


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (None: this process's own, which ends when this returns); the exit code."""
    code = _run(argv)
    if argv is None:
        import gc

        # The process ends now: what it made (a large program's rows) is not traversed again by the cyclic
        # collector at the interpreter's exit, a quarter of a second on a 40k-op program.
        gc.freeze()
    return code


def _run(argv: list[str] | None) -> int:
    from ..files.console import Console

    given = sys.argv[1:] if argv is None else [str(a) for a in argv]
    _start_reader(given)
    console = Console()  # this run's stderr, made again from the options once they are parsed
    try:
        try:
            args = build_parser(given).parse_args(given)
            console = Console.of(bool(getattr(args, "quiet", False)), bool(getattr(args, "progress", False)))
            return args.func(args, console)
        finally:  # before any error line below: no progress line (nor a timer's) ever follows one
            console.stop()
    except SystemExit as e:  # --help, --version
        return int(e.code or 0)
    except UserError as e:
        print(f"mhlo-cost: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OverflowError as e:  # a count past 2**1024 meeting a float rate (a time estimate)
        print(f"mhlo-cost: error: a count is too large for a time estimate ({e}); exact counts are "
              "reported without --hardware / --system", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RecursionError:  # outside the walk (which says so itself): a location or a table nested deeply
        print("mhlo-cost: error: the input is nested too deeply to read", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("mhlo-cost: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as e:  # bad input from a module below, or a bug: still one line, with a way to see more
        if isinstance(e, _input_errors()):
            print(f"mhlo-cost: error: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if os.environ.get("MHLO_COST_DEBUG"):
            raise
        print(f"mhlo-cost: internal error: {type(e).__name__}: {e} (MHLO_COST_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
