"""Several files and the HTML page are a view and a renderer's choice, not special cases of the command
(issue 23, item 5): the library alone writes what ``report A B`` and ``report --format html`` write."""
from __future__ import annotations

import json
from pathlib import Path

from mhlo_cost.cli import main
from mhlo_cost.studies.study import Study
from mhlo_cost.views.many import joined
from mhlo_cost.views.render import render
from mhlo_cost.views.table import ViewRequest

FIXTURES = Path(__file__).parent / "fixtures"
SMALL = str(FIXTURES / "small_stablehlo.mlir")
STEP = str(Path(__file__).parent / "golden" / "inputs" / "gpt_l2_train.mlir")


def cli(tmp_path, *argv) -> str:
    out = tmp_path / "out"
    assert main(["report", *argv, "-o", str(out)]) == 0
    return out.read_text()


def test_two_files_by_block_are_one_table_with_the_file_first(tmp_path):
    req = ViewRequest(by="block")
    tables = [Study(p, training=True).view(req) for p in (SMALL, STEP)]
    both = joined(tables, req)
    payload = json.loads(render(both, "json"))
    assert payload["rows"][0]["file"] == SMALL and payload["rows"][-1]["file"] == STEP
    # each file's TOTAL row is that file's own count, and its counts stand after the rows
    totals = {r["file"]: r["gemm_flops"] for r in payload["rows"] if r["block"] == "TOTAL"}
    assert totals == {p: t.summary["gemm_flops"] for p, t in zip((SMALL, STEP), tables)}
    assert list(payload)[-1] == "summaries" and payload["summaries"][STEP]["gemm_flops"] == totals[STEP]
    # the training step's phase columns are empty for the file without them, exact ints where present
    fwd = [r["fwd_gemm_flops"] for r in payload["rows"]]
    assert fwd[0] is None and any(isinstance(v, int) and v > 0 for v in fwd)
    assert render(both, "csv") == cli(tmp_path, SMALL, STEP, "--by", "block", "--format", "csv")


def test_two_summaries_are_the_metric_pairs_of_each_file(tmp_path):
    req = ViewRequest(by="summary")
    tables = [Study(p).view(req) for p in (SMALL, STEP)]
    lines = render(joined(tables, req), "csv").splitlines()
    assert lines[0] == "file,metric,value"
    assert f"{SMALL},gemm_flops,{tables[0].summary['gemm_flops']}" in lines
    assert render(joined(tables, req), "table") == cli(tmp_path, SMALL, STEP)


def test_the_summary_in_html_is_the_whole_report_page(tmp_path):
    study = Study(SMALL)
    page = render(study.view(ViewRequest(by="summary")), "html")
    assert page.lstrip().lower().startswith("<!doctype html") and "<table" in page
    assert page == cli(tmp_path, SMALL, "--format", "html")
    # another view's HTML is that view's table, not the page
    kind = render(study.view(ViewRequest(by="kind")), "html")
    assert kind != page and "TOTAL" in kind
