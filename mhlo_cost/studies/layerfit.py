"""A deep model's analysis without lowering every layer: the op table of a program whose layers repeat, rebuilt
at any depth from its lowering at depth 2 (and depth 1, to know where the layers are).

The program at depth 2 is ``P + L1 + L2 + S`` and at depth 1 ``P + L1 + S``: ``L2`` has ``m`` rows, the
difference of the two lengths. :func:`repeat_layers` checks that the rows of layer 2 equal those of layer 1
up to the layer's index (every digit run in a name or scope that differs goes up by the same step with each
layer, ``layers.0`` -> ``layers.1``) and the values they read and make, and builds ``P + L1 + ... + LD + S``:
each new layer's rows are layer 2's with fresh value keys for what a layer makes, the previous layer's for what
it reads of it, and the same keys for what every layer reads (a mask, rotary tables); the arguments, argument
names and returned values that come once per layer are repeated in place, and so are the entry's calls (a
function's frame is one however often it is called). The rows after the layers keep what they read of the last
layer and move a layer index in their names on (a last layer unlike the others is among them: torchax's).
With ``base`` 2 the program's first layer is left out of the repeated unit (the "depth 1" program above is the
one at depth 2): a lowering keeps one copy of a constant every layer uses, in the first layer. Only programs
whose entry holds every row and whose regions are calls are rebuilt (what a step lowers); anything else (loops,
branches, shard_map bodies, aliases) raises :class:`~mhlo_cost.studies.gridfit.FitFailed` saying why, and the
caller lowers at full depth. The caller verifies the rebuilt table against one lowering at a
depth not used to rebuild it (the independent reference: the serve grid's depth 4), compared as
:func:`~mhlo_cost.studies.gridfit.skeleton` sees them.
"""
from __future__ import annotations

import copy
import re
from dataclasses import fields
from functools import lru_cache
from operator import attrgetter

from ..walk.row import LocationInfo, Row
from .gridfit import FitFailed
from .layerfit_positions import Shift, calls

#: Fresh value keys are this plus a count (no hash of an MLIR value, and no count of a program, comes near it).
FRESH_BASE = 1 << 61
_DIGITS = re.compile(r"\d+")
_KEYED = ("index", "values", "loc", "scope")


@lru_cache(maxsize=1 << 16)  # (a program's names repeat, layer after layer: each made once)
def _norm(s: str) -> str:
    return _DIGITS.sub("#", s)


#: Per row class, its fields but :data:`_KEYED` read at once (``operator.attrgetter``: one C call a row, not a
#: ``fields()`` look-up and a ``getattr`` per field; the same tuple).
_SIG_FIELDS: dict = {}


def _sig(row) -> tuple:
    """A row without its value keys, program order and layer index: what must repeat."""
    get = _SIG_FIELDS.get(type(row))
    if get is None:
        get = _SIG_FIELDS[type(row)] = attrgetter(*(f.name for f in fields(row) if f.name not in _KEYED))
    loc = row.loc
    return (get(row), _norm(row.scope), _norm(loc.name), _norm(loc.scope), loc.file_line, loc.stack)


def _stepped(s1: str, s2: str, k: int) -> str:
    """The string of layer ``k`` (1-based) from those of layers 1 and 2: each digit run that differs goes up by
    the same step per layer. FitFailed where they differ otherwise."""
    if s1 == s2:
        return s1
    p1, p2 = _DIGITS.split(s1), _DIGITS.split(s2)
    n1, n2 = _DIGITS.findall(s1), _DIGITS.findall(s2)
    if p1 != p2:
        raise FitFailed(f"layer 2 differs from layer 1 ({s1!r} vs {s2!r})")
    out = [p1[0]]
    for a, b, rest in zip(n1, n2, p1[1:]):
        out.append(a if a == b else str(int(a) + (k - 1) * (int(b) - int(a))))
        out.append(rest)
    return "".join(out)


