"""An SDPA call in a module whose ``forward`` the program calls from the top level: torchax writes its location as
``"M.forward"("m.py":11:15)`` (one frame, no call-site chain, so no ``site``); both products of the one
``F.scaled_dot_product_attention(q, k, v[, attn_mask=bias])`` statement carry it. PyTorch runs that call as one
attention kernel (f32: the mem_efficient backend), not as the matmul, softmax, matmul it is written out as in
torchax's reference lowering (issue 35: an SDPA call with ``attn_mask`` not recognised)."""
from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.roofline.estimate import Roofline

# class M(nn.Module): forward(q, k, v) = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias), bias 4x49x49;
# q, k, v: 8x4x49x32 f32.
MASKED = """
#loc1 = loc("state['bias']")
#loc2 = loc("inputs[0]")
#loc3 = loc("inputs[1]")
#loc4 = loc("inputs[2]")
module @jit_forward attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4x49x49xf32> loc("state['bias']"), %arg1: tensor<8x4x49x32xf32> loc("inputs[0]"), %arg2: tensor<8x4x49x32xf32> loc("inputs[1]"), %arg3: tensor<8x4x49x32xf32> loc("inputs[2]")) -> (tensor<8x4x49x32xf32> {jax.result_info = "result[0]"}) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32> loc(#loc5)
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<49x49xf32> loc(#loc8)
    %1 = stablehlo.broadcast_in_dim %0, dims = [1, 2] : (tensor<49x49xf32>) -> tensor<1x49x49xf32> loc(#loc8)
    %2 = stablehlo.broadcast_in_dim %1, dims = [0, 1, 2] : (tensor<1x49x49xf32>) -> tensor<4x49x49xf32> loc(#loc9)
    %3 = stablehlo.add %2, %arg0 : tensor<4x49x49xf32> loc(#loc9)
    %4 = stablehlo.transpose %arg2, dims = [0, 1, 3, 2] : (tensor<8x4x49x32xf32>) -> tensor<8x4x32x49xf32> loc(#loc10)
    %5 = stablehlo.reshape %arg1 : (tensor<8x4x49x32xf32>) -> tensor<32x49x32xf32> loc(#loc11)
    %6 = stablehlo.reshape %4 : (tensor<8x4x32x49xf32>) -> tensor<32x32x49xf32> loc(#loc11)
    %7 = stablehlo.dot_general %5, %6, batching_dims = [0] x [0], contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<32x49x32xf32>, tensor<32x32x49xf32>) -> tensor<32x49x49xf32> loc(#loc12)
    %8 = stablehlo.reshape %7 : (tensor<32x49x49xf32>) -> tensor<8x4x49x49xf32> loc(#loc11)
    %cst_0 = stablehlo.constant dense<0.176776692> : tensor<f32> loc(#loc5)
    %9 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<8x4x49x49xf32> loc(#loc13)
    %10 = stablehlo.multiply %8, %9 : tensor<8x4x49x49xf32> loc(#loc13)
    %11 = stablehlo.broadcast_in_dim %3, dims = [1, 2, 3] : (tensor<4x49x49xf32>) -> tensor<1x4x49x49xf32> loc(#loc8)
    %12 = stablehlo.broadcast_in_dim %11, dims = [0, 1, 2, 3] : (tensor<1x4x49x49xf32>) -> tensor<8x4x49x49xf32> loc(#loc9)
    %13 = stablehlo.add %10, %12 : tensor<8x4x49x49xf32> loc(#loc9)
    %cst_1 = stablehlo.constant dense<0xFF800000> : tensor<f32> loc(#loc14)
    %14 = stablehlo.reduce(%13 init: %cst_1) applies stablehlo.maximum across dimensions = [3] : (tensor<8x4x49x49xf32>, tensor<f32>) -> tensor<8x4x49xf32> loc(#loc14)
    %cst_2 = stablehlo.constant dense<0xFF800000> : tensor<f32> loc(#loc5)
    %15 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f32>) -> tensor<8x4x49xf32> loc(#loc15)
    %16 = stablehlo.maximum %15, %14 : tensor<8x4x49xf32> loc(#loc15)
    %17 = stablehlo.broadcast_in_dim %16, dims = [0, 1, 2] : (tensor<8x4x49xf32>) -> tensor<8x4x49x1xf32> loc(#loc8)
    %18 = stablehlo.broadcast_in_dim %17, dims = [0, 1, 2, 3] : (tensor<8x4x49x1xf32>) -> tensor<8x4x49x49xf32> loc(#loc16)
    %19 = stablehlo.subtract %13, %18 : tensor<8x4x49x49xf32> loc(#loc16)
    %20 = stablehlo.exponential %19 : tensor<8x4x49x49xf32> loc(#loc17)
    %cst_3 = stablehlo.constant dense<0.000000e+00> : tensor<f32> loc(#loc18)
    %21 = stablehlo.reduce(%20 init: %cst_3) applies stablehlo.add across dimensions = [3] : (tensor<8x4x49x49xf32>, tensor<f32>) -> tensor<8x4x49xf32> loc(#loc18)
    %22 = stablehlo.broadcast_in_dim %21, dims = [0, 1, 2] : (tensor<8x4x49xf32>) -> tensor<8x4x49x1xf32> loc(#loc8)
    %23 = stablehlo.broadcast_in_dim %22, dims = [0, 1, 2, 3] : (tensor<8x4x49x1xf32>) -> tensor<8x4x49x49xf32> loc(#loc19)
    %24 = stablehlo.divide %20, %23 : tensor<8x4x49x49xf32> loc(#loc19)
    %25 = stablehlo.reshape %24 : (tensor<8x4x49x49xf32>) -> tensor<32x49x49xf32> loc(#loc11)
    %26 = stablehlo.reshape %arg3 : (tensor<8x4x49x32xf32>) -> tensor<32x49x32xf32> loc(#loc11)
    %27 = stablehlo.dot_general %25, %26, batching_dims = [0] x [0], contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<32x49x49xf32>, tensor<32x49x32xf32>) -> tensor<32x49x32xf32> loc(#loc12)
    %28 = stablehlo.reshape %27 : (tensor<32x49x32xf32>) -> tensor<8x4x49x32xf32> loc(#loc11)
    return %28 : tensor<8x4x49x32xf32> loc(#loc5)
  } loc(#loc)
} loc(#loc)
#loc = loc(unknown)
#loc5 = loc("jit(forward)")
#loc6 = loc("m.py":11:15 to :75)
#loc7 = loc("M.forward"(#loc6))
#loc8 = loc("jit(forward)/broadcast_in_dim"(#loc7))
#loc9 = loc("jit(forward)/add"(#loc7))
#loc10 = loc("jit(forward)/transpose"(#loc7))
#loc11 = loc("jit(forward)/reshape"(#loc7))
#loc12 = loc("jit(forward)/dot_general"(#loc7))
#loc13 = loc("jit(forward)/mul"(#loc7))
#loc14 = loc("jit(forward)/reduce_max"(#loc7))
#loc15 = loc("jit(forward)/max"(#loc7))
#loc16 = loc("jit(forward)/sub"(#loc7))
#loc17 = loc("jit(forward)/exp"(#loc7))
#loc18 = loc("jit(forward)/reduce_sum"(#loc7))
#loc19 = loc("jit(forward)/div"(#loc7))
"""
# the same call without a mask
PLAIN = """
#loc1 = loc("inputs[0]")
#loc2 = loc("inputs[1]")
#loc3 = loc("inputs[2]")
module @jit_forward attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<8x4x49x32xf32> loc("inputs[0]"), %arg1: tensor<8x4x49x32xf32> loc("inputs[1]"), %arg2: tensor<8x4x49x32xf32> loc("inputs[2]")) -> (tensor<8x4x49x32xf32> {jax.result_info = "result[0]"}) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32> loc(#loc4)
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<49x49xf32> loc(#loc7)
    %1 = stablehlo.transpose %arg1, dims = [0, 1, 3, 2] : (tensor<8x4x49x32xf32>) -> tensor<8x4x32x49xf32> loc(#loc8)
    %2 = stablehlo.reshape %arg0 : (tensor<8x4x49x32xf32>) -> tensor<32x49x32xf32> loc(#loc9)
    %3 = stablehlo.reshape %1 : (tensor<8x4x32x49xf32>) -> tensor<32x32x49xf32> loc(#loc9)
    %4 = stablehlo.dot_general %2, %3, batching_dims = [0] x [0], contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<32x49x32xf32>, tensor<32x32x49xf32>) -> tensor<32x49x49xf32> loc(#loc10)
    %5 = stablehlo.reshape %4 : (tensor<32x49x49xf32>) -> tensor<8x4x49x49xf32> loc(#loc9)
    %cst_0 = stablehlo.constant dense<0.176776692> : tensor<f32> loc(#loc4)
    %6 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<8x4x49x49xf32> loc(#loc11)
    %7 = stablehlo.multiply %5, %6 : tensor<8x4x49x49xf32> loc(#loc11)
    %8 = stablehlo.broadcast_in_dim %0, dims = [2, 3] : (tensor<49x49xf32>) -> tensor<1x1x49x49xf32> loc(#loc7)
    %9 = stablehlo.broadcast_in_dim %8, dims = [0, 1, 2, 3] : (tensor<1x1x49x49xf32>) -> tensor<8x4x49x49xf32> loc(#loc12)
    %10 = stablehlo.add %7, %9 : tensor<8x4x49x49xf32> loc(#loc12)
    %cst_1 = stablehlo.constant dense<0xFF800000> : tensor<f32> loc(#loc13)
    %11 = stablehlo.reduce(%10 init: %cst_1) applies stablehlo.maximum across dimensions = [3] : (tensor<8x4x49x49xf32>, tensor<f32>) -> tensor<8x4x49xf32> loc(#loc13)
    %cst_2 = stablehlo.constant dense<0xFF800000> : tensor<f32> loc(#loc4)
    %12 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f32>) -> tensor<8x4x49xf32> loc(#loc14)
    %13 = stablehlo.maximum %12, %11 : tensor<8x4x49xf32> loc(#loc14)
    %14 = stablehlo.broadcast_in_dim %13, dims = [0, 1, 2] : (tensor<8x4x49xf32>) -> tensor<8x4x49x1xf32> loc(#loc7)
    %15 = stablehlo.broadcast_in_dim %14, dims = [0, 1, 2, 3] : (tensor<8x4x49x1xf32>) -> tensor<8x4x49x49xf32> loc(#loc15)
    %16 = stablehlo.subtract %10, %15 : tensor<8x4x49x49xf32> loc(#loc15)
    %17 = stablehlo.exponential %16 : tensor<8x4x49x49xf32> loc(#loc16)
    %cst_3 = stablehlo.constant dense<0.000000e+00> : tensor<f32> loc(#loc17)
    %18 = stablehlo.reduce(%17 init: %cst_3) applies stablehlo.add across dimensions = [3] : (tensor<8x4x49x49xf32>, tensor<f32>) -> tensor<8x4x49xf32> loc(#loc17)
    %19 = stablehlo.broadcast_in_dim %18, dims = [0, 1, 2] : (tensor<8x4x49xf32>) -> tensor<8x4x49x1xf32> loc(#loc7)
    %20 = stablehlo.broadcast_in_dim %19, dims = [0, 1, 2, 3] : (tensor<8x4x49x1xf32>) -> tensor<8x4x49x49xf32> loc(#loc18)
    %21 = stablehlo.divide %17, %20 : tensor<8x4x49x49xf32> loc(#loc18)
    %22 = stablehlo.reshape %21 : (tensor<8x4x49x49xf32>) -> tensor<32x49x49xf32> loc(#loc9)
    %23 = stablehlo.reshape %arg2 : (tensor<8x4x49x32xf32>) -> tensor<32x49x32xf32> loc(#loc9)
    %24 = stablehlo.dot_general %22, %23, batching_dims = [0] x [0], contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<32x49x49xf32>, tensor<32x49x32xf32>) -> tensor<32x49x32xf32> loc(#loc10)
    %25 = stablehlo.reshape %24 : (tensor<32x49x32xf32>) -> tensor<8x4x49x32xf32> loc(#loc9)
    return %25 : tensor<8x4x49x32xf32> loc(#loc4)
  } loc(#loc)
} loc(#loc)
#loc = loc(unknown)
#loc4 = loc("jit(forward)")
#loc5 = loc("m.py":16:15 to :54)
#loc6 = loc("N.forward"(#loc5))
#loc7 = loc("jit(forward)/broadcast_in_dim"(#loc6))
#loc8 = loc("jit(forward)/transpose"(#loc6))
#loc9 = loc("jit(forward)/reshape"(#loc6))
#loc10 = loc("jit(forward)/dot_general"(#loc6))
#loc11 = loc("jit(forward)/mul"(#loc6))
#loc12 = loc("jit(forward)/add"(#loc6))
#loc13 = loc("jit(forward)/reduce_max"(#loc6))
#loc14 = loc("jit(forward)/max"(#loc6))
#loc15 = loc("jit(forward)/sub"(#loc6))
#loc16 = loc("jit(forward)/exp"(#loc6))
#loc17 = loc("jit(forward)/reduce_sum"(#loc6))
#loc18 = loc("jit(forward)/div"(#loc6))
"""


def _fusion(text):
    a = analyze(text, AnalysisOptions(dataflow=True))
    return a, Roofline(a, get_profile("a100"), execution="eager").fusion


def test_a_masked_sdpa_call_is_one_attention_kernel():
    for text in (MASKED, PLAIN):
        a, f = _fusion(text)
        att = [k for k in f.kernels if k.attention]
        dots = [r.index for r in a.rows if r.op.endswith("dot_general")]
        assert len(att) == 1 and len(dots) == 2 and set(dots) <= set(att[0].members)
        assert att[0].backend == "mem_efficient" and f.sdpa_note.startswith("1 mem_efficient")
        assert not any(a.rows[i].op.endswith("dot_general") for k in f.kernels if not k.attention for i in k.members)
