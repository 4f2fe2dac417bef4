"""The interleaved uneven pipeline rule names its framework: Megatron-Core refuses a first / last / middle stage whose
layers the interleave degree does not divide (its TransformerConfig: "number of layers at last stage: 6 must be
divisible by virtual pipeline parallel degree 4"), and, with the embedding and loss counted as layers, layers + 2
that do not fill p x v virtual stages; torchtitan's generate_split_points runs uneven virtual stages (126 layers on
8 ranks x 2: 7, 8 x 14, 7 a virtual stage, 15 or 16 a rank). The splits are worked out here."""
from __future__ import annotations

from mhlo_cost.studies.plan.config import ScaleConfig

LLAMA405 = dict(layers=126, hidden=256, heads=4, seq=128, vocab=1024, p=8, micro_batch=1, global_batch=8)


def _torchtitan(layers: int, stages: int) -> tuple:
    """torchtitan 9dec370 generate_split_points: L // n a stage, the middle ones one more while any are left."""
    base, extra = divmod(layers, stages)
    sizes = [base]
    for _ in range(stages - 2):
        sizes.append(base + (1 if extra > 0 else 0))
        extra -= 1 if extra > 0 else 0
    return tuple(sizes + [layers - sum(sizes)])


def test_megatron_refuses_a_first_stage_the_interleave_does_not_divide():
    virtual = _torchtitan(126, 16)
    per_rank = tuple(virtual[r] + virtual[r + 8] for r in range(8))
    assert per_rank == (15,) + (16,) * 6 + (15,)
    given = ScaleConfig(**LLAMA405, interleave=2, first_stage_layers=15, last_stage_layers=15)
    assert given.stage_layers() == per_rank
    assert "first stage's 15 layers must be divisible by the interleave degree 2" in given.invalid()
    middle = given.with_split(first_stage_layers=12, last_stage_layers=12, interleave=3, global_batch=24)
    assert middle.stage_layers() == (12,) + (17,) * 6 + (12,) and "middle stage's 17 layers" in middle.invalid()
    # DeepSeek-V3's case as Megatron-Core's issue states it: 6 layers on the last stage, 4 virtual stages a rank
    ds = ScaleConfig(**{**LLAMA405, "layers": 62, "p": 4}, interleave=4, first_stage_layers=16, last_stage_layers=6)
    assert ds.stage_layers() == (16, 20, 20, 6) and "last stage's 6 layers" in ds.invalid()


def test_torchtitan_runs_the_same_uneven_interleaved_stages():
    cfg = ScaleConfig(**LLAMA405, interleave=2, first_stage_layers=15, last_stage_layers=15,
                      pipeline_split="torchtitan")
    assert cfg.invalid() is None and cfg.uneven
    assert "cannot hold 16 model chunks" in cfg.with_split(interleave=16, global_batch=16).invalid()
    assert "pipeline_split must be one of" in cfg.with_split(pipeline_split="deepspeed").invalid()


def test_megatron_counts_the_embedding_and_loss_in_the_virtual_stages():
    """126 + 2 = 128 on 8 x 8 virtual stages of 2 (Megatron-Bridge's 405B): ranks of 1 + 7 x 2 = 15 and 16
    layers, valid; on 8 x 3 = 24 virtual stages 128 does not divide: refused."""
    acc = ScaleConfig(**LLAMA405, interleave=8, account_embedding=True, account_loss=True)
    assert acc.stage_layers() == (15,) + (16,) * 6 + (15,) and acc.invalid() is None
    assert "do not fill 8 x 3 virtual stages" in acc.with_split(interleave=3, global_batch=24).invalid()
    # the same stages given as first/last counts break Megatron's rule (15 on 8 virtual stages)
    assert "divisible by the interleave degree 8" in acc.with_split(
        account_embedding=False, account_loss=False, first_stage_layers=15, last_stage_layers=15).invalid()
