"""``sweep --precision``: the precision recipes as a grid axis. A stdit3 point's blocks' seven linears (qkv, proj;
cross-attention q, kv, proj; fc1, fc2) run and are stored under the recipe, everything else in bf16; the counts are
closed forms worked out here from the sizes (hidden 1152, the MLP ratio 4, the tokens of the small video shape)."""
from __future__ import annotations

import pytest

from mhlo_cost import analyze
from mhlo_cost.analysis import AnalysisOptions
from mhlo_cost.studies.sweep import GridError, make_grid, skip_reason
from mhlo_cost.studies.sweep.grid import Point
from mhlo_cost.studies.sweep.point import lower_text

# STDiT3 --small at hidden 1152 (16 heads), one spatial and one temporal block: batch 2, latent 3 x 6 x 8 patched by
# (1, 2, 2) into T = 3 frames of S = 3 x 4 = 12 tokens, 8 caption tokens
C, F, B, T, S, L, BLOCKS = 1152, 4 * 1152, 2, 3, 12, 8, 2
M = B * T * S  # video tokens through a block's linears
OPTIONS = dict(small=True, hidden=C, heads=16, depth=1)
#: (in, out, rows) of each quantised linear of a block: the video tokens', and the caption keys / values'
LINEARS = ((C, 3 * C, M), (C, C, M), (C, C, M), (C, 2 * C, B * L), (C, C, M), (C, F, M), (F, C, M))


def _point(precision: str, parallel: str = "none", devices: int = 1, model: str = "stdit3") -> Point:
    return Point(model, "default", parallel, devices, "bf16", (), precision)


def _analysis(point: Point, options=OPTIONS, **kw):
    return analyze(lower_text(point, options), AnalysisOptions(**kw) if kw else None)


def _params(a) -> dict:
    """Bytes of each parameter argument, by its path."""
    return {arg.name: arg.type.nbytes for arg in a.arguments if arg.name.startswith("params")}


