"""Op rules as pure functions, found by dialect-qualified op name: :class:`OpContext`, :class:`OpRule`,
:class:`RuleTable`.

A rule is a function of one :class:`OpContext` (the op's name, operand and result types, attributes, the analysis
options, and where it asks for them its regions' summaries) that returns a
:class:`~mhlo_cost.walk.costvalue.Cost`, or a :class:`~mhlo_cost.walk.costvalue.Counted` where the row
says more (another kind, a target, a collective, a warning). What it reads of the module (partitions, replicas,
Shardy meshes) is the walk's :class:`ModuleFacts`, read once per module (``ctx.module``), and what it reads of
other ops (a Shardy operand's sharding) its ``extra`` gives, in ``ctx.attrs``. It reads nothing else and changes
nothing: the walk (:meth:`mhlo_cost.walk.base.IRVisitor.count`) reads the types, calls it, and makes the row
from the identity it owns (op, location, scope, values).

A subject's rules are one :class:`RuleTable` (``MATRIX = RuleTable("matrix")``, filled with
``@MATRIX.rule("dot_general", kind="dot")``), in the module named for that subject (:mod:`.matrix`,
:mod:`.vector`, :mod:`.linalg`, :mod:`.collective`, :mod:`.shardy`, :mod:`.custom_call`). The walk finds an op's
rule in one registry, the tables :func:`compose`-d into one mapping (:data:`mhlo_cost.walk.registry.RULES`: every
built-in table), where an op that two tables claim is refused, so which rule counts an op is never decided by order.

Standard library only (the attributes it holds are the bindings' objects, read by the rules themselves).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Callable, Mapping, NamedTuple

from .costvalue import Cost, io_cost

#: Dialects whose ops share rules by their name without the dialect (``visit_<name>``, a table's bare names).
SHARED_DIALECTS = ("stablehlo", "mhlo", "chlo")
_SHARED = frozenset(SHARED_DIALECTS)

#: How the walk reads an op's operand types for a rule: all of them; none (``constant``: the op has no
#: operands); or as its result's type (StableHLO's SameOperandsAndResultType ops: read once, not per operand).
READS = ("operands", "none", "same_type")


class ModuleFacts(NamedTuple):
    """What a rule may read of the module an op is in: read once per module by the walk, frozen."""

    num_partitions: int = 1  # mhlo.num_partitions (1 where absent or not an integer)
    num_replicas: int = 1  # mhlo.num_replicas
    meshes: Mapping = MappingProxyType({})  # Shardy mesh name -> {axis name: size} (read-only)


class OpContext(NamedTuple):
    """What a rule may read of one op: frozen, and free of the IR except the attributes."""

    name: str  # dialect-qualified: "stablehlo.dot_general"
    operands: tuple  # TensorInfo of each operand
    result: object  # TensorInfo of the result (a tuple of them for several results)
    attrs: object  # attribute name -> attribute (the op's attribute map; any mapping where a test builds one)
    options: object  # the walk's AnalysisOptions
    bytes_read: int  # bytes of the operands
    bytes_written: int  # bytes of the results
    bodies: tuple = ()  # per region, where the rule asks for them: what its OpRule.body says of it
    module: ModuleFacts = ModuleFacts()  # the module's facts (partitions, replicas, meshes): the collectives read them

    @property
    def io(self) -> Cost:
        """The cost of reading every operand and writing every result, and no FLOP."""
        return io_cost(self.bytes_read, self.bytes_written)

    @property
    def results(self) -> tuple:
        """The result types, as a tuple however many there are."""
        return self.result if isinstance(self.result, tuple) else (self.result,)

    @property
    def out_elems(self) -> int:
        """Elements of the result (all results together)."""
        if isinstance(self.result, tuple):
            return sum(t.nelems for t in self.result)
        return self.result.nelems


class OpRule(NamedTuple):
    """One op's rule: the function, the row's kind, and what the walk reads for it."""

    fn: Callable  # OpContext -> Cost | Counted
    kind: str  # the row's kind (dot, conv, elementwise, ...), unless the answer is a Counted with its own
    weights: bool = False  # record which operands are function arguments (the matrix rules)
    reads: str = "operands"  # one of READS
    body: Callable | None = None  # (region, functions) -> a summary, for OpContext.bodies
    # op -> a mapping of what the rule reads of other ops (a Shardy operand's sharding), which the walk puts in
    # front of the op's own attributes in OpContext.attrs
    extra: Callable | None = None

    def __call__(self, ctx: OpContext):
        return self.fn(ctx)


def qualified(name: str) -> tuple[str, ...]:
    """``dot_general`` -> the op in every one of :data:`SHARED_DIALECTS`; ``sdy.all_gather`` -> itself."""
    return (name,) if "." in name else tuple(f"{d}.{name}" for d in SHARED_DIALECTS)


def shared_short_name(op_name: str) -> str | None:
    """The short name of a StableHLO / MHLO / CHLO op (the name its rules are keyed by); None for other dialects."""
    dialect, _, name = op_name.partition(".")
    return name if dialect in _SHARED else None


class RuleTable(dict):
    """One subject's rules (``name``: matrix, vector, ...): dialect-qualified op name -> :class:`OpRule`."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name

    def rule(self, *names: str, kind: str, weights: bool = False, reads: str = "operands", body=None, extra=None):
        """Decorator: the function is the rule of ops ``names`` (bare names: every shared dialect)."""
        def declare(fn):
            for name in names:
                self.add(qualified(name), OpRule(fn, kind, weights, reads, body, extra))
            return fn
        return declare

    def add(self, ops, rule: OpRule) -> None:
        """``rule`` for each dialect-qualified name in ``ops``; an op given a second rule here is refused."""
        if rule.reads not in READS:
            raise ValueError(f"reads must be one of {', '.join(READS)}, got {rule.reads!r}")
        for op in ops:
            if op in self:
                raise TypeError(f"{op}: a second rule in the {self.name} table")
            self[op] = rule

    def missing(self, names) -> list[str]:
        """The bare names of ``names`` this table has no rule for yet (a declared table fills the rest)."""
        return [n for n in names if qualified(n)[0] not in self]


def compose(*tables: RuleTable) -> Mapping[str, OpRule]:
    """The rules of ``tables`` as one read-only mapping, dialect-qualified op name -> :class:`OpRule`; an op that
    two of them claim is refused (TypeError naming both), so the order of ``tables`` decides nothing."""
    found: dict[str, OpRule] = {}
    owner: dict[str, str] = {}
    for table in tables:
        for op, rule in table.items():
            if op in found:
                raise TypeError(f"{op}: a rule in both the {owner[op]} and the {table.name} tables")
            found[op], owner[op] = rule, table.name
    return MappingProxyType(found)
