"""``mhlo-cost sweep`` over training configurations ([training] spec) ranks as ``train-plan --sweep`` does."""
from __future__ import annotations

import io

import pandas as pd
import pytest

pytest.importorskip("optax")

from mhlo_cost.cli import main
from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.search import sweep

SPEC = """model = "gpt"
devices = 8
hardware = "selene"
[training]
layers = 4
hidden = 64
heads = 4
seq = 32
vocab = 128
global_batch = 16
micro_batch = [1, 2]
recompute = ["selective", "full"]
interleave = [1, 2]
"""


def _sweep(tmp_path, capsys, spec: str, *extra) -> pd.DataFrame:
    path = tmp_path / "train.toml"
    path.write_text(spec)
    assert main(["sweep", "--spec", str(path), "--cache-dir", str(tmp_path / "c"), "-q", "--format", "csv",
                 *extra]) == 0
    return pd.read_csv(io.StringIO(capsys.readouterr().out), keep_default_na=False)


def test_same_ranking_as_train_plan_sweep(tmp_path, capsys):
    got = _sweep(tmp_path, capsys, SPEC, "--best")
    base = ScaleConfig(layers=4, hidden=64, heads=4, seq=32, vocab=128, global_batch=16, clip_grad=1.0)
    want, skipped = sweep(base, 8, resolve_profile("selene"), micro_batches=(1, 2), recomputes=("selective", "full"),
                          interleaves=(1, 2))
    ranked = list(want[want["fits"]]["config"])
    assert len(ranked) > 3 and list(got["parallel"][:3]) == ranked[:3]
    assert list(got["parallel"]) == ranked and list(got["rank"]) == list(range(1, len(ranked) + 1))
    assert list(got["time_step_s"]) == sorted(got["time_step_s"])
    everything = _sweep(tmp_path, capsys, SPEC)
    assert (everything["status"] == "skipped").sum() == len(skipped)
    assert all(everything[everything["status"] == "skipped"]["reason"])


def test_a_training_sweep_clips_at_1_as_train_plan_does_by_default():
    """train-plan's --clip-grad defaults to 1.0 (every stack's max norm); the sweep's configurations the same."""
    from mhlo_cost.studies.sweep.training import base_config

    tr = dict(layers=4, hidden=64, heads=4, seq=32, vocab=128, global_batch=16)
    assert base_config({"model": "gpt", "training": tr}).clip_grad == 1.0
    assert base_config({"model": "gpt-175b", "training": {}}).clip_grad == 1.0


def test_degree_lists_pick_splits(tmp_path, capsys):
    spec = SPEC.replace("global_batch = 16", "global_batch = 16\ntensor = [2]\npipeline = [2, 4]")
    got = _sweep(tmp_path, capsys, spec)
    ok = got[got["status"] == "ok"].copy()
    for c in ("t", "p", "d", "peak_bytes", "mem_weights", "mem_gradients", "mem_optimizer_state", "mem_activations"):
        ok[c] = [int(v) for v in ok[c]]
    assert set(ok["t"]) == {2} and set(ok["p"]) == {2, 4} and set(ok["d"]) == {2, 1}
    # exact memory per GPU: the mem_ columns add to peak_bytes
    mem = ok[["mem_weights", "mem_gradients", "mem_optimizer_state", "mem_activations"]].sum(axis=1)
    assert list(mem) == list(ok["peak_bytes"])


def test_bad_training_key_is_one_line(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text(SPEC.replace("micro_batch = [1, 2]", "micro_batch = [\"1\"]"))
    assert main(["sweep", "--spec", str(path), "-q"]) == 2
    err = capsys.readouterr().err
    assert "mhlo-cost: error:" in err and "micro_batch" in err and "Traceback" not in err
    path.write_text(SPEC.replace("model = \"gpt\"", "model = \"gpt-9t\""))
    assert main(["sweep", "--spec", str(path), "-q", "--no-cache"]) == 2
    assert "gpt-175b" in capsys.readouterr().err
