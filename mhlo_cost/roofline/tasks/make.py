""":func:`build`: the task graph (:class:`.graph.TaskGraph`) of a program under its estimate's execution model."""
from __future__ import annotations

import heapq

from ...walk.row import short_name
from .graph import Task, TaskGraph

#: A source the walk could not follow (``None`` in ``analysis.producers``).
UNKNOWN = "?"


def build(rf, labels: list | None = None) -> TaskGraph:
    """The task graph of ``rf`` (a :class:`~mhlo_cost.roofline.estimate.Roofline` of an analysis with its data
    flow); ``labels``: each row's block name (:func:`mhlo_cost.analysis.blocks.row_labels`), else none."""
    analysis = rf.analysis
    if not analysis.producers and analysis.rows:
        raise ValueError("the task graph needs the walk's data flow (AnalysisOptions(dataflow=True))")
    tasks, node_of = _nodes(rf, labels)
    maker = _Sources(analysis.producers, node_of, _copied(rf))
    preds, reads = [], []
    for t in tasks:
        nodes, args, barrier = maker.of_rows(t.rows)
        nodes.discard(t.id)
        preds.append(nodes | ({UNKNOWN} if barrier else set()))
        reads.append(args)
    tasks, preds, reads = _merge_cycles(tasks, preds, reads)
    barriers = sum(UNKNOWN in p for p in preds)
    order = _order(tasks, preds)
    graph = _renumbered(tasks, preds, reads, order, rf.execution)
    graph.barriers = barriers
    phases = analysis.phases if getattr(analysis.options, "phases", False) else None
    if phases is not None and phases.training:
        _version(graph, {a.key for a in analysis.arguments or () if a.donated})
    return graph


def _nodes(rf, labels) -> tuple[list[Task], list]:
    """The nodes (ids in the order of their first row) and, per row, its node or None (looked through)."""
    rows, times, fusion = rf.analysis.rows, rf.times, rf.fusion
    phases = rf.analysis.phases if getattr(rf.analysis.options, "phases", False) else None
    node_of: list = [None] * len(rows)
    tasks: list[Task] = []

    def new(members, **kw) -> Task:
        head = members[0]
        n = short_name(rows[head].op) + (f"+{len(members) - 1}" if len(members) > 1 else "")
        t = Task(len(tasks), n, tuple(members), block=labels[head][0] if labels else "",
                 phase=phases.phase[head] if phases is not None else "", **kw)
        tasks.append(t)
        for i in members:
            node_of[i] = t.id
        return t

    kernel_node: dict = {}
    for i, (r, t) in enumerate(zip(rows, times)):
        k = fusion.row_kernel[i] if fusion is not None else None
        if k is not None:
            if k not in kernel_node:
                kn = fusion.kernels[k]
                kernel_node[k] = new(list(kn.members), compute_s=kn.compute_s, memory_s=kn.memory_s,
                                     overhead_s=kn.overhead_s, multiplicity=kn.multiplicity,
                                     comm_s=sum(times[j].comm_s for j in kn.members),
                                     floor_s=getattr(kn, "host_s", 0.0))
        elif fusion is None and t.time_s > 0:
            new([i], compute_s=t.compute_s, memory_s=t.memory_s, overhead_s=t.overhead_s, comm_s=t.comm_s,
                multiplicity=r.multiplicity)
        elif fusion is not None and t.comm_s > 0:
            new([i], comm_s=t.comm_s, multiplicity=r.multiplicity)
    return tasks, node_of


def _copied(rf) -> set:
    """Rows a fusing execution recomputes in each consumer (a broadcast, an iota, a slice, a widening convert):
    a kernel reading one waits for what it reads, not for the kernel it was placed in."""
    if rf.execution != "compiled":  # (eager: a broadcast is a kernel of its own)
        return set()
    from ..fusion import _duplicated

    return {i for i, r in enumerate(rf.analysis.rows) if _duplicated(r)}


class _Sources:
    """What a row depends on, looking through the rows that run no kernel and those each consumer recomputes:
    (nodes, argument keys, whether a source could not be followed)."""

    def __init__(self, producers, node_of, copied: set):
        self.producers, self.node_of, self.copied, self.memo = producers, node_of, copied, {}

    def of_rows(self, members) -> tuple[set, set, bool]:
        nodes, args, barrier = set(), set(), False
        for i in members:
            for s in self.producers[i]:
                n, a, b = self.of_source(s)
                nodes |= n
                args |= a
                barrier = barrier or b
        return nodes, args, barrier

    def of_source(self, s) -> tuple:
        if s is None:
            return frozenset(), frozenset(), True
        if isinstance(s, str):
            return frozenset(), frozenset({s}), False
        if self.node_of[s] is not None and s not in self.copied:
            return frozenset({self.node_of[s]}), frozenset(), False
        got = self.memo.get(s)
        if got is None:
            self.memo[s] = (frozenset(), frozenset(), False)  # (a row is never its own source)
            n, a, b = self.of_rows((s,))
            got = self.memo[s] = (frozenset(n), frozenset(a), b)
        return got


