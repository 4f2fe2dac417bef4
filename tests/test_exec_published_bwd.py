"""benchmarks/validate_published.py's attention backward rows: the program is the forward and its VJP, whose
products are the forward's two plus the backward's four (dV, dP, dQ, dK: 8 B H S^2 D FLOPs), and a TFLOP/s figure
turns into a time with FlashAttention's count (2.5 x the forward's 4 B H S^2 D, halved where causal)."""
from __future__ import annotations

import os
import sys
import tomllib

import pytest

pytest.importorskip("jax")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import validate_published as vp  # noqa: E402

from mhlo_cost.analysis import AnalysisOptions, analyze  # noqa: E402


def _row(**params):
    p = dict(batch=2, heads=3, seq=128, head_dim=32, causal=False, dtype="bfloat16", library="fa3") | params
    return {"id": "t", "chip": "h100", "program": "attention_bwd", "params": p, "unit": "TFLOP/s",
            "flops": "attention_bwd", "measured": 100.0}


@pytest.mark.parametrize("causal", [False, True])
def test_the_program_is_forward_and_backward_products(causal):
    m = _row(causal=causal)
    b, h, s, d = 2, 3, 128, 32
    rows = analyze(vp.lowered_text(m), AnalysisOptions(dataflow=True)).rows
    dots = sum(r.gemm_flops for r in rows if r.kind == "dot")
    assert dots == 2 * (2 * b * h * s * s * d) + 4 * (2 * b * h * s * s * d)  # a mask changes no product


def test_flash_attentions_count_for_a_tflops_figure():
    b, h, s, d = 2, 3, 128, 32
    assert vp.counted_flops(_row()) == 10 * b * h * s * s * d
    assert vp.counted_flops(_row(causal=True)) == 5 * b * h * s * s * d
    assert vp.measured_s(_row()) == pytest.approx(10 * b * h * s * s * d / 100e12)


def test_the_backward_estimate_is_the_backward_alone():
    """The whole program's estimate less the forward's: positive, and below the forward and backward together."""
    m = _row(seq=1024, batch=4, heads=16, head_dim=128)
    bwd = vp.estimated_s(m)
    fwd = vp.estimated_s(dict(m, program="attention", flops="attention"))
    assert 0 < bwd and fwd > 0
    # the backward does 2x the forward's products plus the recomputed scores: slower than the forward
    assert bwd > fwd


def test_corpus_rows_name_the_backward():
    with open(vp.DATA, "rb") as f:
        rows = tomllib.load(f)["m"]
    bwd = [(i, m) for i, m in enumerate(rows) if m["category"] == "attention_bwd"]
    assert len(bwd) >= 4
    for i, m in bwd:
        assert m["program"] == "attention_bwd" and m["flops"] == "attention_bwd", m["id"]
        assert m["source"].startswith("https://") and m["config"], m["id"]
    assert len({m["id"] for m in rows}) == len(rows)
