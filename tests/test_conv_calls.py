"""How PyTorch runs a convolution call in its two execution models (issue 35): a cuDNN convolution's host time is
the call's (PyTorch PR #51390: 51.95 us a call of ``nn.Conv2d`` at steady state), in eager and as Inductor's
extern kernel alike; a float32 depthwise convolution runs ATen's own kernel (``Convolution.cpp``'s
``use_cudnn_depthwise``: cuDNN for some half-precision shapes or channels-last only): the per-op dispatch, no TF32."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest

from helpers import lowered
from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.roofline.eager import DISPATCH_S, eager
from mhlo_cost.roofline.inductor import inductor
from mhlo_cost.roofline.torch_math import tf32_convolution

A100 = dataclasses.replace(get_profile("a100"), gemm=None)
#: PyTorch PR #51390: ``nn.Conv2d(1, 1, 1)`` on a 100 x 1 x 100 x 100 CUDA input, 51.95 us a call.
PR_51390_S = 51.95e-6
NCHW = ("NCHW", "OIHW", "NCHW")  # torch's layouts, as torchax lowers a torch convolution


def _conv(groups: int, dtype):
    """A 3x3 convolution of a 2 x 8 x 16 x 16 input in torch's layouts, ``groups`` groups."""
    def f(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)), dimension_numbers=NCHW,
                                            feature_group_count=groups)
    return analyze(lowered(f, ((2, 8, 16, 16), dtype), ((8, 8 // groups, 3, 3), dtype)),
                   AnalysisOptions(dataflow=True))


def _only_conv(fus, a):
    ks = [k for k in fus.kernels if any(a.rows[i].kind == "conv" for i in k.members)]
    assert len(ks) == 1
    return ks[0]


@pytest.mark.parametrize("run", [eager, inductor])
def test_a_cudnn_convolution_call_costs_the_host_the_published_call_time(run):
    a = _conv(1, jnp.float32)
    k = _only_conv(run(a, A100), a)
    assert k.host_s == pytest.approx(PR_51390_S, rel=1e-12)  # instead of the per-op dispatch (8 us), not beside it
    assert k.time_s >= PR_51390_S  # a 2 x 8 x 16 x 16 convolution runs for far less on the device


@pytest.mark.parametrize("run", [eager, inductor])
def test_a_float32_depthwise_convolution_is_atens_kernel_one_dispatch(run):
    a = _conv(8, jnp.float32)
    k = _only_conv(run(a, A100), a)
    assert k.host_s == pytest.approx(DISPATCH_S, rel=1e-12)


@pytest.mark.parametrize("run", [eager, inductor])
def test_a_half_precision_depthwise_convolution_is_atens_kernel_too(run):
    a = _conv(8, jnp.bfloat16)  # (cuDNN's depthwise workload list, filters of 1, 3 or 5 taps, is not modelled)
    k = _only_conv(run(a, A100), a)
    assert k.host_s == pytest.approx(DISPATCH_S, rel=1e-12)


def test_only_cudnn_convolutions_run_on_tf32_tensor_cores():
    dense, depthwise = _conv(1, jnp.float32), _conv(8, jnp.float32)
    row = next(r for r in dense.rows if r.kind == "conv")
    assert tf32_convolution(row, A100)
    row = next(r for r in depthwise.rows if r.kind == "conv")
    assert not tf32_convolution(row, A100)  # ATen's conv_depthwise2d: CUDA cores
    # grouped but not depthwise (two input channels a group): cuDNN
    grouped = _conv(4, jnp.float32)
    assert tf32_convolution(next(r for r in grouped.rows if r.kind == "conv"), A100)


def test_a_slower_host_keeps_the_larger_of_its_dispatch_and_the_call_time():
    a = _conv(1, jnp.float32)
    slow = dataclasses.replace(A100, dispatch_overhead=80e-6)  # a host whose every op costs more than 51.95 us
    assert _only_conv(eager(a, slow), a).host_s == pytest.approx(80e-6, rel=1e-12)
    assert _only_conv(inductor(a, slow), a).host_s == pytest.approx(80e-6, rel=1e-12)


# -- the copies Inductor makes before an extern GEMM (mhlo_cost/roofline/inductor_copies.py) ----------------------
B, N, H, D = 2, 8, 4, 16
C = H * D


def _heads(t):
    """(B*N, C) -> (B*H, N, D): torch's ``view(B, N, H, D).transpose(1, 2)`` and at::matmul's batch fold."""
    return t.reshape(B, N, H, D).transpose(0, 2, 1, 3).reshape(B * H, N, D)


def _scores(x, wq, wk):
    """q k^T of attention written out, q and k from their linears."""
    return jnp.matmul(_heads(x @ wq), _heads(x @ wk).transpose(0, 2, 1))


def _scores_of_pointwise(x, wq, wk):
    """The same with q and k made by a pointwise op after the linear (a Triton kernel the copy fuses into)."""
    return jnp.matmul(_heads((x @ wq) * 2.0), _heads((x @ wk) * 2.0).transpose(0, 2, 1))


def _inductor_of(f):
    a = analyze(lowered(f, ((B * N, C), jnp.float32), ((C, C), jnp.float32), ((C, C), jnp.float32)),
                AnalysisOptions(dataflow=True, records=("layouts",)))
    return a, inductor(a, A100, torch_version="2.0.1")


def test_heads_regrouped_after_a_gemm_are_copied_by_a_triton_kernel_each():
    a, fus = _inductor_of(_scores)
    gemms = [k for k in fus.kernels if k.extern]
    loops = [k for k in fus.kernels if not k.extern]
    assert len(gemms) == 3  # the two linears and the batched q k^T
    assert len(loops) == 2  # q's copy and k's: a (B, H, N, D) permute regrouped to B*H batches is no strided map
    for k in loops:
        assert k.bytes_read == k.bytes_written == B * N * C * 4  # one read and one write of the tensor
        assert k.memory_s > 0


def test_a_copy_fuses_into_its_producer_when_that_is_a_triton_kernel():
    a, fus = _inductor_of(_scores_of_pointwise)
    loops = [k for k in fus.kernels if not k.extern]
    assert len(loops) == 2  # the scale and the copy in one loop each for q and for k
    for k in loops:
        assert k.bytes_written == B * N * C * 4  # the scaled value is never written unpermuted
        assert k.bytes_read == B * N * C * 4 + 4  # the GEMM's output and the scalar 2.0


def test_without_the_layouts_record_no_copy_is_priced():
    a = analyze(lowered(_scores, ((B * N, C), jnp.float32), ((C, C), jnp.float32), ((C, C), jnp.float32)),
                AnalysisOptions(dataflow=True))
    assert all(k.extern for k in inductor(a, A100, torch_version="2.0.1").kernels)


def test_a_1d_depthwise_convolution_is_atens_kernel_as_its_2d_view():
    # nn.Conv1d(64, 64, 4, groups=64) on (8, 64, 1024): ATen views a 1-d convolution 4-d before choosing its backend
    # (Convolution.cpp "Expand 1d -> 2d"), so is_depthwise holds: groups == C_in == 64 > 1, weight (64, 1, 4).
    from types import SimpleNamespace as NS

    from mhlo_cost.roofline.conv_calls import cudnn_convolution, depthwise

    dw = NS(kind="conv", operands=[NS(shape=(8, 64, 1024)), NS(shape=(64, 1, 4))])
    dense = NS(kind="conv", operands=[NS(shape=(8, 64, 1024)), NS(shape=(64, 64, 4))])
    assert depthwise(dw) and not cudnn_convolution(dw)
    assert not depthwise(dense) and cudnn_convolution(dense)
