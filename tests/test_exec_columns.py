"""Every table that carries a time or a peak says which execution model its ``_fused`` columns describe
(issue 25: the execution model "printed on every output that carries a time or a peak"): an ``execution``
column in the block table (``blocks``, ``report --by block``), the op / kernel table, the grouped tables and the
memory timeline, in CSV and JSON alike."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from mhlo_cost.cli import main

GPT = str(Path(__file__).resolve().parents[1] / "examples" / "gpt_small.mlir")


def _csv(capsys, *argv):
    assert main([*argv, "--format", "csv", "-q"]) == 0
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


@pytest.mark.parametrize("execution", ["eager", "compiled", "unfused"])
@pytest.mark.parametrize("by", ["block", "op", "kind", "opname", "scope", "memory"])
def test_each_table_names_its_execution_model(capsys, execution, by):
    rows = _csv(capsys, "report", GPT, "--by", by, "--hardware", "a100", "--execution", execution)
    assert rows and all(r["execution"] == execution for r in rows), {r.get("execution") for r in rows}
    fused = any("_fused" in c or "_eager" in c for c in rows[0])
    # the _fused (eager memory: _eager) twins are there exactly where the model is not every op its own kernel
    # (by op: one row per kernel of the model, no twins)
    if by != "op":
        assert fused == (execution != "unfused")


def test_blocks_command_csv_and_json_carry_it(capsys):
    rows = _csv(capsys, "blocks", GPT, "--hardware", "h100", "--execution", "eager")
    assert {r["execution"] for r in rows} == {"eager"}
    assert main(["report", GPT, "--by", "block", "--hardware", "h100", "--execution", "eager", "--format", "json",
                 "-q"]) == 0
    data = json.loads(capsys.readouterr().out)
    text = json.dumps(data)
    assert '"execution": "eager"' in text


def test_without_a_profile_the_peak_is_named_too(capsys):
    rows = _csv(capsys, "report", GPT, "--by", "block")
    assert "peak_bytes" in rows[0] and {r["execution"] for r in rows} == {"unfused"}
    rows = _csv(capsys, "report", GPT, "--by", "block", "--execution", "eager")
    assert "peak_bytes_eager" in rows[0] and {r["execution"] for r in rows} == {"eager"}


def test_an_execution_models_peak_is_named_after_it(capsys):
    """Issue 35 item 7: the eager peak is peak_bytes_eager (fits_eager, margin_bytes_eager, peak_op_eager), not
    a *_fused name beside execution=eager; the accuracy line is the eager model's (h200-sxm has one: eager
    measurements on a lent GPU), the compiled one the compiled model's."""
    rows = _csv(capsys, "report", GPT, "--by", "summary", "--hardware", "h200", "--execution", "eager")
    s = {r["metric"]: r["value"] for r in rows}
    assert {"peak_bytes_eager", "fits_eager", "margin_bytes_eager", "peak_op_eager"} <= set(s)
    assert not {"peak_bytes_fused", "fits_fused", "margin_bytes_fused", "peak_op_fused"} & set(s)
    assert int(s["margin_bytes_eager"]) == int(s["hbm_bytes"]) - int(s["peak_bytes_eager"])
    assert s["execution"] == "eager" and ", eager;" in s["accuracy"]
    rows = _csv(capsys, "report", GPT, "--by", "summary", "--hardware", "h200", "--execution", "compiled")
    s = {r["metric"]: r["value"] for r in rows}
    assert "peak_bytes_fused" in s and ", compiled;" in s["accuracy"]
