"""Golden outputs: every case of scripts/make_golden.py, run again, writes exactly the committed bytes.

The cases are the generator's own list (imported, not repeated here); each runs in process through
``mhlo_cost.cli.main`` in a scratch folder, as the generator ran it. A case that differs shows the first
differing lines. A change that changes a golden output regenerates it (``python scripts/make_golden.py``)
in the same commit and says why in the message (tests/golden/README.md).
"""
from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest
from helpers import script

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    return script("scripts/make_golden.py")


golden = _generator()
CASES = golden.cases()
INDEX = json.loads((golden.GOLDEN / "index.json").read_text(encoding="utf-8"))


def short_diff(want: bytes, got: bytes, name: str, lines: int = 30) -> str:
    """The first ``lines`` lines of a unified diff of two outputs (bytes not UTF-8 shown as U+FFFD)."""
    a = want.decode("utf-8", "replace").splitlines(keepends=True)
    b = got.decode("utf-8", "replace").splitlines(keepends=True)
    diff = list(difflib.unified_diff(a, b, f"golden/{name}", f"now/{name}", n=1))
    more = f"... ({len(diff) - lines} more diff lines)\n" if len(diff) > lines else ""
    return "".join(diff[:lines]) + more


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("golden")
    golden.prepare(folder)
    return folder


def test_index_lists_every_case_and_nothing_else():
    assert sorted(INDEX) == sorted(c.id for c in CASES), "regenerate: python scripts/make_golden.py"
    for case in CASES:
        assert INDEX[case.id]["argv"] == list(case.argv), case.id
    on_disk = sorted(p.relative_to(golden.GOLDEN / "out").as_posix()
                     for p in (golden.GOLDEN / "out").rglob("*") if p.is_file())
    assert on_disk == sorted(c.id for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_golden(case, work):
    got = golden.run_case(case, work)
    want = INDEX[case.id]
    assert (got.exit, got.stderr) == (want["exit"], want["stderr"]), f"{case.id}: exit status or stderr changed"
    expected = (golden.GOLDEN / "out" / case.group / case.name).read_bytes()
    if got.data != expected:
        pytest.fail(f"{case.id} differs from the golden file:\n{short_diff(expected, got.data, case.id)}",
                    pytrace=False)


@pytest.mark.parametrize("name", list(golden.LOWERED))
def test_lowering_writes_the_stored_input(name, tmp_path):
    """``mhlo-cost lower`` (a child process, in another folder) writes the stored input byte for byte.
    Op locations carry file:line of mhlo_cost/lower/models/: a change there changes these bytes (README)."""
    dest = tmp_path / "elsewhere" / f"{name}.mlir"
    golden.lower(name, dest)
    stored = golden.GOLDEN / "inputs" / f"{name}.mlir"
    got, expected = dest.read_bytes(), stored.read_bytes()
    if got != expected:
        pytest.fail(f"lowering {name} differs from the stored input:\n{short_diff(expected, got, name)}",
                    pytrace=False)
