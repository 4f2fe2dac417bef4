"""Bounds and a schedule of a :class:`.graph.TaskGraph`.

* :func:`critical_path`: each node's earliest start with unlimited streams and nothing shared (its longest
  path from the start), the latest start that keeps the step's time, the slack between them, and the chain of
  nodes with none: the step's time can be no shorter than it.
* :func:`list_schedule`: the nodes on ``k`` streams of the chip, a node started when its predecessors are done
  and a stream is free, the ready node with the longest path to the end first (ties: program order);
  collectives run on the link, beside the streams. Running nodes share the chip: a node alone takes
  ``compute_s`` of the compute units' time, ``memory_s`` of the bandwidth's and ``comm_s`` of the link's over
  its ``time_s``, that is a fraction ``u`` of each; where the nodes running need more than all of a resource
  (``L = sum of u > 1``), each node that uses it runs ``L`` times slower (the node that uses resources with
  several loads, at the largest). So two memory-bound kernels together take as long as one after the other,
  a compute-bound one beside a memory-bound one takes the longer of the two, and a kernel's launch overhead
  (no resource) overlaps with anything.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from .graph import TaskGraph


@dataclass
class Path:
    """The critical path: per node its earliest start, latest start and slack (seconds); the chain of
    nodes that sets the step's time (program order); ``binding[i]``: the predecessor that sets node i's
    earliest start (None: it can start at once)."""

    length_s: float
    start: list[float]
    latest: list[float]
    binding: list
    chain: list[int]

    @property
    def slack(self) -> list[float]:
        return [max(0.0, b - a) for a, b in zip(self.start, self.latest)]


def critical_path(g: TaskGraph) -> Path:
    n = len(g.tasks)
    d = [t.time_s for t in g.tasks]
    start, binding = [0.0] * n, [None] * n
    for i in range(n):  # ids are a topological order: every edge goes from a smaller id to a larger one
        for p in g.preds[i]:
            f = start[p] + d[p]
            if f > start[i] or (binding[i] is None and f >= start[i]):
                start[i], binding[i] = f, p
    length = max((s + x for s, x in zip(start, d)), default=0.0)
    latest = [length - x for x in d]
    for i in range(n - 1, -1, -1):
        for p in g.preds[i]:
            latest[p] = min(latest[p], latest[i] - d[p])
    chain, end = [], max(range(n), key=lambda i: (start[i] + d[i], -i), default=None)
    while end is not None:
        chain.append(end)
        end = binding[end]
    return Path(length, start, latest, binding, chain[::-1])


def bottom_levels(g: TaskGraph, succs: list | None = None) -> list[float]:
    """Each node's longest path to the end, itself included (``succs``: ``g.succs``, where made already)."""
    succs, out = succs or g.succs, [t.time_s for t in g.tasks]
    for i in range(len(g.tasks) - 1, -1, -1):
        if succs[i]:
            out[i] += max([out[j] for j in succs[i]])
    return out


@dataclass
class Schedule:
    """A list schedule: ``k`` streams; per node its start and end (seconds) and stream (-1: the link)."""

    k: int
    start: list[float]
    end: list[float]
    stream: list[int]

    @property
    def makespan_s(self) -> float:
        return max(self.end, default=0.0)


def list_schedule(g: TaskGraph, k: int) -> Schedule:
    """``g`` on ``k`` streams sharing the chip's compute, bandwidth and link (see the module docstring)."""
    if k < 1:
        raise ValueError(f"streams must be at least 1, got {k}")
    n = len(g.tasks)
    succs = g.succs
    level = bottom_levels(g, succs)
    need = [len(p) for p in g.preds]
    uses = [t.use() for t in g.tasks]
    dur = [t.time_s for t in g.tasks]
    link = [t.compute_s == 0 and t.memory_s == 0 and t.comm_s > 0 for t in g.tasks]
    start, end, stream = [0.0] * n, [0.0] * n, [-1] * n
    ready: list = []  # (-level, node): the nodes that wait for a stream
    free = list(range(k))
    left: dict[int, float] = {}  # running node -> the time it still needs, alone
    now = 0.0

    def release(i: int) -> None:
        if link[i]:  # a collective starts at once, on the link
            start[i], left[i] = now, dur[i]
        else:
            heapq.heappush(ready, (-level[i], i))

    for i in range(n):
        if need[i] == 0:
            release(i)
    while ready or left:
        while ready and free:
            _, i = heapq.heappop(ready)
            stream[i] = free.pop(0)
            start[i], left[i] = now, dur[i]
        now, done = _advance(left, uses, now, end)
        for i in done:
            del left[i]
            if stream[i] >= 0:
                free.append(stream[i])
                free.sort()
            for j in succs[i]:
                need[j] -= 1
                if need[j] == 0:
                    release(j)
    return Schedule(k, start, end, stream)


def _advance(left: dict, uses: list, now: float, end: list) -> tuple[float, list]:
    """Run the nodes in ``left`` to the next end of one (or several): the time then and the nodes that ended
    (in order); their ends written."""
    if len(left) == 1:  # alone: nothing shared
        (i, rest), = left.items()
        end[i] = now + rest
        return now + rest, [i]
    lc = lm = ll = 0.0
    for i in left:
        c, m, k = uses[i]
        lc, lm, ll = lc + c, lm + m, ll + k
    slow, step = {}, math.inf
    for i, rest in left.items():
        c, m, k = uses[i]
        s = max(1.0, lc if c > 0 else 0.0, lm if m > 0 else 0.0, ll if k > 0 else 0.0)
        slow[i] = s
        if rest * s < step:
            step = rest * s
    done = []
    for i in left:
        if left[i] * slow[i] <= step * (1 + 1e-12):
            end[i] = now + step
            done.append(i)
        else:
            left[i] -= step / slow[i]
    return now + step, sorted(done)
