"""Tensor-parallel serving: a step's time over ``tp`` GPUs of one node, as the serving libraries run it.

Megatron's split (vLLM's ``ColumnParallelLinear`` / ``RowParallelLinear``): every GPU runs the same kernels on
``1/tp`` of the heads and of the MLP's width, so each fitted kernel's FLOPs and bytes are divided by ``tp``
(:meth:`~.stepmodel.Rates.time_s`; its fixed memory cost and its launch are not), and the hidden state of the
step's ``N`` query tokens is all-reduced twice per layer (after attention's output projection and after the
MLP's down projection): ``2 x layers`` all-reduces of ``N x hidden x itemsize`` bytes, each priced by the
algorithm the library picks at that size (:mod:`mhlo_cost.network.allreduce`: vLLM's one-shot / two-shot custom
all-reduce, NCCL's ring otherwise). The weights and the KV cache are split ``tp`` ways (the heads and key/value
heads must divide by ``tp``). The activations the server reserves are those of one worker's sharded model
(:func:`activations_per_device`): vLLM profiles a forward on every worker (``gpu_worker.py``,
``determine_available_memory``), each holding ``1/tp`` of the heads and of the MLP's width.

This scales the fitted one-device step; it is not a sharded lowering: embedding, norms and the logits' head are
divided as well (vLLM splits the vocabulary of both embeddings; the norms are a small part).

The decode attention kernel a library runs decides how often the KV cache is read (:func:`kv_reads`): the fitted
step's fused attention reads each cached key and value once, as a kernel does that computes every query head of
a key/value group from one read of the group's cache (TensorRT-LLM's XQA, FlashAttention's and FlashInfer's
decode kernels). Kernels with one thread block per query head read the group's cache once per query head:
TensorRT-LLM up to v0.6's masked multi-head attention (``decoderMaskedMultiheadAttentionTemplate.h`` at
138f96d45f90b9667426f7c47297d8c06bafac73: ``hi = blockIdx.x``, ``hi_kv = hi / qhead_per_kv``, each block loading
its sequence's keys and values of ``hi_kv``), and TurboMind v0.1's decoder attention computes ``HeadPerCta`` = 4
query heads a block for groups that divide by 4 (``decoder_multihead_attention.cu`` at
ebe90bc943eeace841b33fa54fbf1726311b63db), reading an 8-head group's cache twice.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

#: The libraries whose all-reduce choice a tensor-parallel step follows (:func:`mhlo_cost.network.allreduce.choose`).
ALLREDUCE_LIBRARIES = ("vllm", "nccl")


def kv_reads(heads: int, kv_heads: int, heads_per_read: int | None = None) -> int:
    """The times a decode attention kernel reads each cached key and value of a model of ``heads`` query heads
    and ``kv_heads`` key/value heads, where ``heads_per_read`` query heads share one read of their group's cache
    (None: the whole group, one read; 1: one read per query head): ceil(group / heads_per_read), group =
    heads / kv_heads (see the module)."""
    group = max(heads // max(kv_heads, 1), 1)
    if heads_per_read is None:
        return 1
    return -(-group // min(max(heads_per_read, 1), group))


def step_seconds(step_time, tokens: int, context_flops: int, context_bytes: int, longest: int, decoding: int):
    """A step's seconds; a cost whose decode attention reads the cache more than once (``kv_reads``:
    :class:`ShardedStep`) is told the decoding sequences' positions, the only ones it reads again."""
    if getattr(step_time, "kv_reads", 1) == 1:
        return float(step_time(tokens, context_flops, context_bytes, longest))
    return float(step_time(tokens, context_flops, context_bytes, longest, decoding=decoding))


class ShardedStep:
    """The step-cost callable of :func:`.sim.simulate` for ``model`` (a :class:`~.stepmodel.StepModel`) over ``tp``
    GPUs of ``hw``, all-reduces as ``library`` runs them, the attention kernels reading the KV cache ``kv_reads``
    times (:func:`kv_reads`). ``comm(tokens)``: (seconds, algorithm) of a step's all-reduces."""

    def __init__(self, model, hw, tp: int = 1, library: str = "vllm", kv_reads: int = 1):
        if library not in ALLREDUCE_LIBRARIES:
            raise ValueError(f"unknown all-reduce library {library!r}: choose one of {', '.join(ALLREDUCE_LIBRARIES)}")
        self.model, self.hw, self.tp, self.library, self.kv_reads = model, hw, tp, library, kv_reads
        self.comm = lru_cache(maxsize=65536)(self._comm)

    def _comm(self, tokens: int) -> tuple[float, str]:
        from ...network.allreduce import allreduce_time

        if self.tp <= 1:
            return 0.0, "none"
        shape = self.model.shape
        seconds, algorithm = allreduce_time(self.hw, self.tp, tokens * shape["hidden"] * shape["itemsize"],
                                            self.library)
        return 2 * shape["layers"] * seconds, algorithm

    def __call__(self, tokens: int, context_flops: int, context_bytes: int, longest: int,
                 decoding: int | None = None) -> float:
        """``decoding``: the positions of the decoding sequences' caches (the decode attention's, read
        ``kv_reads`` times; a prefill's attention reads its cache once); None: every sequence decodes."""
        return float(self.many(tokens, [context_flops], [context_bytes], [longest],
                               None if decoding is None else [decoding])[0])

    def many(self, tokens: int, context_flops, context_bytes, longest, decoding=None) -> np.ndarray:
        extra = {} if self.kv_reads == 1 else {"kv_reads": self.kv_reads}
        if decoding is not None and self.kv_reads != 1:
            extra["decoding"] = decoding
        return self.model.many(tokens, context_flops, context_bytes, longest, shards=self.tp,
                               **extra) + self.comm(tokens)[0]

    def parts(self, tokens: int, context_flops: int, context_bytes: int, longest: int,
              decoding: int | None = None) -> dict:
        """One step's seconds by part: the kernels' kinds (:meth:`.stepmodel.StepModel.parts`) and "allreduce"."""
        got = self.model.parts(tokens, context_flops, context_bytes, longest, shards=self.tp, kv_reads=self.kv_reads,
                               decoding=None if decoding is None else [decoding])
        return got | {"allreduce": self.comm(tokens)[0]}


def per_device(total: int, tp: int) -> int:
    """A split buffer's bytes on one of ``tp`` GPUs (rounded up)."""
    return -(-total // tp)


def activations_per_device(token_bytes: int, hidden_bytes: int, tp: int) -> int:
    """One worker's activations per token of ``tp`` (bytes, rounded up), from the whole model's ``token_bytes``.

    vLLM sizes the KV cache on each worker after a profiling forward of the worker's own model
    (``vllm/v1/worker/gpu_worker.py``, ``determine_available_memory``: the peak of ``profile_run`` on that
    worker), so the reserve is the sharded model's. In Megatron's split a column-parallel layer's output (the
    query/key/value heads, the MLP's gate and up projections, attention's scores) and the vocabulary-parallel
    logits are ``1/tp`` on each worker, while the residual stream a row-parallel layer all-reduces into is
    whole on every worker: ``hidden_bytes`` (one hidden state of one token) stays, the rest is divided."""
    if tp <= 1:
        return token_bytes
    whole = min(hidden_bytes, token_bytes)
    return whole + per_device(token_bytes - whole, tp)
