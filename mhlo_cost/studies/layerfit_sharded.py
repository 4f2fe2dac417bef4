"""The layer repetition of :mod:`mhlo_cost.studies.layerfit` for a program whose work is one ``shard_map`` (an
``sdy.manual_computation`` region: the sweep's sharded STDiT3), rebuilt at any depth from its lowerings at depths
2 and 3.

Such a program repeats in more than one place: each layer's parameter reshapes in the entry before the region,
and the layer's blocks inside it. The entry's rows inside the region carry no values (the data flow of the
body is its child frame's rows, one per entry row, with the same locations and types); the region's operands
are the entry's values the body's block arguments stand for (``argpos``), their per-device sizes the record's
``local``. :func:`repeat_sharded` finds every repeated segment (:func:`find_segments`), repeats each one's layer 2
in the entry and in the body, and extends the region's operands, block arguments and sizes, the arguments and
the data flow with it. Anything else (several regions, a segment across the region's edge, asynchronous
collectives) raises :class:`~mhlo_cost.studies.gridfit.FitFailed` saying why.
"""
from __future__ import annotations

import copy

from .gridfit import FitFailed
from .layerfit import (_ROW_FIELDS, FRESH_BASE, _after_rows, _expand, _ints, _Keys, _layer_rows, _map_keys, _Objects,
                       _sig, _with, check_plain, entry_args)


def find_segments(s1: list, s2: list) -> list[tuple[int, int]]:
    """[(q, m)] in order: ``s2`` is ``s1`` with, after each ``s2[q:q + m]`` (a layer), a copy of it (layer 2);
    FitFailed where no such split is."""
    if len(s2) <= len(s1):
        raise FitFailed("the program at depth 3 is not longer than at depth 2")
    found = _segments(s1, s2, 0, 0)
    if found is None:
        raise FitFailed("the rows of layer 2 are not those of layer 1 (the layers differ)")
    return found


def _segments(s1: list, s2: list, i: int, j: int):
    """The segments of ``s2[j:]`` over ``s1[i:]`` (positions in ``s2``), or None."""
    lcp = 0
    while i + lcp < len(s1) and j + lcp < len(s2) and s1[i + lcp] == s2[j + lcp]:
        lcp += 1
    if i + lcp == len(s1) and j + lcp == len(s2):
        return []
    for m in range(1, lcp + 1):
        q = j + lcp - m
        if s2[q:q + m] != s2[q + m:q + 2 * m]:
            continue
        rest = _segments(s1, s2, i + lcp, j + lcp + m)
        if rest is not None:
            return [(q, m)] + rest
    return None


def _region(analysis):
    """(the region item, its body's frame) of a program whose entry is rows, one ``manual_computation`` region
    and its return; FitFailed for anything else."""
    rec = analysis.liveness
    if rec is None or rec.entry is None or rec.alias or analysis.__dict__.get("arguments"):
        raise FitFailed("the program is not one sharded function (aliases or a training step)")
    items = rec.entry.items
    if (len(items) != 2 or type(items[0]).__name__ != "Region" or items[0].name != "manual_computation"
            or items[0].branches or len(items[0].children) != 1 or type(items[1]).__name__ != "Return"
            or items[1].pos != len(analysis.rows) or len(rec.entry.rows) != len(analysis.rows)):
        raise FitFailed("the program is not one shard_map region and its return")
    region = items[0]
    body, start, k = region.children[0]
    if (k != 1 or start != region.start or len(body.rows) != region.end - region.start or body.pending
            or body.collected or [type(it).__name__ for it in body.items] != ["Return"]):
        raise FitFailed("the shard_map region's body is not one plain function")
    return region, body


