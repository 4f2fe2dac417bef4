"""Rule sets: what the walk counts per op, as siblings the caller composes (``IRVisitor(module, entry,
rules=[TFlopsVisitor, VectorVisitor, ...])``), not as base classes of the walk.

A rule set's ``visit_<name>`` methods (:func:`mhlo_cost.visitors.base.rule_name`) count an op; the walk runs
the first composed rule set's method for each op name (looked up once per name), its own control flow
(calls, loops, branches) where no rule set has one, and the first ``generic_rule`` of the rule sets for the
rest. A rule reaches the walk only through the public helpers bound here (``emit``, ``loc``, ``replay``, ...)
and ``self.walk``'s public methods; its options (the convolution padding convention, ...) are ``self.options``.
A rule set runs alone as ``IRVisitor(module, entry, rules=[TFlopsVisitor]).run()``: an op it has no rule for
then has its regions walked and makes no row.
"""
from __future__ import annotations

from .options import AnalysisOptions

#: Dialects whose ops share rules by their name without the dialect (``visit_<name>``).
SHARED_DIALECTS = frozenset({"stablehlo", "mhlo", "chlo"})


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


class RuleSet:
    """One set of rules, made by the walk it is composed into (one instance per walk: its state is its own)."""

    def __init__(self, walk, options: AnalysisOptions | None = None):
        self.walk = walk
        self.options = options or AnalysisOptions()
        # The walk's helpers, bound once: rules read them for every op.
        self.emit, self.emit_same_type, self.emit_no_operands = walk.emit, walk.emit_same_type, walk.emit_no_operands
        self.loc, self.tinfo, self.replay, self.collect = walk.loc, walk.tinfo, walk.replay, walk.collect
        self.warnings, self.functions, self.module = walk.warnings, walk.functions, walk.module