def test_the_configuration_is_the_one_the_closed_forms_assume():
    from mhlo_cost.studies.sweep.grid import build_config

    cfg, _ = build_config(_point("bf16"), OPTIONS)
    assert (cfg.hidden, cfg.mlp_hidden, cfg.batch, cfg.caption_tokens, cfg.depth) == (C, F, B, L, 1)
    assert (cfg.latent_t, cfg.latent_h // 2, cfg.latent_w // 2) == (T, 3, 4)


def test_fp8_gemm_flops_of_a_stdit3_point_are_its_quantised_linears():
    fp8 = _analysis(_point("fp8-rowwise")).summary
    bf16 = _analysis(_point("bf16")).summary
    linears = BLOCKS * sum(2 * rows * i * o for i, o, rows in LINEARS)
    assert fp8["gemm_flops_fp8"] == linears
    assert fp8["gemm_flops"] == bf16["gemm_flops"]  # the same products; the rest (embedders, attention) bf16
    assert "gemm_flops_fp8" not in bf16


@pytest.mark.parametrize("recipe, weight, scales", [
    ("fp8-rowwise", lambda i, o: i * o, lambda i, o: 4 * o),  # e4m3 weight, a float32 scale per output channel
    ("fp8-tensorwise", lambda i, o: i * o, lambda i, o: 4),  # one float32 scale
    # int4 packed two a byte; per group of 128 inputs a float16 scale and an int4 zero (two a byte) per output
    ("w4a16-awq", lambda i, o: i * o // 2, lambda i, o: (i // 128) * o * 2 + (i // 128) * o // 2),
])
def test_weights_are_stored_at_the_recipe_width_with_their_scales(recipe, weight, scales):
    q = _params(_analysis(_point(recipe), arguments=True))
    bf16 = _params(_analysis(_point("bf16"), arguments=True))
    stored = BLOCKS * sum(weight(i, o) + scales(i, o) for i, o, _ in LINEARS)
    dense = BLOCKS * sum(2 * i * o for i, o, _ in LINEARS)
    assert sum(bf16.values()) - sum(q.values()) == dense - stored
    quantised = [k for k in q if k.endswith(("['w']", "['w_scale']", "['w_zero']")) and "_blocks'" in k
                 and "norm" not in k]
    assert sum(q[k] for k in quantised) == stored
    # what stays bf16 is byte for byte the bf16 point's
    assert {k: v for k, v in q.items() if k not in quantised} == {k: v for k, v in bf16.items()
                                                                   if k not in quantised}


def test_a_sequence_parallel_point_runs_its_local_tokens_linears_in_fp8():
    """ulysses on 2 devices: the video tokens split along S (12 -> 6 a device), the caption keys and values computed
    whole on every device."""
    a = _analysis(_point("fp8-rowwise", "ulysses", 2)).summary
    local = BLOCKS * sum(2 * (rows if rows == B * L else rows // 2) * i * o for i, o, rows in LINEARS)
    assert a["gemm_flops_fp8"] == local


@pytest.mark.parametrize("recipe, key", [("fp8-rowwise", "gemm_flops_fp8"), ("fp8-tensorwise", "gemm_flops_fp8"),
                                         ("w8a8-int8", "gemm_flops_int8")])
def test_a_megatron_point_runs_half_of_every_quantised_linear_on_each_device(recipe, key):
    """megatron on 2 devices: qkv, cross-attention q and kv, fc1 split by columns, the projections and fc2 by rows,
    so a device runs half of every linear's products; the collectives are the bf16 point's (an all_reduce after
    each row-parallel linear, of its bf16 output)."""
    q = _analysis(_point(recipe, "megatron", 2))
    bf16 = _analysis(_point("bf16", "megatron", 2))
    assert q.summary[key] == BLOCKS * sum(2 * rows * i * o for i, o, rows in LINEARS) // 2
    assert q.summary["gemm_flops"] == bf16.summary["gemm_flops"]
    assert q.summary["comm_bytes"] == bf16.summary["comm_bytes"] > 0


def test_a_gpt_point_runs_its_four_linears_in_fp8():
    options = dict(layers=2, hidden=256, heads=4, tokens=64, batch=2)
    a = _analysis(_point("fp8-tensorwise", model="gpt"), options).summary
    m, c = 2 * 64, 256
    assert a["gemm_flops_fp8"] == 2 * sum(2 * m * i * o for i, o in ((c, 3 * c), (c, c), (c, 4 * c), (4 * c, c)))


def test_recipes_cross_the_grid_and_points_that_cannot_take_one_are_skipped_with_why():
    recipes = ("bf16", "fp8-rowwise", "mxfp8", "fp8-blockwise-128")
    grid = make_grid({"model": "stdit3", "strategies": ["none:1", "megatron:2", "2d:4"], "hardware": ["h100"],
                      "precision": list(recipes), "options": {"small": True}})
    assert [(p.parallel, p.precision) for p in grid.points] == [(s, r) for s in ("none", "megatron", "2d")
                                                                for r in recipes]
    why = {(p.parallel, p.precision): skip_reason(p, grid.options) for p in grid.points}
    for ok in (("none", "bf16"), ("none", "fp8-rowwise"), ("none", "mxfp8"), ("megatron", "bf16"),
               ("megatron", "fp8-rowwise"), ("2d", "bf16")):
        assert why[ok] is None, ok
    assert "would split the linears' mx scales with their weights" in why[("megatron", "mxfp8")]
    assert "would split the linears' row scales with their weights" in why[("2d", "fp8-rowwise")]
    assert "not a multiple of its block (128)" in why[("none", "fp8-blockwise-128")]  # small: hidden 64
    deployed = Point("stdit3", "default", "none", 1, "bf16", (), "fp8-rowwise")
    assert "--deployed" in skip_reason(deployed, {"small": True, "deployed": True})


@pytest.mark.parametrize("bad, words", [("fp9", "unknown recipe (known: bf16, fp8-tensorwise"),
                                        ("kv-fp8", "keep no KV cache"), ("", "name a recipe")])
def test_a_recipe_the_sweep_cannot_take_is_refused(bad, words):
    with pytest.raises(GridError) as e:
        make_grid({"model": "stdit3", "hardware": ["h100"], "precision": [bad]})
    assert words in str(e.value) and "\n" not in str(e.value)


def test_the_precision_column_is_there_only_where_a_recipe_is_crossed_and_old_tables_read():
    import pandas as pd

    from mhlo_cost.studies.sweep.table import best, frame, make_rows, precision_of

    points = [_point("bf16"), _point("fp8-rowwise")]
    skipped = {p: "why" for p in points}
    df = frame(make_rows(points, {}, skipped, ["h100"]), False)
    assert list(df.columns[5:8]) == ["dtype", "precision", "status"] and precision_of(df) == ["bf16", "fp8-rowwise"]
    plain = frame(make_rows(points[:1], {}, {points[0]: "why"}, ["h100"]), False)
    assert "precision" not in plain.columns and precision_of(plain) == ["bf16"]
    old = pd.DataFrame({"model": ["stdit3"], "status": ["ok"]})
    assert precision_of(old) == ["bf16"]
    ok = df.assign(status="ok", fits="yes", time_step_s=[2.0, 1.0])
    ranked = best(ok)
    assert list(ranked["precision"]) == ["fp8-rowwise", "bf16"]
    assert list(ranked.columns).index("rank") == list(ranked.columns).index("execution") + 1


def test_cli_unknown_recipe_is_one_line_and_exit_2(capsys, tmp_path, monkeypatch):
    from mhlo_cost.cli import main

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert main(["sweep", "--small", "--hardware", "h100", "--precision", "fp8", "--no-cache", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error: --precision fp8: unknown recipe (known: bf16,")
    assert "w8a16" in err[0]


def test_cli_sweeps_a_recipe_with_its_column(capsys, tmp_path, monkeypatch):
    import json

    from mhlo_cost.cli import main

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    out = tmp_path / "t.json"
    assert main(["sweep", "--small", "--hardware", "h100", "--precision", "bf16", "fp8-rowwise", "--no-cache", "-j",
                 "1", "-q", "-o", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["precision"], r["status"]) for r in rows] == [("bf16", "ok"), ("fp8-rowwise", "ok")]
    assert rows[0]["gemm_flops"] == rows[1]["gemm_flops"]


def test_a_plot_has_a_bar_per_strategy_and_recipe_and_reads_old_tables():
    import pandas as pd

    from mhlo_cost.views.sweep_plot import _keys

    new = pd.DataFrame({"parallel": ["none", "none"], "devices": [1, 1], "precision": ["bf16", "fp8-rowwise"]})
    assert _keys(new) == ["none:1", "none:1 fp8-rowwise"]
    old = pd.DataFrame({"parallel": ["none", "ulysses"], "devices": [1, 2]})
    assert _keys(old) == ["none:1", "ulysses:2"]


def test_the_gpt_forward_under_bf16_is_the_bundled_forward_op_for_op():
    """gpt_quant writes the layer again (gpt.py's lines are stored golden locations): under an unquantised recipe it
    must be the bundled forward, op for op."""
    import jax

    from mhlo_cost.lower.frontends import make_config
    from mhlo_cost.lower.models import gpt, gpt_quant
    from mhlo_cost.machines.precision import parse

    for scan in (False, True):
        cfg = make_config("gpt", layers=2, hidden=128, heads=4, tokens=32, scan=scan)
        mine = jax.jit(gpt_quant.make_forward(cfg, parse("bf16"))).lower(gpt_quant.param_shapes(cfg, parse("bf16")),
                                                                          *gpt.input_shapes(cfg))
        assert mine.as_text(debug_info=False) == gpt.lower(cfg).as_text(debug_info=False)


def test_a_spec_takes_the_precision_key_and_checks_its_type(tmp_path):
    from mhlo_cost.studies.sweep import read_spec

    spec = tmp_path / "s.toml"
    spec.write_text('model = "stdit3"\nhardware = "h100"\nprecision = "fp8-rowwise"\n[options]\nsmall = true\n')
    grid = make_grid(read_spec(str(spec)))
    assert [p.precision for p in grid.points] == ["fp8-rowwise"]
    spec.write_text('hardware = "h100"\nprecision = 8\n')
    with pytest.raises(GridError, match="key 'precision' must be a string or a non-empty list of them"):
        read_spec(str(spec))
