"""The one walk over a module: ``IRVisitor``.

The walk starts at the entry function (``main``, the only public function, or ``entry=``) and gives each op to
the rule the one registry (:data:`mhlo_cost.walk.registry.RULES`, or the tables given as ``rules``) holds for its
dialect-qualified name, counted by :meth:`IRVisitor.count`; else, like :class:`ast.NodeVisitor`, to the walk's own
method :func:`rule_name` gives (its control flow: :mod:`mhlo_cost.walk.control`); else to
:meth:`IRVisitor.generic_visit`. StableHLO, MHLO and CHLO (:data:`~mhlo_cost.walk.optable.SHARED_DIALECTS`) share
methods by the op name without its dialect (``stablehlo.while`` and ``mhlo.while`` both reach ``visit_while``); an
op of any other dialect reaches ``visit_<dialect>_<name>`` (``func.call`` -> ``visit_func_call``, ``scf.for`` ->
``visit_scf_for``; dots in the name become ``_``), never a StableHLO rule by coincidence of its short name
(``affine.for``, ``scf.reduce``, ``tensor.scatter`` and ``gpu.all_reduce`` have their own method or are unknown).
The method is looked up once per op name.

The walk counts nothing itself: the rules give an op's cost, of which the walk makes a :class:`Row`; an op no rule
knows is a row of kind ``unknown`` (``unknown_rows``), never a silent zero; recorders
(:mod:`mhlo_cost.walk.recorder`) keep what else the caller asked for. An entry function that only returns gives
the warning :data:`EMPTY_ENTRY`.
"""
from __future__ import annotations

from functools import partial

from jaxlib.mlir import ir

from ..ir.types import TensorInfo, TypeCache
from .callgraph import CallGraph
from .control import ControlFlow, region_ops
from .entry import choose_entry
from .locations import LocationCache, LocationInfo
from .memo import RuleMemo
from .module_facts import module_facts
from .optable import SHARED_DIALECTS, compose, shared_short_name
from .options import AnalysisOptions
from .recorder import region_kind, told
from .registry import RULES
from .row import EMPTY_ENTRY, AnalysisError, Row
from .rowmaker import RowMaker
from .split import walk_split

_SHARED = frozenset(SHARED_DIALECTS)


def rule_name(op_name: str) -> str:
    """The walk's method of an op: ``visit_<name>`` for the shared dialects, else ``visit_<dialect>_<name>``."""
    dialect, _, name = op_name.partition(".")
    if dialect in _SHARED:
        return "visit_" + name
    return f"visit_{dialect}_{name}".replace(".", "_")


class IRVisitor(ControlFlow, RowMaker):
    """Walks a module from its entry function, dispatching ops to their rule or to the method :func:`rule_name`
    names.

    ``self.rows`` is the list of :class:`Row` in program order, each carrying its multiplicity. ``rules``: the rule
    tables that count the ops (:class:`~mhlo_cost.walk.optable.RuleTable`, composed: an op in two of them is
    refused), by default every one (:data:`mhlo_cost.walk.registry.RULES`). ``unknown_rows``: an op no rule knows
    is a row of kind ``unknown`` (else it makes no row, as where one table is run alone). ``recorders``
    (:class:`mhlo_cost.walk.recorder.Recorder`) are told what the walk does and keep their own records.
    """

    def __init__(self, module: ir.Module, entry: str | None = None, recorders=(), rules=None, options=None,
                 unknown_rows: bool = True):
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
        self._value_types: dict = {}  # value key -> TensorInfo of the values the rows' ops made
        self._memo = RuleMemo()  # a rule's answer per signature of op (mhlo_cost.walk.memo)
        self._locations = LocationCache()
        self.rows: list[Row] = []
        self._after_op: list[Row] = []
        self.warnings: list[str] = []
        self.external: list[str] = []  # functions declared without a body
        self.recorders = tuple(recorders)
        self._row_hooks = tuple(r.emitted for r in self.recorders if r.wants_rows)
        self.options = options or AnalysisOptions()
        self.module_facts = module_facts(module)  # what rules read of the module (OpContext.module)
        self.rules = RULES if rules is None else compose(*rules)
        self.unknown_rows = unknown_rows

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
        self._value_types.clear()  # (one entry a value: what the walk needs no more, freed for what follows)
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
            body = fn.regions[0]
            if not (name == self.entry and len(body.blocks) == 1 and walk_split(self, body.blocks[0])):
                self.visit_ops(region_ops(body))
            rows = self._out
        finally:
            self._out, self._func_name, self._args, self._sets = saved_out, saved_func, saved_args, saved_sets
            self._active.pop()
            for r in self.recorders:
                r.function_finished(name, rows)
        self._func_rows[name] = rows
        return rows

    # -- dispatch -------------------------------------------------------------------------------------------
    def visit_ops(self, ops) -> None:
        """Visit ``ops`` in order: a region's (:func:`region_ops`) or a run of a block's (:mod:`mhlo_cost.walk.split`).
        The one op loop of the walk: a region's ops come as an iterable, not the region, so that a call chain or
        nested regions recurse through this loop alone (a second method around it would add a Python frame a
        level: tests/test_deep_nesting.py)."""
        dispatch = self._dispatch
        for op in ops:
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
        self.method_of(op.name)(op)

    def method_of(self, name: str):
        """The method that visits ops named ``name`` (found once per name: :meth:`rule_of`, its recorders told)."""
        method = self._dispatch.get(name)
        if method is None:
            method = self.rule_of(name)
            kind = region_kind(name) if self.recorders else None
            if kind is not None:
                method = told(self, kind, method)
            self._dispatch[name] = method
        return method

    def rule_of(self, op_name: str, named: bool = True):
        """The method that visits ops named ``op_name``: its rule in :attr:`rules`, counted by :meth:`count`; else
        the walk's own (:func:`rule_name`: control flow, never a count); else :meth:`generic_visit`. ``named``:
        the method is only given ops of that name (it does not read their name again)."""
        rule = self.rules.get(op_name)
        if rule is not None:
            named = named and rule.extra is None  # count puts a rule's extra in front of the attributes
            return partial(self.count_named, rule, op_name) if named else partial(self.count, rule)
        return getattr(self, rule_name(op_name), None) or self.generic_visit

    def visit_shared(self, name: str, op: ir.Operation) -> None:
        """Visit ``op`` (of another dialect) with the rule of the StableHLO op ``name`` (``scf.if`` -> ``if``)."""
        self.rule_of("stablehlo." + name, named=False)(op)

    def generic_visit(self, op: ir.Operation) -> None:
        """An op without a rule: a StableHLO / MHLO / CHLO container (``mhlo.fusion``) has its body walked once;
        any other op (a leaf, or a region op of another dialect, ``gpu.all_reduce``, ``scf.reduce``, whose
        meaning is not known) is a row of kind ``unknown`` with :attr:`unknown_rows` (else its regions are walked
        and it makes no row). Then the recorders are told."""
        if self.unknown_rows and not (len(op.regions) and shared_short_name(op.name) is not None):
            self.emit(op, "unknown", target=op.name)
        else:
            self.walk_regions(op)
        for r in self.recorders:
            r.contained(op)

    def walk_regions(self, op: ir.Operation) -> None:
        """Walk the regions of ``op`` (a container whose body runs once)."""
        for region in op.regions:
            self.visit_ops(region_ops(region))

    def visit_return(self, op: ir.Operation) -> None:
        for r in self.recorders:
            r.returned(op)

    # -- what the control flow uses -------------------------------------------------------------------------------
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
