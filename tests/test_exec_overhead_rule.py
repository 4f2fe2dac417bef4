"""One rule for ``bound = overhead`` in the op table and the block table (issue 25): a program of one kernel
is one block whose bound is its op's, at every size, on a profile with a measured memory model (each kernel's
fill and drain is a fixed cost, like the launch overhead). Before, the block rule counted the launch overhead
only (``2 x overhead > time``) and called memory-bound what the op table called overhead-bound."""
from __future__ import annotations

import csv
import io

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from mhlo_cost.cli import main  # noqa: E402

SIZES = [2 ** e for e in range(10, 27, 2)]


def _csv(capsys, *argv):
    assert main([*argv, "--format", "csv", "-q"]) == 0
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


@pytest.mark.parametrize("hardware", ["h100", "a100"])
def test_block_bound_is_the_op_bound_of_its_one_kernel(tmp_path, capsys, hardware):
    disagreed_before = 0
    for n in SIZES:
        path = tmp_path / f"exp{n}.mlir"
        path.write_text(jax.jit(jnp.exp).lower(jax.ShapeDtypeStruct((n,), jnp.float32)).as_text())
        ops = _csv(capsys, "report", str(path), "--by", "op", "--hardware", hardware)
        assert len(ops) == 1, [r["operation"] for r in ops]
        blocks = _csv(capsys, "report", str(path), "--by", "block", "--hardware", hardware)
        assert {r["bound"] for r in blocks} == {ops[0]["bound"]}, (n, ops[0]["bound"], blocks)
        total = blocks[-1]
        old = "overhead" if 2 * float(total["est_overhead_s"]) > float(total["est_time_s"]) else "memory"
        disagreed_before += old != ops[0]["bound"]
    # the sizes reach the band where only the fill-and-drain term makes the op overhead-bound
    assert disagreed_before >= 1


@pytest.mark.parametrize("extra", [[], ["--execution", "compiled"], ["--execution", "eager"]])
def test_the_program_bound_is_the_block_tables_total(tmp_path, capsys, extra):
    """The sweep's and the summary's whole-program bound (Roofline.program_bound) is the TOTAL row's."""
    from pathlib import Path

    from mhlo_cost import Study

    gpt = str(Path(__file__).resolve().parents[1] / "examples" / "gpt_small.mlir")
    blocks = _csv(capsys, "report", gpt, "--by", "block", "--hardware", "h100", *extra)
    total = [r for r in blocks if r["block"] == "TOTAL"][0]
    options = {"hardware": "h100"} | ({"execution": extra[1]} if extra else {})
    assert Study(gpt, **options).roofline.program_bound() == total["bound"]
