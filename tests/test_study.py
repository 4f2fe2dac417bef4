"""The study facade: one composition of the pipeline, shared by ``report``, the sweep, the HTML page and the
Python API (issue 23, item 4)."""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from mhlo_cost.cli import main
from mhlo_cost.views.sweep_row import sweep_row

ROOT = Path(__file__).parent.parent
GPT = str(ROOT / "examples" / "gpt_small.mlir")


def report_json(capsys, *argv) -> dict:
    assert main(["report", GPT, "-q", "--format", "json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_python_api_is_exported_and_lazy():
    import mhlo_cost

    assert {"Study", "StudyOptions"} <= set(mhlo_cost.__all__)
    s = mhlo_cost.Study(GPT)
    assert s.options == mhlo_cost.StudyOptions(GPT) == mhlo_cost.Study(mhlo_cost.StudyOptions(GPT)).options
    assert s.hardware is None and s.roofline is None and s.execution == "unfused"
    first = s.analysis
    assert s.analysis is first and s.blocks is s.blocks  # computed once


@pytest.mark.parametrize("fuse", ["none", "elementwise", "eager"])
def test_a_sweep_row_is_what_report_prints(capsys, fuse):
    from mhlo_cost.studies.sweep.point import study_of

    flags = ["--execution", "eager"] if fuse == "eager" else ["--fuse", fuse]
    summary = report_json(capsys, "--hardware", "h100", "--steps", "3", *flags)["summary"]
    task = SimpleNamespace(fuse=fuse, conv_padding="xla", steps=3)
    study = study_of(Path(GPT).read_text(), task)
    row = sweep_row(study.on("h100").figures)
    fused = fuse != "none"
    # the counts, exact ints, and the figures of the estimate: the same numbers under the same names
    for k in ("gemm_flops", "conv_flops", "vector_flops", "comm_bytes", "flops", "peak_bytes", "est_time_s",
              "est_time_overlap_s", "comm_time_s", "comm_exposed_s", "utilisation", "steps"):
        assert row[k] == summary[k], k
    if fused:
        for k in ("peak_bytes_fused", "est_time_fused_s", "est_time_fused_overlap_s", "utilisation_fused"):
            # the report names the eager peak peak_bytes_eager; the sweep's table keeps one column for both
            assert row[k] == summary["peak_bytes_eager" if fuse == "eager" and k == "peak_bytes_fused" else k], k
    # a run of 3 steps: the report's run time, the row's step time times 3
    run = summary["run_time_fused_s" if fused else "run_time_s"]
    assert math.isclose(row["time_run_s"], run, rel_tol=1e-12) and row["time_step_s"] * 3 == row["time_run_s"]
    assert row["fits"] == ("yes" if summary["peak_bytes"] <= row["hbm_bytes"] else "no")


def test_the_study_and_report_give_the_same_summary(capsys):
    from mhlo_cost import Study as study

    summary = report_json(capsys, "--hardware", "h100", "--fuse", "elementwise")["summary"]
    pairs = dict(study(GPT, hardware="h100", fuse="elementwise").summary())
    assert list(pairs) == list(summary)
    for k, v in summary.items():
        assert (pairs[k] == v) if not isinstance(v, float) else math.isclose(pairs[k], v, rel_tol=1e-15), k


def test_the_block_table_of_a_study_is_the_blocks_commands(capsys):
    from mhlo_cost import Study as study

    assert main(["blocks", GPT, "-q", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    df = study(GPT, training=True).block_frame()
    assert [r["block"] for r in rows] == list(df["block"])
    assert [r["gemm_flops"] for r in rows] == [int(v) for v in df["gemm_flops"]]
    # an independent total: the analysis' own GEMM FLOPs, which the blocks split
    assert rows[-1]["gemm_flops"] == study(GPT).analysis.summary["gemm_flops"]


def test_on_shares_the_walk():
    from mhlo_cost import Study as study

    s = study(GPT, dataflow=True)
    a = s.analysis
    assert s.on("h100").analysis is a and s.on("a100").hardware.name != s.on("h100").hardware.name
