"""Grids without re-lowering: the op table of a program at many shapes, fitted from lowerings at a few.

A static program's integer counts (FLOPs, bytes, tensor sizes, the liveness record's sizes) are polynomials in
its shape symbols (batch, context...). :func:`fit_tables` lowers and walks the program at the nodes of a small
tensor grid, checks that the op graph is the same at every node, fits every integer of the analysis that varies
with :func:`~mhlo_cost.walk.polyfit.fit_grid`, and verifies the fit on check points that are lowered too. A
:class:`TableFit` then gives the :class:`~mhlo_cost.analysis.Analysis` at any point of the grid by evaluation,
for the existing pricing to read: the figures are those of a lowering at that point.

What "the same op graph" means: the analysis as the reader's child sends it (:mod:`mhlo_cost.analysis.wire`),
with every integer (and every run of digits in a string: shapes as text) taken out, is the same byte string at
every node: the same ops in the same order with the same names, kinds, scopes, liveness items and data flow.
The keys the walk gives values (hashes of MLIR objects, arbitrary per lowering) are renumbered in order of first
use, so they take part in the comparison by their pattern, never by their values.
"""
from __future__ import annotations

import io
import itertools
import math
import pickle
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Mapping, Sequence

#: Renumbered value keys are this plus their order of first use (no count of a program comes near it).
KEY_BASE = 1 << 62
_RUN = re.compile(r"(-?\d+)")


class FitFailed(ValueError):
    """The grid cannot be fitted (the op graph changes with the shape, or the fit misses a check point); says why."""


def _value_keys(parts: tuple) -> set:
    """Every value key (a hash of an MLIR value, block argument or argument) of a wire tuple."""
    keys: set = set()
    _cls, columns, loc_table, _li, _ty, _ri, _os, _oi, _ids, extra, frame_table, record = parts

    def add(obj):
        if type(obj) is int:
            keys.add(obj)
        elif isinstance(obj, (tuple, list)):
            for x in obj:
                add(x)

    add(columns.get("values", ()))
    add([site for _name, _scope, _file_line, site, _stack in loc_table if site])  # a location's source key
    for _rows, items, _pending, _collected, _open in frame_table:
        for it in items:
            add(it[1])  # Return: uses; Region: uses
            if len(it) > 2:
                add(it[2])  # defs
                add(list(it[6]))  # argpos keys
    if record is not None:
        _entry, args, alias, local, _names, _elems = record
        add([a[0] for a in args])
        add(list(alias) + list(alias.values()) + list(local))
    for a in extra.get("arguments") or ():
        key = getattr(a, "key", "")
        if key.startswith("arg") and _RUN.fullmatch(key[3:]):
            keys.add(int(key[3:]))
    return keys


class _Taker(pickle.Pickler):
    """Pickles a wire tuple with its integers taken out (``values``), value keys renumbered (``keys``). A taken
    integer's mark is bytes (the pickler would look into a tuple's integers again)."""

    def __init__(self, out, keys: set):
        super().__init__(out, protocol=pickle.HIGHEST_PROTOCOL)
        self.fast = True  # no memo: which objects are shared depends on which sizes coincide at a point
        self.keys, self.renumbered, self.values = keys, {}, []

    def _int(self, n: int) -> bytes:
        if n in self.keys:
            return b"h%d" % self.renumbered.setdefault(n, len(self.renumbered))
        self.values.append(n)
        return b"i%d" % (len(self.values) - 1)

    def persistent_id(self, obj):
        t = type(obj)
        if t is int:
            return self._int(obj)
        if t is str and _RUN.search(obj):
            pieces = _RUN.split(obj)
            out = []
            for i, piece in enumerate(pieces):
                if i % 2 and str(int(piece)) == piece:
                    out.append(self._int(int(piece)))
                elif piece:
                    out.append(piece)
            return b"s" + pickle.dumps(tuple(out), protocol=pickle.HIGHEST_PROTOCOL)
        return None


