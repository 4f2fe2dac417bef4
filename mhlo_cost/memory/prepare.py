"""Frames made ready for the sweep, once each: their items in order, what re-labels what, what they read from
outside, and (for the parameters) which values carry a weight to a dot."""
from __future__ import annotations

from itertools import chain
from operator import attrgetter

from ..walk.frames import Frame, Recording, Region
from ..walk.row import short_name
from .nested import run
from .opclass import ALIAS, CARRY, DOT, DUP, DUP_CARRY, DUS, MAYBE, MULTI, NOVAL, PLAIN, op_class, row_class

_VALUES = attrgetter("values")


class Prepared:
    """A frame's items in order: ``seq`` holds leaf positions (ints) and :class:`~mhlo_cost.walk.frames.Region` /
    :class:`~mhlo_cost.walk.frames.Return` items; ``cls`` the class of each (:mod:`.opclass`; -1 for items); ``reads`` the
    roots each item reads (None for leaves: the backward pass reads their operands from the rows)."""

    __slots__ = ("fr", "seq", "cls", "reads", "made", "read", "returns", "flat", "_defined", "_externals", "_root")

    def __init__(self, fr: Frame, root):
        self.fr = fr
        self.seq: list = []
        self.cls: list = []
        self.reads: list = []
        self.made: set = set()  # keys made by region items
        self.read: set = set()  # roots read by region and return items
        self.returns: tuple = ()  # the values the frame returns
        self.flat = True  # no region items: leaf positions are 0..n-1 in order
        self._defined = self._externals = None
        self._root = root

    @property
    def defined(self) -> set:
        """Keys of the values the frame makes (re-labellings included)."""
        if self._defined is None:
            rows = self.fr.rows
            vals = [rows[e].values for e, c in zip(self.seq, self.cls) if c >= 0 and c != NOVAL]
            self._defined = set(chain.from_iterable(v[1] for v in vals)) | self.made
        return self._defined

    @property
    def externals(self) -> set:
        """Roots the frame reads from outside (arguments, captured values)."""
        if self._externals is None:
            rows = self.fr.rows
            used = set(chain.from_iterable(rows[e].values[0] for e, c in zip(self.seq, self.cls)
                                           if c >= 0 and c != NOVAL))
            used -= self.defined
            self._externals = (set(map(self._root, used)) | self.read) - self.defined
        return self._externals


