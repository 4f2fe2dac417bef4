"""The examples of README.md and of every page of the docs site (``docs/*.md``), read as a test reads them.

A page's fenced code blocks hold three kinds of example:

* command lines (``mhlo-cost``, ``python``, ``bash``, ``pip``; a ``$ `` prompt is dropped, ``#`` comments and
  ``&&`` chains are split, backslash-continued lines joined): every ``mhlo-cost`` line must parse, and they run,
  in page order, in a folder of their own (the quick ones always, every one under the ``slow`` marker);
* shown outputs: a block whose first line is ``$ mhlo-cost ...`` holds what the tool prints for it, line for line
  (lines beginning ``mhlo-cost: `` are stderr);
* Python blocks (```` ```python ````), run in page order with the command lines, in the same folder.

A page is self-contained: the files its examples read are made by its own ``mhlo-cost lower ... -o FILE`` lines.
Shared by ``tests/test_readme.py`` (README) and ``tests/test_docs.py`` (the site).
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"

#: The first word of a command line the tests read.
_COMMAND = re.compile(r"(mhlo-cost|python3?|bash|pip) ")


def pages() -> list[Path]:
    """README and every page of the docs site, README first."""
    return [README, *sorted(DOCS.glob("*.md"))]


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def text_of(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def code_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of every fenced code block, in page order."""
    blocks, cur, lang = [], None, ""
    for line in text.splitlines():
        if line.startswith("```"):
            if cur is None:
                cur, lang = [], line[3:].strip()
            else:
                blocks.append((lang, cur))
                cur = None
            continue
        if cur is not None:
            cur.append(line)
    return blocks


def block_commands(lines: list[str]) -> list[str]:
    """The command lines of one block (see the module's text)."""
    joined: list[str] = []  # a line ending in a backslash goes on in the next one
    for line in lines:
        if joined and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1].rstrip() + " " + line.strip()
        else:
            joined.append(line)
    out = []
    for line in joined:
        line = line[2:] if line.startswith("$ ") else line
        if not _COMMAND.match(line):
            continue
        for part in line.split(" && "):
            words = shlex.split(part, comments=True)
            if words and re.match(r"(mhlo-cost|python3?|bash|pip)$", words[0]):
                out.append(shlex.join(words))
    return out


def is_shell(lang: str) -> bool:
    """A block whose lines may be commands: no language, or a shell's."""
    return lang in ("", "sh", "shell", "bash", "console")


def command_lines(text: str) -> list[str]:
    """Every command line of the page's shell blocks, in page order."""
    return [cmd for lang, lines in code_blocks(text) if is_shell(lang) for cmd in block_commands(lines)]


def python_blocks(text: str) -> list[str]:
    """The source of every Python block of the page."""
    return ["\n".join(lines) + "\n" for lang, lines in code_blocks(text) if lang == "python"]


def mhlo_cost_argvs(text: str) -> list[list[str]]:
    """The argv (after ``mhlo-cost``) of every ``mhlo-cost`` command line; ``python scripts/dump_mhlo.py``, the
    old name of ``lower``, as ``lower``."""
    out = []
    for cmd in command_lines(text):
        words = shlex.split(cmd)
        if words[0] == "mhlo-cost":
            out.append(words[1:])
        elif words[:2] == ["python", "scripts/dump_mhlo.py"]:
            out.append(["lower", *words[2:]])
    return out


def command_table(text: str) -> list[tuple[str, str]]:
    """(command, the whole row) of every row of a command table: a row that begins ``| `mhlo-cost NAME``."""
    rows = []
    for line in text.splitlines():
        m = re.match(r"\| `mhlo-cost ([\w-]+)", line)
        if m:
            rows.append((m.group(1), line))
    return rows


