"""The entry function's ops walked by two processes (issue 41: the second core, where it pays): :func:`walk_split`.

A large program is most often one function of independent ops (``jax.jit`` of an unrolled model: the 400 layers of
``benchmarks/bench_analyze.py`` are 42,400 ops of one ``@main``). Its walk costs ~24 us an op in Python (jaxlib's
reads of names, types and locations, the rule's answer, the row), on one core. The MLIR reader's child
(:mod:`mhlo_cost.cli.child`), single-threaded, forks (POSIX ``fork``: the parsed module is shared, copy on write,
never parsed twice): the fork walks the ops after a cut, the process itself those before, and the fork's rows
come back over a pipe, pickled as plain tuples (the rules' :class:`Cost` answers and the cached
:class:`TensorInfo` objects once each; a location as its name and scope, read again from the module here only
where something asks for its source position). Measured on the 400-layer benchmark (CPU seconds): 21,200 rows
sent cost 0.08 to pickle there and 0.07 to make again here, against 0.5 of walking them; the wire of the whole
analysis (:mod:`mhlo_cost.analysis.wire`, every location resolved) would cost as much as the walk it spares.

Only where it changes nothing: the fork takes only ops a pure rule counts (:meth:`RowMaker.count_named`: one row
each, from the op alone), in a walk whose recorders want no rows; the function's own argument set, type and location
caches are copies, and a rule is pure, so each row is the one the sequential walk makes (the tests compare them
field by field). Anything else in the fork's part (control flow, a call, an unknown op, an error, the fork's death)
and this process walks that part itself, from the cut, as the sequential walk would have (the fork's work is lost,
never its answer half used). Warnings come back in program order. Enabled by the reader's child alone
(:func:`enable`): a user's process may run threads, which ``fork`` does not carry.
"""
from __future__ import annotations

import gc
import os
import pickle
import time
from functools import partial
from itertools import islice
from types import SimpleNamespace

#: Fewer ops than this in the entry function: walked by one process (the fork and the rows' trip cost ~5 ms).
MIN_OPS = 4096
#: The part of the ops the process itself walks. Measured on the benchmark (CPU): the fork walks ~1.2 x slower an op
#: (pages copied on write as it touches the shared heap, the ops before the cut iterated to reach it) and pickles its
#: rows (0.08 s); this process makes them again (0.07 s): with 0.54 the fork ended last (0.58 s against 0.51 s),
#: with 0.58 the two ends meet.
SHARE = 0.58

#: The idle CPU, in cores, the machine must have had since :func:`enable` (the parse, most often) for the fork to
#: pay: the fork's part is 42% of the ops at ~1.2 x the cost (its rows pickled, its pages copied on write: the
#: fork's 0.63 s CPU against the walk's 0.55 s for its part at the first cut, 46%, on the benchmark), about 0.5 of
#: the one-process walk's time; it pays where it ends before this process would have walked everything itself
#: (1.0, less ~0.1 for the merge): on at least 0.5 / 0.9 ~ 0.6 of a core. On a loaded machine the
#: fork would only add its CPU (and the wall time of what it shares a core with): the walk stays in one process.
MIN_IDLE_CORES = 0.6

_on: tuple | None = None  # (total, idle) CPU ticks of the machine when enabled; None: not enabled
_split = False  # whether a walk's fork answered since :func:`enable` (it used the idle core, and its rows are merged)
_exiting: list[int] = []  # forks that answered and were still exiting: reaped at the next enable()


def enable(on: bool = True) -> None:
    """Let the walks of this process split their entry function (the reader's child, single-threaded), where the
    machine has an idle core from now on (:data:`MIN_IDLE_CORES`, measured when the walk begins)."""
    global _on, _split
    _on = (_cpu_ticks() or (0, 0)) if on else None
    _split = False
    _exiting[:] = [pid for pid in _exiting if not _reaped(pid)]


