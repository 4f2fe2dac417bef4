"""The cache options, one meaning in every command that keeps a cache (``sweep``, ``serve``, ``train-plan``):
``--cache-dir DIR`` (the cache root, default ``$XDG_CACHE_HOME/mhlo-cost``, else ``~/.cache/mhlo-cost``; each
command keeps its entries in a folder of its own under it) and ``--no-cache`` (compute everything, keep
nothing). ``--cache DIR`` is the old spelling of ``--cache-dir`` (``train-plan``'s): it still works, with a
warning. The cache itself is :mod:`mhlo_cost.files.cache`."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

from .common import UserError


class _OldSpelling(argparse.Action):
    """``--cache DIR``: stored as ``--cache-dir``, remembered so that :func:`cache_root` warns."""

    def __call__(self, parser, namespace, values, option_string=None):
        namespace.cache_dir = values
        namespace.cache_old_spelling = option_string


def add_cache(group, what: str) -> None:
    """``--cache-dir DIR``, ``--no-cache`` (and the old ``--cache DIR``) on ``group``; ``what``: what the
    command keeps, for the help."""
    group.add_argument("--cache-dir", metavar="DIR", help=f"the cache folder: {what} kept there, so that a "
                       "run that asks again reads them (default: $XDG_CACHE_HOME/mhlo-cost, else ~/.cache/mhlo-cost)")
    group.add_argument("--no-cache", action="store_true", help="compute everything again, keep nothing")
    group.add_argument("--cache", dest="cache_dir", action=_OldSpelling, metavar="DIR", help=argparse.SUPPRESS)


def cache_root(args, console) -> Path | None:
    """The cache folder the options name, made where missing (None: ``--no-cache``); one line and exit 2 where
    it exists and is not a folder, or cannot be made (``console``: the run's stderr, for the old spelling's
    warning)."""
    from ..files.cache import CacheError, default_root, open_root

    old = getattr(args, "cache_old_spelling", None)
    if old:
        console.say(f"warning: {old} is the old spelling of --cache-dir (same meaning); it goes in 0.3.0")
    if args.no_cache:
        if args.cache_dir:
            raise UserError("--no-cache keeps nothing: give it or --cache-dir, not both")
        return None
    try:
        return open_root(args.cache_dir or default_root())
    except CacheError as e:
        raise UserError(f"{e}: give another with --cache-dir DIR, or --no-cache") from None


def cache_note(console) -> Callable[[str], None]:
    """How the cache tells of an entry it does not trust or cannot keep: a note (``mhlo-cost: ...`` on
    stderr, not under ``-q``)."""
    return lambda text: console.say(text, note=True)
