"""Depth that follows the input is followed without Python recursion (issue 43, item 7).

A chain of 3,000 nested ``func.call`` s is reported under every execution model as the plain report reports it:
the memory sweep (``mhlo_cost.memory``), the fusion's look-through of free rows (``roofline/fusion.py``) and
the kernels' readers (``roofline/kernel_io.py``) hold their stacks in lists. The figures are checked against the
same leaf written out once in ``@main`` without calls (``callgraph_dags.inline(1)``): a call adds no bytes, no
FLOPs and no kernel, whatever its depth.
"""
from __future__ import annotations

import json

import pytest

from callgraph_dags import LEAF, T, VALUE_BYTES, fanout, inline
from mhlo_cost.cli import main
from mhlo_cost.memory.nested import run

DEPTH = 3000
EXECUTIONS = [["--fuse", "elementwise"], ["--execution", "eager", "--hardware", "h100"],
              ["--execution", "compiled", "--hardware", "h100"], ["--fuse", "elementwise", "--hardware", "h100"]]


def _summary(path, extra, capsys) -> dict:
    code = main(["report", str(path), "--format", "json", "-q", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)["summary"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("deep")
    (d / "chain.mlir").write_text(fanout(DEPTH, 1))
    (d / "inline.mlir").write_text(inline(1))
    return d / "chain.mlir", d / "inline.mlir"


@pytest.mark.parametrize("extra", EXECUTIONS, ids=lambda e: " ".join(e))
def test_a_3000_deep_call_chain_under_every_execution_model(files, extra, capsys):
    chain, flat = files
    deep = _summary(chain, extra, capsys)
    ref = _summary(flat, extra, capsys)
    assert deep["gemm_flops"] == LEAF["gemm_flops"]
    # the peak of the plain program: its argument, the dot's result and the exponential's, live together
    assert deep["peak_bytes"] == ref["peak_bytes"] == 3 * VALUE_BYTES
    fused = {k: v for k, v in deep.items() if "fused" in k or "eager" in k}
    assert fused and fused == {k: v for k, v in ref.items() if k in fused}


def test_the_chain_plain_report_says_the_same(files, capsys):
    """The plain report (which walked depth 3,000 before) and the fused one agree on every count."""
    chain, _ = files
    plain = _summary(chain, [], capsys)
    fused = _summary(chain, ["--fuse", "elementwise"], capsys)
    assert {k: plain[k] for k in LEAF} == {k: fused[k] for k in LEAF}


def test_a_6000_long_chain_of_reshapes_fused_and_eager(tmp_path, capsys):
    """Free rows (reshapes) looked through by the fusion and by the kernels' readers: a chain of 6,000."""
    lines = ["module {", f"  func.func @main(%a: {T}) -> {T} {{", f"    %x0 = stablehlo.exponential %a : {T}"]
    shapes = [T, "tensor<16xf32>"]
    for i in range(1, 6001):
        lines.append(f"    %x{i} = stablehlo.reshape %x{i - 1} : ({shapes[(i - 1) % 2]}) -> {shapes[i % 2]}")
    lines += [f"    %z = stablehlo.exponential %x6000 : {T}", f"    %w = stablehlo.add %z, %x0 : {T}",
              f"    return %w : {T}", "  }", "}"]
    path = tmp_path / "reshapes.mlir"
    path.write_text("\n".join(lines) + "\n")
    for extra in (["--fuse", "elementwise", "--hardware", "h100"], ["--execution", "eager", "--hardware", "h100"]):
        s = _summary(path, extra, capsys)
        assert s["vector_flops"] == 3 * 16  # two exponentials and an add of 16 elements; reshapes are free


def test_run_follows_nesting_deeper_than_the_recursion_limit():
    import sys

    def depth(n):
        return (1 + (yield depth(n - 1))) if n else 0

    n = 10 * sys.getrecursionlimit()
    assert run(depth(n)) == n


def test_run_lets_an_error_through():
    def fails(n):
        if n == 0:
            raise KeyError("bottom")
        return (yield fails(n - 1))

    with pytest.raises(KeyError):
        run(fails(50))
