"""The memory profile computed in a fork while the reader's child renders the rest of a whole answer
(mhlo_cost.walk.split.alongside, mhlo_cost.analysis.isolated): the same answer, byte for byte, as the one process
makes; the peak equal to a closed form worked out here; a fork that fails or is not waited for leaves nothing behind."""
from __future__ import annotations

import json
import os

import pytest

from mhlo_cost.analysis import isolated
from mhlo_cost.ir.codes import Answer
from mhlo_cost.ir.loader import load
import importlib
from mhlo_cost.studies.compose import answer_in_child, wire
from mhlo_cost.studies.study import StudyOptions
from mhlo_cost.views.table import ViewRequest
from mhlo_cost.walk import split

from test_walk_split import program

pytestmark = [pytest.mark.skipif(not hasattr(os, "fork"), reason="the fork is POSIX's"),
              pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")]  # (this process's jax threads: unused by the fork)

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

    def failing(fn):  # the fork's computation raises: nothing comes back, and this process makes the profile
        return real(lambda: 1 // 0)

    real = split.alongside
    monkeypatch.setattr(split, "alongside", failing)
    code, two = whole_answer(text, split_on=True)
    assert code == Answer.RENDERED and two == one
    assert len(forks) == 2 and made == [os.getpid()]


def test_a_fork_not_waited_for_is_ended(forking):
    forks, _ = forking
    split.enable()
    try:
        assert split.alongside(lambda: 1) is None  # no walk split since enable(): the idle core was not seen
        split._split = True
        pending = split.alongside(lambda: sum(range(10**9)))  # (would run for a minute)
        assert pending is not None and len(forks) == 1
        pending.close()
        with pytest.raises(ChildProcessError):
            os.waitpid(forks[0], os.WNOHANG)  # killed and reaped: no process left
        assert pending.result() is None  # (closed: nothing to wait for)
        done = split.alongside(lambda: [2**70, {"a": 1}])
        assert done.result() == [2**70, {"a": 1}]  # exact ints, pickled over the pipe
    finally:
        split.enable(False)