class _Plan:
    """Where the rows of the program at depth 3 go at ``depth``: segments ``(q, m)``; a row not in a layer 2
    moves down by the further layers of the segments before it; layer ``j`` of segment ``i`` starts at
    ``new(q) + (j - 1) m``."""

    def __init__(self, segs: list, depth: int):
        self.segs, self.depth = segs, depth

    def new(self, p: int) -> int:
        return p + (self.depth - 2) * sum(m for q, m in self.segs if q + 2 * m <= p)

    def seg_of(self, p: int):
        """(segment, layer 1 or 2, offset) of position ``p``, or None."""
        for q, m in self.segs:
            if q <= p < q + 2 * m:
                return (q, m), 1 + (p - q) // m, (p - q) % m
        return None

    def layer(self, p: int, k: int) -> int:
        """Position of what layer ``k`` (>= 2) has where layer 2 has ``p`` (layer 1's ``p``: layer k - 1's)."""
        (q, m), j, off = self.seg_of(p)
        return self.new(q) + (j + k - 3) * m + off

    def read(self, p, k: int | None, row: int, keys):
        """What a row reads at ``p`` (a position, ``argKEY`` or None): ``k`` its layer (None: a row not repeated,
        at position ``row``; one that is in no layer reads a layer 2 before it as the last layer)."""
        free = k is None and self.seg_of(row) is None and row >= self.segs[0][0]
        if type(p) is str:
            if (k is not None or free) and p.startswith("arg") and p[3:].lstrip("-").isdigit():
                return "arg%d" % keys.at(int(p[3:]), self.depth if k is None else k)
            return p
        if type(p) is not int:
            return p
        where = self.seg_of(p)
        if where is None:
            return self.new(p)
        if k is not None:
            return self.layer(p, k)
        (q, m), j, _ = where
        return self.layer(p, self.depth) if free and j == 2 and row >= q + 2 * m else self.new(p)


def repeat_sharded(shallow, deep, depth: int, base: int = 2):
    """The analysis of the program at ``depth`` layers from ``shallow`` (at depth ``base``) and ``deep`` (at
    ``base + 1``), both one ``shard_map`` region (:func:`_region`). FitFailed says why where they are not."""
    reg1, body1 = _region(shallow)
    reg2, body2 = _region(deep)
    if depth < base:
        raise FitFailed(f"depth {depth} is below the shallow lowering's {base}")
    if depth <= base + 1:
        return shallow if depth == base else deep
    depth -= base - 1
    check_plain(shallow, deep)
    segs = find_segments([_sig(r) for r in shallow.rows], [_sig(r) for r in deep.rows])
    s0, e0 = reg2.start, reg2.end
    if any(q < s0 < q + 2 * m or q < e0 < q + 2 * m for q, m in segs):
        raise FitFailed("a repeated segment crosses the shard_map region's edge")
    plan = _Plan(segs, depth)
    keys = _keys(deep, body2, segs, s0, e0, reg2)
    rows, body_rows = _rows(shallow, deep, body1, body2, (reg1.start, s0), plan, keys)
    return _assemble(shallow, deep, reg2, body2, plan, keys, rows, body_rows)


def _keys(deep, body, segs: list, s0: int, e0: int, region) -> _Keys:
    """The value keys of layers 1 and 2 of every segment (the body's rows for a segment inside the region), with
    the region's operands that layer 1's and 2's block arguments stand for."""
    def rows_of(lo, hi):
        return body.rows[lo - s0:hi - s0] if s0 <= lo else deep.rows[lo:hi]

    layer1 = [r for q, m in segs for r in rows_of(q, q + m)]
    layer2 = [r for q, m in segs for r in rows_of(q + m, q + 2 * m)]
    inside = {p for q, m in segs for p in range(q, q + 2 * m)}
    outside = {x for p, r in enumerate(deep.rows) if p not in inside and not s0 <= p < e0 for x in _ints(r.values[1:])}
    outside |= {x for i, r in enumerate(body.rows) if i + s0 not in inside for x in _ints(r.values[1:])}
    keys = _Keys(layer1, layer2, outside, FRESH_BASE)
    for b1, b2 in list(keys.f.items()):
        if b1 != b2 and b1 in region.argpos and b2 in region.argpos:
            u1, u2 = region.uses[region.argpos[b1]], region.uses[region.argpos[b2]]
            if keys.f.setdefault(u1, u2) != u2:
                raise FitFailed("an operand of the region stands for two values of layer 2")
            if u1 != u2 and u2 in outside:
                raise FitFailed("a layer reads a value made outside the layers that differs per layer")
    keys.images = set(keys.f.values())
    keys.__dict__.pop("_inv", None)
    return keys


