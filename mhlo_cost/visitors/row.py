"""``Row``: one op occurrence of the walk, with its exact integer counts, and the walk's other plain facts.

Standard library only: rows travel from the walk in the MLIR reader's child process to a parent that imports
no jaxlib (:mod:`mhlo_cost.wire`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..tensorinfo import TensorInfo

#: The start of the warning for an entry function without work (an error under ``--strict``).
EMPTY_ENTRY = "empty entry function"


class AnalysisError(Exception):
    """The IR is valid MLIR but cannot be analysed (dynamic shapes, a missing callee, ...). One line."""


def short_name(op_name: str) -> str:
    """``stablehlo.dot_general`` -> ``dot_general``; ``func.call`` -> ``call``."""
    return op_name.split(".", 1)[1] if "." in op_name else op_name


class LocationInfo:
    """Scope of an op from its location name; ``file_line`` and ``stack`` are read from the location on first
    use, by ``read.file_line(loc, memo)`` and ``read.stack(loc, memo)`` (:data:`mhlo_cost.visitors.locations.READ`),
    or given (:meth:`resolved`)."""

    __slots__ = ("name", "scope", "site", "_loc", "_file_line", "_stack", "_memo", "_read")

    def __init__(self, name: str, scope: str, loc=None, memo: dict | None = None, read=None, site: int = 0):
        self.name = name  # the raw name of the outermost NameLoc, "" where there is none
        self.scope = scope  # the op's scope: its name without the primitive and transform segments
        # The source position under the name (one framework call: a torch op through torchax, a jnp call), as
        # a key; 0 where there is none. The eager execution model groups the ops of one call by it.
        self.site = site
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
        if self._file_line is not None and self._stack is not None:  # both read: the location is not needed
            self._loc = self._memo = self._read = None

    def describe(self) -> str:
        parts = [p for p in (self.file_line, self.name) if p]
        return " ".join(parts) if parts else "unknown location"

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

    def add_scaled(self, base: "Row", k: int) -> None:
        """Fold ``k`` more executions of ``base`` (the row this one was scaled from) into this row."""
        self.gemm_flops += base.gemm_flops * k
        self.conv_flops += base.conv_flops * k
        self.vector_flops += base.vector_flops * k
        self.transcendentals += base.transcendentals * k
        self.bytes_read += base.bytes_read * k
        self.bytes_written += base.bytes_written * k
        self.comm_bytes += base.comm_bytes * k
        self.multiplicity += base.multiplicity * k

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
