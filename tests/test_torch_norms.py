"""The kernels PyTorch's CUDA build launches for F.rms_norm (fused or composite), F.layer_norm and its backward,
against closed forms worked out here from the tensors each ATen kernel reads and writes (layer_norm_kernel.cu's
launches; layer_norm.cpp's composite rms_norm), on small shapes."""
from mhlo_cost.roofline.torch_norms import (layer_norm_backward_kernels, layer_norm_kernels, rms_norm_kernels,
                                            vectorized)

M, N = 8, 64  # 8 rows of 64 elements


def test_fused_rms_norm_is_one_row_kernel():
    # bf16: x (8 x 64 x 2 = 1024 B) and the weight (64 x 2 = 128 B) read; y (1024 B) and rstd (8 f32 = 32 B)
    # written; the row read a second time for the output (1024 B, from L2 or HBM).
    (k,) = rms_norm_kernels(M, N, 2)
    assert k.name == "vectorized_layer_norm_kernel"
    assert (k.bytes_read, k.bytes_written, k.reread, k.grid) == (1152, 1056, 1024, 8)


def test_composite_rms_norm_is_eight_kernels_in_float32():
    # rms_norm_symint before the fused kernel: to(f32), pow, mean, add_, rsqrt, mul, mul(weight), type_as.
    ks = rms_norm_kernels(M, N, 2, fused=False)
    assert [k.name for k in ks] == ["to_float32", "pow", "mean", "add_", "rsqrt", "mul_rstd", "mul_weight",
                                    "type_as"]
    n32, n16, m32, w16 = M * N * 4, M * N * 2, M * 4, N * 2  # 2048, 1024, 32, 128 bytes
    reads = [n16, n32, n32, m32, m32, n32 + m32, n32 + w16, n32]
    writes = [n32, n32, m32, m32, m32, n32, n32, n16]
    assert [k.bytes_read for k in ks] == reads and [k.bytes_written for k in ks] == writes
    assert sum(reads) == 11488 and sum(writes) == 9312
    # 9.4 times the HBM bytes of the fused kernel's one pass
    fused = rms_norm_kernels(M, N, 2)[0]
    assert sum(reads) + sum(writes) > 9 * (fused.bytes_read + fused.bytes_written)


def test_composite_rms_norm_in_float32_has_no_conversions():
    ks = rms_norm_kernels(M, N, 4, fused=False)
    assert [k.name for k in ks] == ["pow", "mean", "add_", "rsqrt", "mul_rstd", "mul_weight"]
    assert ks[0].bytes_read == M * N * 4 and ks[-1].bytes_read == M * N * 4 + N * 4


def test_layer_norm_forward_vectorised_or_two_kernels():
    # f32, weight and bias: x + 2 vectors read; y + mean + rstd written.
    (k,) = layer_norm_kernels(M, N, 4)
    assert (k.bytes_read, k.bytes_written) == (M * N * 4 + 2 * N * 4, M * N * 4 + 2 * M * 4)
    # 66 columns are not a multiple of the 4-element vector: the statistics kernel, then the output kernel, each
    # reading the rows from memory.
    ks = layer_norm_kernels(M, 66, 4)
    assert [k.name for k in ks] == ["RowwiseMomentsCUDAKernel", "LayerNormForwardCUDAKernel"]
    assert ks[0].bytes_read == M * 66 * 4 and ks[1].bytes_read == M * 66 * 4 + 2 * M * 4 + 2 * 66 * 4
    assert vectorized(1152, 2) and not vectorized(66, 4) and not vectorized(64, 8)


def test_layer_norm_backward_small_shape():
    # f32 [8, 64] on 132 SMs: dX reads dY and X (2 x 2048 B), mean and rstd (2 x 32 B) and gamma (256 B), writes dX
    # (2048 B), and reads dY and X again for the output (4096 B); dgamma / dbeta: one kernel of ceil(64 / 32) = 2
    # column blocks reading dY, X, mean and rstd and writing the two 64-element gradients.
    dx, gb = layer_norm_backward_kernels(M, N, 4, sms=132)
    assert dx.name == "layer_norm_grad_input_kernel_vectorized"
    assert (dx.bytes_read, dx.bytes_written, dx.reread, dx.grid) == (4416, 2048, 4096, 8)
    assert (gb.bytes_read, gb.bytes_written, gb.grid) == (4160, 512, 2)


def test_layer_norm_backward_many_rows_sums_partial_tiles():
    # 131072 rows of 1024 f32 (> 64 x 1024 rows; 1024 / 32 = 32 column blocks, under half of 132 SMs): partial sums
    # over min(32768 / 32, 131072 / 32) = 1024 row tiles, a [1024, 1024] f32 buffer (4 MiB) for each gradient, then
    # a column sum of each.
    ks = layer_norm_backward_kernels(131072, 1024, 4, sms=132)
    assert [k.name for k in ks] == ["layer_norm_grad_input_kernel_vectorized", "GammaBetaBackwardCUDAKernelTemplate",
                                    "sum", "sum"]
    part = 1024 * 1024 * 4
    assert ks[1].bytes_written == 2 * part and ks[1].grid == 32 * 1024
    assert ks[2].bytes_read == part and ks[2].bytes_written == 1024 * 4
    # on a GPU of 48 SMs the 32 column blocks fill more than half of them: one column kernel
    assert len(layer_norm_backward_kernels(131072, 1024, 4, sms=48)) == 2


def test_layer_norm_backward_without_affine_is_the_dx_kernel():
    (dx,) = layer_norm_backward_kernels(M, N, 2, sms=132, weight=False, bias=False)
    assert dx.bytes_read == 2 * M * N * 2 + 2 * M * 4
