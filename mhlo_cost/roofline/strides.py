"""Strides of the tensors of an eager PyTorch program, and the copies PyTorch makes of non-contiguous ones (issue 35).

In eager PyTorch a ``permute``, ``expand``, ``view`` or basic indexing is a view: the same storage read through
other strides. The IR (a torchax lowering) writes them as ``transpose``, ``broadcast_in_dim``, ``reshape`` and
``slice``, and writes nothing for ``.contiguous()``. :func:`strides_of` follows each value's strides as PyTorch
would have them, from the walk's ``layouts`` record (:mod:`mhlo_cost.walk.layouts`: the permutations, broadcast
dimensions, slice steps and dot dimensions the rows do not carry), and :func:`copies_of` names the rows where
PyTorch launches a copy kernel (``at::clone(..., MemoryFormat::Contiguous)``, one read and one write of the tensor):

* a ``reshape`` / ``view`` that cannot be expressed on its operand's strides: PyTorch's own stride rule
  (``at::detail::computeStride``, aten/src/ATen/TensorUtils.cpp; ``reshape`` copies where it returns nothing,
  aten/src/ATen/native/TensorShape.cpp ``_reshape_alias`` against ``_unsafe_view(self.clone(contiguous))``;
  ``x.permute(...).contiguous().view(...)`` has the same copy, the IR keeping only the reshape);
* an operand of a matmul whose batch dimensions do not fold into one (``at::matmul`` reshapes them to one
  dimension, aten/src/ATen/native/LinearAlgebra.cpp ``_matmul_impl``: a copy where that reshape is not a view)
  or whose matrix is neither row- nor column-major (cuBLAS takes a transpose flag and a leading dimension, not
  arbitrary strides: aten/src/ATen/native/cuda/Blas.cpp ``prepare_matrix_for_cublas`` /
  ``prepare_batch_matrix_for_cublas`` clone the others contiguous).

An elementwise op (TensorIterator) reads its operands through their strides and writes an output laid out as
its first full operand (``TensorIteratorBase::reorder_dimensions`` / ``compute_strides``: an op on a permuted
tensor returns a permuted, dense tensor); any other kernel writes a contiguous result.
"""
from __future__ import annotations

from ..walk.row import short_name
from .eager_calls import call_key

#: Ops whose result PyTorch lays out as its operands (TensorIterator's elementwise loops).
_ELEMENTWISE_KINDS = frozenset({"elementwise", "transcendental"})
_ELEMENTWISE_OPS = frozenset({"convert", "select", "clamp", "compare", "negate", "abs"})


def contiguous(shape) -> tuple:
    """Row-major strides (in elements) of ``shape``."""
    out, acc = [], 1
    for d in reversed(tuple(shape)):
        out.append(acc)
        acc *= max(int(d), 1)
    return tuple(reversed(out))


def view_strides(old_shape, old_strides, new_shape) -> tuple | None:
    """The strides of ``new_shape`` viewed on a tensor of ``old_shape`` / ``old_strides``, or None where no view
    exists (PyTorch's ``computeStride``: each run of dimensions that is contiguous in memory may be split or merged,
    nothing across runs)."""
    old_shape, old_strides, new_shape = tuple(old_shape), tuple(old_strides), tuple(new_shape)
    if not old_shape or 0 in old_shape:
        return contiguous(new_shape)
    new = [0] * len(new_shape)
    view_d, chunk = len(new_shape) - 1, old_strides[-1]
    tensor_n = view_n = 1
    for d in range(len(old_shape) - 1, -1, -1):
        tensor_n *= old_shape[d]
        if d == 0 or (old_shape[d - 1] != 1 and old_strides[d - 1] != tensor_n * chunk):
            while view_d >= 0 and (view_n < tensor_n or new_shape[view_d] == 1):
                new[view_d] = view_n * chunk
                view_n *= new_shape[view_d]
                view_d -= 1
            if view_n != tensor_n:
                return None
            if d > 0:
                chunk, tensor_n, view_n = old_strides[d - 1], 1, 1
    return tuple(new) if view_d == -1 else None


