"""The data-parallel reduction overlapped with the pipeline as Megatron-Core's ``DistributedDataParallel`` runs it
(``ScaleConfig.ddp == "megatron"``, with ``dp_overlap``: ``--overlap-grad-reduce``; ``overlap_param_gather``:
``--overlap-param-gather`` of the distributed optimizer).

Megatron-Core (``distributed_data_parallel.py``, ``param_and_grad_buffer.py``, ``pipeline_parallel/schedules.py``):

* the gradients of a model chunk live in buckets of ``--ddp-bucket-size`` elements (default
  ``max(40M, 1M x dp)``, dp the data ranks, context parallelism not counted; NeMo's and Megatron-Bridge's
  comm-overlap configuration set 128 Mi): parameters are taken in backward order and a bucket closes once it holds the bucket size. Bucketing is
  off (one bucket a chunk) on every pipeline stage but the first and for every model chunk but the first;
* without interleaving, the first stage's last micro-batch runs with the gradient hooks on: each bucket's
  reduce-scatter is launched as soon as its last gradient is made (``register_grad_ready``), so the buckets are
  reduced while the backward goes on, one at a time on the communication stream; another stage launches its one
  bucket after its own last backward (``grad_sync_func``), which comes ``s`` backward slots before the first
  stage's end;
* interleaved (``grad_sync_func`` per chunk, ``align_grad_reduce``): a chunk's whole reduction is launched after its
  last micro-batch's backward; on the first stage chunk ``c`` finishes ``c p`` chunk-backwards before the end
  (the cooldown runs the ``p`` last micro-batches of chunk ``v - 1``, then of ``v - 2``, ...), so the reductions of
  the later chunks run under the cooldown's backward and the first chunk's (with the word embedding) is exposed;
  the other stages launch theirs at the same moments (``virtual_microbatch_id - pipeline_parallel_rank``) and
  their first chunk ``s`` chunk-backwards before the first stage's end;
* ``overlap_param_gather``: after the step the parameters are all-gathered bucket by bucket as the next forward
  reaches them, the next bucket dispatched when the current one is waited for (interleaved: the first two chunks
  at the schedule's start and each next chunk when the current one starts, ``param_sync_func``); without it the
  all-gather runs after the step, exposed.

The word embedding is the first stage's first parameter (its gradient made last) and the LM head the last
stage's last (its gradient made first: :func:`.sharding.optimizer_extra_elems`). Priced at layer granularity: a
layer's parameters become one unit (a bucket closes at a layer's end), the head and the embedding one each.
The iteration waits for the slowest stage's exposed reduction (the gradient-norm all-reduce and the step follow).

PyTorch's ``DistributedDataParallel`` (``torch_ddp``, Megatron-LM 2021's ``--DDP-impl torch``, with ``dp_overlap``
and one pipeline stage: :func:`torch_bucketed`) reduces the same way, with its own buckets: ``bucket_cap_mb=25``
(``torch/nn/parallel/distributed.py``: ``bucket_bytes_cap = int(bucket_cap_mb * 1024 * 1024)``) and a first bucket
of ``dist._DEFAULT_FIRST_BUCKET_BYTES`` (1 MiB), in bytes of the gradients' dtype, filled in the order the
gradients are made (``_compute_bucket_assignment_by_size`` over the parameters, the list reversed for the
``Reducer``; from torch 1.7 rebuilt after the first iteration in the order they became ready); a bucket closes once
it holds its cap (``reducer.cpp``) and is all-reduced when its last gradient is ready, the buckets in order on one
stream. Megatron-LM's ``forward_backward_no_pipelining`` (``megatron/schedules.py``, de7dc40) runs every
micro-batch but the last under ``model.no_sync()``: the last one's backward reduces. Its buckets are far smaller
than a layer: a layer's gradients are taken as made in proportion to its weights through its backward (a linear's
dgrad and wgrad GEMMs take ``4 x tokens x weights`` FLOPs), in pieces of at most one bucket; the word embedding's
gradient (the first parameter: made last, the tied one after both its uses) closes the last bucket at the end.
Counts are exact ints; times are floats in seconds.
"""
from __future__ import annotations

import math

from .sharding import Collective, grad_groups, seconds, shard_groups
from .sm_share import overlap_tax

#: Megatron-Core's default bucket: max(40M, 1M x the data-parallel ranks) elements (``DistributedDataParallel``)
DEFAULT_BUCKET, BUCKET_PER_RANK = 40_000_000, 1_000_000
#: PyTorch DDP's buckets in bytes: ``bucket_cap_mb=25`` (x 1024 x 1024) and the first one's
#: ``dist._DEFAULT_FIRST_BUCKET_BYTES`` (``torch/nn/parallel/distributed.py``)
TORCH_BUCKET_BYTES, TORCH_FIRST_BUCKET_BYTES = 25 * 1024 * 1024, 1024 * 1024


def torch_bucketed(cfg) -> bool:
    """Whether PyTorch DDP's buckets price the overlapped reduction: ``torch_ddp`` with ``dp_overlap`` on one
    pipeline stage (Megatron-LM's no-pipelining schedule; its pipelined schedules of 2021 are not read here)."""
    return bool(getattr(cfg, "torch_ddp", False)) and cfg.dp_overlap and cfg.p == 1


