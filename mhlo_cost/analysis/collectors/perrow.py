"""Helpers that run on every row of a program, written so that Python looks only at what differs from its
neighbours: the gaps :func:`fill_nearest` fills, the runs of rows of one scope :class:`ScopeWork` sums."""
from __future__ import annotations

from itertools import accumulate, compress, islice, repeat
from operator import add, attrgetter, ne, not_

_COST = attrgetter("cost")


def row_compute(rows) -> list[int]:
    """GEMM + convolution + vector FLOPs of each row."""
    try:  # a Row's cost: those are its first three metrics (METRICS), read without three properties
        return [c[0] + c[1] + c[2] for c in map(_COST, rows)]
    except AttributeError:  # rows made otherwise (tests' namespaces) carry the metrics themselves
        return [r.gemm_flops + r.conv_flops + r.vector_flops for r in rows]


class ScopeWork:
    """GEMM + convolution + vector FLOPs of the rows of each scope (``scopes``: each row's), summed on first
    use, run by run of consecutive rows of one scope: a collector that decides without them sums nothing."""

    def __init__(self, rows, scopes: list[str]):
        self._rows, self._scopes = rows, scopes
        self._work: dict[str, int] | None = None

    def of(self, paths) -> int:
        """FLOPs of the rows of the scopes ``paths``."""
        work = self.by_scope
        return sum(work[p] for p in paths)

    @property
    def total(self) -> int:
        return sum(self.by_scope.values())

    @property
    def by_scope(self) -> dict[str, int]:
        if self._work is None:
            rows, scopes, n = self._rows, self._scopes, len(self._rows)
            acc = list(accumulate(row_compute(rows), initial=0))
            starts = [0, *compress(range(1, n), map(ne, islice(scopes, 1, None), scopes))] if n else []
            work = self._work = dict.fromkeys(scopes, 0)
            for s, e in zip(starts, starts[1:] + [n]):
                work[scopes[s]] += acc[e] - acc[s]
        return self._work


def fill_nearest(values: list, empty, same_only: bool = False) -> list:
    """Fill falsy entries from their neighbours: both neighbours agreeing, else the nearer (ties: next).

    With ``same_only`` an entry is filled only where its previous and next non-empty neighbours agree.
    (Gap by gap: it runs on every row of the program, and only the gaps are looked at in Python.)
    """
    n = len(values)
    holes = list(compress(range(n), map(not_, values)))
    if len(holes) == n:
        return [empty] * n
    out = list(values)
    if not holes:
        return out
    # Gaps are runs of consecutive holes: each starts where a hole does not follow the previous one.
    after = map(add, holes, repeat(1))
    firsts = [0, *compress(range(1, len(holes)), map(ne, islice(holes, 1, None), after))]
    for k, j in zip(firsts, firsts[1:] + [len(holes)]):
        a, b = holes[k] - 1, holes[j - 1] + 1  # the gap is out[a + 1:b]; a -1, b n: no neighbour there
        if b - a == 2 and a >= 0 and b < n:  # one hole between two entries, the common case
            pa, nb = values[a], values[b]
            out[a + 1] = pa if pa == nb else empty if same_only else nb
        else:
            _fill_gap(out, values, a, b, empty, same_only)
    return out


def _fill_gap(out: list, values: list, a: int, b: int, empty, same_only: bool) -> None:
    """Fill ``out[a + 1:b]`` from ``values[a]`` and ``values[b]`` (a -1 or b past the end: no such neighbour)."""
    if a < 0 or b >= len(values):
        near = values[b] if a < 0 else values[a]
        out[a + 1:b] = [empty if same_only else near] * (b - a - 1)
        return
    pa, nb = values[a], values[b]
    if pa == nb:
        out[a + 1:b] = [pa] * (b - a - 1)
    elif same_only:
        out[a + 1:b] = [empty] * (b - a - 1)
    else:  # i takes the previous value while i - a < b - i, i.e. below mid
        mid = (a + b + 1) // 2
        out[a + 1:mid] = [pa] * (mid - a - 1)
        out[mid:b] = [nb] * (b - mid)
