"""Transformer Engine's amax reduction and scale update per ``fp8_autocast`` exit
(:mod:`mhlo_cost.studies.plan.te_amax_update`), its counts worked out here from TE v1.8's code: a Megatron-Core Llama
layer's four fp8 linears (qkv, proj, fc1 with the gate, fc2: ``num_gemms`` 1 each) and TE's DotProductAttention
(``num_gemms`` 3) put ``3 x num_gemms`` forward and ``2 x num_gemms`` backward fp32 amaxes into the global buffer;
``torch.cat`` takes 128 inputs a launch; ``kernel_bulk`` rolls a history of L (L - 1 read, L written) and writes the
scale and its inverse per amax, reading the reduced amax: 8 (L + 1) bytes an amax; the MAX all-reduce runs over the
tensor x context ranks, not where they are one."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost.network import estimate, resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost
from mhlo_cost.studies.plan.te_amax_update import chunks, exit_counts, exit_seconds, stage_seconds
from plan_stubs import stub_cost

H100 = resolve_profile("dgx-h100")


def _cfg(**kw) -> ScaleConfig:
    """A small Llama layer (GQA, SwiGLU) under NeMo 24.07's fp8: TE's delayed scaling, history 1024, cp 2."""
    base = dict(layers=32, hidden=64, heads=4, kv_heads=2, ffn=128, seq=64, vocab=1000, micro_batch=1,
                global_batch=8, d=1, cp=2, mlp_kind="swiglu", arch="llama", attention="fused",
                precision="fp8-tensorwise", fp8_weight_cache=True, fp8_amax_history=1024, ddp="megatron")
    return ScaleConfig(**(base | kw))


def test_llama_exit_counts():
    fwd = 32 * (4 * 3 + 3 * 3)  # 32 layers: 4 linears x 3 amaxes + the attention's 3 GEMMs x 3
    assert fwd == 672
    c = exit_counts(_cfg(), 32, "forward")
    assert c == {"amaxes": 672, "bytes": 672 * 4, "cat_bytes": 672 * 8, "cat_kernels": 2,  # 160 modules: 128 + 32
                 "update_bytes": 672 * 8 * 1025, "update_kernels": 1}
    b = exit_counts(_cfg(), 32, "backward")  # 4 x 2 + 3 x 2 = 14 a layer
    assert b == {"amaxes": 448, "bytes": 448 * 4, "cat_bytes": 448 * 8, "cat_kernels": 2,
                 "update_bytes": 448 * 8 * 1025, "update_kernels": 1}


def test_unfused_attention_and_single_rank_group():
    c = exit_counts(_cfg(attention="unfused", cp=1), 4, "forward")  # Megatron's own attention: no TE module
    assert c["amaxes"] == 4 * 4 * 3 and c["cat_kernels"] == 1
    assert c["bytes"] == 0  # t x cp = 1: TE skips the all-reduce (world size 1)
    assert exit_counts(_cfg(t=2, cp=1, sp=True), 4, "forward")["bytes"] == 4 * 21 * 4


@pytest.mark.parametrize("kw", [dict(precision="bf16"), dict(fp8_amax_history=1), dict(fp8_weight_cache=False)])
def test_only_under_delayed_scaling(kw):
    """bf16; current scaling (history 1: no reduce_and_update); torchao's dynamic scaling (no TE stack)."""
    cfg = _cfg(**kw)
    assert exit_counts(cfg, 32, "forward")["amaxes"] == 0
    assert stage_seconds(cfg, H100, 32) == (0.0, 0.0)


def test_exit_seconds():
    """The cat and the update in the profile's memory model at the bytes worked out above, and the all-reduce of
    2,688 bytes over ranks 0 and 1 on the DGX-H100 network."""
    expect = (H100.memory_time(672 * 8, 2) + H100.memory_time(672 * 8 * 1025, 1)
              + estimate(H100.topology, "all_reduce", 2688, ((0, 1),)).time_s)
    assert exit_seconds(_cfg(), H100, 32, "forward") == pytest.approx(expect, rel=1e-12)
    assert 0 < expect < 1e-3  # a few small kernels and one latency-bound all-reduce


def test_chunks_and_interleave():
    assert chunks(5, 2) == [3, 2] and chunks(8, 1) == [8]
    cfg = _cfg(layers=16, p=2, interleave=2)
    f, b = stage_seconds(cfg, H100, 8)  # two chunks of 4 layers: two exits each way
    assert f == pytest.approx(2 * exit_seconds(cfg, H100, 4, "forward"))
    assert b == pytest.approx(2 * exit_seconds(cfg, H100, 4, "backward"))


def _cost() -> LayerCost:
    return stub_cost(forward=1e-3, backward=2e-3)


def test_every_stage_each_micro_batch(monkeypatch):
    """Each stage's TransformerBlock exits its own autocast: every stage's forward and backward per micro-batch.
    The baseline is the same configuration (the same recipe) with the update cancelled in compose."""
    import mhlo_cost.studies.plan.compose as compose_module

    cfg = _cfg(layers=8, p=2)
    with_it = compose(cfg, _cost(), H100).stages
    monkeypatch.setattr(compose_module, "amax_update_seconds", lambda *a, **k: (0.0, 0.0))
    without = compose(cfg, _cost(), H100).stages
    for s in (0, 1):
        f, b = stage_seconds(cfg, H100, 4)
        assert f > 0 and b > 0
        assert with_it[s]["f_s"] - without[s]["f_s"] == pytest.approx(f)
        assert with_it[s]["b_s"] - without[s]["b_s"] == pytest.approx(b)