def bucketed(cfg) -> bool:
    """Whether the reduction is priced bucket by bucket here: Megatron-Core's DDP or PyTorch's (:func:`torch_bucketed`)."""
    return cfg.ddp == "megatron" or torch_bucketed(cfg)


def grad_buffer_zero_seconds(cfg, hw, elems: int) -> float:
    """Megatron-Core's DDP zeroing its gradient buffer once an iteration, before the first forward (``training.py``
    ``train_step``: ``model_chunk.zero_grad_buffer()``; ``param_and_grad_buffer.py`` ``reset``:
    ``self.grad_data.zero_()``, at fd5cfec): the stage's ``elems`` weights (all of them: every data rank holds the
    whole buffer, the distributed optimizer only reduce-scatters into it) x the gradient's bytes written, one kernel
    (0 without ``ddp="megatron"`` or a profile)."""
    if cfg.ddp != "megatron" or hw is None or elems == 0:
        return 0.0
    return hw.memory_time(elems * cfg.grad_bytes, kernels=1)


def bucket_elems(cfg) -> int:
    """Elements of one gradient bucket: PyTorch DDP's 25 MiB of ``grad_bytes`` gradients (:func:`torch_bucketed`);
    else ``ddp_bucket_size``, or Megatron-Core's default ``max(40M, 1M x dp)``, dp the data-parallel ranks
    (``get_data_parallel_world_size()``, context parallelism not counted)."""
    if torch_bucketed(cfg):
        return TORCH_BUCKET_BYTES // cfg.grad_bytes
    return cfg.ddp_bucket_size or max(DEFAULT_BUCKET, BUCKET_PER_RANK * cfg.d)


def buckets(params: list[tuple[int, float]], size: int, first: int = 0) -> list[tuple[int, float]]:
    """The buckets of ``params`` (elements, time its gradient is ready), in backward order: a bucket takes
    parameters until it holds ``size`` elements at least (the first one ``first``, where given: PyTorch's); each is
    (elements, time its last gradient is ready)."""
    out, held, ready = [], 0, 0.0
    for elems, at in params:
        held, ready = held + elems, at
        if held >= (first if first and not out else size):
            out.append((held, ready))
            held = 0
    return out + ([(held, ready)] if held else [])


