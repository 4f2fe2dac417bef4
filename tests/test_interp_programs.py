"""Small programs in the style of the StableHLO interpreter suite (hand-written, tests/fixtures/interp)
through every subcommand: report, blocks, baseline and check, diff, plot (where matplotlib is present).
The counts are closed forms worked out here."""
from __future__ import annotations

import contextlib
import importlib.util
import io
from pathlib import Path

import pytest

from mhlo_cost import analyze
from mhlo_cost.cli import main

FIX = Path(__file__).parent / "fixtures" / "interp"
PROGRAMS = sorted(FIX.glob("*.mlir"))

#: program -> (metric, closed form)
EXPECTED = {
    "add_mul": ("vector_flops", 2 * 6),
    "batched_dot": ("gemm_flops", 2 * (2 * 3 * 5) * 4),
    "reduce_sum": ("vector_flops", 6 * 9),
    # 10 trips of the body (an add on 8 elements, the counter's add), 11 evaluations of the compare
    "while_sum": ("vector_flops", 10 * (8 + 1) + 11),
    "sort_pairs": ("vector_flops", 16 * 4 * 1),  # 16 elements x log2(16) x one compare
    "conv2d": ("conv_flops", 2 * 3 * 4 * 1 * 6 * 6 * 3 * 3),
    "select_max": ("transcendentals", 5),
    "broadcast_transpose": ("transcendentals", 12),
}


def run(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def test_every_program_has_a_closed_form():
    assert {p.stem for p in PROGRAMS} == set(EXPECTED)


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_counts(path):
    metric, value = EXPECTED[path.stem]
    a = analyze(path)
    assert a.summary[metric] == value
    assert a.summary["unknown_ops"] == 0


@pytest.mark.parametrize("path", PROGRAMS[::2], ids=lambda p: p.stem)  # a sample: each runs 7 commands
def test_every_subcommand(path, tmp_path):
    for args in (("report", path, "-q"), ("report", path, "--format", "json", "-q"), ("blocks", path, "-q"),
                 ("diff", path, path)):
        code, out, err = run(*args)
        assert code == 0, (args, err)
        assert out
    base = tmp_path / "b.flops.json"
    assert run("baseline", path, "-o", base, "-q")[0] == 0
    code, _, err = run("check", path, "--baseline", base, "-q")
    assert code == 0, err
    if importlib.util.find_spec("matplotlib") is not None:
        png = tmp_path / "p.png"
        code, _, err = run("plot", path, "-o", png)
        assert code == 0, err
        assert png.stat().st_size > 0
