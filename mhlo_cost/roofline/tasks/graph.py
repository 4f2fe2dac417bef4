"""The task graph of a program: one node per kernel of an execution model, one edge per true dependency.

:func:`build` reads a :class:`~mhlo_cost.roofline.estimate.Roofline` (its rows, the walk's data flow
``analysis.producers`` and the kernels of its execution model: ``unfused`` one node per op row that runs,
``compiled`` one per fused kernel, ``eager`` one per framework call's kernel) and each collective as a node of
its own on the link. Rows that run no kernel (a reshape, a constant, a broadcast duplicated into its consumers)
are looked through: their consumers depend on what they depend on. An operand whose source the walk could not
follow (a loop-carried value, a call it could not see into) is never taken as free: its reader waits for every
node before it in program order.

Weights and buffers are versioned where the program is a training step (phases known) and an argument is
donated (updated in place): the optimizer-phase work downstream of the argument's optimizer readers makes its
new version, so every other reader of the old version comes before that work (a write-after-read edge).
:attr:`TaskGraph.updates` keeps, per donated argument, the nodes that make its new version (the next
iteration's forward waits for them: :mod:`.scenarios`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

#: A node's resources: the chip's compute units, its memory bandwidth, its links.
RESOURCES = ("compute", "memory", "link")


@dataclass(slots=True)
class Task:
    """One node: a kernel (or a collective) with its time when it runs alone (seconds, totals over its
    multiplicity) split into the work each resource does: ``compute_s`` at the units' peak, ``memory_s`` at
    full bandwidth, ``comm_s`` on the link, ``overhead_s`` (launch, dispatch) that uses none of them."""

    id: int
    name: str
    rows: tuple = ()  # the op rows it runs (indices of analysis.rows, program order)
    compute_s: float = 0.0
    memory_s: float = 0.0
    overhead_s: float = 0.0
    comm_s: float = 0.0
    block: str = ""
    phase: str = ""
    multiplicity: int = 1
    floor_s: float = 0.0  # a time it cannot run under (an eager kernel's host dispatch)

    @property
    def time_s(self) -> float:
        """Its time alone: max(compute, memory) + overhead, plus its communication (or its floor)."""
        return max(max(self.compute_s, self.memory_s) + self.overhead_s, self.floor_s) + self.comm_s

    @property
    def resource(self) -> str:
        """The resource that bounds it: link (a collective), compute or memory."""
        if self.comm_s > 0 and self.comm_s >= max(self.compute_s, self.memory_s):
            return "link"
        return "compute" if self.compute_s >= self.memory_s and self.compute_s > 0 else "memory"

    def copy(self, id: int, part: int = 1) -> "Task":
        """The same task as node ``id``; ``part`` > 1: one of that many equal chunks of its work (each paying
        the whole overhead)."""
        return Task(id, self.name, self.rows, self.compute_s / part, self.memory_s / part, self.overhead_s,
                    self.comm_s / part, self.block, self.phase, self.multiplicity, self.floor_s / part)

    def use(self) -> tuple[float, float, float]:
        """The fraction of the chip's compute, bandwidth and link it takes while it runs alone."""
        t = self.time_s
        if t <= 0:
            return 0.0, 0.0, 0.0
        return self.compute_s / t, self.memory_s / t, self.comm_s / t


@dataclass
class TaskGraph:
    """Nodes in program order (``tasks[i].id == i``) and edges from an earlier node to a later one."""

    tasks: list[Task]
    preds: list[list[int]]
    execution: str = "unfused"
    updates: dict = field(default_factory=dict)  # donated argument key -> nodes that make its new version
    readers: dict = field(default_factory=dict)  # argument key -> nodes that read it
    barriers: int = 0  # nodes made to wait for everything before them (an operand the walk could not follow)
    unversioned: int = 0  # readers of a donated argument's old version that come after its update

    @classmethod
    def of(cls, tasks: list[Task], edges) -> "TaskGraph":
        """A graph of ``tasks`` (ids their positions) and ``(from, to)`` edges, each from an earlier node."""
        preds = [set() for _ in tasks]
        for a, b in edges:
            if not 0 <= a < b < len(tasks):
                raise ValueError(f"edge {a} -> {b}: edges go from an earlier node to a later one")
            preds[b].add(a)
        return cls(tasks, [sorted(p) for p in preds])

    @property
    def succs(self) -> list[list[int]]:
        out = [[] for _ in self.tasks]
        for b, ps in enumerate(self.preds):
            for a in ps:
                out[a].append(b)
        return out

    @property
    def edges(self) -> list[tuple[int, int]]:
        return [(a, b) for b, ps in enumerate(self.preds) for a in ps]

    @property
    def serial_s(self) -> float:
        """Every node one after another: the fork-join figure the summary prints."""
        return math.fsum(t.time_s for t in self.tasks)

    def topological(self, latest_first: bool = False) -> list[int]:
        """A topological order (Kahn's): among the nodes ready, the earliest in program order, or
        (``latest_first``) the latest, which moves every node as far from program order as its edges allow."""
        import heapq

        need = [len(p) for p in self.preds]
        succs, sign = self.succs, -1 if latest_first else 1
        ready = [sign * i for i, n in enumerate(need) if n == 0]
        heapq.heapify(ready)
        out = []
        while ready:
            i = sign * heapq.heappop(ready)
            out.append(i)
            for j in succs[i]:
                need[j] -= 1
                if need[j] == 0:
                    heapq.heappush(ready, sign * j)
        return out
