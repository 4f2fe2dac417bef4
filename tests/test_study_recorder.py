"""A new recorder is declared in one place, its class (issue 23, item 3): the declaration alone gives the
options' name for it, its place in the walk and its record on the Analysis; not asked for, the record is None."""
from __future__ import annotations

import pytest

from mhlo_cost.analysis import analyze
from mhlo_cost.walk.options import AnalysisOptions
from mhlo_cost.walk.recorder import Recorder
from helpers import two_calls

M, K, N = 4, 8, 16
#: main calls @layer twice: a dot and a tanh each time (the callee's rows are built once, then replayed).
PROGRAM = two_calls(M, K)


class CallTally(Recorder, record="study_test_calls"):
    """A toy record: the calls the walk meets (by callee) and the op names it builds rows for."""

    wants_rows = True

    def __init__(self):
        self.calls, self.built = [], []

    def emitted(self, op, row):
        self.built.append(op.name)

    def region_started(self, kind, op):
        if kind == "call":
            self.calls.append(str(op.attributes["callee"]).lstrip("@"))

    def record(self):
        return {"calls": list(self.calls), "built": list(self.built)}


def test_a_recorder_declared_here_is_asked_for_by_name_and_its_record_comes_back():
    a = analyze(PROGRAM, AnalysisOptions(records=("study_test_calls",)))
    # two calls of @layer in the IR; the callee's two ops get rows once (the second call replays them)
    assert a.record("study_test_calls") == {"calls": ["layer", "layer"],
                                           "built": ["stablehlo.dot_general", "stablehlo.tanh"]}
    assert a.summary["gemm_flops"] == 2 * (2 * M * K * K)  # the counts stay as they were
    assert "study_test_calls" in a.options.asked


def test_not_asked_for_the_record_is_none_and_the_recorder_does_not_run():
    made = []

    class Watched(CallTally, record="study_test_watched"):
        def __init__(self):
            super().__init__()
            made.append(self)

    a = analyze(PROGRAM)
    assert a.record("study_test_watched") is None and a.record("study_test_calls") is None
    assert made == [] and a.records == {}
    analyze(PROGRAM, AnalysisOptions(records="study_test_watched"))
    assert len(made) == 1


def test_names_no_recorder_declares_are_errors_not_silent_nones():
    with pytest.raises(ValueError, match="no recorder is declared for nothing_here"):
        analyze(PROGRAM, AnalysisOptions(records=("nothing_here",)))
    with pytest.raises(ValueError, match="no recorder is declared for 'nothing_here'"):
        analyze(PROGRAM).record("nothing_here")
    with pytest.raises(ValueError, match="Analysis.liveness"):
        analyze(PROGRAM).record("liveness")  # a built-in record is its typed attribute


def test_a_second_class_cannot_take_a_declared_name():
    with pytest.raises(ValueError, match="declared twice"):
        class Other(Recorder, record="study_test_calls"):
            pass


def test_the_built_in_records_are_declared_the_same_way():
    from mhlo_cost.analysis import declared

    known = declared()
    assert {"liveness", "dataflow", "arguments"} <= set(known)
    assert known["dataflow"].fields == ("producers", "async_done")
    a = analyze(PROGRAM, AnalysisOptions(arguments=True, liveness=False))
    assert a.liveness is None and a.producers is None
    assert [x.type.shape for x in a.arguments] == [(M, K), (K, K)]
