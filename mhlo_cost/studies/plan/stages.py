"""The iteration per pipeline stage (and so per device: the ``t x d`` GPUs of a stage run the same program).

Each stage runs ``m`` micro-batches of its ``L/p`` layers; the last stage also runs the LM head and the loss,
which makes it the slowest and the one that sets the iteration's pace. Every stage ends the iteration at the
same time (the schedule is synchronous), so a stage's ``idle`` is the iteration time less its own work:
for the last stage exactly the pipeline bubble of :mod:`.compose`, for the others the bubble plus the time
they wait for the head. Stage ``s`` holds the ranks ``s t d .. (s + 1) t d - 1`` (Megatron's order: tensor
fastest, then data, then pipeline) and, under the schedule, :func:`.memory.held_layer_microbatches` of
``s`` micro-batches of activations.
"""
from __future__ import annotations

import pandas as pd

from .memory import CATEGORIES, memory

#: The components of a stage's time, in the order of the breakdown table.
COMPONENTS = ("forward", "backward", "recompute", "tp_comm", "cp_comm", "p2p", "dp_exposed", "optimizer", "idle")


def components(cfg) -> tuple:
    """The components of ``cfg``'s stages: :data:`COMPONENTS`, with ``ep_comm`` (the all_to_all) for a MoE model and
    ``host`` (the calls' host time in series, :mod:`.launch_blocking`) with ``launch_blocking``."""
    if getattr(cfg, "launch_blocking", False):
        return (*COMPONENTS[:-1], "host", COMPONENTS[-1])
    return COMPONENTS if not cfg.experts else (*COMPONENTS[:5], "ep_comm", *COMPONENTS[5:])


def _seconds(it, st: dict, m: int) -> dict:
    """A stage's components but idle (seconds per iteration) from the per-layer parts and the stage's layers."""
    if "seconds" in st:  # a MoE model's stage (:mod:`.moe_plan`): its mix of layers priced there
        return dict(st["seconds"])
    one, n, dp = it.layer, st["layers"], st["dp"]
    host = {"host": m * sum(st["launch_host"][:2])} if "launch_host" in st else {}  # (the step's: in optimizer)
    return {"forward": m * (n * one["forward"] + st["head_forward"] + st.get("embed_forward", 0.0)),
            "backward": m * (n * one["backward"] + st["head_backward"] + st.get("embed_backward", 0.0)
                             + st.get("grad_accum", 0.0)),
            "recompute": m * n * one["recompute"],
            "tp_comm": m * n * (one["tp_forward"] + one["tp_backward"]),
            "cp_comm": m * n * (one["cp"].forward + one["cp"].backward), "p2p": it.p2p,
            "dp_exposed": m * n * (dp.forward + dp.backward) + one["dp_iteration_exposed"]
            + one.get("embedding_exposed", 0.0),
            "optimizer": st.get("optimizer", n * one["optimizer"]), **host}


def stage_rows(p) -> list[dict]:
    """One dict per pipeline stage of the :class:`~mhlo_cost.studies.plan.result.Plan` ``p``: its devices, seconds
    per component (they add up to the iteration time), and bytes per GPU by memory category."""
    cfg, it = p.cfg, p.iteration
    per = cfg.t * cfg.cp * cfg.d
    capacity = p.memory.get("capacity")
    rows = []
    for s, st in enumerate(it.stages):
        row = {"stage": s, "devices": f"{s * per}-{(s + 1) * per - 1}" if per > 1 else str(s)}
        row.update(_seconds(it, st, cfg.micro_batches))
        busy = sum(row[k] for k in components(cfg)[:-1])
        slow = s == it.layer["slow_stage"] and not cfg.experts
        # (the slow stage waits for the bubble and for a longer step elsewhere: the embedding's stage)
        row["idle"] = it.bubble + it.optimizer - row["optimizer"] if slow else max(0.0, it.total - busy)
        row["iteration"] = it.total
        own = getattr(cfg, "lower_layer", None) is not None  # a model with its own memory (.stdit3): one stage
        if own:
            mem = p.memory
        elif p.moe is not None:
            from .moe_plan import moe_memory

            mem = moe_memory(cfg, p.moe, capacity, stage=s)
        else:
            mem = memory(cfg, p.cost, capacity, stage=s, kept=p.kept) if p.cost is not None else {}
        row.update({f"mem_{k}": mem.get(k, 0) for k in (*CATEGORIES, "total")})
        rows.append(row)
    return rows


def stage_frame(p) -> pd.DataFrame:
    """:func:`stage_rows` as a table: seconds rounded to the microsecond, bytes exact."""
    df = pd.DataFrame(stage_rows(p))
    for k in (*components(p.cfg), "iteration"):
        df[k + "_s"] = [round(v, 6) for v in df.pop(k)]
    cols = ["stage", "devices", *(k + "_s" for k in (*components(p.cfg), "iteration"))]
    return df[cols + [c for c in df.columns if c.startswith("mem_")]]
