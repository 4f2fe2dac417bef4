"""Two-pass row kernels of the eager execution model (torch's LayerNorm / RMSNorm forward: one 128-thread block per
row, the row read for its statistics, then again to write the output): the second read's HBM bytes against a closed
form worked out here from the launch and the chip's L2 (the lines of a row that the other rows in flight evict
between its two reads, under random replacement: a line survives D bytes of traffic in an L2 of C bytes with
probability exp(-D / C)), both in :func:`reread_bytes` and in the eager kernel of a torch ``rms_norm`` call (the IR
torchax makes of it: every op at one call site)."""
import math

import pytest

from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.roofline.two_pass import reread_bytes, resident_fraction
from mhlo_cost.roofline.estimate import Roofline

L2_GH100 = 50 * 2**20  # 52,428,800 B: the L2 of H100 / H200 (the profiles' l2_mib = 50)


def test_few_rows_in_flight_mostly_hit():
    # H200: 132 SMs x (2048 / 128) = 2112 rows in flight; 4096 bf16 columns = 8192 B a row -> D = 17,301,504 B;
    # 16384 rows = 134,217,728 B; exp(-17301504 / 52428800) = 0.71892...: 28.1% of the second read misses.
    d, data = 2112 * 8192, 16384 * 8192
    assert d == 17_301_504 and data == 134_217_728
    miss = data - math.floor(data * math.exp(-d / L2_GH100))
    assert miss == 37_725_418
    assert reread_bytes(16384, 4096 * 2, 132, L2_GH100) == miss
    assert 0 < miss < data // 3  # (an LRU L2 of 50 MB would keep the 17.3 MB of rows in flight whole)


def test_wide_rows_are_mostly_read_again_from_hbm():
    # H100, f32, 4096 x 16384: 2112 rows x 65536 B = 138,412,032 B in flight, 2.64 times the L2: exp(-2.64) of the
    # lines survive, 92.9% of the 268,435,456 B of the second read come from HBM again.
    d, data = 2112 * 65536, 4096 * 65536
    miss = data - math.floor(data * math.exp(-d / L2_GH100))
    assert miss == 249_279_562
    assert reread_bytes(4096, 16384 * 4, 132, L2_GH100) == miss


def test_fewer_rows_than_blocks_in_flight():
    # 1024 rows (fewer than the 108 x 16 = 1728 blocks an A100 holds): all in flight, 48 MiB against its 40 MiB L2.
    data = 1024 * 12288 * 4
    assert reread_bytes(1024, 12288 * 4, 108, 40 * 2**20) == data - math.floor(data * math.exp(-data / (40 * 2**20)))
    assert reread_bytes(1024, 12288 * 4, 108, 40 * 2**20) == 35_172_047


def test_more_l2_fewer_misses():
    a = reread_bytes(4096, 8192 * 4, 132, 40 * 2**20)
    b = reread_bytes(4096, 8192 * 4, 132, 50 * 2**20)
    assert 0 < b < a < 4096 * 8192 * 4


def test_no_l2_no_reread():
    assert reread_bytes(4096, 16384 * 4, 132, 0) == 0
    assert reread_bytes(0, 16384 * 4, 132, L2_GH100) == 0


