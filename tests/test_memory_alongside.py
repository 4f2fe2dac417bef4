"""The memory profile computed in a fork while the reader's child renders the rest of a whole answer
(mhlo_cost.walk.split.alongside, mhlo_cost.analysis.isolated): the same answer, byte for byte, as the one process
makes; the peak equal to a closed form worked out here; a fork that fails or is not waited for leaves nothing behind."""
from __future__ import annotations

import importlib
import json
import os
import select
import time

import pytest

from mhlo_cost.analysis import isolated
from mhlo_cost.ir import guard
from mhlo_cost.ir.codes import Answer
from mhlo_cost.ir.loader import load
from mhlo_cost.studies.compose import answer_in_child, wire
from mhlo_cost.studies.study import StudyOptions
from mhlo_cost.views.table import ViewRequest
from mhlo_cost.walk import split

from test_walk_split import FORK_WARNING, program

pytestmark = [pytest.mark.skipif(not hasattr(os, "fork"), reason="the fork is POSIX's"),
              pytest.mark.filterwarnings(FORK_WARNING)]

LAYERS = 300
memory_profile = importlib.import_module("mhlo_cost.memory.profile")


@pytest.fixture
def forking(monkeypatch):
    """The split walk and the memory fork on, at a small size, in this process (whose threads, jax's, the forks do not
    use); the forks' process ids, and the memory profiles this process made itself."""
    forks, made = [], []
    real_fork, real_profile = os.fork, memory_profile.profile

    def fork():
        pid = real_fork()
        forks.append(pid)  # (in the fork: its own copy of the list)
        return pid

    def profile(*a, **k):
        made.append(os.getpid())
        return real_profile(*a, **k)

    monkeypatch.setattr(split, "MIN_OPS", 64)
    monkeypatch.setattr(split, "_forkable", lambda: split._on is not None)  # (enabled; threads, load or not)
    monkeypatch.setattr(split, "_one_thread", lambda: True)
    monkeypatch.setattr(split.os, "fork", fork)
    monkeypatch.setattr(memory_profile, "profile", profile)
    return forks, made


def whole_answer(text: str, split_on: bool) -> tuple:
    """(code, payload) of the reader child's answer to ``report -q`` on ``text``: walked and rendered here."""
    loaded = load(text)
    asked = isolated.WalkOptions(render=wire(StudyOptions("x.mlir"), ViewRequest(), "table")).to_json()
    split.enable(split_on)
    try:
        return isolated.answer(loaded.module, "x.mlir", asked, answer_in_child)
    finally:
        split.enable(False)


def test_the_profile_made_in_the_fork_gives_the_same_answer(forking):
    forks, made = forking
    text = program(LAYERS)
    code, one = whole_answer(text, split_on=False)
    assert code == Answer.RENDERED and not forks and made == [os.getpid()]  # the one process made its profile
    del made[:]
    code, two = whole_answer(text, split_on=True)
    assert code == Answer.RENDERED
    assert len(forks) == 2  # the walk's fork, then the memory's
    assert made == []  # this process took the fork's profile: it made none itself
    assert two == one
    # the closed form: arguments x (8x16 f32, 512 B) and w (16x16 f32, 1024 B) and the constant (512 B) live
    # throughout; while a layer's add runs, the previous layer's result, its dot's and its own (3 x 512 B)
    text_out = json.loads(two)[0]
    peak = next(line for line in text_out.splitlines() if line.split()[:1] == ["peak_bytes"])
    assert "".join(c for c in peak if c.isdigit()) == str(1536 + 512 + 3 * 512)


