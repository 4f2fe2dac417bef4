"""The one walk over a module: ``IRVisitor``.

Like :class:`ast.NodeVisitor`, each op goes to ``visit_<name>`` where ``<name>`` is the op name without
its dialect (``stablehlo.dot_general`` and ``mhlo.dot_general`` both reach ``visit_dot_general``),
and to :meth:`IRVisitor.generic_visit` where no such method exists.

Control flow is the base class's business, so that every metric sees it the same way:

* the walk starts at the entry function (``main``, the only public function, or ``entry=``);
* ``func.call`` walks its callee; a callee's rows are built once and replayed at every call site, with
  the call site's scope in front of the callee's own, so a function called 28 times costs 28 times;
* ``while`` multiplies its body by the trip count proven from the loop condition (``trip_count``), or
  counts one iteration and marks its rows ``trip_count_unknown``;
* ``case`` / ``if`` count their most expensive branch and mark the rows with ``branch i/N``.

Subclasses emit :class:`Row` objects with :meth:`IRVisitor.emit`.
"""
from __future__ import annotations

from dataclasses import dataclass

from jaxlib.mlir import ir

from ..types import TensorInfo, TypeCache
from .locations import LocationCache, LocationInfo

# Rows hold exact Python integers. These are the metric columns a call or a loop multiplies.
METRICS = (
    "gemm_flops",
    "conv_flops",
    "vector_flops",
    "transcendentals",
    "bytes_read",
    "bytes_written",
    "comm_bytes",
)


class AnalysisError(Exception):
    """The IR is valid MLIR but cannot be analysed (dynamic shapes, a missing callee, ...). One line."""


@dataclass(slots=True)
class Row:
    op: str  # full op name, e.g. "stablehlo.dot_general"
    kind: str  # dot, conv, elementwise, transcendental, reduce, data, collective, unknown, ...
    loc: LocationInfo  # where the op is written: scope and (lazily) file:line
    scope: str  # scope path, e.g. "spatial_blocks.3/attn" (the caller's scope in front for callees)
    result: TensorInfo | tuple  # the result type (a tuple of them for several results)
    gemm_flops: int = 0
    conv_flops: int = 0
    vector_flops: int = 0
    transcendentals: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    multiplicity: int = 1
    note: str = ""
    target: str = ""  # custom_call target, unknown op's name
    comm_kind: str = ""
    group_size: int = 0
    num_groups: int = 0
    comm_bytes: int = 0
    comm_steps: int = 0  # ring steps per execution (latency term of the alpha-beta model)
    operands: tuple = ()  # TensorInfo of each operand
    weights: tuple = ()  # dot / conv: indices of operands that are function arguments (weights, inputs)
    func: str = ""  # the function the op is written in
    index: int = 0  # program order
    values: tuple = ()  # keys (hashes) of the operand and result values: ((operands...), (results...))
    # Collectives: the device ids of each replica group (collective_permute: its (source, target) pairs).
    replica_groups: tuple = ()

    def scaled(self, k: int, scope_prefix: str, note: str) -> "Row":
        return Row(
            self.op, self.kind, self.loc, _join_scope(scope_prefix, self.scope), self.result,
            self.gemm_flops * k, self.conv_flops * k, self.vector_flops * k, self.transcendentals * k,
            self.bytes_read * k, self.bytes_written * k, self.multiplicity * k,
            _join_note(note, self.note), self.target, self.comm_kind, self.group_size, self.num_groups,
            self.comm_bytes * k, self.comm_steps, self.operands, self.weights, self.func, 0,
            replica_groups=self.replica_groups,
        )

    @property
    def out_elems(self) -> int:
        """Elements of the result (all results together)."""
        if isinstance(self.result, TensorInfo):
            return self.result.nelems
        return sum(t.nelems for t in self.result)

    @property
    def compute(self) -> int:
        return self.gemm_flops + self.conv_flops + self.vector_flops

    # Text views, made only when a table asks for them.
    @property
    def location(self) -> str:
        return self.loc.file_line

    @property
    def shape(self) -> str:
        if isinstance(self.result, TensorInfo):
            return self.result.shape_str
        return ",".join(t.shape_str for t in self.result)

    @property
    def dtype(self) -> str:
        if isinstance(self.result, TensorInfo):
            return self.result.dtype
        return ",".join(sorted({t.dtype for t in self.result}))

    @property
    def operand_shapes(self) -> str:
        return " ".join(t.pretty for t in self.operands)

    @property
    def weight_operands(self) -> str:
        return ",".join(str(i) for i in self.weights)


