"""The one walk over a module: ``IRVisitor``.

Each op goes to the rule that the first composed rule set's table (:mod:`mhlo_cost.walk.optable`) holds for
its dialect-qualified name, the one registry of op rules; else, like :class:`ast.NodeVisitor`, to the walk's own
method :func:`rule_name` gives (traversal: the control flow below); else to :meth:`IRVisitor.generic_visit`.
The one declared place is
:data:`SHARED_DIALECTS`: StableHLO, MHLO and CHLO share rules by the op name without its dialect
(``stablehlo.dot_general`` and ``mhlo.dot_general`` both reach ``visit_dot_general``); an op of any other
dialect reaches ``visit_<dialect>_<name>`` (``func.call`` -> ``visit_func_call``, ``scf.for`` ->
``visit_scf_for``, ``sdy.manual_computation`` -> ``visit_sdy_manual_computation``; dots in the name become
``_``), never a StableHLO rule by coincidence of its short name (``affine.for``, ``scf.reduce``,
``tensor.scatter`` and ``gpu.all_reduce`` have their own rule or are unknown). The method is looked up once per
op name.

Control flow is the base class's business, so that every metric sees it the same way:

* the walk starts at the entry function (``main``, the only public function, or ``entry=``);
* ``func.call`` walks its callee; a callee's rows are built once and replayed at every call site, with
  the call site's scope in front of the callee's own, so a function called 28 times costs 28 times; in a call
  graph that fans out, a call folds into an earlier call's rows instead (:mod:`.callgraph`), so the table
  stays O(functions x ops) with every count exact;
* ``while`` multiplies its body by the trip count proven from the loop condition (``trip_count``), or
  counts one iteration and marks its rows ``trip_count_unknown``;
* ``scf.for`` with constant bounds and ``chlo.scan`` multiply their body by their trips / steps, and so do
  the loops and launches of other dialects (:mod:`mhlo_cost.walk.dialects`);
* ``case`` / ``if`` (and ``scf.if``, ``scf.index_switch``) replay their most expensive branch (rows marked ``branch i/N``) and a ``branch_max``
  row adds what other branches have above it, so every metric is its maximum over the branches;
* a shard_map body (``sdy.manual_computation``) is walked once, its rows noted ``per device``, with a warning;
  ``stablehlo.composite`` replays the rows of its decomposition function, as a call;
* an entry function that only returns gives the warning :data:`EMPTY_ENTRY`.

The walk counts nothing itself: the rules of the rule sets composed into it (:mod:`mhlo_cost.walk.ruleset`)
give an op's cost, of which the walk makes a :class:`Row` (:meth:`IRVisitor.count`); a rule set's ``generic_rule``
makes the rows of ops no rule knows; and recorders (:mod:`mhlo_cost.walk.recorder`) keep what else the
caller asked for.
"""
from __future__ import annotations

from functools import partial

from jaxlib.mlir import ir

from ..ir.types import TensorInfo, TypeCache
from .callgraph import CallGraph
from .module_facts import module_facts
from .entry import choose_entry
from .locations import LocationCache, LocationInfo
from .row import EMPTY_ENTRY, METRICS, AnalysisError, Row, short_name  # noqa: F401 (imported from here too)
from .costvalue import Cost
from .dialects import DialectRules
from .options import AnalysisOptions
from .recorder import region_kind, told
from .rowmaker import RowMaker
from .ruleset import SHARED_DIALECTS, rule_name, shared_short_name  # noqa: F401 (imported from here too)
from .trips import trip_count

#: The warning of a walk that counts a shard_map body (once, however many there are).
MANUAL_WARNING = "ops inside shard_map (sdy.manual_computation) are counted per device"

