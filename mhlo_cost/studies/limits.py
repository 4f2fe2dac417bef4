"""How much one study may ask for: every count that sets how much work is done, in one table.

The study options check their counts against this table before any work (:class:`~.serve.study.ServeOptions`,
:class:`~.plan.study.PlanOptions`, the sweep's spec and grid), so the Python API gets the same limits as the
command line, and ``lower`` reads them too. The error names the limit. The values are far above what a real
model or system needs and far below what would run for hours or exhaust memory.

==========  ===========  =====================================================================================
limit       value        what it bounds
==========  ===========  =====================================================================================
devices     1,048,576    devices of one configuration or point: serve --tp / --tps; train-plan --sweep GPUS
                         and -t x -p x -d; a sweep's devices and strategies (2**20: above any system built)
points      4,096        points of one sweep: serve --batches x --contexts x --tps; a sweep's points x its
                         hardware profiles; the splits train-plan --sweep (or a [training] spec) plans
values      1,024        values of one list: serve --batches, --contexts, --tps; a sweep spec's lists; each
                         value once (a value given twice is one point, the first place it is given)
layers      4,096        layers (blocks) of a model lowered or planned: serve --set layers= /
                         num_hidden_layers=; train-plan --layers; lower --layers / --depth
batch       1,048,576    sequences or samples of one step: serve --batch / --batches; lower --batch;
                         train-plan --micro-batch / --global-batch
positions   16,777,216   positions of a sequence or a cache: serve --context / --contexts / --tokens;
                         lower --context / --tokens; train-plan --seq (2**24)
==========  ===========  =====================================================================================

A request count (requests of a serving trace) has no option yet; it would be bounded here.
"""
from __future__ import annotations

#: limit -> (the most a count may be, what it counts).
LIMITS: dict[str, tuple[int, str]] = {
    "devices": (1 << 20, "devices"),
    "points": (4096, "points"),
    "values": (1024, "values"),
    "layers": (4096, "layers"),
    "batch": (1 << 20, "sequences"),
    "positions": (1 << 24, "positions"),
}


class OptionError(ValueError):
    """A study option that cannot mean anything: out of its range, or not going with another; one line that
    names it (the command line reports it as its error, exit 2)."""


class LimitError(OptionError):
    """A count out of its range or above its limit; one line naming the option and the limit."""


def most(limit: str) -> int:
    """The most a count of ``limit`` may be."""
    return LIMITS[limit][0]


def whole(value, what: str) -> int:
    """``value`` where it is a positive whole number (an ``int``; ``True``, ``8.0`` and ``"8"`` are not)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise LimitError(f"{what} must be a positive whole number, got {_shown(value)}")
    if value < 1:
        raise LimitError(f"{what} must be a positive whole number, got {value}")
    return value


def check(limit: str, value, what: str) -> int:
    """``value`` (a count of ``limit``, given as ``what``: ``--tp``, ``devices``) where it is a positive whole
    number no larger than the limit; :class:`LimitError` otherwise."""
    whole(value, what)
    top, unit = LIMITS[limit]
    if value > top:
        raise LimitError(f"{what} {value:,} is above the limit of {top:,} {unit} ({_named(limit)})")
    return value


def check_list(limit: str, values, what: str) -> tuple:
    """``values`` (each a count of ``limit``) once each, in the order first given; at most the ``values``
    limit of them. :class:`LimitError` for an empty list, a bad value or too many."""
    out = tuple(dict.fromkeys(check(limit, v, what) for v in values))
    if not out:
        raise LimitError(f"{what} names no value")
    count(len(out), "values", what)
    return out


def count(n: int, limit: str, what: str) -> int:
    """``n`` things (``what``: ``--batches``, ``the sweep``) where no more than the limit; LimitError otherwise."""
    top, unit = LIMITS[limit]
    if n > top:
        raise LimitError(f"{what} has {n:,} {unit}, above the limit of {top:,} ({_named(limit)})")
    return n


def _named(limit: str) -> str:
    return f"limit '{limit}', mhlo_cost.studies.limits"


def _shown(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
