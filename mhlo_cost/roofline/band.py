"""Index masks read from the IR (issue 25): which key tiles a fused attention kernel visits.

A mask built from index comparisons (``i = iota; (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < w)``,
then ``where(mask, s, -inf)``) is read back, through the facts :class:`mhlo_cost.walk.masks.MaskRecorder`
records (compare directions, iota dimensions, broadcast dimensions, integer splat constants), as a conjunction of
linear constraints ``a_q q + a_k k + c {>=, >, <=, <, ==} 0`` on the score's query index ``q`` (its second-to-last
dimension) and key index ``k`` (its last). :func:`visited_fraction` counts, for each query tile of ``t`` rows, the
key tiles holding a kept element (a band of width ``w``: about ``ceil(w / t) + 1`` of them), over all tiles.

Anything else (a mask passed in as an input, an ``or``, a transpose, a float mask, an index on another dimension)
is not read: :func:`mask_fraction` is then None and the kernel is priced as before. Standard library only.
"""
from __future__ import annotations

from functools import lru_cache

from ..walk.row import short_name

_NEGATED = {"GE": "LT", "GT": "LE", "LE": "GT", "LT": "GE", "EQ": "NE", "NE": "EQ"}
_MAX_DEPTH = 24  # rows walked back from a select's predicate
#: Longer query sequences are not counted row by row (the kernel is priced as before).
MAX_QUERY_ROWS = 1 << 18


class _Unread(Exception):
    """The mask is not made of what this module reads."""


def _shape(t) -> tuple:
    return tuple(t.shape) if hasattr(t, "shape") else tuple(t[0].shape)


def _remap(value, mapping: dict, rank: int):
    """``value`` with its axis ``a`` moved to ``mapping[a]``; an axis missing from ``mapping`` is a unit one (read
    at index 0: its coefficient drops)."""
    def move(coeffs):
        out = [0] * rank
        for a, c in enumerate(coeffs):
            if c and a in mapping:
                out[mapping[a]] = c
        return tuple(out)
    if value[0] == "aff":
        return ("aff", move(value[1]), value[2])
    return (value[0], tuple((move(co), c, d) for co, c, d in value[1]))


def _aff(v):
    if v[0] != "aff":
        raise _Unread
    return v[1], v[2]


class _Reader:
    def __init__(self, rows, producers, facts):
        self.rows, self.producers, self.facts = rows, producers, facts
        self.memo: dict = {}

    def value(self, i, depth: int = 0):
        if not isinstance(i, int) or depth > _MAX_DEPTH:
            raise _Unread  # a function argument (a mask passed in), or too far back
        if i not in self.memo:
            self.memo[i] = self._value(i, depth)
        return self.memo[i]

    def _operands(self, i, depth):
        return [self.value(p, depth + 1) for p in self.producers[i]]

    def _value(self, i, depth):
        r, fact = self.rows[i], self.facts.get(i)
        name, rank = short_name(r.op), len(_shape(r.result))
        if name == "iota" and fact and fact[0] == "iota":
            return ("aff", tuple(int(a == fact[1]) for a in range(rank)), 0)
        if name == "constant" and fact and fact[0] == "int":
            return ("aff", (0,) * rank, fact[1])
        if name in ("broadcast_in_dim", "broadcast", "reshape"):
            return self._layout(i, name, fact, rank, depth)
        if name in ("convert", "copy"):
            return self.value(self.producers[i][0], depth + 1)
        ops = self._operands(i, depth)
        if name in ("add", "subtract") and len(ops) == 2:
            (a, c), (b, e) = _aff(ops[0]), _aff(ops[1])
            s = 1 if name == "add" else -1
            return ("aff", tuple(x + s * y for x, y in zip(a, b)), c + s * e)
        if name == "negate" and len(ops) == 1:
            a, c = _aff(ops[0])
            return ("aff", tuple(-x for x in a), -c)
        if name == "multiply" and len(ops) == 2:
            (a, c), (b, e) = _aff(ops[0]), _aff(ops[1])
            if any(a) and any(b):
                raise _Unread
            return ("aff", tuple(x * e + y * c for x, y in zip(a, b)), c * e)
        if name == "compare" and fact and fact[0] == "compare" and len(ops) == 2:
            (a, c), (b, e) = _aff(ops[0]), _aff(ops[1])
            return ("bool", ((tuple(x - y for x, y in zip(a, b)), c - e, fact[1]),))
        if name == "and" and len(ops) == 2 and ops[0][0] == ops[1][0] == "bool":  # ("nbool": not read)
            return ("bool", ops[0][1] + ops[1][1])
        if name == "not" and len(ops) == 1 and ops[0][0] in ("bool", "nbool"):
            kind, cons = ops[0]
            if kind == "bool" and len(cons) == 1:
                return ("bool", (negated(cons[0]),))
            return ("nbool" if kind == "bool" else "bool", cons)  # "nbool": not (every constraint)
        raise _Unread

    def _layout(self, i, name, fact, rank, depth):
        src = self.producers[i][0] if self.producers[i] else None
        value = self.value(src, depth + 1)
        in_shape = _shape(self.rows[i].operands[0])
        out_shape = _shape(self.rows[i].result)
        if name == "broadcast_in_dim":
            if not fact or fact[0] != "dims":
                raise _Unread
            dims = fact[1]
        elif name == "broadcast":
            dims = tuple(range(rank - len(in_shape), rank))
        else:  # a reshape that only adds or drops unit dimensions
            kept_in = [a for a, n in enumerate(in_shape) if n != 1]
            kept_out = [a for a, n in enumerate(out_shape) if n != 1]
            if [in_shape[a] for a in kept_in] != [out_shape[a] for a in kept_out]:
                raise _Unread
            return _remap(value, dict(zip(kept_in, kept_out)), rank)
        # an operand dimension of one is read at index 0 whatever it is broadcast to: its index does not count
        mapping = {a: d for a, d in enumerate(dims) if in_shape[a] != 1 or out_shape[d] == 1}
        return _remap(value, mapping, rank)


