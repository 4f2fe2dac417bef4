"""FSDP2's copies and the layer's weight casts under torchao's fp8 all-gather (issue 38), worked out here from
torchao eab345c (``WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather`` returns the fp8 ``_data``;
``fsdp_post_all_gather`` wraps the gathered uint8 output as a ``Float8Tensor``; ``Float8Linear`` takes an
already-cast weight as it is) and torch 1963fc8's FSDP2 (``foreach_all_gather`` runs the pre-all-gather hook on its
copy-in stream; ``foreach_all_gather_copy_out`` splits the buffer into each parameter's output at its input's
dtype): the copy-out reads and writes each fp8 linear weight element at 1 byte (the norms and biases at 2), and the
layer program's weight casts leave the compute stream."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost
from mhlo_cost.studies.plan.fsdp_copies import fsdp_copies

SELENE = resolve_profile("selene")
H = 64
LINEAR = 12 * H * H  # a GPT layer's linear weights: qkv 3h^2, projection h^2, fc1 and fc2 4h^2 each
OTHER = 4 * H + 3 * H + H + 4 * H + H  # two LayerNorms' scale and bias, the four linears' biases
BASE = dict(layers=4, hidden=H, heads=4, seq=32, vocab=128, global_batch=64, precision="fp8-tensorwise", d=8,
            zero=3, fsdp_version=2)


def _cfg(**kw) -> ScaleConfig:
    return ScaleConfig(**(BASE | kw))


def test_copy_out_moves_the_fp8_weights_at_one_byte():
    w = LINEAR + OTHER
    bf16, fp8 = fsdp_copies(_cfg(), w), fsdp_copies(_cfg(fsdp_float8_all_gather=True), w)
    assert bf16.forward_bytes == 4 * w  # 2 read + 2 written an element
    assert fp8.forward_bytes == 2 * LINEAR + 4 * OTHER  # 1 + 1 a linear weight element, 2 + 2 the rest
    assert fp8.backward_bytes == fp8.forward_bytes + w * (2 + 4)  # the re-gather's copy-out; the bf16 -> fp32 copy-in


def _cost(cast: dict) -> LayerCost:
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    return LayerCost("k", "chip", dict(zero), dict(zero), {"forward": 1.0, "backward": 2.0, "recompute": 0.5,
                     "optimizer": 0.0}, weight_elems=LINEAR + OTHER, weight_bytes=2 * (LINEAR + OTHER),
                     weight_cast_s=cast)


@pytest.mark.parametrize("recompute, rerun", [("none", 0.0), ("full", 0.1), ("op", 0.03)])
def test_the_layers_weight_casts_leave_the_compute_stream(recompute, rerun):
    """The casts as lowered (forward 0.1 s, backward 0.2 s, the op policy's recompute 0.03 s) are in the layer
    without the fp8 all-gather, and out of it with it (full recompute re-runs the forward's 0.1 s); the backward
    keeps its fp8 weight transposes."""
    cast = {"forward": 0.1, "backward": 0.2, "recompute": 0.03, "optimizer": 0.0}
    off = compose(_cfg(recompute=recompute), _cost(cast), SELENE).layer
    on = compose(_cfg(recompute=recompute, fsdp_float8_all_gather=True), _cost(cast), SELENE).layer
    copy_f = SELENE.memory_time(2 * LINEAR + 4 * OTHER, 1)  # the copy-out, now at fp8
    copy_b = SELENE.memory_time(2 * LINEAR + 4 * OTHER + 6 * (LINEAR + OTHER), 2)
    assert on["forward"] == pytest.approx(1.0 - 0.1 + copy_f, rel=1e-12)
    # the dgrad still transposes the gathered fp8 weight (preprocess_addmm): 1 + 1 bytes a linear weight element,
    # a kernel a linear (the op policy's layer: q, k, v apart, six)
    transposes = SELENE.memory_time(2 * LINEAR, 6 if recompute == "op" else 4)
    assert on["backward"] == pytest.approx(2.0 - 0.2 + copy_b + transposes, rel=1e-12)
    # without it the op policy's recompute casts each fp8 weight again (torchao_casts.op_weight_recast: k, proj, fc2
    # 3 bytes an element and a kernel each, q, v, fc1 1 byte more in their transposes: 4 x 6h^2 = 2 x LINEAR)
    again = SELENE.memory_time(2 * LINEAR, 3) if recompute == "op" else 0.0
    assert on["recompute"] == pytest.approx(off["recompute"] - rerun - again, rel=1e-12, abs=1e-15)
    assert off["forward"] == pytest.approx(1.0 + SELENE.memory_time(4 * (LINEAR + OTHER), 1), rel=1e-12)
