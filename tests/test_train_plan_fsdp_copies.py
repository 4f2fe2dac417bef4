"""FSDP2's copies on the compute stream (:mod:`mhlo_cost.studies.plan.fsdp_copies`), against the bytes of
``foreach_all_gather_copy_out`` (the gathered bf16 buffer read, the parameters written: 2 + 2 bytes a weight) and
``foreach_reduce_scatter_copy_in`` (bf16 gradients read, the reduction dtype written) worked out here."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost.cli import main
from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost
from mhlo_cost.studies.plan.fsdp_copies import fsdp_copies

SELENE = resolve_profile("selene")
W = 1_000_000  # the layer's bf16 weights on one device


def _cfg(**kw) -> ScaleConfig:
    base = dict(layers=4, hidden=64, heads=4, seq=32, vocab=128, d=4, global_batch=4, zero=3, fsdp_version=2)
    return ScaleConfig(**(base | kw))


def test_copy_out_each_gather_and_copy_in_each_reduce_scatter():
    c = fsdp_copies(_cfg(), W)
    assert (c.forward_bytes, c.forward_kernels) == (W * 2 + W * 2, 1)
    assert (c.backward_bytes, c.backward_kernels) == ((W * 2 + W * 2) + (W * 2 + W * 4), 2)  # gather again; fp32 RS


def test_no_second_gather_without_resharding_and_bf16_reduction_writes_two_bytes():
    c = fsdp_copies(_cfg(reshard_after_forward=False, grad_reduce_fp32=False), W)
    assert (c.backward_bytes, c.backward_kernels) == (W * 2 + W * 2, 1)


def test_fsdp1_and_a_single_replica_copy_nothing():
    assert fsdp_copies(_cfg(fsdp_version=1), W).forward_bytes == 0
    assert fsdp_copies(_cfg(d=1, global_batch=1), W).backward_bytes == 0
    assert "fsdp_version" in _cfg(zero=2).invalid()
    assert "fsdp_version" in _cfg(fsdp_version=3).invalid()


def test_compose_adds_the_copies_to_the_layer():
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    cost = LayerCost("k", "chip", dict(zero), dict(zero), {"forward": 1.0, "backward": 2.0, "recompute": 0.0,
                                                          "optimizer": 0.0}, weight_elems=W, weight_bytes=2 * W)
    it = compose(_cfg(), cost, SELENE)
    assert it.layer["forward"] == pytest.approx(1.0 + SELENE.memory_time(4 * W, 1), rel=1e-12)
    assert it.layer["backward"] == pytest.approx(2.0 + SELENE.memory_time(10 * W, 2), rel=1e-12)
    assert compose(_cfg(fsdp_version=1), cost, SELENE).layer["forward"] == 1.0


def test_cli_takes_fsdp_version(capsys):
    import json

    args = ["train-plan", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
            "-d", "2", "--global-batch", "2", "--fsdp", "--fsdp-version", "2", "--no-cache", "--format", "json"]
    assert main(args) == 0
    row = json.loads(capsys.readouterr().out)["config"]
    assert (row["fsdp_version"], row["config"].endswith(" fsdp2")) == (2, True)
