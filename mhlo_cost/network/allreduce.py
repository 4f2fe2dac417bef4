"""The all-reduce a serving library runs for a tensor-parallel step's small messages, and its time.

vLLM (``csrc/custom_all_reduce.cuh`` at 036bb685581dbedcd6cf7fc845fe87268c7d1191, ``CustomAllreduce::allreduce``;
``vllm/distributed/device_communicators/custom_all_reduce.py`` at 00d618aab60448acdf3fac3e9c4e2e22d0c6c753,
``should_custom_ar``; read, not copied) reduces a message of ``S`` bytes over ``n`` GPUs of one node with its own
peer-to-peer kernels where ``n`` is 2, 4, 6 or 8, the GPUs are joined by NVLink (all to all, or ``n`` = 2;
:func:`all_to_all_links` reads it from the profile's ``link_generation``) and ``S`` is under its buffer
(``max_size`` 8 MiB); NCCL otherwise. Of its kernels:

* **one-shot** (``cross_device_reduce_1stage``): every GPU reads the whole message from each of its ``n - 1``
  peers and reduces it itself: ``(n - 1) S`` bytes into each GPU, one exchange. Taken for ``n = 2``, and on
  NVLink for ``S < 512 KiB`` at ``n <= 4`` or ``S < 256 KiB`` at ``n <= 8``;
* **two-shot** (``cross_device_reduce_2stage``): a reduce-scatter (each GPU reads its ``1/n`` of the message
  from every peer) and an all-gather (it reads the other reduced parts): ``2 (n - 1)/n S`` bytes, two exchanges;
* **ring** (NCCL's, the flat ring the project prices elsewhere): ``2 (n - 1)/n S`` bytes, ``2 (n - 1)`` steps.

Each exchange or ring step costs the profile's ``hop_latency`` and the bytes its ``link_bandwidth``
(:meth:`mhlo_cost.machines.profile.Hardware.comm_time`). The latency terms are the model's: the kernels' own
barrier flags (a start and an end flag per exchange) are taken as one hop each exchange.
"""
from __future__ import annotations

#: The algorithms, and the libraries whose choice :func:`choose` follows.
ALGORITHMS = ("one-shot", "two-shot", "ring")
LIBRARIES = ("vllm", "nccl")
#: vLLM's custom all-reduce: the world sizes it runs, its buffer (bytes) and its one-shot limits.
CUSTOM_SIZES = (2, 4, 6, 8)
CUSTOM_MAX_BYTES = 8192 * 1024
ONE_SHOT_BELOW = ((4, 512 * 1024), (8, 256 * 1024))


def choose(n: int, nbytes: int, library: str = "vllm", nvlink: bool = True) -> str:
    """The algorithm ``library`` runs for an all-reduce of ``nbytes`` over ``n`` GPUs of one node (``nvlink``:
    joined by NVLink, all to all)."""
    if library not in LIBRARIES:
        raise ValueError(f"unknown all-reduce library {library!r}: choose one of {', '.join(LIBRARIES)}")
    if library == "nccl" or n not in CUSTOM_SIZES or nbytes >= CUSTOM_MAX_BYTES or nbytes % 16:
        return "ring"
    if n == 2:
        return "one-shot"
    if not nvlink:
        return "ring"
    if any(n <= most and nbytes < below for most, below in ONE_SHOT_BELOW):
        return "one-shot"
    return "two-shot"


def traffic(algorithm: str, n: int, nbytes: int) -> tuple[int, int]:
    """(bytes into one GPU, rounded up to a whole byte; latency steps) of one all-reduce of ``nbytes`` over
    ``n`` GPUs by ``algorithm``."""
    if n <= 1:
        return 0, 0
    if algorithm == "one-shot":
        return (n - 1) * nbytes, 1
    if algorithm == "two-shot":
        return -(-2 * (n - 1) * nbytes // n), 2
    if algorithm == "ring":
        return -(-2 * (n - 1) * nbytes // n), 2 * (n - 1)
    raise ValueError(f"unknown all-reduce algorithm {algorithm!r}: choose one of {', '.join(ALGORITHMS)}")


def all_to_all_links(hw) -> bool:
    """Whether ``hw``'s GPUs of one node are joined all to all (NVLink through NVSwitch, Infinity Fabric), which
    vLLM's custom all-reduce needs beyond 2 GPUs: not where the profile's ``link_generation`` names PCIe or an
    NVLink bridge (which joins pairs)."""
    gen = (getattr(hw, "link_generation", "") or "").lower()
    return not (gen.startswith("pcie") or "bridge" in gen)


def allreduce_time(hw, n: int, nbytes: int, library: str = "vllm") -> tuple[float, str]:
    """(seconds, algorithm) of one all-reduce of ``nbytes`` over ``n`` GPUs on ``hw`` as ``library`` runs it."""
    if n <= 1:
        return 0.0, "none"
    algorithm = choose(n, nbytes, library, nvlink=all_to_all_links(hw))
    moved, steps = traffic(algorithm, n, nbytes)
    return hw.comm_time(moved, steps), algorithm