class IRVisitor(DialectRules, RowMaker):
    """Walks a module from its entry function, dispatching ops to the method :func:`rule_name` names.

    ``self.rows`` is the list of :class:`Row` in program order, each carrying its multiplicity. ``rules``
    (:class:`mhlo_cost.walk.ruleset.RuleSet` classes, made with ``options``) count the ops; ``recorders``
    (:class:`mhlo_cost.walk.recorder.Recorder`) are told what the walk does and keep their own records.
    """

    def __init__(self, module: ir.Module, entry: str | None = None, recorders=(), rules=(), options=None):
        self.module = module
        self.functions: dict[str, ir.Operation] = {}
        for op in module.body.operations:
            op = op.operation
            if op.name == "func.func":
                self.functions[ir.StringAttr(op.attributes["sym_name"]).value] = op
        self.entry = choose_entry(self.functions, entry)
        self._dispatch: dict[str, object] = {}
        self._func_rows: dict[str, list[Row]] = {}
        self._calls = CallGraph(self._func_rows)
        self._sets: dict = {}  # callee -> {call-site scope: start} of the row sets of calls in self._out
        self._active: list[str] = []  # call stack of function names, for recursion checks
        self._out: list[Row] = []
        self._func_name = ""
        self._args: set = set()
        self._types = TypeCache()
        self._known_type = self._types.known
        self._locations = LocationCache()
        self.rows: list[Row] = []
        self._after_op: list[Row] = []
        self.warnings: list[str] = []
        self.external: list[str] = []  # functions declared without a body
        self.recorders = tuple(recorders)
        self._row_hooks = tuple(r.emitted for r in self.recorders if r.wants_rows)
        self.options = options or AnalysisOptions()
        self.module_facts = module_facts(module)  # what rules read of the module (OpContext.module)
        self.rule_sets = tuple(cls(self, options) for cls in rules)
        fallback = [rs.generic_rule for rs in self.rule_sets if hasattr(rs, "generic_rule")]
        self._fallback = fallback[0] if fallback else self.walk_regions

    # -- what recorders read -----------------------------------------------------------------------------------
    @property
    def out(self) -> list[Row]:
        """The output list rows go to now (a function's, a sub-walk's)."""
        return self._out

    def is_argument(self, key: int) -> bool:
        """Whether the value with hash ``key`` is an argument of the function being walked."""
        return key in self._args

    def nbytes(self, t) -> int:
        """Bytes of a value of type ``t`` (0 for a type without a size: tokens, futures)."""
        try:
            return self._types(t).nbytes
        except ValueError:
            return 0

    def function_rows(self, name: str) -> list[Row]:
        """The rows of function ``name`` (built once, then the same list)."""
        return self._function_rows(name)

    # -- entry and driving ---------------------------------------------------------------------------------
    def run(self) -> list[Row]:
        for r in self.recorders:
            r.started(self)
        self.rows = list(self._function_rows(self.entry))
        body = self.functions[self.entry].regions[0]
        if not len(body.blocks) or len(body.blocks[0].operations) <= 1:
            self.warnings.append(f"{EMPTY_ENTRY}: @{self.entry} does nothing but return, every count is 0")
        self.warnings.extend(self._calls.warnings())
        for i, r in enumerate(self.rows):
            r.index = i
        for r in self.recorders:
            r.finished(self)
        return self.rows

    def _function_rows(self, name: str) -> list[Row]:
        cached = self._func_rows.get(name)
        if cached is not None:
            return cached
        if name in self._active:
            raise AnalysisError(f"recursive call to @{name} cannot be counted")
        fn = self.functions.get(name)
        if fn is None:
            raise AnalysisError(f"call to @{name}, which the module does not define")
        if not len(fn.regions[0].blocks):
            self._func_rows[name] = []
            self.external.append(name)
            return []
        self._active.append(name)
        saved_out, saved_func, saved_sets = self._out, self._func_name, self._sets
        self._out, self._func_name, self._sets = [], name, {}
        saved_args = self._args
        self._args = {hash(a) for a in fn.regions[0].blocks[0].arguments}
        rows = None
        for r in self.recorders:
            r.function_started(name)
        try:
            self.visit_region(fn.regions[0])
            rows = self._out
        finally:
            self._out, self._func_name, self._args, self._sets = saved_out, saved_func, saved_args, saved_sets
            self._active.pop()
            for r in self.recorders:
                r.function_finished(name, rows)
        self._func_rows[name] = rows
        return rows

    # -- dispatch -------------------------------------------------------------------------------------------
    def visit_region(self, region: ir.Region) -> None:
        dispatch = self._dispatch
        for block in region.blocks:
            for op in block.operations:
                op = op.operation
                method = dispatch.get(op.name)
                if method is None:
                    self.visit(op)
                else:
                    method(op)
                if self._after_op:  # rows an op leaves to follow it (case / if: the per-metric maximum)
                    self._out.extend(self._after_op)
                    self._after_op.clear()

    def visit(self, op: ir.Operation) -> None:
        name = op.name
        method = self._dispatch.get(name)
        if method is None:
            method = self.rule_of(name)
            kind = region_kind(name) if self.recorders else None
            if kind is not None:
                method = told(self, kind, method)
            self._dispatch[name] = method
        method(op)

    def rule_of(self, op_name: str, named: bool = True):
        """The method that visits ops named ``op_name``: the first rule set's table's rule, counted by
        :meth:`count`; else the walk's own (:func:`rule_name`: traversal, never a count); else
        :meth:`generic_visit`. ``named``: the method is only given ops of that name (it does not read their
        name again)."""
        for rs in self.rule_sets:
            rule = rs.table.get(op_name)
            if rule is not None:
                named = named and rule.extra is None  # count puts a rule's extra in front of the attributes
                return partial(self.count_named, rule, op_name) if named else partial(self.count, rule)
        return getattr(self, rule_name(op_name), None) or self.generic_visit

    def visit_shared(self, name: str, op: ir.Operation) -> None:
        """Visit ``op`` (of another dialect) with the rule of the StableHLO op ``name`` (``scf.if`` -> ``if``)."""
        self.rule_of("stablehlo." + name, named=False)(op)

    def generic_visit(self, op: ir.Operation) -> None:
        """Ops without a rule: the rule sets' ``generic_rule`` (else :meth:`walk_regions`), then the recorders are told."""
        self._fallback(op)
        for r in self.recorders:
            r.contained(op)

    def walk_regions(self, op: ir.Operation) -> None:
        """Walk the regions of ``op`` (a container whose body runs once)."""
        for region in op.regions:
            self.visit_region(region)

    def visit_return(self, op: ir.Operation) -> None:
        for r in self.recorders:
            r.returned(op)

    # -- control flow -----------------------------------------------------------------------------------------
    def collect(self, fn, *args) -> list[Row]:
        """Run ``fn(*args)`` with a fresh output list and return the rows it emitted."""
        saved = self._out, self._sets
        self._out, self._sets = [], {}
        rows = None
        for r in self.recorders:
            r.collect_started()
        try:
            fn(*args)
            rows = self._out
            return rows
        finally:
            self._out, self._sets = saved
            for r in self.recorders:
                r.collect_finished(rows)

    def replay(self, rows: list[Row], k: int, scope: str = "", note: str = "") -> None:
        if k == 0:
            return
        out = self._out
        start = len(out)
        for r in rows:
            out.append(r.scaled(k, scope, note))
        for r in self.recorders:
            r.replayed(rows, k, start)

    def fold(self, rows: list[Row], k: int, at: int) -> None:
        """``k`` more executions of ``rows``, added to the row set replayed from them at ``at`` in this list."""
        out = self._out
        for i, r in enumerate(rows):
            out[at + i].add_scaled(r, k)
        for r in self.recorders:
            r.folded(rows, k, at)

    def visit_call(self, op: ir.Operation) -> None:
        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        rows = self._function_rows(callee)
        if callee in self.external:  # declared, not defined here: its work is unknown, never zero
            self.emit(op, "unknown", target=f"@{callee} (no body)")
            return
        scope = self.loc(op).scope
        at = self._calls.target(self._sets, callee, scope, self._func_name, len(self._out))
        if at is None:
            self.replay(rows, 1, scope)
        else:
            self.fold(rows, 1, at)

    def visit_while(self, op: ir.Operation) -> None:
        cond, body = op.regions[0], op.regions[1]
        trips = trip_count(op)
        scope = self.loc(op).scope
        if trips is None:
            note = "trip_count_unknown"
            self.warnings.append(f"while loop at {self.loc(op).describe()}: trip count not provable, counted once")
            self.replay(self.collect(self.visit_region, cond), 1, scope, note)
            self.replay(self.collect(self.visit_region, body), 1, scope, note)
            return
        self.replay(self.collect(self.visit_region, cond), trips + 1, scope, f"while x{trips}")
        self.replay(self.collect(self.visit_region, body), trips, scope, f"while x{trips}")

    def _visit_branches(self, op: ir.Operation, regions) -> None:
        """The branch with the most compute (then bytes) is replayed; where another branch is above it in a
        metric (comm bytes, transcendentals, ...), a ``branch_max`` row after the op adds the difference,
        so every metric is its maximum over the branches."""
        branches = [self.collect(self.visit_region, r) for r in regions]
        if not branches:
            return
        n = len(branches)
        totals = [sum((r.cost for r in rows), Cost()) for rows in branches]
        best = max(range(n), key=lambda i: (totals[i].compute, totals[i].nbytes))
        loc = self.loc(op)
        self.replay(branches[best], 1, loc.scope, f"branch {best}/{n} (max)")
        extra = Cost.max(*totals) - totals[best]
        if any(extra):
            self._after_op.append(Row(op=op.name, kind="branch_max", loc=loc, scope=loc.scope, result=(), cost=extra,
                                      multiplicity=0, func=self._func_name, values=((), ()),
                                      note=f"per-metric maximum over {n} branches, above branch {best}"))

    # Async pairs: the start op names the computation (a function) that holds the collective; its rows are
    # replayed there, as a call's; update and done add nothing.
    def visit_async_start(self, op: ir.Operation) -> None:
        if "called_computation" in op.attributes:
            callee = ir.FlatSymbolRefAttr(op.attributes["called_computation"]).value
            self.replay(self._function_rows(callee), 1, self.loc(op).scope)
        else:
            self.generic_visit(op)

    def visit_async_update(self, op: ir.Operation) -> None:
        pass

    visit_async_done = visit_async_update

    # Region ops that are the walk's too: a shard_map body, and a composite's decomposition function.
    def visit_manual_computation(self, op: ir.Operation) -> None:
        """A shard_map body (``sdy.manual_computation``): its shapes are one device's, and so are its counts (as
        comm_bytes always are); its rows are noted ``per device``, with one warning per walk."""
        if MANUAL_WARNING not in self.warnings:
            self.warnings.append(MANUAL_WARNING)
        self.replay(self.collect(self.walk_regions, op), 1, "", "per device")

    def visit_composite(self, op: ir.Operation) -> None:
        """``stablehlo.composite`` carries its meaning in a decomposition function: its rows, as a call's."""
        callee = ir.FlatSymbolRefAttr(op.attributes["decomposition"]).value
        self.replay(self._function_rows(callee), 1, self.loc(op).scope)

    def visit_case(self, op: ir.Operation) -> None:
        self._visit_branches(op, list(op.regions))

    def visit_if(self, op: ir.Operation) -> None:
        self._visit_branches(op, list(op.regions))

    # -- helpers for rules ----------------------------------------------------------------------------------------
    def loc(self, op: ir.Operation) -> LocationInfo:
        return self._locations(op.location)

    def tinfo(self, t: ir.Type, op: ir.Operation | None = None) -> TensorInfo:
        try:
            return self._types(t)
        except ValueError as e:
            where = f" at {self.loc(op).describe()}" if op is not None else ""
            opname = f"{op.name}{where}: " if op is not None else ""
            raise AnalysisError(f"{opname}{e}") from None
