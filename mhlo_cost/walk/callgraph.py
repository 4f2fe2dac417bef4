"""When a call's rows are folded into an earlier call's instead of copied: :class:`CallGraph`.

A callee's rows are built once (:meth:`~mhlo_cost.walk.base.IRVisitor._function_rows`) and, at each call
site, copied with the call site's scope in front (a block called 28 times from 28 scopes: 28 row sets, one per
block, as every per-block table needs). A call graph that fans out (``@f0`` calls ``@f1`` twice, ``@f1`` calls
``@f2`` twice, ...) would make that table exponential in the program's size. So a call folds into the row set
of an earlier call of the same callee in the same body (same list of rows: a function's, a loop body's, a
branch's), adding its counts and multiplicity there instead of copying, where

* the callee's own table repeats something (it holds more rows than the distinct ops it and its callees are
  written with) and the earlier call has the same call-site scope: nothing a view groups by is lost; or
* the callee's table is more than :data:`AMPLIFICATION_CAP` times its distinct ops, whatever the scopes:
  then the fold moves counts from one scope to another, and a warning says so (:meth:`CallGraph.warnings`).

Either way every count stays exact and every execution is in the table (as multiplicity); a table is at most
about :data:`AMPLIFICATION_CAP` times the ops it is written with, per function, so the walk costs
O(functions x ops). Ordinary programs (each callee's table small next to the cap, each repeated call with its
own scope) are not folded: their tables are unchanged.
"""
from __future__ import annotations

#: A callee whose table is over this many times the ops it is written with is folded whatever the scopes.
AMPLIFICATION_CAP = 64
#: The start of the warning for calls folded across scopes.
FOLDED = "call graph folded"


class CallGraph:
    """Per walk: each function's table size next to its distinct ops, and the folds that moved scopes.

    ``func_rows``: the walk's function name -> rows (built once each)."""

    def __init__(self, func_rows: dict):
        self._rows = func_rows
        self._own: dict[str, int] = {}
        self._distinct: dict[str, int] = {}
        self._moved: dict[tuple[str, str], list] = {}  # (caller, callee) -> [first scope, calls folded]

    def target(self, sets: dict, callee: str, scope: str, caller: str, at: int) -> int | None:
        """Where a call of ``callee`` from ``scope`` folds (the start of an earlier row set in the same list),
        or None: it is copied, as a new set starting at ``at``. ``sets``: callee -> {scope: start} of the
        list's earlier sets."""
        prior = sets.get(callee)
        if prior is None:
            sets[callee] = {scope: at}
            return None
        n = len(self._rows.get(callee, ()))
        distinct = self.distinct(callee)
        if n > distinct and scope in prior:
            return prior[scope]
        if n > AMPLIFICATION_CAP * distinct:
            first = next(iter(prior))
            moved = self._moved.setdefault((caller, callee), [first, 0])
            moved[1] += 1
            return prior[first]
        prior.setdefault(scope, at)
        return None

    def distinct(self, name: str) -> int:
        """The rows of the ops ``name`` and the functions its table reaches are written with, each once."""
        d = self._distinct.get(name)
        if d is None:
            d = self._distinct[name] = sum(self._own_rows(f) for f in {r.func for r in self._rows.get(name, ())})
        return d

    def _own_rows(self, name: str) -> int:
        n = self._own.get(name)
        if n is None:
            n = self._own[name] = sum(1 for r in self._rows.get(name, ()) if r.func == name)
        return n

    def warnings(self) -> list[str]:
        """One line for every fold that moved counts from one scope to another (none where nothing did)."""
        if not self._moved:
            return []
        pairs = [f"@{callee} in @{caller} into scope {first or '(top)'!r}"
                 for (caller, callee), (first, _) in self._moved.items()]
        more = f" and {len(pairs) - 3} more" if len(pairs) > 3 else ""
        calls = sum(k for _, k in self._moved.values())
        return [f"{FOLDED}: {calls:,} call{'s' if calls > 1 else ''} from other scopes counted in the rows of an "
                f"earlier call of the same function ({', '.join(pairs[:3])}{more}): each callee's table is over "
                f"{AMPLIFICATION_CAP} times the ops it is written with; counts exact, their split by scope not shown"]