def _join_scope(prefix: str, scope: str) -> str:
    if not prefix:
        return scope
    if not scope:
        return prefix
    if scope == prefix or scope.startswith(prefix + "/"):
        return scope  # the callee's names already carry the caller's path
    return f"{prefix}/{scope}"


def _join_note(a: str, b: str) -> str:
    if not a:
        return b
    if not b:
        return a
    return f"{a}; {b}"


def short_name(op_name: str) -> str:
    """``stablehlo.dot_general`` -> ``dot_general``; ``func.call`` -> ``call``."""
    return op_name.split(".", 1)[1] if "." in op_name else op_name


class IRVisitor:
    """Walks a module from its entry function, dispatching ops to ``visit_<name>``.

    ``self.rows`` is the list of :class:`Row` in program order, each carrying its multiplicity.
    """

    def __init__(self, module: ir.Module, entry: str | None = None):
        self.module = module
        self.functions: dict[str, ir.Operation] = {}
        for op in module.body.operations:
            op = op.operation
            if op.name == "func.func":
                self.functions[ir.StringAttr(op.attributes["sym_name"]).value] = op
        self.entry = self._choose_entry(entry)
        self._dispatch: dict[str, object] = {}
        self._func_rows: dict[str, list[Row]] = {}
        self._active: list[str] = []  # call stack of function names, for recursion checks
        self._out: list[Row] = []
        self._func_name = ""
        self._args: set = set()
        self._types = TypeCache()
        self._known_type = self._types.known
        self._locations = LocationCache()
        self.rows: list[Row] = []
        self.warnings: list[str] = []
        self.external: list[str] = []  # functions declared without a body

    # -- entry and driving ---------------------------------------------------------------------------------
    def _choose_entry(self, entry: str | None) -> str:
        if not self.functions:
            raise AnalysisError("the module has no func.func to analyse")
        if entry is not None:
            if entry not in self.functions:
                raise AnalysisError(f"no function named {entry!r}; functions: {', '.join(sorted(self.functions))}")
            return entry
        if "main" in self.functions:
            return "main"
        public = [n for n, f in self.functions.items() if not _is_private(f)]
        if len(public) == 1:
            return public[0]
        if len(self.functions) == 1:
            return next(iter(self.functions))
        if not public:
            raise AnalysisError(f"no function named 'main' and no public function; choose one of "
                                f"{', '.join(sorted(self.functions))} with --entry NAME")
        raise AnalysisError(
            "no function named 'main' and several public functions "
            f"({', '.join(sorted(public))}); choose one with --entry NAME"
        )

    def run(self) -> list[Row]:
        self.rows = list(self._function_rows(self.entry))
        for i, r in enumerate(self.rows):
            r.index = i
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
        saved_out, saved_func = self._out, self._func_name
        self._out, self._func_name = [], name
        saved_args = self._args
        self._args = {hash(a) for a in fn.regions[0].blocks[0].arguments}
        try:
            self.visit_region(fn.regions[0])
            rows = self._out
        finally:
            self._out, self._func_name, self._args = saved_out, saved_func, saved_args
            self._active.pop()
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

    def visit(self, op: ir.Operation) -> None:
        name = op.name
        method = self._dispatch.get(name)
        if method is None:
            method = getattr(self, "visit_" + short_name(name), None) or self.generic_visit
            self._dispatch[name] = method
        method(op)

    def generic_visit(self, op: ir.Operation) -> None:
        """Ops without a visit method: recurse into their regions (subclasses count leaf ops)."""
        for region in op.regions:
            self.visit_region(region)

    def visit_return(self, op: ir.Operation) -> None:
        pass

    # -- control flow -----------------------------------------------------------------------------------------
    def collect(self, fn, *args) -> list[Row]:
        """Run ``fn(*args)`` with a fresh output list and return the rows it emitted."""
        saved = self._out
        self._out = []
        try:
            fn(*args)
            return self._out
        finally:
            self._out = saved

    def replay(self, rows: list[Row], k: int, scope: str = "", note: str = "") -> None:
        if k == 0:
            return
        out = self._out
        for r in rows:
            out.append(r.scaled(k, scope, note))

    def visit_call(self, op: ir.Operation) -> None:
        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        rows = self._function_rows(callee)
        if callee in self.external:  # declared, not defined here: its work is unknown, never zero
            self.emit(op, "unknown", target=f"@{callee} (no body)")
            return
        self.replay(rows, 1, self.loc(op).scope)

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
        branches = [self.collect(self.visit_region, r) for r in regions]
        if not branches:
            return
        n = len(branches)

        def cost(rows):
            return (sum(r.compute for r in rows), sum(r.bytes_read + r.bytes_written for r in rows))

        best = max(range(n), key=lambda i: cost(branches[i]))
        self.replay(branches[best], 1, self.loc(op).scope, f"branch {best}/{n} (max)")

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

    def emit_no_operands(self, op: ir.Operation, kind: str) -> Row:
        """:meth:`emit` for an op without operands (``constant``, ``iota``): reads only its result."""
        res = op.result
        try:
            result = self._types(res.type)
        except ValueError as e:
            raise AnalysisError(f"{op.name} at {self.loc(op).describe()}: {e}") from None
        loc = self._locations(op.location)
        row = Row(op.name, kind, loc, loc.scope, result, 0, 0, 0, 0, 0, result.nbytes, 1, "", "", "",
                  0, 0, 0, 0, (), (), self._func_name, 0, ((), (hash(res),)))
        self._out.append(row)
        return row

    def emit_same_type(self, op: ir.Operation, kind: str) -> Row:
        """:meth:`emit` for an op whose operands all have its result's type (StableHLO's
        SameOperandsAndResultType ops: add, multiply, exponential, ...): the operand types are known
        without reading them, which halves the cost of the most common ops. Weight operands are not
        looked for on this path."""
        res = op.result
        try:
            result = self._types(res.type)
        except ValueError as e:
            raise AnalysisError(f"{op.name} at {self.loc(op).describe()}: {e}") from None
        uses = tuple(map(hash, op.operands))
        n = len(uses)
        loc = self._locations(op.location)
        row = Row(op.name, kind, loc, loc.scope, result, 0, 0, 0, 0, n * result.nbytes, result.nbytes, 1, "", "", "",
                  0, 0, 0, 0, (result,) * n, (), self._func_name, 0, (uses, (hash(res),)))
        self._out.append(row)
        return row

    def emit(self, op: ir.Operation, kind: str, target: str = "", weights: bool = False) -> Row:
        """Append a row for ``op``; bytes read and written come from its operand and result types.

        Rules read the types from the returned row (``row.result``, ``row.operands``) and set its
        metrics, so that every type is read from the IR once. This is the hot path of the walk.
        With ``weights`` (the matrix rules ask for it) the operands that are function arguments are
        recorded in ``row.weights``.
        """
        types = self._types
        known = self._known_type  # the cache's dict lookup, inlined: this runs for every type of every op
        try:
            results = op.results
            if len(results) == 1:
                r = results[0]
                t = r.type
                result = known(hash(t)) or types(t)
                written = result.nbytes
                defs = (hash(r),)
            else:
                result = tuple(types(r.type) for r in results)
                written = sum(t.nbytes for t in result)
                defs = tuple(map(hash, results))
            operands = op.operands
            if len(operands) == 1:  # most data movement: broadcast, convert, reshape, transpose, slice
                v = operands[0]
                t = v.type
                ti = known(hash(t)) or types(t)
                read = ti.nbytes
                infos = (ti,)
                uses = (hash(v),)
                found = (0,) if weights and uses[0] in self._args else ()
            else:
                read = 0
                infos = []
                uses = []
                found = ()
                args = self._args
                for v in operands:
                    t = v.type
                    ti = known(hash(t)) or types(t)
                    read += ti.nbytes
                    h = hash(v)
                    if weights and h in args:
                        found += (len(infos),)
                    infos.append(ti)
                    uses.append(h)
                infos = tuple(infos)
                uses = tuple(uses)
        except ValueError as e:
            raise AnalysisError(f"{op.name} at {self.loc(op).describe()}: {e}") from None
        loc = self._locations(op.location)
        row = Row(op.name, kind, loc, loc.scope, result, 0, 0, 0, 0, read, written, 1, "", target, "", 0, 0, 0, 0,
                  infos, found, self._func_name, 0, (uses, defs))
        self._out.append(row)
        return row