def _rows(shallow, deep, body1, body2, starts: tuple, plan: _Plan, keys: _Keys) -> tuple[list, list]:
    """(the entry's rows, the body's rows) at ``plan.depth``: each segment's layer 2 repeated in both (the same
    new locations and types in both lists), the rows after the last segment reading its last layer."""
    segs, depth = plan.segs, plan.depth
    s0 = starts[1]
    in_layer2 = {p for q, m in segs for p in range(q + m, q + 2 * m)}
    objs = _Objects([r for p, r in enumerate(deep.rows[:segs[-1][0] + segs[-1][1]]) if p not in in_layer2])
    rows, body, pos = [], [], 0
    for q, m in segs:
        shift = plan.new(pos) - pos
        rows += [r if not shift else _with(r, index=r.index + shift) for r in deep.rows[pos:q + 2 * m]]
        body += body2.rows[max(pos, s0) - s0:max(q + 2 * m, s0) - s0]
        delta = deep.rows[q + m].index - deep.rows[q].index
        e1, e2 = deep.rows[q:q + m], deep.rows[q + m:q + 2 * m]
        b1, b2 = body2.rows[q - s0:q - s0 + m], body2.rows[q - s0 + m:q - s0 + 2 * m]
        derived = q >= s0 and _entry_of_body(b2, e2)
        for k in range(3, depth + 1):
            if derived:  # (the entry's rows are the body's with their own note, index, cost and no values)
                made = _layer_rows(b1, b2, keys, objs, k, b2[0].index - b1[0].index)
                body += made
                rows += [_with(b, note=e.note, index=e.index + (k - 2) * delta + shift, values=e.values, cost=e.cost)
                         for b, e in zip(made, e2)]
                continue
            locs: dict = {}
            rows += _layer_rows(e1, e2, keys, objs, k, delta, shift, locs)
            if q >= s0:
                body += _layer_rows(b1, b2, keys, objs, k, b2[0].index - b1[0].index, 0, locs)
        pos = q + 2 * m
    grown = sum(m for _, m in segs)
    rows += _after_rows(shallow.rows[pos - grown:], deep.rows[pos:], keys, depth, grown)
    if pos >= s0:
        body += _after_rows(body1.rows[pos - grown - starts[0]:], body2.rows[pos - s0:], keys, depth, 0)
    else:
        body += body2.rows[max(pos, s0) - s0:]
    return rows, body


_OWN = ("note", "index", "values", "cost")
_SHARED = tuple(f for f in _ROW_FIELDS if f not in _OWN)


def _entry_of_body(body: list, entry: list) -> bool:
    """Whether each of the entry's rows is the body's row with only its note, index and cost of its own, and no
    values (the region's rows as the walk replays them): then a layer's entry rows are made from its body rows."""
    return all(not e.values and all(getattr(b, f) is getattr(e, f) or getattr(b, f) == getattr(e, f)
                                    for f in _SHARED) for b, e in zip(body, entry))


def _order(plan: _Plan, n: int):
    """(position at depth 3, layer or None) of every row at ``plan.depth``, in order."""
    pos = 0
    for q, m in plan.segs:
        yield from ((p, None) for p in range(pos, q + 2 * m))
        for k in range(3, plan.depth + 1):
            yield from ((p, k) for p in range(q + m, q + 2 * m))
        pos = q + 2 * m
    yield from ((p, None) for p in range(pos, n))


