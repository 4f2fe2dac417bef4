"""The exposed-communication schedule (:func:`mhlo_cost.network.schedule.exposed_comm`) made faster (issue 41: the
sweep schedules every full-depth program) gives, bit for bit, what it gave before: the schedule as it was written at
a727c43 is kept below as the reference, and both run on random programs (data flow, collectives sync and async,
unknown producers, equal times) and on a real program's rows."""
from __future__ import annotations

import heapq
import math
import random

import pytest

from mhlo_cost.network.schedule import Exposure, exposed_comm, schedule_graph

# -- the reference: the schedule as written before (a727c43), docstrings left out ---------------------------------


def reference_exposed(producers: list, compute: list, comm: list, is_comm: list,
                 async_done: dict | None = None, graph: tuple | None = None) -> Exposure:
    n = len(compute)
    if not any(is_comm):  # nothing to hide: the stream runs every row in program order and never waits
        t = 0.0
        for c in compute:
            t += c  # (as the schedule adds them)
        return Exposure([0.0] * n, t, math.fsum(compute))
    async_done = async_done or {}
    preds, barrier, succs = graph if graph is not None else reference_graph(producers)
    s = _RefState(n, compute, comm, is_comm, preds, barrier, async_done)
    for i in range(n):
        if not preds[i]:
            s.release(i)
    s.run(succs)
    busy = math.fsum(compute)
    return Exposure(s.exposed, max(s.t, max(s.finish, default=0.0)), busy)


def reference_graph(producers: list) -> tuple:
    n = len(producers)
    preds = [sorted({p for p in ps if isinstance(p, int) and 0 <= p < i}) for i, ps in enumerate(producers)]
    barrier = [any(p is None for p in ps) for ps in producers]
    succs: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    return preds, barrier, succs


class _RefState:
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

    def _earliest(self, i: int) -> tuple[float, int | None]:
        est, cause = 0.0, None
        for p in self.preds[i]:
            if self.finish[p] > est:
                est, cause = self.finish[p], (p if self.is_comm[p] else None)
        return est, cause

    def release(self, i: int) -> None:
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
            self.cause[i] = cause
            heapq.heappush(self.waiting, (est, i))

    def _schedule(self, i: int, start: float, finish: float, cause) -> None:
        self.start[i], self.finish[i], self.done[i] = start, finish, True
        if self.is_comm[i]:
            self.cause[i] = cause
        while self.ptr < self.n and self.done[self.ptr]:
            j = self.ptr
            if self.finish[j] > self.prefix[0]:
                self.prefix = (self.finish[j], j if self.is_comm[j] else None)
            if not self.is_comm[j]:
                self.prefix_compute = max(self.prefix_compute, self.finish[j])
            self.ptr += 1
        while self.held and self.held[0] <= self.ptr:
            self._ready(heapq.heappop(self.held))
        self._newly.append(i)

    def _gate(self) -> tuple[int, int | None]:
        for d, c in self.gates:
            if not self.done[c] or self.finish[c] > self.t:
                return d, c
        return self.n, None

    def _charge(self, c, t0: float, t1: float) -> None:
        while c is not None and t1 > t0:
            lo = max(t0, self.start[c])
            self.exposed[c] += t1 - lo
            t1, c = lo, self.cause[c]

    def run(self, succs) -> None:
        self._flush(succs)
        while True:
            while self.waiting and self.waiting[0][0] <= self.t:
                heapq.heappush(self.avail, heapq.heappop(self.waiting)[1])
            gate, holder = self._gate()
            if self.avail and self.avail[0] <= gate:
                i = heapq.heappop(self.avail)
                self._schedule(i, self.t, self.t + self.compute[i], None)
                self.t = self.finish[i]
                self._flush(succs)
                continue
            nxt = [(self.waiting[0][0], self.cause[self.waiting[0][1]])] if self.waiting else []
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

    def _flush(self, succs) -> None:
        while self._newly:
            i = self._newly.pop()
            for j in succs[i]:
                self.left[j] -= 1
                if self.left[j] == 0:
                    self.release(j)


# -- the comparison --------------------------------------------------------------------------------------------


