"""PyTorch's async tensor parallelism (torchtitan's ``experimental.enable_async_tensor_parallel``): Inductor's
micro-pipeline TP pass fusing an all_gather with the matmuls it feeds, and a matmul with the reduce_scatter it
feeds, into symmetric-memory kernels that move one shard at a time while the previous shard's matmul runs.

torchtitan (``parallelize_llama.py``, ``apply_tp``) turns it on with ``torch._inductor.config._micro_pipeline_tp =
True`` and ``enable_symm_mem_for_group`` on the tensor group, and needs ``torch.compile`` (the pass is an Inductor
post-grad pass: ``torch/_inductor/fx_passes/micro_pipeline_tp.py``, ``micro_pipeline_tp_pass``). The pass, on the
forward and the backward graph alike:

* ``fuse_all_gather_matmul``: an all_gather (``_c10d_functional.all_gather_into_tensor`` and its wait) whose result
  is the *left* operand of one or more ``mm`` (or reshape -> mm -> reshape) becomes one ``fused_all_gather_matmul``
  over all of them (the QKV projection's three matmuls, SwiGLU's w1 and w3: one fused op each);
* ``fuse_matmul_reduce_scatter``: a reduce_scatter whose input is *produced by a matmul* (``_find_producer_matmul``:
  ``mm`` or reshape -> mm -> reshape, used once) becomes ``fused_matmul_reduce_scatter``; any other producer (an
  ``add``) is left alone ("no producer matmul found for reduce scatter").

On torchtitan's Llama block with sequence parallelism (``PrepareModuleInput`` all-gathering the norm's output,
``ColwiseParallel`` wq / wk / wv / w1 / w3, ``RowwiseParallel(output_layouts=Shard(1))`` wo / w2) that fuses, per
layer and micro-batch: forward, the QKV and w1/w3 all_gathers (``qkv_fprop``, ``fc1_fprop``) and the wo and w2
reduce_scatters (``proj_fprop``, ``fc2_fprop``); backward, the all_gathers of the output gradients into the wo and
w2 data-gradient matmuls (``proj_dgrad``, ``fc2_dgrad``: the gathered gradient is their left operand; the weight
gradient reads it transposed, from the fused op's returned A). It cannot fuse the backward's two reduce_scatters:
the gradient of the all-gathered norm output is the *sum* of the QKV's three (w1 / w3's two) data-gradient matmuls,
an ``add``, not a matmul: those two stay plain collectives, traced and waited for where they are issued (torch.compile
without ``reorder_for_compute_comm_overlap``: :mod:`.traced_waits`), exposed whole. Full recompute re-runs the
forward's fused pairs in the backward graph but w2's (``fc2_fprop``): the partitioner recomputes what the backward
reads, not the block's last matmul and its reduce_scatter (:func:`.recompute.compiled_full`). No all_gather
re-gathers the norm's output for the weight gradients (Megatron's sequence-parallel linears save the shard and
gather it again, :func:`.compose.tp_collectives`): autograd keeps the gathered input the matmul read (with full
recompute, the recomputed forward's gather).

The fused kernels (``torch/distributed/_symmetric_memory/__init__.py``, as read in a torch-2.5-era copy, the
torchtitan paper's (arXiv 2410.06511) time: bf16 ``mm`` only; later copies add ``fused_all_gather_scaled_matmul`` /
``fused_scaled_matmul_reduce_scatter`` for float8's ``_scaled_mm`` with the same pipelining, which float8 rows are
priced as, their gathered shards fp8 under torchao's float8 TP: :mod:`.fp8_gather`), ``t`` the tensor degree:

* ``_pipelined_all_gather_and_consume``: the matmul of the *local* shard first, while the shard is copied to the
  rank's symmetric buffer; then ``t - 1`` steps, each pulling one peer's shard (``S/t`` bytes: ``Tensor.copy_``
  from the peer's buffer, the copy engine, no SM) and multiplying it, on two alternating streams, so the next
  shard's pull runs beside this shard's matmul. Exposed: ``(t - 1) max(0, c - G/t)`` (TE's ring exchange's
  formula, :func:`.tp_overlap.exposed` ``ring_ag``: the same overlap, pulls from each peer in turn where TE passes
  shards round a ring, one ``S/t`` transfer a step either way);
* ``_pipelined_produce_and_all2all`` (the reduce_scatter): ``t - 1`` steps, each computing the partial product of
  one peer's rows into a symmetric buffer, a barrier, then pulling the partial a peer made for this rank (copy
  engine) while the next partial computes; the local partial last, beside the last pull. Exposed:
  ``(t - 1) max(0, c - G/t)`` (no trailing transfer: TE's ring ``reduce_scatter`` sends its last chunk after the
  last GEMM, here the local chunk hides it), then ``torch.sum`` of the ``t`` stacked partials (bf16, the output's
  dtype): one memory-bound kernel reading ``t`` partials of ``S/t`` bytes and writing ``S/t``
  (:func:`reduce_pass_seconds`), in series.

Where torch differs from Transformer Engine's userbuffers (:mod:`.tp_overlap`): copies by the copy engine in both
directions (TE's pipelined reduce_scatter and bulk overlaps take 16 SMs: not charged here); ``t`` chunks for every
fused pair (TE's pipelined reduce_scatter: 4); the reduce_scatter's final sum as a separate pass (TE's ring
exchange adds as it receives); no bulk pairs (TE overlaps the backward's re-gather and the data gradient's
reduce_scatter with the other GEMM; torch leaves the latter unfused, exposed). The ``t`` chunks' matmuls run on
:data:`SYMM_STREAMS` streams in turn, so together they take the whole GEMM's seconds
(:func:`.tp_overlap.chunked_seconds`, as TE's userbuffers chunks on its 3 streams):
``_pipelined_multi_all_gather_and_consume`` runs the local shard's consumer on the current stream, then step ``s``'s
pull and consumer on the backend stream (odd ``s``) or the current one (even), a consumer waiting only for its own
pull, "computation/computation overlapping, greatly reducing quantization inefficiency" (its comment);
``_pipelined_produce_and_all2all`` alternates its producers the same way (torch/distributed/_symmetric_memory/
__init__.py, read at 006b161 and in an earlier copy with the ``torch.cuda`` stream calls; the two alternating streams
are in the torch-2.5-era copy read above, before 1963fc8).
The per-step barriers (a few microseconds) are not charged. ESTIMATE: the whole GEMM's seconds are the ideal, a lower
bound: the local shard's consumer runs first with nothing beside it, and a barrier follows each producer of
``_pipelined_produce_and_all2all``, so not every chunk's tail wave finds another chunk to share the SMs with (the t
chunks in series, ``t x chunk``, the upper bound).
"""
from __future__ import annotations

