"""How a command's request moves through the wings of mhlo_cost, traced call by call.

Runs ``mhlo_cost.cli.main(ARGV)`` in this process under ``sys.setprofile`` and attributes every Python call into
a function of the package to its wing (the package's first sub-package: ``cli``, ``studies``, ``views`` ...; the
face ``mhlo_cost/__init__.py`` is not a wing). A call made from outside the package (pandas, functools'
``cached_property``, a callback) counts as made by the nearest package frame under it on the stack.

Printed per wing, in the order of the first entry: ``entries``, the first entry from above plus every distinct
call edge (caller function -> callee function) that comes back up into the wing from a wing below it in
``ORDER`` (a callback, a method of an object handed down); and the modules the request passed through.
``--moves TABLE`` maps an older layout's modules onto today's wings (``mhlo_cost.MOVED`` of 0.2.0 is that
table), so that a checkout from before the regrouping can be traced by the same rule. The house's rule
(tests/test_trace_wings.py): a ``report``, ``serve`` and ``train-plan`` request each enters no wing more than
:data:`MOST_ENTRIES` times.

    python scripts/trace_wings.py -- report examples/gpt_small.mlir --by block
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import OrderedDict
from typing import NamedTuple

ORDER = ("cli", "studies", "views", "lower", "roofline", "network", "machines", "analysis", "memory", "walk", "ir",
         "files")
#: The most times a request may enter one wing (tests/test_trace_wings.py).
MOST_ENTRIES = 3


def wing_of(module: str, moves: dict) -> str | None:
    if module != "mhlo_cost" and not module.startswith("mhlo_cost."):
        return None
    rest = module[len("mhlo_cost."):]
    head = rest
    while head and moves:
        if head in moves:
            rest = moves[head] + rest[len(head):]
            break
        head = head.rpartition(".")[0]
    first = rest.split(".")[0] if rest else ""
    return first if first in ORDER else (first or None)


class Trace(NamedTuple):
    """What one request did: ``first`` (wing -> the wing that first entered it, in order), ``back`` (wing -> the
    distinct call edges that came back up into it), ``into`` (wing -> every distinct call edge into it from
    another wing), ``modules`` (those it passed through) and the command's exit ``code``."""

    first: OrderedDict
    back: dict
    into: dict
    modules: set
    code: int

    def entries(self, wing: str) -> int:
        """How often the request entered ``wing``: the first entry and every distinct edge back up into it."""
        return 1 + len(self.back.get(wing, ()))


def trace(argv: list[str], moves: dict | None = None) -> Trace:
    """Run ``mhlo-cost ARGV`` in this process (``mhlo_cost.cli.main``) under a profiler: its :class:`Trace`."""
    moves = moves or {}
    first: OrderedDict = OrderedDict()  # wing -> the first caller's wing
    back: dict = {}  # wing -> distinct upward call edges into it
    into: dict = {}  # wing -> distinct call edges into it from another wing
    modules: set = set()
    stack: list = []  # the package frames' (wing, function) on the stack, None for others

    def prof(frame, event, arg):
        if event == "call":
            mod = frame.f_globals.get("__name__", "")
            w = wing_of(mod, moves)
            caller = next((s for s in reversed(stack) if s is not None), None)
            if w is None:
                stack.append(None)
                return
            modules.add(mod)
            fn = f"{mod}.{frame.f_code.co_name}"
            if caller and caller[0] != w:
                into.setdefault(w, set()).add((caller[1], fn))
            if w not in first:
                first[w] = caller[0] if caller else None
            elif caller and caller[0] != w and caller[0] in ORDER and w in ORDER \
                    and ORDER.index(caller[0]) > ORDER.index(w):
                back.setdefault(w, set()).add((caller[1], fn))
            stack.append((w, fn))
        elif event == "return":
            if stack:
                stack.pop()

    from mhlo_cost.cli import main

    sys.setprofile(prof)
    try:
        code = main(argv)
    finally:
        sys.setprofile(None)
    return Trace(first, back, into, modules, code)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--moves", help="a Python file defining MOVED (old module -> new module), for an older layout")
    ap.add_argument("--edges", action="store_true", help="list the edges that come back up")
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    moves = {}
    if a.moves:
        ns: dict = {}
        exec(open(a.moves).read(), ns)
        moves = ns["MOVED"]
    os.environ.setdefault("MHLO_COST_ISOLATE", "0")  # the walk in this process, so that it is traced too
    t = trace(argv, moves)
    print(f"(exit {t.code})", file=sys.stderr)
    print(f"mhlo-cost {' '.join(argv)}")
    print(f"{'wing':10s} {'entries':>7s} {'edges in':>8s}  first entered from")
    for w, src in t.first.items():
        print(f"{w:10s} {t.entries(w):7d} {len(t.into.get(w, ())):8d}  {src or '(the command line)'}")
        if a.edges:
            for caller, callee in sorted(t.back.get(w, ())):
                print(f"{'':12s}back up: {caller} -> {callee}")
    print(f"{len(t.first)} wings, {len(t.modules)} modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
