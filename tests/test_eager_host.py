"""The host's time per framework call in the eager model (:mod:`mhlo_cost.roofline.eager_host`): a convolution that
PyTorch runs through cuDNN costs the host 51.95 us a call (pytorch/pytorch PR #51390: ``torch.utils.benchmark`` of
a tiny ``nn.Conv2d`` through the cuDNN v8 API), any other op the dispatch estimate; a depthwise convolution
(groups = input channels) runs PyTorch's own ``conv_depthwise2d`` kernel (``_select_conv_backend`` in
aten/src/ATen/native/Convolution.cpp for an f32 input), an ordinary op."""
import dataclasses

import pytest

from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.roofline.estimate import Roofline

PR_51390_S = 51.95e-6  # the measured host time of one nn.Conv2d call through cuDNN (the PR's Timer output)
DISPATCH_S = 8e-6  # the estimate every other op is priced at (roofline/eager_host.py's ESTIMATE)

# x: 2x4x16x16 f32 -> depthwise conv (4 groups, 3x3, pad 1) -> pointwise conv (8 outputs, 1x1): MobileNet's pair,
# then y + y (an elementwise op: one ordinary call).
DW_PW = """
module @jit_forward {
  func.func public @main(%arg0: tensor<4x1x3x3xf32> loc("state['dw.weight']"), %arg1: tensor<8x4x1x1xf32> loc("state['pw.weight']"), %arg2: tensor<2x4x16x16xf32> loc("inputs[0]")) -> (tensor<2x8x16x16xf32>) {
    %0 = stablehlo.convolution(%arg2, %arg0) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 4 : i64} : (tensor<2x4x16x16xf32>, tensor<4x1x3x3xf32>) -> tensor<2x4x16x16xf32> loc(#loc10)
    %1 = stablehlo.convolution(%0, %arg1) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[0, 0], [0, 0]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x4x16x16xf32>, tensor<8x4x1x1xf32>) -> tensor<2x8x16x16xf32> loc(#loc11)
    %2 = stablehlo.add %1, %1 : tensor<2x8x16x16xf32> loc(#loc12)
    return %2 : tensor<2x8x16x16xf32> loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc = loc(unknown)
#loc1 = loc("/work/model.py":20:0 to :9)
#loc2 = loc("/work/model.py":9:12 to :24)
#loc3 = loc("/work/model.py":10:12 to :24)
#loc4 = loc("/work/model.py":11:12 to :24)
#loc6 = loc("<module>"(#loc1))
#loc7 = loc("M.forward"(#loc2))
#loc8 = loc("M.forward"(#loc3))
#loc9 = loc("M.forward"(#loc4))
#loc20 = loc(callsite(#loc7 at #loc6))
#loc21 = loc(callsite(#loc8 at #loc6))
#loc22 = loc(callsite(#loc9 at #loc6))
#loc10 = loc("jit(forward)/dw/conv_general_dilated"(#loc20))
#loc11 = loc("jit(forward)/pw/conv_general_dilated"(#loc21))
#loc12 = loc("jit(forward)/add"(#loc22))
"""


def _kernels(text, hw=None):
    a = analyze(text, AnalysisOptions(dataflow=True))
    return a, Roofline(a, hw or get_profile("a100"), execution="eager").fusion.kernels


def test_a_cudnn_convolution_costs_the_host_what_pytorch_measured():
    a, ks = _kernels(DW_PW)
    assert [[a.rows[i].op.split(".")[-1] for i in k.members] for k in ks] == [["convolution"]] * 2 + [["add"]]
    dw, pw, add = ks
    assert pw.host_s == pytest.approx(PR_51390_S, rel=1e-12)
    assert add.host_s == pytest.approx(DISPATCH_S, rel=1e-12)
    # the tiny convolution (2 x 8 x 16 x 16 outputs, 16 KB) takes far less on the device: the host bounds its time
    assert pw.time_s == pytest.approx(PR_51390_S, rel=1e-12)


def test_a_depthwise_convolution_is_torchs_own_kernel_an_ordinary_op():
    _, ks = _kernels(DW_PW)
    assert ks[0].host_s == pytest.approx(DISPATCH_S, rel=1e-12)


def test_a_profile_dispatch_above_the_cudnn_figure_holds_for_the_convolution_too():
    slow = dataclasses.replace(get_profile("a100"), dispatch_overhead=80e-6)
    _, ks = _kernels(DW_PW, slow)
    assert all(k.host_s == pytest.approx(80e-6, rel=1e-12) for k in ks)
    fast = dataclasses.replace(get_profile("a100"), dispatch_overhead=2e-6)
    _, ks = _kernels(DW_PW, fast)
    assert [k.host_s for k in ks] == pytest.approx([2e-6, PR_51390_S, 2e-6], rel=1e-12)