def _flat(analysis) -> tuple:
    """(the rows, the returned keys) of the analysis of a program whose entry's rows are the program's, its region
    items calls (of functions with frames of their own) and its one return last; FitFailed for anything else."""
    rec = analysis.liveness
    if rec is None or rec.entry is None or rec.alias or rec.local or analysis.__dict__.get("arguments"):
        raise FitFailed("the program is not one plain function (aliases, per-device values or a training step)")
    frame = rec.entry
    items = frame.items
    if (len(frame.rows) != len(analysis.rows) or any(a is not b for a, b in zip(frame.rows, analysis.rows))
            or frame.pending or frame.collected or not items or type(items[-1]).__name__ != "Return"
            or items[-1].pos != len(analysis.rows)
            or any(type(it).__name__ != "Region" or it.name != "call" or it.branches for it in items[:-1])):
        raise FitFailed("the program is not one plain function (loops, branches or regions other than calls)")
    return analysis.rows, items[-1].uses


def find_layer(rows1: list, rows2: list) -> tuple[int, int]:
    """(q, m): ``rows2`` is ``rows1[:q + m] + rows2[q:q + m] + rows1[q + m:]`` with layer 2 (``rows2[q + m:q +
    2m]``) equal to layer 1 (``rows2[q:q + m]``) as :func:`_sig` sees them; FitFailed where no such split is."""
    s1, s2 = [_sig(r) for r in rows1], [_sig(r) for r in rows2]
    m = len(s2) - len(s1)
    if m <= 0:
        raise FitFailed("the program at depth 2 is not longer than at depth 1")
    lcp = 0
    while lcp < len(s1) and s1[lcp] == s2[lcp]:
        lcp += 1
    for q in range(0, lcp - m + 1):
        if s2[q:q + m] == s2[q + m:q + 2 * m] and s2[q + 2 * m:] == s1[q + m:]:
            return q, m
    raise FitFailed("the rows of layer 2 are not those of layer 1 (the layers differ)")


class _Keys:
    """Which key of layer 2 is what at layer k: shared (the same key), carried (the previous layer's key) or the
    layer's own (fresh)."""

    def __init__(self, layer1: list, layer2: list, defined_outside: set, fresh_base: int):
        self.f: dict = {}  # layer-1 key -> layer-2 key
        pairs = [(r1.values, r2.values) for r1, r2 in zip(layer1, layer2)]
        pairs += [(r1.loc.site, r2.loc.site) for r1, r2 in zip(layer1, layer2)]
        for a, b in pairs:
            for x, y in zip(_ints(a), _ints(b)):
                if self.f.setdefault(x, y) != y:
                    raise FitFailed("a value of layer 1 stands for two values of layer 2")
        if len(set(self.f.values())) != len(self.f):
            raise FitFailed("two values of layer 1 stand for one value of layer 2")
        self.defs1 = {k for r in layer1 for k in _ints(r.values[1:])} | {r.loc.site for r in layer1}
        self.defs2 = {k for r in layer2 for k in _ints(r.values[1:])} | {r.loc.site for r in layer2}
        for x, y in self.f.items():
            if x != y and y in defined_outside:
                raise FitFailed("a layer reads a value made outside the layers that differs per layer")
        self.images = set(self.f.values())  # (what ``at`` asks of every key: a set, not the dict's values)
        self.memo: dict = {}
        self.next = fresh_base

    def at(self, key, k: int):
        """Layer 2's ``key`` at layer ``k`` (>= 2)."""
        if k == 2 or key not in self.images:
            return key
        memo = self.memo.get((key, k))
        if memo is None:
            inverse = self._inverse(key)
            if inverse == key:
                memo = key
            elif key in self.defs1:  # carried: layer k reads layer k-1's value
                memo = self.at(self.f[key], k - 1)
            else:
                memo, self.next = self.next, self.next + 1
            self.memo[key, k] = memo
        return memo

    def _inverse(self, key):
        if not hasattr(self, "_inv"):
            self._inv = {y: x for x, y in self.f.items()}
        return self._inv[key]


