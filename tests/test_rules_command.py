"""``mhlo-cost rules`` and :func:`mhlo_cost.views.rules.rules_table` (issue 34, item 4): the op -> rule table, every
op of the one registry once, each naming the function that really counts it, in the shared formats."""
from __future__ import annotations

import csv
import importlib
import io
import json

import pytest

from mhlo_cost.cli import main
from stderr_lines import error_line


def rules_out(capsys, *argv) -> str:
    assert main(["rules", *argv]) == 0
    return capsys.readouterr().out


def test_json_lists_every_op_of_the_registry_once_with_the_function_that_counts_it(capsys):
    from mhlo_cost.walk.registry import RULES

    rows = json.loads(rules_out(capsys, "--format", "json"))["rows"]
    ops = [r["op"] for r in rows]
    assert len(ops) == len(set(ops)) == len(RULES) and set(ops) == set(RULES)
    assert ops == sorted(ops)
    for r in rows:  # "module:name" names the very function the walk calls for the op
        module, _, name = r["rule"].partition(":")
        assert getattr(importlib.import_module(module), name) is RULES[r["op"]].fn, r
        assert r["kind"] == RULES[r["op"]].kind and r["summary"], r  # every rule says what it counts
    by_op = {r["op"]: r for r in rows}
    assert (by_op["mhlo.dot_general"]["table"], by_op["mhlo.dot_general"]["rule"]) == (
        "matrix", "mhlo_cost.walk.matrix:dot_general")
    assert by_op["sdy.reshard"]["table"] == "shardy" and by_op["chlo.top_k"]["kind"] == "sort"
    assert "stablehlo.while" not in by_op and "func.call" not in by_op  # control flow is the walk's, not a rule


def test_filters_and_formats_carry_the_same_rows(capsys):
    got = list(csv.DictReader(io.StringIO(rules_out(capsys, "--table", "linalg", "--format", "csv"))))
    # fft and triangular_solve, each in the three dialects that share rules by short name
    assert sorted(r["op"] for r in got) == sorted(f"{d}.{n}" for d in ("chlo", "mhlo", "stablehlo")
                                                  for n in ("fft", "triangular_solve"))
    md = rules_out(capsys, "--op", r"^stablehlo\.custom_call$", "--format", "markdown")
    assert "| stablehlo.custom_call | custom_call | unknown | mhlo_cost.walk.custom_call:custom_call |" in md
    assert md.count("\n| stablehlo.") == 1
    text = rules_out(capsys, "--op", "all_to_all$")
    assert [ln.split()[0] for ln in text.splitlines()[3:6]] == ["chlo.all_to_all", "mhlo.all_to_all",
                                                                "sdy.all_to_all"]
    assert "mhlo_cost.walk.control" in text  # the note names where control flow lives


def test_the_command_offers_exactly_the_registry_tables():
    from mhlo_cost.cli.cmd_rules import TABLE_NAMES
    from mhlo_cost.walk.registry import TABLES

    assert TABLE_NAMES == tuple(t.name for t in TABLES)


def test_the_api_table_is_the_commands_and_refuses_an_unknown_table():
    from mhlo_cost.views.rules import COLUMNS, rules_table

    t = rules_table(op="^sdy[.]all_gather$")
    assert list(t.frame.columns) == list(COLUMNS) and t.frame["op"].tolist() == ["sdy.all_gather"]
    with pytest.raises(ValueError, match="no rule table named 'nope'"):
        rules_table(table="nope")


@pytest.mark.parametrize("argv", [["--op", "("], ["--table", "nope"], ["--format", "html"]])
def test_bad_arguments_are_one_line_and_exit_2(capsys, argv):
    assert main(["rules", *argv]) == 2
    assert error_line(capsys.readouterr().err)
