"""From the review of the merged train-plan changes: the data-parallel bytes and collectives of the stage whose
reduction ends the iteration, the options a STDiT3 plan refuses, --tp-comm-overlap-rs alone, and the interleaved
pipeline rules of Megatron-Core (embedding / loss counted as layers) and torchtitan (uneven virtual stages)."""
from __future__ import annotations

import dataclasses
import json

import pytest

from mhlo_cost.cli import main
from mhlo_cost.studies.plan.config import ScaleConfig

TOY = ["train-plan", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "128", "--vocab", "256",
       "--no-cache", "-q"]


def test_deepspeeds_reduction_bytes_hold_the_stages_embedding(capsys):
    """dp_bytes and the gradients all_reduce are one reduction: a layer of hidden 64 holds 12 h^2 + 13 h weights
    (qkv, proj, fc1, fc2 with their biases, two LayerNorms), the stage also the V/t x h embedding (or LM head),
    4 bytes each (fp32 gradients under DeepSpeed's BF16 optimizer)."""
    h, vocab = 64, 256
    assert main([*TOY, "-p", "2", "-d", "2", "--dp-reduce", "all_reduce", "--zero", "1", "--global-batch", "4",
                 "--format", "json"]) == 0
    counts = json.loads(capsys.readouterr().out)["counts"]
    expected = 4 * ((12 * h * h + 13 * h) * 1 + vocab * h)
    grads = [c for c in counts["collectives"] if c["what"] == "gradients"]
    assert counts["dp_bytes"] == expected and [c["bytes"] for c in grads] == [expected]


@pytest.mark.parametrize("option", [["--tp-comm-overlap"], ["--tp-comm-overlap-rs", "ring_exchange"],
                                    ["--pipeline-split", "torchtitan"]])
def test_stdit3_refuses_the_megatron_pipeline_options(capsys, option):
    assert main(["train-plan", "--model", "stdit3", "--no-cache", "-q", *option]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error:") and option[0] in err[0]


def test_reduce_scatter_overlap_alone_is_refused(capsys):
    assert main([*TOY, "-t", "2", "--sp", "--tp-comm-overlap-rs", "ring_exchange"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--tp-comm-overlap" in err[0]


def _why(**kw) -> str | None:
    base = ScaleConfig(layers=6, hidden=64, heads=4, seq=128, vocab=256, global_batch=8)
    return dataclasses.replace(base, **kw).invalid()


def test_megatron_counts_the_embedding_and_loss_in_the_virtual_stages():
    """(6 + 2) layers fill 2 x 2 virtual stages of 2 (Megatron-Core accepts it); (8 + 2) fill 2 ranks of 5 but not
    4 virtual stages; 6 alone on 2 x 2 does not divide."""
    assert _why(p=2, interleave=2, account_embedding=True, account_loss=True) is None
    assert "do not fill" in _why(layers=8, p=2, interleave=2, account_embedding=True, account_loss=True)
    assert "does not divide layers 6" in _why(p=2, interleave=2)


def test_torchtitan_runs_uneven_virtual_stages_megatron_does_not():
    """10 layers on 2 ranks x 2 virtual stages: torchtitan cuts 2, 3, 3, 2 (5 a rank); Megatron-Core refuses. A
    rank of 2 layers cannot hold 4 virtual stages under either."""
    assert _why(layers=10, p=2, interleave=2, pipeline_split="torchtitan") is None
    assert "does not divide layers 10" in _why(layers=10, p=2, interleave=2)
    assert "cannot hold 4" in _why(layers=4, p=2, interleave=4, pipeline_split="torchtitan")


@pytest.mark.parametrize("options, words", [(["--ddp-bucket-size", "1000"], "--overlap-grad-reduce"),
                                            (["--overlap-param-gather", "--zero", "1"], "--overlap-grad-reduce"),
                                            (["--overlap-grad-reduce", "--dp-overlap", "--zero", "1", "--dp-shard",
                                              "2"], "sharding group"),
                                            (["--overlap-grad-reduce", "--dp-overlap", "--num-experts", "4",
                                              "--moe-router-topk", "2"], "experts")])
def test_megatron_ddp_options_alone_or_unpriced_are_refused(capsys, options, words):
    assert main([*TOY, "-d", "4", "--global-batch", "4", *options]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


@pytest.mark.parametrize("option", [["--overlap-grad-reduce"], ["--overlap-param-gather"],
                                    ["--ddp-bucket-size", "1000"]])
def test_stdit3_refuses_megatrons_ddp_options(capsys, option):
    assert main(["train-plan", "--model", "stdit3", "--no-cache", "-q", *option]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error:")
