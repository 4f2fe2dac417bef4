"""The reader's child answers a ``report`` whole (mhlo_cost.studies.compose, the one composition) where it can: the
same bytes as the rows sent back and composed by the caller, and the rows still sent wherever the caller has more
to say."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mhlo_cost.analysis import Analysis
from mhlo_cost.studies.compose import wire
from mhlo_cost.studies.study import StudyOptions
from mhlo_cost.views.table import ViewRequest
from mhlo_cost.analysis.isolated import Rendered, WalkOptions, analyze_isolated
from helpers import call_chain

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


def _untimed(err: bytes) -> str:
    """stderr without the progress line's times."""
    return re.sub(r"\(\d+\.\ds\)|in \d+\.\ds", "", err.decode())


def _summary_spec(by="summary", fmt="table", **request):
    return wire(StudyOptions(b"", training=by == "block"), ViewRequest(by=by, **request), fmt, False)


@pytest.mark.parametrize("argv", [(), ("--format", "json"), ("--by", "block"),
                                  ("--by", "block", "--parts", "--format", "csv"), ("--by", "op", "--top", "3"),
                                  ("--by", "tree:2", "--format", "markdown"), ("--by", "memory", "--format", "csv"),
                                  ("--by", "scope", "--scope", "mlp"), ("--by", "op", "--block", "no-such-block"),
                                  ("--hardware", "h100", "--progress"), ("--format", "html", "--hardware", "a100"),
                                  ("--by", "block", "--hardware", "h100", "--fuse", "elementwise", "--format", "json")])
def test_child_answer_is_the_in_process_answer(argv):
    whole = _cli(GPT, *argv)
    here = _cli(GPT, *argv, isolate="0")  # parsed, walked and rendered in this process: no child at all
    assert whole.returncode == here.returncode
    assert whole.stdout == here.stdout
    assert _untimed(whole.stderr) == _untimed(here.stderr)
    if "no-such-block" in argv:  # the view's error, said by the caller from the rows sent back
        assert whole.returncode == 2 and whole.stderr.decode().startswith("mhlo-cost: error:")
    else:
        assert whole.returncode == 0 and whole.stdout


def test_the_child_answers_whole_where_it_can():
    got = analyze_isolated(GPT, WalkOptions(render=_summary_spec()))
    assert isinstance(got, Rendered)
    text, lines, stages = json.loads(got)
    assert text.startswith(f"{GPT} (entry @main), by summary") and lines == [] and stages == ["grouping"]
    got = analyze_isolated(GPT, WalkOptions(record="training-if-backward", render=_summary_spec("block", "csv")))
    text, lines, _ = json.loads(got)
    assert text.startswith("block,") and [note for _, note in lines] == [True]
    got = analyze_isolated(GPT, WalkOptions(render=_summary_spec(fmt="html")))
    text, lines, stages = json.loads(got)
    assert text.startswith("<!DOCTYPE html>") and stages == ["grouping", "writing the page"]
    assert [n for _, n in lines] == [True]


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


def test_nothing_is_asked_of_the_child_for_a_profile():
    assert wire(StudyOptions(b"", hardware="h100"), ViewRequest(), "table", False) is None
    assert wire(StudyOptions(b"", hardware_file="p.toml"), ViewRequest(), "table", False) is None
    assert wire(StudyOptions(b""), ViewRequest(), "table", False) is not None


def test_bad_input_is_still_one_line(tmp_path):
    p = tmp_path / "bad.mlir"
    p.write_text("func.func @main( {")
    r = _cli(p)
    assert r.returncode == 2 and r.stderr.decode().startswith("mhlo-cost: error:")


def test_a_program_too_large_to_send_is_rendered_in_the_child(tmp_path):
    """A chain of 600 calls: every function's table holds its callees' rows (too many to send: the row path
    sends bytecode); the child renders the answer instead, the same as in process."""
    n = 600
    f = tmp_path / "chain.mlir"
    f.write_text(call_chain(n))
    got = analyze_isolated(f, WalkOptions(render=_summary_spec(fmt="json")))
    assert isinstance(got, Rendered)
    assert json.loads(json.loads(got)[0])["summary"]["vector_flops"] == 4 * n  # one add of 4 elements each
    whole, here = _cli(f, "--by", "op", "--format", "csv"), _cli(f, "--by", "op", "--format", "csv", isolate="0")
    assert whole.returncode == here.returncode == 0 and whole.stdout == here.stdout
