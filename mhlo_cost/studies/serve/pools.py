"""Serving on several schedulers at once: pipeline stages, data-parallel replicas, disaggregated prefill and decode
pools, as one discrete-event run of :mod:`.sim`'s scheduler.

An :class:`Engine` is one scheduler (vLLM's: :func:`.sim.schedule`) with its own KV blocks, requests and
:class:`~.sim.Trace`. It runs its steps on a :class:`Lane`, the GPUs a step passes through: the stages of a
pipeline one after another (one stage where there is none), each stage busy with one step at a time, the
activations sent between stages on the link. Engines that share a lane are a pipeline's virtual engines: as
vLLM V0 runs ``pipeline_parallel_size`` (``vllm/engine/llm_engine.py``: one ``Scheduler`` per virtual engine,
each given ``num_gpu_blocks // pipeline_parallel_size`` blocks in ``vllm/core/scheduler.py``; read, not
copied), ``pp`` schedulers each keep one step in flight, so that the stages work on ``pp`` micro-batches at
once: a step's latency is the sum of its stages and sends, the throughput bounded by the slowest stage.
Replicas have a lane each.

A request goes to the engine (of its pool) with the fewest unfinished requests, the lowest index on a tie: what
vLLM V0 does across virtual engines (``LLMEngine._add_processed_request``: the scheduler of the least
``get_num_unfinished_seq_groups``) and what vLLM V1's data-parallel client does (the engine of the fewest
waiting and running requests). Round robin would ignore a replica slowed by long requests; least loaded equals
it where all requests are alike.

Disaggregated prefill/decode (vLLM's ``--kv-transfer-config``, a proxy sending each request to a prefill
instance with ``max_tokens=1`` and then to a decode instance): a prefill engine computes the prompt (its
token is dropped); the prompt's KV cache (``prompt tokens x KV bytes per token``, exact) is sent on the link;
the decode engine then holds the prompt's KV and, as vLLM's scheduler does for a prompt whose KV is all
there (a cache hit stops one token short, ``kv_cache_manager.get_computed_blocks``), computes its last token
to sample the first output token: the time to first token is the prefill's queue and step, the transfer, and
the decode engine's queue and step. The decode engine produces all the output tokens.

Times are Python floats, added in event order; a run is deterministic.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .parallel import step_seconds
from .server import ServerConfig
from .sim import Trace, _State, _advance, _composition, schedule
from .simload import LoadError, Workload

#: Event kinds, in the order events of one instant are handled: steps end (their requests finish and the
#: closed loop sends the next), requests arrive, transferred KV arrives, engines start their next step.
DONE, ARRIVE, HANDOFF, START = range(4)


@dataclass
class Lane:
    """The GPUs a step runs through: ``stages`` (step-cost callables of the composition, one per stage), one
    after another, ``send(tokens)`` seconds between two; ``free[i]``: when stage ``i`` is next free."""

    stages: list
    send: Callable[[int], float] = lambda tokens: 0.0
    free: list = field(default_factory=list)
    busy: list = field(default_factory=list)  # seconds each stage computed

    def __post_init__(self):
        self.free = [0.0] * len(self.stages)
        self.busy = [0.0] * len(self.stages)

    def run(self, comp: tuple, start: float) -> float:
        """A step of composition ``comp`` (:func:`.sim._composition`) entering the first stage at ``start``:
        when its last stage ends (each stage takes steps first come, first served)."""
        t = start
        for i, cost in enumerate(self.stages):
            if i:
                t += self.send(comp[0])
            dt = step_seconds(cost, *comp)
            t = max(t, self.free[i]) + dt
            self.free[i] = t
            self.busy[i] += dt
        return t


class Engine:
    """One scheduler: its requests' state (:class:`~.sim._State`, indexed by the workload's request), blocks,
    lane and role (``"both"``; ``"prefill"``: prompts only; ``"decode"``: requests handed over)."""

    def __init__(self, work: Workload, cfg: ServerConfig, blocks: int, lane: Lane, role: str = "both"):
        n = len(work)
        self.s = _State(work, blocks, cfg.block_size)
        if role == "prefill":
            self.s.target[:] = 1
        self.cfg, self.blocks, self.lane, self.role = cfg, blocks, lane, role
        self.trace = Trace(np.zeros(n), np.full(n, np.nan), np.full(n, np.nan))
        self.step: tuple | None = None  # (ids, ns) of the step in flight
        self.ends: list = []  # when each step ended (the trace's steps, in order)
        self.woken = False
        self.start = 0.0

    @property
    def load(self) -> int:
        return len(self.s.running) + len(self.s.waiting)

    def take(self, r: int, computed: int = 0) -> None:
        """Request ``r`` joins the waiting queue, ``computed`` of its prompt's tokens in this engine's cache
        already (handed over: all but the last)."""
        self.s.computed[r] = computed
        self.s.waiting.append(r)

    def begin(self, now: float) -> float | None:
        """Schedule a step at ``now`` and run it on the lane: when it ends (None: nothing to run)."""
        trace, before = self.trace, self.trace.preemptions
        ids, ns = schedule(self.s, self.cfg, trace)
        if not ids.size:
            if trace.preemptions == before and (self.s.running or self.s.waiting):
                raise LoadError("the scheduler could not run any request (a bug: every request fits the cache)")
            return now if trace.preemptions != before else None
        end = self.lane.run(_composition(self.s, ids, ns), now)
        self.step, self.start = (ids, ns), now
        trace.step_s.append(end - now)
        trace.step_seqs.append(int(ids.size))
        trace.step_tokens.append(int(ns.sum()))
        trace.step_blocks.append(self.blocks - self.s.free)
        self.ends.append(end)
        return end

    def end(self, now: float) -> list:
        """The step in flight ends at ``now``: the requests it finished."""
        if self.step is None:
            return []
        (ids, ns), self.step = self.step, None
        return _advance(self.s, ids, ns, now, self.trace)


class Pools:
    """A run of ``front`` engines (they take new requests) and, disaggregated, ``back`` engines (decode: they
    take the requests the front ones prefilled, after ``transfer(r)`` seconds)."""

    def __init__(self, work: Workload, front: list, back: list | None = None,
                 transfer: Callable[[int], float] | None = None):
        self.work, self.front, self.back = work, front, back or []
        self.transfer = transfer or (lambda r: 0.0)
        self.events: list = []
        self.order = 0
        n = len(work)
        self.closed = work.arrivals is None
        self.arrival = np.zeros(n) if self.closed else np.asarray(work.arrivals, dtype=float)
        self.sent = self.done = 0

    def _push(self, t: float, kind: int, what) -> None:
        self.order += 1
        heapq.heappush(self.events, (t, kind, self.order, what))

    def _route(self, pool: list, r: int, now: float, computed: int = 0) -> None:
        e = min(pool, key=lambda x: x.load)  # (min keeps the first of equals: the lowest index)
        e.take(r, computed)
        if e.step is None and not e.woken:
            e.woken = True
            self._push(now, START, e)

    def _send(self, now: float) -> None:
        """The closed loop's next request, sent at ``now``."""
        if self.sent < len(self.work):
            self.arrival[self.sent] = now
            self._push(now, ARRIVE, self.sent)
            self.sent += 1

    def _ended(self, e: Engine, now: float) -> None:
        for r in e.end(now):
            if e.role == "prefill":
                self._push(now + self.transfer(r), HANDOFF, r)
                continue
            self.done += 1
            if self.closed:
                self._send(now)
        if not e.woken:
            e.woken = True
            self._push(now, START, e)

    def run(self) -> None:
        n = len(self.work)
        if self.closed:
            for _ in range(min(self.work.concurrency, n)):
                self._send(0.0)
        else:
            for r in range(n):
                self._push(float(self.arrival[r]), ARRIVE, r)
            self.sent = n
        while self.done < n:
            if not self.events:
                raise LoadError("the pools stopped with requests unfinished (a bug)")
            now, kind, _, what = heapq.heappop(self.events)
            if kind == DONE:
                self._ended(what, now)
            elif kind == ARRIVE:
                self._route(self.front, what, now)
            elif kind == HANDOFF:
                self._route(self.back, what, now, computed=int(self.work.inputs[what]) - 1)
            else:
                what.woken = False
                if what.step is None:
                    end = what.begin(now)
                    if end is not None:
                        self._push(end, DONE if what.step is not None else START, what)
                        what.woken = what.step is None

    def trace(self) -> Trace:
        """The run as one :class:`~.sim.Trace` of the engines that produce the output tokens (the decode pool,
        or every engine where none is apart): first tokens, finishes, gaps, steps, preemptions."""
        outs = self.back or self.front
        t = Trace(self.arrival.copy(), np.full(len(self.work), np.nan), np.full(len(self.work), np.nan))
        for e in outs:
            for a, b in ((t.first, e.trace.first), (t.finish, e.trace.finish)):
                np.copyto(a, b, where=~np.isnan(b))
            t.gaps += e.trace.gaps
            t.step_s += e.trace.step_s
            t.step_seqs += e.trace.step_seqs
            t.step_tokens += e.trace.step_tokens
            t.step_blocks += e.trace.step_blocks
        t.preemptions = sum(e.trace.preemptions for e in self.front + self.back)
        return t


