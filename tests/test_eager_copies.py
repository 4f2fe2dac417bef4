"""Copies of non-contiguous tensors that eager PyTorch makes (issue 35): a permute is a view, but a ``view`` /
``reshape`` its strides cannot express, a matmul operand cuBLAS cannot take and a LayerNorm input are copied first
(one kernel reading and writing the tensor). The stride rule is checked against torch itself (``Tensor.view`` and
TensorIterator's output layout); the eager kernels of small torch modules lowered through torchax are counted here
by hand from the shapes."""
from __future__ import annotations

import importlib.util
import itertools
import math
import re

import pytest

torch = pytest.importorskip("torch")

from mhlo_cost.roofline.strides import blas_copies, contiguous, dense_like, view_strides  # noqa: E402

F32 = 4


def _torch_view(shape, perm, new):
    t = torch.empty(shape).permute(perm)
    try:
        return tuple(t.view(new).stride())
    except RuntimeError:
        return None


@pytest.mark.parametrize("shape,new", [
    ((2, 3, 4), (6, 4)), ((2, 3, 4), (2, 12)), ((2, 3, 4), (24,)), ((2, 3, 4), (2, 3, 2, 2)),
    ((2, 1, 4, 6), (2, 4, 3, 2)), ((4, 2, 2, 3), (16, 3)), ((4, 2, 2, 3), (4, 2, 6)), ((2, 3, 4), (3, 2, 4)),
    ((2, 4, 1, 8), (2, 1, 32))])  # the last: a decode step's heads merged back at sequence length 1
def test_view_strides_are_torchs(shape, new):
    """Every permutation of ``shape`` viewed as ``new``: the strides torch gives, or no view where torch raises."""
    for perm in itertools.permutations(range(len(shape))):
        pshape = tuple(shape[p] for p in perm)
        if math.prod(pshape) != math.prod(new):
            continue
        want = _torch_view(shape, perm, new)
        got = view_strides(pshape, tuple(contiguous(shape)[p] for p in perm), new)
        assert got == want, (shape, perm, new)


def test_elementwise_output_takes_the_first_operands_layout():
    for perm in itertools.permutations(range(4)):
        t = torch.empty(2, 3, 4, 5).permute(perm)
        assert dense_like(t.shape, t.stride()) == tuple((t * 2).stride()), perm
        u = torch.empty(2, 1, 4, 5).permute(perm)  # a size-1 dimension's stride says nothing: the others compared
        live = [d for d in range(4) if u.shape[d] != 1]
        got, want = dense_like(u.shape, u.stride()), (u * 2).stride()
        assert [got[d] for d in live] == [want[d] for d in live], perm


def test_blas_takes_row_and_column_major_matrices_only():
    # [b, m, k] row-major, and its transpose (column-major): no copy
    assert not blas_copies((3, 8, 16), (128, 16, 1), (0,), (2,))
    assert not blas_copies((3, 8, 16), (128, 1, 8), (0,), (2,))
    # q of [B, N, H, D] permuted to [B, H, N, D]: the batch dimensions B, H do not fold into one
    assert blas_copies((2, 4, 8, 16), (8 * 4 * 16, 16, 4 * 16, 1), (0, 1), (3,))
    # a sliced matrix (every other column): neither stride 1
    assert blas_copies((8, 16), (32, 2), (), (1,))


def test_batch_dimensions_fold_across_a_size_one_dimension():
    """Batch dims (0, 1, 2) with dim 1 of size 1 fold as torch folds them: reshape of this tensor is a view."""
    shape, strides = (2, 1, 3, 8, 16), (384, 384, 128, 1, 8)
    t = torch.empty_strided(shape, strides)
    assert t.reshape(6, 8, 16).data_ptr() == t.data_ptr() and t.reshape(6, 8, 16)._base is not None  # torch: a view
    assert not blas_copies(shape, strides, (0, 1, 2), (3,))
    # a size-2 dimension outside the batch between two batch dimensions breaks the fold
    assert blas_copies((2, 2, 3, 8, 16), (768, 16, 256, 1, 32), (0, 2), (3,))


needs_torchax = pytest.mark.skipif(importlib.util.find_spec("torchax") is None, reason="torchax is not installed")
B, H, W, C, WS = 2, 8, 8, 16, 4  # a window partition of [B, H, W, C] into 4 x 4 windows
S = B * H * W * C * F32


