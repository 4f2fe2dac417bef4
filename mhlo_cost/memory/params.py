"""Which arguments of the entry function are parameters, and where each is first read: the one definition
behind ``params`` (elements, as ``sum(p.numel() for p in model.parameters())`` counts them), ``param_bytes``
and the parameter column of ``report --by tree``.

Where the lowering names its arguments by the pytree they came from, the names decide: an argument is a
parameter when its path starts in a parameter collection (:data:`PARAM_ROOTS`: JAX's ``params``, the torch
frontends' ``state``, flax.nnx's ``state``), every weight, bias, norm scale and embedding included; buffers
(``buffers[...]``: batch-norm statistics), inputs (``inputs[0]``, ``tokens``) and optimizer state are not.
Where no argument is named so (hand-written IR, a function of plain arrays), the data flow decides: the
arguments read as weights (the right-hand operand of a dot, the kernel of a convolution, followed back through
reshapes, converts, slices and calls); biases and norm scales cannot be told from inputs there.
"""
from __future__ import annotations

import re
from heapq import merge
from operator import itemgetter

from ..walk.frames import Region
from .sweep import arrays

#: The pytree roots whose leaves are parameters.
PARAM_ROOTS = frozenset({"params", "param", "parameters", "state", "weights", "variables"})

_ROOT = re.compile(r"^\s*([A-Za-z_]\w*)\s*(\[|\.|$)")


def root(name: str) -> str:
    """The pytree root of an argument's name: ``state['fc.weight']``, ``state.params['w']`` -> ``state``; ""
    for none."""
    m = _ROOT.match(name or "")
    return m.group(1) if m else ""


#: Keys inside a parameter collection that hold no parameters (a training state's optimizer, statistics).
NOT_PARAMS = frozenset({"opt_state", "optimizer", "optim", "batch_stats", "buffers", "rngs", "rng", "step"})

_KEY = re.compile(r"\[['\"]?([^'\"\]]*)['\"]?\]|\.(\w+)")


def is_parameter(name: str) -> bool:
    """Whether an argument named ``name`` is a parameter: rooted in a parameter collection, and under no key
    of :data:`NOT_PARAMS` (``state['opt_state'][...]`` is not)."""
    if root(name) not in PARAM_ROOTS:
        return False
    return not any((a or b) in NOT_PARAMS for a, b in _KEY.findall(name))


def named_parameters(rec) -> set | None:
    """Keys of the entry arguments named as parameters, or None where no argument is named so."""
    names = list(rec.arg_names)
    if not any(root(n) in PARAM_ROOTS for n in names):
        return None
    return {k for (k, _, _), n in zip(rec.args, names) if is_parameter(n)}


def weight_arguments(sw, args: set) -> set:
    """The arguments read as weights: the right-hand operand of a dot or the kernel of a convolution, followed
    back through reshapes, transposes, converts, slices and gathers, and across calls, loops and ``shard_map``
    into the arguments they stand for."""
    found, seen, todo = set(), set(), list(sw.weights)
    while todo:
        k = todo.pop()
        if k in seen:
            continue
        seen.add(k)
        if k in args:
            found.add(k)
        for m in (sw.src, sw.alias):
            if k in m:
                todo.append(m[k])
        todo.extend(sw.passed.get(k, ()))
    return found


def parameters(sw, rec, args: set) -> set:
    """Keys of the entry arguments that are parameters (see the module's note)."""
    named = named_parameters(rec)
    return named if named is not None else weight_arguments(sw, args)


def first_readers(sw, rows, params: set, entry=None) -> dict[int, int]:
    """Parameter key -> the position of the first row that reads it (directly, or inside a callee or a loop
    it is passed to); a parameter no row reads is left out. ``entry``: the entry frame, whose regions (a
    loop's body, a ``shard_map`` body, a callee) hold their rows' reads in frames of their own."""
    up: dict[int, list] = {}
    for k, v in sw.alias.items():
        up.setdefault(k, []).append(v)
    for k, v in sw.passed.items():
        up.setdefault(k, []).extend(v)
    memo: dict[int, int | None] = {}

    def resolve(k: int):
        if k in memo:
            return memo[k]
        memo[k] = None  # cycles: a loop's carried value stands for itself
        found, todo, seen = None, [k], set()
        while todo and found is None:
            x = todo.pop()
            if x in seen:
                continue
            seen.add(x)
            if x in params:
                found = x
            todo.extend(up.get(x, ()))
        memo[k] = found
        return found

    out: dict[int, int] = {}
    reach = _reaching(up, params)  # only these keys resolve to a parameter
    read = _reads_of if arrays() else _reads_in_python
    found = read(sw, rows, reach)
    nested = _nested_reads(sw, entry, reach, read) if entry is not None else ()
    if nested:  # in program order with the entry's own rows
        found = merge(found, nested, key=itemgetter(1))
    for k, i in found:
        p = resolve(k)
        if p is not None and p not in out:
            out[p] = i
            if len(out) == len(params):
                break
    return out


