"""``train-plan --sweep`` over the whole vocabulary (issue 38, build 5): the combinations a sweep makes on a toy model
against a count worked out here by hand, the reason given for rejected ones, the table's determinism (in this
process and on a local pool of worker processes), the MoE's expert-parallel dimension, and the options' checks."""
from __future__ import annotations

import io

import pandas as pd
import pytest

pytest.importorskip("optax")

from mhlo_cost.cli import main
from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import known_cost
from mhlo_cost.studies.plan.search import label, prefetch, split_count, splits, sweep

TINY = dict(layers=4, hidden=64, heads=4, seq=32, vocab=128, global_batch=8)
SELENE = resolve_profile("selene")
#: Every dimension with two values but recompute (one) and tensor degree (1, 2, 4: all that divide 4 GPUs).
SPACE = dict(micro_batches=(1, 2), recomputes=("selective",), interleaves=(1, 2), cps=(1, 2), zeros=(1, 3),
             dp_shards=(0, 2), precisions=("bf16", "fp8-rowwise"))


def test_combinations_of_a_toy_model_counted_by_hand():
    # The tensor x pipeline x data splits of 4 GPUs (cp 1): t1 p1 d4, t1 p2 d2, t1 p4 d1, t2 p1 d2, t2 p2 d1, t4 p1 d1;
    # of the 2 left by cp 2: t1 p1 d2, t1 p2 d1, t2 p1 d1: 5 with p = 1, 4 with p > 1. Each takes micro-batch x ZeRO x
    # sharding group x precision = 2 x 2 x 2 x 2 = 16 combinations, twice that (interleave 1 and 2) where p > 1.
    made = list(splits(ScaleConfig(**TINY), 4, **SPACE))
    assert len(made) == split_count(4, **SPACE) == 5 * 16 + 4 * 32 == 208
    # Valid, by hand: 8 (micro-batch x ZeRO x precision) per split, x the sharding groups and interleavings that
    # hold. Sharding group 2 only where d = 4 (d = 2: the same as 0; d = 1: 2 does not divide it): t1 p1 d4, 2.
    # Interleave 2 needs layers 4 % (p x 2) = 0: p = 2 yes (m = 8 / (mb x d) is a multiple of 2 each time), p = 4 no.
    per_split = {(1, 1, 1, 4): 2, (1, 1, 2, 2): 2, (1, 1, 4, 1): 1, (1, 2, 1, 2): 1, (1, 2, 2, 1): 2, (1, 4, 1, 1): 1,
                 (2, 1, 1, 2): 1, (2, 1, 2, 1): 2, (2, 2, 1, 1): 1}  # (cp, t, p, d) -> sharding x interleave options
    valid = [c for c, why in made if why is None]
    assert len(valid) == 8 * sum(per_split.values()) == 104
    assert {(c.cp, c.t, c.p, c.d) for c in valid} == set(per_split)
    labels = [label(c) for c, _ in made]
    assert len(set(labels)) == len(labels)  # every combination named apart (precision, HSDP included)


def test_each_rejected_combination_says_why():
    made = list(splits(ScaleConfig(**TINY), 4, **SPACE))
    why = {label(c): w for c, w in made if w}
    assert len(why) == 104 and all(why.values())
    assert why["t1 p2 d2 mb1 selective zero shard2"] == ("sharding group 2 is the whole data degree: the same as "
                                                        "sharding group 0 (all d)")
    assert why["t1 p4 d1 mb1 selective zero shard2"] == "sharding group 2 does not divide the data degree 1"
    assert why["t1 p4 v2 d1 mb1 selective zero"] == "pipeline degree 4 x interleave 2 does not divide layers 4"
    cp3 = list(splits(ScaleConfig(**TINY), 4, cps=(3,)))
    assert [w for _, w in cp3] == ["context-parallel degree 3 does not divide 4 GPUs"]


def test_split_count_is_what_splits_makes():
    for gpus in (1, 6, 8, 96):
        for kw in ({}, SPACE, dict(SPACE, eps=(1, 2)), dict(SPACE, cps=(1, 3), max_t=64)):
            assert split_count(gpus, **kw) == sum(1 for _ in splits(ScaleConfig(**TINY), gpus, **kw))


