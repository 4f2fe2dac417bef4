"""README and the tool cannot drift apart: every command line in README's code blocks parses; the options and
choices the command table names exist; the output README shows (a ``$ mhlo-cost ...`` block) is what the
tool prints; and the command lines run (the quick ones here, all of them, in order, under ``slow``)."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mhlo_cost.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def code_blocks() -> list[list[str]]:
    """The lines of every fenced code block that is not Python."""
    blocks, cur, lang = [], None, ""
    for line in README.splitlines():
        if line.startswith("```"):
            if cur is None:
                cur, lang = [], line[3:].strip()
            else:
                if lang != "python":
                    blocks.append(cur)
                cur = None
            continue
        if cur is not None:
            cur.append(line)
    return blocks


def command_lines() -> list[str]:
    """Every ``mhlo-cost`` / ``python`` / ``bash`` / ``pip`` command of the code blocks, ``&&`` chains split and
    backslash-continued lines joined, in README order (``$`` prompts and ``#`` comments dropped)."""
    out = []
    for block in code_blocks():
        joined: list[str] = []  # a line ending in a backslash goes on in the next one
        for line in block:
            if joined and joined[-1].endswith("\\"):
                joined[-1] = joined[-1][:-1].rstrip() + " " + line.strip()
            else:
                joined.append(line)
        for line in joined:
            line = line[2:] if line.startswith("$ ") else line
            if not re.match(r"(mhlo-cost|python3?|bash|pip) ", line):
                continue
            for part in line.split(" && "):
                words = shlex.split(part, comments=True)
                if words and re.match(r"(mhlo-cost|python3?|bash|pip)$", words[0]):
                    out.append(shlex.join(words))
    return out


def mhlo_cost_argvs() -> list[list[str]]:
    out = []
    for cmd in command_lines():
        words = shlex.split(cmd)
        if words[0] == "mhlo-cost":
            out.append(words[1:])
        elif words[:2] == ["python", "scripts/dump_mhlo.py"]:
            out.append(["lower", *words[2:]])  # the old name of `mhlo-cost lower`, the same options
    return out


def _parses(argv: list[str]) -> None:
    try:
        build_parser().parse_args(argv)
    except SystemExit as e:  # --help, --version
        assert e.code == 0, argv


def test_readme_has_commands():
    argvs = mhlo_cost_argvs()
    assert len(argvs) > 30
    assert ["report", "examples/gpt_small.mlir", "--by", "block", "--unit", "G"] in argvs


@pytest.mark.parametrize("argv", mhlo_cost_argvs(), ids=lambda a: " ".join(a)[:60])
def test_every_readme_command_parses(argv):
    _parses(argv)


def _subparsers() -> dict:
    parser = build_parser()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return action.choices


def command_table() -> list[tuple[str, str]]:
    """(command, the whole row) of README's command table."""
    rows = []
    for line in README.splitlines():
        m = re.match(r"\| `mhlo-cost (\w+)", line)
        if m:
            rows.append((m.group(1), line))
    return rows


@pytest.mark.parametrize("command,row", command_table(), ids=lambda x: x if " " not in x else "")
def test_command_table_options_exist(command, row):
    """Every --option a command's row names is one of that command's, and every ``--opt a\\|b`` lists exactly
    the choices the parser takes."""
    sub = _subparsers()[command]
    actions = {s: a for a in sub._actions for s in a.option_strings}
    for opt in set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", row)):
        assert opt in actions, f"README says `mhlo-cost {command} {opt}`, which the command does not take"
    for opt, alts in re.findall(r"\[(--[a-z-]+) ([\w:\[\]]+(?:\\\|[\w:\[\]]+)+)\]", row):
        choices = actions[opt].choices
        if choices is not None:
            assert set(alts.split("\\|")) == set(choices), (command, opt)
        else:  # a type that checks the value: every alternative parses
            for alt in alts.split("\\|"):
                actions[opt].type(alt.replace("[:DEPTH]", ""))


def test_hardware_lists_the_aliases_readme_uses(capsys):
    assert main(["hardware"]) == 0
    out = capsys.readouterr().out
    # (a name used beside --hardware-file is one of that file's profiles, not a shipped one)
    shipped = "\n".join(line for line in README.splitlines() if "--hardware-file" not in line)
    for alias in set(re.findall(r"--hardware ([a-z][\w-]*)", shipped)):
        assert re.search(rf"(^|[\s,]){re.escape(alias)}([\s,]|$)", out, re.M), alias


def shown_outputs() -> list[tuple[list[str], list[str]]]:
    """(argv, the lines shown under it) of every ``$ mhlo-cost ...`` block."""
    out = []
    for block in code_blocks():
        if block and block[0].startswith("$ mhlo-cost "):
            out.append((shlex.split(block[0][2:])[1:], block[1:]))
    return out


def _lowering_of(name: str) -> list[str] | None:
    """The README's ``mhlo-cost lower ... -o NAME`` that makes a file an output block reads."""
    for argv in mhlo_cost_argvs():
        if argv[0] == "lower" and "-o" in argv and argv[argv.index("-o") + 1] == name:
            return argv
    return None


@pytest.mark.parametrize("argv,shown", shown_outputs(), ids=lambda x: " ".join(x)[:60] if x and x[0] != "" else "")
def test_shown_output_is_what_the_tool_prints(argv, shown, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    if not argv[1].startswith("-") and not (ROOT / argv[1]).exists():  # made by a README `lower` line: made here
        lowering = _lowering_of(argv[1])
        assert lowering is not None, f"README shows `mhlo-cost {' '.join(argv)}`, but no README line makes {argv[1]}"
        monkeypatch.chdir(tmp_path)
        assert main([*lowering, "-q"]) == 0
        capsys.readouterr()
    assert main(argv) == 0
    got = capsys.readouterr()
    assert got.out.splitlines() == [ln for ln in shown if not ln.startswith("mhlo-cost: ")]
    for ln in shown:
        if ln.startswith("mhlo-cost: "):
            assert ln in got.err.splitlines()


# -- running them -------------------------------------------------------------------------------------------

#: Why a README command is not run here (first match wins).
NOT_RUN = (
    (r"^pip |^python3 -m venv|setup_torch_xla_env", "installs packages: needs the network"),
    (r"python -m pytest", "the test suite itself"),
    (r"mypkg\.models", "a placeholder for the reader's own model"),
    (r"^python benchmarks/", "a benchmark: minutes of timed runs, its figures printed for the reader"),
    (r"^mhlo-cost sweep --model stdit3 --shape 204_640_360 408_640_360|sweep_stdit3\.toml|stdit3_sweep\.csv",
     "the full published table, minutes (benchmarks/sweep_stdit3.py times it; tests/test_sweep.py runs a small one)"),
)
#: Commands too slow for the quick run (full-size STDiT3, library models, torchax): `slow` runs them.
SLOW = re.compile(r"stdit3|tp16|llama|latte|--hf |--diffusers|--timm|torchax|jaxexport|chromium|calibrate")


def _reason(cmd: str) -> str | None:
    for pattern, why in NOT_RUN:
        if re.search(pattern, cmd):
            return why
    return None


def _run_all(tmp_path: Path, quick: bool) -> list[str]:
    for name in ("examples", "scripts"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = dict(os.environ, PYTHONPATH=str(tmp_path), JAX_PLATFORMS="cpu")
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    ran = []
    for cmd in command_lines():
        if _reason(cmd) or (quick and SLOW.search(cmd)) or "plot" in cmd.split()[:2] and not _has_matplotlib():
            continue
        words = shlex.split(cmd)
        if words[0] == "python":
            words[0] = sys.executable
        r = subprocess.run(words, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, f"{cmd}\n{r.stderr[-2000:]}"
        assert "Traceback" not in r.stderr, cmd
        ran.append(cmd)
    return ran


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def test_quick_readme_commands_run(tmp_path):
    ran = _run_all(tmp_path, quick=True)
    assert any("gpt_small.mlir" in c for c in ran) and any(c.startswith("mhlo-cost hardware") for c in ran)
    assert (tmp_path / "gpt_train.mlir").exists()  # written where the command ran, not into the repository


@pytest.mark.slow
def test_every_readme_command_runs(tmp_path):
    ran = _run_all(tmp_path, quick=False)
    assert any("stdit3.mlir" in c for c in ran)


def test_skipped_commands_say_why():
    skipped = [(c, _reason(c)) for c in command_lines() if _reason(c)]
    assert skipped and all(why for _, why in skipped)
    assert len(skipped) < len(command_lines()) / 3
