"""train-plan's ``attention`` (unfused kernels or one fused flash-attention kernel) and ``grad_reduce_fp32``
(gradients reduced in fp32, or in the 2-byte dtype as Megatron 2021 did for fp16 without
``--accumulate-allreduce-grads-in-fp32``): each data-parallel collective's bytes against the closed form of the
layer's parameter count written out here (2 bytes a gradient for 4), the layer cache key, and the options on the
command line."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("optax")

from mhlo_cost.cli import main
from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import analyse_layer, layer_cost
from mhlo_cost.studies.plan.sharding import dp_collectives

TINY = dict(layers=4, hidden=64, heads=4, seq=32, vocab=128)
SELENE = resolve_profile("selene")
ARGS = ["train-plan", "--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
        "--global-batch", "8", "--format", "json"]


def _params(h=64, f=256, t=2) -> int:
    """One tensor rank's layer parameters: QKV, projection, fc1, fc2 weights and biases, two LayerNorms."""
    return (3 * h * h + h * h + 2 * h * f) // t + (3 * h + f) // t + 2 * h + 4 * h


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_gradients_reduced_in_two_bytes_halve_every_gradient_collective(zero):
    cfg = ScaleConfig(**TINY, t=2, d=4, global_batch=8, zero=zero, grad_reduce_fp32=False)
    P, n = _params(), 4
    rows = dp_collectives(cfg, layer_cost(cfg, SELENE), n)
    grads = sorted((r.kind, r.nbytes, r.per) for r in rows if r.what.startswith("gradient"))
    want = {0: [("all_reduce", 2 * P * n, "iteration")], 1: [("reduce_scatter", 2 * P * n, "iteration")],
            2: [("reduce_scatter", 2 * P, "layer_backward")], 3: [("reduce_scatter", 2 * P, "layer_backward")]}
    assert grads == want[zero]
    gathers = sorted((r.nbytes, r.per) for r in rows if r.kind == "all_gather")  # bf16 parameters: unchanged
    assert gathers == {0: [], 1: [(2 * P * n, "iteration")], 2: [(2 * P * n, "iteration")],
                       3: [(2 * P, "layer_backward"), (2 * P, "layer_forward")]}[zero]
    fp32 = dp_collectives(cfg.with_split(grad_reduce_fp32=True), layer_cost(cfg, SELENE), n)
    assert sorted(r.nbytes for r in fp32 if r.what.startswith("gradient")) == [2 * b for _, b, _ in want[zero]]


def test_the_default_keeps_fp32_gradients_and_the_unfused_layer_key():
    cfg = ScaleConfig(**TINY, t=2)
    assert cfg.grad_bytes == 4 and cfg.attention == "unfused"
    assert cfg.layer_key() == (64, 4, 32, 256, 2, False, 1, "none", True, "bfloat16")  # keys cached before
    fused = cfg.with_split(attention="fused")
    assert fused.layer_key() == cfg.layer_key() + (("attention", "fused"),)
    assert fused.label().endswith(" fused-attn") and cfg.with_split(grad_reduce_fp32=False).grad_bytes == 2
    assert "attention must be one of unfused, fused" in cfg.with_split(attention="flash").invalid()


def test_fused_attention_keeps_the_flops_and_is_cheaper_than_its_kernels():
    cfg = ScaleConfig(**TINY, t=2)
    unfused, fused = analyse_layer(cfg, SELENE), analyse_layer(cfg.with_split(attention="fused"), SELENE)
    assert fused.gemm_flops == unfused.gemm_flops and fused.vector_flops == unfused.vector_flops
    # one kernel that never writes the s x s scores to memory: the attention proper takes less time
    assert fused.core_s["forward"] < unfused.core_s["forward"]
    assert fused.core_s["backward"] < unfused.core_s["backward"]
    assert fused.time_s["forward"] < unfused.time_s["forward"]
    assert fused.time_s["optimizer"] == unfused.time_s["optimizer"]  # the weights' update: the same kernels


def test_command_options(capsys):
    assert main(ARGS + ["-d", "4", "--attention", "fused", "--grad-reduce-in-bf16"]) == 0
    row = json.loads(capsys.readouterr().out)["config"]
    assert (row["attention"], row["grad_bytes"]) == ("fused", 2)
    assert main(ARGS + ["-d", "4"]) == 0
    row = json.loads(capsys.readouterr().out)["config"]
    assert "attention" not in row and "grad_bytes" not in row  # default rows unchanged
    assert main(ARGS + ["--attention", "flash"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mhlo-cost: error:") and err.count("\n") == 1