def _program(rng: random.Random, n: int, comm_share: float, async_share: float, unknown_share: float):
    """A random program of ``n`` rows: each row reads up to three earlier rows (near ones more often), an argument,
    or (``unknown_share``) an unknown producer; times drawn from a few values so ties happen."""
    producers, compute, comm, is_comm = [], [], [], []
    for i in range(n):
        ps = []
        for _ in range(rng.randint(0, 3)):
            r = rng.random()
            if r < unknown_share:
                ps.append(None)
            elif r < 0.2 or i == 0:
                ps.append(f"arg{rng.randint(0, 3)}")
            else:
                ps.append(max(0, i - 1 - int(rng.expovariate(0.3))) if rng.random() < 0.8 else rng.randrange(i))
        c = rng.random() < comm_share
        producers.append(tuple(ps))
        is_comm.append(c)
        compute.append(0.0 if c else rng.choice([0.0, 1e-6, 2.5e-6, 1e-3, 0.1, 1.0, 3.0]))
        comm.append(rng.choice([1e-6, 1e-3, 0.5, 2.0, 7.0]) if c else 0.0)
    async_done = {}
    for i in range(n):
        if is_comm[i] and rng.random() < async_share:
            async_done[i] = min(n - 1, i + rng.randint(0, 6))
    return producers, compute, comm, is_comm, async_done


def _same(a: Exposure, b: Exposure) -> None:
    assert [x.hex() for x in a.exposed] == [x.hex() for x in b.exposed]
    assert a.makespan.hex() == b.makespan.hex() and a.compute.hex() == b.compute.hex()


@pytest.mark.parametrize("seed", range(40))
def test_random_programs_schedule_as_before(seed):
    rng = random.Random(seed)
    n = rng.choice([1, 2, 5, 30, 200, 800])
    shares = [(0.1, 0.0, 0.0), (0.3, 0.5, 0.0), (0.2, 0.3, 0.05), (0.05, 1.0, 0.02)][seed % 4]
    producers, compute, comm, is_comm, async_done = _program(rng, n, *shares)
    got = exposed_comm(producers, compute, comm, is_comm, async_done)
    want = reference_exposed(producers, compute, comm, is_comm, async_done)
    _same(got, want)
    _same(exposed_comm(producers, compute, comm, is_comm, async_done, graph=schedule_graph(producers)), want)
    assert [list(x) for x in schedule_graph(producers)[0]] == reference_graph(producers)[0]
    assert schedule_graph(producers)[1:] == reference_graph(producers)[1:]
    if any(is_comm):
        assert sum(want.exposed) >= 0.0 and want.makespan >= want.compute * (1 - 1e-12)


def test_a_sharded_stdit3_schedules_as_before():
    """A small STDiT3 under Ulysses (all_to_all beside compute) and under Megatron (all_reduce), as the sweep prices
    them: the fused and unfused times of the program on a chip."""
    from mhlo_cost.analysis import AnalysisOptions, analyze
    from mhlo_cost.lower.frontends import write
    from mhlo_cost.lower.frontends.api import LowerRequest, lower_request
    from mhlo_cost.roofline import Roofline, hardware_from_args
    from mhlo_cost.studies.sweep.grid import Point, build_config

    for parallel in ("ulysses", "megatron"):
        point = Point("stdit3", "default", parallel, 2, "bf16")
        cfg, _ = build_config(point, {"small": True, "depth": 2, "batch": 2})
        text = write(lower_request(LowerRequest(model="stdit3", config=cfg)), None).text
        a = analyze(text, AnalysisOptions(dataflow=True))
        rf = Roofline(a, hardware_from_args("dgx-h100", None), fuse_mode="elementwise")
        is_comm = [r.kind == "collective" for r in a.rows]
        assert any(is_comm)
        for times in ([t.kernel_s for t in rf.times], list(rf.fusion.row_time)):
            comm = [t.comm_s for t in rf.times]
            _same(exposed_comm(a.producers, times, comm, is_comm, a.async_done),
                  reference_exposed(a.producers, times, comm, is_comm, a.async_done))


@pytest.mark.parametrize("seed", range(40, 100))
def test_the_inline_step_schedules_as_before_with_held_and_gated_rows(seed):
    """The step written out in one loop (:meth:`_State._run_compute`) and ``_advance`` over locals: many rows that
    wait for everything before them (held, then readied as ``ptr`` passes them, within a compute row's step),
    async collectives whose gates stop the loop, collectives released by a compute row, and ties."""
    rng = random.Random(seed)
    n = rng.choice([3, 40, 300])
    shares = [(0.2, 0.6, 0.15), (0.4, 0.0, 0.3), (0.1, 1.0, 0.1)][seed % 3]
    producers, compute, comm, is_comm, async_done = _program(rng, n, *shares)
    if seed % 2:  # whole seconds: a collective and a compute row often finish together (which one is the cause)
        compute = [0.0 if c else float(rng.randint(0, 2)) for c in is_comm]
        comm = [float(rng.randint(1, 3)) if c else 0.0 for c in is_comm]
    _same(exposed_comm(producers, compute, comm, is_comm, async_done),
          reference_exposed(producers, compute, comm, is_comm, async_done))
