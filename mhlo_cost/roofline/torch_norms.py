"""The CUDA kernels PyTorch launches for one norm call, as closed forms of the shapes: what its profiler lists for
``F.rms_norm`` (the fused ``_fused_rms_norm`` kernel, or the ATen ops of the composite ``rms_norm`` that CUDA ran
before it), ``F.layer_norm`` and ``native_layer_norm_backward``, each kernel with the HBM tensors it reads and writes
(each once) and the bytes it reads a second time (a row kernel's second pass, from L2 or HBM: :mod:`.two_pass`).

Sources, pytorch/pytorch ``aten/src/ATen/native/cuda/layer_norm_kernel.cu``:

* ``LayerNormKernelImplInternal``: the vectorised kernel (one 128-thread block a row, ``compute_stats`` then the
  output loop) where ``T`` is float, half or bfloat16, ``N`` is a multiple of ``vec_size`` = 4 and at most 2^24, and
  the buffers are aligned to 4 elements (fresh CUDA allocations are); otherwise ``RowwiseMomentsCUDAKernel`` (the
  statistics) then ``LayerNormForwardCUDAKernel`` (the output), two kernels that each read the rows. The fused
  RMSNorm (pytorch/pytorch PR 153666, ``RmsNormKernelImpl``) is the same code with its ``rms_norm`` flag: no mean.
* ``LayerNormBackwardKernelImplInternal``: dX by ``layer_norm_grad_input_kernel(_vectorized)``, one block a row that
  reads dY and X for the row's two sums, then again for dX; dgamma / dbeta by ``LaunchGammaBetaBackwardCUDAKernel``:
  one column kernel (blocks of 32 columns), or, where ``M > 64 x 1024`` and ``N / 32 < SMs / 2``, a kernel of
  partial sums over row tiles of 32 (at most 32768 blocks) and a ``.sum(0)`` of them for each gradient.

``aten/src/ATen/native/layer_norm.cpp``, ``rms_norm_symint`` before the fused kernel (torch 2.4 and after, until PR
153666): ``input.to(opmath)``, ``pow(2)``, ``mean(-1, keepdim)``, ``add_(eps)``, ``rsqrt``, ``mul`` by it, ``mul``
by the weight, ``type_as(input)``: one kernel each, in float32 (the conversions none for a float32 input).
"""
from __future__ import annotations

from dataclasses import dataclass

#: ``vec_size`` of layer_norm_kernel.cu: the elements of one vector load of the vectorised kernels.
VEC = 4
#: The accumulate type's bytes (float32 for float, half and bfloat16 inputs): mean, rstd, the composite's math.
ACC = 4
#: ``LaunchGammaBetaBackwardCUDAKernel``: columns of a block, rows of a partial-sum tile, its grid's limit, and the
#: row count beyond which it sums partial tiles when the columns fill under half the SMs.
GB_COLUMNS, GB_ROWS, GB_MAX_GRID, GB_HUGE_M = 32, 32, 64 * 1024 // 2, 64 * 1024


@dataclass(frozen=True)
class TorchKernel:
    """One CUDA kernel of a torch call: ``bytes_read`` / ``bytes_written`` of HBM tensors (each once);
    ``reread``: bytes it reads a second time (a row's second pass, from L2 or HBM); ``grid``: blocks launched."""

    name: str
    bytes_read: int
    bytes_written: int
    reread: int = 0
    grid: int = 0


def vectorized(cols: int, itemsize: int) -> bool:
    """Whether torch's vectorised row kernel runs a norm over rows of ``cols`` elements of ``itemsize`` bytes
    (float32, float16 or bfloat16; a multiple of 4 elements, at most 2^24), aligned buffers assumed."""
    return itemsize in (2, 4) and cols % VEC == 0 and cols <= 2**24


def _row_kernels(rows: int, cols: int, itemsize: int, params: int, stats: int) -> list[TorchKernel]:
    """The forward of a row norm: ``params`` weight/bias vectors of ``cols`` elements, ``stats`` float32 per-row
    statistics written (rstd; mean too for LayerNorm)."""
    x, p, s = rows * cols * itemsize, params * cols * itemsize, stats * rows * ACC
    if vectorized(cols, itemsize):
        return [TorchKernel("vectorized_layer_norm_kernel", x + p, x + s, reread=x, grid=rows)]
    return [TorchKernel("RowwiseMomentsCUDAKernel", x, s, grid=rows),
            TorchKernel("LayerNormForwardCUDAKernel", x + s + p, x, grid=rows)]


def rms_norm_kernels(rows: int, cols: int, itemsize: int, weight: bool = True,
                     fused: bool = True) -> list[TorchKernel]:
    """The kernels of ``F.rms_norm`` over ``rows`` rows of ``cols`` elements: the fused kernel (``fused``: a torch
    with ``_fused_rms_norm``'s CUDA kernel), else the composite's eight (six for float32) elementwise and
    reduction kernels, each reading and writing its whole operand."""
    if fused:
        return _row_kernels(rows, cols, itemsize, int(weight), 1)
    n, m = rows * cols, rows
    out: list[TorchKernel] = []
    if itemsize != ACC:
        out.append(TorchKernel("to_float32", n * itemsize, n * ACC))
    out += [TorchKernel("pow", n * ACC, n * ACC), TorchKernel("mean", n * ACC, m * ACC),
            TorchKernel("add_", m * ACC, m * ACC), TorchKernel("rsqrt", m * ACC, m * ACC),
            TorchKernel("mul_rstd", n * ACC + m * ACC, n * ACC)]
    if weight:
        out.append(TorchKernel("mul_weight", n * ACC + cols * itemsize, n * ACC))
    if itemsize != ACC:
        out.append(TorchKernel("type_as", n * ACC, n * itemsize))
    return out


def layer_norm_kernels(rows: int, cols: int, itemsize: int, weight: bool = True,
                       bias: bool = True) -> list[TorchKernel]:
    """The kernels of ``F.layer_norm``'s forward (``native_layer_norm``): mean and rstd written beside the output."""
    return _row_kernels(rows, cols, itemsize, int(weight) + int(bias), 2)


def layer_norm_backward_kernels(rows: int, cols: int, itemsize: int, sms: int, weight: bool = True,
                                bias: bool = True) -> list[TorchKernel]:
    """The kernels of ``native_layer_norm_backward`` (dX, dgamma and dbeta asked for where there are a weight and a
    bias) on a GPU of ``sms`` SMs: the dX row kernel (dY and X read twice), then the gamma / beta kernels."""
    x, stats = rows * cols * itemsize, 2 * rows * ACC
    g = cols * itemsize
    name = "layer_norm_grad_input_kernel" + ("_vectorized" if vectorized(cols, itemsize) else "")
    out = [TorchKernel(name, 2 * x + stats + g * int(weight), x, reread=2 * x, grid=rows)]
    grads = int(weight) + int(bias)
    if not grads:
        return out
    col_blocks = -(-cols // GB_COLUMNS)
    if rows > GB_HUGE_M and cols // GB_COLUMNS < sms // 2:
        tiles = min(GB_MAX_GRID // col_blocks, -(-rows // GB_ROWS))
        part = tiles * cols * itemsize
        out.append(TorchKernel("GammaBetaBackwardCUDAKernelTemplate", 2 * x + stats, grads * part,
                               grid=col_blocks * tiles))
        out += [TorchKernel("sum", part, g) for _ in range(grads)]
    else:
        out.append(TorchKernel("GammaBetaBackwardCUDAKernelTemplate", 2 * x + stats, grads * g, grid=col_blocks))
    return out