# torch.nn.functional.rms_norm(x, (C,), w, 1e-6) on a bf16 [N, C] x, as torchax lowers it (one call site).
RMS = """
module @jit_forward {
  func.func public @main(%arg0: tensor<CxBF> loc("state['w']"), %arg1: tensor<NxCxBF> loc("inputs[0]")) -> (tensor<NxCxBF>) {
    %0 = stablehlo.convert %arg1 : (tensor<NxCxBF>) -> tensor<NxCxf32> loc(#loc9)
    %cst = stablehlo.constant dense<2.000000e+00> : tensor<f32> loc(#loc8)
    %1 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<NxCxf32> loc(#loc10)
    %2 = stablehlo.power %0, %1 : tensor<NxCxf32> loc(#loc10)
    %cst_0 = stablehlo.constant dense<0.000000e+00> : tensor<f32> loc(#loc11)
    %3 = stablehlo.reduce(%2 init: %cst_0) applies stablehlo.add across dimensions = [1] : (tensor<NxCxf32>, tensor<f32>) -> tensor<Nxf32> loc(#loc11)
    %4 = stablehlo.broadcast_in_dim %3, dims = [0] : (tensor<Nxf32>) -> tensor<Nx1xf32> loc(#loc12)
    %cst_1 = stablehlo.constant dense<4.096000e+03> : tensor<f32> loc(#loc8)
    %5 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<Nx1xf32> loc(#loc13)
    %6 = stablehlo.divide %4, %5 : tensor<Nx1xf32> loc(#loc13)
    %cst_2 = stablehlo.constant dense<9.99999997E-7> : tensor<f32> loc(#loc8)
    %7 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f32>) -> tensor<Nx1xf32> loc(#loc14)
    %8 = stablehlo.add %6, %7 : tensor<Nx1xf32> loc(#loc14)
    %9 = stablehlo.rsqrt %8 : tensor<Nx1xf32> loc(#loc15)
    %10 = stablehlo.broadcast_in_dim %9, dims = [0, 1] : (tensor<Nx1xf32>) -> tensor<NxCxf32> loc(#loc16)
    %11 = stablehlo.multiply %0, %10 : tensor<NxCxf32> loc(#loc16)
    %12 = stablehlo.convert %arg0 : (tensor<CxBF>) -> tensor<Cxf32> loc(#loc9)
    %13 = stablehlo.broadcast_in_dim %12, dims = [1] : (tensor<Cxf32>) -> tensor<1xCxf32> loc(#loc12)
    %14 = stablehlo.broadcast_in_dim %13, dims = [0, 1] : (tensor<1xCxf32>) -> tensor<NxCxf32> loc(#loc16)
    %15 = stablehlo.multiply %11, %14 : tensor<NxCxf32> loc(#loc16)
    %16 = stablehlo.convert %15 : (tensor<NxCxf32>) -> tensor<NxCxBF> loc(#loc9)
    return %16 : tensor<NxCxBF> loc(#loc8)
  } loc(#loc)
} loc(#loc)
#loc = loc(unknown)
#loc3 = loc("/work/model.py":8:29 to :84)
#loc4 = loc("/work/model.py":10:2 to :55)
#loc5 = loc("M.forward"(#loc3))
#loc6 = loc("<module>"(#loc4))
#loc7 = loc(callsite(#loc5 at #loc6))
#loc8 = loc("jit(forward)"(#loc6))
#loc9 = loc("jit(forward)/convert_element_type"(#loc7))
#loc10 = loc("jit(forward)/pow"(#loc7))
#loc11 = loc("jit(forward)/reduce_sum"(#loc7))
#loc12 = loc("jit(forward)/broadcast_in_dim"(#loc7))
#loc13 = loc("jit(forward)/div"(#loc7))
#loc14 = loc("jit(forward)/add"(#loc7))
#loc15 = loc("jit(forward)/rsqrt"(#loc7))
#loc16 = loc("jit(forward)/mul"(#loc7))
"""


def _kernels(n, c, chip):
    text = RMS.replace("NxCx", f"{n}x{c}x").replace("Nx1x", f"{n}x1x").replace("1xCx", f"1x{c}x")
    text = text.replace("Nxf32", f"{n}xf32").replace("CxBF", f"{c}xbf16").replace("Cxf32", f"{c}xf32")
    text = text.replace("BF>", "bf16>")
    rf = Roofline(analyze(text, AnalysisOptions(dataflow=True)), get_profile(chip), execution="eager")
    return [k for k in rf.fusion.kernels if k.members]


@pytest.mark.parametrize("n,c,chip,reread", [
    # H200, 16384 x 4096 bf16: 2112 rows of 8 KiB = 17,301,504 B in flight against the 52,428,800 B L2
    (16384, 4096, "h200", 37_725_418),
    # H100, 4096 x 16384 bf16: 2112 rows of 32 KiB = 69,206,016 B in flight: 1 - exp(-1.32) = 73.3% misses
    (4096, 16384, "h100", 4096 * 16384 * 2 - math.floor(4096 * 16384 * 2 * math.exp(-69_206_016 / 52_428_800))),
])
def test_rms_norm_call_is_one_kernel_that_reads_its_rows_twice(n, c, chip, reread):
    (k,) = _kernels(n, c, chip)
    assert k.bytes_written == n * c * 2
    # x, the weight, the four f32 scalar constants (as the model counts every input), the second read's miss
    assert k.bytes_read == n * c * 2 + c * 2 + 4 * 4 + reread


def test_a_chip_without_l2_reads_once():
    (k,) = _kernels(4096, 16384, "mi300x")
    assert k.bytes_read == 4096 * 16384 * 2 + 16384 * 2 + 4 * 4


