"""The backward pass of a flat frame (leaves only, then its return) in arrays, for the common case.

:meth:`mhlo_cost.memory.sweep.Sweep._backward` walks items from last to first with one dict look-up per
operand. In a frame without region items, in-place updates or fused kernels it gives the same as this:

* a value's last use is its last reader (the return reads last of all); a re-labelling's readers count as
  readers of its root (the walk moves them there where the re-labelling is made: in SSA form every reader
  of a value comes after the row making it, so moving first and booking afterwards changes nothing);
* a value is booked as made at its row and freed after its last use (at once where nobody reads it).

The keys are sorted once (numpy) instead of looked up one by one; only rows of class ALIAS and above are
looked at in Python. Bytes are summed in int64 only where the frame's total is far below 2**63 (exact);
the lists handed back hold Python ints.
"""
from __future__ import annotations

from itertools import chain
from operator import attrgetter, itemgetter

import numpy as np

from ..walk.frames import Return
from .opclass import ALIAS, DUS, MULTI, NOVAL

_VALUES, _USES, _DEFS, _NBYTES = attrgetter("values"), itemgetter(0), itemgetter(1), attrgetter("result.nbytes")
_NONE = ((), (0,))  # a row looked at apart: reads nothing here, makes a placeholder of 0 bytes
_SAFE = 2**62


class _Zero:
    __slots__ = ()
    nbytes = 0


class _Apart:
    __slots__ = ()
    result = _Zero()


_APART = _Apart()


class LastUse:
    """Each key's last use (a position), looked up in the sorted keys: the part of a dict the sweep uses."""

    __slots__ = ("keys", "pos")

    def __init__(self, keys: np.ndarray, pos: np.ndarray):
        self.keys, self.pos = keys, pos

    def get(self, k: int, default=None):
        i = int(np.searchsorted(self.keys, k))
        if i < len(self.keys) and self.keys[i] == k:
            return int(self.pos[i])
        return default

    def __contains__(self, k: int) -> bool:
        return self.get(k) is not None


def applies(ps) -> bool:
    """Whether :func:`backward` gives the walk's result for this pass: unfused, flat, no in-place update."""
    p = ps.p
    n, m = len(p.fr.rows), len(p.seq)
    if ps.only is not None or not p.flat or m > n + 1:
        return False
    return (m == n or type(p.seq[-1]) is Return) and DUS not in p.cls


def backward(sw, ps) -> bool:
    """Fill ``ps.new``, ``ps.freed``, ``ps.last`` (and ``ps.sizes`` for rows with several results); False
    (nothing changed) where the bytes are too large for exact int64 sums."""
    p = ps.p
    rows, cls = p.fr.rows, p.cls
    n = len(rows)
    vals = sw.values(rows).copy()  # changed below
    row_cls = np.fromiter(cls, np.int64, len(cls))[:n]
    odd = np.flatnonzero(row_cls >= ALIAS).tolist()
    moved, multi, single = [], [], rows
    if odd:
        single = rows.copy()
        for i in odd:
            c = cls[i]
            if c == ALIAS:
                moved.extend(vals[i][1])
            elif c != NOVAL:
                multi.append(i)
            single[i] = _APART
            vals[i] = _NONE if c != MULTI else (vals[i][0], (0,))
    try:
        nbytes = np.fromiter(map(_NBYTES, single), np.int64, n)
    except OverflowError:
        return False
    several = sum(t.nbytes for i in multi for t in _results(rows[i]))
    if _bound(nbytes) + several + sum(ps.owned.values()) >= _SAFE:
        return False
    defs = np.fromiter(map(itemgetter(0), map(_DEFS, vals)), np.int64, n)
    alias = sw.alias
    extra = alias.keys() - set(moved)  # re-labellings made elsewhere (region results, in-place updates)
    if extra:
        made = _member(defs, np.fromiter(extra, np.int64, len(extra)))
        made[odd] = False  # placeholders
        gone = np.flatnonzero(made)
        if len(gone):  # values made under another name
            moved.extend(defs[gone].tolist())
            nbytes[gone] = 0
    for i in multi:
        moved.extend(k for k in rows[i].values[1] if k in alias)
    last = _last_uses(sw, p, (row_cls >= ALIAS) & (row_cls != MULTI), moved)  # as vals: _NONE reads nothing
    at = np.arange(n)
    free = _lookup(last, defs, at)
    if sw._local:
        nbytes = np.fromiter(map(sw.size, defs.tolist(), nbytes.tolist()), np.int64, n)
    freed = np.zeros(len(p.seq) + 1, np.int64)
    np.add.at(freed, free, nbytes)
    new = np.zeros(len(p.seq), np.int64)
    new[:n] = nbytes
    ps.new, ps.freed, ps.last = new, freed, last
    for i in multi:
        _multi(sw, ps, rows[i], i)
    return True