def _ints(obj) -> list:
    if type(obj) is int:
        return [obj]
    out = []
    if isinstance(obj, (tuple, list)):
        for x in obj:
            out.extend(_ints(x))
    return out


def _map_keys(obj, fn):
    if type(obj) is int:
        return fn(obj)
    if isinstance(obj, tuple):
        if all(type(x) is int for x in obj):
            return tuple(map(fn, obj))
        return tuple(_map_keys(x, fn) for x in obj)
    return obj


class _Objects:
    """Layer ``k``'s copy of an object a row of layer 2 holds (a result type, an operand tuple): the same object
    where layer 1's rows or those before hold it too (shared), else one new copy per layer, as a lowering at that
    depth makes (the wire sends shared objects once)."""

    def __init__(self, before: list):
        self.shared = {id(getattr(r, f)) for r in before for f in ("result", "operands")}
        self.memo: dict = {}

    def at(self, obj, k: int):
        if k == 2 or id(obj) in self.shared or obj == ():
            return obj
        key = (id(obj), k)
        if key not in self.memo:
            self.memo[key] = tuple(list(obj)) if isinstance(obj, tuple) else copy.copy(obj)
        return self.memo[key]


def _layer_rows(layer1: list, layer2: list, keys: _Keys, objs: _Objects, k: int, delta: int, shift: int = 0,
                locs: dict | None = None) -> list:
    """The rows of layer ``k`` (>= 3), their index ``shift`` on (``locs``: the new locations by the id of layer
    2's, to share with another list of the same rows)."""
    out, scopes, key_at = [], {}, {}
    locs = {} if locs is None else locs

    def at(x):
        y = key_at.get(x)
        if y is None:
            y = key_at[x] = keys.at(x, k)
        return y

    for r1, r2 in zip(layer1, layer2):
        loc = r2.loc if r1.loc is r2.loc else locs.get(id(r2.loc))
        if loc is None:
            a, b = r1.loc, r2.loc
            loc = locs[id(b)] = LocationInfo.resolved(_stepped(a.name, b.name, k), _stepped(a.scope, b.scope, k),
                                                      b.file_line, keys.at(b.site, k), b.stack)
        scope = scopes.get((r1.scope, r2.scope))
        if scope is None:
            scope = scopes[r1.scope, r2.scope] = _stepped(r1.scope, r2.scope, k)
        out.append(_with(r2, values=_map_keys(r2.values, at), loc=loc, scope=scope,
                         index=r2.index + (k - 2) * delta + shift,
                         result=objs.at(r2.result, k), operands=objs.at(r2.operands, k)))
    return out


_ROW_FIELDS = tuple(f.name for f in fields(Row))
_ROW_VALUES = attrgetter(*_ROW_FIELDS)
_ROW_AT = {name: i for i, name in enumerate(_ROW_FIELDS)}


def _with(row, **changes):
    """``dataclasses.replace(row, **changes)`` for a :class:`~mhlo_cost.walk.row.Row`, without looking up its
    fields again for every row (a rebuilt table makes one per row of every further layer)."""
    values = list(_ROW_VALUES(row))
    for name, value in changes.items():
        values[_ROW_AT[name]] = value
    return Row(*values)


def _after_rows(after1: list, after2: list, keys: _Keys, depth: int, delta: int) -> list:
    """The rows after the layers at ``depth``, from those at the shallow (``after1``) and deep (``after2``)
    depths: what they read of layer 2 is the last layer's; a layer index in their names moves on (a last layer
    unlike the others is among them)."""
    last = (lambda x: keys.at(x, depth) if x in keys.defs2 else x)
    out, locs = [], {}
    for r1, r2 in zip(after1, after2):
        loc = locs.get(id(r2.loc))
        if loc is None:
            a, b = r1.loc, r2.loc
            loc = b if (a.name, a.scope) == (b.name, b.scope) else LocationInfo.resolved(
                _stepped(a.name, b.name, depth), _stepped(a.scope, b.scope, depth), b.file_line, b.site, b.stack)
            locs[id(b)] = loc
        out.append(_with(r2, values=_map_keys(r2.values, last), index=r2.index + (depth - 2) * delta, loc=loc,
                         scope=_stepped(r1.scope, r2.scope, depth)))
    return out