PRICED = dict(micro_batches=(1,), recomputes=("selective",), interleaves=(1,), zeros=(1, 3), dp_shards=(0, 2),
              precisions=("bf16", "fp8-rowwise"), max_t=2)


def test_sweep_table_is_deterministic_and_ranked(tmp_path):
    base = ScaleConfig(**TINY)
    df, skipped = sweep(base, 4, SELENE, tmp_path / "a", **PRICED)
    again, skipped_again = sweep(base, 4, SELENE, tmp_path / "b", **PRICED)
    assert df.to_csv(index=False) == again.to_csv(index=False)
    assert skipped.to_csv(index=False) == skipped_again.to_csv(index=False)
    assert len(df) + len(skipped) == split_count(4, **PRICED)
    assert set(df["precision"]) == {"bf16", "fp8-rowwise"} and set(df["zero"]) == {1, 3}
    assert len(set(df["config"])) == len(df)
    fits = df[df["fits"]]
    assert list(fits["rank"]) == list(range(1, len(fits) + 1))
    assert list(fits["iteration_s"]) == sorted(fits["iteration_s"])


ARGS = ["train-plan", "--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
        "--global-batch", "8", "--sweep", "4", "--sweep-tp", "1,2", "--sweep-micro-batch", "1", "--sweep-recompute",
        "selective", "--sweep-interleave", "1", "--sweep-zero", "1,3", "--sweep-dp-shard", "0,2", "--format", "csv"]


def test_local_pool_gives_the_same_bytes_as_this_process(tmp_path, capsys):
    """The layers lowered by two worker processes (spawned: a fresh interpreter each) or here: one table."""
    assert main([*ARGS, "--cache-dir", str(tmp_path / "one"), "-j", "1", "-q"]) == 0
    here = capsys.readouterr().out
    assert main([*ARGS, "--cache-dir", str(tmp_path / "two"), "-j", "2", "-q"]) == 0
    pooled = capsys.readouterr().out
    assert here == pooled
    df = pd.read_csv(io.StringIO(here))
    assert set(df["t"]) == {1, 2} and set(df["zero"]) == {1, 3}


def test_dask_cluster_gives_the_same_bytes(tmp_path, capsys):
    """The layers lowered by a Dask cluster's worker process (the profile sent to it pickled: its read-only
    mappings as dicts) or here: one table."""
    distributed = pytest.importorskip("distributed")
    small = [*ARGS, "--sweep-zero", "1", "--sweep-dp-shard", "0", "-q"]
    assert main([*small, "--cache-dir", str(tmp_path / "one"), "-j", "1"]) == 0
    here = capsys.readouterr().out
    notes = []
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        assert main([*small, "--cache-dir", str(tmp_path / "two"), "--scheduler", cluster.scheduler_address]) == 0
        assert capsys.readouterr().out == here
        # a shape this process has not lowered: every layer made by the worker (a failure would be a note): on 2
        # GPUs t 1 and 2, each a layer per precision (2 x 2) and one head (2): 6
        other = [c for c, why in splits(ScaleConfig(**{**TINY, "hidden": 32}), 2, **PRICED) if why is None]
        assert prefetch(other, SELENE, tmp_path / "three", scheduler=cluster.scheduler_address,
                        note=notes.append) == 6 and notes == []
    assert all(known_cost(c, SELENE, tmp_path / "three", part) is not None for c in other for part in ("layer", "head"))


MOE = dict(layers=4, hidden=64, heads=4, seq=32, vocab=128, ffn=256, mlp_kind="swiglu", dropout=False, experts=8,
           top_k=2, expert_ffn=32, shared_experts=1, dense_layers=1, global_batch=16)


def test_expert_parallel_degrees_of_a_moe():
    # t = 1 on 8 GPUs: p 1, 2, 4, 8 with d 8, 4, 2, 1; p = 8 does not divide 4 layers (nor 4 + 2 counted). ep must
    # divide the experts (8: all of 1, 2, 4, 8 do) and cp x d: p1 d8 takes 4, p2 d4 3, p4 d2 2, so 9 valid of 16.
    space = dict(micro_batches=(1,), recomputes=("selective",), interleaves=(1,), zeros=(1,), eps=(1, 2, 4, 8),
                 only=lambda t, p, d: t == 1)
    made = list(splits(ScaleConfig(**MOE), 8, **space))
    assert len(made) == split_count(8, **space) == 16
    assert sorted((c.p, c.ep) for c, why in made if why is None) == [
        (1, 1), (1, 2), (1, 4), (1, 8), (2, 1), (2, 2), (2, 4), (4, 1), (4, 2)]
    why = {(c.p, c.ep): w for c, w in made}
    assert why[(2, 8)] == "expert-parallel degree 8 does not divide cp x d (4), the ranks it is taken from"