def _bound(a: np.ndarray) -> int:
    """An upper bound on the sum of the non-negative int64 array ``a``, in Python ints: an int64 sum itself
    wraps past 2**63 without a word."""
    return int(a.max(initial=0)) * len(a)


def forward(sw, ps, write: bool, base: int):
    """:meth:`~mhlo_cost.memory.sweep.Sweep._forward` of a pass :func:`backward` made: running sums in int64
    where they stay far below 2**63 (the peak is returned as a Python int); None where they might not (the
    pass is then handed back as lists)."""
    new, freed = ps.new, ps.freed
    if base < 0 or base + _bound(new) >= _SAFE:
        ps.new, ps.freed = new.tolist(), freed.tolist()
        return None
    m, n = len(new), len(ps.p.fr.rows)
    acc = np.empty(m + 1, np.int64)
    acc[0] = base - freed[m]
    np.cumsum(new - freed[:m], out=acc[1:])
    acc[1:] += acc[0]
    during = acc[:m] + new
    if write and ps.off is not None:
        off = ps.off
        sw.during[off:off + n] = during[:n].tolist()
        sw.after[off:off + n] = acc[1:n + 1].tolist()
    return max(int(during.max()) if m else int(acc[0]), int(acc[0]))


def reads(vals: list) -> tuple[np.ndarray, np.ndarray]:
    """The keys rows read (``vals``: the value keys of each), row after row, in one int64 array, and how many
    each row reads."""
    uses = list(map(_USES, vals)) if all(vals) else [v[0] if v else () for v in vals]
    lens = np.fromiter(map(len, uses), np.intp, len(uses))
    return np.fromiter(chain.from_iterable(uses), np.int64, int(lens.sum())), lens


def _last_uses(sw, p, apart: np.ndarray, moved: list) -> LastUse:
    """Sorted keys read in the frame (re-labellings read as their roots) and the last position reading each;
    the rows ``apart`` read nothing here."""
    n = len(apart)
    keys, lens = sw.reads(p.fr.rows)
    keep = np.repeat(~apart, lens)
    keys, pos = keys[keep], np.repeat(np.arange(n), lens)[keep]  # keys: a copy, changed below
    if len(p.seq) > n:  # the return reads last of all
        ret = p.reads[n]
        keys = np.concatenate([keys, np.fromiter(ret, np.int64, len(ret))])
        pos = np.concatenate([pos, np.full(len(ret), n)])
    if moved:
        src = np.array(moved, np.int64)
        dst = np.fromiter(map(sw.root, moved), np.int64, len(moved))
        order = np.argsort(src)
        src, dst = src[order], dst[order]
        i = np.minimum(np.searchsorted(src, keys), len(src) - 1)
        hit = src[i] == keys
        keys[hit] = dst[i[hit]]
    if not len(keys):  # nothing is read in the frame (an entry that only returns)
        return LastUse(keys, pos)
    order = np.argsort(keys, kind="stable")  # positions stay increasing within a key
    keys, pos = keys[order], pos[order]
    end = np.flatnonzero(np.append(keys[1:] != keys[:-1], True))
    return LastUse(keys[end], pos[end])


def _member(keys: np.ndarray, among: np.ndarray) -> np.ndarray:
    among = np.sort(among)
    i = np.minimum(np.searchsorted(among, keys), len(among) - 1)
    return among[i] == keys


def _lookup(last: LastUse, keys: np.ndarray, default: np.ndarray) -> np.ndarray:
    if not len(last.keys):
        return default
    i = np.minimum(np.searchsorted(last.keys, keys), len(last.keys) - 1)
    return np.where(last.keys[i] == keys, last.pos[i], default)


def _multi(sw, ps, r, i: int) -> None:
    """A row with several results (or none): each booked as the walk books it."""
    new, freed, alias = ps.new, ps.freed, sw.alias
    for k, t in zip(r.values[1], _results(r)):
        if k not in alias:
            b = ps.sizes[k] = sw.size(k, t.nbytes)
            new[i] += b
            freed[ps.last.get(k, i)] += b


def _results(r) -> tuple:
    return (r.result,) if not isinstance(r.result, tuple) else r.result