class Windows(torch.nn.Module):
    """timm's Swin: window_partition, an elementwise op on the windows, window_reverse."""

    def forward(self, x):
        x = x.view(B, H // WS, WS, W // WS, WS, C)
        win = x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, WS, WS, C)
        win = win * 2.0
        y = win.view(B, H // WS, W // WS, WS, WS, C)
        return y.permute(0, 1, 3, 2, 4, 5).contiguous().view(B, H, W, C)


class SplitLast(torch.nn.Module):
    """A permute then a split of the innermost dimension: a view in PyTorch, no copy."""

    def forward(self, x):
        return x.transpose(1, 2).reshape(B, W, H, C // 2, 2) * 2.0


class HeadsMatmul(torch.nn.Module):
    """[B, N, heads, D] permuted to [B, heads, N, D] times a contiguous [B, heads, D, E]: matmul folds the batch
    dimensions (B, heads) into one with a reshape, which is a copy for the permuted operand; x^T @ y of 3-d tensors
    is cuBLAS's transpose flag (no copy)."""

    def forward(self, x, w, a, b):
        return x.permute(0, 2, 1, 3) @ w, a.transpose(-1, -2) @ b


class NormPermuted(torch.nn.Module):
    """ConvNeXt's channels-last LayerNorm: permute an NCHW tensor to NHWC, then LayerNorm over C."""

    def forward(self, x):
        return torch.nn.functional.layer_norm(x.permute(0, 2, 3, 1), (C,))


def _work(module, *specs, layouts=True):
    from mhlo_cost.analysis import AnalysisOptions, analyze
    from mhlo_cost.lower.frontends import torchax_frontend as tf
    from mhlo_cost.machines.hardware import get_profile
    from mhlo_cost.roofline.estimate import Roofline

    text = tf.lower_module(module(), [(s, torch.float32) for s in specs], dtype=None).text
    a = analyze(text, AnalysisOptions(dataflow=True, records=("layouts",) if layouts else ()))
    hw = get_profile("h200-sxm")
    ks = [k for k in Roofline(a, hw, execution="eager").fusion.kernels if k.bytes_read + k.bytes_written]
    return text, hw, ks


def _scalars(text: str) -> int:
    """Bytes of the f32 scalar constants the IR stores (eps, 1 / C), which eager passes as kernel arguments."""
    return F32 * len(re.findall(r"stablehlo\.constant dense<[^>]*> : tensor<[fi]32>", text))


@needs_torchax
def test_window_partition_and_reverse_are_two_copies():
    """partition: view (free), permute (free), contiguous + view (one copy: S read through strides, S written);
    * 2 (S read, S written, contiguous: the stream); reverse: view (free), permute + contiguous + view (a copy)."""
    a, hw, ks = _work(Windows, (B, H, W, C))
    # the multiply also reads the f32 scalar 2.0, which the IR stores (eager: a kernel argument)
    assert [(k.bytes_read, k.bytes_written) for k in ks] == [(S, S), (S + F32, S), (S, S)]
    assert [k.path for k in ks] == ["generic", "stream", "generic"]
    copy = ks[0]
    assert copy.memory_s == pytest.approx(hw.memory_time(2 * S, 1, "generic"), rel=1e-12)
    assert copy.overhead_s == hw.kernel_overhead


@needs_torchax
def test_split_of_the_innermost_dimension_stays_a_view():
    """torch views x.transpose(1, 2).reshape(..., C // 2, 2): one kernel, the multiply (S read, S written), reading
    a permuted operand; without the layouts record the reshape was taken for a copy (two kernels)."""
    _, _, ks = _work(SplitLast, (B, H, W, C))
    assert [(k.bytes_read, k.bytes_written) for k in ks] == [(S + F32, S)]  # and the scalar 2.0
    _, _, old = _work(SplitLast, (B, H, W, C), layouts=False)
    assert len(old) == 2


@needs_torchax
def test_matmul_copies_an_operand_whose_batch_does_not_fold():
    n, heads, d, e = 8, 4, 16, 32
    x, w = B * n * heads * d * F32, B * heads * d * e * F32
    out = B * heads * n * e * F32
    m, k, p = 16, 8, 24
    a_, b_, ab = 3 * k * m * F32, 3 * k * p * F32, 3 * m * p * F32
    _, _, ks = _work(HeadsMatmul, (B, n, heads, d), (B, heads, d, e), (3, k, m), (3, k, p))
    assert [(k.bytes_read, k.bytes_written, k.has_dot) for k in ks] == [
        (x, x, False), (x + w, out, True), (a_ + b_, ab, True)]


@needs_torchax
def test_layer_norm_of_a_permuted_tensor_copies_its_input():
    """x [B, C, H, W] permuted to [B, H, W, C]: layer_norm takes its input contiguous (a copy, S read and written),
    then reads it once and writes its result (S, S); its second read of the rows misses in the h200's 50 MB L2 on
    at most S x S / L2 of them (all rows in flight at once: 1 - exp(-S / L2) <= S / L2), under 2 bytes."""
    text, _, ks = _work(NormPermuted, (B, C, H, W))
    assert [(k.bytes_read, k.bytes_written) for k in ks[:1]] == [(S, S)]
    reread = -(-S * S // (50 * 2**20))  # S^2 / L2 rounded up
    assert S <= ks[1].bytes_read <= S + _scalars(text) + reread and ks[1].bytes_written == S and len(ks) == 2
    assert ks[0].path == "generic" and ks[0].members and len(ks[0].members) == 1
