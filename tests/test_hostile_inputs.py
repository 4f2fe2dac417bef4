"""Malformed, hostile and extreme inputs: one `mhlo-cost: error:` line and exit 2, never a crash (issue 12).

The crashers under tests/fixtures/crashers are one-byte flips of a valid bytecode file that made jaxlib's
reader abort (SIGABRT) or raise an internal error before the reader ran in a child process, a corrupt
gzip stream (exit 70 before), and a convolution whose dim_numbers index 2**31 made the StableHLO parser
allocate without end (over 8 GB in 10 s before).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mhlo_cost import analyze
from mhlo_cost.studies.baseline import _percent
from mhlo_cost.cli import main
from mhlo_cost.ir.loader import LoadError, load
from stderr_lines import error_line
from helpers import run_cli

FIX = Path(__file__).parent / "fixtures"
CRASHERS = sorted((FIX / "crashers").iterdir())
ADD = """func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""


def one_error_line(err: str) -> str:
    return error_line(err)


@pytest.mark.parametrize("path", CRASHERS, ids=lambda p: p.name)
def test_crashers_are_one_error_line_in_a_subprocess(path):
    r = subprocess.run([sys.executable, "-m", "mhlo_cost", "report", str(path)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 2, r.stderr
    one_error_line(r.stderr)


@pytest.mark.parametrize("path", CRASHERS, ids=lambda p: p.name)
def test_crashers_raise_load_or_analysis_error_from_the_api(path):
    from mhlo_cost import AnalysisError

    with pytest.raises((LoadError, AnalysisError)):
        analyze(path).summary


def test_corrupt_gzip_is_exit_2(capsys):
    code, _, err = run_cli(["report", FIX / "crashers" / "corrupt.gz"], capsys)
    assert code == 2
    assert "corrupt gzip" in one_error_line(err)


def test_gzip_bomb_stops_at_its_limit(monkeypatch, tmp_path, capsys):
    """A gzip member that expands more than GZIP_MAX_RATIO x (a run of one byte) stops while decompressing,
    in this process, before it holds the whole: one line, exit 2. Real IR (5-30 x) loads."""
    import gzip

    from mhlo_cost.ir import loader

    monkeypatch.setattr(loader, "GZIP_MIN_LIMIT", 1 << 20)
    bomb = tmp_path / "bomb.mlir.gz"
    bomb.write_bytes(gzip.compress(b"module {\n" + b" " * (8 << 20) + b"}\n"))
    assert len(bomb.read_bytes()) * loader.GZIP_MAX_RATIO < 8 << 20
    assert main(["report", str(bomb)]) == 2
    assert "decompression bomb" in error_line(capsys.readouterr().err)
    real = tmp_path / "gpt.mlir.gz"
    real.write_bytes(gzip.compress((Path(__file__).resolve().parents[1] / "examples" / "gpt_small.mlir").read_bytes()))
    assert load(real).name == str(real)


def test_bom_and_non_utf8_bytes_in_comments_and_locations_load(tmp_path):
    bom = tmp_path / "bom.mlir"
    bom.write_bytes(b"\xef\xbb\xbf" + ADD.encode())
    latin = tmp_path / "latin.mlir"
    latin.write_bytes(ADD.replace("  return", '  // caf\xe9\n  return').encode("latin-1")
                      .replace(b": tensor<4xf32>\n  //", b': tensor<4xf32> loc("f\xe9.py":3:1)\n  //', 1))
    for path in (bom, latin):
        assert analyze(path).summary["vector_flops"] == 4  # one add of 4 elements


def test_nested_module_is_read_and_several_modules_are_one_clear_error(tmp_path, capsys):
    nested = tmp_path / "nested.mlir"
    nested.write_text("module {\n  module @inner {\n" + ADD + "  }\n}\n")
    assert analyze(nested).summary["vector_flops"] == 4
    two = tmp_path / "two.mlir"
    two.write_text("module @a {\n" + ADD + "}\nmodule @b {\n" + ADD + "}\n")
    code, _, err = run_cli(["report", two], capsys)
    assert code == 2
    assert "2 modules in one file" in one_error_line(err)


def test_quantized_types_are_one_clear_error(tmp_path, capsys):
    q = tmp_path / "q.mlir"
    q.write_text("func.func @main(%a: tensor<4x!quant.uniform<i8:f32, 0.5:3>>) -> tensor<4xf32> {\n"
                 "  %0 = stablehlo.uniform_dequantize %a : (tensor<4x!quant.uniform<i8:f32, 0.5:3>>) -> tensor<4xf32>\n"
                 "  return %0 : tensor<4xf32>\n}\n")
    code, _, err = run_cli(["report", q], capsys)
    line = one_error_line(err)
    assert code == 2 and "quant dialect" in line and "allowUnregisteredDialects" not in line


def test_isolated_and_in_process_reads_agree():
    path = FIX / "small_stablehlo.mlir"
    a, b = analyze(load(path, isolate=True)).summary, analyze(load(path, isolate=False)).summary
    assert a == b


@pytest.mark.parametrize("metrics", [",", " ", ""])
def test_check_with_no_metric_left_is_exit_2(metrics, capsys):
    base = FIX / "baselines"
    baseline = sorted(base.glob("*.json"))[0]
    code, _, err = run_cli(["check", FIX / "small_stablehlo.mlir", "--baseline", baseline, "--metrics", metrics],
                           capsys)
    assert code == 2
    assert "names no metric" in one_error_line(err)


def _huge(tmp_path) -> Path:
    dims = "x".join(["4611686018427387904"] * 18)  # 2**62 each: 2**1116 elements, past the float range
    p = tmp_path / "huge.mlir"
    p.write_text(ADD.replace("4xf32", f"{dims}xf32"))
    return p


def test_counts_past_the_float_range_stay_exact_through_check(tmp_path, capsys):
    huge = _huge(tmp_path)
    assert analyze(huge).summary["vector_flops"] == 2 ** 1116
    base = tmp_path / "b.json"
    assert run_cli(["baseline", huge, "-o", base, "-q"], capsys)[0] == 0
    code, _, err = run_cli(["check", huge, "--baseline", base, "--rtol", "0.1", "-q"], capsys)
    assert code == 0, err
    code, _, err = run_cli(["report", huge, "--hardware", "h100", "-q"], capsys)
    assert code in (0, 2)
    if code == 2:
        one_error_line(err)


def test_percent_is_exact_integer_arithmetic():
    assert _percent(3, 4) == "+33.3333%"
    assert _percent(4, 3) == "-25.0000%"
    assert _percent(3, 1) == "-66.6667%"
    assert _percent(10 ** 400, 3 * 10 ** 400) == "+200.0000%"
    assert _percent(0, 5) == "new"


def _call_chain(n: int) -> str:
    lines = ["func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {",
             "  %0 = call @f0(%a) : (tensor<4xf32>) -> tensor<4xf32>", "  return %0 : tensor<4xf32>", "}"]
    for i in range(n):
        body = (f"  %0 = call @f{i + 1}(%a) : (tensor<4xf32>) -> tensor<4xf32>" if i < n - 1
                else "  %0 = stablehlo.add %a, %a : tensor<4xf32>")
        lines += [f"func.func private @f{i}(%a: tensor<4xf32>) -> tensor<4xf32> {{", body,
                  "  return %0 : tensor<4xf32>", "}"]
    return "\n".join(lines) + "\n"


def test_deep_call_chain_is_walked(tmp_path, capsys):
    p = tmp_path / "calls.mlir"
    p.write_text(_call_chain(1500))
    assert analyze(p).summary["vector_flops"] == 4
    code, out, _ = run_cli(["blocks", p, "-q"], capsys)
    assert code == 0


def test_deeply_nested_baseline_json_is_exit_2(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    code, _, err = run_cli(["check", FIX / "small_stablehlo.mlir", "--baseline", deep], capsys)
    assert code == 2
    assert "nested too deeply" in one_error_line(err)


def test_memory_bomb_in_the_parser_is_stopped_quickly_and_bounded():
    """The report runs under a fresh Python whose only children are the report and its reader, so the largest
    child it sees is theirs (this process's own RUSAGE_CHILDREN holds every test's children: a torch-xla
    lowering earlier in the suite took 3.2 GB)."""
    import json

    path = FIX / "crashers" / "conv_dim_numbers_2pow31.mlir"
    code = ("import json, resource, subprocess, sys; "
            f"r = subprocess.run([sys.executable, '-m', 'mhlo_cost', 'report', {str(path)!r}], capture_output=True, "
            "text=True); print(json.dumps([r.returncode, r.stderr, "
            "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))")
    w = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=600)  # a hang guard only: how quickly is the benchmarks' business
    rc, err, peak_kib = json.loads(w.stdout)  # the largest of the report and its reader (Linux: KiB)
    assert rc == 2 and "out of memory" in one_error_line(err)
    assert peak_kib < 2 * 1024 * 1024


def test_a_dead_reader_is_reaped_and_started_again():
    """The reader's child killed between two loads: the next load starts a new one and the old one's pipes
    are closed (no leak per crash)."""
    import os
    import signal

    from mhlo_cost.ir import guard

    gpt = Path(__file__).resolve().parents[1] / "examples" / "gpt_small.mlir"
    load(gpt, isolate=True)
    old = guard._SERVER.proc
    os.kill(old.pid, signal.SIGKILL)
    old.wait()
    assert analyze(load(gpt, isolate=True)).summary["gemm_flops"] > 0
    assert guard._SERVER.proc is not old and old.stdin.closed and old.stdout.closed
