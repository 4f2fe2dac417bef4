"""``Cost``: the exact integer counts of one op occurrence, as a value with algebra.

``a + b`` (two costs together), ``cost * k`` (``k`` executions: a callee called ``k`` times, a loop body run
``k`` times), ``Cost.max(a, b, ...)`` (per metric: the most any branch of a ``case`` costs), ``a - b`` (what one
cost has above another) and the zero ``Cost()``. Every metric is a Python int; a float is refused.

Standard library only: rows carry a cost from the walk in the MLIR reader's child process to a parent that imports
no jaxlib (:mod:`mhlo_cost.analysis.wire`).
"""
from __future__ import annotations

from operator import add, sub
from typing import NamedTuple

#: The metrics of a cost, in order: what a call or a loop multiplies.
METRICS = (
    "gemm_flops",
    "conv_flops",
    "vector_flops",
    "transcendentals",
    "bytes_read",
    "bytes_written",
    "comm_bytes",
)


class Cost(NamedTuple):
    """One op occurrence's counts (a tuple underneath, so that it is cheap to make on the walk's hot path)."""

    gemm_flops: int = 0
    conv_flops: int = 0
    vector_flops: int = 0
    transcendentals: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    comm_bytes: int = 0

    def __add__(self, other):
        if not isinstance(other, Cost):  # raised, not NotImplemented: a tuple's concatenation must not answer
            raise TypeError(f"a Cost adds only a Cost, not {type(other).__name__}")
        return Cost._make(map(add, self, other))

    def __radd__(self, other):
        if other == 0 and not isinstance(other, tuple):  # sum(costs) starts from 0
            return self
        return NotImplemented

    def __sub__(self, other):
        if not isinstance(other, Cost):
            raise TypeError(f"a Cost subtracts only a Cost, not {type(other).__name__}")
        return Cost._make(map(sub, self, other))

    def __mul__(self, k):
        if not isinstance(k, int):  # a float count would make every figure inexact
            raise TypeError(f"a Cost scales by an int count, not {type(k).__name__}")
        return Cost._make(x * k for x in self)

    __rmul__ = __mul__

    @staticmethod
    def max(*costs: "Cost") -> "Cost":
        """Per metric, the largest of ``costs`` (the zero for none)."""
        if not costs:
            return ZERO
        return Cost._make(map(max, *costs))

    @property
    def compute(self) -> int:
        """FLOPs of every unit: matrix (GEMM and convolution) and vector."""
        return self.gemm_flops + self.conv_flops + self.vector_flops

    @property
    def nbytes(self) -> int:
        """Bytes read and written."""
        return self.bytes_read + self.bytes_written


#: The zero cost.
ZERO = Cost()

_new = tuple.__new__


def vector_cost(flops: int, transcendentals: int, read: int, written: int) -> Cost:
    """``Cost(vector_flops=flops, transcendentals=..., bytes_read=read, bytes_written=written)``, made as a tuple
    is (a NamedTuple's keyword constructor costs three times as much, on the walk's hot path: a rule per op)."""
    return _new(Cost, (0, 0, flops, transcendentals, read, written, 0))


def io_cost(read: int, written: int) -> Cost:
    """``Cost(bytes_read=read, bytes_written=written)``, made as a tuple is (see :func:`vector_cost`)."""
    return _new(Cost, (0, 0, 0, 0, read, written, 0))


class Counted(NamedTuple):
    """A rule's answer where the op's row says more than its cost: a ``kind`` or ``target`` other than the rule's
    own (a reducer body with an op no rule knows: ``unknown``), or a collective (``comm``: its kind, group size,
    number of groups and ring steps per execution; ``groups``: the device ids of each of its groups), or a
    ``warning`` the walk gives with the op's name and location."""

    cost: Cost
    kind: str = ""  # "": the rule's declared kind
    target: str = ""
    comm: tuple = ()  # (comm_kind, group_size, num_groups, comm_steps) of a collective
    groups: tuple = ()  # the row's replica_groups: the device ids of each group (collective_permute: its pairs)
    warning: tuple = ()  # (head, detail): the walk warns "head: <op> at <location>: detail"
