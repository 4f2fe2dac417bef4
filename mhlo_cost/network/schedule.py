"""Exposed communication: how much of each collective's time the compute around it cannot hide.

The model (documented in docs/network.md, "Communication on real systems"):

* compute runs on ONE stream, one op at a time, each for its estimated time;
* a collective runs beside the stream from the moment its operands are ready until its time has
  passed; collectives in flight at the same time do not slow each other (no contention);
* an async collective (``async_start`` ... ``async_done``) starts only once the compute written before
  its start has run, and nothing written after its done runs before it finishes;
* an op whose operand's producer is unknown (a loop-carried value) waits for everything before it;
* the stream runs, at each moment, the first op in program order whose operands are ready (list
  scheduling): compute that neither feeds a synchronous collective nor depends on it runs while the
  collective is in flight, and whatever compute is written between an async start and its done.

When no op is ready the stream waits; that wait is exposed communication, charged to the collective
it waits for (and, for the part before that collective started, to the collective it waited for in
turn). The waits add up to the makespan minus the compute time, so per-block sums add up too.

Times are finite and >= 0 (every profile figure is checked so: :mod:`mhlo_cost.machines.limits`): the schedule
relies on ``t`` never going back (``tests/test_schedule_fast.py`` compares the schedule with its former code).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass


@dataclass
class Exposure:
    """Per row: the exposed seconds of each collective (0 for other rows); the schedule's length."""

    exposed: list
    makespan: float
    compute: float


def exposed_comm(producers: list, compute: list, comm: list, is_comm: list,
                 async_done: dict | None = None, graph: tuple | None = None) -> Exposure:
    """The schedule above over rows in program order.

    ``producers[i]``: the source of each operand of row i (a row index, a function argument as a string,
    or None where unknown); ``compute[i]``: its time on the stream; ``comm[i]``: a collective's time;
    ``is_comm[i]``: whether row i is a collective; ``async_done[i]``: for an async collective, the index
    of the last row written before its done. ``graph``: :func:`schedule_graph` of ``producers``, where the
    caller keeps it (one program priced on several chips).
    """
    n = len(compute)
    if not any(is_comm):  # nothing to hide: the stream runs every row in program order and never waits
        t = 0.0
        for c in compute:
            t += c  # (as the schedule adds them)
        return Exposure([0.0] * n, t, math.fsum(compute))
    async_done = async_done or {}
    preds, barrier, succs = graph if graph is not None else schedule_graph(producers)
    s = _State(n, compute, comm, is_comm, preds, barrier, async_done)
    for i in range(n):
        if not preds[i]:
            s.release(i)
    s.run(succs)
    busy = math.fsum(compute)
    return Exposure(s.exposed, max(s.t, max(s.finish, default=0.0)), busy)


def schedule_graph(producers: list) -> tuple:
    """(preds, barrier, succs) of the schedule: per row, its earlier producer rows (sorted, each once), whether
    it waits for everything before it (an unknown producer), and the rows it feeds."""
    n = len(producers)
    preds: list = [()] * n
    barrier = [False] * n
    succs: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(producers):
        if len(ps) == 1:  # (most rows: one operand)
            p = ps[0]
            if isinstance(p, int) and 0 <= p < i:
                preds[i] = [p]
                succs[p].append(i)
            else:
                preds[i], barrier[i] = [], p is None
            continue
        if len(ps) == 2:  # (the next most: two operands)
            a, b = ps
            ka, kb = isinstance(a, int) and 0 <= a < i, isinstance(b, int) and 0 <= b < i
            mine = ([a] if a == b else [a, b] if a < b else [b, a]) if ka and kb else [a] if ka else [b] if kb else []
            preds[i], barrier[i] = mine, a is None or b is None
        else:
            preds[i] = mine = sorted({p for p in ps if isinstance(p, int) and 0 <= p < i})
            barrier[i] = None in ps
        for p in mine:
            succs[p].append(i)
    return preds, barrier, succs