def negated(con):
    coeffs, c, d = con
    return coeffs, c, _NEGATED[d]


def _is_fill(rows, producers, i) -> bool:
    """Whether row ``i`` is a constant, looking through broadcasts, reshapes and converts."""
    for _ in range(8):
        if not isinstance(i, int):
            return False
        name = short_name(rows[i].op)
        if name == "constant":
            return True
        if name not in ("broadcast_in_dim", "broadcast", "reshape", "convert") or not producers[i]:
            return False
        i = producers[i][0]
    return False


def read_mask(rows, producers, facts, select: int, members) -> tuple | None:
    """The kept region of ``select`` (a member of an attention: its score on one side, a constant fill or a row
    outside the attention on the other) as constraints ``(a_q, a_k, c, direction)``, or None where the predicate
    is not an index mask."""
    ps = producers[select]
    if len(ps) != 3:
        return None
    fill = (_is_fill(rows, producers, ps[1]), _is_fill(rows, producers, ps[2]))
    if fill[0] != fill[1]:  # a constant on one side (-inf, or a gradient's 0): the score on the other
        on_true = fill[1]
    else:
        inside = set(members)
        on_true = ps[1] in inside
        if on_true == (ps[2] in inside):
            return None
    try:
        pred = _Reader(rows, producers, facts).value(ps[0])
    except (_Unread, IndexError, KeyError):
        return None
    kind, cons = pred
    if (kind == "bool") != on_true:  # the score is kept where the constraints do not all hold
        if len(cons) != 1:
            return None
        cons = (negated(cons[0]),)
    out = []
    for coeffs, c, d in cons:
        if len(coeffs) < 2 or any(coeffs[:-2]):
            return None  # an index on another dimension (a batch, a head): not a mask of the score
        if coeffs[-2:] != (0, 0):
            out.append((coeffs[-2], coeffs[-1], c, d))
        elif not {"GE": c >= 0, "GT": c > 0, "LE": c <= 0, "LT": c < 0, "EQ": c == 0, "NE": c != 0}[d]:
            return None  # masks everything: nothing to price
    return tuple(out) if out else None


def _bound(lo: int, hi: int, a: int, m: int, at_least: bool) -> tuple[int, int]:
    """``[lo, hi]`` narrowed by ``a k >= m`` (``at_least``) or ``a k <= m``."""
    if (a > 0) == at_least:
        return max(lo, -(-m // a)), hi
    return lo, min(hi, m // a)


def _keys(cons, q: int, sk: int) -> tuple[int, int]:
    """The interval of keys query ``q`` keeps (empty: lo > hi); a ``!=`` is not narrowed (an over-estimate)."""
    lo, hi = 0, sk - 1
    for aq, ak, c, d in cons:
        r = aq * q + c  # the constraint is ak k + r (d) 0
        if d == "GT":
            r, d = r - 1, "GE"
        elif d == "LT":
            r, d = r + 1, "LE"
        if d == "NE":
            continue
        if ak == 0:
            if not (r >= 0 if d == "GE" else r <= 0 if d == "LE" else r == 0):
                return 1, 0
            continue
        if d in ("GE", "EQ"):
            lo, hi = _bound(lo, hi, ak, -r, True)
        if d in ("LE", "EQ"):
            lo, hi = _bound(lo, hi, ak, -r, False)
    return lo, hi


@lru_cache(maxsize=256)
def visited_fraction(cons: tuple, sq: int, sk: int, tile: int) -> float | None:
    """The key tiles the query tiles visit (a key tile holding one kept element of one of the query tile's rows
    is visited; the kept keys of a tile's rows taken as one span), over all ``ceil(sq/t) x ceil(sk/t)``."""
    if sq < 1 or sk < 1 or tile < 1 or sq > MAX_QUERY_ROWS:
        return None
    nq, nk = -(-sq // tile), -(-sk // tile)
    visited = 0
    for qt in range(nq):
        lo_t, hi_t = sk, -1
        for q in range(qt * tile, min(sq, (qt + 1) * tile)):
            lo, hi = _keys(cons, q, sk)
            if lo <= hi:
                lo_t, hi_t = min(lo_t, lo), max(hi_t, hi)
        if lo_t <= hi_t:
            visited += hi_t // tile - lo_t // tile + 1
    return visited / (nq * nk)


def masks_of(analysis) -> dict | None:
    """The ``masks`` record of ``analysis`` (None where its walk did not record it)."""
    return analysis.record("masks")


def mask_fraction(rows, producers, facts, members, tile: int) -> float | None:
    """The fraction of key tiles the attention kernel of ``members`` visits under the first index mask read from
    one of its ``select`` members (:func:`read_mask`), None where none is read (or there is no record)."""
    if not facts:
        return None
    for i in sorted(members):
        if short_name(rows[i].op) != "select":
            continue
        cons = read_mask(rows, producers, facts, i, members)
        if cons is not None:
            sq, sk = _shape(rows[i].result)[-2:]
            return visited_fraction(cons, sq, sk, tile)
    return None