def test_a_failed_fork_is_computed_here(forking, monkeypatch):
    forks, made = forking
    text = program(LAYERS)
    _, one = whole_answer(text, split_on=False)
    del made[:]

    def failing(fn, rows):  # the fork's computation raises: nothing comes back, and this process makes the profile
        return real(lambda: 1 // 0, rows)

    real = split.alongside
    monkeypatch.setattr(split, "alongside", failing)
    code, two = whole_answer(text, split_on=True)
    assert code == Answer.RENDERED and two == one
    assert len(forks) == 2 and made == [os.getpid()]


def test_a_fork_not_waited_for_is_ended(forking):
    forks, _ = forking
    split.enable()
    try:
        assert split.alongside(lambda: 1, 10) is None  # no walk split since enable(): the idle core was not seen
        split._split = True
        pending = split.alongside(lambda: sum(range(10**9)), 10)  # (would run for a minute)
        assert pending is not None and len(forks) == 1
        pending.close()
        with pytest.raises(ChildProcessError):
            os.waitpid(forks[0], os.WNOHANG)  # killed and reaped: no process left
        assert pending.result() is None  # (closed: nothing to wait for)
        done = split.alongside(lambda: [2**70, {"a": 1}], 10)
        assert done.result() == [2**70, {"a": 1}]  # exact ints, pickled over the pipe
    finally:
        split.enable(False)


def gone(pid: int) -> bool:
    """Whether process ``pid`` (a fork of this process) is reaped: no process, no zombie, left."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_a_stalled_fork_is_given_up(forking, monkeypatch):
    forks, made = forking
    text = program(LAYERS)
    _, one = whole_answer(text, split_on=False)
    del made[:]
    real = split.alongside
    monkeypatch.setattr(split, "alongside", lambda fn, rows: real(lambda: time.sleep(3600), rows))  # (blocks)
    monkeypatch.setattr(split, "alongside_deadline", lambda rows: 0.1)
    code, two = whole_answer(text, split_on=True)
    assert code == Answer.RENDERED and two == one  # made here after 0.1 s of silence
    assert len(forks) == 2 and made == [os.getpid()] and gone(forks[1])


def test_the_wait_grows_with_the_rows_and_stays_below_the_guard():
    assert split.alongside_deadline(10**4) < split.alongside_deadline(10**5)
    assert split.alongside_deadline(10**9) == split.ALONGSIDE_MAX_S
    # the guard's wall-clock backstop for the smallest input (its CPU allowance times WALL_FACTOR): 200 s
    assert split.ALONGSIDE_MAX_S <= guard.BASE_SECONDS * guard.WALL_FACTOR / 3


def test_a_failed_wait_ends_the_fork_and_the_pipe_once(forking, monkeypatch):
    forks, _ = forking
    split.enable()
    try:
        split._split = True
        pending = split.alongside(lambda: 42, 10)

        def failing(*a):
            raise MemoryError("simulated")

        monkeypatch.setattr(select, "select", failing)
        with pytest.raises(MemoryError):
            pending.result()
        monkeypatch.undo()
        pending.close()  # (the pipe was closed once, by the failed wait: not again)
        assert gone(forks[0])
    finally:
        split.enable(False)


def test_a_failed_wait_in_the_render_falls_back(forking, monkeypatch):
    forks, made = forking
    text = program(LAYERS)
    real, calls = split._received, []

    def received(fd, wait_s):  # the walk's rows come back; the wait for the profile fails
        calls.append(wait_s)
        if len(calls) > 1:
            raise MemoryError("simulated")
        return real(fd, wait_s)

    monkeypatch.setattr(split, "_received", received)
    code, _ = whole_answer(text, split_on=True)
    assert code in (Answer.ANALYSIS, Answer.BYTECODE)  # no whole answer: the caller renders it (no traceback)
    assert len(calls) == 2 and len(forks) == 2 and gone(forks[1])


def test_no_fork_where_the_answer_cannot_be_used(forking, monkeypatch):
    forks, made = forking
    asked = []
    # the render says it will not answer (as answer_in_child does where the walk warned or met an unknown op)
    monkeypatch.setattr(answer_in_child, "answerable", lambda analysis: asked.append(len(analysis.rows)) or False)
    code, _ = whole_answer(program(LAYERS), split_on=True)
    assert len(asked) == 1 and asked[0] > 4 * LAYERS  # asked once, of the whole analysis
    assert len(forks) == 1 and made == [os.getpid()]  # the walk's fork only; the profile (still asked) made here


def test_answerable_says_no_where_the_walk_warned(forking):
    from mhlo_cost.studies.compose import answerable

    loaded = load(program(3))
    analysis = isolated.walk_loaded(loaded, isolated.WalkOptions())
    assert answerable(analysis) and not analysis.warnings
    analysis.warnings.append("a warning")
    assert not answerable(analysis)


def test_no_memory_fork_where_the_walk_fork_did_not_answer(forking, monkeypatch):
    forks, made = forking
    text = program(LAYERS)
    monkeypatch.setattr(split, "_received", lambda fd, wait_s: os.close(fd))  # the walk's fork silent
    code, _ = whole_answer(text, split_on=True)
    assert code == Answer.RENDERED
    assert len(forks) == 1 and made == [os.getpid()]  # the walk walked its part here; no second fork


def open_fds() -> int:
    """How many file descriptors this process holds open (Linux's /proc/self/fd)."""
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts this process's open files (Linux)")
@pytest.mark.parametrize("failing", [1, 2])  # the walk's fork, the memory's
def test_a_fork_that_cannot_start_leaves_no_pipe_open(forking, monkeypatch, failing):
    """``os.fork`` raising (EAGAIN: no process left): the pipe's two ends closed, and the part the fork would have
    done made here (the walk's part walked, the profile made), the answer the one process's, byte for byte."""
    import errno

    forks, made = forking
    text = program(LAYERS)
    _, one = whole_answer(text, split_on=False)
    del made[:]
    real, calls = os.fork, []

    def fork():
        calls.append(1)
        if len(calls) == failing:
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
        return real()

    monkeypatch.setattr(split.os, "fork", fork)
    before = open_fds()
    code, two = whole_answer(text, split_on=True)
    assert open_fds() == before
    assert code == Answer.RENDERED and two == one
    assert len(calls) == failing and len(forks) == failing - 1 and made == [os.getpid()]
    assert all(gone(pid) for pid in forks)
