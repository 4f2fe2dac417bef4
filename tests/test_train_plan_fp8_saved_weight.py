"""torchao eab345c's tensorwise ``Float8Linear`` saves its forward's fp8 weight for the backward (issue 38), worked out
here from its code: ``Float8Linear.forward`` casts the weight once (``cast_weight_to_float8_t``; torchtitan 9dec370
leaves ``force_recompute_fp8_weight_in_bwd`` False) and ``manual_float8_matmul_with_args_in_float8.forward`` calls
``ctx.save_for_backward(input_fp8, weight_fp8_t)``; the backward's dgrad reads ``weight_fp8_t.t()``, which
``preprocess_addmm`` (float8_ops.py) makes column-major with ``b_data.t().contiguous().t()``. So per layer and
micro-batch the backward runs no weight amax or cast, one fp8 transpose per linear instead (1 byte read and 1 written
an element), and the fp8 weight (1 byte an element, a 4-byte fp32 scale per linear) is held from the forward to the
backward unless a recompute makes it again. The rowwise (axiswise) path, ``manual_float8_matmul_with_args_in_hp``,
saves the bf16 weight and casts it again in its backward; Transformer Engine's cached copies are their own rule."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost
from mhlo_cost.studies.plan.fp8_weights import weight_transposes
from mhlo_cost.studies.plan.memory import memory

SELENE = resolve_profile("selene")
H = 64
LINEAR = 12 * H * H  # a GPT layer's linear weights: qkv 3h^2, projection h^2, fc1 and fc2 4h^2 each
OTHER = 4 * H + 3 * H + H + 4 * H + H  # two LayerNorms' scale and bias, the four linears' biases
BASE = dict(layers=4, hidden=H, heads=4, seq=32, vocab=128, global_batch=8, precision="fp8-tensorwise")


def _cfg(**kw) -> ScaleConfig:
    return ScaleConfig(**(BASE | kw))


def _cost(saved: int = 1000) -> LayerCost:
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    cast = {"forward": 0.1, "backward": 0.2, "recompute": 0.03, "optimizer": 0.0}
    return LayerCost("k", "chip", dict(zero), dict(zero), {"forward": 1.0, "backward": 2.0, "recompute": 0.5,
                     "optimizer": 0.0}, saved_bytes=saved, input_bytes=saved // 10, weight_elems=LINEAR + OTHER,
                     weight_bytes=2 * (LINEAR + OTHER), weight_cast_s=cast)


def test_llama3_8b_transposes_its_seven_fp8_weights():
    """Llama 3 8B (hidden 4096, 32 heads of 128, 8 key/value heads, ffn 14336; Meta's model card): wq and wo
    4096^2 each, wk and wv 4096 x 1024 each, w1, w2, w3 4096 x 14336 each; 2 bytes moved an element, 7 kernels."""
    cfg = ScaleConfig(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, seq=8192, vocab=128256,
                      global_batch=16, mlp_kind="swiglu", arch="llama", dropout=False, precision="fp8-tensorwise",
                      recompute="op")
    elems = 2 * 4096 ** 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336
    assert elems == 218_103_808
    assert weight_transposes(cfg) == (2 * elems, 7)
    assert weight_transposes(cfg.with_split(t=2)) == (elems, 7)  # each linear's tensor-parallel shard
    assert weight_transposes(cfg.with_split(precision="fp8-rowwise")) == (0, 0)
    assert weight_transposes(cfg.with_split(fp8_weight_cache=True)) == (0, 0)


@pytest.mark.parametrize("recompute", ["none", "full", "op"])
def test_backward_reads_the_saved_weight(recompute):
    """The lowered backward's weight casts (0.2 s) leave the tensorwise layer's backward, replaced by the four
    linears' fp8 transposes (the op policy's layer: q, k, v apart, six); the forward and the recompute (full
    recompute's forward re-run) keep theirs; the op policy's recompute casts every fp8 weight again from the saved
    amax (torchao_casts.op_weight_recast: k, proj, fc2, whose GEMMs it recomputes, 3 bytes an element and a kernel
    each, 64^2 + 64^2 + 256 x 64; q, v, fc1 inside their transposes, 1 byte an element more, 64^2 + 64^2 + 64 x 256);
    the rowwise layer's backward keeps its 0.2 s; TE's cached copies take out every phase's casts as before."""
    n = 6 if recompute == "op" else 4
    tw = compose(_cfg(recompute=recompute), _cost(), SELENE).layer
    rw = compose(_cfg(recompute=recompute, precision="fp8-rowwise"), _cost(), SELENE).layer
    te = compose(_cfg(recompute=recompute, fp8_weight_cache=True), _cost(), SELENE).layer
    assert rw["backward"] == pytest.approx(2.0, rel=1e-12)
    assert tw["backward"] == pytest.approx(2.0 - 0.2 + SELENE.memory_time(2 * LINEAR, n), rel=1e-12)
    assert tw["forward"] == pytest.approx(rw["forward"], rel=1e-12)
    again = SELENE.memory_time(4 * (2 * H * H + 4 * H * H), 3) if recompute == "op" else 0.0
    assert tw["recompute"] == pytest.approx(rw["recompute"] + again, rel=1e-12)
    assert te["backward"] == pytest.approx(2.0 - 0.2, rel=1e-12)


def test_under_the_fp8_all_gather_the_backward_still_transposes_the_gathered_weight():
    """torchao's fp8 all-gather (FSDP2, ``fsdp_float8_all_gather``) casts before the gather: every phase's lowered
    weight casts leave the layer (0.1 s forward, 0.2 s backward), but the dgrad still reads the gathered fp8 weight
    through ``preprocess_addmm``: one transpose a linear, 2 bytes an element of the layer's four linears."""
    fsdp = dict(d=2, zero=3, fsdp_version=2, fsdp_float8_all_gather=True)
    gathered = _cfg(recompute="none", **fsdp)
    assert weight_transposes(gathered) == (2 * LINEAR, 4)
    ag = compose(gathered, _cost(), SELENE).layer
    # the same layer priced as the row-wise path (no saved fp8 weight to transpose; its casts taken out the same
    # way, FSDP's copies the same): the tensorwise backward is longer by the transposes alone
    rw = compose(_cfg(recompute="none", precision="fp8-rowwise", **fsdp), _cost(), SELENE).layer
    assert weight_transposes(_cfg(recompute="none", precision="fp8-rowwise", **fsdp)) == (0, 0)
    assert ag["backward"] - rw["backward"] == pytest.approx(SELENE.memory_time(2 * LINEAR, 4), rel=1e-9)
    assert ag["forward"] == pytest.approx(rw["forward"], rel=1e-12)


@pytest.mark.parametrize("kw, extra", [
    (dict(recompute="none"), LINEAR + 4 * 4),  # 1 byte a linear weight element, a 4-byte scale per linear
    (dict(recompute="selective"), LINEAR + 4 * 4),  # the linears are not checkpointed
    (dict(recompute="full"), 0),  # the layer's forward re-run in its backward: nothing held
    (dict(recompute="op"), 0),  # the cast PREFER_RECOMPUTE under torchtitan's op policy
    (dict(recompute="none", precision="fp8-rowwise"), 0),  # saves the bf16 weight (a parameter)
    (dict(recompute="none", fp8_weight_cache=True), 0),  # TE's: kept once a step, counted in weights
    (dict(recompute="none", d=2, zero=3, fsdp_version=2, fsdp_float8_all_gather=True), 0),  # FSDP's own fp8 buffer
])
def test_saved_fp8_weights_held_per_layer_micro_batch(kw, extra):
    """One stage of 4 layers and 1 micro-batch held each (p = 1): 4 x the saved weights on top of the layer's
    activations; with p = 2 and 4 micro-batches the first stage holds 2 layers x 2 micro-batches. (torchtitan's op
    policy also keeps each block's input, 1 x 32 x 64 bf16: tests/test_train_plan_torch_peak.py.)"""
    base = _cost()
    block = 2 * 32 * H if kw.get("recompute") == "op" else 0
    mem = memory(_cfg(**kw), base)
    assert mem["activations"] == 4 * (base.activation_bytes + block + extra)
    assert mem.get("fp8_saved_weights", 0) == 4 * extra
    piped = memory(_cfg(p=2, micro_batch=1, global_batch=4, **kw), base)
    assert piped["activations"] == 2 * 2 * (base.activation_bytes + block + extra)


def test_partial_full_recompute_holds_the_kept_layers_weights():
    """torchtitan's every-2nd-block full recompute: half the stage's layers keep their saved fp8 weights."""
    mem = memory(_cfg(recompute="full", recompute_every=2), _cost(), kept=_cost(4000))
    assert mem["fp8_saved_weights"] == 4 * (LINEAR + 16) // 2
