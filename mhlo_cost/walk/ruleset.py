"""Rule sets: what the walk counts per op, as siblings the caller composes (``IRVisitor(module, entry,
rules=[TFlopsVisitor, VectorVisitor, ...])``), not as base classes of the walk.

A rule set's op rules are pure functions in its :class:`~mhlo_cost.walk.optable.RuleTable` (``table``), keyed
by dialect-qualified op name: the one place op rules are found. A rule set defines no ``visit_<name>`` method
(refused as it is defined): what needs the walk (a callee's rows, a shard_map body, a composite's decomposition)
is traversal, the walk's own ``visit_<name>`` methods (:func:`mhlo_cost.walk.base.rule_name`). The walk runs
the first composed rule set's rule for each op name (looked up once per name), its own traversal (calls, loops,
branches, shard_map bodies, composites) where no rule set has one, and the first ``generic_rule`` of the rule
sets for the rest. A ``generic_rule`` reaches the walk only through the public helpers bound here (``emit``,
``loc``, ``replay``, ...) and ``self.walk``'s public methods; its options (the convolution padding convention,
...) are ``self.options``.
A rule set runs alone as ``IRVisitor(module, entry, rules=[TFlopsVisitor]).run()``: an op it has no rule for
then has its regions walked and makes no row.
"""
from __future__ import annotations

from .optable import SHARED_DIALECTS as _SHARED, RuleTable
from .options import AnalysisOptions

#: Dialects whose ops share rules by their name without the dialect (``visit_<name>``).
SHARED_DIALECTS = frozenset(_SHARED)


def rule_name(op_name: str) -> str:
    """The visit method of an op: ``visit_<name>`` for :data:`SHARED_DIALECTS`, else ``visit_<dialect>_<name>``."""
    dialect, _, name = op_name.partition(".")
    if dialect in SHARED_DIALECTS:
        return "visit_" + name
    return f"visit_{dialect}_{name}".replace(".", "_")


def shared_short_name(op_name: str) -> str | None:
    """The short name of a StableHLO / MHLO / CHLO op (the name its rules are keyed by); None for other dialects."""
    dialect, _, name = op_name.partition(".")
    return name if dialect in SHARED_DIALECTS else None


#: Which rule set counts an op, per metric: every op of the table of every rule set with a :attr:`RuleSet.metric`,
#: keyed by :func:`rule_name` of the dialect-qualified op names it counts
#: (``visit_dot_general``: ``stablehlo.`` / ``mhlo.`` / ``chlo.dot_general``; ``visit_sdy_all_gather``:
#: ``sdy.all_gather``) -> {metric: rule set}. Look an op up with :func:`rules_for`.
RULES: dict[str, dict[str, type]] = {}


def claim(rule_set: type, *methods: str) -> None:
    """Register ``rule_set``'s rules ``methods``; a second rule set claiming the same ops for the same metric is
    refused (TypeError, at import, and none of ``methods`` is registered), so that which rule counts an op is
    never decided by order alone."""
    metric = rule_set.metric
    if metric is None:
        return
    for method in methods:
        other = RULES.get(method, {}).get(metric)
        if other is not None and other is not rule_set:
            raise TypeError(f"{rule_set.__name__}.{method}: {other.__name__} already counts these ops for {metric}")
    for method in methods:
        RULES.setdefault(method, {})[metric] = rule_set


def rules_for(op_name: str) -> dict[str, type]:
    """The registered rule sets that count ops named ``op_name`` (dialect-qualified), by metric."""
    return dict(RULES.get(rule_name(op_name), {}))


def claimed(rule_set: type) -> list[str]:
    """The rule names (:func:`rule_name`) of the ops of the table ``rule_set`` declares itself."""
    table = vars(rule_set).get("table")
    if not table:
        return []
    if rule_set.metric is not None and table.metric != rule_set.metric:
        raise TypeError(f"{rule_set.__name__}: a {table.metric} table in a {rule_set.metric} rule set")
    return sorted({rule_name(op) for op in table})


def refuse_methods(rule_set: type) -> None:
    """A ``visit_<name>`` method of a rule set is refused (TypeError): the walk would never call it, as an op's
    rule is found in the tables and the walk's ``visit_<name>`` methods are its own traversal."""
    methods = sorted(name for name in vars(rule_set) if name.startswith("visit_"))
    if methods:
        raise TypeError(f"{rule_set.__name__}.{methods[0]}: a rule set's op rules are its table's (a RuleTable), "
                        "and traversal is the walk's (IRVisitor), never a rule set's visit_ method")


class RuleSet:
    """One set of rules, made by the walk it is composed into (one instance per walk: its state is its own).

    A subclass with a ``metric`` has its table's ops registered in :data:`RULES` as it is defined; a
    ``visit_*`` method is refused (:func:`refuse_methods`)."""

    #: The family of figures its rules count ("matrix", "vector", "communication", "row"); None: not registered.
    metric: str | None = None
    #: Its op rules as pure functions (an empty table: none).
    table: RuleTable = RuleTable("")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        refuse_methods(cls)
        claim(cls, *claimed(cls))

    def __init__(self, walk, options: AnalysisOptions | None = None):
        self.walk = walk
        self.options = options or AnalysisOptions()
        # The walk's helpers, bound once: rules read them for every op.
        self.emit, self.emit_same_type, self.emit_no_operands = walk.emit, walk.emit_same_type, walk.emit_no_operands
        self.loc, self.tinfo, self.replay, self.collect = walk.loc, walk.tinfo, walk.replay, walk.collect
        self.warnings, self.functions, self.module = walk.warnings, walk.functions, walk.module
