"""A serving simulation: continuous batching as vLLM's V1 scheduler runs it, every step priced by a step-cost
function (:class:`~.stepmodel.StepModel` from the IR, or any callable a test gives).

The scheduler (read from vLLM ``vllm/v1/core/sched/scheduler.py``, ``schedule()``; not copied): every request
has ``num_tokens`` (prompt + tokens generated) and ``num_computed`` (tokens whose KV is in the cache). Each step
has a token budget (``max_num_batched_tokens``). Running requests first, in admission order: each is given
``min(num_tokens - num_computed, budget)`` tokens (one for a decode; a prompt's chunk otherwise: chunked
prefill, mixed with the decodes). Its KV blocks (``block_size`` tokens each, :func:`memory`) are allocated for
``num_computed + new``; where the free blocks do not suffice, the last running request is preempted (its
blocks freed, ``num_computed`` back to 0: recomputed from its prompt and the tokens it already produced; it goes
to the front of the waiting queue) until they do, or until the request itself is the one preempted. Then, if
no request was preempted in this step, waiting requests (first come, first served) are admitted while the
budget, ``max_num_seqs`` and the free blocks allow. After the step, a request whose computed tokens reach its
``num_tokens`` has produced one token; one that reaches its output length finishes and frees its blocks (the
closed loop sends the next request then).

With speculative decoding (:mod:`.spec`) a decoding request is given its drafts beside its token (their KV blocks
too), and after the step takes the tokens its verification accepted.

A step's cost is asked of ``step_time(tokens, context_flops, context_bytes, longest)``: the step's query tokens,
its attention terms summed over sequences (see :mod:`.stepmodel`) and its longest context.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .parallel import step_seconds
from .server import ServerConfig
from .simload import LoadError, Workload

@dataclass
class Trace:
    """What the run recorded: per request and per step (numpy arrays once finished)."""

    arrival: np.ndarray
    first: np.ndarray
    finish: np.ndarray
    gaps: list = field(default_factory=list)  # arrays of inter-token gaps (s), every request's (:attr:`itl`)
    step_s: list = field(default_factory=list)
    step_seqs: list = field(default_factory=list)
    step_tokens: list = field(default_factory=list)
    step_blocks: list = field(default_factory=list)  # blocks in use during the step
    preemptions: int = 0

    @property
    def itl(self) -> np.ndarray:
        return np.concatenate(self.gaps) if self.gaps else np.zeros(0)


class _State:
    """Per request (numpy arrays indexed by request): tokens so far, computed, produced, blocks held, the last
    token's time; the running order (a list) and the waiting queue; the free blocks."""

    def __init__(self, work: Workload, blocks: int, block_size: int, spec=None):
        n = len(work)
        self.spec = spec  # a Speculation (.spec), or None
        self.credit = np.zeros(n)
        self.target = work.outputs.astype(np.int64)
        self.num_tokens = work.inputs.astype(np.int64).copy()
        self.computed = np.zeros(n, dtype=np.int64)
        self.made = np.zeros(n, dtype=np.int64)
        self.held = np.zeros(n, dtype=np.int64)
        self.free = blocks
        self.block_size = block_size
        self.last = np.zeros(n)
        self.running: list = []
        self.waiting: deque = deque()


def _want(s: _State, r) -> np.ndarray | int:
    """Tokens request(s) ``r`` would compute this step: the rest of its prompt, or its next token (and, with
    speculation, its ``k`` drafts where it decodes)."""
    rem = s.num_tokens[r] - s.computed[r]
    if s.spec is None:
        return rem
    return rem + s.spec.tokens * ((rem == 1) & (s.made[r] >= 1))


def _preempt(s: _State, trace: Trace) -> int:
    victim = s.running.pop()
    s.free += int(s.held[victim])
    s.held[victim] = 0
    s.computed[victim] = 0
    s.waiting.appendleft(victim)
    trace.preemptions += 1
    return victim


