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

A step's cost is asked of ``step_time(tokens, context_flops, context_bytes, longest)``: the step's query tokens,
its attention terms summed over sequences (see :mod:`.stepmodel`) and its longest context.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .simload import LoadError, Workload

GIB = 1 << 30


@dataclass(frozen=True)
class ServerConfig:
    """The server's knobs (vLLM's names and defaults): ``max_num_batched_tokens`` 8192, ``max_num_seqs`` 256,
    ``block_size`` 16, ``gpu_memory_utilization`` 0.9; ``reserve_bytes``: CUDA graphs and memory outside torch
    (assumed 1 GiB where not given: vLLM measures it on the device)."""

    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    reserve_bytes: int = GIB

    def __post_init__(self):
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise LoadError(f"--{name.replace('_', '-')} must be a whole number >= 1, got {v!r}")
        u = self.gpu_memory_utilization
        if not (isinstance(u, (int, float)) and 0 < u <= 1):
            raise LoadError(f"--gpu-memory-utilization must be in (0, 1], got {u!r}")
        if not isinstance(self.reserve_bytes, int) or self.reserve_bytes < 0:
            raise LoadError(f"the CUDA-graph reserve must be a whole number of bytes >= 0, got {self.reserve_bytes!r}")


@dataclass(frozen=True)
class Memory:
    """The device's memory as the server holds it (bytes, exact ints) and the KV blocks it gives."""

    capacity: int
    budget: int  # capacity x gpu_memory_utilization
    weights: int
    activations: int  # the profiled forward's peak: max_num_batched_tokens tokens
    reserve: int  # CUDA graphs and memory outside torch
    kv_bytes: int  # what is left for the KV cache
    block_bytes: int
    blocks: int


def memory(cfg: ServerConfig, capacity: int, weights: int, kv_token_bytes: int, activation_token_bytes: int) -> Memory:
    """vLLM's accounting (``vllm/v1/worker/gpu_worker.py``, ``determine_available_memory``; the blocks in
    ``vllm/v1/core/kv_cache_utils.py``): the KV cache gets the device's memory x ``gpu_memory_utilization`` less
    the weights, the peak of a profiling forward of ``max_num_batched_tokens`` tokens and the memory outside it
    (CUDA graphs, non-torch: ``reserve_bytes``); it is cut into blocks of ``block_size`` tokens of every layer's
    keys and values. A budget that leaves no block is an error."""
    from fractions import Fraction

    budget = int(capacity * Fraction(str(cfg.gpu_memory_utilization)))
    acts = activation_token_bytes * cfg.max_num_batched_tokens
    kv = budget - weights - acts - cfg.reserve_bytes
    block = kv_token_bytes * cfg.block_size
    blocks = kv // block if kv > 0 and block > 0 else 0
    if blocks < 1:
        raise LoadError(f"no KV cache fits: {capacity:,} B x {cfg.gpu_memory_utilization} leaves "
                        f"{kv:,} B after weights {weights:,} B, activations {acts:,} B and the reserve "
                        f"{cfg.reserve_bytes:,} B")
    return Memory(capacity, budget, weights, acts, cfg.reserve_bytes, kv, block, int(blocks))


@dataclass
class Trace:
    """What the run recorded: per request and per step (numpy arrays once finished)."""

    arrival: np.ndarray
    first: np.ndarray
    finish: np.ndarray
    gaps: list = field(default_factory=list)  # inter-token gaps (s), every request's
    step_s: list = field(default_factory=list)
    step_seqs: list = field(default_factory=list)
    step_tokens: list = field(default_factory=list)
    step_blocks: list = field(default_factory=list)  # blocks in use during the step
    preemptions: int = 0


class _State:
    def __init__(self, work: Workload, blocks: int):
        n = len(work)
        self.prompt = work.inputs.astype(np.int64)
        self.target = work.outputs.astype(np.int64)
        self.num_tokens = [int(x) for x in self.prompt]
        self.computed = [0] * n
        self.made = [0] * n
        self.held = [0] * n
        self.free = blocks
        self.last = [0.0] * n
        self.running: list = []
        self.waiting: deque = deque()


