"""The liveness sweep: live bytes while and after every row, from a :class:`~mhlo_cost.walk.frames.Recording`.

Per frame instance, a backward pass over its items finds every value's last use (through aliases) and, at
each value's definition, books its bytes as made there and freed after its last use; a running sum then gives
the live bytes before and after every item. A leaf row's results are live while it runs, together with its
operands. A region op adds its child frames' own live bytes on top of what is live when it runs: a callee's
peak sits on its call site once per call, a loop body once (not once per trip) on top of the loop's carried
values; a ``case`` counts the larger of its branches. A frame instance without rows of its own in the table (a
branch not taken, a call folded into an earlier call's rows, and everything under them) is swept once per
frame and what it is handed, and its peak reused: the sweep costs O(functions), not O(call paths). Operands that die at a call are handed to the callee,
which frees them after their last use there.

Values are keyed by their MLIR hash and sized by their type (per device: a value entering a ``shard_map``
body counts at its per-device size). Aliases add no bytes of their own: reshape, bitcasts and sharding
annotations always; a ``dynamic_update_slice`` of a value that dies there, and a loop's carried value whose
initial value dies at the loop, update that buffer in place; a loop or call result that is its operand
passed through unchanged is that operand.

The fused estimate (``kernel`` given) changes three things: a value made and used only inside one fused
kernel never materialises; a value read by a kernel lives until the kernel's last member; broadcasts, iotas
and widening converts, which a fusing compiler recomputes in every consumer, are aliases of their operand.
The eager estimate (``eager``: kernels are framework calls) keeps the first two; there broadcasts, transposes
and slices are views (aliases of their operand's storage), a widening convert is stored, a ``scatter`` (a
strided write, ``out[..., 0::2] = v``) updates in place as a ``dynamic_update_slice`` does, unless its buffer is
a view (``torch.empty_like``: a broadcast scalar), and an entry value Python still references is freed no
earlier than that reference dies (``hold``, :mod:`.eager_hold`).

Counts are exact Python integers.
"""
from __future__ import annotations

import sys
from itertools import accumulate
from operator import add, sub

from ..walk.frames import Recording, Region
from . import eager_hold
from .opclass import ALIAS, DUS, NOVAL
from .nested import run
from .prepare import Prepared, Preparer


class _Pass:
    """One frame instance after its backward pass: bytes made (``new``) and freed at each item, each value's
    last use and bytes, and per region item what it hands its children and their passes (``kids``)."""

    __slots__ = ("p", "off", "new", "freed", "last", "sizes", "owned", "only", "kids", "klast", "rel")

    def __init__(self, p: Prepared, off, owned: dict, fused: bool):
        m = len(p.seq)
        self.p, self.off, self.owned = p, off, owned
        self.new, self.freed = [0] * m, [0] * (m + 1)  # freed[m]: owned values never read
        self.last: dict[int, int] = {}
        self.sizes: dict[int, int] = {}
        self.only: dict | None = {} if fused else None
        self.kids: dict[int, tuple] = {}
        self.klast: dict[int, int] = {}  # fused kernel -> its last member in this frame
        self.rel: int | None = None  # without rows in the table: its peak above the base it runs on


