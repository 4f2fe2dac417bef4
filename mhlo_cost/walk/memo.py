"""A pure rule's answer reused for ops of the same signature: :class:`RuleMemo`, one per walk.

A rule is a pure function of its :class:`~mhlo_cost.walk.optable.OpContext` (:mod:`mhlo_cost.walk.optable`): the
op's name, operand and result types, the attributes it reads, the walk's options and the module's facts (the last
two the same for every op of one walk). Two ops with the same name, the same types and the same value of every
attribute the rule read get the same answer, so the walk asks the rule once per such signature: an unrolled model
repeats a few dozen signatures (the 400 layers of ``benchmarks/bench_analyze.py``: 42,400 ops, a few dozen rules'
answers), as XLA's own ``HloCostAnalysis`` does not (it visits every instruction); the row of every op is still its
own (location, scope, values), only the answer is shared (a :class:`~mhlo_cost.walk.costvalue.Cost` and a
:class:`~mhlo_cost.walk.costvalue.Counted` are immutable tuples).

Which attributes a rule reads may depend on the values it has read (``"padding" in attrs``, then ``attrs["padding"]``),
so the rule is given its op's attributes through :class:`_Reads`, which logs each read in order (a name looked up,
and what it found: the attribute or its absence). Another op of the signature reuses the answer where each logged read
gives the same finding on its attributes, in order: the rule, deterministic, would have read the same and answered the
same. MLIR uniques attributes and types in a context: an attribute equals another (``==``: the same storage) exactly
where its value does, and the walk's type cache keys types by the same identity (:class:`mhlo_cost.ir.types.TypeCache`:
one :class:`~mhlo_cost.ir.tensorinfo.TensorInfo` object per type, so the key holds their ``id``). A rule that reads the
attributes any other way (iterates them, counts them, reads by position) is asked again for every op. An answer whose
rule reads no attribute reads no attribute map of the op at all (one jaxlib read fewer per op).

Not memoised: a rule that reads its op's regions (``OpRule.body``: a reducer's body is its op's own) or whose
attributes come with an ``extra`` (a Shardy operand's sharding, read from another op).
"""
from __future__ import annotations

from ..ir.tensorinfo import TensorInfo

#: Answers kept per signature (attribute values that differ); beyond them the rule is asked every time.
MAX_VARIANTS = 8
_ABSENT = object()  # what a logged read found where the name is not an attribute of the op


class _Reads:
    """An op's attribute map as a rule reads it (``name in attrs``, ``attrs[name]``, ``attrs.get(name)``), each read
    logged as (name, the attribute or :data:`_ABSENT`); any other use (iteration, ``len``, a read by position) is
    passed through and makes the answer ``opaque`` (not reused)."""

    __slots__ = ("_attrs", "log", "opaque")

    def __init__(self, attrs):
        self._attrs = attrs
        self.log: list = []
        self.opaque = False

    def _found(self, name):
        if type(name) is not str:  # a read by position
            self.opaque = True
            return self._attrs[name]
        try:
            attr = self._attrs[name]
        except KeyError:
            attr = _ABSENT
        self.log.append((name, attr))
        return attr

    def __contains__(self, name) -> bool:
        return self._found(name) is not _ABSENT

    def __getitem__(self, name):
        attr = self._found(name)
        if attr is _ABSENT:
            raise KeyError(name)
        return attr

    def get(self, name, default=None):
        attr = self._found(name)
        return default if attr is _ABSENT else attr

    def __iter__(self):
        self.opaque = True
        return iter(self._attrs)

    def __len__(self) -> int:
        self.opaque = True
        return len(self._attrs)

    def __getattr__(self, name):  # keys(), items(), values() and whatever else the map has
        self.opaque = True
        return getattr(self._attrs, name)


def _same(attrs, log) -> bool:
    """Whether each logged read finds the same on ``attrs`` (another op's attribute map)."""
    for name, attr in log:
        try:
            now = attrs[name]
        except KeyError:
            now = _ABSENT
        if attr is _ABSENT or now is _ABSENT:
            if attr is not now:
                return False
        elif not now == attr:  # the same uniqued attribute (jaxlib compares the storage)
            return False
    return True


class RuleMemo:
    """signature -> the answers a rule gave for it, each with the attribute reads it made (one walk's)."""

    __slots__ = ("_known", "known")

    def __init__(self):
        self._known: dict[tuple, list] = {}
        self.known = self._known.get  # key -> the answers kept for it (each (reads logged, answer)), or None

    @staticmethod
    def key(fn, name: str, result, operands: tuple) -> tuple:
        """The signature of an op for the rule ``fn``: its name and the identities of its result and operand types
        (the walk's cached :class:`TensorInfo` objects, one per type)."""
        if type(result) is TensorInfo:
            return fn, name, id(result), tuple(map(id, operands))
        return fn, name, tuple(map(id, result)), tuple(map(id, operands))

    def get(self, key: tuple, op):
        """The answer given before for ``key`` whose attribute reads find the same on ``op``; else None."""
        variants = self._known.get(key)
        return None if variants is None else self.answer(variants, op)

    @staticmethod
    def answer(variants: list, op):
        """The first of ``variants`` (a key's answers) whose attribute reads find the same on ``op``; else None."""
        attrs = None
        for log, out in variants:
            if not log:
                return out
            if attrs is None:
                attrs = op.attributes
            if _same(attrs, log):
                return out
        return None

    @staticmethod
    def reads(op) -> _Reads:
        """``op``'s attributes as a rule reads them, logged."""
        return _Reads(op.attributes)

    def keep(self, key: tuple, reads: _Reads, out) -> None:
        """Keep the rule's answer ``out`` for ``key``, given after the reads ``reads`` logged (unless opaque)."""
        if reads.opaque:
            return
        variants = self._known.setdefault(key, [])
        if len(variants) < MAX_VARIANTS:
            variants.append((tuple(reads.log), out))
