"""The command line's start: a command line naming its command imports that command's module alone
(:data:`mhlo_cost.cli.MODULE_OF`), and parses as the parser of every command does."""
from __future__ import annotations

import argparse
import importlib

import pytest

from mhlo_cost.cli import COMMANDS, MODULE_OF, build_parser
from mhlo_cost.cli.common import Parser


def _subparsers(parser: argparse.ArgumentParser) -> dict:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_module_of_is_what_each_module_registers():
    registered = {}
    for module in COMMANDS:
        parser = Parser(prog="mhlo-cost")
        sub = parser.add_subparsers(dest="command", parser_class=Parser)
        importlib.import_module(f"mhlo_cost.cli.{module}").register(sub)
        for name in _subparsers(parser):
            registered[name] = module
    assert registered == MODULE_OF


@pytest.mark.parametrize("command", sorted(MODULE_OF))
def test_a_named_command_parses_as_with_every_command(command):
    full, alone = _subparsers(build_parser()), _subparsers(build_parser([command, "x.mlir"]))
    assert list(alone) == [n for n, m in MODULE_OF.items() if m == MODULE_OF[command]]
    assert alone[command].format_help() == full[command].format_help()


def test_report_arguments_are_the_same():
    argv = ["report", "model.mlir", "--by", "block", "--format", "json", "-q"]
    a, b = build_parser(argv).parse_args(argv), build_parser().parse_args(argv)
    assert {k: v for k, v in vars(a).items() if k != "func"} == {k: v for k, v in vars(b).items() if k != "func"}
    assert a.func is b.func


def test_help_and_unknown_names_list_every_command(capsys):
    for argv in (["--help"], ["no-such-command"], []):
        assert set(_subparsers(build_parser(argv))) == set(MODULE_OF)