def timeline(engines: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The steps of ``engines`` in the order they ended: (end times, sequences, fraction of the engine's KV
    blocks in use), for a plot over time."""
    ends = np.array([t for e in engines for t in e.ends], dtype=float)
    seqs = np.array([q for e in engines for q in e.trace.step_seqs], dtype=np.int64)
    used = np.array([u / e.blocks for e in engines for u in e.trace.step_blocks], dtype=float)
    order = np.argsort(ends, kind="stable")
    return ends[order], seqs[order], used[order]


def pool_figures(engines: list, duration: float, gpus_each: int) -> dict:
    """A pool's figures: instances, GPUs, steps, the sequences and tokens a step ran (mean), the fraction of the
    run its lanes' stages computed (mean over stages and instances), the KV blocks in use (time-weighted
    mean over its steps, of each instance's blocks), preemptions."""
    steps = [s for e in engines for s in e.trace.step_s]
    seqs = [s for e in engines for s in e.trace.step_seqs]
    toks = [s for e in engines for s in e.trace.step_tokens]
    used = [u / e.blocks for e in engines for u in e.trace.step_blocks]
    lanes = {id(e.lane): e.lane for e in engines}.values()
    busy = [b for lane in lanes for b in lane.busy]
    w = np.asarray(steps, dtype=float)
    return {"instances": len(lanes), "gpus": len(lanes) * gpus_each, "engines": len(engines), "steps": len(steps),
            "batch_mean": float(np.mean(seqs)) if seqs else 0.0,
            "tokens_per_step_mean": float(np.mean(toks)) if toks else 0.0,
            "busy_fraction": float(np.mean(busy) / duration) if duration > 0 and busy else None,
            "kv_utilisation_mean": (float((np.asarray(used) * w).sum() / w.sum()) if w.sum() > 0 else
                                    float(np.mean(used)) if used else 0.0),
            "preemptions": sum(e.trace.preemptions for e in engines)}


def simulate_pools(work: Workload, cfg: ServerConfig, make_lane: Callable[[], Lane], blocks: int,
                   dp: int = 1, pp: int = 1, disaggregate: tuple[int, int] | None = None,
                   transfer: Callable[[int], float] | None = None) -> Pools:
    """Run ``work`` on ``dp`` replicas (each a lane of ``make_lane()`` and ``pp`` virtual engines of
    ``blocks // pp`` blocks), or, with ``disaggregate=(P, D)``, on P prefill and D decode instances (one
    engine each, ``blocks`` blocks) with ``transfer(r)`` seconds to hand request ``r``'s KV over. The
    :class:`Pools` after the run."""
    if disaggregate is not None:
        p, d = disaggregate
        front = [Engine(work, cfg, blocks, make_lane(), "prefill") for _ in range(p)]
        back = [Engine(work, cfg, blocks, make_lane(), "decode") for _ in range(d)]
        pools = Pools(work, front, back, transfer)
    else:
        each = blocks // pp
        front = []
        for _ in range(dp):
            lane = make_lane()
            front += [Engine(work, cfg, each, lane) for _ in range(pp)]
        pools = Pools(work, front)
    _check_fits(work, cfg, min(e.blocks for e in pools.front + pools.back))
    pools.run()
    return pools


def _check_fits(work: Workload, cfg: ServerConfig, blocks: int) -> None:
    most = int(np.max(work.inputs + work.outputs)) - 1
    if -(-most // cfg.block_size) > blocks:
        raise LoadError(f"a request of {most} tokens in the cache needs more than the {blocks} KV blocks of "
                        f"{cfg.block_size} tokens an engine holds")
