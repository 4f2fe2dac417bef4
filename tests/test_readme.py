"""README is the front page: a newcomer's short path. Beside what tests/test_docs.py checks on every page (the
command lines parse and run, the outputs shown are what the tool prints), README keeps its promises: under 300
lines; the two commands for a fresh machine (the main job on the bundled example; the tests, which ``.ci/run``
runs too); a link to every page of the docs site; and its quick commands run where they write nothing into the
repository."""
from __future__ import annotations

import re
import shlex

import doc_examples as d

README = d.text_of(d.README)


def _section(title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.M | re.S)
    assert m, f"README has no section {title!r}"
    return m.group(1)


def test_readme_is_short():
    assert len(README.splitlines()) < 300


def test_readme_has_commands():
    argvs = d.mhlo_cost_argvs(README)
    assert len(argvs) > 10
    assert ["report", "examples/gpt_small.mlir", "--by", "block", "--unit", "G"] in argvs


def test_the_two_commands():
    """One command runs the main job on the bundled example, one runs the tests; .ci/run runs the same tests."""
    commands = d.command_lines(_section("The two commands, on a fresh machine"))
    main_job = [c for c in commands if c.startswith("mhlo-cost ")]
    tests = [c for c in commands if "pytest" in c]
    assert main_job == ["mhlo-cost report examples/gpt_small.mlir --by block --unit G"]
    assert tests == ["python -m pytest -q"]
    ci = (d.ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "\npython -m pytest -q\n" in ci
    assert main_job[0] in ci
    install = next(c for c in commands if c.startswith("pip install -e '.[test"))
    extras = re.search(r"\.\[([\w,-]+)\]", install).group(1).split(",")
    ci_extras = re.search(r"-e '\.\[([\w,-]+)\]'", ci).group(1).split(",")
    assert set(extras) <= set(ci_extras), (extras, ci_extras)


def test_quick_readme_commands_run(tmp_path):
    ran = d.run_page(README, tmp_path, quick=True)
    assert any("gpt_small.mlir" in c for c in ran)
    assert (tmp_path / "gpt_train.mlir").exists()  # written where the command ran, not into the repository
    assert not any(shlex.split(c)[0] == "pip" for c in ran)