class _State:
    def __init__(self, n, compute, comm, is_comm, preds, barrier, async_done):
        self.n, self.compute, self.comm, self.is_comm = n, compute, comm, is_comm
        self.preds, self.barrier, self.async_done = preds, barrier, async_done
        self.left = [len(p) for p in preds]
        self.finish = [0.0] * n
        self.start = [0.0] * n
        self.cause: list = [None] * n  # the collective that set a row's earliest start
        self.done = [False] * n  # scheduled (its finish is known)
        self.exposed = [0.0] * n
        self.t = 0.0
        self.ptr = 0  # rows 0..ptr-1 are all scheduled
        self.prefix = (0.0, None)  # (latest finish, its collective) of rows 0..ptr-1
        self.prefix_compute = 0.0
        self.held: list = []  # rows waiting for every row before them to be scheduled
        self._newly: list = []  # rows scheduled whose consumers are still to be released
        self.waiting: list = []  # (earliest start, index)
        self.avail: list = []  # index
        # Gates: rows after an async collective's done wait for it.
        self.gates = sorted((max(d, c), c) for c, d in async_done.items())
        self.gate_at = 0  # gates before it have passed (their collective done by ``t``): they stay passed

    def _earliest(self, i: int) -> tuple[float, int | None]:
        """Row i's earliest start: its latest producer's finish, and that producer if a collective."""
        est, cause = 0.0, None
        for p in self.preds[i]:
            if self.finish[p] > est:
                est, cause = self.finish[p], (p if self.is_comm[p] else None)
        return est, cause

    def release(self, i: int) -> None:
        """All of row i's known producers are scheduled."""
        if self.barrier[i] or (self.is_comm[i] and i in self.async_done):
            if self.ptr < i:
                heapq.heappush(self.held, i)
                return
        self._ready(i)

    def _ready(self, i: int) -> None:
        est, cause = self._earliest(i)
        if self.barrier[i] and self.prefix[0] > est:
            est, cause = self.prefix
        elif self.is_comm[i] and i in self.async_done and self.prefix_compute > est:
            est, cause = self.prefix_compute, None
        if self.is_comm[i]:
            self._schedule(i, est, est + self.comm[i], cause)
        else:
            self._wait(i, est, cause)

    def _wait(self, i: int, est: float, cause) -> None:
        """Compute row i may start at ``est``: available now where ``est`` has come (``t`` never goes back, so
        the row would be moved there before the next choice anyway), else waiting until it comes."""
        self.cause[i] = cause
        if est <= self.t:
            heapq.heappush(self.avail, i)
        else:
            heapq.heappush(self.waiting, (est, i))

    def _schedule(self, i: int, start: float, finish: float, cause) -> None:
        self.start[i], self.finish[i], self.done[i] = start, finish, True
        if self.is_comm[i]:
            self.cause[i] = cause
        if i == self.ptr:  # (else row ptr is still not scheduled: nothing moves)
            self._advance()
        self._newly.append(i)

    def _advance(self) -> None:
        """Move ptr past the rows scheduled; ready the held rows it passes (readying one may move ptr again)."""
        n, done, finish, is_comm = self.n, self.done, self.finish, self.is_comm
        ptr, prefix, prefix_compute = self.ptr, self.prefix, self.prefix_compute
        while ptr < n and done[ptr]:
            f = finish[ptr]
            if f > prefix[0]:
                prefix = (f, ptr if is_comm[ptr] else None)
            if not is_comm[ptr] and f > prefix_compute:  # (a max of finite times)
                prefix_compute = f
            ptr += 1
        self.ptr, self.prefix, self.prefix_compute = ptr, prefix, prefix_compute
        held = self.held
        while held and held[0] <= self.ptr:
            self._ready(heapq.heappop(held))

    def _gate(self) -> tuple[int, int | None]:
        """(index above which rows may not run yet, the async collective holding them): the first gate in order
        whose collective is not done by ``t``. A gate that has passed stays passed (a row is scheduled once and
        ``t`` never goes back), so the search starts where the last one stopped: linear in the gates over a run."""
        gates, k = self.gates, self.gate_at
        while k < len(gates) and self.done[gates[k][1]] and not self.finish[gates[k][1]] > self.t:
            k += 1
        self.gate_at = k
        return gates[k] if k < len(gates) else (self.n, None)

    def _charge(self, c, t0: float, t1: float) -> None:
        """The wait [t0, t1] for collective c: its own part, then what it waited for in turn."""
        while c is not None and t1 > t0:
            lo = max(t0, self.start[c])
            self.exposed[c] += t1 - lo
            t1, c = lo, self.cause[c]

    def run(self, succs) -> None:
        """The list schedule, its common step inline (:meth:`_run_compute`); what ``t`` waits for charged."""
        self._flush(succs)
        waiting, avail, pop, push = self.waiting, self.avail, heapq.heappop, heapq.heappush
        gated = bool(self.gates)
        while True:
            while waiting and waiting[0][0] <= self.t:
                push(avail, pop(waiting)[1])
            gate, holder = self._gate() if gated else (self.n, None)
            if avail and avail[0] <= gate:
                self._run_compute(succs, gate if gated else None)
                continue
            nxt = [(waiting[0][0], self.cause[waiting[0][1]])] if waiting else []
            if holder is not None and self.done[holder]:
                nxt.append((self.finish[holder], holder))
            if not nxt:
                break
            when, c = min(nxt, key=lambda x: x[0])
            self._charge(c, self.t, when)
            self.t = when
        tail = sorted((self.finish[c], c) for c in range(self.n) if self.is_comm[c] and self.finish[c] > self.t)
        for when, c in tail:
            self._charge(c, self.t, when)
            self.t = when

    def _run_compute(self, succs, gate) -> None:
        """Run the available compute rows one after another while the first may run (``gate``: :meth:`_gate`'s, None
        where there is no async collective): each on the stream now (:meth:`_advance` where it was the first row not
        scheduled, before ``t`` moves to its finish), then what it fed released as :meth:`_flush` releases it, the
        common case written out here (a compute row with known producers: ready now or waiting, as :meth:`_ready`
        and :meth:`_wait` make it; a collective or a row that waits for what is before it goes through
        :meth:`release`). The same operations in the same order as one call per step made them, with a few calls
        per row instead of ten (issue 41: the sweep schedules every full-depth program, ten thousand rows and more;
        ``tests/test_schedule_fast.py`` compares it with the schedule written before)."""
        waiting, avail, pop, push = self.waiting, self.avail, heapq.heappop, heapq.heappush
        start, finish, done, compute, left = self.start, self.finish, self.done, self.compute, self.left
        preds, barrier, is_comm, cause_of = self.preds, self.barrier, self.is_comm, self.cause
        newly, release, advance = self._newly, self.release, self._advance
        t = self.t
        while True:
            i = pop(avail)
            start[i], done[i] = t, True
            finish[i] = t + compute[i]
            if i == self.ptr:  # (before ``t`` moves: a row it readies is compared with the start)
                advance()
            t = self.t = finish[i]
            newly.append(i)
            while newly:
                for j in succs[newly.pop()]:
                    left[j] -= 1
                    if left[j]:
                        continue
                    if barrier[j] or is_comm[j]:
                        release(j)
                        continue
                    est, cause = 0.0, None
                    for p in preds[j]:
                        if finish[p] > est:
                            est, cause = finish[p], (p if is_comm[p] else None)
                    cause_of[j] = cause
                    if est <= t:
                        push(avail, j)
                    else:
                        push(waiting, (est, j))
            while waiting and waiting[0][0] <= t:
                push(avail, pop(waiting)[1])
            if not avail:
                return
            if gate is not None:
                gate = self._gate()[0]
            if avail[0] > (self.n if gate is None else gate):
                return

    def _flush(self, succs) -> None:
        while self._newly:
            i = self._newly.pop()
            for j in succs[i]:
                self.left[j] -= 1
                if self.left[j] == 0:
                    self.release(j)