class Preparer:
    """Per-sweep state shared by all frames: aliases (key -> the key whose buffer it is), per-device sizes,
    and the weight trail for :func:`mhlo_cost.memory.profile.parameters`."""

    def __init__(self, rec: Recording, fused: bool, eager: bool = False):
        self.rec = rec
        self.fused = fused
        self.eager = eager  # views (broadcast, transpose, slice) share storage; widening converts are stored
        self.alias: dict[int, int] = {}
        for k in rec.alias:
            self.alias[k] = _resolve(rec.alias, k)
        self.weights: list[int] = []  # keys read as the right operand of a dot / the kernel of a convolution
        self.src: dict[int, int] = {}  # result -> operand of ops that carry a weight along
        self.passed: dict[int, list] = {}  # a child frame's argument -> the operands it stands for
        self._classes: dict[str, int] = {}
        self._prepared: dict[int, Prepared] = {}
        self._local: dict[int, int] = {}
        self._rev: dict | None = None
        self._values: dict[int, tuple] = {}  # id(row list) -> (the list, the value keys of its rows)

    def root(self, k: int) -> int:
        alias = self.alias
        while k in alias:
            k = alias[k]
        return k

    def size(self, key: int, nbytes: int) -> int:
        """Bytes of a value: its type's, or its per-device part where it enters a ``shard_map`` body."""
        local = self._local.get(key)
        return nbytes if local is None or local > nbytes else local

    def localise(self) -> None:
        """Per-device sizes onto roots (once every frame is prepared and static aliases are known)."""
        for k, b in self.rec.local.items():
            r = self.root(k)
            self._local[r] = min(b, self._local.get(r, b))

    def aliases_of(self, r0: int) -> list:
        """The keys that re-label root ``r0`` (built on first use)."""
        if self._rev is None:
            self._rev = {}
            for k in self.alias:
                self._rev.setdefault(self.root(k), []).append(k)
        return self._rev.get(r0, [])

    def prepare(self, fr: Frame) -> Prepared:
        """Frame ``fr`` made ready (once), and every frame it runs, however deeply they nest (no recursion)."""
        p = self._prepared.get(id(fr))
        return p if p is not None else run(self._prepare(fr))

    def _prepare(self, fr: Frame):
        """:meth:`prepare` as a generator (:mod:`.nested`): ``yield`` a child frame's, for its result."""
        p = self._prepared.get(id(fr))
        if p is not None:
            return p
        p = self._prepared[id(fr)] = Prepared(fr, self.root)
        rows, items = fr.rows, fr.items
        n, j, pos = len(rows), 0, 0
        while True:
            while j < len(items) and items[j].pos <= pos:
                it = items[j]
                j += 1
                if isinstance(it, Region):
                    yield from self._region(p, it)
                    pos = max(pos, it.end)
                else:
                    p.returns = it.uses
                    p.flat = p.flat and it.pos == n  # a return inside the frame (an inline container's)
                    self._item(p, it, {self.root(u) for u in it.uses})
            if pos >= n:
                break
            stop = min(items[j].pos, n) if j < len(items) else n
            self._leaves(p, rows, pos, stop)
            pos = stop
        return p

    def _leaves(self, p: Prepared, rows: list, pos: int, stop: int) -> None:
        """Leaf rows ``pos`` to ``stop``: their classes; aliases registered, weights traced (the hot loop)."""
        classes, cls, fused = self._classes, p.cls, self.fused
        p.seq.extend(range(pos, stop))
        p.reads.extend([None] * (stop - pos))
        for r in rows[pos:stop]:
            c = classes.get(r.op)
            if c is None:
                c = op_class(r.op)
                c = classes[r.op] = PLAIN if c == DUP and not fused else c  # unfused, a broadcast is stored
                if self.eager and short_name(r.op) == "scatter":
                    c = classes[r.op] = DUS  # eager: ``out[..., 0::2] = v`` writes into out's storage
            v = r.values
            if not v:
                c = NOVAL
            elif c:
                if c == MAYBE:
                    c = row_class(r)
                if c:
                    c = self._special(r, c, v)
            if c < ALIAS and len(v[1]) != 1:
                c = MULTI
            elif c == DUS and len(v[1]) != 1:
                c = MULTI
            cls.append(c)

    def values(self, rows: list) -> list:
        """The value keys of each of ``rows`` (``((operands...), (results...))``), once per row list."""
        got = self._values.get(id(rows))
        if got is None:
            got = self._values[id(rows)] = (rows, list(map(_VALUES, rows)))  # the list kept: its id stays its own
        return got[1]

    def _special(self, r, c: int, v: tuple) -> int:
        u, d = v
        if c == DUS and self.eager and u and u[0] in self.alias:
            return PLAIN  # eager: a write into a view (``torch.empty_like``: a broadcast) makes a buffer of its own
        if c == DUP_CARRY and self.eager and short_name(r.op) not in EAGER_VIEWS:
            c = CARRY  # eager: a widening convert is a kernel of its own, its result stored
        if c == ALIAS or (self.fused and (c == DUP or c == DUP_CARRY)) or (
                self.eager and c == CARRY and short_name(r.op) in EAGER_VIEWS):
            aget = self.alias.get
            for k, x in zip(d, u if len(u) == len(d) else u[:1] * len(d)):
                self.alias[k] = aget(x, x)  # its readers read the root; an iota has none: never stored
            if c == DUP_CARRY and u:
                self.src[d[0]] = u[0]
            return ALIAS
        if (c == CARRY or c == DUP_CARRY) and u:
            self.src[d[0]] = u[0]
        elif c == DOT and len(u) > 1:
            self.weights.append(u[1])
        return c

    def _item(self, p: Prepared, it, reads: set) -> None:
        p.seq.append(it)
        p.cls.append(-1)
        p.reads.append(tuple(reads))
        p.read.update(reads)

    def _region(self, p: Prepared, it: Region):
        """A region item (a generator, :mod:`.nested`: its child frames are prepared first)."""
        root = self.root
        p.flat = False
        reads = {root(u) for u in it.uses}
        for cf in [c[0] for c in it.children] + it.branches:
            if cf is not None:
                child = self._prepared.get(id(cf))
                reads |= (child if child is not None else (yield self._prepare(cf))).externals
        for a, j in it.argpos.items():  # a child's argument stands for its operand (at every call site)
            self.passed.setdefault(a, []).append(it.uses[j])
        for j, d in enumerate(it.defs):
            i = it.passthrough.get(j)
            if i is not None and i < len(it.uses):
                self.alias[d] = root(it.uses[i])
            else:
                p.made.add(d)
        self._item(p, it, reads)


#: Ops that PyTorch eager runs as views of their operand's storage.
EAGER_VIEWS = frozenset({"transpose", "slice", "broadcast_in_dim", "broadcast"})


def _resolve(alias: dict, k: int) -> int:
    seen = 0
    while k in alias and seen < len(alias):
        k = alias[k]
        seen += 1
    return k