def dense_like(shape, strides) -> tuple:
    """A dense tensor of ``shape`` laid out in the memory order of ``strides`` (TensorIterator's output)."""
    order = sorted(range(len(shape)), key=lambda d: (strides[d], -d))  # innermost first; ties: the later inner
    out, acc = [0] * len(shape), 1
    for d in order:
        out[d] = acc
        acc *= max(int(shape[d]), 1)
    return tuple(out)


def _expanded(op_shape, op_strides, dims, out_shape) -> tuple:
    out = [0] * len(out_shape)
    for j, d in enumerate(dims):
        out[d] = op_strides[j] if op_shape[j] == out_shape[d] else 0
    return tuple(out)


def _elementwise(r) -> bool:
    return r.kind in _ELEMENTWISE_KINDS or short_name(r.op) in _ELEMENTWISE_OPS


def _shape(t):
    return tuple(t.shape) if hasattr(t, "shape") and hasattr(t, "nelems") else None


def strides_of(rows, producers, facts: dict) -> tuple[list, set]:
    """Each row's result strides as PyTorch lays it out (None: not a single tensor), and the reshapes that are
    not views of their operand (a copy in PyTorch: their result is contiguous)."""
    strides: list = [None] * len(rows)
    copying: set = set()
    for i, r in enumerate(rows):
        shape = _shape(r.result)
        if shape is None:
            continue
        ops = [(strides[p] if isinstance(p, int) and p < i else None) for p in producers[i]]
        ops = [s if s is not None else (contiguous(_shape(t)) if _shape(t) is not None else None)
               for s, t in zip(ops + [None] * (len(r.operands) - len(ops)), r.operands)]
        strides[i] = _result_strides(i, r, shape, ops, facts, copying)
    return strides, copying


def _result_strides(i, r, shape, ops, facts, copying) -> tuple:
    name, fact = short_name(r.op), facts.get(i)
    src = ops[0] if ops else None
    if src is None:
        return contiguous(shape)
    op_shape = tuple(r.operands[0].shape)
    if name == "transpose" and fact and fact[0] == "perm":
        return tuple(src[p] for p in fact[1])
    if name in ("reshape", "bitcast") and r.operands[0].nelems == r.result.nelems:
        v = view_strides(op_shape, src, shape)
        if v is None:
            copying.add(i)
            return contiguous(shape)
        return v
    if name == "broadcast_in_dim" and fact and fact[0] == "dims" and len(fact[1]) == len(op_shape):
        return _expanded(op_shape, src, fact[1], shape)
    if name == "slice" and fact and fact[0] == "step" and len(fact[1]) == len(src):
        return tuple(s * k for s, k in zip(src, fact[1]))
    if _elementwise(r):
        for s, t in zip(ops, r.operands):
            if s is not None and _shape(t) == shape and all(st or n == 1 for st, n in zip(s, shape)):
                return dense_like(shape, s)  # the first full, non-broadcast operand decides the layout
    return contiguous(shape)


def _merged(shape, strides, dims) -> tuple | None:
    """The (size, stride) of ``dims`` folded into one dimension (dimensions of size 1 left out), or None where
    PyTorch's reshape cannot fold them without a copy (not adjacent in memory order)."""
    dims = [d for d in sorted(dims) if shape[d] != 1]
    if not dims:
        return 1, 1
    size = 1
    for a, b in zip(dims, dims[1:]):  # adjacent but for size-1 dimensions between them, and dense across
        if any(shape[d] != 1 for d in range(a + 1, b)) or strides[a] != strides[b] * shape[b]:
            return None
    for d in dims:
        size *= shape[d]
    return size, strides[dims[-1]]