def _expand(items: list, key_of, keys: _Keys, depth: int, make, other=None) -> list:
    """A list (arguments, returned values) of the program at depth 2 at ``depth``: each run of layer 1's items
    followed by layer 2's same run gets the run of every further layer (``make(item of layer 2, k)``); an item
    layer 2 made alone is the last layer's; any other item is ``other(its index in the shallow program's list,
    the item)`` (default: itself). FitFailed where layer 2's items do not follow layer 1's."""
    inverse = {y: x for x, y in keys.f.items() if x != y}
    present = {key_of(it) for it in items}
    first = {i for i, it in enumerate(items) if keys.f.get(key_of(it), key_of(it)) != key_of(it)
             and keys.f[key_of(it)] in present}
    out, i, extra = [], 0, 0
    while i < len(items):
        if i not in first:
            key = key_of(items[i])
            if key in inverse and inverse[key] in present:
                raise FitFailed("the arguments or results of layer 2 do not follow those of layer 1")
            out.append(make(items[i], depth) if key in keys.defs2 else
                       other(i - extra, items[i]) if other else items[i])
            i += 1
            continue
        r = 1
        while i + r in first:
            r += 1
        run1, run2 = items[i:i + r], items[i + r:i + 2 * r]
        if [keys.f[key_of(x)] for x in run1] != [key_of(x) for x in run2]:
            raise FitFailed("the arguments or results of layer 2 do not follow those of layer 1")
        out += run1 + run2
        for k in range(3, depth + 1):
            out += [make(x, k) for x in run2]
        i += 2 * r
        extra += r
    return out


def _sorted_by_name(args: list, shallow: list, deep: list, pairs: list) -> list:
    """``args`` (argument, name, elements) with each run of one argument tree (a name up to ``[``) in the order
    of the names where the layer index is in a quoted key (``pairs``: names of layer 1 and 2's arguments) and the
    programs at both depths have it so: torchax orders a state dict's tensors by name (``layers.10`` before
    ``layers.2``); a list's (``cache[10]``, ``params['layers'][10]``) stay in the order of their index."""
    def tree(name: str) -> str:
        return name.split("[", 1)[0]

    def ordered(names: list, t: str) -> bool:
        mine = [n for n in names if tree(n) == t]
        return mine == sorted(mine)

    keep = {tree(b) for a, b in pairs if _index_quoted(a, b)}
    keep = {t for t in keep if ordered(shallow, t) and ordered(deep, t)}
    out, i = [], 0
    while i < len(args):
        j = i + 1
        while j < len(args) and tree(args[j][1]) == tree(args[i][1]):
            j += 1
        run = args[i:j]
        out += sorted(run, key=lambda a: a[1]) if tree(args[i][1]) in keep else run
        i = j
    return out


def _index_quoted(a: str, b: str) -> bool:
    """Whether the first digit run that differs between ``a`` and ``b`` is inside a quoted string."""
    for ma, mb in zip(_DIGITS.finditer(a), _DIGITS.finditer(b)):
        if ma.group() != mb.group():
            return a[:ma.start()].count("'") % 2 == 1
    return False


def entry_args(shallow, deep, keys, depth: int) -> list:
    """The program's arguments at ``depth`` layers, (key, name, elements) each: ``deep``'s with every layer
    argument repeated (named as the layer's), in the order of ``shallow``'s names."""
    rec = deep.liveness
    args = _expand(list(zip(rec.args, rec.arg_names, rec.arg_elems)), lambda a: a[0][0], keys, depth,
                   lambda a, k: ((keys.at(a[0][0], k),) + tuple(a[0][1:]), _arg_name(rec, a, keys, k), a[2]),
                   lambda j, a: (a[0], _stepped(shallow.liveness.arg_names[j], a[1], depth), a[2]))
    names = dict(zip((a[0] for a in rec.args), rec.arg_names))
    pairs = [(names[x], names[y]) for x, y in keys.f.items() if x != y and x in names and y in names]
    return _sorted_by_name(args, shallow.liveness.arg_names, rec.arg_names, pairs)


