"""The server a serving simulation runs: its knobs as vLLM names them (:class:`ServerConfig`) and its memory as vLLM
accounts for it (:func:`memory`: the KV blocks left beside the weights, the profiled activations and the reserve).
"""
from __future__ import annotations

from dataclasses import dataclass

from .simload import LoadError

GIB = 1 << 30


@dataclass(frozen=True)
class ServerConfig:
    """The server's knobs (vLLM's names and defaults): ``max_num_batched_tokens`` 8192, ``max_num_seqs`` 256,
    ``block_size`` 16, ``gpu_memory_utilization`` 0.9; ``reserve_bytes``: CUDA graphs and memory outside torch
    (assumed 1 GiB where not given: vLLM measures it on the device); ``num_gpu_blocks``: the KV blocks given
    outright (vLLM's ``num_gpu_blocks_override``; a server that is told its block count, as TurboMind's
    ``cache_max_entry_count`` above 1), None: from the memory."""

    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    reserve_bytes: int = GIB
    num_gpu_blocks: int | None = None

    def __post_init__(self):
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size", "num_gpu_blocks"):
            v = getattr(self, name)
            if v is None and name == "num_gpu_blocks":
                continue
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise LoadError(f"--{name.replace('_', '-')} must be a whole number >= 1, got {v!r}")
        u = self.gpu_memory_utilization
        if not (isinstance(u, (int, float)) and 0 < u <= 1):
            raise LoadError(f"--gpu-memory-utilization must be in (0, 1], got {u!r}")
        if not isinstance(self.reserve_bytes, int) or self.reserve_bytes < 0:
            raise LoadError(f"the CUDA-graph reserve must be a whole number of bytes >= 0, got {self.reserve_bytes!r}")


@dataclass(frozen=True)
class Memory:
    """The device's memory as the server holds it (bytes, exact ints) and the KV blocks it gives."""

    capacity: int
    budget: int  # capacity x gpu_memory_utilization
    weights: int
    activations: int  # the profiled forward's peak: max_num_batched_tokens tokens
    reserve: int  # CUDA graphs and memory outside torch
    kv_bytes: int  # what is left for the KV cache
    block_bytes: int
    blocks: int


def memory(cfg: ServerConfig, capacity: int, weights: int, kv_token_bytes: int, activation_token_bytes: int) -> Memory:
    """vLLM's accounting (``vllm/v1/worker/gpu_worker.py``, ``determine_available_memory``; the blocks in
    ``vllm/v1/core/kv_cache_utils.py``): the KV cache gets the device's memory x ``gpu_memory_utilization`` less
    the weights, the peak of a profiling forward of ``max_num_batched_tokens`` tokens and the memory outside it
    (CUDA graphs, non-torch: ``reserve_bytes``); it is cut into blocks of ``block_size`` tokens of every layer's
    keys and values. A budget that leaves no block is an error. ``cfg.num_gpu_blocks`` given: that many blocks
    (their bytes the KV cache's), the rest as above."""
    from fractions import Fraction

    budget = int(capacity * Fraction(str(cfg.gpu_memory_utilization)))
    acts = activation_token_bytes * cfg.max_num_batched_tokens
    kv = budget - weights - acts - cfg.reserve_bytes
    block = kv_token_bytes * cfg.block_size
    blocks = kv // block if kv > 0 and block > 0 else 0
    if cfg.num_gpu_blocks is not None:
        blocks, kv = cfg.num_gpu_blocks, cfg.num_gpu_blocks * block
    if blocks < 1:
        raise LoadError(f"no KV cache fits: {capacity:,} B x {cfg.gpu_memory_utilization} leaves "
                        f"{kv:,} B after weights {weights:,} B, activations {acts:,} B and the reserve "
                        f"{cfg.reserve_bytes:,} B")
    return Memory(capacity, budget, weights, acts, cfg.reserve_bytes, kv, block, int(blocks))
