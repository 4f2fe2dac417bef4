"""The command line: outputs, determinism, and one clear line for every kind of bad input."""
import gzip
import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import pandas as pd
import pytest

from mhlo_cost.cli import main
from stderr_lines import error_line


def run(*args, cwd=None):
    p = subprocess.run([sys.executable, "-m", "mhlo_cost", *map(str, args)], capture_output=True, text=True,
                       cwd=cwd, timeout=600)
    return p.returncode, p.stdout, p.stderr


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    def f(x, w):
        with jax.named_scope("layers.0"):
            return jnp.exp(x @ w).sum(axis=-1)
    text = jax.jit(f).lower(jax.ShapeDtypeStruct((8, 16), jnp.float32),
                            jax.ShapeDtypeStruct((16, 32), jnp.float32)).as_text(debug_info=True)
    p = tmp_path_factory.mktemp("m") / "model.mlir"
    p.write_text(text)
    return p


def test_report_summary_json_is_exact(model, capsys):
    assert main(["report", str(model), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    s = data["summary"]
    assert s["gemm_flops"] == 2 * 8 * 32 * 16
    assert s["transcendentals"] == 8 * 32
    assert s["vector_flops"] == 8 * 32 + 8 * (32 - 1)
    assert s["unknown_ops"] == 0
    assert isinstance(s["bytes_read"], int)


@pytest.mark.parametrize("by", ["summary", "op", "kind", "scope", "scope:1"])
@pytest.mark.parametrize("fmt", ["table", "csv", "json", "markdown"])
def test_every_view_renders(model, capsys, by, fmt):
    assert main(["report", str(model), "--by", by, "--format", fmt, "--unit", "G"]) == 0
    assert capsys.readouterr().out.strip()


def test_csv_and_json_are_byte_identical_across_runs(model, tmp_path):
    outs = []
    for i in range(2):
        for fmt in ("csv", "json"):
            out = tmp_path / f"{i}.{fmt}"
            rc, _, err = run("report", model, "--by", "op", "--format", fmt, "-o", out)
            assert rc == 0, err
            outs.append(out.read_bytes())
    assert outs[0] == outs[2] and outs[1] == outs[3]


def test_csv_reads_back(model, tmp_path):
    out = tmp_path / "ops.csv"
    assert main(["report", str(model), "--by", "kind", "--format", "csv", "-o", str(out)]) == 0
    df = pd.read_csv(out)
    body, total = df[df.kind != "TOTAL"], df[df.kind == "TOTAL"]
    assert body.gemm_flops.sum() == 2 * 8 * 32 * 16 == int(total.gemm_flops.iloc[0])


def test_gzip_and_bytecode_inputs(model, tmp_path, capsys):
    gz = tmp_path / "model.mlir.gz"
    gz.write_bytes(gzip.compress(model.read_bytes()))
    assert main(["report", str(gz), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["gemm_flops"] == 2 * 8 * 32 * 16


def _bad_inputs(tmp_path, model):
    text = model.read_text()
    cases = {}
    cases["missing"] = (tmp_path / "nope.mlir", "no such file")
    cases["directory"] = (tmp_path, "is a directory")
    (tmp_path / "empty.mlir").write_text("")
    cases["empty"] = (tmp_path / "empty.mlir", "empty file")
    (tmp_path / "prose.mlir").write_text("this is not MLIR at all\n")
    cases["not mlir"] = (tmp_path / "prose.mlir", "prose.mlir:1:1:")
    (tmp_path / "garbage.bin").write_bytes(bytes(range(256)) * 4)
    cases["binary"] = (tmp_path / "garbage.bin", "not MLIR")
    (tmp_path / "truncated.mlir").write_text(text[: len(text) // 2])
    cases["truncated"] = (tmp_path / "truncated.mlir", "truncated.mlir:")
    (tmp_path / "dynamic.mlir").write_text(
        "func.func @main(%a: tensor<?x4xf32>) -> tensor<?x4xf32> {\n"
        "  %0 = stablehlo.add %a, %a : tensor<?x4xf32>\n  return %0 : tensor<?x4xf32>\n}\n")
    cases["dynamic"] = (tmp_path / "dynamic.mlir", "a symbolic program in arg0_0 (main's ?-dimensions")
    (tmp_path / "unranked.mlir").write_text(
        "func.func @main(%a: tensor<*xf32>) -> tensor<*xf32> {\n"
        "  %0 = stablehlo.custom_call @k(%a) : (tensor<*xf32>) -> tensor<*xf32>\n  return %0 : tensor<*xf32>\n}\n")
    cases["unranked"] = (tmp_path / "unranked.mlir", "unranked tensor tensor<*xf32>")
    (tmp_path / "tuple.mlir").write_text(
        "func.func @main(%a: tensor<4xf32>) -> tuple<tensor<4xf32>> {\n"
        "  %0 = stablehlo.tuple %a : tuple<tensor<4xf32>>\n  return %0 : tuple<tensor<4xf32>>\n}\n")
    cases["tuple"] = (tmp_path / "tuple.mlir", "tuple type")
    return cases


@pytest.mark.parametrize("case", ["missing", "directory", "empty", "not mlir", "binary", "truncated", "dynamic",
                                  "unranked", "tuple"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, model, case):
    path, expected = _bad_inputs(tmp_path, model)[case]
    rc, out, err = run("report", path)
    assert rc == 2
    line = error_line(err)
    assert expected in line
    if case not in ("missing", "directory"):
        assert path.name in line


def test_a_dynamic_dimension_is_a_symbol_given_with_shapes(tmp_path, model):
    """A ``?`` dimension not named by jax.export is named by its place (arg0_0) and given with --shapes: the add
    over 8 x 4 elements counts 32 FLOPs."""
    path, _ = _bad_inputs(tmp_path, model)["dynamic"]
    _, _, err = run("report", path)
    assert "--shapes arg0_0=N" in err
    rc, out, err = run("report", path, "--shapes", "arg0_0=8", "--format", "json")
    assert rc == 0, err
    assert json.loads(out)["summary"]["vector_flops"] == 32


UNKNOWN = """
func.func @main(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = stablehlo.custom_call @my_fused_kernel(%a) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = stablehlo.add %0, %0 : tensor<4x4xf32>
  return %1 : tensor<4x4xf32>
}
"""


def test_unknown_ops_are_counted_and_named(tmp_path):
    p = tmp_path / "unknown.mlir"
    p.write_text(UNKNOWN)
    rc, out, err = run("report", p, "--format", "json")
    assert rc == 0
    s = json.loads(out)["summary"]
    assert s["unknown_ops"] == 1
    assert s["vector_flops"] == 16
    assert "my_fused_kernel" in err
    rc, out, err = run("report", p, "--strict")
    assert rc == 2 and "my_fused_kernel" in error_line(err)


def test_bad_option_is_one_line(model):
    rc, _, err = run("report", model, "--by", "nonsense")
    assert rc == 2 and "nonsense" in error_line(err)
    rc, _, err = run("report", model, "--entry", "nope")
    assert rc == 2 and "no function named 'nope'" in err


def test_units_are_exact_decimal_views():
    from mhlo_cost.views.text import scale

    assert scale(123456789012345678901, "K") == "123456789012345678.901"
    assert scale(260977523687424, "T") == "260.978"
    assert scale(-1500, "K") == "-1.500" and scale(1499, "K") == "1.499" and scale(1_000_500, "M") == "1.001"
    assert scale(10**400, "T").endswith(".000")


def test_no_progress_line_after_an_error(tmp_path, capsys):
    import time

    assert main(["report", str(tmp_path / "missing.mlir")]) == 2
    time.sleep(1.3)  # past the progress delay
    err = capsys.readouterr().err
    assert error_line(err) == f"mhlo-cost: error: {tmp_path / 'missing.mlir'}: no such file"


def test_bad_block_pattern_is_one_line(model):
    rc, _, err = run("blocks", model, "--block-pattern", "([")
    assert rc == 2 and "not a regular expression" in error_line(err)


@pytest.mark.parametrize("args,message", [
    (["blocks", "{m}", "--norms-per-block", "0"], "positive integer"),
    (["report", "{m}", "--hardware", "h100", "--by", "block", "--steps", "3"], "--steps goes with --by summary"),
    (["check", "{m}", "--baseline", "{m}", "--rtol", "nan"], "--rtol must be a finite number"),
])
def test_bad_option_values_are_one_line(model, args, message):
    rc, _, err = run(*[a.format(m=model) for a in args])
    assert rc == 2 and message in error_line(err)
