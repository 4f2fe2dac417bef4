"""The op rules as a table: :func:`rules_table`, what ``mhlo-cost rules`` prints (as XLA's ``hlo_cost_analysis.h``
lists its handlers): every op a rule counts, its table, the row's kind, the rule function and the first sentence of
its docstring."""
from __future__ import annotations

import re

from .table import Table

#: The columns of :func:`rules_table`, in order.
COLUMNS = ("op", "table", "kind", "rule", "summary")
#: What the table leaves out: the walk's own control flow.
CONTROL_NOTE = ("control flow (func.call, while, case, if, composite, shard_map, async, and the loops, branches and "
                "terminators of scf, affine and gpu) is the walk's own: mhlo_cost.walk.control")


def rules_table(op: str | None = None, table: str | None = None) -> Table:
    """Every op rule of the walk (:func:`mhlo_cost.walk.registry.rule_table`), one row per dialect-qualified op
    name, sorted; ``op``: only the ops whose name matches this regular expression (``re.search``); ``table``: only
    that table's (matrix, vector, linalg, collective, shardy, custom_call)."""
    import pandas as pd

    from .. import __version__
    from ..walk.registry import TABLES, rule_table

    names = [t.name for t in TABLES]
    if table is not None and table not in names:
        raise ValueError(f"no rule table named {table!r} (tables: {', '.join(names)})")
    pattern = re.compile(op) if op is not None else None
    entries = [e for e in rule_table() if (table is None or e.table == table)
               and (pattern is None or pattern.search(e.op))]
    frame = pd.DataFrame([tuple(e) for e in entries], columns=list(COLUMNS))
    shown = f"{len(entries)} ops" + (f" of {table}" if table else "")
    return Table(f"op rules ({shown})", frame, notes=[CONTROL_NOTE],
                 meta={"tool": "mhlo-cost", "version": __version__, "tables": names})
