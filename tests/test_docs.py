"""README, the docs site and the tool cannot drift apart. On every page (README.md and docs/*.md): every command
line in a code block parses; the options and choices a command table names exist; the output a ``$ mhlo-cost ...``
block shows is what the tool prints; every ``$`` line is such a block; the command lines and Python blocks run
(the quick ones here, all of them, page by page, under ``slow``). And the site: mkdocs.yml lists every page, and
its API page names what the package face exports. (tests/doc_examples.py reads the pages.)"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

import doc_examples as d
from mhlo_cost.cli import build_parser, main

PAGES = d.pages()


def _each(fn):
    """(page, item) for every item ``fn(text)`` gives on every page."""
    return [(page, item) for page in PAGES for item in fn(d.text_of(page))]


def _id(x) -> str:
    if isinstance(x, Path):
        return d.page_id(x)
    return " ".join(x)[:60] if isinstance(x, list) else ""


def _parses(argv: list[str]) -> None:
    try:
        build_parser().parse_args(argv)
    except SystemExit as e:  # --help, --version
        assert e.code == 0, argv


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_every_page_is_read(page):
    """A page with examples has commands the tests find (a block the reader misses would go untested)."""
    text = d.text_of(page)
    blocks = [lang for lang, _ in d.code_blocks(text)]
    assert text.count("```") == 2 * len(blocks), f"{d.page_id(page)}: an unclosed code block"
    for lang, lines in d.code_blocks(text):
        assert d.is_shell(lang) or lang in ("python", "toml", "text"), f"{d.page_id(page)}: a ```{lang} block"
        if not d.is_shell(lang):  # a command there would go unchecked
            assert not [ln for ln in lines if re.match(r"(\$ |mhlo-cost )", ln)], (d.page_id(page), lang)


@pytest.mark.parametrize("page,argv", _each(d.mhlo_cost_argvs), ids=_id)
def test_every_command_parses(page, argv):
    _parses(argv)


def _subparsers() -> dict:
    parser = build_parser()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return action.choices


def test_command_table_lists_every_command():
    tables = [cmd for _, (cmd, _row) in _each(d.command_table)]
    assert set(tables) == set(_subparsers())


@pytest.mark.parametrize("page,entry", _each(d.command_table), ids=lambda x: x[0] if isinstance(x, tuple) else "")
def test_command_table_options_exist(page, entry):
    """Every --option a command's row names is one of that command's, and every ``--opt a\\|b`` lists exactly
    the choices the parser takes."""
    command, row = entry
    sub = _subparsers()[command]
    actions = {s: a for a in sub._actions for s in a.option_strings}
    for opt in set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", row)):
        assert opt in actions, f"{d.page_id(page)} says `mhlo-cost {command} {opt}`, which the command does not take"
    for opt, alts in re.findall(r"\[(--[a-z-]+) ([\w:\[\]-]+(?:\\\|[\w:\[\]-]+)+)\]", row):
        choices = actions[opt].choices
        if choices is not None:
            assert set(alts.split("\\|")) == set(choices), (command, opt)
        else:  # a type that checks the value: every alternative parses
            for alt in alts.split("\\|"):
                actions[opt].type(alt.replace("[:DEPTH]", ""))


def test_hardware_lists_the_aliases_the_pages_use(capsys):
    assert main(["hardware"]) == 0
    out = capsys.readouterr().out
    for page in PAGES:
        # (a name used beside --hardware-file is one of that file's profiles, not a shipped one)
        shipped = "\n".join(line for line in d.text_of(page).splitlines() if "--hardware-file" not in line)
        for alias in set(re.findall(r"--hardware ([a-z][\w-]*)", shipped)):
            assert re.search(rf"(^|[\s,]){re.escape(alias)}([\s,]|$)", out, re.M), (d.page_id(page), alias)


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_every_prompt_is_a_checked_output(page):
    """A ``$`` line is an example whose output the page shows: the first line of a block, an mhlo-cost command
    (test_shown_output_is_what_the_tool_prints runs it). A command shown without its output has no prompt."""
    text = d.text_of(page)
    checked = {"$ " + shlex.join(["mhlo-cost", *argv]) for argv, _ in d.shown_outputs(text)}
    for line in d.prompt_lines(text):
        assert "$ " + shlex.join(shlex.split(line[2:])) in checked, f"{d.page_id(page)}: {line}"


@pytest.mark.parametrize("page,shown", _each(d.shown_outputs), ids=lambda x: _id(x) if not isinstance(x, tuple)
                         else " ".join(x[0])[:60])
def test_shown_output_is_what_the_tool_prints(page, shown, capsys, monkeypatch, tmp_path):
    argv, lines = shown
    text = d.text_of(page)
    monkeypatch.chdir(d.ROOT)
    if not argv[1].startswith("-") and not (d.ROOT / argv[1]).exists():  # made by the page's `lower` line
        lowering = d.lowering_of(text, argv[1])
        assert lowering is not None, f"{d.page_id(page)} shows `mhlo-cost {' '.join(argv)}`, but makes no {argv[1]}"
        monkeypatch.chdir(tmp_path)
        assert main([*lowering, "-q"]) == 0
        capsys.readouterr()
    assert main(argv) == 0
    got = capsys.readouterr()
    assert got.out.splitlines() == [ln for ln in lines if not ln.startswith("mhlo-cost: ")]
    for ln in lines:
        if ln.startswith("mhlo-cost: "):
            assert ln in got.err.splitlines()


@pytest.mark.parametrize("page", PAGES[1:], ids=_id)  # README's: tests/test_readme.py
def test_quick_examples_run(page, tmp_path):
    d.run_page(d.text_of(page), tmp_path, quick=True)


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_every_example_runs(page, tmp_path):
    text = d.text_of(page)
    ran = d.run_page(text, tmp_path, quick=False)
    runnable = [c for c in d.command_lines(text) if not d.reason(c)] + d.python_blocks(text)
    assert len(ran) == len(runnable) or not d.has_matplotlib()


def test_skipped_commands_say_why():
    commands = [c for page in PAGES for c in d.command_lines(d.text_of(page))]
    skipped = [(c, d.reason(c)) for c in commands if d.reason(c)]
    assert skipped and all(why for _, why in skipped)
    assert len(skipped) < len(commands) / 4


# -- the site ------------------------------------------------------------------------------------------------

def _nav() -> list[str]:
    """The pages mkdocs.yml's nav lists (``- Title: page.md``)."""
    text = (d.ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    return re.findall(r"^\s*- [^:\n]+: ([\w./-]+\.md)\s*$", text, re.M)


def test_nav_lists_every_page_once():
    nav = _nav()
    assert sorted(nav) == sorted(p.name for p in d.DOCS.glob("*.md"))
    assert nav[0] == "index.md"


def test_api_page_names_the_package_face():
    import mhlo_cost

    api = (d.DOCS / "api.md").read_text(encoding="utf-8")
    for name in mhlo_cost.__all__:
        if name != "__version__":
            module = mhlo_cost._LAZY[name]
            assert f"::: mhlo_cost.{module}.{name}" in api, name


def test_readme_links_every_page():
    readme = d.text_of(d.README)
    for page in d.DOCS.glob("*.md"):
        if page.name not in ("index.md", "changelog.md"):
            assert f"(docs/{page.name}" in readme, page.name
