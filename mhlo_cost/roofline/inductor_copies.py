"""The copies Inductor makes of a view before an extern GEMM reads it (``--execution inductor``, :mod:`.inductor`).

An extern kernel (``extern_kernels.mm`` / ``bmm`` / ``addmm``, an ATen call) takes real tensors: Inductor's lowering
realizes its inputs (``ExternKernel.realize_input``, ``torch/_inductor/ir.py``): a view it can express as strides on
a stored buffer (a permute, a slice: ``convert_to_reinterpret_view``) is passed as a ``reinterpret_tensor``, and any
other view (a ``View`` whose index is no strided map of its storage: a reshape that regroups permuted dimensions,
``View.create`` reindexing a non-contiguous input) is copied (``copy_input``: a Pointwise copy realized as a buffer
of its own). cuBLAS then takes a strided matrix only row- or column-major. So the views that PyTorch's own matmul
copies (:func:`.strides.copies_of`: a batch or free dimension group that does not fold, a matrix neither row- nor
column-major) are the ones Inductor copies too: the copy is a Triton pointwise kernel, which the scheduler fuses into
its producer where that is a Triton kernel of the same size (the producer writes the copy's layout), and which runs
as a kernel of its own where the copied value comes from an extern kernel (the q, k and v of attention written out
after their linear's GEMM, an attention's output before the projection). An SDPA call's output is left out: the
flash and cuDNN kernels write it as ``(B, N, H, D)`` and return its transpose, so the projection reads it as a view.
"""
from __future__ import annotations

from ..walk.row import short_name
from .strides import copies_of, strides_of

_VIEWS = frozenset({"transpose", "reshape", "bitcast", "broadcast_in_dim", "slice"})


def _source(rows, producers, i: int) -> int | None:
    """The first row before the chain of views ending at row ``i`` (None: a graph input or constant)."""
    seen = set()
    while isinstance(i, int) and i not in seen and short_name(rows[i].op) in _VIEWS:
        seen.add(i)
        ps = producers[i]
        i = ps[0] if ps else None
    return i if isinstance(i, int) else None


def extern_copies(analysis, rows, producers, library: set) -> set[int]:
    """The view rows Inductor copies before an extern GEMM reads them (module docstring): PyTorch's matmul copies
    (:func:`.strides.copies_of`, the walk's ``layouts`` record; none without it) in the chain of views a dot outside
    ``library`` (the rows of library attention kernels) reads, their value not an SDPA call's output."""
    facts = analysis.record("layouts") if hasattr(analysis, "record") else None
    if facts is None:
        return set()
    strides, copying = strides_of(rows, producers, facts)
    found = copies_of(rows, producers, facts, strides, copying, library)
    out = set()
    for i, r in enumerate(rows):
        if r.kind != "dot" or i in library:
            continue
        for p in producers[i]:
            chain = _chain(rows, producers, p)
            if chain and _source(rows, producers, chain[-1]) not in library:
                out.update(v for v in chain if v in found)
    return out


def _chain(rows, producers, i) -> list[int]:
    """The views from row ``i`` back to the row that made their value (``i`` first; empty where ``i`` is none)."""
    out = []
    while isinstance(i, int) and i not in out and short_name(rows[i].op) in _VIEWS:
        out.append(i)
        ps = producers[i]
        i = ps[0] if ps else None
    return out