def _assemble(shallow, deep, region, body, plan: _Plan, keys: _Keys, rows: list, body_rows: list):
    """The analysis at ``plan.depth`` of the rows made by :func:`_rows`."""
    from ..walk.frames import Frame, Recording, Region, Return

    depth = plan.depth
    last = (lambda x: keys.at(x, depth) if x in keys.defs2 else x)
    order = list(_order(plan, len(deep.rows)))
    if len(order) != len(rows):
        raise FitFailed("the rebuilt rows are not where the plan puts them")
    out = copy.copy(deep)
    for memo in ("_memory", "_memory_alongside", "_ops", "_summary_memo", "_pricing_memo"):
        out.__dict__.pop(memo, None)
    out.rows = rows
    out.producers = [tuple(plan.read(x, k, p, keys) for x in deep.producers[p]) for p, k in order]
    out.records = {name: _positions(table, plan, order) for name, table in deep.records.items()}
    inner = Frame()
    inner.rows = body_rows
    inner.items = [Return(len(body_rows), tuple(_map_keys(tuple(body.items[0].uses), last)))]
    uses, argpos, passthrough, local = _operands(region, deep.liveness.local, keys, depth)
    entry = Frame()
    entry.rows = list(rows)
    entry.items = [Region(region.name, uses, region.defs, region.sizes, [(inner, plan.new(region.start), 1)], [],
                          argpos, passthrough, plan.new(region.start), plan.new(region.end)),
                   Return(len(rows), tuple(_map_keys(tuple(deep.liveness.entry.items[-1].uses), last)))]
    args = entry_args(shallow, deep, keys, depth)
    out.liveness = Recording(entry, [a[0] for a in args], {}, local, [a[1] for a in args], [a[2] for a in args])
    return out


def _positions(table: dict, plan: _Plan, order: list) -> dict:
    """A record keyed by row position at ``plan.depth``; layer 2's entries must be layer 1's."""
    if not isinstance(table, dict) or any(type(p) is not int for p in table):
        raise FitFailed("a recorder's record is not keyed by row")
    for q, m in plan.segs:
        if any(table.get(p) != table.get(p + m) for p in range(q, q + m)):
            raise FitFailed("a recorder's record of layer 2 differs from layer 1's")
    out = {}
    for new, (p, k) in enumerate(order):
        if p in table:
            out[new] = table[p]
    return out


def _operands(region, local: dict, keys: _Keys, depth: int) -> tuple:
    """(operands, block argument -> operand index, result -> operand index, per-device bytes of each operand) of
    the region at ``depth``: layer 2's operands and block arguments repeated for every further layer."""
    items = _expand(list(enumerate(region.uses)), lambda it: it[-1], keys, depth,
                    lambda it, k: (it[0], k, keys.at(it[-1], k)))
    first = {it[0]: n for n, it in enumerate(items) if len(it) == 2}
    if any(i not in first for i in region.argpos.values()):
        raise FitFailed("an operand of the region is made by layer 2 alone")
    copies = {(it[0], it[1]): n for n, it in enumerate(items) if len(it) == 3}
    argpos = {}
    for b, i in region.argpos.items():
        argpos[b] = first[i]
        for k in range(3, depth + 1):
            if (i, k) in copies:
                argpos[keys.at(b, k)] = copies[i, k]
            elif keys.at(b, k) != b:
                raise FitFailed("a block argument of layer 2 stands for an operand that does not repeat")
    argpos = dict(sorted(argpos.items(), key=lambda kv: kv[1]))
    uses = tuple(it[-1] for it in items)
    out_local: dict = {}
    for it in items:
        nbytes = local.get(region.uses[it[0]])
        if nbytes is not None and nbytes < out_local.get(it[-1], nbytes + 1):
            out_local[it[-1]] = nbytes
    return uses, argpos, {r: first[o] for r, o in region.passthrough.items()}, out_local
