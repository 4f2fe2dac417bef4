"""Some layers recomputed whole, the others keeping everything (:mod:`mhlo_cost.studies.plan.partial_recompute`):
Megatron's block method (``--recompute full --recompute-num-layers K``) and torchtitan's selective layer
checkpointing (``--recompute full --recompute-every N``). Memory and FLOPs against Korthikanti et al.'s closed
forms worked out here; the recompute's seconds against the plan with every layer checkpointed; the refusals."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("optax")

from mhlo_cost.cli import main
from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.plan import plan

SELENE = resolve_profile("selene")
B, S, H, A, L, M = 1, 128, 256, 4, 4, 4  # micro-batch, seq, hidden, heads, layers, micro-batches
TINY = dict(layers=L, hidden=H, heads=A, seq=S, vocab=1024, micro_batch=B, global_batch=M * B)
#: Korthikanti et al. 2022 (eq. 1): bytes one GPT layer keeps per micro-batch with nothing recomputed (bf16,
#: dropout masks of a byte): s b h (34 + 5 a s / h); with the whole layer recomputed: its input, 2 s b h
KEEPS, INPUT = S * B * H * (34 + 5 * A * S // H), 2 * S * B * H
#: one layer's forward GEMM FLOPs per micro-batch (MLP 4h): 24 b s h^2 + 4 b s^2 h
FORWARD = 24 * B * S * H * H + 4 * B * S * S * H


def _plan(tmp_path, **kw):
    return plan(ScaleConfig(**TINY).with_split(**kw), SELENE, tmp_path)


@pytest.mark.parametrize("kw, full", [(dict(recompute_every=2), 2), (dict(recompute_num_layers=1), 1),
                                      (dict(recompute_num_layers=3), 3), (dict(recompute_every=3), 1)])
def test_memory_and_flops_of_the_checkpointed_layers(tmp_path, kw, full):
    """One stage of 4 layers: ``full`` of them keep their input, the others Korthikanti's s b h (34 + 5as/h), for
    each of the stage's layers' one micro-batch in flight; the recompute's FLOPs are those layers' forward GEMMs,
    for each micro-batch (torchtitan's every 3rd block of 4: the 3rd only)."""
    p = _plan(tmp_path, recompute="full", **kw)
    assert p.memory["activations"] == full * INPUT + (L - full) * KEEPS
    c = p.iteration.counts
    assert c["hardware_flops"] - c["model_flops"] == M * full * FORWARD
    assert p.iteration.row()["recompute_layers"] == full


def test_the_two_ends_are_the_whole_policies(tmp_path):
    """Nothing and everything checkpointed by the closed forms above, so the partial cases sit between them."""
    none, every = _plan(tmp_path), _plan(tmp_path, recompute="full")
    assert none.memory["activations"] == L * KEEPS and every.memory["activations"] == L * INPUT
    assert every.iteration.counts["hardware_flops"] - every.iteration.counts["model_flops"] == M * L * FORWARD


def test_recompute_seconds_are_the_checkpointed_layers_share(tmp_path):
    """Two pipeline stages of two layers, every second block checkpointed: one layer of each stage re-runs its
    forward, so the iteration's recompute is half the one with every layer checkpointed, and its forward and
    backward lie between the two whole policies' (the same layer's forward, lowered with and without remat)."""
    kw = dict(p=2, global_batch=M * B)
    half = _plan(tmp_path, recompute="full", recompute_every=2, **kw).iteration
    full = _plan(tmp_path, recompute="full", **kw).iteration
    none = _plan(tmp_path, **kw).iteration
    assert half.compute["recompute"] == pytest.approx(full.compute["recompute"] / 2, rel=1e-9)
    for phase in ("forward", "backward"):
        lo, hi = sorted((full.compute[phase], none.compute[phase]))
        assert lo * (1 - 1e-9) <= half.compute[phase] <= hi * (1 + 1e-9)
    assert none.total < half.total < full.total


@pytest.mark.parametrize("kw, why", [
    (dict(recompute_every=2), "choose the layers of --recompute full"),
    (dict(recompute="full", recompute_every=2, recompute_num_layers=1), "give one of"),
    (dict(recompute="full", recompute_every=3, p=2), "must divide each model chunk's 2 layers"),
    (dict(recompute="full", recompute_num_layers=1, p=2, first_stage_layers=1), "uneven pipeline stages"),
    (dict(recompute="full", recompute_every=-1), "recompute_every must be a positive integer"),
])
def test_refusals(kw, why):
    assert why in ScaleConfig(**TINY).with_split(**kw).invalid()


ARGS = ["train-plan", "--layers", "4", "--hidden", "256", "--heads", "4", "--seq", "128", "--vocab", "1024",
        "--global-batch", "4"]


def test_command_line(tmp_path, capsys):
    """The options reach the plan (its label and memory); without ``--recompute full`` one line and exit 2."""
    assert main([*ARGS, "--recompute", "full", "--recompute-num-layers", "1", "--format", "json",
                 "--cache-dir", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["memory"]["activations"] == INPUT + 3 * KEEPS
    assert out["config"]["config"] == "t1 p1 d1 mb1 full-block1" and out["config"]["recompute_layers"] == 1
    assert main([*ARGS, "--recompute-every", "2", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error:") and "--recompute full" in err[0]
    assert main(["train-plan", "--model", "gpt-1.3b", "--sweep", "8", "--recompute-every", "2"]) == 2
    assert "--recompute-every" in capsys.readouterr().err


def test_the_stage_table_keeps_the_partial_recompute(tmp_path):
    """The per-stage rows (``--by stage``, JSON ``stages``) hold the plan's own activations: the mean layer's."""
    from mhlo_cost.studies.plan.stages import stage_rows

    p = _plan(tmp_path, recompute="full", recompute_every=2)
    assert stage_rows(p)[0]["mem_activations"] == p.memory["activations"] == 2 * INPUT + 2 * KEEPS


def test_stdit3_refuses_the_partial_options(capsys):
    assert main(["train-plan", "--model", "stdit3", "--recompute", "full", "--recompute-every", "2"]) == 2
    assert "--recompute-every" in capsys.readouterr().err
