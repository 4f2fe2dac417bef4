"""benchmarks/validate_train_layers.py and its data (benchmarks/data/measured_h200_train.toml): the measured rows
are the run's lines as recorded (benchmarks/data/measured_h200_train_run1.jsonl), held out, one layer per row; the
per-token change and the summary are the arithmetic worked out here; the lowered training step of a small GPT layer
counts the GEMM FLOPs of a forward and backward worked out in closed form; a small step prices end to end."""
from __future__ import annotations

import json
import os

import pytest
from helpers import script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
vtl = script("benchmarks/validate_train_layers.py")
SMALL = dict(hidden=64, heads=2, ffn=256, seq=32)


def _raw():
    with open(os.path.join(ROOT, "benchmarks", "data", "measured_h200_train_run1.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_the_rows_are_the_runs_layer_lines_held_out():
    rows, raw = vtl.load(), [r for r in _raw() if r["kind"] in ("layer", "compiled")]
    assert len(rows) == len(raw) == 7
    for m, r in zip(rows, raw):
        assert m["role"] == "held_out" and m["kind"] == r["kind"] and m["micro_batch"] == r["micro_batch"]
        assert m["layer_ms"] == pytest.approx(r["ms_2"] - r["ms_1"], rel=1e-5)
        assert m["kind"] in vtl.EXECUTION and m["layer"] in ("gpt", "llama")


def test_the_per_token_change_is_t_n_over_n_t_1_minus_one():
    rows = [dict(model="m", kind="layer", micro_batch=1, estimate_s=1.0, measured_s=2.0),
            dict(model="m", kind="layer", micro_batch=4, estimate_s=3.0, measured_s=8.0),
            dict(model="m", kind="compiled", micro_batch=2, estimate_s=1.0, measured_s=1.0)]  # no mb1 of its kind
    (name, n, est, meas), = vtl.per_token_change(rows)
    assert (name, n) == ("m layer", 4)
    assert est == pytest.approx(3.0 / 4.0 - 1) and meas == pytest.approx(0.0)


def test_the_summary_gives_median_and_max_error_per_kind():
    rows = [dict(kind="layer", estimate_s=1.1, measured_s=1.0), dict(kind="layer", estimate_s=0.7, measured_s=1.0),
            dict(kind="layer", estimate_s=1.0, measured_s=1.0), dict(kind="compiled", estimate_s=2.0, measured_s=1.0)]
    lines = vtl.summary(rows)
    assert "layer" in lines[0] and "n= 3" in lines[0] and "10.0%" in lines[0] and "max  30.0%" in lines[0]
    assert "compiled" in lines[1] and "100.0%" in lines[1]
    assert lines[2].split()[0] == "all" and "n= 4" in lines[2]


def test_the_lowered_step_counts_a_layers_forward_and_backward_gemm_flops():
    """One GPT layer, micro-batch b, T = b s tokens: the four linears (h -> 3h, h -> h, h -> f, f -> h) cost
    2 T (4 h^2 + 2 h f) forward and twice that backward (the input's and the weights' gradients); the attention's
    two products 4 b s^2 h forward and its four backward products (dV, dP, dQ, dK) twice that."""
    from mhlo_cost.analysis import AnalysisOptions, analyze

    b, s, h, f = 2, SMALL["seq"], SMALL["hidden"], SMALL["ffn"]
    a = analyze(vtl.layer_step_text("gpt", 1, b, SMALL), AnalysisOptions(dataflow=True))
    t = b * s
    expected = 3 * 2 * t * (4 * h * h + 2 * h * f) + 3 * 4 * b * s * s * h
    assert sum(r.gemm_flops for r in a.rows) == expected


def test_a_small_layer_prices_depth_two_minus_depth_one():
    from mhlo_cost.machines.hardware import get_profile

    est = vtl.layer_estimate("gpt", 1, SMALL, get_profile("h200"), "eager")
    assert est["time"] > 0 and est["kernels"] > 0
    assert 0 < est["fixed"] < est["time"] and 0 < est["gemm"] < est["time"]
