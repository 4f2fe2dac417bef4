"""A training step run task by task: what each change to the fork-join loop would give, on ``k`` streams.

Each scenario is a graph made from the step's (:func:`.make.build`), scheduled by :func:`.schedule.list_schedule`:

* ``optimizer after backward``: the fork-join loop's barrier (every update waits for the whole backward);
  ``per-layer updates`` is the step's own graph, where a layer's update waits only for its gradient;
* ``fills folded``: the kernels that only fill a buffer from a constant (no input: a gradient accumulator's
  zeroing, a broadcast scalar) cost nothing, folded into the kernel that first reads the buffer;
* ``next forward early``: two steps back to back, the second's reader of a weight waiting only for that
  weight's update in the first (:attr:`.graph.TaskGraph.updates`); the figure is the second step's share;
* ``chunks of k``: the forward and backward kernels that treat each token alone (elementwise, row
  reductions, matrix products that do not contract over tokens) cut into k chunks along the tokens, chunk j
  waiting for chunk j of its inputs; attention and weight gradients wait for every chunk. Each chunk pays
  the kernel's overhead again. k must divide the sequence length: it is taken to.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .graph import Task, TaskGraph
from .schedule import list_schedule


@dataclass(frozen=True)
class Scenario:
    """One scenario: its step time on k streams (None where it could not be drawn) and what it assumes."""

    name: str
    step_s: float | None
    note: str


def scenarios(g: TaskGraph, k: int = 2, chunkable=None, chunks: int = 2, own: float | None = None) -> list[Scenario]:
    """The scenarios of the training step ``g`` on ``k`` streams (none where ``g`` has no optimizer phase);
    ``chunkable(task)``: whether a node treats each token alone (None: no chunk scenario); ``own``: ``g``'s
    own schedule's time on ``k`` streams, where it is known."""
    phases = {t.phase for t in g.tasks}
    if "optimizer" not in phases:
        return []
    own = list_schedule(g, k).makespan_s if own is None else own
    try:
        out = [Scenario("optimizer after backward", list_schedule(barrier(g, "optimizer"), k).makespan_s,
                        "every update waits for the whole backward (the fork-join loop)")]
    except ValueError as e:  # the optimizer's tasks interleave with the others': no barrier between them
        out = [Scenario("optimizer after backward", None, f"not computed: {e}")]
    out.append(Scenario("per-layer updates", own, "a layer's update waits only for its own gradient"))
    zeros = [t.id for t in g.tasks if not g.preds[t.id] and _fills(t)]
    out.append(Scenario("fills folded", list_schedule(free(g, zeros), k).makespan_s if zeros else own,
                        f"{len(zeros)} kernel(s) that only fill a buffer from a constant (zero-grad) folded into "
                        "their readers" if zeros else "no kernel only fills a buffer (a functional step makes "
                        "its gradients, it does not zero and accumulate them)"))
    two = twice(g)
    out.append(Scenario("next forward early", list_schedule(two, k).makespan_s - own,
                        f"the next step's reader of a weight waits only for its update ({len(g.updates)} "
                        "versioned argument(s))"))
    if chunkable is not None:
        cut = chunked(g, chunks, chunkable)
        out.append(Scenario(f"chunks of {chunks}", list_schedule(cut, k).makespan_s,
                            f"{sum(1 for t in g.tasks if chunkable(t))} token-wise kernel(s) cut in {chunks}; "
                            "attention and weight gradients wait for every chunk"))
    return out


def _fills(t: Task) -> bool:
    """A kernel that only writes a value it makes from nothing (a broadcast scalar: zeros)."""
    return t.name.split("+")[0] in ("broadcast_in_dim", "broadcast", "iota") and t.compute_s == 0


def _copy(g: TaskGraph, tasks, preds) -> TaskGraph:
    return TaskGraph(tasks, preds, execution=g.execution, updates=g.updates, readers=g.readers)


def free(g: TaskGraph, ids) -> TaskGraph:
    """``g`` with the nodes ``ids`` made free (no time)."""
    ids = set(ids)
    tasks = [replace(t, compute_s=0.0, memory_s=0.0, overhead_s=0.0, comm_s=0.0, floor_s=0.0) if t.id in ids
             else t for t in g.tasks]
    return _copy(g, tasks, g.preds)


def barrier(g: TaskGraph, phase: str) -> TaskGraph:
    """``g`` with every node of ``phase`` after every other node (a free node between); ValueError where a
    node of ``phase`` comes before another (an edge from it to one outside it)."""
    before = [i for i, t in enumerate(g.tasks) if t.phase != phase]
    rest = [i for i, t in enumerate(g.tasks) if t.phase == phase]
    order = before + [None] + rest
    new = {old: i for i, old in enumerate(order) if old is not None}
    tasks, preds = [], []
    for i, old in enumerate(order):
        if old is None:
            tasks.append(Task(i, "barrier"))
            preds.append(list(range(len(before))))
            continue
        tasks.append(g.tasks[old].copy(i))
        ps = [new[p] for p in g.preds[old]]
        if g.tasks[old].phase == phase:
            ps.append(len(before))
        preds.append(sorted(set(ps)))
    if any(p >= i for i, ps in enumerate(preds) for p in ps):
        raise ValueError(f"a task of the {phase} phase comes before a task of another")
    return _copy(g, tasks, preds)


def twice(g: TaskGraph) -> TaskGraph:
    """Two steps of ``g``: the second's readers of a donated argument after the first's update of it."""
    n = len(g.tasks)
    tasks = list(g.tasks) + [t.copy(t.id + n) for t in g.tasks]
    preds = [list(p) for p in g.preds] + [[q + n for q in p] for p in g.preds]
    for key, update in g.updates.items():
        for r in g.readers.get(key, []):
            preds[r + n] = sorted(set(preds[r + n]) | {max(update)})
    return _copy(g, tasks, preds)


def chunked(g: TaskGraph, k: int, chunkable) -> TaskGraph:
    """``g`` with each node ``chunkable`` says yes to cut into ``k`` chunks (see the module docstring)."""
    ids, tasks, preds = {}, [], []
    for t in g.tasks:
        cut = k if chunkable(t) else 1
        ids[t.id] = list(range(len(tasks), len(tasks) + cut))
        for j in range(cut):
            c = t.copy(len(tasks), cut)
            ps = set()
            for p in g.preds[t.id]:
                src = ids[p]
                ps |= {src[j]} if cut > 1 and len(src) == cut else set(src)
            tasks.append(c)
            preds.append(sorted(ps))
    return _copy(g, tasks, preds)


def token_wise(analysis):
    """The predicate of the chunk scenario: a node of the forward or backward whose rows each treat a token
    alone (elementwise and data ops, reductions over a row's trailing dimensions, matrix products outside
    attention that are not weight gradients)."""
    from ..attention import find_attention
    from ..attention_backward import find_attention_backward
    from ..fusion import _row_reduction

    rows, producers, phases = analysis.rows, analysis.producers, analysis.phases
    forward = find_attention(rows, producers)
    backward, _ = find_attention_backward(rows, producers, forward)
    attention = {i for a in forward + backward for i in a.members}

    def row_ok(i: int) -> bool:
        r = rows[i]
        if i in attention or r.kind in ("collective", "unknown", "conv"):
            return False
        if r.kind == "reduce":
            return _row_reduction(r)
        if r.kind == "dot":
            return phases.grad[i] != "wgrad"
        return True

    def chunkable(t: Task) -> bool:
        return t.phase in ("forward", "backward") and all(row_ok(i) for i in t.rows)

    return chunkable
