"""train-plan's Llama layer (``arch="llama"``, mhlo_cost/studies/plan/llama_layer.py): RMSNorm, no biases, rotary
embedding as each framework runs it; chosen by the configuration, the data file's models and ``--hf``.

Expected numbers are closed forms worked out here (weights, GEMM FLOPs) or the H200 measurement of one torchtitan
Llama 3 8B layer (benchmarks/data/measured_h200_train_run1.jsonl), never the code under test.
"""
from __future__ import annotations

import json
import os
import sys

import pytest

from mhlo_cost.studies.plan.config import ScaleConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = dict(layers=2, hidden=256, heads=8, kv_heads=2, ffn=512, seq=128, vocab=1024, mlp_kind="swiglu",
             dropout=False, attention="fused")


def _cost(**kw):
    from mhlo_cost.network import resolve_profile
    from mhlo_cost.studies.plan.costs import analyse_layer

    return analyse_layer(ScaleConfig(**{**SMALL, **kw}), resolve_profile("h200"))


def test_arch_is_checked_and_keys_of_gpt_layers_stay_as_they_were():
    assert "arch must be one of gpt, llama" in ScaleConfig(arch="mamba").invalid()
    gpt = ScaleConfig(**SMALL)
    assert all(not (isinstance(k, tuple) and k[0] == "arch") for k in gpt.layer_key())
    assert ScaleConfig(**SMALL, arch="llama").layer_key() == gpt.layer_key() + (("arch", "llama"),)


@pytest.mark.parametrize("execution", ["compiled", "inductor"])
def test_llama_weights_have_no_biases(execution):
    h, a, kv, f = 256, 8, 2, 512
    d = h // a
    # wq, wk, wv (or one linear_qkv), wo; w1, w3, w2; two RMSNorm scales; nothing else
    want = h * (a + 2 * kv) * d + h * h + 3 * h * f + 2 * h
    llama = _cost(arch="llama", execution=execution)
    assert llama.weight_elems == want
    gpt = _cost(execution=execution)
    # the GPT layer's biases: qkv, proj, fc1, gate, fc2, and the two LayerNorms' biases
    assert gpt.weight_elems - llama.weight_elems == (a + 2 * kv) * d + h + f + f + h + 2 * h


def test_llama_gemm_flops_are_the_linears_and_the_attention():
    b, s, h, a, kv, f = 1, 128, 256, 8, 2, 512
    d = h // a
    linears = 2 * b * s * (h * (a + 2 * kv) * d + h * h + 3 * h * f)
    attention = 2 * (2 * b * a * s * s * d)  # q k^T and p v over the whole (masked) square
    cost = _cost(arch="llama", execution="compiled")
    assert cost.gemm_flops["forward"] == linears + attention
    assert cost.dgrad_flops + cost.wgrad_flops > 2 * linears - 1  # (the backward's two GEMMs per linear at least)


def _program(execution: str) -> str:
    from mhlo_cost.studies.plan.llama_layer import lower_llama_layer

    return lower_llama_layer(ScaleConfig(**SMALL, arch="llama", execution=execution))


def test_rope_is_torchtitans_complex_product_under_pytorch_and_tes_cos_sin_under_megatron():
    eager = _program("eager")
    assert "stablehlo.complex" in eager and "stablehlo.cosine" not in eager
    fused = _program("compiled")
    assert "stablehlo.cosine" in fused and "stablehlo.sine" in fused and "stablehlo.complex" not in fused
    # torchtitan's freqs_cis buffer: positions x d/2 complex64, an input (not a weight: not donated, no gradient)
    assert "tensor<128x16xcomplex<f32>>" in eager


def test_inductor_prices_the_complex_rope_as_aten_kernels():
    from mhlo_cost.studies.plan import costs
    from mhlo_cost.studies.study import Study

    cfg = ScaleConfig(**SMALL, arch="llama", execution="inductor")
    a = Study(_program("inductor"), training="always", execution="inductor", attention="fused").analysis
    rows = costs._aten_rows(a, cfg)
    assert rows and all({"rope", "complex"} <= set(a.rows[i].scope.split("/")) for i in rows)
    assert any(a.rows[i].op.endswith("complex") for i in rows)
    assert not any(a.rows[i].op.endswith("convert") for i in rows)  # (the casts around it: Inductor's kernels)
    assert not costs._aten_rows(a, ScaleConfig(**SMALL, arch="llama", execution="compiled"))
    assert not costs._aten_rows(a, ScaleConfig(**SMALL, execution="inductor"))


def test_the_data_files_llama_models_get_the_llama_layer():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import validate_training as vt

    data = vt.load()
    runs = {r["id"]: r for r in data["run"]}
    for rid, arch in (("torchtitan2412/t1-8b-fsdp", "llama"), ("nemo2407/llama2-7b", "llama"),
                      ("nemo2407/gpt3-5b", "gpt"), ("narayanan2021/gpt-1.7b", "gpt")):
        run = runs[rid]
        assert vt.scale_config(run, data["model"][run["model"]]).arch == arch, rid
    bad = {"model": {"m": {**data["model"]["llama3-8b"], "arch": "rwkv"}}, "run": [], "source": {}}
    assert any("arch 'rwkv'" in p for p in vt.check(bad))


def _measured(layer: str, kind: str) -> float:
    with open(os.path.join(ROOT, "benchmarks", "data", "measured_h200_train_run1.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return next(r["layer_ms"] for r in rows if r.get("layer") == layer and r["kind"] == kind
                and r.get("micro_batch") == 1)


def test_llama3_8b_layer_against_its_h200_measurement():
    """One torchtitan Llama 3 8B layer, forward + backward, mb 1, seq 8192, on the lent H200 (torch 2.11): eager
    23.33 ms, torch.compile 21.27 ms. The estimate must be within 20% of each (eager +14%, compiled +4% when this
    was written; the bundled GPT layer at the same shapes gave +23% and +2%, and a compile gain of 1.32 where the
    measured one is 1.10), and its compile gain within 15% of the measured one."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import validate_train_plan_layers as vtl
    from mhlo_cost.network import resolve_profile

    hw = resolve_profile("h200")
    eager_m, compiled_m = _measured("llama", "layer"), _measured("llama", "compiled")
    row = dict(layer="llama", seq=8192, micro_batch=1)
    eager_e = vtl.estimate_ms(dict(row, execution="eager"), hw)
    compiled_e = vtl.estimate_ms(dict(row, execution="inductor"), hw)
    assert 0.8 < eager_e / eager_m < 1.2
    assert 0.8 < compiled_e / compiled_m < 1.2
    gain_m, gain_e = eager_m / compiled_m, eager_e / compiled_e
    assert gain_e > 1.0 and abs(gain_e / gain_m - 1) < 0.15