def _running_fast(s: _State, cfg: ServerConfig):
    """The running requests' tokens, all at once, where the free blocks cover every one (no preemption): the
    same as :func:`_running_slow` then; None otherwise."""
    if not s.running:
        return [], [], cfg.max_num_batched_tokens
    r = np.array(s.running, dtype=np.int64)
    rem = _want(s, r)
    before = np.cumsum(rem) - rem
    n = np.minimum(rem, np.maximum(cfg.max_num_batched_tokens - before, 0))
    need = np.where(n > 0, np.maximum(-(-(s.computed[r] + n) // cfg.block_size) - s.held[r], 0), 0)
    total = int(need.sum())
    if total > s.free:
        return None
    s.free -= total
    s.held[r] += need
    keep = n > 0
    return r[keep].tolist(), n[keep].tolist(), cfg.max_num_batched_tokens - int(n.sum())


def _running_slow(s: _State, cfg: ServerConfig, trace: Trace):
    """The running requests one by one, preempting the last running request while the blocks do not suffice."""
    budget, bs, ids, ns, preempted = cfg.max_num_batched_tokens, cfg.block_size, [], [], False
    i = 0
    while i < len(s.running) and budget > 0:
        r = s.running[i]
        n = int(min(_want(s, r), budget))
        need = max(int(-(-(s.computed[r] + n) // bs) - s.held[r]), 0)
        while need > s.free:
            preempted = True
            if _preempt(s, trace) == r:
                break
        else:
            s.free -= need
            s.held[r] += need
            ids.append(r)
            ns.append(n)
            budget -= n
            i += 1
            continue
        break
    return ids, ns, budget, preempted


def schedule(s: _State, cfg: ServerConfig, trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """One step's requests and their new tokens, as the module says."""
    fast = _running_fast(s, cfg)
    ids, ns, budget, preempted = (*fast, False) if fast is not None else _running_slow(s, cfg, trace)
    while not preempted and s.waiting and budget > 0 and len(s.running) < cfg.max_num_seqs:
        r = s.waiting[0]
        n = int(min(s.num_tokens[r] - s.computed[r], budget))
        need = int(-(-(s.computed[r] + n) // cfg.block_size) - s.held[r])  # (a handed-over prompt: its KV too)
        if need > s.free:
            break
        s.waiting.popleft()
        s.running.append(r)
        s.free -= need
        s.held[r] += need
        ids.append(r)
        ns.append(n)
        budget -= n
    return np.array(ids, dtype=np.int64), np.array(ns, dtype=np.int64)


def _composition(s: _State, ids: np.ndarray, ns: np.ndarray) -> tuple[int, int, int, int, int]:
    """(query tokens, context FLOP and byte terms, longest context, the decoding sequences' context positions)."""
    p = s.computed[ids]
    return (int(ns.sum()), int((ns * p + ns * (ns + 1) // 2).sum()), int((p + ns).sum()), int((p + ns).max()),
            int((p + ns)[ns == 1].sum()))



def _finish(s: _State, fin: np.ndarray, now: float, trace: Trace) -> list:
    """Requests ``fin`` finish at ``now``: their blocks freed, out of the running list; their ids, in order."""
    if fin.size:
        trace.finish[fin] = now
        s.free += int(s.held[fin].sum())
        s.held[fin] = 0
        gone = set(fin.tolist())
        s.running = [r for r in s.running if r not in gone]
    return fin.tolist()


def _verified(s: _State, ids: np.ndarray, ns: np.ndarray, now: float, trace: Trace) -> np.ndarray:
    """Speculating sequences of a step (those given more tokens than they have to compute) take their accepted
    tokens (:meth:`.spec.Speculation.take`); the mask of them."""
    spec = (s.num_tokens[ids] - s.computed[ids]) < ns
    if s.spec is None or not spec.any():
        return spec
    r = ids[spec]
    credit = s.credit[r]
    got = s.spec.take(credit, np.minimum(ns[spec], s.target[r] - s.made[r]))
    s.credit[r] = credit
    s.computed[r] += got
    s.num_tokens[r] += got
    s.made[r] += got
    trace.gaps.append(now - s.last[r])
    s.last[r] = now
    return spec


def _advance(s: _State, ids: np.ndarray, ns: np.ndarray, now: float, trace: Trace) -> list:
    """After a step ending at ``now``: computed tokens, tokens produced, finished requests (returned in the
    step's order, their blocks freed)."""
    spec = _verified(s, ids, ns, now, trace)
    if spec.any():
        done = ids[spec]
        ids, ns = ids[~spec], ns[~spec]
    else:
        done = ids[:0]
    s.computed[ids] += ns
    hit = ids[s.computed[ids] == s.num_tokens[ids]]
    s.num_tokens[hit] += 1
    s.made[hit] += 1
    made = s.made[hit]
    trace.first[hit[made == 1]] = now
    later = hit[made > 1]
    if later.size:
        trace.gaps.append(now - s.last[later])
    s.last[hit] = now
    fin = np.concatenate([done[s.made[done] >= s.target[done]], hit[made >= s.target[hit]]])
    return _finish(s, fin, now, trace)


def _stretch(s: _State, cfg: ServerConfig, limit: float, now: float):
    """Where every running request decodes, none waits and no block is short: the steps up to the first that
    finishes a request (and none starting after ``limit``, the next arrival), run at once: the same steps the
    loop would run one by one. (ids, computed before, steps) or None."""
    if s.waiting or not s.running or len(s.running) > cfg.max_num_batched_tokens:
        return None
    r = np.array(s.running, dtype=np.int64)
    if np.any(s.num_tokens[r] - s.computed[r] != 1) or np.any(s.made[r] < 1):  # (a prompt's last token: no)
        return None
    k = int(np.min(s.target[r] - s.made[r]))
    if k < 2 or now >= limit:
        return None
    p = s.computed[r]
    need = -(-(p + k) // cfg.block_size) - s.held[r]
    if int(need.sum()) > s.free:
        return None
    return r, p, k


def _run_stretch(s: _State, stretch, now: float, limit: float, step_time, trace: Trace, blocks: int):
    """Run a stretch's steps (those starting before ``limit``): the time after them and the finished ids."""
    r, p, k = stretch
    j = np.arange(1, k + 1)
    ctx = int((p + 1).sum()) + r.size * (j - 1)  # decodes score and read p + 1 positions, one more each step
    longest = int(p.max()) + j
    many = getattr(step_time, "many", None)
    dts = (np.asarray(many(int(r.size), ctx, ctx, longest), dtype=float) if many is not None else
           np.array([float(step_time(int(r.size), int(c), int(c), int(m))) for c, m in zip(ctx, longest)]))
    ends = np.cumsum(np.concatenate([[now], dts]))[1:]  # added one by one, as the loop adds them
    starts = np.concatenate([[now], ends[:-1]])
    k = max(int(np.searchsorted(starts, limit, side="left")), 1)
    dts, ends, j = dts[:k], ends[:k], j[:k]
    need = -(-(p[:, None] + j[None, :]) // s.block_size) - s.held[r][:, None]  # blocks per request, per step
    trace.step_blocks.extend((blocks - s.free + need.sum(axis=0)).tolist())
    trace.step_s.extend(dts.tolist())
    trace.step_seqs.extend([int(r.size)] * k)
    trace.step_tokens.extend([int(r.size)] * k)
    s.free -= int(need[:, -1].sum())
    s.held[r] += need[:, -1]
    trace.gaps.append(ends[0] - s.last[r])
    if k > 1:
        trace.gaps.append(np.tile(np.diff(ends), r.size))
    s.computed[r] += k
    s.num_tokens[r] += k
    s.made[r] += k
    now = float(ends[-1])
    s.last[r] = now
    return now, _finish(s, r[s.made[r] >= s.target[r]], now, trace)


def _draft_s(s: _State, ids: np.ndarray, ns: np.ndarray, step_time) -> float:
    """The drafting of a step's speculating sequences: ``draft`` x ``k`` target decode steps of them."""
    if s.spec is None or s.spec.draft == 0:
        return 0.0
    spec = (s.num_tokens[ids] - s.computed[ids]) < ns
    if not spec.any():
        return 0.0
    p = s.computed[ids[spec]] + 1
    return s.spec.draft * s.spec.tokens * float(step_time(int(p.size), int(p.sum()), int(p.sum()), int(p.max())))


def _one_step(s: _State, cfg: ServerConfig, step_time, trace: Trace, blocks: int, now: float):
    """One step through the scheduler: the time after it and the finished ids."""
    before = trace.preemptions
    ids, ns = schedule(s, cfg, trace)
    if not ids.size:  # its only request preempted itself: the next step admits it again (an empty step)
        if trace.preemptions == before:
            raise LoadError("the scheduler could not run any request (a bug: every request fits the cache)")
        return now, []
    dt = step_seconds(step_time, *_composition(s, ids, ns)) + _draft_s(s, ids, ns, step_time)
    now += dt
    trace.step_s.append(dt)
    trace.step_seqs.append(int(ids.size))
    trace.step_tokens.append(int(ns.sum()))
    trace.step_blocks.append(blocks - s.free)
    return now, _advance(s, ids, ns, now, trace)


def simulate(work: Workload, step_time: Callable[[int, int, int, int], float], cfg: ServerConfig,
             blocks: int, stretches: bool = True, spec=None) -> Trace:
    """Run ``work`` to the end on a server of ``blocks`` KV blocks; ``step_time`` prices each step (where it has
    a ``many(tokens, context_flops, context_bytes, longest)`` taking arrays, a stretch of decode steps at once).
    ``stretches``: run decode-only stretches at once (:func:`_stretch`; False: every step through the
    scheduler, the same figures, slower). ``spec``: speculative decoding (a :class:`~.spec.Speculation`; its
    steps always go through the scheduler)."""
    n = len(work)
    most = int(np.max(work.inputs + work.outputs)) - 1 + (spec.tokens if spec is not None else 0)  # (+ drafts)
    if -(-most // cfg.block_size) > blocks:
        raise LoadError(f"a request of {most} tokens in the cache needs more than the {blocks} KV blocks of "
                        f"{cfg.block_size} tokens the server holds")
    s = _State(work, blocks, cfg.block_size, spec)
    stretches = stretches and spec is None
    closed = work.arrivals is None
    arrival = np.zeros(n) if closed else np.asarray(work.arrivals, dtype=float)
    trace = Trace(arrival, np.full(n, np.nan), np.full(n, np.nan))
    sent = min(work.concurrency, n) if closed else 0
    s.waiting.extend(range(sent))
    now, done = 0.0, 0

    def finished(ids: list, at: float) -> None:  # the closed loop sends the next request as one finishes
        nonlocal done, sent
        done += len(ids)
        for _ in ids:
            if closed and sent < n:
                arrival[sent] = at
                s.waiting.append(sent)
                sent += 1

    while done < n:
        if not closed:
            while sent < n and arrival[sent] <= now:
                s.waiting.append(sent)
                sent += 1
            if not s.running and not s.waiting:
                now = float(arrival[sent])
                continue
        limit = float(arrival[sent]) if not closed and sent < n else np.inf
        stretch = _stretch(s, cfg, limit, now) if stretches else None
        if stretch is not None:
            now, fin = _run_stretch(s, stretch, now, limit, step_time, trace, blocks)
            finished(fin, now)
            continue
        now, fin = _one_step(s, cfg, step_time, trace, blocks, now)
        finished(fin, now)
    return trace