def test_a_grid_of_fewer_rows_than_block_slots_streams_at_their_share():
    # torch launches one 128-thread block a row; an SM holds 2048 / 128 = 16 of them: 132 x 16 = 2112 on an H200.
    assert resident_fraction(1024, 132) == 1024 / 2112
    assert resident_fraction(2112, 132) == 1.0 and resident_fraction(16384, 132) == 1.0
    assert resident_fraction(1024, 0) == 1.0


def test_small_grid_norm_kernel_memory_time():
    # 1024 x 12288 bf16 on an H200 (the cudnn-frontend GPT-3 LayerNorm shape): all 1024 rows of 24 KiB in flight,
    # D = 25,165,824 B: 1 - exp(-0.48) of the second read misses (9,593,631 B). The stream: its bytes at
    # 4.8 TB/s x 0.885 (the profile's efficiency) over 1024 / 2112 of the slots; the fill and drain (19 MB at that
    # rate) once; beside it the profile's 0.18 ns a row reduced (reduce_row_ns: an RMSNorm's one reduction).
    (k,) = _kernels(1024, 12288, "h200")
    data = 1024 * 12288 * 2
    miss = data - math.floor(data * math.exp(-data / L2_GH100))
    assert miss == 9_593_631
    nbytes = 2 * data + 12288 * 2 + 4 * 4 + miss
    assert k.bytes_read + k.bytes_written == nbytes
    rate = 4.8e12 * 0.885
    assert k.memory_s == pytest.approx(19e6 / rate + nbytes / rate * 2112 / 1024 + 1024 * 0.18e-9, rel=1e-9)


def test_a_full_grid_keeps_the_streaming_rate():
    (k,) = _kernels(16384, 4096, "h200")
    rate = 4.8e12 * 0.885
    assert k.memory_s == pytest.approx((k.bytes_read + k.bytes_written + 19e6) / rate + 16384 * 0.18e-9, rel=1e-9)


# torch.mean(x, -1, keepdim=True) on an f32 [1, 4096] x (a decode step's RMSNorm variance, written out): one call,
# its divide reads only the sum: one pass over the row, neither a second read nor a norm's launch.
MEAN = """
module @jit_forward {
  func.func public @main(%arg0: tensor<1x4096xf32> loc("inputs[0]")) -> (tensor<1x1xf32>) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32> loc(#loc8)
    %0 = stablehlo.reduce(%arg0 init: %cst) applies stablehlo.add across dimensions = [1] : (tensor<1x4096xf32>, tensor<f32>) -> tensor<1xf32> loc(#loc11)
    %1 = stablehlo.broadcast_in_dim %0, dims = [0] : (tensor<1xf32>) -> tensor<1x1xf32> loc(#loc12)
    %cst_1 = stablehlo.constant dense<4.096000e+03> : tensor<f32> loc(#loc8)
    %2 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<1x1xf32> loc(#loc13)
    %3 = stablehlo.divide %1, %2 : tensor<1x1xf32> loc(#loc13)
    return %3 : tensor<1x1xf32> loc(#loc8)
  } loc(#loc)
} loc(#loc)
#loc = loc(unknown)
#loc3 = loc("/work/model.py":8:29 to :84)
#loc4 = loc("/work/model.py":10:2 to :55)
#loc5 = loc("M.forward"(#loc3))
#loc6 = loc("<module>"(#loc4))
#loc7 = loc(callsite(#loc5 at #loc6))
#loc8 = loc("jit(forward)"(#loc6))
#loc11 = loc("jit(forward)/reduce_sum"(#loc7))
#loc12 = loc("jit(forward)/broadcast_in_dim"(#loc7))
#loc13 = loc("jit(forward)/div"(#loc7))
"""


def test_a_mean_is_no_two_pass_row_kernel():
    rf = Roofline(analyze(MEAN, AnalysisOptions(dataflow=True)), get_profile("h200"), execution="eager")
    (k,) = [k for k in rf.fusion.kernels if k.members]
    assert k.bytes_read == 4096 * 4 + 2 * 4  # the row once, and the two scalar constants
    rate = 4.8e12 * 0.885
    # the stream at the full rate (one reduced row at reduce_row_ns), not at 1 / 2112 of it
    assert k.memory_s == pytest.approx((k.bytes_read + k.bytes_written + 19e6) / rate + 0.18e-9, rel=1e-9)