def _is_private(fn: ir.Operation) -> bool:
    vis = fn.attributes["sym_visibility"] if "sym_visibility" in fn.attributes else None
    return vis is not None and ir.StringAttr(vis).value == "private"


# -- trip counts ------------------------------------------------------------------------------------------------
def _int_constant(v: ir.Value) -> int | None:
    """The integer of a scalar (or splat) constant, looking through converts; None where not constant."""
    owner = v.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)):
        return None
    op = owner.operation
    name = short_name(op.name)
    if name == "convert" or name == "reshape" or name == "broadcast_in_dim":
        return _int_constant(op.operands[0])
    if name != "constant" or "value" not in op.attributes:
        return None
    attr = op.attributes["value"]
    try:
        dense = ir.DenseIntElementsAttr(attr)
    except (ValueError, TypeError):
        return None
    if dense.is_splat:
        return int(dense.get_splat_value().value)
    vals = list(dense)
    if len(vals) == 1:
        return int(vals[0])
    return None


def _through_converts(v: ir.Value) -> ir.Value:
    while isinstance(v.owner, (ir.Operation, ir.OpView)) and short_name(v.owner.operation.name) == "convert":
        v = v.owner.operation.operands[0]
    return v


def _comparison(op: ir.Operation) -> str | None:
    if "comparison_direction" not in op.attributes:
        return None
    attr = op.attributes["comparison_direction"]
    from jaxlib.mlir.dialects import mhlo, stablehlo

    for cls in (stablehlo.ComparisonDirectionAttr, mhlo.ComparisonDirectionAttr):
        try:
            return cls(attr).value
        except (ValueError, TypeError):
            continue
    return None


