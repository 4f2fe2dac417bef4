"""The tensor-parallel all-gathers of torchtitan's selective op recompute with sequence parallelism (issue 38: is
the backward charged re-gathers it does not run?). Worked out here from torchtitan 9dec370
(parallelisms/parallelize_llama.py): the TP plan (``attention_norm`` / ``ffn_norm`` ``SequenceParallel``, then
``PrepareModuleInput`` Shard(1) -> Replicate: an all-gather before wq/wk/wv and before w1/w3; wo and w2
``RowwiseParallel(output_layouts=Shard(1))``: a reduce-scatter after each) and the op policy (``_save_list``: mm,
the SDPA kernels and ``_c10d_functional.reduce_scatter_tensor`` saved, every second mm not; everything else
``PREFER_RECOMPUTE``, which torch.utils.checkpoint's recompute re-runs, eager or under torch.compile's partitioner,
``must_recompute``). The backward reads, per derivatives.yaml, each mm's input for its weight gradient and each
SDPA call's q, k, v and output; the recompute re-runs every unsaved op those need, transitively."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost.studies.plan.compose import tp_collectives
from mhlo_cost.studies.plan.config import ScaleConfig

#: One block's forward as torchtitan's DTensor plan runs it: (name, op kind, inputs).
BLOCK = [("ag1", "all_gather", ["x"]), ("wq", "mm", ["ag1"]), ("wk", "mm", ["ag1"]), ("wv", "mm", ["ag1"]),
         ("sdpa", "sdpa", ["wq", "wk", "wv"]), ("wo", "mm", ["sdpa"]), ("rs1", "reduce_scatter", ["wo"]),
         ("h", "add", ["x", "rs1"]), ("ag2", "all_gather", ["h"]), ("w1", "mm", ["ag2"]), ("w3", "mm", ["ag2"]),
         ("silu", "silu", ["w1"]), ("mul", "mul", ["silu", "w3"]), ("w2", "mm", ["mul"]),
         ("rs2", "reduce_scatter", ["w2"])]


def _recomputed() -> list[str]:
    ops = {n: (k, i) for n, k, i in BLOCK}
    saved, mms = set(), 0
    for name, kind, _ in BLOCK:
        mms += kind == "mm"
        if kind in ("sdpa", "reduce_scatter") or (kind == "mm" and mms % 2 == 1):
            saved.add(name)
    # what the backward reads: each mm's input (weight gradient), SDPA's inputs and output, silu's input, mul's
    # inputs, and the residual add's output (the ffn norm's input, RMSNorm's backward reads it; the norms are
    # folded into the gathers here, whose input they read)
    need = [i for _, k, ins in BLOCK if k == "mm" for i in ins] + ["wq", "wk", "wv", "sdpa", "w1", "silu", "w3", "h"]
    out, todo = set(), list(need)
    while todo:
        n = todo.pop()
        if n in ops and n not in saved and n not in out:
            out.add(n)
            todo.extend(ops[n][1])
    return sorted(out)


def test_op_policy_recomputes_both_gathers_and_no_reduce_scatter():
    again = _recomputed()
    assert [n for n in again if n.startswith("ag")] == ["ag1", "ag2"]
    assert not [n for n in again if n.startswith("rs")]
    cfg = ScaleConfig(layers=2, hidden=64, heads=4, seq=32, vocab=128, t=2, sp=True, recompute="op",
                      execution="eager", global_batch=1)
    # the backward's own: the gradients of the two reduce-scatters gathered, of the two gathers reduce-scattered
    assert dict(tp_collectives(cfg)["backward"]) == {"all_gather": 2 + 2, "reduce_scatter": 2}
    assert dict(tp_collectives(cfg.with_split(recompute="none"))["backward"]) == {"all_gather": 2,
                                                                                  "reduce_scatter": 2}
