"""Row positions and the entry's call items of a program rebuilt at a greater depth by
:func:`~mhlo_cost.studies.layerfit.repeat_layers`: the rows of layer 2 (and those after the layers) move down by
one layer's rows per further layer; what they read of a layer's values is the value keys of that layer
(``keys.at(key, k)``: :class:`~mhlo_cost.studies.layerfit._Keys`)."""
from __future__ import annotations

from .gridfit import FitFailed


class Shift:
    """Row positions of the program at depth 2 at ``depth``: the rows of layer 2 (and those that follow) move down
    by one layer's rows per further layer."""

    def __init__(self, q: int, m: int, depth: int, keys):
        self.q, self.m, self.depth, self.keys = q, m, depth, keys

    def _at(self, p, k: int):
        """Position (or ``argKEY``) ``p`` that a row of layer ``k`` reads (as layer 2's row at the same place)."""
        if type(p) is str:
            if p.startswith("arg") and p[3:].lstrip("-").isdigit():
                return "arg%d" % self.keys.at(int(p[3:]), k)
            return p
        return p + (k - 2) * self.m if type(p) is int and p >= self.q else p

    def producers(self, prod: list) -> list:
        q, m = self.q, self.m
        if len(prod) < q + 2 * m:
            raise FitFailed("the program's producers do not cover its rows")
        for a, b in zip(prod[q:q + m], prod[q + m:q + 2 * m]):
            if len(a) != len(b):
                raise FitFailed("layer 2 reads other producers than layer 1")
        out = list(prod[:q + 2 * m])
        for k in range(3, self.depth + 1):
            out += [tuple(self._at(p, k) for p in b) for b in prod[q + m:q + 2 * m]]
        last = self.depth
        out += [tuple(self._at(p, last) if type(p) is not int or p >= q + m else p for p in b)
                for b in prod[q + 2 * m:]]
        return out

    def positions(self, table: dict) -> dict:
        """A record keyed by row position (a recorder's), at ``depth``; layer 2's entries must be layer 1's."""
        q, m = self.q, self.m
        if not isinstance(table, dict) or any(type(p) is not int for p in table):
            raise FitFailed("a recorder's record is not keyed by row")
        for p in range(q, q + m):
            if table.get(p) != table.get(p + m):
                raise FitFailed("a recorder's record of layer 2 differs from layer 1's")
        out = {}
        for p, v in table.items():
            if p < q + 2 * m:
                out[p] = v
            if q + m <= p < q + 2 * m:
                for k in range(3, self.depth + 1):
                    out[p + (k - 2) * m] = v
            elif p >= q + 2 * m:
                out[p + (self.depth - 2) * m] = v
        return dict(sorted(out.items()))


def calls(items: list, q: int, m: int, depth: int, keys) -> list:
    """The entry's call items at ``depth``: those of layer 2 repeated for each further layer, those after the
    layers moved down. A folded call's rows (a child with ``k`` 0) stay where they are unless layer 2 made them."""
    from ..walk.frames import Region

    def at(it, k: int, fn):
        shift = (k - 2) * m
        children = [(fr, st + shift if st >= q + m else st, n) for fr, st, n in it.children]
        return Region(it.name, tuple(map(fn, it.uses)), tuple(map(fn, it.defs)), it.sizes, children, it.branches,
                      it.argpos, it.passthrough, it.start + shift, it.end + shift)

    before, layer2, after = [], [], []
    for it in items:
        ends = (it.start, max(it.start, it.end - 1))
        part = [0 if p < q + m else 1 if p < q + 2 * m else 2 for p in ends]
        if part[0] != part[1]:
            raise FitFailed("a call spans the end of a layer")
        (before, layer2, after)[part[0]].append(it)
    out = before + layer2
    for k in range(3, depth + 1):
        out += [at(it, k, lambda x, k=k: keys.at(x, k)) for it in layer2]
    last = (lambda x: keys.at(x, depth) if x in keys.defs2 else x)
    return out + [at(it, depth, last) for it in after]
