"""Communication kernels take SMs from the compute they overlap.

NCCL runs a collective as a CUDA kernel of one thread block (CTA) per channel, each on an SM of its own while the
collective runs; the number of channels is the ring graph's, doubled (``ncclTopoPostset``, ``src/graph/connect.cc``:
"we double the number of channels ... to increase efficiency"; NCCL's maintainer on quadrupling it: "that would use
twice as many GPU SMs when running", NVIDIA/nccl issue #524). NCCL's own logs give the counts of the systems priced
here: 24 ring channels on an 8-GPU A100 NVSwitch node (NV12; NVIDIA/nccl issue #578: ``Channel 00/24``) and 16 on
H100 / H800 nodes, within a node and across nodes (issue #892, H800: ``16 coll channels``; issue #1453, H100 on 3
nodes: ``Channel 00/16``). A GEMM's thread blocks (cuBLAS / CUTLASS tiles holding most of an SM's shared memory)
cannot share an SM with them, so while an overlapped collective runs the GEMMs beside it run on the SMs left.
Megatron-Core queues its overlapped collective ahead of the compute it overlaps (``megatron/core/tensor_parallel/
layers.py``: "we rely on CUDA_DEVICE_MAX_CONNECTIONS=1 to ensure that the gather is scheduled before the input
gradient computation"), so the collective's blocks are resident first and the compute takes the SMs they leave.

Transformer Engine's userbuffers (``tp_comm_overlap``) choose their SMs per collective
(``transformer_engine/pytorch/module/base.py``, ``initialize_ub``'s defaults): 16 SMs (``num_sm``) for the
pipelined and bulk overlaps, and, for the pipelined one, the GEMM launched on the others (``set_sm_margin``: cuBLAS
given ``sm_count - num_sm`` SMs for the whole GEMM, whether the chunk's collective runs or not); the ring exchange
sends by the copy engine (``use_ce``), no SM. NeMo's / Megatron-Bridge's ``userbuffers_*_h100_*`` configurations set
2 to 24 SMs per collective and ``set_sm_margin`` on the pipelined ones only (their bulk overlaps contend); the
defaults are taken here (the configuration of a row is not known per collective).

Two closed forms, ``S`` the chip's SMs (the GEMM model's ``compute_units``), ``n`` the communication kernel's:

* contended (NCCL, a bulk overlap): compute of ``G`` seconds (on all SMs) beside a collective of ``C`` seconds
  started with it runs at ``(S - n)/S`` of its rate while the collective runs, so the pair takes
  ``max(C, G + C n / S)``;
* margin (a pipelined userbuffers overlap): the GEMM runs on ``S - n`` SMs throughout: ``G S / (S - n)``.

A chip of another SM count, or a profile without a GEMM model, is charged nothing (its channels are not known).
"""
from __future__ import annotations

#: NCCL's ring channels (one CTA and SM each while a collective runs) by the chip's SM count: A100 (108 SMs, 24
#: channels: nccl#578) and H100 / H800 / H200 (132 SMs, 16: nccl#892, nccl#1453)
NCCL_CHANNELS = {108: 24, 132: 16}
#: Transformer Engine's userbuffers SMs per method (``initialize_ub``'s defaults; the ring exchange: copy engine)
TE_SMS = {"pipeline": 16, "bulk": 16, "ring_exchange": 0}


def chip_sms(hw) -> int:
    """The SMs of ``hw``'s chip (its GEMM model's compute units; 0 without one)."""
    gemm = getattr(hw, "gemm", None)
    return int(getattr(gemm, "compute_units", 0) or 0) if gemm is not None else 0


def nccl_sms(hw) -> tuple[int, int]:
    """(SMs an NCCL collective takes, the chip's SMs) on ``hw``; (0, S) where the channels are not known."""
    total = chip_sms(hw)
    return NCCL_CHANNELS.get(total, 0), total


def contended(compute: float, comm: float, n: int, total: int) -> float:
    """Seconds of ``compute`` (seconds on all ``total`` SMs) and a collective of ``comm`` seconds on ``n`` of the
    SMs, started together: ``max(comm, compute + comm n / total)`` (``max(compute, comm)`` where n is 0)."""
    if n <= 0 or total <= n:
        return max(compute, comm)
    return max(comm, compute + comm * n / total)


def taxed(compute: float, comm: float, sms: tuple[int, int]) -> float:
    """Seconds ``comm`` exposes beyond ``compute`` it overlaps on ``sms`` = (n, S): :func:`contended` less the
    compute (``max(0, comm - compute)`` where n is 0)."""
    return contended(compute, comm, *sms) - compute


def margin(compute: float, n: int, total: int) -> float:
    """Seconds of ``compute`` (on all ``total`` SMs) run on ``total - n`` of them: ``compute total / (total - n)``."""
    if n <= 0 or total <= n:
        return compute
    return compute * total / (total - n)


def overlap_tax(overlapped: float, sms: tuple[int, int]) -> float:
    """Seconds a collective's ``overlapped`` seconds (those that ran beside compute) add to that compute on
    ``sms`` = (n, S): ``overlapped n / S`` (the compute outlasting the collective: :func:`contended`)."""
    n, total = sms
    return overlapped * n / total if total > n > 0 else 0.0