def _preempt(s: _State, trace: Trace) -> int:
    victim = s.running.pop()
    s.free += s.held[victim]
    s.held[victim] = 0
    s.computed[victim] = 0
    s.waiting.appendleft(victim)
    trace.preemptions += 1
    return victim


def schedule(s: _State, cfg: ServerConfig, trace: Trace) -> list:
    """One step's (request, new tokens), as the module says."""
    budget, bs, out, preempted = cfg.max_num_batched_tokens, cfg.block_size, [], False
    i = 0
    while i < len(s.running) and budget > 0:
        r = s.running[i]
        n = min(s.num_tokens[r] - s.computed[r], budget)
        need = -(-(s.computed[r] + n) // bs) - s.held[r]
        while need > s.free:
            preempted = True
            if _preempt(s, trace) == r:
                break
        else:
            s.free -= need
            s.held[r] += need
            out.append((r, n))
            budget -= n
            i += 1
            continue
        break
    while not preempted and s.waiting and budget > 0 and len(s.running) < cfg.max_num_seqs:
        r = s.waiting[0]
        n = min(s.num_tokens[r] - s.computed[r], budget)
        need = -(-n // bs)
        if need > s.free:
            break
        s.waiting.popleft()
        s.running.append(r)
        s.free -= need
        s.held[r] += need
        out.append((r, n))
        budget -= n
    return out


def _composition(s: _State, batch: list) -> tuple[int, int, int, int]:
    tokens = cf = cb = longest = 0
    for r, n in batch:
        p = s.computed[r]
        tokens += n
        cf += n * p + n * (n + 1) // 2
        cb += p + n
        longest = max(longest, p + n)
    return tokens, cf, cb, longest


def _advance(s: _State, batch: list, now: float, trace: Trace) -> list:
    """After a step ending at ``now``: computed tokens, tokens produced, finished requests (returned, their
    blocks freed)."""
    finished = []
    for r, k in batch:
        s.computed[r] += k
        if s.computed[r] < s.num_tokens[r]:
            continue
        s.num_tokens[r] += 1
        s.made[r] += 1
        if s.made[r] == 1:
            trace.first[r] = now
        else:
            trace.gaps.append(now - s.last[r])
        s.last[r] = now
        if s.made[r] >= s.target[r]:
            trace.finish[r] = now
            s.running.remove(r)
            s.free += s.held[r]
            s.held[r] = 0
            finished.append(r)
    return finished


def simulate(work: Workload, step_time: Callable[[int, int, int, int], float], cfg: ServerConfig,
             blocks: int) -> Trace:
    """Run ``work`` to the end on a server of ``blocks`` KV blocks; ``step_time`` prices each step."""
    n = len(work)
    most = int(np.max(work.inputs + work.outputs))
    if -(-(most - 1) // cfg.block_size) > blocks:
        raise LoadError(f"a request of {most - 1} tokens in the cache needs more than the {blocks} KV blocks of "
                        f"{cfg.block_size} tokens the server holds")
    s = _State(work, blocks)
    closed = work.arrivals is None
    arrival = np.zeros(n) if closed else np.asarray(work.arrivals, dtype=float)
    trace = Trace(arrival, np.full(n, np.nan), np.full(n, np.nan))
    sent = min(work.concurrency, n) if closed else 0
    s.waiting.extend(range(sent))
    now, done = 0.0, 0
    while done < n:
        if not closed:
            while sent < n and arrival[sent] <= now:
                s.waiting.append(sent)
                sent += 1
            if not s.running and not s.waiting:
                now = float(arrival[sent])
                continue
        before = trace.preemptions
        batch = schedule(s, cfg, trace)
        if not batch:  # its only request preempted itself: the next step admits it again (an empty step)
            if trace.preemptions == before:
                raise LoadError("the scheduler could not run any request (a bug: every request fits the cache)")
            continue
        dt = float(step_time(*_composition(s, batch)))
        now += dt
        trace.step_s.append(dt)
        trace.step_seqs.append(len(batch))
        trace.step_tokens.append(sum(k for _, k in batch))
        trace.step_blocks.append(blocks - s.free)
        for r in _advance(s, batch, now, trace):
            done += 1
            if closed and sent < n:
                arrival[sent] = now
                s.waiting.append(sent)
                sent += 1
    return trace
