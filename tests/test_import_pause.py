"""The frameworks' first import runs with the cyclic collector paused (mhlo_cost/lower/frontends/_imports.py)."""
import gc

import pytest

from mhlo_cost.lower.frontends._imports import collector_paused


def test_paused_inside_then_enabled_and_what_was_made_frozen():
    assert gc.isenabled()
    before = gc.get_freeze_count()
    with collector_paused():
        assert not gc.isenabled()
        made = [[i] for i in range(1000)]  # 1,001 tracked containers, alive after
    assert gc.isenabled()
    assert gc.get_freeze_count() >= before + len(made) + 1


def test_enabled_again_when_the_import_fails():
    with pytest.raises(ModuleNotFoundError):
        with collector_paused():
            import mhlo_cost_no_such_module  # noqa: F401
    assert gc.isenabled()


def test_an_already_paused_collector_is_left_alone():
    gc.disable()
    try:
        before = gc.get_freeze_count()
        with collector_paused():
            made = [[i] for i in range(10)]
        assert not gc.isenabled()
        assert gc.get_freeze_count() == before and made
    finally:
        gc.enable()