def shown_outputs(text: str) -> list[tuple[list[str], list[str]]]:
    """(argv, the lines shown under it) of every ``$ mhlo-cost ...`` block."""
    out = []
    for lang, block in code_blocks(text):
        if is_shell(lang) and block and block[0].startswith("$ mhlo-cost "):
            out.append((shlex.split(block[0][2:])[1:], block[1:]))
    return out


def prompt_lines(text: str) -> list[str]:
    """Every line of a code block that begins with a ``$ `` prompt."""
    return [line for _, lines in code_blocks(text) for line in lines if line.startswith("$ ")]


def lowering_of(text: str, name: str) -> list[str] | None:
    """The page's ``mhlo-cost lower ... -o NAME`` that makes a file an output block reads."""
    for argv in mhlo_cost_argvs(text):
        if argv[0] == "lower" and "-o" in argv and argv[argv.index("-o") + 1] == name:
            return argv
    return None


# -- running them -------------------------------------------------------------------------------------------

#: Why a command line is not run (first match wins).
NOT_RUN = (
    (r"^pip |^python3 -m venv|setup_torch_xla_env", "installs packages: needs the network"),
    (r"python -m pytest", "the test suite itself"),
    (r"^mkdocs ", "builds the docs site: .ci/run does"),
    (r"mypkg\.models", "a placeholder for the reader's own model"),
    (r"^python benchmarks/", "a benchmark: minutes of timed runs, its figures printed for the reader"),
    (r"^mhlo-cost sweep --model stdit3 --shape 204_640_360 408_640_360|sweep_stdit3\.toml|stdit3_sweep\.csv",
     "the full published table, minutes (benchmarks/sweep_stdit3.py times it; tests/test_sweep.py runs a small one)"),
)
#: Examples too slow for the quick run (full-size STDiT3, library models, torch): `slow` runs them.
SLOW = re.compile(r"stdit3|tp16|llama|latte|--hf |--diffusers|--timm|torchax|jaxexport|chromium|calibrate"
                  r"|import torch|hf_steps|\"hf\"")


def reason(cmd: str) -> str | None:
    """Why ``cmd`` is not run, or None where it is."""
    for pattern, why in NOT_RUN:
        if re.search(pattern, cmd):
            return why
    return None


def has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _env(tmp_path: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tmp_path), JAX_PLATFORMS="cpu")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def _run_command(cmd: str, tmp_path: Path, env: dict, quick: bool) -> bool:
    """Run one command line where it is to be run; whether it ran."""
    if reason(cmd) or (quick and SLOW.search(cmd)) or ("plot" in cmd.split()[:2] and not has_matplotlib()):
        return False
    words = shlex.split(cmd)
    if words[0] == "python":
        words[0] = sys.executable
    r = subprocess.run(words, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"{cmd}\n{r.stderr[-2000:]}"
    assert "Traceback" not in r.stderr, cmd
    return True


def _run_python(source: str, tmp_path: Path, env: dict, quick: bool) -> bool:
    """Run one Python block where it is to be run; whether it ran."""
    if quick and SLOW.search(source):
        return False
    r = subprocess.run([sys.executable, "-c", source], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, f"{source}\n{r.stderr[-2000:]}"
    return True


def run_page(text: str, tmp_path: Path, quick: bool) -> list[str]:
    """Run the page's command lines and Python blocks in page order, in ``tmp_path`` (with ``examples`` and
    ``scripts`` linked there, and that folder first on ``PYTHONPATH``, as a clone's root would be); what ran."""
    for name in ("examples", "scripts"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "mhlo_cost").symlink_to(ROOT / "mhlo_cost")  # this checkout, whatever is installed
    env = _env(tmp_path)
    ran = []
    for lang, lines in code_blocks(text):
        if is_shell(lang):
            ran += [cmd for cmd in block_commands(lines) if _run_command(cmd, tmp_path, env, quick)]
        elif lang == "python":
            source = "\n".join(lines) + "\n"
            if _run_python(source, tmp_path, env, quick):
                ran.append(source)
    return ran