from .fp8_gather import tp_bytes
from .recompute import compiled_full
from .tp_overlap import chunked_seconds, exposed

#: The streams PyTorch's symmetric-memory pipelines run a fused pair's shard matmuls on, in turn (the current stream
#: and ``_get_backend_stream()``: ``_pipelined_multi_all_gather_and_consume``, ``_pipelined_produce_and_all2all``)
SYMM_STREAMS = 2
#: The fused pairs, forward: (GEMM, collective) (.tp_overlap's LINEARS names: TE's)
FORWARD = (("qkv_fprop", "all_gather"), ("proj_fprop", "reduce_scatter"), ("fc1_fprop", "all_gather"),
           ("fc2_fprop", "reduce_scatter"))
#: The fused pairs of the backward: the output gradients' all_gathers into the data-gradient matmuls
BACKWARD = (("fc2_dgrad", "all_gather"), ("proj_dgrad", "all_gather"))
#: The backward's collectives left unfused (their input an add of matmuls): (kind, count) per layer, exposed whole
UNFUSED_BACKWARD = (("reduce_scatter", 2),)


def reduce_pass_seconds(hw, s: int, t: int) -> float:
    """The fused reduce_scatter's final ``torch.sum`` over its ``t`` stacked partials: ``s`` bytes read (``t`` of
    ``s/t``), ``s/t`` written, one kernel, on ``hw``'s memory (0 without a profile)."""
    if hw is None or t == 1:
        return 0.0
    return hw.memory_time(s + s // t, kernels=1)


def pair_seconds(kind: str, gemm: float, chunked: float, t: int, step: float, reduce_pass: float) -> float:
    """Seconds one fused pair exposes beyond its GEMM of ``gemm`` seconds: ``chunked`` the GEMM as its ``t`` chunks
    run (:func:`.tp_overlap.chunked_seconds` on :data:`SYMM_STREAMS`), ``step`` one shard's pull (``S/t`` bytes from
    a peer), ``reduce_pass`` the reduce_scatter's final sum."""
    over = max(0.0, chunked - gemm) + exposed("ring_ag", chunked, t, 0.0, step)
    return over + (reduce_pass if kind == "reduce_scatter" else 0.0)


def async_tp_exposure(cfg, cost, s: int, price, hw=None) -> dict:
    """Exposed tensor-parallel seconds of one layer and micro-batch, by phase (``forward``, ``backward``), with
    PyTorch's async TP. ``s``: the bytes of the activation a collective moves (S); ``price(kind, nbytes, groups)``:
    one collective's seconds on the system's network; ``hw``: the profile the reduce pass runs on."""
    t = cfg.t
    if t == 1:
        return {"forward": 0.0, "backward": 0.0}
    group = (tuple(range(t)),)
    # one shard pulled from a peer: S/t (torchao's float8 TP: the all-gathers' S at 1 byte an element, .fp8_gather)
    step = {k: price("collective_permute", tp_bytes(cfg, k, s) // t, ((0, 1),))
            for k in ("all_gather", "reduce_scatter")}
    rpass = reduce_pass_seconds(hw, s, t)
    lin = cost.linear_s or {}

    def pair(g: str, kind: str) -> float:
        whole = lin.get(g, 0.0)
        chunked = chunked_seconds(whole, lin.get(f"{g}@{t}", whole / t), t, SYMM_STREAMS)  # the GEMM as its chunks run
        return pair_seconds(kind, whole, chunked, t, step[kind], rpass)

    def total(pairs) -> float:
        return sum(pair(g, kind) for g, kind in pairs)

    fwd = total(FORWARD)
    unfused = sum(n * price(kind, tp_bytes(cfg, kind, s), group) for kind, n in UNFUSED_BACKWARD)
    rec = total(FORWARD[:-1]) if compiled_full(cfg) else fwd if cfg.recompute == "full" else 0.0  # (w2's pair not)
    return {"forward": fwd, "backward": total(BACKWARD) + unfused + rec}