def _reads_of(sw, rows, reach: set):
    """(key, row position) of every read of a key in ``reach``, in program order: found among the keys the
    sweep flattened already (numpy)."""
    import numpy as np

    keys, lens = sw.reads(rows)  # every key read, row after row, and how many each row reads
    among = np.sort(np.fromiter(reach, np.int64, len(reach)))
    hit = np.flatnonzero(among[np.minimum(np.searchsorted(among, keys), len(among) - 1)] == keys) if len(among) \
        else np.zeros(0, np.intp)
    at = np.searchsorted(np.cumsum(lens), hit, side="right")  # the row of each
    return zip(keys[hit].tolist(), at.tolist())


def _nested_reads(sw, entry, reach: set, read) -> list:
    """(key, row position in the table) of the first read of each key in ``reach`` by the rows of the frames that
    the regions of ``entry`` replay, nested ones included, in program order. A read of a child's argument is a
    read of the operand the region passes for it (a callee called at several sites reads each site's own); a
    folded replay (its rows an earlier call's) reads at the region's first row. Each frame is looked at once,
    however often it is called (a call graph that fans out stays linear), without recursion (a chain of calls
    as deep as the walk follows)."""
    own: dict[int, dict] = {}  # frame -> key -> the first of its own rows to read it
    under: dict[int, dict] = {}  # frame -> key -> the first read by the frames its regions replay (positions its)
    stack, entered = [(entry, False)], set()
    while stack:
        fr, ready = stack.pop()
        if id(fr) in under:
            continue
        kids = [c for it in fr.items if isinstance(it, Region) for c, _, _ in it.children if c is not None]
        if not ready:
            if id(fr) in entered:  # (a cycle: the frame is being looked at below itself)
                continue
            entered.add(id(fr))
            stack.append((fr, True))
            stack.extend((c, False) for c in kids if id(c) not in under)
            continue
        under[id(fr)] = _replayed(fr, own, under, lambda f: _first(read(sw, f.rows, reach)))
    return sorted(under.get(id(entry), {}).items(), key=itemgetter(1))


def _replayed(fr, own: dict, under: dict, first_of) -> dict:
    """key -> the first read by the frames the regions of ``fr`` replay (their own rows' reads ``own``, made by
    ``first_of``, and theirs ``under``), keys and positions as ``fr`` sees them."""
    out: dict = {}
    for it in fr.items:
        if not isinstance(it, Region):
            continue
        for child, start, k in it.children:
            if child is None:
                continue
            if id(child) not in own:
                own[id(child)] = first_of(child)
            at = start if k else it.start
            for inner in (own[id(child)], under.get(id(child), {})):
                for key, i in inner.items():
                    j = it.argpos.get(key)
                    kk, pos = (key if j is None else it.uses[j]), (at + i if k else at)
                    if out.get(kk, pos + 1) > pos:
                        out[kk] = pos
    return out


def _first(reads) -> dict:
    """key -> its first position, of (key, position) pairs in program order."""
    out: dict = {}
    for key, i in reads:
        out.setdefault(key, i)
    return out


def _reads_in_python(sw, rows, reach: set):
    """:func:`_reads_of` without numpy, row by row."""
    for i, vals in enumerate(sw.values(rows)):
        if vals:
            for k in vals[0]:
                if k in reach:
                    yield k, i


def _reaching(up: dict, params: set) -> set:
    """The keys from which ``up`` leads to a parameter (the parameters included): only they resolve to one."""
    down: dict[int, list] = {}
    for k, vs in up.items():
        for v in vs:
            down.setdefault(v, []).append(k)
    found, todo = set(params), list(params)
    while todo:
        for k in down.get(todo.pop(), ()):
            if k not in found:
                found.add(k)
                todo.append(k)
    return found