def _reaped(pid: int) -> bool:
    """Whether fork ``pid`` has ended (and is reaped now), without waiting for it."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] != 0
    except ChildProcessError:
        return True


def _cpu_ticks() -> tuple[int, int] | None:
    """(all, idle) CPU ticks of the machine since boot, every core together (Linux's /proc/stat); None elsewhere."""
    try:
        with open("/proc/stat", "rb") as f:
            ticks = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    except (OSError, ValueError):
        return None
    return sum(ticks), ticks[3] + ticks[4]


def idle_cores(before: tuple[int, int], after: tuple[int, int], cores: int) -> float:
    """The cores idle on average between two readings of :func:`_cpu_ticks`."""
    total = after[0] - before[0]
    return cores * (after[1] - before[1]) / total if total > 0 else 0.0


def _idle_enough() -> bool:
    """Whether an idle core was there since :func:`enable` (where the machine says; elsewhere, from the load
    average: under one process a core besides this one)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cores < 2:
        return False
    now = _cpu_ticks()
    if now is not None and _on and _on[0]:
        return idle_cores(_on, now, os.cpu_count() or cores) >= MIN_IDLE_CORES
    try:
        return cores - os.getloadavg()[0] >= MIN_IDLE_CORES  # (this walk is one of the load)
    except (OSError, AttributeError):
        return False


def _forkable() -> bool:
    """Whether this process may fork for a walk: enabled, POSIX, an idle core (:func:`_idle_enough`), and one thread
    (none that fork would not carry)."""
    return _on is not None and hasattr(os, "fork") and _idle_enough() and _one_thread()


def _one_thread() -> bool:
    """Whether this process runs one thread (none that ``fork`` would not carry)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        import threading

        return threading.active_count() == 1


def walk_split(walk, block) -> bool:
    """Walk ``block`` (the entry function's one block) in two processes, its rows to ``walk.out`` in program order;
    False (nothing done) where it is not worth it or not possible: the caller walks it itself."""
    ops = block.operations
    n = len(ops)
    if n < MIN_OPS or walk._row_hooks or not _forkable():
        return False
    cut = int(n * SHARE)
    # The fork: the rows of the ops from the cut to the last (the return stays with the process itself).
    pid, read_end = _forked_answer(lambda: _walked(walk, islice(ops, cut, n - 1), cut)) or (None, None)
    if pid is None:
        return False
    began = time.perf_counter()
    try:
        walk.visit_ops(islice(ops, cut))
    except BaseException:  # (an analysis error here): the fork's work is not wanted
        _stop(pid, read_end)
        raise
    sent = _received(read_end, _deadline(time.perf_counter() - began))
    if sent is None:
        _stop(pid, None)  # (silent, dead or late: ended and reaped before this process walks its part)
        walk.visit_ops(islice(block.operations, cut, None))  # walked here after all, from the cut
        return True
    try:
        _merge(walk, sent, block, cut)
        walk.visit_ops((ops[n - 1],))
    finally:
        _reap(pid)  # (its rows are in: its exit overlapped the merge)
    global _split
    _split = True  # (only here: the fork ran, answered and ended; :func:`alongside` may use the core it gave back)
    return True


def _deadline(own_s: float) -> float:
    """Seconds this process waits for the fork's rows beyond its own part, which took ``own_s``: the fork's part is
    smaller (:data:`SHARE`); ten times that and a minute more is a fork that will not answer (it cannot deadlock:
    one thread, :func:`_forkable`; this bounds what nothing should cause)."""
    return 60.0 + 10.0 * own_s


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _detach(parent: int) -> None:
    """In the fork: let go of the reader's stdin and stdout (its caller sees their end when the child ends, not the
    fork), and die with the child (Linux's ``PR_SET_PDEATHSIG``: a child killed by its guard takes the fork along;
    ``parent``, the child's process id: one that ended before the signal was asked for is seen at once, as
    prctl(2) advises, and the fork ends)."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass  # (not Linux: the fork ends when its part is walked)
    if os.getppid() != parent:  # (the child ended between the fork and the prctl: no signal will come)
        os._exit(0)


def _forked_answer(make) -> tuple[int, int] | None:
    """(the fork's process id, the read end of a pipe from it) of a new fork that writes ``make()`` (bytes) to the
    pipe and ends (:func:`_sent`); None where the pipe or the fork failed (EMFILE, EAGAIN, ENOMEM), nothing left
    open. In the fork, the cyclic collector is paused (a collection would touch, and copy on write, every object of
    the heap it shares) and the reader's stdin and stdout let go (:func:`_detach`)."""
    parent = os.getpid()
    try:
        read_end, write_end = os.pipe()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return None
    if pid == 0:
        gc.disable()
        os.close(read_end)
        _detach(parent)
        _sent(make, write_end)  # (never returns)
    os.close(write_end)
    return pid, read_end


def _sent(make, fd: int) -> None:
    """In a fork: ``make()`` written to ``fd`` (nothing where it raises: this process computes it again and says
    what is wrong), then the fork ends at once (no clean-up of the parent's objects, no buffers flushed)."""
    try:
        try:
            blob = make()
        except BaseException:  # noqa: BLE001 (an analysis error, a bug)
            blob = b""
        view = memoryview(blob)
        while view:
            view = view[os.write(fd, view):]
        os.close(fd)  # the end of the answer now, not after the kernel has freed this process's pages
    finally:
        os._exit(0)


class Alongside:
    """``fn()`` computed in a fork (:func:`alongside`) while this process goes on; :meth:`result` waits for it."""

    def __init__(self, pid: int, fd: int, wait_s: float):
        self.pid, self.fd, self.wait_s = pid, fd, wait_s

    def result(self):
        """What ``fn()`` returned (pickled over a pipe), or None where the fork failed, died or was silent for
        ``wait_s`` seconds (the caller computes it itself: an error is raised there, as it would have been without
        the fork). Where the wait itself raises (a MemoryError), the fork is ended and the error raised."""
        fd, self.fd = self.fd, None  # (the pipe is closed by _received, whatever happens there)
        if fd is None:
            return None
        try:
            sent = _received(fd, self.wait_s)
        except BaseException:
            _stop(self.pid, None)
            raise
        if sent is None:
            _stop(self.pid, None)
            return None
        if not _reaped(self.pid):  # (its exit, the kernel freeing its copy of the heap, overlaps what follows)
            _exiting.append(self.pid)
        return sent[0]

    def close(self) -> None:
        """The fork ended (killed where its result was not taken) and its pipe closed."""
        if self.fd is not None:
            _stop(self.pid, self.fd)
            self.fd = None


#: The wait for :func:`alongside`'s fork (:func:`alongside_deadline`): seconds of silence, a floor plus a time per
#: row of the analysis, at most :data:`ALONGSIDE_MAX_S`. The memory profile it computes costs ~2.5 us a row
#: (0.1 s CPU at 4*10^4 rows); 100 us a row is forty times that, for a loaded machine.
ALONGSIDE_BASE_S = 5.0
ALONGSIDE_PER_ROW_S = 1e-4
#: Well below the reader guard's wall-clock backstop (``mhlo_cost.ir.guard``: BASE_SECONDS * WALL_FACTOR, at
#: least 200 s), so that a stalled fork is always given up, and the profile made here, before the guard ends the
#: whole request.
ALONGSIDE_MAX_S = 60.0


def alongside_deadline(rows: int) -> float:
    """Seconds :meth:`Alongside.result` waits for a fork computing from an analysis of ``rows`` rows."""
    return min(ALONGSIDE_MAX_S, ALONGSIDE_BASE_S + ALONGSIDE_PER_ROW_S * rows)


def alongside(fn, rows: int) -> Alongside | None:
    """``fn()`` started in a fork, where a walk of this request split (:func:`walk_split`: its fork ran on an idle
    core, answered and has ended) and this process may fork (enabled, POSIX, one thread); None otherwise. ``fn``
    must change nothing this process needs (the fork's changes stay in the fork); its result must pickle; ``rows``,
    the size of its work in rows, sets the wait for it (:func:`alongside_deadline`)."""
    if not _split or _on is None or not hasattr(os, "fork") or not _one_thread():
        return None
    forked = _forked_answer(lambda: pickle.dumps((fn(),), protocol=pickle.HIGHEST_PROTOCOL))
    return None if forked is None else Alongside(*forked, alongside_deadline(rows))


def _walked(walk, ops, start: int) -> bytes:
    """The rows of ``ops`` (the first at position ``start``), pickled (see :func:`_merge`); b"" where an op is not
    counted by a pure rule."""
    method_of, out, warned = walk.method_of, walk.out, len(walk.warnings)
    first = len(out)
    count = type(walk).count_named
    for op in ops:
        op = op.operation
        method = method_of(op.name)
        if type(method) is not partial or method.func.__func__ is not count:
            return b""
        method(op)
    places: dict[int, int] = {}  # id(location info) -> its number
    keys = walk._locations.keys()
    locs, rows = [], []
    for i, r in enumerate(out[first:]):
        info = r.loc
        at = places.get(id(info))
        if at is None:
            at = places[id(info)] = len(locs)
            locs.append((keys.get(id(info)), info.name, info.scope, info._site, start + i))
        rows.append((r.op, r.kind, at) + _FIELDS(r))
    return pickle.dumps((locs, rows, walk.warnings[warned:]), protocol=pickle.HIGHEST_PROTOCOL)


def _received(fd: int, wait_s: float):
    """What the fork sent (locations, rows, warnings), or None where it sent nothing whole within ``wait_s``
    seconds of silence."""
    import select

    chunks = []
    with os.fdopen(fd, "rb", buffering=0) as f:
        while True:
            if not select.select([f], [], [], wait_s)[0]:
                return None  # (a fork that does not answer)
            chunk = f.read(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    try:
        return pickle.loads(b"".join(chunks)) if chunks else None
    except Exception:  # noqa: BLE001 (cut short: the fork died while writing)
        return None


def _stop(pid: int, fd: int | None) -> None:
    """End the fork (killed, reaped) and close the pipe from it (``fd``; None: closed already)."""
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except OSError:
        pass
    if fd is not None:
        os.close(fd)


def _merge(walk, sent, block, cut: int) -> None:
    """The fork's rows appended to ``walk.out``, each with this process's location info of its op: the one the
    walk's location cache holds for it, or one read from the module on first use (its site, file and stack)."""
    from .row import LocationInfo, Row

    locs, rows, warnings = sent
    known = walk._locations
    lazy = _LazyLocations(block, cut)
    infos = []
    for key, name, scope, site, at in locs:
        info = known.get(key)
        if info is None:
            info = LocationInfo(name, scope, at, known.file_lines, lazy.read, site)
            if key is not None:
                known.put(key, info)
        infos.append(info)
    out = walk.out
    out.extend(Row(op, kind, infos[at], *rest) for op, kind, at, *rest in rows)
    walk.warnings.extend(warnings)


class _LazyLocations:
    """The MLIR locations of the ops from ``cut`` on, read from the module once something asks for one (a row's
    source position: :class:`~mhlo_cost.walk.row.LocationInfo` reads it through :attr:`read`)."""

    def __init__(self, block, cut: int):
        self._block, self._cut = block, cut
        self._locations: list | None = None
        from .locations import READ

        self.read = SimpleNamespace(site=lambda at: READ.site(self._at(at)),
                                    file_line=lambda at, memo: READ.file_line(self._at(at), memo),
                                    stack=lambda at, memo: READ.stack(self._at(at), memo))

    def _at(self, position: int):
        if self._locations is None:
            self._locations = [op.operation.location for op in islice(self._block.operations, self._cut, None)]
        return self._locations[position - self._cut]


def _fields_after_loc():
    """A row's fields after ``op``, ``kind`` and ``loc`` (its first three), in order, as one tuple."""
    from dataclasses import fields
    from operator import attrgetter

    from .row import Row

    return attrgetter(*[f.name for f in fields(Row)][3:])


_FIELDS = _fields_after_loc()