def layer_pieces(weight: int, start: float, span: float, size: int) -> list[tuple[int, float]]:
    """A layer's ``weight`` gradients made from ``start`` over ``span`` seconds in proportion to the weights, in
    pieces of at most ``size`` elements (exact ints; the last piece takes the remainder), each with its ready time."""
    n = max(1, -(-weight // size)) if size else 1
    cuts = [weight * i // n for i in range(n + 1)]
    return [(cuts[i + 1] - cuts[i], start + span * cuts[i + 1] / weight if weight else start) for i in range(n)]


def reduce_exposed(launches: list[tuple[float, float]]) -> float:
    """Seconds past the end of the backward (time 0) that collectives launched at ``at <= 0`` take, one after the
    other on one stream: ``launches`` is (launch time, seconds) in launch order."""
    t = -math.inf
    for at, dur in launches:
        t = max(t, at) + dur
    return max(0.0, t)


def gather_exposed(needs: list[tuple[float, float]]) -> float:
    """Seconds the forward waits for all-gathers needed at ``need >= 0`` (from its start), in forward order: the
    first two launched at the start, each next one when the one before it is needed (prefetched one ahead), one
    after the other on one stream; a wait delays every later need."""
    comm, delay = 0.0, 0.0
    for i, (need, dur) in enumerate(needs):
        launch = 0.0 if i < 2 else needs[i - 1][0] + delay
        comm = max(comm, launch) + dur
        delay = max(delay, comm - need)
    return delay


def stage_units(cfg, stage: int, layers: int, weight: int, extra: tuple, span: float) -> list[tuple[int, float]]:
    """The gradient units of ``stage`` (elements, time each is ready before the stage's end, as a negative time)
    in backward order: ``extra`` = (LM head elements, embedding elements) on the stage, ``span`` its last
    micro-batch's backward (interleaved: one chunk's). Bucketed on the first stage's first chunk only."""
    head, emb = extra
    v, p = cfg.interleave, cfg.p
    if v > 1:  # chunk c's whole reduction after its last backward, c p chunk-backwards before the end
        bounds = [layers * c // v for c in range(v + 1)]
        chunks = [(bounds[c + 1] - bounds[c]) * weight + (emb if c == 0 else 0) + (head if c == v - 1 else 0)
                  for c in range(v)]
        return [(chunks[c], -(c * p + (stage if c == 0 else 0)) * span) for c in reversed(range(v))]
    if stage > 0:  # one bucket, after the stage's last backward, s slots before the first stage's end
        return [(layers * weight + head + emb, -stage * span)]
    layer_s = span / max(1, layers)
    size = bucket_elems(cfg)
    if torch_bucketed(cfg):  # PyTorch DDP: buckets far smaller than a layer, the first of 1 MiB
        emb += getattr(cfg, "extra_weight_elems", 0)  # a model's own weights outside its layers: made last
        params = ([(head, -span)] if head else []) + [
            piece for i in range(layers) for piece in layer_pieces(weight, -span + i * layer_s, layer_s, size)]
        return buckets(params + ([(emb, 0.0)] if emb else []), size, TORCH_FIRST_BUCKET_BYTES // cfg.grad_bytes)
    params = ([(head, -span)] if head else []) + [(weight, -span + (i + 1) * layer_s) for i in range(layers)]
    return buckets(params + ([(emb, 0.0)] if emb else []), size)


def stage_exposed(cfg, topo, stage: int, layers: int, weight: int, extra: tuple, f_span: float,
                  b_span: float) -> tuple[float, float, float]:
    """(reduce-scatter, all-gather, overlapped) seconds of ``stage``: what its collectives expose beyond its
    compute, and how long they ran beside it (the reduce-scatters before the backward's end, the prefetched
    all-gathers under the forward); ``f_span`` / ``b_span``: a micro-batch's forward / backward on the stage
    (interleaved: one chunk's)."""
    units = stage_units(cfg, stage, layers, weight, extra, b_span)
    launches = [(at, _seconds(cfg, topo, "reduce_scatter", e)) for e, at in units]
    rs = reduce_exposed(launches)
    beside = max(0.0, sum(dur for _, dur in launches) - rs)
    if cfg.zero_stage != 1:
        return rs, 0.0, beside
    fwd = [(_seconds(cfg, topo, "all_gather", e), at) for e, at in reversed(units)]  # forward order
    if not cfg.overlap_param_gather:
        return rs, sum(dur for dur, _ in fwd), beside
    ag = gather_exposed(gather_needs(cfg, stage, fwd, f_span, b_span))
    return rs, ag, beside + max(0.0, sum(dur for dur, _ in fwd) - ag)


def gather_needs(cfg, stage: int, fwd: list, f_span: float, b_span: float) -> list[tuple[float, float]]:
    """(time the forward needs it, seconds) of each all-gather in ``fwd`` ((seconds, ready time of its gradient)
    in forward order): interleaved, chunk ``c`` at the stage's ``c p + s``-th chunk-forward (the first two
    gathered from the schedule's start); without interleaving the first stage's buckets as the forward reaches
    them (a gradient made ``r`` before the backward's end is the forward's ``1 - r / b_span`` of the way), another
    stage's one bucket at its first forward, gathered then."""
    if cfg.interleave > 1:
        return [((c * cfg.p + stage) * f_span, dur) for c, (dur, _) in enumerate(fwd)]
    if stage > 0 or not b_span:
        return [(0.0, dur) for dur, _ in fwd]
    return [(f_span * (-at / b_span), dur) for dur, at in fwd]


def _seconds(cfg, topo, kind: str, elems: int) -> float:
    """One reduce-scatter of ``elems`` gradients (``grad_bytes`` each) or all-gather of bf16 parameters over the
    sharding group."""
    if kind == "all_gather":
        return seconds(topo, Collective("parameters", kind, 2 * elems, shard_groups(cfg), "iteration"))
    if cfg.zero_stage == 0:  # replicated optimizer: the gradients all-reduced
        return seconds(topo, Collective("gradients", "all_reduce", cfg.grad_bytes * elems, grad_groups(cfg), "iteration"))
    return seconds(topo, Collective("gradients", kind, cfg.grad_bytes * elems, shard_groups(cfg), "iteration"))


def stage_extra(cfg, stage: int, elems: int) -> tuple[int, int]:
    """(LM head, word embedding) elements of ``stage``'s ``elems`` outside its layers
    (:func:`.sharding.optimizer_extra_elems`): the embedding on the first stage, the head on the last, both on a
    single untied stage (a tied one: one weight, its gradient complete only after the embedding's backward)."""
    if cfg.p == 1:
        return (0, elems) if cfg.tied_embedding else (elems // 2, elems - elems // 2)
    return (0, elems) if stage == 0 else (elems, 0)


def dp_overlap_exposed(cfg, topo, weight: int, stages: list[dict], extra_of,
                       sms: tuple[int, int] = (0, 0)) -> tuple[float, float, float]:
    """(reduce-scatter, all-gather, SM share) seconds the iteration waits for beyond the schedule: the most any
    stage exposes (``stages``: compose's per-stage dicts, ``layers``, ``f_s`` and ``b_s`` per micro-batch;
    ``extra_of(s)``: the stage's elements outside its layers), and what the compute beside the overlapped
    collectives loses to their NCCL kernels on ``sms`` = (n, S) (:func:`.sm_share.overlap_tax`)."""
    v, rs, ag, tax = cfg.interleave, 0.0, 0.0, 0.0
    for s, st in enumerate(stages):
        r, a, beside = stage_exposed(cfg, topo, s, st["layers"], weight, stage_extra(cfg, s, extra_of(s)),
                                     st["f_s"] / v, st["b_s"] / v)
        rs, ag, tax = max(rs, r), max(ag, a), max(tax, overlap_tax(beside, sms))
    return rs, ag, tax