def blas_copies(shape, strides, batch, contracting) -> bool:
    """Whether PyTorch copies a matmul operand of ``shape`` / ``strides`` (batch and contracting dimensions of the
    dot) before cuBLAS takes it: its batch dimensions do not fold, its free dimensions do not fold, or its matrix is
    neither row- nor column-major (Blas.cpp: one stride 1, the other at least the extent it leads)."""
    if _plain(shape, strides):
        return False  # a contiguous operand: torch's matmul folds it as a view whatever the dot's dimension order
    free = [d for d in range(len(shape)) if d not in batch and d not in contracting]
    parts = [_merged(shape, strides, g) for g in (batch, free, contracting)]
    if any(p is None for p in parts):
        return True
    (nf, sf), (nc, sc) = parts[1], parts[2]
    if nf == 1 or nc == 1:
        return False
    return not ((sc == 1 and sf >= nc) or (sf == 1 and sc >= nf))


def copies_of(rows, producers, facts: dict, strides: list, copying: set, skip: set) -> set:
    """The rows PyTorch runs as a copy kernel: the reshapes that are not views (``copying``) and, for each matmul
    not in ``skip`` (a library attention), the last view before an operand PyTorch must copy for cuBLAS."""
    out = set(copying)
    for i, r in enumerate(rows):
        fact = facts.get(i)
        if i in skip or not fact or fact[0] != "dot":
            continue
        for j, (batch, contracting) in enumerate(fact[1:3]):
            p = producers[i][j] if j < len(producers[i]) else None
            if not isinstance(p, int) or strides[p] is None or short_name(rows[p].op) not in _VIEWS:
                continue
            if blas_copies(tuple(r.operands[j].shape), strides[p], batch, contracting):
                out.add(p)
    return out


_VIEWS = frozenset({"transpose", "reshape", "bitcast", "broadcast_in_dim", "slice"})


def _plain(shape, strides) -> bool:
    """Contiguous, size-1 dimensions aside."""
    live = [(n, s) for n, s in zip(shape, strides) if n != 1]
    return [s for _, s in live] == list(contiguous([n for n, _ in live]))


def _strided(shape, strides) -> bool:
    """A view that is not contiguous (size-1 dimensions aside) and broadcasts nothing (no zero stride)."""
    return 0 not in (s for n, s in zip(shape, strides) if n != 1) and not _plain(shape, strides)


def row_kernel_copies(rows, producers, strides: list, groups) -> set:
    """The views PyTorch copies contiguous before a row-wise kernel reads them: a call of two reductions or more and
    no matmul (LayerNorm, softmax; not recognised: an RMSNorm's one reduction, and a TensorIterator reduction of two,
    as ``var_mean``, which reads through strides, is taken for one) takes its input contiguous (``input.expect_contiguous()`` in
    aten/src/ATen/native/cuda/layer_norm_kernel.cu ``layer_norm_cuda``, ``input_.contiguous()`` in
    aten/src/ATen/native/cuda/SoftMax.cu ``host_softmax``): a permuted or sliced view of it is copied first."""
    out = set()
    for grp in groups:
        inside = set(grp)
        names = [short_name(rows[i].op) for i in grp]
        if names.count("reduce") < 2 or any(rows[i].kind in ("dot", "conv") for i in grp):
            continue
        for i in grp:
            for p in producers[i]:
                if (isinstance(p, int) and p not in inside and strides[p] is not None
                        and short_name(rows[p].op) in _VIEWS and _strided(rows[p].result.shape, strides[p])):
                    out.add(p)
    return out


def eager_copies(rows, producers, facts: dict, calls: list, library: set) -> set:
    """The rows eager PyTorch runs as copies of a non-contiguous tensor (:func:`copies_of`, and the views a norm or
    softmax of ``calls`` reads: :func:`row_kernel_copies`), none in the calls of the library attention kernels (rows
    ``library``: SDPA takes strided operands; the lowering's own reshapes of them are not PyTorch's)."""
    strides, copying = strides_of(rows, producers, facts)
    found = copies_of(rows, producers, facts, strides, copying, library)
    found |= row_kernel_copies(rows, producers, strides, calls)
    sdpa = {call_key(rows[i]) for i in library} - {None}
    return {i for i in found if call_key(rows[i]) not in sdpa}
