"""``train-plan --sweep GPUS``: every combination of a model's training vocabulary on ``gpus`` devices, each valid
one planned and ranked by iteration time among those that fit, each rejected one with its reason.

The dimensions (:class:`Space`): tensor degree ``t`` (a power of two up to ``max_t``, sequence parallelism on where
t > 1), context-parallel degree (``cps``), pipeline degree ``p`` (every divisor of what is left; a degree that
does not divide the layers takes Megatron-core's embedding/loss-counted split where that divides), data degree
``d`` (the rest), interleaving (``interleaves``, with p > 1 only), micro-batch (``micro_batches``), recompute
(``recomputes``), ZeRO stage (``zeros``: 0-3, 3 FSDP; None: the base's), HSDP sharding group (``dp_shards``: the
ranks each replica's state is sharded over; 0: all ``d``, plain ZeRO/FSDP), expert-parallel degree (``eps``, MoE
models; None: the base's) and the linears' precision (``precisions``; None: the base's). Their product is
counted without making the configurations (:func:`split_count`: a sweep too large is refused before any work).

:func:`sweep` lowers what its configurations need once per distinct layer shape (:func:`prefetch`: on a local
process pool, or on the Dask cluster ``mhlo-cost sweep`` uses, :func:`mhlo_cost.studies.sweep.run.run_tasks`; the
costs kept in the one cache), then prices every configuration here, by arithmetic on those costs.
"""
from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from itertools import product
from typing import Callable

import pandas as pd

from .config import ScaleConfig


@dataclass(frozen=True)
class Space:
    """The values each dimension of the sweep takes (defaults: ``train-plan --sweep``'s)."""

    micro_batches: tuple = (1, 2, 4)
    recomputes: tuple = ("full", "selective")
    interleaves: tuple = (1, 2, 3)
    max_t: int = 8
    only: Callable | None = None  # only(t, p, d): the tensor x pipeline x data splits kept
    cps: tuple = (1,)
    zeros: tuple | None = None  # None: the base's stage
    dp_shards: tuple = (0,)  # HSDP sharding groups; 0: all d
    eps: tuple | None = None  # None: the base's degree
    precisions: tuple | None = None  # None: the base's recipe

    def per_split(self, pp: int) -> int:
        """Combinations of one tensor x context x pipeline x data split of pipeline degree ``pp``."""
        inter = len(self.interleaves) if pp > 1 else sum(1 for v in self.interleaves if not v > 1)
        rest = (len(self.micro_batches) * len(self.recomputes) * len(self.zeros or (None,)) * len(self.dp_shards)
                * len(self.eps or (None,)) * len(self.precisions or (None,)))
        return inter * rest