def test_moe_sweep_prices_each_expert_parallel_degree(tmp_path):
    space = dict(micro_batches=(1,), recomputes=("selective",), interleaves=(1,), zeros=(1,), eps=(1, 2, 4),
                 only=lambda t, p, d: t == 1 and p == 1)
    df, skipped = sweep(ScaleConfig(**MOE), 4, resolve_profile("dgx-h100"), tmp_path, **space)
    assert sorted(df["ep"]) == [1, 2, 4] and not len(skipped)
    one, four = (df[df["ep"] == e].iloc[0] for e in (1, 4))
    assert one["ep_comm_s"] == 0 < four["ep_comm_s"]  # no all_to_all without expert parallelism


def test_the_head_is_one_lowering_for_every_recompute_and_precision():
    """The head's cache key leaves out what its program does not read (:func:`~.costs.head_key`): its analysis is
    the same under every recompute policy, precision and attention."""
    from dataclasses import asdict

    from mhlo_cost.studies.plan.costs import analyse_layer

    base = ScaleConfig(**TINY, t=2, sp=True)
    want = {k: v for k, v in asdict(analyse_layer(base, SELENE, part="head")).items() if k != "key"}
    for kw in ({"recompute": "full"}, {"precision": "fp8-rowwise"}, {"attention": "fused"}):
        got = {k: v for k, v in asdict(analyse_layer(base.with_split(**kw), SELENE, part="head")).items()
               if k != "key"}
        assert got == want, kw


@pytest.mark.parametrize("extra,says", [
    (["--sweep-micro-batch", "1,2"], "--sweep-micro-batch goes with --sweep GPUS"),
    (["--jobs", "2"], "--jobs goes with --sweep GPUS"),
    (["--sweep", "4", "--sweep-ep", "2"], "--sweep-ep: the model has no experts"),
    (["--sweep", "4", "--sweep-precision", "bf16,fp4"], "--sweep-precision:"),
    (["--sweep", "4", "--sweep-tp", "3"], "--sweep-tp: the sweep's tensor degrees are powers of two"),
    (["--sweep", "4", "--sweep-recompute", "some"], "--sweep-recompute: 'some' is not one of"),
    (["--sweep", "4", "--sweep-zero", "4"], "--sweep-zero: a ZeRO stage is 0, 1, 2 or 3"),
    (["--sweep", "4", "--sweep-precision", "bf16", "--precision", "bf16"], "--sweep-precision sweeps what"),
    (["--sweep", "4", "--scheduler", "tcp://127.0.0.1:9", "--jobs", "2"], "--jobs sizes the local pool"),
    (["--sweep", "4", "--sweep-micro-batch", "0"], "not a list of positive integers"),
])
def test_sweep_options_are_checked(capsys, extra, says):
    argv = ["train-plan", "--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
            "--global-batch", "8", "--no-cache", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("mhlo-cost: error:") or "error:" in err
    assert says in err and "Traceback" not in err


def test_a_pipeline_degree_that_divides_no_split_gets_megatrons_first_and_last_stage_counts(tmp_path):
    # 5 layers on 2 stages: 5 % 2 and (5 + 2 counted) % 2 leave no even split; the first stage 3, the last
    # (with the LM head) 2, as --decoder-first/last-pipeline-num-layers 3 / 2 would give.
    base = ScaleConfig(**{**TINY, "layers": 5})
    space = dict(micro_batches=(1,), recomputes=("selective",), interleaves=(1,), max_t=1)
    p2 = [(c, why) for c, why in splits(base, 2, **space) if c.p == 2]
    got = [(c.stage_layers(), c.first_stage_layers, c.last_stage_layers, why) for c, why in p2]
    assert got == [((3, 2), 3, 2, None)]
    df, _ = sweep(base, 2, SELENE, tmp_path, **space)
    assert list(df[df["p"] == 2]["stage_layers"]) == ["3/2"]
