"""Deprecated names (issue 34, item 5): each one a user could have imported still works for one release, with a
DeprecationWarning that names its replacement; the project's own tests turn mhlo-cost's deprecation warnings into
errors (pyproject.toml's filterwarnings), so nothing in the repository uses them; the names kept only for tests
are gone."""
from __future__ import annotations

import importlib
import sys
import warnings

import pytest

from mhlo_cost.analysis import Analysis, AnalysisOptions, analyze

#: A dot and a tanh that reads it: the data flow has a producer to record (row 0 for the tanh).
PROGRAM = """
func.func @main(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %1 = stablehlo.tanh %0 : tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}
"""


def _counts(a: Analysis) -> tuple:
    # argument keys are hashes of each walk's MLIR objects: compared by kind
    flow = [tuple("arg" if isinstance(p, str) else p for p in ps) for ps in a.producers]
    return [(r.op, r.cost) for r in a.rows], flow, a.options


@pytest.mark.parametrize("old,options", [("analyze_dataflow", AnalysisOptions(dataflow=True)),
                                         ("training.analyze_training", AnalysisOptions(phases=True))])
def test_the_old_entry_points_warn_with_their_replacement_and_give_the_same_analysis(old, options):
    module, _, name = ("." + old).rpartition(".")
    fn = getattr(importlib.import_module("mhlo_cost.analysis" + module), name)
    with pytest.warns(DeprecationWarning, match=r"goes in mhlo-cost 0\.3\.0: use analyze\(source, AnalysisOptions"):
        got = fn(PROGRAM)
    want = analyze(PROGRAM, options)
    assert _counts(got) == _counts(want) and _counts(got)[1] == [("arg", "arg"), (0,)]  # the data flow, as asked


@pytest.mark.parametrize("module,name", [("mhlo_cost.analysis", "DataflowAnalysis"),
                                         ("mhlo_cost.analysis.training", "TrainingAnalysis")])
def test_the_old_type_names_warn_and_are_the_one_analysis_type(module, name):
    with pytest.warns(DeprecationWarning, match=f"{name} is deprecated .* use mhlo_cost.analysis.Analysis"):
        assert getattr(importlib.import_module(module), name) is Analysis
    assert name not in getattr(importlib.import_module(module), "__all__", [])  # a star import does not warn


def test_an_old_module_name_warns_and_gives_the_new_module(monkeypatch):
    monkeypatch.delitem(sys.modules, "mhlo_cost.loader", raising=False)
    with pytest.warns(DeprecationWarning, match="mhlo_cost.loader is now mhlo_cost.ir.loader"):
        old = importlib.import_module("mhlo_cost.loader")
    from mhlo_cost.ir import loader

    assert old.load is loader.load


def test_the_tests_run_with_mhlo_costs_deprecations_as_errors_and_only_those():
    from mhlo_cost.analysis import analyze_dataflow

    with pytest.raises(DeprecationWarning, match="analyze_dataflow"):
        analyze_dataflow(PROGRAM)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        warnings.warn("someone else's old name", DeprecationWarning)  # another package's: not ours to refuse
    assert [str(w.message) for w in seen] == ["someone else's old name"]


@pytest.mark.parametrize("module,name", [("mhlo_cost.walk.matrix", "TFlopsVisitor"),
                                         ("mhlo_cost.walk.vector", "VectorVisitor"),
                                         ("mhlo_cost.walk.collective", "CommIRVisitor"),
                                         ("mhlo_cost.walk.shardy", "ShardyRules")])
def test_the_names_kept_only_for_tests_are_gone(module, name):
    assert not hasattr(importlib.import_module(module), name)
    for gone in ("mhlo_cost.walk.ruleset", "mhlo_cost.walk.cost", "mhlo_cost.walk.more_rules"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(gone)