def _components(n: int, preds) -> list[list[int]]:
    """The strongly connected components of the nodes 0..n-1 (Kosaraju's, iterative), each sorted."""
    succs = [[] for _ in range(n)]
    for b in range(n):
        for a in preds[b]:
            if a != UNKNOWN:
                succs[a].append(b)
    seen, finished = [False] * n, []
    for root in range(n):
        if seen[root]:
            continue
        seen[root], stack = True, [(root, iter(succs[root]))]
        while stack:
            node, it = stack[-1]
            nxt = next((j for j in it if not seen[j]), None)
            if nxt is None:
                finished.append(stack.pop()[0])
            else:
                seen[nxt] = True
                stack.append((nxt, iter(succs[nxt])))
    comp, out = [None] * n, []
    for root in reversed(finished):
        if comp[root] is not None:
            continue
        comp[root], todo, members = len(out), [root], [root]
        while todo:
            for a in preds[todo.pop()]:
                if a != UNKNOWN and comp[a] is None:
                    comp[a] = len(out)
                    todo.append(a)
                    members.append(a)
        out.append(sorted(members))
    return out


def _merge_cycles(tasks, preds, reads):
    """Kernels that depend on each other both ways (a fused attention whose middle rows another kernel runs)
    become one node: their times add up."""
    if all(p == UNKNOWN or p < t.id for t in tasks for p in preds[t.id]):
        return tasks, preds, reads  # every edge from an earlier first row: no cycle
    groups = [g for g in _components(len(tasks), preds) if len(g) > 1]
    if not groups:
        return tasks, preds, reads
    into = {}
    for g in groups:
        head = tasks[g[0]]
        for j in g[1:]:
            t = tasks[j]
            head.rows = tuple(sorted(head.rows + t.rows))
            head.compute_s += t.compute_s
            head.memory_s += t.memory_s
            head.overhead_s += t.overhead_s
            head.comm_s += t.comm_s
            head.floor_s += t.floor_s
            into[j] = g[0]
        head.name = head.name.split("+")[0] + f"+{len(head.rows) - 1}"
    keep = [t.id for t in tasks if t.id not in into]
    new = {old: i for i, old in enumerate(keep)}
    new.update({j: new[h] for j, h in into.items()})
    out_preds = [set() for _ in keep]
    out_reads = [set() for _ in keep]
    for old in range(len(tasks)):
        ps = {p if p == UNKNOWN else new[p] for p in preds[old]}
        out_preds[new[old]] |= ps - {new[old]}
        out_reads[new[old]] |= reads[old]
    out = [tasks[old] for old in keep]
    for i, t in enumerate(out):
        t.id = i
    return out, out_preds, out_reads


def _order(tasks, preds) -> list[int]:
    """The nodes in a topological order, the earliest first row first; a node with an unfollowed source after
    every node before it in program order."""
    sinks: set = set()
    seen: set = set()
    succs: dict = {}
    for t in tasks:
        for p in preds[t.id]:
            if p != UNKNOWN:
                succs.setdefault(p, set()).add(t.id)
    for t in tasks:  # program order: an unfollowed source waits for every node before it
        ps = preds[t.id]
        if UNKNOWN in ps:
            ps.discard(UNKNOWN)
            ps |= sinks
            for p in sinks:
                succs.setdefault(p, set()).add(t.id)
            sinks = set()
        sinks -= ps
        seen.add(t.id)
        if not succs.get(t.id, set()) & seen:
            sinks.add(t.id)
    need = [len(preds[t.id]) for t in tasks]
    ready = [t.id for t in tasks if not need[t.id]]
    heapq.heapify(ready)
    out = []
    while ready:
        i = heapq.heappop(ready)
        out.append(i)
        for j in sorted(succs.get(i, ())):
            need[j] -= 1
            if not need[j]:
                heapq.heappush(ready, j)
    if len(out) != len(tasks):
        raise ValueError("the kernels' dependencies form a cycle")
    return out


def _renumbered(tasks, preds, reads, order, execution) -> TaskGraph:
    new = {old: i for i, old in enumerate(order)}
    out = []
    for old in order:
        t = tasks[old]
        t.id = new[old]
        out.append(t)
    graph = TaskGraph(out, [sorted(new[p] for p in preds[old]) for old in order], execution=execution)
    for old in order:
        for a in reads[old]:
            graph.readers.setdefault(a, []).append(new[old])
    return graph


def _version(graph: TaskGraph, donated: set) -> None:
    """A donated argument's new version: the optimizer-phase nodes downstream of its optimizer readers; every
    other reader of the old version comes before the last of them (write after read)."""
    succs = graph.succs
    for key in sorted(donated):
        readers = graph.readers.get(key, [])
        start = [n for n in readers if graph.tasks[n].phase == "optimizer"]
        if not start:
            continue
        update, todo = set(start), list(start)
        while todo:
            for j in succs[todo.pop()]:
                if j not in update and graph.tasks[j].phase == "optimizer":
                    update.add(j)
                    todo.append(j)
        graph.updates[key] = sorted(update)
        last = max(update)
        for r in readers:
            if r in update or r in graph.preds[last]:
                continue
            if r < last:
                graph.preds[last] = sorted(set(graph.preds[last]) | {r})
            else:  # a reader of the old version after its update in every order: said, not ordered
                graph.unversioned += 1
