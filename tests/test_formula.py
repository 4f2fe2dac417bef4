"""Issue 41, items 1-2: symbolic programs (jax.export shape polymorphism) counted at a point (``--shapes``) and
as exact polynomials in their symbols (``--formula``).

The reference is always the static lowering of the same JAX function at the same point (``jax.jit(f).lower``),
walked as any static program is: the evaluated polynomial and the refined program must give its counts exactly,
block by block. GEMM formulas are also checked against closed forms written here from the architecture."""
from __future__ import annotations

import json
import os
import sys

import jax
import jax.numpy as jnp
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from formula_programs import D, static_text, symbolic_text  # noqa: E402
from stderr_lines import error_line  # noqa: E402

from mhlo_cost.cli import main  # noqa: E402
from mhlo_cost.studies.formula import METRICS, FitRefused, Program, fit, symbolic_program  # noqa: E402
from mhlo_cost.studies.study import Study, StudyOptions  # noqa: E402
from mhlo_cost.walk.poly import Poly  # noqa: E402

#: five points per program, none on the fit's grid (which starts at 2 in every symbol)
POINTS = {
    "gpt": [dict(b=1, s=2), dict(b=1, s=7), dict(b=4, s=16), dict(b=7, s=3), dict(b=2, s=33)],
    "kv": [dict(b=1, t=1, c=1), dict(b=2, t=1, c=17), dict(b=3, t=5, c=2), dict(b=6, t=7, c=9),
           dict(b=1, t=16, c=64)],
    "conv": [dict(b=1, h=1, w=1), dict(b=1, h=7, w=9), dict(b=3, h=5, w=3), dict(b=2, h=16, w=11),
             dict(b=5, h=4, w=20)],
}