class Sweep(Preparer):
    """One sweep of a recording over the flattened rows (``n`` of them); ``kernel`` (the fused estimate) is
    each row's fused kernel id or None."""

    def __init__(self, rec: Recording, n: int, kernel: list | None = None, eager: bool = False,
                 hold: list | None = None):
        super().__init__(rec, kernel is not None, eager)
        self.kernel = kernel
        self.hold = hold  # eager: per row, the row its result is referenced until (:mod:`.eager_hold`)
        self.during = [0] * n
        self.after = [0] * n
        self.hidden: list[tuple[int, int]] = []  # (row, bytes): peaks of branches not taken
        self.outputs: list[int] = []  # bytes of each value the entry returns
        self._memo: dict[tuple, _Pass] = {}  # (frame, what it is handed) -> its pass, for passes without rows
        self._reads: dict[int, tuple] = {}  # id(row list) -> (the list, what its rows read)

    def reads(self, rows: list) -> tuple:
        """The keys ``rows`` read and how many each row reads (:func:`.flat.reads`), once per row list."""
        got = self._reads.get(id(rows))
        if got is None:
            got = self._reads[id(rows)] = (rows, _flat().reads(self.values(rows)))  # the list kept: its id stays
        return got[1]

    def run(self) -> int:
        """Sweep the entry frame on top of its arguments (live throughout unless donated); returns the peak."""
        rec = self.rec
        if rec.entry is None:
            return sum(b for _, b, _ in rec.args)
        p = self.prepare(rec.entry)
        self.localise()
        args = {k: self.size(k, b) for k, b, _ in rec.args}
        ps = run(self._pass(p, 0, {k: args[k] for k, _, d in rec.args if d}))  # donated: freed after last use
        peak = run(self._forward(ps, True, sum(args.values())))
        self.outputs = [self._bytes_of(ps, r, args) for r in map(self.root, p.returns)]  # each output once
        return peak

    def _bytes_of(self, ps: _Pass, key: int, args: dict) -> int:
        """Bytes of a value of the entry: an argument's, a region result's, or those of the row making it."""
        if key in args or key in ps.sizes:
            return args.get(key, ps.sizes.get(key))
        rows = ps.p.fr.rows
        for e in reversed(ps.p.seq):
            if type(e) is int and rows[e].values and key in rows[e].values[1]:
                r = rows[e]
                res = r.result if len(r.values[1]) == 1 else r.result[r.values[1].index(key)]
                return self.size(key, res.nbytes)
        return 0

    def _pass(self, p: Prepared, off, owned: dict):
        """The backward pass of a frame instance (rows from ``off``; None: not in the table) and of its
        children's, with what each region hands over settled. ``owned``: arguments the frame may free or
        update in place (key -> bytes it brings; 0 for a loop's carried values, which the loop counts).
        A generator (:mod:`.nested`): nested frames are followed without recursion."""
        if off is None:
            key = (id(p), tuple(sorted(owned.items())))
            ps = self._memo.get(key)
            if ps is None:
                ps = self._memo[key] = yield from self._new_pass(p, off, owned)
            return ps
        return (yield from self._new_pass(p, off, owned))

    def _new_pass(self, p: Prepared, off, owned: dict):
        ps = _Pass(p, off, owned, self.kernel is not None and off is not None)
        self._backward(ps)
        if self.hold is not None and off == 0 and p is self._prepared.get(id(self.rec.entry)):
            eager_hold.extend(self, ps, self.hold)
        for k, b in owned.items():
            ps.freed[ps.last.get(k, len(p.seq))] += b
        if not p.flat:
            for idx, it in enumerate(p.seq):
                if type(it) is Region:
                    yield from self._settle(ps, idx, it)
        return ps

    # -- backward ---------------------------------------------------------------------------------------------
    def _backward(self, ps: _Pass) -> None:
        """Items from last to first: a read seen first is a value's last use; where a value is made, its bytes
        are booked as made there and freed after that last use (at once where nobody reads it)."""
        p = ps.p
        if ps.only is not None:
            return self._backward_fused(ps)
        if arrays() and _flat().applies(ps) and _flat().backward(self, ps):
            return None
        rows, seq, cls = p.fr.rows, p.seq, p.cls
        new, freed, last, sizes, alias = ps.new, ps.freed, ps.last, ps.sizes, self.alias
        size = self.size if self._local else None
        keep = not p.flat  # region ops read the bytes of what they are handed; a flat frame needs none
        for idx, c, e in zip(range(len(seq) - 1, -1, -1), reversed(cls), reversed(seq)):
            if not 0 <= c < ALIAS:  # items, re-labellings, several results, in-place updates
                self._rare(ps, idx, c, e)
                continue
            r = rows[e]
            u, d = r.values
            for x in u:
                if x not in last:
                    last[x] = idx
            k = d[0]
            if k in alias:
                self._merge(ps, k)
                continue
            b = r.result.nbytes if size is None else size(k, r.result.nbytes)
            new[idx] = b
            freed[last.get(k, idx)] += b
            if keep:
                sizes[k] = b

    def _rare(self, ps: _Pass, idx: int, c: int, e) -> None:
        if c < 0:
            self._item_back(ps, idx, e, ps.p.reads[idx])
            return
        if c == NOVAL:
            return
        r = ps.p.fr.rows[e]
        u, d = r.values
        if c == ALIAS:
            for k in d:
                self._merge(ps, k)
            return
        if c == DUS:
            self._in_place(ps, d[0], u[0])
        if ps.only is not None:
            self._leaf_fused(ps, idx, r, u, d)
            return
        last = ps.last
        for x in u:
            if x not in last:
                last[x] = idx
        for k, t in zip(d, (r.result,) if not isinstance(r.result, tuple) else r.result):
            self._made(ps, idx, k, t.nbytes)

    def _backward_fused(self, ps: _Pass) -> None:
        p = ps.p
        rows, seq, cls = p.fr.rows, p.seq, p.cls
        for idx, c, e in zip(range(len(seq) - 1, -1, -1), reversed(cls), reversed(seq)):
            if 0 <= c < ALIAS:
                self._leaf_fused(ps, idx, rows[e], *rows[e].values)
            else:
                self._rare(ps, idx, c, e)

    def _made(self, ps: _Pass, idx: int, k: int, nbytes: int) -> None:
        if k in self.alias:
            self._merge(ps, k)
            return
        b = self.size(k, nbytes)
        ps.sizes[k] = b
        ps.new[idx] += b
        ps.freed[ps.last.get(k, idx)] += b

    def _merge(self, ps: _Pass, k: int) -> None:
        """A re-labelling ``k``: its readers read its root (the last use moves there)."""
        t = ps.last.pop(k, None)
        r = self.root(k)
        if t is not None and t > ps.last.get(r, -1):
            ps.last[r] = t
        if ps.only is not None and k in ps.only:
            o = ps.only.pop(k)
            ps.only[r] = o if ps.only.get(r, o) == o else -1

    def _leaf_fused(self, ps: _Pass, idx: int, r, uses: tuple, defs: tuple) -> None:
        """A leaf of the fused estimate: a kernel reads until its last member; a value all of whose readers
        are in the kernel that makes it is never stored."""
        last, only = ps.last, ps.only
        kid = self.kernel[ps.off + ps.p.seq[idx]]
        at = idx
        if kid is not None:
            at = ps.klast.setdefault(kid, idx)  # a kernel reads until its last member
        for x in uses:
            if x not in last:
                last[x] = at
            o = only.get(x)
            only[x] = (-1 if kid is None else kid) if o is None else (o if o == kid else -1)
        for k, t in zip(defs, (r.result,) if not isinstance(r.result, tuple) else r.result):
            if kid is not None and only.get(k, kid) == kid and k not in self.alias:
                only.pop(k, None)
                continue  # made and used inside one fused kernel
            self._made(ps, idx, k, t.nbytes)

    def _item_back(self, ps: _Pass, idx: int, it, reads: tuple) -> None:
        """A region op or a return: its results are made here (a loop's in place where they can be), what it
        and its children read is read here."""
        if type(it) is Region:
            for j, d in enumerate(it.defs):
                if it.name == "while" and j not in it.passthrough and j < len(it.uses):
                    self._in_place(ps, d, it.uses[j])
                self._made(ps, idx, d, it.sizes[j])
        last, only = ps.last, ps.only
        for x in reads:
            if x not in last:
                last[x] = idx
            if only is not None:
                only[x] = -1

    def _in_place(self, ps: _Pass, d: int, operand: int) -> None:
        """Result ``d`` updates ``operand`` in place where nothing reads it later (nothing the backward pass
        has seen yet) and the buffer is this frame's (made here, or handed over)."""
        r0 = self.root(operand)
        if self.alias.get(d) == r0:
            return  # decided for an earlier instance of this frame
        if d in self.alias or not (r0 in ps.p.defined or r0 in ps.owned):
            return
        if r0 in ps.last or any(k in ps.last for k in self.aliases_of(r0)):
            return
        self.alias[d] = r0

    # -- what regions hand over -------------------------------------------------------------------------------
    def _settle(self, ps: _Pass, idx: int, it: Region):
        """The children's passes of a region op, with what it hands them; a returned buffer that was handed
        in keeps the bytes it came with."""
        give = self._handed(ps, idx, it)
        kids = []
        for cf, start, k in it.children:
            o = ps.off + start if ps.off is not None and k else None  # k 0: folded, the rows are another call's
            cps = (yield self._pass(self.prepare(cf), o, give)) if cf is not None else None
            kids.append((cps, o, start))
            if cps is None or it.name == "while":
                continue
            for j, r in enumerate(map(self.root, cps.p.returns)):
                if r in give and j < len(it.defs) and it.defs[j] in ps.sizes:
                    d = it.defs[j]
                    delta = give[r] - ps.sizes[d]
                    ps.sizes[d] += delta
                    ps.new[idx] += delta
                    ps.freed[ps.last.get(d, idx)] += delta
        branches = []
        for cf in it.branches:
            branches.append((yield self._pass(self.prepare(cf), None, {})))
        ps.kids[idx] = (sum(give.values()), kids, branches)

    def _handed(self, ps: _Pass, idx: int, it: Region) -> dict:
        """A loop body may update its carried values in place (0 bytes: the loop counts them); a callee gets
        the operands that die at the call, with their bytes."""
        if it.name == "while":
            return {a: 0 for a, j in it.argpos.items() if j not in it.passthrough}
        if it.name in ("case", "if"):
            return {}
        give = {}
        roots = [self.root(u) for u in it.uses]
        for a, j in it.argpos.items():
            r = roots[j]
            if ps.last.get(r) == idx and roots.count(r) == 1:
                b = ps.sizes.get(r, ps.owned.get(r))
                if b is not None:
                    give[a] = b
        return give

    # -- forward ----------------------------------------------------------------------------------------------
    def _forward(self, ps: _Pass, write: bool, base: int):
        """Live bytes before and after every item from ``base`` (a running sum); region ops run their children
        on top. Writes the rows' ``during`` and ``after`` where ``write``; returns the peak. A generator
        (:mod:`.nested`)."""
        if ps.off is not None:
            return (yield from self._forward_once(ps, write, base))
        if ps.rel is None:  # nothing to write: the peak above ``base`` is the same wherever it runs
            ps.rel = yield from self._forward_once(ps, False, 0)
        return base + ps.rel

    def _forward_once(self, ps: _Pass, write: bool, base: int):
        p, off = ps.p, ps.off
        if type(ps.new) is not list:  # a flat pass made in arrays
            peak = _flat().forward(self, ps, write, base)
            if peak is not None:
                return peak
        m = len(p.seq)
        acc = list(accumulate(map(sub, ps.new, ps.freed), initial=base - ps.freed[m]))
        during = list(map(add, acc, ps.new))
        for idx, (give, kids, branches) in ps.kids.items():
            during[idx] = yield from self._region_forward(ps, idx, acc[idx] - give, kids, branches, write)
        peak = max(during, default=acc[0])
        if write and off is not None:
            if p.flat:  # leaf positions 0..n-1, then at most a return
                n = len(p.fr.rows)
                self.during[off:off + n] = during[:n]
                self.after[off:off + n] = acc[1:n + 1]
            else:
                for idx, e in enumerate(p.seq):
                    if type(e) is int:
                        self.during[off + e] = during[idx]
                        self.after[off + e] = acc[idx + 1]
        return max(peak, acc[0])

    def _region_forward(self, ps: _Pass, idx: int, top: int, kids: list, branches: list, write: bool):
        it = ps.p.seq[idx]
        if it.name == "while":
            top += ps.new[idx]  # the loop's carried values, held while it runs
        peak = 0
        for cps, o, start in kids:
            if cps is None:
                if write and o is not None:
                    self._lift(o, it.end - start, top, opaque=True)
                continue
            kp = yield self._forward(cps, write, sum(cps.owned.values()))
            peak = max(peak, kp)
            if write and o is not None:
                self._lift(o, len(cps.p.fr.rows), top)
            elif write and ps.off is not None:  # folded: a peak above its shared rows' shows on the first
                i, n = ps.off + start, len(cps.p.fr.rows)
                if n and top + kp > max(self.during[i:i + n]):
                    self.hidden.append((i, top + kp))
                    self.during[i] = top + kp
        during = top + peak
        for bps in branches:  # a branch not taken: its peak counts, its rows are not in the table
            bp = top + (yield self._forward(bps, False, 0))
            if bp > during:
                during = bp
                if write and ps.off is not None and it.end > it.start:
                    i = ps.off + it.start
                    self.hidden.append((i, bp))
                    self.during[i] = max(self.during[i], bp)
        return during

    def _lift(self, start: int, n: int, by: int, opaque: bool = False) -> None:
        d, a = self.during, self.after
        for i in range(start, start + n):
            if opaque:
                d[i] = a[i] = 0
            d[i] += by
            a[i] += by


def arrays() -> bool:
    """Whether the sweep takes its array paths (:mod:`.flat`, numpy): where numpy is loaded already. They save
    about a fifth of a 40k-row sweep, less than importing numpy costs a process that has not (the MLIR reader's
    child answering a one-file report imports none)."""
    return "numpy" in sys.modules


def _flat():
    from . import flat

    return flat
