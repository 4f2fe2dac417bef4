"""``Row``: one op occurrence of the walk, with its exact integer counts, and the walk's other plain facts.

Standard library only: rows travel from the walk in the MLIR reader's child process to a parent that imports
no jaxlib (:mod:`mhlo_cost.analysis.wire`).
"""
from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from ..ir.tensorinfo import TensorInfo
from .costvalue import METRICS, ZERO, Cost  # noqa: F401 (METRICS imported from here too)

#: The start of the warning for an entry function without work (an error under ``--strict``).
EMPTY_ENTRY = "empty entry function"


class AnalysisError(Exception):
    """The IR is valid MLIR but cannot be analysed (dynamic shapes, a missing callee, ...). One line."""


def short_name(op_name: str) -> str:
    """``stablehlo.dot_general`` -> ``dot_general``; ``func.call`` -> ``call``."""
    return op_name.split(".", 1)[1] if "." in op_name else op_name


class LocationInfo:
    """Scope of an op from its location name; ``site``, ``file_line`` and ``stack`` are read from the location on
    first use, by ``read.site(loc)``, ``read.file_line(loc, memo)`` and ``read.stack(loc, memo)``
    (:data:`mhlo_cost.walk.locations.READ`), or given (:meth:`resolved`)."""

    __slots__ = ("name", "scope", "_site", "_loc", "_file_line", "_stack", "_memo", "_read")

    def __init__(self, name: str, scope: str, loc=None, memo: dict | None = None, read=None,
                 site: int | None = None):
        self.name = name  # the raw name of the outermost NameLoc, "" where there is none
        self.scope = scope  # the op's scope: its name without the primitive and transform segments
        self._site = site if site is not None or loc is not None else 0
        self._loc = loc
        self._memo = memo if memo is not None else {}
        self._read = read
        self._file_line: str | None = None if loc is not None else ""
        self._stack: tuple | None = None if loc is not None else ()

    @classmethod
    def resolved(cls, name: str, scope: str, file_line: str, site: int = 0, stack: tuple = ()) -> "LocationInfo":
        """A location whose ``file_line`` and ``stack`` are known already (read in another process)."""
        info = cls(name, scope, site=site)
        info._file_line = file_line
        info._stack = stack
        return info

    @property
    def site(self) -> int:
        """The source position under the name (one framework call: a torch op through torchax, a jnp call), as a
        key; 0 where there is none. The eager execution model groups the ops of one call by it."""
        if self._site is None:
            self._site = self._read.site(self._loc)
            self._release()
        return self._site

    @property
    def file_line(self) -> str:
        """``file:line`` of the innermost source frame, or ""."""
        if self._file_line is None:
            try:
                self._file_line = self._read.file_line(self._loc, self._memo)
            except RuntimeError:  # a file name that is not UTF-8 (nanobind's conversion error)
                self._file_line = "?"
            self._release()
        return self._file_line

    @property
    def stack(self) -> tuple:
        """The Python frames of the op's call-site chain, outermost first: ``(function, file, line, column)`` of
        the call made in each (torchax programs carry them); () where the location has none."""
        if self._stack is None:
            try:
                self._stack = self._read.stack(self._loc, self._memo)
            except RuntimeError:
                self._stack = ()
            self._release()
        return self._stack

    def _release(self) -> None:
        if self._file_line is not None and self._stack is not None and self._site is not None:  # all read: the
            # location is not needed
            self._loc = self._memo = self._read = None

    def describe(self) -> str:
        parts = [p for p in (self.file_line, self.name) if p]
        return " ".join(parts) if parts else "unknown location"

def _metric(name: str) -> property:
    return property(attrgetter("cost." + name), doc=f"``cost.{name}``")


@dataclass(slots=True)
class Row:
    """One op occurrence: its identity (what op, where, in which scope, on which values) and its :class:`Cost`.

    Built with keywords (:mod:`mhlo_cost.analysis.wire` alone rebuilds rows by field order); the metrics read through
    (``row.gemm_flops`` is ``row.cost.gemm_flops``)."""

    op: str  # full op name, e.g. "stablehlo.dot_general"
    kind: str  # dot, conv, elementwise, transcendental, reduce, data, collective, unknown, ...
    loc: LocationInfo  # where the op is written: scope and (lazily) file:line
    scope: str  # scope path, e.g. "spatial_blocks.3/attn" (the caller's scope in front for callees)
    result: TensorInfo | tuple  # the result type (a tuple of them for several results)
    cost: Cost = ZERO  # every execution of the op together (one per multiplicity)
    multiplicity: int = 1
    note: str = ""
    target: str = ""  # custom_call target, unknown op's name
    comm_kind: str = ""
    group_size: int = 0
    num_groups: int = 0
    comm_steps: int = 0  # ring steps per execution (latency term of the alpha-beta model)
    operands: tuple = ()  # TensorInfo of each operand
    weights: tuple = ()  # dot / conv: indices of operands that are function arguments (weights, inputs)
    func: str = ""  # the function the op is written in
    index: int = 0  # program order
    values: tuple = ()  # keys (hashes) of the operand and result values: ((operands...), (results...))
    # Collectives: the device ids of each replica group (collective_permute: its (source, target) pairs).
    replica_groups: tuple = ()

    gemm_flops = _metric("gemm_flops")
    conv_flops = _metric("conv_flops")
    vector_flops = _metric("vector_flops")
    transcendentals = _metric("transcendentals")
    bytes_read = _metric("bytes_read")
    bytes_written = _metric("bytes_written")
    comm_bytes = _metric("comm_bytes")

    def scaled(self, k: int, scope_prefix: str, note: str) -> "Row":
        """``k`` executions of this row, in the scope of ``scope_prefix`` (a call site, a loop), noted."""
        return Row(op=self.op, kind=self.kind, loc=self.loc, scope=_join_scope(scope_prefix, self.scope),
                   result=self.result, cost=self.cost * k, multiplicity=self.multiplicity * k,
                   note=_join_note(note, self.note), target=self.target, comm_kind=self.comm_kind,
                   group_size=self.group_size, num_groups=self.num_groups, comm_steps=self.comm_steps,
                   operands=self.operands, weights=self.weights, func=self.func, replica_groups=self.replica_groups)

    def add_scaled(self, base: "Row", k: int) -> None:
        """Fold ``k`` more executions of ``base`` (the row this one was scaled from) into this row."""
        self.cost += base.cost * k
        self.multiplicity += base.multiplicity * k

    @property
    def compute(self) -> int:
        return self.cost.compute

    @property
    def out_elems(self) -> int:
        """Elements of the result (all results together)."""
        if isinstance(self.result, TensorInfo):
            return self.result.nelems
        return sum(t.nelems for t in self.result)

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
