"""The one pause of the cyclic garbage collector (mhlo_cost/files/collector.py): paused inside, its previous state
restored on the way out (raised or not), and each exit (a collection, the heap settled, frozen) seen from CPython's
own counters (``gc.callbacks``, ``gc.get_objects(generation=...)``, ``gc.get_freeze_count``)."""
import contextlib
import gc

import pytest

from mhlo_cost.files.collector import paused


@pytest.fixture
def collector_state():
    """The collector as the test found it, put back after (enabled, nothing frozen by the test)."""
    was = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("enabled", [True, False])
@pytest.mark.parametrize("raises", [False, True])
def test_paused_inside_and_the_previous_state_restored(collector_state, enabled, raises):
    (gc.enable if enabled else gc.disable)()
    seen = []
    with pytest.raises(ValueError) if raises else contextlib.nullcontext():
        with paused():
            seen.append(gc.isenabled())
            if raises:
                raise ValueError("the body failed")
    assert seen == [False]
    assert gc.isenabled() is enabled  # enabled again only where it was enabled on the way in


def test_nested_pauses_restore_in_turn(collector_state):
    gc.enable()
    with paused():
        with paused(collect=0):
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause leaves the outer one's pause as it found it
    assert gc.isenabled()


def test_collect_runs_that_generation_on_the_way_out(collector_state):
    gc.enable()
    heard = []

    def callback(phase, info):
        if phase == "start":
            heard.append(info["generation"])

    gc.callbacks.append(callback)
    try:
        with pytest.raises(KeyError):
            with paused(collect=1):
                heard.append("body")
                raise KeyError("x")
    finally:
        gc.callbacks.remove(callback)
    assert heard[:2] == ["body", 1]  # (a young collection may follow, with the collector enabled again)


def test_settle_moves_what_was_made_to_the_oldest_generation(collector_state):
    gc.enable()
    with paused(settle=True):
        made = [[i] for i in range(100)]  # tracked containers, born in the youngest generation
        assert any(x is made[0] for x in gc.get_objects(generation=0))
    assert gc.get_freeze_count() == 0  # frozen and let go at once
    oldest = {id(x) for x in gc.get_objects(generation=2)}
    assert all(id(x) in oldest for x in made)


def test_freeze_moves_what_was_made_to_the_permanent_generation(collector_state):
    gc.enable()
    before = gc.get_freeze_count()
    with paused(freeze=True):
        made = [[i] for i in range(100)]
    assert gc.get_freeze_count() >= before + len(made) + 1
    assert not any(x is made[0] for x in gc.get_objects())  # (frozen objects are no generation's)
    assert gc.isenabled()