def _divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending (found up to its square root: a count of devices is never walked)."""
    low, high, i = [], [], 1
    while i * i <= n:
        if n % i == 0:
            low.append(i)
            if i * i != n:
                high.append(n // i)
        i += 1
    return low + high[::-1]


def _degrees(gpus: int, max_t: int, only=None):
    """(t, p, d) of every tensor x pipeline x data split of ``gpus`` the sweep considers (``only(t, p, d)``: those
    it is true of)."""
    for t in (1, 2, 4, 8, 16, 32, 64):
        if gpus % t or t > max_t and t > 8:
            continue
        for pp in _divisors(gpus // t):
            if only is None or only(t, pp, gpus // (t * pp)):
                yield t, pp, gpus // (t * pp)


def split_count(gpus: int, **kw) -> int:
    """How many configurations :func:`splits` yields (valid or not), counted without making them (``kw``: the
    fields of :class:`Space`)."""
    space = Space(**kw)
    return sum(sum(space.per_split(pp) for _, pp, _ in _degrees(gpus // cp, space.max_t, space.only))
               if gpus % cp == 0 else 1 for cp in space.cps)


def _pipeline_split(cfg: ScaleConfig) -> ScaleConfig:
    """Where the pipeline degree does not divide the layers, Megatron-core's split that counts the embedding and
    the loss as layers, if that one divides (126 layers on 16 stages); else its first/last stage layer counts
    (:func:`_uneven`), where those make one (61 layers on 16 stages: 3, 4 x 14, 2)."""
    if cfg.stage_layers() or cfg.first_stage_layers or cfg.last_stage_layers or cfg.interleave > 1:
        return cfg
    accounted = cfg.with_split(account_embedding=True, account_loss=True)
    return accounted if accounted.stage_layers() else _uneven(cfg) or cfg


def _uneven(cfg: ScaleConfig) -> ScaleConfig | None:
    """``--decoder-first/last-pipeline-num-layers``: the inner stages ceil(L / p) layers each, the first and last
    stage the rest (the last, which holds the LM head, the fewer; neither more than an inner one nor none), or None
    where that leaves no layer for the last stage."""
    layers, p = cfg.layers, cfg.p
    inner = -(-layers // p)
    rest = layers - (p - 2) * inner if p > 2 else layers
    first, last = rest - rest // 2, rest // 2
    if p < 2 or last < 1 or (p > 2 and first > inner):
        return None
    out = cfg.with_split(first_stage_layers=first, last_stage_layers=last)
    return out if out.stage_layers() else None


def splits(base: ScaleConfig, gpus: int, **kw):
    """(config, reason or None) for every combination of :class:`Space` (``kw``: its fields) on ``gpus`` devices,
    in a fixed order: context, tensor, pipeline degree, then micro-batch, recompute, interleaving, ZeRO stage,
    sharding group, expert-parallel degree, precision."""
    space = Space(**kw)
    for cp in space.cps:
        if gpus % cp:
            yield base.with_split(cp=cp), f"context-parallel degree {cp} does not divide {gpus} GPUs"
            continue
        for t, pp, d in _degrees(gpus // cp, space.max_t, space.only):
            for mb, rc, v, z, shard, ep, prec in product(
                    space.micro_batches, space.recomputes, space.interleaves, space.zeros or (None,),
                    space.dp_shards, space.eps or (None,), space.precisions or (None,)):
                if v > 1 and pp == 1:
                    continue
                cfg = base.with_split(t=t, p=pp, d=d, sp=t > 1, micro_batch=mb, recompute=rc, interleave=v, cp=cp,
                                      **_dimensions(z, shard, ep, prec))
                cfg = _pipeline_split(cfg)
                yield cfg, _reason(cfg, space.max_t)


def _dimensions(zero, shard: int, ep, precision) -> dict:
    """The fields of the ZeRO stage, sharding group, expert-parallel degree and precision (None: unchanged)."""
    out = {} if zero is None else {"zero": zero, "dp_comm": "all_reduce"}
    out.update({k: v for k, v in (("dp_shard", shard or None), ("ep", ep), ("precision", precision)) if v is not None})
    return out


def _reason(cfg: ScaleConfig, max_t: int) -> str | None:
    """Why the sweep rejects ``cfg`` (one sentence), or None."""
    if cfg.dp_shard and cfg.dp_shard == cfg.d:
        return f"sharding group {cfg.dp_shard} is the whole data degree: the same as sharding group 0 (all d)"
    return cfg.invalid() or (f"tensor degree {cfg.t} above {max_t} (beyond one node's NVLink)"
                             if cfg.t > max_t else None)


def label(cfg: ScaleConfig) -> str:
    """The configuration's label with what it does not say: a sharding group (``shardN``) given where the label
    shows no HSDP (ZeRO 1/2's; FSDP's that is all of d, or does not divide it), and a precision other than bf16 (two
    combinations never share a label)."""
    hsdp = cfg.zero_stage == 3 and cfg.replicate_degree > 1  # (the label's own "hsdpNxR")
    shard = f" shard{cfg.dp_shard}" if cfg.dp_shard and not hsdp else ""
    return cfg.label() + shard + ("" if cfg.precision == "bf16" else f" {cfg.precision}")


def needs(cfg: ScaleConfig) -> list[tuple[ScaleConfig, str]]:
    """(configuration, part) of every layer cost :func:`~.plan.plan` reads for ``cfg`` (:mod:`.moe_plan`: the
    dense and base layers, the experts, the head; a model's own layer (STDiT3): the layer, and with full recompute
    the layer without; else the layer and the head)."""
    if cfg.experts:
        from .moe import base_config, dense_config

        dense = [(dense_config(cfg), "layer")] if cfg.dense_layers else []
        return dense + [(base_config(cfg), "layer"), (cfg, "experts"), (dense_config(cfg), "head")]
    if getattr(cfg, "lower_layer", None) is not None:
        return [(cfg, "layer")] + ([(cfg.with_split(recompute="none"), "layer")] if cfg.recompute == "full" else [])
    return [(cfg, "layer"), (cfg, "head")]


@dataclass(frozen=True)
class LayerJob:
    """One layer cost to lower and analyse, in a worker (what :func:`~mhlo_cost.studies.sweep.run.run_tasks`
    sends: the job is its own ``point``; its profile pickles itself:
    :meth:`~mhlo_cost.machines.profile.Hardware.__reduce__`)."""

    cfg: ScaleConfig
    hw: object
    part: str
    key: str
    chip: str

    @property
    def point(self):
        return self

    def label(self) -> str:
        c = self.cfg
        return f"{self.part} of t{c.t} cp{c.cp} mb{c.micro_batch} {c.recompute} {c.precision}"


def analyse_job(job: LayerJob):
    """The job's :class:`~.costs.LayerCost` as a sweep :class:`~mhlo_cost.studies.sweep.point.Result` (its one row:
    the cost's fields); a job that fails returns why, never raises."""
    from ..sweep.point import Result
    from .costs import analyse_layer

    t0 = time.perf_counter()
    try:
        cost = analyse_layer(job.cfg, job.hw, job.key, job.chip, job.part)
    except Exception as e:  # noqa: BLE001 - the plan lowers it again here, and says why it cannot
        return Result(job, "failed", f"{type(e).__name__}: {e}", seconds=time.perf_counter() - t0)
    return Result(job, "ok", rows=[asdict(cost)], seconds=time.perf_counter() - t0)


