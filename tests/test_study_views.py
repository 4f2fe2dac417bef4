"""One view per question, one renderer per format (issue 23, item 5): for every view, the JSON, CSV and
Markdown carry the columns and values of the view's one table."""
from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from mhlo_cost.studies.study import Study
from mhlo_cost.views.by import VIEWS
from mhlo_cost.views.render import RENDERERS, render
from mhlo_cost.views.table import ViewRequest

INPUTS = Path(__file__).parent / "golden" / "inputs"
GPT, STEP = str(INPUTS / "gpt_l2.mlir"), str(INPUTS / "gpt_l2_train.mlir")
COMM = str(Path(__file__).parent / "fixtures" / "collectives_8dev.mlir")


@pytest.fixture(scope="module")
def studies():
    return {(path, hw): Study(path, hardware=hw, training="always" if path == STEP else False,
                              dataflow=True)
            for path in (GPT, STEP, COMM) for hw in (None, "h100")}


def same(a, b) -> bool:
    """Equal values: exact for ints and text, bit for bit for seconds; empty cells are None."""
    if a is None or a is pd.NA or (isinstance(a, float) and math.isnan(a)):
        return b is None or (isinstance(b, float) and math.isnan(b))
    if hasattr(a, "item"):
        a = a.item()
    return a == b


def cases():
    for by in VIEWS:
        path = STEP if by == "phase" else COMM if by == "comm" else GPT
        for hw in (("h100",) if by in ("critical-path", "overlap") else (None, "h100")):  # tasks need times
            yield pytest.param(by, path, hw, id=f"{by}-{Path(path).stem}-{hw or 'counts'}")
    yield pytest.param("block", STEP, "h100", id="block-train-step")


@pytest.mark.parametrize("by,path,hw", list(cases()))
def test_every_format_carries_the_tables_figures(studies, by, path, hw):
    table = studies[(path, hw)].view(ViewRequest(by=by, depth=1 if by in ("scope", "tree") else None))
    if table.pairs is not None:
        columns = ["metric", "value"]
        rows = [[m, v] for m, v in table.pairs]
    else:
        columns = [str(c) for c in table.frame.columns]
        rows = [list(r) for r in table.frame.itertuples(index=False, name=None)]
    assert rows, "a view with no rows proves nothing"
    # JSON: the same columns, in order, and every value exact
    data = json.loads(render(table, "json"))
    assert [list(r) for r in data["rows"]] == [columns] * len(rows)
    for got, want in zip(data["rows"], rows):
        assert all(same(w, got[c]) for c, w in zip(columns, want)), (got, want)
    # CSV: the same header, and each cell the value written out (ints exact, seconds as Python writes them)
    lines = list(csv.reader(io.StringIO(render(table, "csv"))))
    assert lines[0] == columns and len(lines) == len(rows) + 1
    for got, want in zip(lines[1:], rows):
        for cell, w in zip(got, want):
            if w is pd.NA or w is None:
                assert cell == ""
            elif isinstance(w, float) and not math.isnan(w):
                assert float(cell) == w
            elif isinstance(w, int) and not isinstance(w, bool) or hasattr(w, "item"):
                assert int(cell) == int(w)
    # Markdown: the shown columns (a training step's block table: its phase columns), one line per row
    md = render(table, "markdown").splitlines()
    header = next(line for line in md if line.startswith("| "))
    names = [h.strip().split("[")[0] for h in header.strip("|").split("|")]
    shown = columns if table.pairs is not None else [str(c) for c in table.shown.columns]
    assert names == [c[:-2] if c.endswith("_s") and c[:-2] in names else c for c in shown]
    body = [line for line in md[md.index(header) + 2:] if line.startswith("| ")]
    assert len(body) == len(rows)


def test_a_training_step_shows_fewer_columns_as_text_only(studies):
    table = studies[(STEP, "h100")].view(ViewRequest(by="block"))
    assert table.text_frame is not None
    assert "gemm_flops" in table.frame.columns and "gemm_flops" not in table.text_frame.columns
    assert "fwd_gemm_flops" in table.text_frame.columns  # the phases, which add up to the sum left out
    total = table.frame.iloc[-1]
    assert int(total["gemm_flops"]) == studies[(STEP, "h100")].analysis.summary["gemm_flops"]


def test_a_format_and_a_view_are_each_chosen_in_one_table():
    from mhlo_cost.cli.cmd_report import BY

    # the five formats, and the task graph's two exports (only the task views have them: -o NAME.dot / .json)
    assert set(RENDERERS) == {"table", "csv", "json", "markdown", "html", "dot", "graph"}
    assert set(VIEWS) == set(BY)
