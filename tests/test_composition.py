"""One composition (issue 34): the answer codes of the reader's child are one enum, what crosses to the child is
the study's options themselves, and the command line, the child and the Python API compose the same answer."""
from __future__ import annotations

import re
from pathlib import Path

from mhlo_cost.ir.codes import WALK_ANSWERS, Answer

ROOT = Path(__file__).resolve().parent.parent
#: The four files that write or read the reader's child's answers.
SPEAKERS = ("mhlo_cost/ir/reader.py", "mhlo_cost/ir/guard.py", "mhlo_cost/analysis/isolated.py",
            "mhlo_cost/cli/child.py")


def test_the_answer_codes_are_one_enum_used_by_all_four_files():
    codes = [a.value for a in Answer]
    assert len(codes) == len(set(codes)) and all(len(c) == 1 for c in codes)
    for path in SPEAKERS:
        text = (ROOT / path).read_text()
        assert "Answer." in text, path
        literals = re.findall(r'b"([A-Z])"', text)
        assert not [c for c in literals if c.encode() in codes], f"{path}: a code written as a literal"


def test_an_answer_splits_into_its_code_and_payload():
    assert Answer.split(Answer.RENDERED + b"text") == (Answer.RENDERED, b"text")
    assert Answer.split(b"?what") == (Answer.READ_ERROR, b"what")  # not a code: the reader's error
    assert Answer.READ_ERROR not in WALK_ANSWERS and Answer.RENDERED in WALK_ANSWERS


# -- what crosses to the child: the options themselves ---------------------------------------------------------

import ast  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402

import pytest  # noqa: E402

from mhlo_cost.studies.compose import LOCAL, compose, wire  # noqa: E402
from mhlo_cost.studies.study import StudyOptions  # noqa: E402
from mhlo_cost.views.table import ViewRequest  # noqa: E402

GPT = ROOT / "examples" / "gpt_small.mlir"


def test_every_study_option_but_the_local_ones_crosses_to_the_child():
    asked = json.loads(wire(StudyOptions(b""), ViewRequest(), "table"))
    assert set(asked["study"]) == {f.name for f in dataclasses.fields(StudyOptions)} - LOCAL
    assert LOCAL == {"source", "name", "isolate"}


def test_a_field_added_to_the_options_crosses_and_is_rebuilt():
    """No hand-kept list: a new field of StudyOptions is carried as it is, and rebuilt with the class itself."""
    Extra = dataclasses.make_dataclass("Extra", [("extra_knob", int, 0)], bases=(StudyOptions,), frozen=True)
    options = Extra(b"program", conv_padding="dense", blocks="rms", extra_knob=7)
    crossed = json.loads(wire(options, ViewRequest(by="block"), "csv"))["study"]
    assert crossed["extra_knob"] == 7 and crossed["conv_padding"] == "dense"
    assert Extra(b"program", **crossed) == options


def test_an_option_reaches_the_child_and_gives_the_answer_made_here(monkeypatch):
    """A non-default option (rms blocks) asked of the child gives the text composed in this process with it, and not
    the default's: the option reached the child."""
    from mhlo_cost.analysis.isolated import Rendered, WalkOptions, analyze_isolated

    request = ViewRequest(by="block")

    def child(**fields):
        options = StudyOptions(b"", training=True, **fields)
        got = analyze_isolated(GPT, WalkOptions(record="training-if-backward", render=wire(options, request, "csv")))
        assert isinstance(got, Rendered)
        return json.loads(got)[0]

    rms = child(blocks="rms")
    here = compose(StudyOptions(GPT, training=True, blocks="rms", isolate=False), request, "csv",
                   say=lambda *a: None)
    assert rms == here and rms != child()


def test_the_python_api_composes_the_same_text(monkeypatch):
    import mhlo_cost

    text = mhlo_cost.compose(str(GPT), ViewRequest(by="kind"), "csv")
    assert text.startswith("kind,") and text.splitlines()[-1].startswith("TOTAL,")


# -- no global state in the command line ------------------------------------------------------------------------


def test_the_command_line_keeps_no_state_between_runs():
    """Before: cli/common.py held SAID, ARGV and ACTIVE_PROGRESS, module-level lists and sets every run shared."""
    import importlib
    import pkgutil

    import mhlo_cost.cli as cli

    names = [f"mhlo_cost.cli.{m.name}" for m in pkgutil.iter_modules(cli.__path__)] + ["mhlo_cost.cli",
                                                                                       "mhlo_cost.files.console"]
    for name in names:
        if name.endswith(".child"):
            continue
        module = importlib.import_module(name)
        tree = ast.parse(Path(module.__file__).read_text())
        assigned = {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
        shared = [k for k in assigned if isinstance(getattr(module, k), (list, set, dict))]
        assert not shared, f"{name}: module-level state {shared}"


def test_a_run_says_its_lines_whatever_a_run_before_said(capsys):
    from mhlo_cost.cli import main

    for _ in range(2):
        assert main(["report", str(GPT), "--by", "block", "--format", "csv"]) == 0
        assert "blocks by scope: 4 found" in capsys.readouterr().err


def test_a_view_added_to_views_is_a_by_of_report(monkeypatch, capsys):
    """--by is read from the views (views.by.VIEWS), not from a list of its own."""
    from mhlo_cost.cli import main
    from mhlo_cost.views import by

    assert main(["report", str(GPT), "--by", "op", "--format", "csv", "-q"]) == 0
    ops = capsys.readouterr().out
    monkeypatch.setitem(by.VIEWS, "ops_again", by.VIEWS["op"])
    assert main(["report", str(GPT), "--by", "ops_again", "--format", "csv", "-q"]) == 0
    assert capsys.readouterr().out == ops


def test_the_execution_model_is_worked_out_in_one_place():
    from mhlo_cost.machines.execution import execution_of
    from mhlo_cost.roofline import estimate
    from mhlo_cost.studies.study import Study

    assert estimate.execution_of is execution_of
    for fuse, ex, want in (("none", None, "unfused"), ("elementwise", None, "compiled"), (None, "eager", "eager"),
                           ("none", "compiled", "compiled")):
        assert Study(b"", fuse=fuse, execution=ex).execution == want == execution_of(fuse, ex)
    with pytest.raises(ValueError):
        execution_of("none", "fast")
    sources = [p.read_text() for p in (ROOT / "mhlo_cost").rglob("*.py")]
    assert sum(s.count("def execution_of(") for s in sources) == 1
    assert not any("def execution(args" in s for s in sources)