class _Giver(pickle.Unpickler):
    def __init__(self, data: bytes, values: Sequence[int]):
        super().__init__(io.BytesIO(data))
        self.values = values

    def _int(self, pid: bytes) -> int:
        return self.values[int(pid[1:])] if pid[:1] == b"i" else KEY_BASE + int(pid[1:])

    def persistent_load(self, pid: bytes):
        if pid[:1] == b"s":
            return "".join(p if type(p) is str else str(self._int(p)) for p in pickle.loads(pid[1:]))
        return self._int(pid)


def skeleton(analysis) -> tuple[bytes, list[int]]:
    """(the analysis without its integers: the op graph, as bytes; its integers in order)."""
    from ..analysis.wire import encode

    parts = pickle.loads(encode(analysis))
    out = io.BytesIO()
    taker = _Taker(out, _value_keys(parts))
    taker.dump(parts)
    return out.getvalue(), taker.values


def flesh(template: bytes, values: Sequence[int]):
    """The analysis of :func:`skeleton`'s ``template`` with ``values`` for its integers."""
    from ..analysis.wire import decode

    return decode(pickle.dumps(_Giver(template, values).load(), protocol=pickle.HIGHEST_PROTOCOL))


@dataclass
class TableFit:
    """The analysis (and facts) at any point of a grid, by evaluation: ``template`` (the op graph, and how many
    facts follow the analysis's integers), ``base`` (every integer
    at the first node), ``varying`` (the positions of those that change with the shape) and their ``fit``."""

    template: bytes
    base: list
    varying: list
    fit: "GridValues"  # the varying integers at the nodes
    known: dict = field(default_factory=dict)  # point (sorted items) -> the lowered (analysis, facts) there

    def at(self, point: Mapping[str, int]) -> tuple:
        """(the analysis, the facts) at ``point`` (the lowered ones where the point was lowered)."""
        key = _key(point)
        if key in self.known:
            return self.known[key]
        values = list(self.base)
        for i, v in zip(self.varying, self.fit.at(point)):
            values[i] = v
        template, _, n = self.template.rpartition(b"+")
        n = int(n)
        return flesh(template, values[:len(values) - n]), tuple(values[len(values) - n:])


def fit_tables(analyze_at: Callable[[dict], tuple], nodes: Mapping[str, Sequence[int]],
               checks: Sequence[Mapping[str, int]]) -> TableFit:
    """Fit the (analysis, facts) ``analyze_at(point)`` gives (``facts``: integers of the lowering beside its
    analysis, a step's weight bytes) on the tensor grid ``nodes`` (at least degree + 1 values per
    symbol), verified at ``checks`` (points not among the nodes, lowered too). :class:`FitFailed` says why
    where the op graph changes between two points or the fit misses a check point.

    Every point is analysed from one call site (a lowering's locations hold the Python stack that made it)."""
    grid, points = fit_points(nodes, checks)
    sampled, known = {}, {}
    template = first = None
    for point in points:
        analysis, facts = analyze_at(point)
        t, values = skeleton(analysis)
        values = values + [int(f) for f in facts]
        t += b"+%d" % len(facts)
        if template is None:
            template, first = t, point
        elif t != template or len(values) != len(sampled[_key(first)]):
            raise FitFailed(f"the op graph changes with the shape (between {_said(first)} and {_said(point)})")
        sampled[_key(point)] = values
        known[_key(point)] = (analysis, tuple(facts))
    base = sampled[_key(first)]
    node_values = [sampled[_key(p)] for p in grid]
    varying = [i for i in range(len(base)) if any(v[i] != base[i] for v in node_values)]
    fit = GridValues(nodes, [[v[i] for i in varying] for v in node_values])
    for point in checks:
        values = sampled[_key(point)]
        try:
            fitted = fit.at(point)
        except ValueError:
            fitted = None
        if fitted != [values[i] for i in varying] or _constants_differ(values, base, varying):
            raise FitFailed(f"the fit on {len(grid)} shape point(s) misses the lowering at {_said(point)} (a count "
                            "of a higher degree than the nodes allow)")
    return TableFit(template, base, varying, fit, known)


