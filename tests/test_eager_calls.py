"""The eager execution model's framework calls (:mod:`mhlo_cost.roofline.eager_calls`) on a conv-bn-relu block as
torchax lowers it: ``relu`` is jax.nn's jitted function, a ``call @relu`` whose ops carry no source position of
their own. PyTorch eager runs every aten op as a kernel of its own (``conv2d``: one cuDNN kernel; ``batch_norm``
in eval mode: one kernel; ``relu``, in place or not: one elementwise kernel reading and writing the tensor), so
the block is five kernels, each moving the bytes worked out here from the shapes."""
from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.roofline.estimate import Roofline

# x: 2x4x16x16 f32 -> conv2d(8, 3x3, pad 1) -> batch_norm (eval: (y - mean) * scale + bias, per channel) ->
# act (an nn.ReLU module: scope "act") -> + r -> F.relu (no module of its own: the scope of the add).
CBR = """
module @jit_forward {
  func.func public @main(%arg0: tensor<8x4x3x3xf32> loc("state['conv.weight']"), %arg1: tensor<8xf32> loc("state['bn.mean']"), %arg2: tensor<8xf32> loc("state['bn.scale']"), %arg3: tensor<8xf32> loc("state['bn.bias']"), %arg4: tensor<2x4x16x16xf32> loc("inputs[0]"), %arg5: tensor<2x8x16x16xf32> loc("inputs[1]")) -> (tensor<2x8x16x16xf32>) {
    %0 = stablehlo.convolution(%arg4, %arg0) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x4x16x16xf32>, tensor<8x4x3x3xf32>) -> tensor<2x8x16x16xf32> loc(#loc10)
    %1 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<8xf32>) -> tensor<2x8x16x16xf32> loc(#loc11)
    %2 = stablehlo.subtract %0, %1 : tensor<2x8x16x16xf32> loc(#loc11)
    %3 = stablehlo.broadcast_in_dim %arg2, dims = [1] : (tensor<8xf32>) -> tensor<2x8x16x16xf32> loc(#loc12)
    %4 = stablehlo.multiply %2, %3 : tensor<2x8x16x16xf32> loc(#loc12)
    %5 = stablehlo.broadcast_in_dim %arg3, dims = [1] : (tensor<8xf32>) -> tensor<2x8x16x16xf32> loc(#loc13)
    %6 = stablehlo.add %4, %5 : tensor<2x8x16x16xf32> loc(#loc13)
    %7 = call @relu(%6) : (tensor<2x8x16x16xf32>) -> tensor<2x8x16x16xf32> loc(#loc14)
    %8 = stablehlo.add %7, %arg5 : tensor<2x8x16x16xf32> loc(#loc15)
    %9 = call @relu(%8) : (tensor<2x8x16x16xf32>) -> tensor<2x8x16x16xf32> loc(#loc16)
    return %9 : tensor<2x8x16x16xf32> loc(#loc)
  } loc(#loc)
  func.func private @relu(%arg0: tensor<2x8x16x16xf32> loc(unknown)) -> tensor<2x8x16x16xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32> loc(#loc)
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x8x16x16xf32> loc(#loc17)
    %1 = stablehlo.maximum %arg0, %0 : tensor<2x8x16x16xf32> loc(#loc17)
    return %1 : tensor<2x8x16x16xf32> loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc = loc(unknown)
#loc1 = loc("/work/model.py":20:0 to :9)
#loc2 = loc("/work/model.py":9:12 to :24)
#loc3 = loc("/work/model.py":9:4 to :30)
#loc4 = loc("/work/model.py":10:8 to :30)
#loc5 = loc("/work/model.py":11:8 to :30)
#loc6 = loc("<module>"(#loc1))
#loc7 = loc("M.forward"(#loc2))
#loc8 = loc("M.forward"(#loc4))
#loc9 = loc("M.forward"(#loc5))
#loc20 = loc(callsite(#loc7 at #loc6))
#loc21 = loc("M.forward"(#loc3))
#loc22 = loc(callsite(#loc21 at #loc6))
#loc23 = loc(callsite(#loc8 at #loc6))
#loc24 = loc(callsite(#loc9 at #loc6))
#loc10 = loc("jit(forward)/conv/conv_general_dilated"(#loc20))
#loc11 = loc("jit(forward)/bn/sub"(#loc22))
#loc12 = loc("jit(forward)/bn/mul"(#loc22))
#loc13 = loc("jit(forward)/bn/add"(#loc22))
#loc14 = loc("jit(forward)/act/jit(relu)"(#loc22))
#loc15 = loc("jit(forward)/add"(#loc23))
#loc16 = loc("jit(forward)/jit(relu)"(#loc24))
#loc17 = loc("max")
"""

F32 = 4
X, W, C = 2 * 4 * 16 * 16 * F32, 8 * 4 * 3 * 3 * F32, 8 * F32
Y = 2 * 8 * 16 * 16 * F32  # every tensor after the convolution


def _kernels(text=CBR):
    a = analyze(text, AnalysisOptions(dataflow=True))
    return a, Roofline(a, get_profile("a100"), execution="eager").fusion.kernels


def test_each_aten_op_is_a_kernel():
    a, ks = _kernels()
    ops = [[a.rows[i].op.split(".")[-1] for i in k.members if a.rows[i].op.split(".")[-1] != "broadcast_in_dim"]
           for k in ks]
    assert ops == [["convolution"], ["subtract", "multiply", "add"], ["maximum"], ["add"], ["maximum"]]


def test_bytes_of_each_kernel():
    _, ks = _kernels()
    conv, bn, act, add, relu = ks
    assert (conv.bytes_read, conv.bytes_written) == (X + W, Y)
    assert (bn.bytes_read, bn.bytes_written) == (Y + 3 * C, Y)  # y and the three per-channel vectors
    assert (add.bytes_read, add.bytes_written) == (2 * Y, Y)
    for k in (act, relu):  # the activation reads its input once and writes it once (the 0 a scalar argument)
        assert k.bytes_written == Y and Y <= k.bytes_read <= Y + F32


def test_a_helper_function_stays_in_its_call():
    # The same ``call`` to a function that is no activation (a decomposition's helper, as ``jit(_where)``), at
    # the scope of the call before it: its ops are that call's (one kernel), as before.
    text = CBR.replace("@relu", "@_helper").replace('"jit(forward)/act/jit(relu)"', '"jit(forward)/bn/jit(_helper)"')
    a, ks = _kernels(text)
    ops = [[a.rows[i].op.split(".")[-1] for i in k.members if a.rows[i].op.split(".")[-1] != "broadcast_in_dim"]
           for k in ks]
    assert ops == [["convolution"], ["subtract", "multiply", "add", "maximum"], ["add", "maximum"]]