def check_plain(shallow, deep) -> None:
    """FitFailed where two lowerings of one program at consecutive depths differ in more than their layers (warnings,
    entry, options, source), or where the program has asynchronous collectives or phases."""
    for name in ("warnings", "entry", "options", "source"):
        if shallow.__dict__.get(name) != deep.__dict__.get(name):
            raise FitFailed(f"the program's {name} change with its depth")
    if deep.__dict__.get("async_done") or deep.__dict__.get("_phases"):
        raise FitFailed("the program has asynchronous collectives or phases")


def repeat_layers(shallow, deep, depth: int, base: int = 1):
    """The analysis of the program at ``depth`` layers from ``shallow`` (its analysis at depth ``base``) and
    ``deep`` (at ``base + 1``). FitFailed says why where the layers do not repeat or the program is not plain.

    Below, "layer 1" and "layer 2" are the program's last layers at depth ``base + 1``, and ``depth`` counts
    from the first of them. A base of 2 leaves the program's first layer out of the repeated unit: a lowering
    keeps one copy of a constant that every layer uses, in the first layer (torchax's programs)."""
    from ..walk.frames import Frame, Recording, Return

    rows1, _ = _flat(shallow)
    rows2, uses = _flat(deep)
    if depth <= base + 1:
        return shallow if depth == base else deep
    depth -= base - 1
    check_plain(shallow, deep)
    q, m = find_layer(rows1, rows2)
    layer1, layer2 = rows2[q:q + m], rows2[q + m:q + 2 * m]
    delta = layer2[0].index - layer1[0].index
    if any(b.index - a.index != delta for a, b in zip(layer1, layer2)):
        raise FitFailed("the rows of layer 2 are not in layer 1's order")
    outside = {x for r in rows2[:q] + rows2[q + 2 * m:] for x in _ints(r.values[1:])}
    keys = _Keys(layer1, layer2, outside, FRESH_BASE)
    objs = _Objects(rows2[:q + m])
    rows = rows2[:q + 2 * m]
    for k in range(3, depth + 1):
        rows += _layer_rows(layer1, layer2, keys, objs, k, delta)
    rows += _after_rows(rows1[q + m:], rows2[q + 2 * m:], keys, depth, delta)
    uses = _expand(list(uses), lambda x: x, keys, depth, lambda x, k: keys.at(x, k))
    args = entry_args(shallow, deep, keys, depth)
    entry = Frame()
    entry.rows = list(rows)
    entry.items = calls(deep.liveness.entry.items[:-1], q, m, depth, keys) + [Return(len(rows), tuple(uses))]
    out = copy.copy(deep)
    for memo in ("_memory", "_memory_alongside", "_ops", "_summary_memo"):
        out.__dict__.pop(memo, None)
    out.rows = rows
    shift = Shift(q, m, depth, keys)
    out.producers = shift.producers(deep.producers)
    out.records = {name: shift.positions(table) for name, table in deep.records.items()}
    out.liveness = Recording(entry, [a[0] for a in args], {}, {}, [a[1] for a in args], [a[2] for a in args])
    return out


def _arg_name(rec, arg, keys: _Keys, k: int) -> str:
    """Layer ``k``'s name of layer 2's argument ``arg`` (stepped from layer 1's)."""
    inverse = {y: x for x, y in keys.f.items()}
    first = inverse[arg[0][0]]
    for a, name in zip(rec.args, rec.arg_names):
        if a[0] == first:
            return _stepped(name, arg[1], k)
    return arg[1]