def fit_points(nodes: Mapping[str, Sequence[int]], checks: Sequence[Mapping[str, int]]) -> tuple[list, list]:
    """(the nodes of the tensor grid ``nodes`` as points, every point :func:`fit_tables` analyses, in its order:
    the nodes in the order of ``itertools.product``, then the ``checks``)."""
    symbols = tuple(nodes)
    grid = [dict(zip(symbols, combo)) for combo in itertools.product(*(nodes[s] for s in symbols))]
    return grid, grid + [dict(c) for c in checks]


class GridValues:
    """Integers known at every node of a tensor grid (``values[k]``: at the k-th node in the order of
    ``itertools.product``), evaluated anywhere as the one polynomial of degree < len(nodes[s]) in each symbol
    through them: the Lagrange form, whose weights at a point are exact fractions (one per node), so every
    value is an exact integer sum; the same polynomial :func:`~mhlo_cost.walk.polyfit.fit_grid` recovers
    (:meth:`polys`), without solving for its coefficients."""

    def __init__(self, nodes: Mapping[str, Sequence[int]], values: list[list[int]]):
        import numpy as np

        self.nodes = {s: list(v) for s, v in nodes.items()}
        self.values = np.array(values, dtype=object).reshape(len(values), -1)

    def weights(self, point: Mapping[str, int]) -> list[Fraction]:
        """The Lagrange weight of every node at ``point``."""
        per_symbol = []
        for s, xs in self.nodes.items():
            x = int(point[s])
            per_symbol.append([math.prod(Fraction(x - xm, xk - xm) for xm in xs if xm != xk) for xk in xs])
        return [math.prod(ws) for ws in itertools.product(*per_symbol)]

    def at(self, point: Mapping[str, int]) -> list[int]:
        """Every value at ``point``; ValueError where one is not an integer (the degree bound is wrong)."""
        weights = self.weights(point)
        denominator = math.lcm(*(w.denominator for w in weights))
        total = sum((self.values[k] * (w.numerator * (denominator // w.denominator)) for k, w in enumerate(weights)
                     if w), start=0)
        if isinstance(total, int):  # (every weight 0: an empty table)
            return [0] * self.values.shape[1]
        out = []
        for t in total:
            q, r = divmod(int(t), denominator)
            if r:
                raise ValueError(f"a fitted count is not an integer at {dict(point)}: the degree bound is wrong")
            out.append(q)
        return out

    def polys(self) -> list:
        """The values' polynomials (:class:`~mhlo_cost.walk.poly.Poly`), by :func:`~mhlo_cost.walk.polyfit.fit_grid`."""
        from ..walk.polyfit import fit_grid

        grid = [dict(zip(self.nodes, c)) for c in itertools.product(*self.nodes.values())]
        rows = {_key(p): list(self.values[k]) for k, p in enumerate(grid)}
        return fit_grid(lambda p: rows[_key(p)], self.nodes).polys()


def _constants_differ(values: list, base: list, varying: list) -> bool:
    """Whether an integer that is the same at every node differs in ``values``."""
    vary = set(varying)
    return any(v != b for i, (v, b) in enumerate(zip(values, base)) if i not in vary)


def _key(point: Mapping[str, int]) -> tuple:
    return tuple(sorted(point.items()))


def _said(point: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in point.items())


def plan_nodes(axes: Mapping[str, Sequence[int]], per_symbol: int = 2) -> tuple[dict, list[dict]] | None:
    """Nodes (the first ``per_symbol`` values of each axis of more than one value) and one check point (the
    last value of every axis: a grid point not among the nodes) for a grid ``axes``, or None where fitting
    does not pay (it lowers as many points as the grid has, or there is no point left to check on)."""
    nodes = {s: list(v[:per_symbol]) for s, v in axes.items() if len(v) > 1}
    if not nodes:
        return None
    check = {s: v[-1] for s, v in axes.items() if s in nodes}
    if all(check[s] in nodes[s] for s in nodes):
        return None
    lowered = 1
    for v in nodes.values():
        lowered *= len(v)
    total = 1
    for v in axes.values():
        total *= len(v)
    if lowered + 1 >= total:
        return None
    return nodes, [check]
