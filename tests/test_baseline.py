"""FLOP regression checks: baseline, check and diff on real lowered IR."""
import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from mhlo_cost.cli import main
from stderr_lines import error_line

H, S = 32, 16


def model_text(mlp_ratio=(4, 4), extra_dot_in=None, filename="model.py", pad_lines=0):
    """A 2-layer MLP stack with named scopes, lowered; source placed in `filename` at a chosen line."""
    src = "\n" * pad_lines + f"""
def f(x, *ws):
    for i in range(2):
        with jax.named_scope(f"layers.{{i}}"):
            with jax.named_scope("mlp"):
                h = jnp.tanh(x @ ws[2 * i])
                x = x + h @ ws[2 * i + 1]
            if {extra_dot_in!r} == i:
                with jax.named_scope("extra"):
                    x = x @ jnp.eye({H}, dtype=x.dtype)
    return x
"""
    ns = {"jax": jax, "jnp": jnp}
    exec(compile(src, filename, "exec"), ns)
    shapes = [jax.ShapeDtypeStruct((S, H), jnp.float32)]
    for r in mlp_ratio:
        shapes += [jax.ShapeDtypeStruct((H, r * H), jnp.float32), jax.ShapeDtypeStruct((r * H, H), jnp.float32)]
    return jax.jit(ns["f"]).lower(*shapes).as_text(debug_info=True)


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.fixture
def base(tmp_path):
    ir = write(tmp_path, "model.mlir", model_text())
    out = tmp_path / "model.flops.json"
    assert main(["baseline", ir, "-o", str(out), "-q"]) == 0
    return ir, str(out)


def test_baseline_is_stable_json_without_paths_or_time(base, tmp_path):
    ir, out = base
    data = json.loads(open(out).read())
    assert list(data) == ["schema", "schema_version", "tool_version", "source", "blocks_method", "summary", "blocks"]
    assert data["source"] == "model.mlir"
    assert str(tmp_path) not in open(out).read()
    assert [b["block"] for b in data["blocks"]][:2] == ["layers.0", "layers.1"]
    # Closed form per layer: (S x H) @ (H x 4H) and (S x 4H) @ (4H x H).
    assert data["blocks"][0]["gemm_flops"] == 2 * (2 * S * H * 4 * H)
    out2 = tmp_path / "again.flops.json"
    assert main(["baseline", ir, "-o", str(out2), "-q"]) == 0
    assert open(out).read().replace("again", "model") == open(out2).read().replace("again", "model")


def test_unchanged_ir_passes(base):
    ir, out = base
    assert main(["check", ir, "--baseline", out, "-q"]) == 0


def test_relowering_with_other_locations_passes(base, tmp_path):
    _, out = base
    moved = write(tmp_path, "model.mlir", model_text(filename="elsewhere/other.py", pad_lines=7))
    assert "other.py" in open(moved).read()
    assert main(["check", moved, "--baseline", out, "-q"]) == 0


def test_extra_dot_fails_naming_block_and_metric(base, tmp_path, capsys):
    _, out = base
    ir = write(tmp_path, "extra.mlir", model_text(extra_dot_in=1))
    assert main(["check", ir, "--baseline", out, "-q"]) == 1
    report = capsys.readouterr().out
    line = next(ln for ln in report.splitlines() if "layers.1" in ln and "gemm_flops" in ln)
    assert f"{2 * S * H * H:,}" in line  # the delta: one (S x H) @ (H x H)
    assert "layers.0" not in report.split("TOTAL")[0].replace("layers.1", "")


def test_mlp_ratio_change_fails_for_that_block_only(base, tmp_path, capsys):
    _, out = base
    ir = write(tmp_path, "ratio.mlir", model_text(mlp_ratio=(4, 2)))
    assert main(["check", ir, "--baseline", out, "--metrics", "gemm_flops", "--format", "csv", "-q"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "block,metric,baseline,now,delta,percent,status"
    blocks = {ln.split(",")[0] for ln in lines[1:]}
    assert blocks == {"layers.1", "TOTAL"}


def test_rtol_tolerates_small_moves(base, tmp_path):
    _, out = base
    ir = write(tmp_path, "ratio.mlir", model_text(mlp_ratio=(4, 2)))
    assert main(["check", ir, "--baseline", out, "--rtol", "0.6", "-q"]) == 0


def test_added_and_removed_blocks_are_named(base, tmp_path, capsys):
    ir, out = base
    data = json.loads(open(out).read())
    data["blocks"][1]["block"] = "layers.9"
    edited = tmp_path / "edited.flops.json"
    edited.write_text(json.dumps(data))
    assert main(["check", ir, "--baseline", str(edited), "-q"]) == 1
    text = capsys.readouterr().out
    assert "layers.9" in text and "removed" in text
    assert "layers.1" in text and "added" in text


@pytest.mark.parametrize("content,message", [
    ("{not json", "not JSON"),
    ('{"schema": "mhlo-cost/flops-baseline", "schema_version": 1}', "has no 'summary'"),
    ('{"schema": "mhlo-cost/flops-baseline", "schema_version": 99, "summary": {}, "blocks": []}', "version 99"),
    ('[1, 2]', "not an mhlo-cost baseline"),
])
def test_bad_baseline_is_exit_2_one_line(base, tmp_path, content, message):
    ir, _ = base
    bad = tmp_path / "bad.flops.json"
    bad.write_text(content)
    p = subprocess.run([sys.executable, "-m", "mhlo_cost", "check", ir, "--baseline", str(bad)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 2
    assert message in error_line(p.stderr)


def test_baseline_refuses_to_overwrite_and_update_says_what_changed(base, tmp_path, capsys):
    _, out = base
    ir = write(tmp_path, "extra.mlir", model_text(extra_dot_in=0))
    assert main(["baseline", ir, "-o", out, "-q"]) == 2
    assert main(["baseline", ir, "-o", out, "--update", "-q"]) == 0
    assert "layers.0" in capsys.readouterr().err
    assert main(["check", ir, "--baseline", out, "-q"]) == 0


def test_diff_puts_changed_rows_first(base, tmp_path, capsys):
    ir, out = base
    other = write(tmp_path, "extra.mlir", model_text(extra_dot_in=1))
    assert main(["diff", ir, other, "--format", "csv", "--metrics", "gemm_flops", "-q"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "block,gemm_flops_a,gemm_flops_b,gemm_flops_delta,status"
    assert lines[1].startswith("layers.1,") and lines[1].endswith(",changed")
    assert main(["diff", out, other, "--metrics", "gemm_flops", "--format", "csv", "-q"]) == 0
    assert main(["diff", ir, other, "--by", "opname", "--format", "csv", "-q"]) == 0
