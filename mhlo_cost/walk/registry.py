"""What the walk knows, declared in one place: every op rule and every built-in recorder.

* :data:`TABLES`: the rule tables, one per subject (matrix, vector, linalg, collective, shardy, custom_call),
  and :data:`RULES`, the one registry the walk finds an op's rule in: the tables composed
  (:func:`mhlo_cost.walk.optable.compose`), an op claimed by two of them refused at import.
  :func:`rule_table` lists it, op by op, as XLA's ``hlo_cost_analysis.h`` lists its handlers
  (``mhlo-cost rules`` prints it).
* :func:`recorders`: the recorders a walk can be asked for by name (:mod:`mhlo_cost.walk.recorder`): the built-in
  ones, listed here, then any other declared by its class.

Control flow (calls, loops, branches, shard_map bodies, composites) is not a rule: it is the walk's own
(:mod:`mhlo_cost.walk.control`).
"""
from __future__ import annotations

import inspect
from typing import NamedTuple

from .arguments import ArgumentsRecorder
from .collective import COMM
from .custom_call import CUSTOM_CALL
from .dataflow import DataflowRecorder
from .linalg import LINALG
from .layouts import LayoutRecorder
from .liveness import LivenessRecorder
from .masks import MaskRecorder
from .matrix import MATRIX
from .optable import compose
from .recorder import DECLARED
from .shardy import SHARDY
from .vector import VECTOR

#: The rule tables of a full count, one per subject.
TABLES = (MATRIX, VECTOR, LINALG, COMM, SHARDY, CUSTOM_CALL)
#: The one registry of op rules: dialect-qualified op name -> :class:`~mhlo_cost.walk.optable.OpRule`.
RULES = compose(*TABLES)


#: The built-in recorders, in the order the walk tells them.
RECORDERS = (ArgumentsRecorder, DataflowRecorder, LivenessRecorder, MaskRecorder, LayoutRecorder)


class RuleEntry(NamedTuple):
    """One op's rule, as :func:`rule_table` lists it."""

    op: str  # dialect-qualified op name
    table: str  # the table (subject) that holds the rule
    kind: str  # the row's kind, unless the rule's answer names another
    rule: str  # the rule function, "module:name"
    summary: str  # the first sentence of its docstring


def rule_table(tables=TABLES) -> list[RuleEntry]:
    """Every op the ``tables`` (default: the full count's) have a rule for, sorted by op name, with its table, its
    kind, the rule function and the first sentence of that function's docstring."""
    out = []
    for table in tables:
        for op, rule in table.items():
            fn = rule.fn
            out.append(RuleEntry(op, table.name, rule.kind, f"{fn.__module__}:{fn.__qualname__}", first_sentence(fn)))
    return sorted(out)


def first_sentence(fn) -> str:
    """The first sentence of ``fn``'s docstring on one line ("" where it has none)."""
    doc = inspect.getdoc(fn) or ""
    text = " ".join(doc.split("\n\n")[0].split())
    head, dot, _ = text.partition(". ")
    return head + "." if dot else text


def recorders() -> dict[str, type]:
    """Every declared recorder by record name, in the order the walk tells them: the built-in ones,
    ``arguments`` (:class:`~.arguments.ArgumentsRecorder`), ``dataflow`` (:class:`~.dataflow.DataflowRecorder`),
    ``liveness`` (:class:`~.liveness.LivenessRecorder`), ``masks`` (:class:`~.masks.MaskRecorder`) and ``layouts``
    (:class:`~.layouts.LayoutRecorder`), then any
    other declared so far by its class statement (``class Tally(Recorder, record="tally")``)."""
    known = {cls.name: cls for cls in RECORDERS}
    known.update((name, cls) for name, cls in DECLARED.items() if name not in known)
    return known