_FLIP = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "EQ": "EQ", "NE": "NE"}


def trip_count(while_op: ir.Operation) -> int | None:
    """Iterations of ``while`` when its condition compares an induction variable with a constant.

    The induction variable is a loop-carried value with a constant initial value that the body changes
    by a constant step (``add``/``subtract``). Returns None where that cannot be proven.
    """
    cond_block = while_op.regions[0].blocks[0]
    body_block = while_op.regions[1].blocks[0]
    cond_ops = [o.operation for o in cond_block.operations]
    if not cond_ops:
        return None
    ret = cond_ops[-1]
    if len(ret.operands) != 1:
        return None
    cmp_val = ret.operands[0]
    if not isinstance(cmp_val.owner, (ir.Operation, ir.OpView)):
        return None
    cmp = cmp_val.owner.operation
    if short_name(cmp.name) != "compare":
        return None
    direction = _comparison(cmp)
    if direction is None:
        return None
    if "compare_type" in cmp.attributes and "UNSIGNED" in str(cmp.attributes["compare_type"]):
        return None  # wrap-around semantics: not modelled
    body_ops = [o.operation for o in body_block.operations]
    body_ret = body_ops[-1]

    def loop_invariant_constant(v: ir.Value) -> int | None:
        """A constant, or a loop-carried value that starts constant and the body passes on unchanged."""
        c = _int_constant(v)
        if c is not None or not (isinstance(v.owner, ir.Block) and v.owner == cond_block):
            return c
        j = ir.BlockArgument(v).arg_number
        passed = body_ret.operands[j]
        if not (isinstance(passed.owner, ir.Block) and passed.owner == body_block
                and ir.BlockArgument(passed).arg_number == j):
            return None
        return _int_constant(while_op.operands[j])

    lhs, rhs = _through_converts(cmp.operands[0]), _through_converts(cmp.operands[1])
    arg_index, bound = None, None
    for a, b, d in ((lhs, rhs, direction), (rhs, lhs, _FLIP[direction])):
        if isinstance(a.owner, ir.Block) and a.owner == cond_block:
            c = loop_invariant_constant(b)
            if c is not None:
                arg_index, bound, direction = ir.BlockArgument(a).arg_number, c, d
                break
    if arg_index is None:
        return None
    init = _int_constant(while_op.operands[arg_index])
    if init is None:
        return None
    nxt = body_ret.operands[arg_index]
    if not isinstance(nxt.owner, (ir.Operation, ir.OpView)):
        return None
    upd = nxt.owner.operation
    kind = short_name(upd.name)
    if kind not in ("add", "subtract"):
        return None
    step = None
    a, b = upd.operands[0], upd.operands[1]
    is_iv = lambda v: isinstance(v.owner, ir.Block) and v.owner == body_block \
        and ir.BlockArgument(v).arg_number == arg_index  # noqa: E731
    if is_iv(a):
        step = _int_constant(b)
    elif is_iv(b) and kind == "add":
        step = _int_constant(a)
    if step is None or step == 0:
        return None
    if kind == "subtract":
        step = -step
    return _iterations(init, bound, step, direction)


def _iterations(init: int, bound: int, step: int, direction: str) -> int | None:
    if direction == "LT" and step > 0:
        return max(0, -((init - bound) // step))
    if direction == "LE" and step > 0:
        return max(0, (bound - init) // step + 1)
    if direction == "GT" and step < 0:
        return max(0, -((bound - init) // -step))
    if direction == "GE" and step < 0:
        return max(0, (init - bound) // -step + 1)
    if direction == "NE" and (bound - init) % step == 0 and (bound - init) // step >= 0:
        return (bound - init) // step
    return None
