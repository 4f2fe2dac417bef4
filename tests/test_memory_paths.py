"""The memory sweep's two ways give one answer: its array paths (numpy, taken where numpy is loaded) and its
list paths (taken in the MLIR reader's child answering a one-file report, which imports no numpy).

Each program's memory profile is made both ways in this process and compared whole: live bytes per row, the
peak and where it is, the arguments, the parameters and the rows that read them first. The inputs cover a flat
frame (the array path's case), a training step (regions, donated buffers, in-place updates), a sharded program
and the reliability fixtures' loops and branches.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from mhlo_cost import analyze
from mhlo_cost.memory import params
from mhlo_cost.memory import sweep
from mhlo_cost.walk.options import AnalysisOptions

ROOT = Path(__file__).resolve().parent
INPUTS = sorted((ROOT / "golden" / "inputs").glob("*.mlir")) + [
    ROOT.parent / "examples" / "gpt_small.mlir", ROOT / "fixtures" / "collectives_8dev.mlir"]
INPUTS += sorted((ROOT / "fixtures" / "interp").glob("*.mlir"))[:12]


def _profile(path: Path, arrays: bool, monkeypatch) -> dict:
    from mhlo_cost.memory.profile import profile

    monkeypatch.setattr(sweep, "arrays", lambda: arrays)
    monkeypatch.setattr(params, "arrays", lambda: arrays)
    analysis = analyze(path, AnalysisOptions())
    return asdict(profile(analysis))


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: p.name)
def test_array_and_list_paths_agree(path, monkeypatch):
    with_arrays = _profile(path, True, monkeypatch)
    with_lists = _profile(path, False, monkeypatch)
    assert with_lists == with_arrays
    assert with_lists["peak_bytes"] > 0 and with_lists["during"]  # a real profile, not two empty ones


def test_the_array_path_is_taken_where_numpy_is_loaded(monkeypatch):
    """The flat frame of a forward program goes through flat.backward with arrays, not without."""
    from mhlo_cost.memory import flat
    from mhlo_cost.memory.profile import profile

    calls = []
    real = flat.backward
    monkeypatch.setattr(flat, "backward", lambda sw, ps: calls.append(1) or real(sw, ps))
    analysis = analyze(ROOT.parent / "examples" / "gpt_small.mlir")
    profile(analysis)
    assert calls, "numpy is loaded in the test process: the array path is taken"
    calls.clear()
    monkeypatch.setattr(sweep, "arrays", lambda: False)
    profile(analysis)
    assert not calls
