"""The command line as people meet it (issue 19): one meaning per --by, units on every number, tables that fit,
quiet -q, filters, several files, standard input, the summary's params and MACs, a fast --version."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tomllib
from decimal import Decimal
from pathlib import Path

import jax
import jax.numpy as jnp
import pandas as pd
import pytest

from mhlo_cost.cli import main
from stderr_lines import error_line

ROOT = Path(__file__).resolve().parents[1]
GPT = ROOT / "examples" / "gpt_small.mlir"
FIXTURES = ROOT / "tests" / "fixtures"
#: examples/gpt_small.mlir: 4 layers, batch 2 x 128 tokens, d = 256, 4 heads, MLP 1024, vocab 1024 (closed forms)
TOKENS, D, FF = 2 * 128, 256, 1024
LAYER_GEMM = 2 * TOKENS * D * (3 * D) + 2 * TOKENS * D * D + 2 * (2 * 2 * 128 * 128 * D) + 2 * (2 * TOKENS * D * FF)


def out_of(capsys, *argv) -> tuple[str, str]:
    assert main([str(a) for a in argv]) == 0
    got = capsys.readouterr()
    return got.out, got.err


def csv_of(capsys, *argv) -> pd.DataFrame:
    out, _ = out_of(capsys, *argv, "--format", "csv", "-q")
    return pd.read_csv(io.StringIO(out), keep_default_na=False)


def test_layer_gemm_closed_form_matches():
    assert LAYER_GEMM == 436_207_616


# -- 1. jax requirement ----------------------------------------------------------------------------------------

def test_pyproject_requires_the_jax_the_code_checks():
    from mhlo_cost.ir.loader import MIN_JAX

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    want = ".".join(map(str, MIN_JAX))
    assert f"jax>={want}" in deps and f"jaxlib>={want}" in deps
    assert MIN_JAX >= (0, 10, 1)  # 0.7.2 to 0.10.0 have no ir.NameLoc, 0.6 no _jax_mlir_ext (issue 19)


def test_old_jaxlib_is_one_line(monkeypatch, capsys):
    from mhlo_cost.ir import loader

    monkeypatch.setattr(loader, "installed_version", lambda dist: "0.7.2")
    assert main(["report", str(GPT)]) == 2
    err = capsys.readouterr().err
    line = error_line(err)
    assert "0.7.2 is too old" in line and ">=0.10.1" in line


def test_installed_version_is_importlib_metadata_s(tmp_path, monkeypatch):
    import importlib.metadata
    import sys

    from mhlo_cost.ir.loader import installed_version

    for dist in ("jax", "jaxlib", "pytest"):
        assert installed_version(dist) == importlib.metadata.version(dist)
    assert installed_version("no-such-distribution-here") is None
    # a wheel's folder first on the path wins, as importlib.metadata finds it; a folder without its metadata is
    # no version either way
    (tmp_path / "jaxlib-0.1.0.dist-info").mkdir()
    (tmp_path / "jaxlib-0.1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: jaxlib\nVersion: 0.1.0\n")
    (tmp_path / "jax-other-9.0.dist-info").mkdir()
    monkeypatch.setattr(sys, "path", [str(tmp_path)] + sys.path)
    assert installed_version("jaxlib") == importlib.metadata.version("jaxlib") == "0.1.0"
    # (a folder without METADATA: no version; importlib.metadata says None, or raises once the importlib_metadata
    # backport, which dask imports, has put its finder first: not compared here, the test's order decides it)
    assert installed_version("jax") is None


# -- 2. --by op means one thing ----------------------------------------------------------------------------------

def test_by_op_is_every_occurrence_in_every_format(capsys):
    from mhlo_cost import analyze

    n = len(analyze(GPT).rows)
    assert len(csv_of(capsys, "report", GPT, "--by", "op")) == n
    out, _ = out_of(capsys, "report", GPT, "--by", "op", "--format", "json")
    assert len(json.loads(out)["rows"]) == n
    table, _ = out_of(capsys, "report", GPT, "--by", "op", "-q")
    assert len(table.splitlines()) == n + 4  # title, header, rule, rows, the columns-left-out line
    md, _ = out_of(capsys, "report", GPT, "--by", "op", "--format", "markdown")
    assert md.count("\n| ") == n + 1


def test_by_opname_sums_per_name_with_a_total(capsys):
    df = csv_of(capsys, "report", GPT, "--by", "opname")
    body, total = df[df.opname != "TOTAL"], df[df.opname == "TOTAL"].iloc[0]
    dots = body[body.opname == "stablehlo.dot_general"].iloc[0]
    assert dots.gemm_flops == 4 * LAYER_GEMM + 2 * TOKENS * D * 1024  # + the LM head
    assert body.gemm_flops.sum() == total.gemm_flops and body.ops.sum() == total.ops


@pytest.mark.parametrize("by,label", [("kind", "kind"), ("scope", "scope"), ("scope:1", "scope")])
def test_total_rows(capsys, by, label):
    from mhlo_cost import analyze

    s = analyze(GPT).summary
    df = csv_of(capsys, "report", GPT, "--by", by)
    assert list(df[label]).count("TOTAL") == 1 and df[label].iloc[-1] == "TOTAL"
    for m in ("gemm_flops", "vector_flops", "bytes_read", "ops"):
        assert int(df[m].iloc[-1]) == s[m]


def test_comm_total(capsys):
    df = csv_of(capsys, "report", FIXTURES / "collectives_8dev.mlir", "--by", "comm")
    assert df.op.iloc[-1] == "TOTAL" and int(df.comm_bytes.iloc[-1]) == int(df.comm_bytes.iloc[:-1].sum()) > 0


# -- 3. units ----------------------------------------------------------------------------------------------------

def test_units_in_headers_and_exact_csv(capsys):
    table, _ = out_of(capsys, "report", GPT, "--by", "kind", "--unit", "G", "-q")
    assert "gemm_flops[G]" in table and "bytes_read[GB]" in table and "in G (1e9)" in table
    raw = csv_of(capsys, "report", GPT, "--by", "kind")
    g = csv_of(capsys, "report", GPT, "--by", "kind", "--unit", "G")
    assert "gemm_flops[G]" in g.columns
    for a, b in zip(raw.bytes_read, g["bytes_read[GB]"]):
        assert Decimal(str(b)) * 10**9 == int(a)  # every digit kept: no 0.000 for small counts
    out, _ = out_of(capsys, "report", GPT, "--by", "kind", "--unit", "G", "--format", "json")
    rows = json.loads(out)["rows"]
    assert all(isinstance(r["gemm_flops"], int) for r in rows) and "unit" not in json.loads(out)


def test_summary_honours_unit(capsys):
    table, _ = out_of(capsys, "report", GPT, "--unit", "T", "-q")
    assert "gemm_flops[T]" in table and "1,879,048,192" not in table and "0.002" in table


def test_diff_honours_unit(capsys, tmp_path):
    other = tmp_path / "b.mlir"
    other.write_text(GPT.read_text())
    table, _ = out_of(capsys, "diff", GPT, other, "--unit", "G", "-q")
    assert "gemm_flops_a[G]" in table and "436,207,616" not in table


def test_times_in_human_units_and_exact_seconds(capsys):
    table, _ = out_of(capsys, "report", GPT, "--by", "block", "--hardware", "h100", "-q")
    head = table.splitlines()[2]  # under the title and the headline
    assert "est_time[" in head and "e-0" not in table
    df = csv_of(capsys, "report", GPT, "--by", "block", "--hardware", "h100")
    assert df.est_time_s.dtype == float and 0 < df.est_time_s.iloc[-1] < 1


def test_tables_fit_120_columns_unless_wide(capsys):
    for argv in (["report", GPT, "--by", "block", "--hardware", "h100"], ["report", GPT, "--by", "op"]):
        table, _ = out_of(capsys, *argv, "-q")
        body = table.splitlines()[1:-1]
        assert max(map(len, body)) <= 120 and "--wide shows them" in table.splitlines()[-1]
        wide, _ = out_of(capsys, *argv, "-q", "--wide")
        assert max(map(len, wide.splitlines())) > 120 and "--wide" not in wide


def test_bound_can_be_overhead(capsys):
    from mhlo_cost.machines.hardware import get_profile

    hw = get_profile("h100")
    # The fixed cost of one kernel: the launch overhead plus the fill and drain of the measured memory model
    # (half_size bytes at the achievable bandwidth); an overhead-bound op spends more than half its time there.
    fixed_us = (hw.kernel_overhead + hw.memory.half_bytes / (hw.hbm_bandwidth * hw.memory.efficiency)) * 1e6
    df = csv_of(capsys, "report", GPT, "--by", "op", "--hardware", "h100")
    oh = df[df.bound == "overhead"]
    assert len(oh) > 0 and (oh.latency_us < 2 * fixed_us * oh.multiplicity).all()
    assert set(df[df.latency_us == 0].bound) <= {"free", "comm", "unknown"}


# -- 4. quiet ----------------------------------------------------------------------------------------------------

def test_quiet_is_quiet(capsys, tmp_path):
    _, err = out_of(capsys, "report", GPT, "--by", "block", "-q")
    assert err == ""
    _, err = out_of(capsys, "report", GPT, "--by", "block")
    assert err.count("blocks by scope: 4 found") == 1
    _, err = out_of(capsys, "report", FIXTURES / "collectives_8dev.mlir", "--by", "block")
    assert "0 found" not in err and err.count("shard_map") <= 1
    _, err = out_of(capsys, "report", FIXTURES / "collectives_8dev.mlir", "--by", "block", "-q")
    assert "shard_map" not in err


# -- 5. what was missing -----------------------------------------------------------------------------------------

def test_version_is_fast_and_imports_no_pandas_or_jax():
    code = ("import sys; from mhlo_cost.cli import main; rc = main(['--version']); "
            "print(rc, 'pandas' in sys.modules, 'jax' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.stdout.split() == ["mhlo-cost", "0.1.0", "0", "False", "False"]


def test_the_summary_needs_neither_numpy_nor_pandas(tmp_path):
    """The reader's child renders a one-file summary itself and starts without numpy (about 50 ms): the summary's
    path, walk to text in every format, must import neither (run here with the walk in process and both blocked)."""
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('numpy', 'pandas'):\n"
            "            raise ImportError(name + ' blocked')\n"
            "sys.meta_path.insert(0, Block())\n"
            "from mhlo_cost.cli import main\n"
            f"print([main(['report', {str(GPT)!r}, '-q', '--format', f, '-o', f'out.{{f}}']) "
            "for f in ('table', 'csv', 'json', 'markdown')])\n")
    env = dict(os.environ, MHLO_COST_ISOLATE="0", XDG_STATE_HOME=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert r.stdout.split() == ["[0,", "0,", "0,", "0]"], r.stderr
    assert "FLOPs 1.90 G" in (tmp_path / "out.table").read_text()


def test_stdin(tmp_path):
    r = subprocess.run([sys.executable, "-m", "mhlo_cost", "report", "-", "--format", "json"], input=GPT.read_bytes(),
                       capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["source"] == "<stdin>" and data["summary"]["gemm_flops"] == 4 * LAYER_GEMM + 2 * TOKENS * D * 1024
    bad = subprocess.run([sys.executable, "-m", "mhlo_cost", "report", "-"], input=b"garbage {\n",
                         capture_output=True, timeout=600)
    assert bad.returncode == 2 and bad.stderr.decode().startswith("mhlo-cost: error: <stdin>:1:1: ")


def test_several_files_one_table(capsys, tmp_path):
    other = tmp_path / "again.mlir"
    other.write_text(GPT.read_text())
    df = csv_of(capsys, "report", GPT, other, "--by", "kind")
    assert list(dict.fromkeys(df.file)) == [str(GPT), str(other)]
    assert (df[df.kind == "TOTAL"].gemm_flops == 4 * LAYER_GEMM + 2 * TOKENS * D * 1024).all()
    b = csv_of(capsys, "blocks", GPT, other)
    assert len(b) == 2 * 8 and b.columns[0] == "file"



def test_several_files_keep_exact_integers_in_columns_one_lacks(capsys, tmp_path):
    """A training step (phase columns) beside an inference file: the phase counts stay integers in CSV."""
    step = tmp_path / "step.mlir"
    assert main(["lower", "--model", "gpt", "--layers", "1", "--train", "-o", str(step), "-q"]) == 0
    capsys.readouterr()
    assert main(["report", str(step), str(GPT), "--by", "block", "--format", "csv", "-q"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines[0].split(",")
    row = dict(zip(head, next(x for x in lines if x.startswith(f"{step},layers.0,")).split(",")))
    assert row["fwd_gemm_flops"] == str(LAYER_GEMM) and row["bwd_gemm_flops"] == str(2 * LAYER_GEMM)
    other = dict(zip(head, next(x for x in lines if x.startswith(f"{GPT},layers.0,")).split(",")))
    assert other["fwd_gemm_flops"] == ""


def test_report_block_parts(capsys):
    df = csv_of(capsys, "report", GPT, "--by", "block", "--parts")
    layer0 = df[df.block == "layers.0"]
    assert {"attn", "mlp"} <= set(layer0.part) and layer0.gemm_flops.sum() == LAYER_GEMM


def test_top_without_hardware(capsys):
    df = csv_of(capsys, "report", GPT, "--by", "op", "--top", "3")
    assert len(df) == 3 and (df.gemm_flops == 2 * TOKENS * D * FF).all()  # the MLP's two matrices


def test_params_and_macs(capsys, tmp_path):
    def mlp(x, w1, w2):
        return jnp.tanh(x @ w1) @ w2
    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in ((8, 64), (64, 256), (256, 32))]
    path = tmp_path / "mlp.mlir"
    path.write_text(jax.jit(mlp).lower(*args).as_text(debug_info=True))
    out, _ = out_of(capsys, "report", path, "--format", "csv", "-q")
    s = dict(pd.read_csv(io.StringIO(out)).values)
    assert int(s["params"]) == 64 * 256 + 256 * 32
    assert int(s["macs"]) == 8 * 64 * 256 + 8 * 256 * 32


def test_tree(capsys):
    from mhlo_cost import analyze

    s = analyze(GPT).summary
    df = csv_of(capsys, "report", GPT, "--by", "tree")
    top = df.iloc[0]
    assert top.scope == "(all)" and top.gemm_flops == s["gemm_flops"] and top.percent == 100
    layer = df[df.scope == "layers.1"].iloc[0]
    assert layer.gemm_flops == LAYER_GEMM
    children = df[(df.depth == 2) & (df.index > layer.name)].head(4)  # ln1, attn, ln2, mlp, indented under it
    assert [c.strip() for c in children.scope] == ["ln1", "attn", "ln2", "mlp"]
    assert children.gemm_flops.sum() == LAYER_GEMM
    assert len(csv_of(capsys, "report", GPT, "--by", "tree:1")) < len(df)


def test_block_and_scope_filters(capsys):
    df = csv_of(capsys, "report", GPT, "--by", "op", "--block", "layers.1")
    assert (df.scope.str.startswith("layers.1") | (df.scope == "")).all() and df.gemm_flops.sum() == LAYER_GEMM
    assert list(df["index"]) == sorted(df["index"])  # program order
    hw = csv_of(capsys, "report", GPT, "--by", "op", "--block", "layers.1", "--hardware", "h100")
    assert {"output", "gflops", "latency_us", "utilisation", "bound"} <= set(hw.columns)
    assert abs(hw.gflops.sum() * 1e9 - (LAYER_GEMM + int(df.vector_flops.sum()))) < 1e3
    kinds = csv_of(capsys, "report", GPT, "--by", "kind", "--scope", r"^layers\.\d+/mlp")
    assert int(kinds.gemm_flops.iloc[-1]) == 4 * 2 * (2 * TOKENS * D * FF)
    blocks = csv_of(capsys, "blocks", GPT, "--block", "layers.2")
    assert list(blocks.block) == ["layers.2"]
    assert main(["report", str(GPT), "--block", "nope", "-q"]) == 2
    assert "no block named 'nope'" in capsys.readouterr().err


# -- 6. start-up speed: the collectors' gap filling, rewritten with slices, against its definition ---------------

def _fill_reference(values, empty, same_only=False):
    out = []
    for i, v in enumerate(values):
        if v:
            out.append(v)
            continue
        p = next((j for j in range(i - 1, -1, -1) if values[j]), None)
        q = next((j for j in range(i + 1, len(values)) if values[j]), None)
        if p is not None and q is not None and values[p] == values[q]:
            out.append(values[p])
        elif same_only or (p is None and q is None):
            out.append(empty)
        elif p is not None and q is not None:
            out.append(values[p] if i - p < q - i else values[q])
        else:
            out.append(values[p if p is not None else q])
    return out


def test_fill_nearest_matches_its_definition():
    from hypothesis import given, settings, strategies as st

    from mhlo_cost.analysis.collectors import fill_nearest

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.sampled_from(["", "", "", "a", "b", "c"]), max_size=40), st.booleans())
    def check(values, same_only):
        assert fill_nearest(values, "E", same_only) == _fill_reference(values, "E", same_only)

    check()


def test_filters_refuse_what_they_would_silently_ignore(capsys):
    """The whole-program HTML report and a run's --steps do not take a filter: one line, exit 2."""
    for extra in (["--block", "layers.0", "--format", "html"], ["--scope", "layers", "--hardware", "h100",
                                                                "--steps", "3"]):
        assert main(["report", str(GPT), *extra, "-q"]) == 2
        error_line(capsys.readouterr().err)
    assert main(["report", str(GPT), "--by", "kind", "--block", "layers.0", "--format", "html", "-q"]) == 0
