"""The reader's child renders a ``report``'s whole answer (mhlo_cost.child_render) where it can: the same bytes
as the rows sent back and rendered by the caller, and the rows still sent wherever the caller has more to say."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mhlo_cost.analysis import Analysis
from mhlo_cost.child_render import spec
from mhlo_cost.study import StudyOptions
from mhlo_cost.views.table import ViewRequest
from mhlo_cost.worker import Rendered, WalkOptions, analyze_isolated

ROOT = Path(__file__).resolve().parent.parent
GPT = ROOT / "examples" / "gpt_small.mlir"

UNKNOWN = """
func.func @main(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = stablehlo.custom_call @my_fused_kernel(%a) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = stablehlo.add %0, %0 : tensor<4x4xf32>
  return %1 : tensor<4x4xf32>
}
"""


def _cli(*argv, isolate="1"):
    env = dict(os.environ, PYTHONPATH=str(ROOT), MHLO_COST_ISOLATE=isolate)
    return subprocess.run([sys.executable, "-m", "mhlo_cost", "report", *map(str, argv)], capture_output=True,
                          env=env, cwd=ROOT)


def _summary_spec(by="summary", fmt="table", **request):
    return spec(StudyOptions(b"", training=by == "block"), ViewRequest(by=by, **request), fmt, False)


@pytest.mark.parametrize("argv", [(), ("--format", "json"), ("--by", "block"), ("--by", "block", "--parts",
                                                                                  "--format", "csv")])
def test_child_answer_is_the_in_process_answer(argv):
    whole = _cli(GPT, *argv)
    here = _cli(GPT, *argv, isolate="0")  # parsed, walked and rendered in this process: no child at all
    assert whole.returncode == here.returncode == 0
    assert whole.stdout == here.stdout and whole.stdout
    assert whole.stderr == here.stderr


def test_the_child_answers_whole_where_it_can():
    got = analyze_isolated(GPT, WalkOptions(render=_summary_spec()))
    assert isinstance(got, Rendered)
    text, lines = json.loads(got)
    assert text.startswith(f"{GPT} (entry @main), by summary") and lines == []
    got = analyze_isolated(GPT, WalkOptions(record="training-if-backward", render=_summary_spec("block", "csv")))
    text, lines = json.loads(got)
    assert text.startswith("block,") and [note for _, note in lines] == [True]


def test_rows_come_back_where_the_caller_has_more_to_say(tmp_path):
    p = tmp_path / "unknown.mlir"
    p.write_text(UNKNOWN)
    got = analyze_isolated(p, WalkOptions(render=_summary_spec()))
    assert isinstance(got, Analysis) and got.summary["unknown_ops"] == 1  # the warning is the caller's to say
    r = _cli(p)
    assert r.returncode == 0 and b"my_fused_kernel" in r.stderr
    r = _cli(p, "--strict")
    assert r.returncode == 2 and r.stderr.decode().startswith("mhlo-cost: error:")


def test_a_view_that_fails_in_the_child_sends_the_rows():
    got = analyze_isolated(GPT, WalkOptions(render=json.dumps({"study": {}, "request": {"by": "nonsense"},
                                                               "format": "table", "wide": False})))
    assert isinstance(got, Analysis) and got.summary["ops"] > 0


@pytest.mark.parametrize("by,fmt,request_", [("op", "table", {}), ("summary", "html", {}),
                                             ("block", "table", {"block": "h.0"}), ("block", "csv", {"scope": "mlp"})])
def test_spec_is_none_for_what_the_child_does_not_render(by, fmt, request_):
    assert _summary_spec(by, fmt, **request_) is None
    assert _summary_spec() is not None
    assert spec(StudyOptions(b"", hardware="h100"), ViewRequest(), "table", False) is None


def test_bad_input_is_still_one_line(tmp_path):
    p = tmp_path / "bad.mlir"
    p.write_text("func.func @main( {")
    r = _cli(p)
    assert r.returncode == 2 and r.stderr.decode().startswith("mhlo-cost: error:")
