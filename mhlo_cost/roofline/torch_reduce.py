"""Which of PyTorch eager's generic reductions (a sum, a mean: ``gpu_reduce_kernel``) pay the fixed time per output
row (``reduce_row_ns``) beside their stream, read off a reduce row's shapes.

Source: pytorch/pytorch ``aten/src/ATen/native/cuda/Reduce.cuh`` (commit 6f75eba), ``setReduceConfig``. Where the
reduced dimension is the fastest-striding (``reduction_on_fastest_striding_dimension``) block.x runs along it: the
lanes of a warp share each output (``split_input(block_width)``, then ``block_x_reduce``): the per-output reduction
``reduce_row_ns`` prices. Otherwise block.x runs along the outputs (``split_output(block_width)``, loads of
``get_output_vec_size`` = up to 4 neighbouring outputs), and block.y is then split by the branch commented "Divide
the input across warps in a thread-block, if that leaves at least 16 elements to be summed by each thread":
``values_per_thread() >= block_height * 16 || values_per_thread() >= max_values_per_thread`` (256) splits the input
across warps (``block_y_reduce`` through shared memory: a block reduction per output; and, where the grid is small,
``ctas_per_output`` blocks meeting in ``global_reduce``); else "each warp handles a separate output" and each
thread sums its own outputs down the reduced dimension, a plain stream with no per-output reduction step.
``values_per_thread`` is ``div_up(num_inputs, step_input)`` with ``step_input`` still 1 there: the inputs per
output. ``block_height`` comes from ``ReduceConfig::set_block_dimension(dim0 = num_outputs / output_vec_size,
dim1 = inputs_per_output)`` with ``max_num_threads = 512 / output_vec_size``: block_width = min(pow2(dim0), 32),
block_height = min(pow2(dim1), max_num_threads / block_width). With 4-wide output vectors and at least 32 vectors of
outputs, block_height is 4 and the split starts at 64 inputs per output.
"""
from __future__ import annotations

from math import prod

#: ``mnt_wrapper<T>::MAX_NUM_THREADS`` (512; 256 only for complex double), the warp's lanes (CUDA), the
#: ``min_values_per_thread`` (16) and ``max_values_per_thread`` (256) of ``setReduceConfig``.
MAX_THREADS, WARP, MIN_VALUES, MAX_VALUES = 512, 32, 16, 256


def _pow2(n: int, cap: int) -> int:
    """``set_block_dimension``'s ``dimN_pow2``: ``last_pow2(n)`` (at least 1) below ``cap``, else ``cap``."""
    return cap if n >= cap else 1 << max(n, 1).bit_length() - 1


def splits_input(outputs: int, per_output: int, minor: int) -> bool:
    """Whether ``setReduceConfig`` divides a reduction outside the fastest-striding dimension across warps (a block
    reduction per output) for ``outputs`` outputs of ``per_output`` inputs each, the kept minor extent ``minor``
    setting ``get_output_vec_size`` (4, 2 or 1: the largest dividing it; fresh allocations are aligned)."""
    vec = 4 if minor % 4 == 0 else 2 if minor % 2 == 0 else 1
    cap = MAX_THREADS // vec
    dim0 = _pow2(outputs // vec, cap)
    width = min(dim0, WARP)
    height = min(_pow2(per_output, cap), cap // width)
    return per_output >= height * MIN_VALUES or per_output >= MAX_VALUES


def _subsequence(out: tuple, shape: tuple) -> bool:
    """Whether ``out`` is ``shape`` with some extents dropped (a reduction keeps the others in order)."""
    it = iter(shape)
    return all(any(e == s for s in it) for e in out)


def pays_row_time(r) -> bool:
    """Whether a reduce row is priced with ``reduce_row_ns`` per output (the minor-dimension reduction's warp or
    block per output). Extents of 1 are dropped first (TensorIterator coalesces them: (65536, 256, 1) over dim 1
    reduces the innermost). Only a reduction whose result keeps the operand's last extent and cannot be read as
    one over it (the result not a subsequence of the operand's shape less its last extent: (256, 64, 64) to (64,)
    could be either) reduces outside the minor dimension; it skips the time only where :func:`splits_input` says
    the warps do not share an output. A row without shapes keeps the time."""
    if not r.operands or not getattr(r.operands[0], "shape", None) or not hasattr(r.result, "shape"):
        return True
    shape = tuple(e for e in r.operands[0].shape if e != 1)
    out = tuple(e for e in r.result.shape if e != 1)
    if not shape or not out or out == shape[:len(out)] or _subsequence(out, shape[:-1]):
        return True
    if not _subsequence(out, shape):
        return True
    outputs = prod(out)
    return splits_input(outputs, prod(shape) // outputs, shape[-1])
