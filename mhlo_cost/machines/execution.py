"""Execution models: what a program's time and memory describe (``--execution``), worked out here only.

``eager``: PyTorch eager, one kernel per framework op; ``compiled``: a fusing compiler like XLA (jax.jit):
elementwise chains fused into GEMM epilogues and row reductions, attention one kernel; ``inductor``: the kernels
torch.compile's Inductor makes (pointwise and reduction fusion by its scheduler's rules, GEMMs as library calls,
its SDPA rewrite of written-out attention, a compiled kernel's launch; CUDA graphs as an option);
``unfused``: every IR op its own kernel. The older ``--fuse``
names two of them (``none``: unfused, ``elementwise``: compiled). Standard library only: a study asks for its
execution model before the walk, without importing the estimate (and pandas).
"""
from __future__ import annotations

EXECUTIONS = ("eager", "compiled", "inductor", "unfused")


def execution_of(fuse_mode: str | None = "none", execution: str | None = None) -> str:
    """The execution model named by ``execution``, else the one ``--fuse`` maps onto (none: unfused,
    elementwise: compiled)."""
    if execution is not None:
        if execution not in EXECUTIONS:
            raise ValueError(f"unknown execution model {execution!r}: choose one of {', '.join(EXECUTIONS)}")
        return execution
    return "compiled" if (fuse_mode or "none") == "elementwise" else "unfused"


def memory_suffix(execution: str) -> str:
    """The suffix of an execution model's memory figures (``peak_bytes<suffix>``, ``fits<suffix>``,
    ``margin_bytes<suffix>``, ``peak_op<suffix>``, the block table's and the timeline's columns): ``_fused`` for
    ``compiled`` (the name it has always had), ``_<execution>`` for any other (``peak_bytes_eager``); "" for
    ``unfused`` (the plain figures)."""
    return "" if execution == "unfused" else "_fused" if execution == "compiled" else f"_{execution}"


def memory_suffixes() -> tuple:
    """Every execution model's memory suffix (:func:`memory_suffix`), the plain one left out."""
    return tuple(s for s in map(memory_suffix, EXECUTIONS) if s)