@pytest.fixture(autouse=True)
def own_ledger(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.fixture(scope="module")
def formulas():
    """The fitted formulas of each program (fitted once for the module's tests)."""
    return {name: fit(symbolic_program(StudyOptions(symbolic_text(name), isolate=False))) for name in POINTS}


def block_counts(text: str, **fields) -> dict:
    frame = Study(text, isolate=False, **fields).block_frame(memory=False)
    return {(str(r["block"]), m): int(r[m]) for _, r in frame.iterrows() for m in METRICS}


@pytest.mark.parametrize("name", list(POINTS))
def test_the_polynomials_give_the_static_lowerings_counts(name, formulas):
    f = formulas[name]
    assert f.symbols == {"gpt": ("b", "s"), "kv": ("b", "c", "t"), "conv": ("b", "h", "w")}[name]  # (jax sorts them)
    assert f.named_by == "module"
    for point in POINTS[name]:
        assert f.at(point) == block_counts(static_text(name, point)), point


@pytest.mark.parametrize("name", list(POINTS))
def test_a_symbolic_program_at_a_point_is_the_static_program(name):
    point = POINTS[name][3]
    refined = Study(symbolic_text(name), isolate=False, shapes=tuple(point.items())).analysis.summary
    static = Study(static_text(name, point), isolate=False).analysis.summary
    assert refined == static  # every count, the peak memory and the argument bytes included


def test_gpt_gemm_formula_is_the_closed_form(formulas):
    b, s = Poly.symbol("b"), Poly.symbol("s")
    tokens = b * s
    closed = (2 * tokens * D * 3 * D  # qkv
              + 2 * 2 * b * s * s * D  # q@k^T and probs@v over all heads
              + 2 * tokens * D * D  # output projection
              + 2 * 2 * tokens * D * 4 * D)  # MLP up and down
    assert formulas["gpt"].polys[("TOTAL", "gemm_flops")] == closed
    assert formulas["gpt"].polys[("attn", "gemm_flops")] == closed - 2 * 2 * tokens * D * 4 * D


def test_kv_attention_gemm_formula_is_the_closed_form(formulas):
    b, t, c = (Poly.symbol(n) for n in "btc")
    assert formulas["kv"].polys[("TOTAL", "gemm_flops")] == 2 * 2 * b * t * (c + t) * D


def test_conv_flops_formula_is_the_closed_form(formulas):
    """XLA's convention (padded positions skipped) is not a polynomial at h or w below the kernel, so the
    formula is checked against a static lowering's count where every window fits (the fitted range)."""
    f = formulas["conv"].polys[("TOTAL", "conv_flops")]
    assert f.degree("h") == 1 and f.degree("w") == 1 and f.degree("b") == 1
    assert formulas["conv"].polys[("TOTAL", "gemm_flops")] == 2 * Poly.symbol("b") * 8 * 10


# -- the command line ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpt_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("sym") / "gpt_sym.mlir"
    path.write_text(symbolic_text("gpt"))
    return str(path)


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_report_shapes_is_the_static_report(gpt_file, tmp_path, capsys):
    static = tmp_path / "gpt_static.mlir"
    static.write_text(static_text("gpt", dict(b=4, s=16)))
    rc, sym_out, _ = run(capsys, "report", "--shapes", "b=4,s=16", gpt_file, "--by", "block", "--format", "csv")
    assert rc == 0
    rc, static_out, _ = run(capsys, "report", str(static), "--by", "block", "--format", "csv")
    assert rc == 0 and sym_out == static_out


def test_a_symbolic_program_without_shapes_names_its_symbols(gpt_file, capsys):
    rc, out, err = run(capsys, "report", gpt_file)
    line = error_line(err)
    assert rc == 2 and "b, s (named in the module)" in line and "--shapes b=N,s=N" in line and "--formula" in line


def test_shapes_refused_where_they_do_not_fit(gpt_file, tmp_path, capsys):
    static = tmp_path / "static.mlir"
    static.write_text(static_text("gpt", dict(b=2, s=4)))
    rc, _, err = run(capsys, "report", "--shapes", "b=2", str(static))
    assert rc == 2 and "this program's shapes are static" in error_line(err)
    rc, _, err = run(capsys, "report", "--shapes", "b=2,x=3", gpt_file)
    assert rc == 2 and "--shapes names x" in error_line(err)
    rc, _, err = run(capsys, "report", "--shapes", "b=2", gpt_file)
    assert rc == 2 and "no value for shape symbol(s) s" in error_line(err)
    rc, _, err = run(capsys, "report", "--shapes", "b=0", gpt_file)
    assert rc == 2 and "positive integer" in error_line(err)
    rc, _, err = run(capsys, "report", "--formula", str(static))
    assert rc == 2 and "static" in error_line(err)
    # a value past MLIR's 64-bit dimensions was a TypeError from the bindings (exit 70)
    for argv in (["--shapes", f"b=2,s={2 ** 63}"], ["--formula", "--shapes", f"b={10 ** 30}"]):
        rc, _, err = run(capsys, "report", *argv, gpt_file)
        assert rc == 2 and "a dimension is a whole number in [1, 2**63 - 1]" in error_line(err), argv
    # past the program's i32 dimension variables: it wrapped to a negative size and refinement said so cryptically
    rc, _, err = run(capsys, "report", "--shapes", f"b=2,s={2 ** 31}", gpt_file)
    assert rc == 2 and "s=2147483648 does not fit the program's i32 dimension variables" in error_line(err)


@pytest.mark.parametrize("fmt", ["table", "csv", "json", "markdown"])
def test_report_formula_in_every_format(gpt_file, formulas, capsys, fmt):
    rc, out, _ = run(capsys, "report", "--formula", gpt_file, "--format", fmt)
    assert rc == 0
    total = formulas["gpt"].polys[("TOTAL", "gemm_flops")]
    if fmt == "json":
        payload = json.loads(out)
        assert payload["symbols"] == ["b", "s"] and payload["named_by"] == "module"
        row = next(r for r in payload["rows"] if r["block"] == "TOTAL" and r["count"] == "gemm_flops")
        assert row["expanded"] == str(total)
        # the shown (factored) form is the same polynomial: evaluate it at a point with Python itself
        assert eval(row["formula"], {}, {"b": 5, "s": 11}) == total.at({"b": 5, "s": 11})  # noqa: S307
    else:
        assert "gemm_flops" in out and "2*b*s*(" in out


def test_the_factored_form_is_the_polynomial(formulas):
    from mhlo_cost.studies.formula import factored

    for p in formulas["kv"].polys.values():
        point = {"b": 3, "t": 5, "c": 7}
        assert eval(factored(p), {}, dict(point)) == p.at(point)  # noqa: S307


# -- fits refused -------------------------------------------------------------------------------------------


def _program(fn, args, symbols):
    from mhlo_cost.ir.loader import load

    def module_at(point):
        return load(jax.jit(fn).lower(*args(point)).as_text(debug_info=True), isolate=False)

    return Program(symbols, module_at, name="f")


def test_a_fit_is_refused_where_the_op_graph_changes_with_the_shape():
    def f(x):
        return x.sum() if x.shape[0] > 2 else x.max()

    program = _program(f, lambda p: [jax.ShapeDtypeStruct((p["n"], 4), jnp.float32)], ("n",))
    with pytest.raises(FitRefused, match="op graph changes with the shape"):
        fit(program)


def test_a_fit_that_fails_its_check_is_never_given():
    """A loop whose trip count is the symbol, around a sum over n: the counts grow as n**2, the ops' types bound
    the degree by 1 (the loop's trip count is no tensor dimension): the check points find it."""
    def f(x):
        return jax.lax.fori_loop(0, x.shape[0], lambda i, acc: acc + x.sum(axis=0) * acc, jnp.ones(4))

    program = _program(f, lambda p: [jax.ShapeDtypeStruct((p["n"], 4), jnp.float32)], ("n",))
    with pytest.raises(FitRefused, match="failed its check") as e:
        fit(program)
    assert "no formula is given" in str(e.value)


# -- STDiT3 exported with symbolic dimensions ---------------------------------------------------------------


def test_stdit3_exported_in_b_and_t_counts_the_static_lowerings_flops():
    """The bundled STDiT3 (reduced configuration, depth 1) exported with symbolic batch and frames: its FLOP
    formulas give the static lowerings' FLOPs exactly at five shapes, block by block, and the GEMM FLOPs of
    tests/stdit3_formula.py. Bytes and op counts are not compared: with a symbolic batch jax lowers the
    modulation's indexing as gathers where the static lowering has slices and reshapes (another program)."""
    from dataclasses import replace

    from stdit3_formula import gemm_flops

    from formula_programs import stdit3_symbolic_text
    from mhlo_cost.lower.models import stdit3
    from mhlo_cost.lower.models.config import STDiT3Config

    cfg = replace(STDiT3Config().small(), depth=1)
    f = fit(symbolic_program(StudyOptions(stdit3_symbolic_text(cfg), isolate=False)))
    assert f.symbols == ("b", "t")
    flops = ("gemm_flops", "conv_flops", "vector_flops", "transcendentals")
    for point in (dict(b=2, t=2), dict(b=2, t=9), dict(b=3, t=5), dict(b=5, t=3), dict(b=7, t=8)):
        at = replace(cfg, batch=point["b"], latent_t=point["t"])
        want = block_counts(stdit3.lower(at).as_text(debug_info=True))
        got = f.at(point)
        assert {k: got[k] for k in want if k[1] in flops} == {k: v for k, v in want.items() if k[1] in flops}, point
        closed = gemm_flops(at)
        assert got[("spatial_blocks.0", "gemm_flops")] == closed["spatial_block"]
        assert got[("TOTAL", "gemm_flops")] == closed["total"]


# -- STDiT3: formulas from static lowerings -----------------------------------------------------------------


def test_stdit3_formulas_give_the_published_gemm_figures(capsys):
    """``lower --model stdit3 --formula json``: per-block formulas in B, T, S fitted from depth-1 lowerings;
    evaluated at the four published shapes (28 spatial and 28 temporal blocks and the rest) they give the GEMM
    FLOPs of tests/stdit3_formula.py (written from the architecture) exactly, block by block and in total."""
    from stdit3_formula import gemm_flops

    from mhlo_cost.lower.models.config import NAMED_SHAPES, STDiT3Config

    rc, out, _ = run(capsys, "lower", "--model", "stdit3", "--formula", "json", "-q")
    assert rc == 0
    payload = json.loads(out)
    assert payload["symbols"] == ["B", "T", "S"]
    gemm = {r["block"]: r["expanded"] for r in payload["rows"] if r["count"] == "gemm_flops"}
    assert {"spatial_blocks.0", "temporal_blocks.0", "y_embedder", "final_layer", "TOTAL (depth 28)"} <= set(gemm)
    assert "S**2" in gemm["spatial_blocks.0"] and "T**2" in gemm["temporal_blocks.0"]
    for name in NAMED_SHAPES:
        cfg = STDiT3Config().with_shape(name)
        point = {"B": cfg.batch, "T": cfg.tokens_t, "S": cfg.tokens_s}
        want = gemm_flops(cfg)
        got = {row: eval(text, {}, dict(point)) for row, text in gemm.items()}  # noqa: S307 (Python syntax)
        assert all(isinstance(v, int) for v in got.values())
        assert got["TOTAL (depth 28)"] == want["total"], name
        assert got["spatial_blocks.0"] == want["spatial_block"] and got["temporal_blocks.0"] == want["temporal_block"]
    assert eval(gemm["TOTAL (depth 28)"], {}, {"B": 2, "T": 60, "S": 920}) == 260_977_523_687_424  # noqa: S307


def test_lower_formula_refuses_what_it_cannot_fit(capsys):
    rc, _, err = run(capsys, "lower", "--model", "stdit3", "--formula", "--shape", "204_640_360")
    assert rc == 2 and "does not go with --shape" in error_line(err)
    rc, _, err = run(capsys, "lower", "--model", "gpt", "--formula")
    assert rc == 2 and "--formula goes with --model stdit3" in error_line(err)
    # options the formula does not apply were dropped without a word (--dtype was: the counts were bf16's)
    for extra in (["--devices", "4"], ["--precision", "fp8-rowwise"], ["--remat", "block"], ["--layers", "2"],
                  ["--no-locations"], ["--set", "depth=2"]):
        rc, _, err = run(capsys, "lower", "--model", "stdit3", "--formula", *extra)
        assert rc == 2 and f"does not go with {extra[0]}" in error_line(err), extra
    rc, _, err = run(capsys, "lower", "--model", "stdit3", "--formula", "--hidden", "100", "--heads", "16")
    assert rc == 2 and "mhlo-cost: error:" in err
    rc, _, err = run(capsys, "lower", "--model", "stdit3", "--formula", "--depth", "100000")  # lower's own limit
    assert rc == 2 and "above the limit of 4,096 layers" in error_line(err)
    rc, _, err = run(capsys, "lower", "--list", "--formula")
    assert rc == 2 and "does not go with --formula" in error_line(err)


def test_lower_formula_honours_dtype(capsys):
    """--dtype f32 lowers every point in float32 (it was dropped: the formulas were bf16's whatever --dtype said):
    a block's bytes move with the dtype, its FLOPs do not."""
    rows = {}
    for dtype in ("bf16", "f32"):
        rc, out, err = run(capsys, "lower", "--model", "stdit3", "--small", "--depth", "1", "--formula", "json",
                           "--dtype", dtype, "-q")
        assert rc == 0, err
        rows[dtype] = {(r["block"], r["count"]): r["expanded"] for r in json.loads(out)["rows"]}
    assert rows["bf16"][("spatial_blocks.0", "gemm_flops")] == rows["f32"][("spatial_blocks.0", "gemm_flops")]
    assert rows["bf16"][("spatial_blocks.0", "bytes_read")] != rows["f32"][("spatial_blocks.0", "bytes_read")]


# -- symbols the module does not name, and dimensions that are no symbol ------------------------------------

PLAIN = """
func.func @main(%a: tensor<?x4xf32>, %b: tensor<4x8xf32>) -> tensor<?x8xf32> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}
"""


def test_a_dimension_no_producer_names_is_named_by_its_place(tmp_path, capsys):
    path = tmp_path / "plain.mlir"
    path.write_text(PLAIN)
    rc, _, err = run(capsys, "report", str(path))
    assert rc == 2 and "arg0_0 (main's ?-dimensions, named arg<I>_<D>)" in error_line(err)
    f = fit(symbolic_program(StudyOptions(PLAIN, isolate=False)))
    assert f.named_by == "position" and f.polys[("TOTAL", "gemm_flops")] == 2 * 4 * 8 * Poly.symbol("arg0_0")


def test_a_dimension_that_is_an_expression_is_refused(tmp_path, capsys):
    b, s = jax.export.symbolic_shape("b, s")
    text = jax.export.export(jax.jit(lambda x: (x @ x.T).sum()))(
        jax.ShapeDtypeStruct((2 * b, s), jnp.float32)).mlir_module()
    path = tmp_path / "expr.mlir"
    path.write_text(text)
    rc, _, err = run(capsys, "report", "--shapes", "b=2,s=3", str(path))
    assert rc == 2 and "shape symbol 'b' is not the size of one of main's dimensions" in error_line(err)


def test_a_static_export_is_not_symbolic(tmp_path):
    """jax writes ``jax.uses_shape_polymorphism = false`` on every static export: such a program counts without
    --shapes (it was refused as 'a symbolic program in ()')."""
    import jax
    import jax.numpy as jnp
    from jax import export

    from mhlo_cost.ir import symbolic
    from mhlo_cost.ir.loader import load

    e = export.export(jax.jit(lambda x, w: jnp.tanh(x @ w)))(jax.ShapeDtypeStruct((8, 16), "float32"),
                                                           jax.ShapeDtypeStruct((16, 4), "float32"))
    path = tmp_path / "f.jaxexport"
    path.write_bytes(e.serialize())
    assert "jax.uses_shape_polymorphism = false" in e.mlir_module()
    assert not symbolic.is_symbolic(load(str(path)).module)