class _Keep:
    """The cache :func:`~mhlo_cost.studies.sweep.run.run_tasks` writes to: each layer cost a worker made, kept
    as :func:`~.costs.layer_cost` keeps it (nothing to read: only missing costs are sent)."""

    def __init__(self, cache_dir, note):
        self.cache_dir, self.note = cache_dir, note

    def get(self, job):
        return None

    def put(self, job: LayerJob, result) -> None:
        from .costs import LayerCost, keep_cost

        keep_cost(job.cfg, job.hw, self.cache_dir, job.part, LayerCost(**result.rows[0]), self.note)


def prefetch(configs, hw, cache_dir=None, note=None, *, scheduler: str | None = None, jobs: int | None = None,
             progress=False) -> int:
    """Lower and analyse every layer cost ``configs`` need that neither this process nor the cache holds, once per
    distinct layer (on a pool of ``jobs`` processes, 1: here; or on the Dask cluster at ``scheduler``); the costs
    kept as :func:`~.costs.layer_cost` keeps them. Returns how many were lowered (a failed one is lowered again,
    and its error raised, by the plan that needs it)."""
    from ..sweep.run import run_tasks
    from .costs import known_cost, layer_request

    todo: dict = {}
    for cfg in configs:
        for need, part in needs(cfg):
            chip, key, _ = layer_request(need, hw, part)
            if key not in todo and known_cost(need, hw, cache_dir, part, note) is None:
                todo[key] = LayerJob(need, hw, part, key, chip)
    if todo:
        results, _ = run_tasks(list(todo.values()), _Keep(cache_dir, note), scheduler=scheduler, jobs=jobs,
                               progress=progress, work=analyse_job)
        note = note or (lambda text: print(f"mhlo-cost: {text}", file=sys.stderr))
        for r in results:
            if r.status != "ok":
                note(f"the {r.point.label()} layer was not lowered by a worker ({r.reason}); it is lowered here")
    return len(todo)


def sweep(base: ScaleConfig, gpus: int, hw, cache_dir=None, note=None, *, scheduler: str | None = None,
          jobs: int | None = 1, progress=False, **kw) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(ranked table of the valid combinations, table of the rejected ones with their reason); ``kw``: the fields
    of :class:`Space`; the layers lowered by :func:`prefetch` (``scheduler``, ``jobs``, ``progress``: its)."""
    from .plan import plan

    made = list(splits(base, gpus, **kw))
    valid = [cfg for cfg, why in made if why is None]
    prefetch(valid, hw, cache_dir, note, scheduler=scheduler, jobs=jobs, progress=progress)
    plans = [plan(cfg, hw, cache_dir, note) for cfg in valid]
    skipped = pd.DataFrame([{"config": label(cfg), "reason": why} for cfg, why in made if why],
                           columns=["config", "reason"])
    return ranked(plans, _every(Space(**kw), plans)), skipped


def _every(space: Space, plans) -> bool:
    """Whether the rows carry the sharding / CP / stage columns: where the sweep ranges over those dimensions, or
    a split is uneven."""
    return (tuple(space.cps) != (1,) or space.zeros is not None or tuple(space.dp_shards) != (0,)
            or any(p.cfg.uneven for p in plans))


def ranked(plans, every: bool = False) -> pd.DataFrame:
    """The plans' rows ranked: those that fit by iteration time (then label), then those that do not (rank 0)."""
    rows = []
    precision = any(p.cfg.precision != "bf16" for p in plans)
    for p in plans:
        r = ({"precision": p.cfg.precision} if precision else {}) | p.row(every)
        r["config"] = label(p.cfg)
        rows.append(r)
    df = pd.DataFrame(rows)
    if len(df):
        df = df.sort_values(["fits", "iteration_s", "config"], ascending=[False, True, True], kind="stable")
        df.insert(0, "rank", [i + 1 if f else 0 for i, f in enumerate(df["fits"])])
        df = df.reset_index(drop=True)
    return df
