"""The eager model's elementwise paths (issue 25): PyTorch eager runs an elementwise op with a broadcast or a
permuted operand on TensorIterator's generic path and a widening conversion on its unrolled path, both slower
than its vectorized stream (measured on an H200: benchmarks/data/measured_h200.toml). Expected bytes and times
are worked out here from the shapes."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.machines.kernels import MemoryModel, parse_memory
from mhlo_cost.roofline import Roofline

N = 2048
BF16 = jnp.bfloat16


def _kernels(fn, *shapes):
    args = [jax.ShapeDtypeStruct(s, d) for s, d in shapes]
    text = jax.jit(fn).lower(*args).as_text(debug_info=True)
    rf = Roofline(analyze(text, AnalysisOptions(dataflow=True)), get_profile("h200"), execution="eager")
    return rf.fusion.kernels


def _only(kernels):
    work = [k for k in kernels if k.bytes_read + k.bytes_written > 0]
    assert len(work) == 1, [(k.members, k.path) for k in work]
    return work[0]


def test_memory_model_rates_are_capped_per_path():
    m = parse_memory({"efficiency": 0.5, "half_size_mb": 0, "generic_tbps": 1.0, "convert_tbps": 3.0}, "t")
    peak = 4e12  # streaming: 2 TB/s
    assert m.rate(peak) == 2e12
    assert m.rate(peak, "generic") == 1e12
    assert m.rate(peak, "convert") == 2e12  # a cap above the stream changes nothing
    assert MemoryModel(0.5).rate(peak, "generic") == 2e12  # no field: the stream on every path
    with pytest.raises(ValueError, match="generic_tbps"):
        parse_memory({"generic_tbps": -1}, "t")


def test_broadcast_operand_takes_the_generic_path():
    k = _only(_kernels(lambda x, v: x + v[None, :], ((N, N), BF16), ((N,), BF16)))
    assert k.path == "generic"
    nbytes = 2 * N * N + 2 * N + 2 * N * N  # x and v read once, the sum written
    assert k.bytes_read + k.bytes_written == nbytes
    hw = get_profile("h200")
    # fill and drain at the streaming rate, the bytes at generic_tbps = 1.51 [MEAS] (hardware.toml)
    expected = hw.memory.half_bytes / (hw.hbm_bandwidth * hw.memory.efficiency) + nbytes / 1.51e12
    assert k.memory_s == pytest.approx(expected, rel=1e-9)


def test_contiguous_and_alike_permuted_operands_stream():
    assert _only(_kernels(lambda x, y: x + y, ((N, N), BF16), ((N, N), BF16))).path == "stream"
    scalars = _kernels(lambda x: x * 0.5 + 1.0, ((N, N), BF16))  # two calls; a scalar is a kernel argument
    assert [k.path for k in scalars if k.bytes_read] == ["stream", "stream"]
    both = _only(_kernels(lambda x, y: x.T + y.T, ((N, N), BF16), ((N, N), BF16)))
    assert both.path == "stream"  # one layout: TensorIterator keeps its vector loads
    mixed = _only(_kernels(lambda x, y: x.T + y, ((N, N), BF16), ((N, N), BF16)))
    assert mixed.path == "generic"


def test_widening_conversion_takes_the_unrolled_path():
    k = _only(_kernels(lambda x: x.astype(jnp.float32), ((N, N), BF16)))
    assert k.path == "convert"
    assert k.bytes_read + k.bytes_written == 2 * N * N + 4 * N * N
    narrowing = _only(_kernels(lambda x: x.astype(BF16), ((N, N), jnp.float32)))
    assert narrowing.path == "stream"


def test_reshape_of_a_permuted_tensor_is_a_copy_kernel():
    a, b, c = 64, 32, 48

    def regroup(x):  # x.transpose(0, 1).reshape(b, a * c): not a view in PyTorch
        return jnp.transpose(x, (1, 0, 2)).reshape(b, a * c)

    k = _only(_kernels(regroup, ((a, b, c), BF16)))
    assert k.path == "generic"
    assert (k.bytes_read, k.bytes_written) == (2 * a * b * c, 2 * a * b * c)
    # splitting the last dimension of a plain tensor is a view: no kernel at all
    assert not [k for k in _kernels(lambda x: x.reshape(a, b, c // 2, 2), ((a, b, c), BF16))
                if k.bytes_read + k.bytes_written]


def test_a_reduction_pays_a_fixed_time_per_row():
    rows, width = 1 << 16, 32
    (k,) = [k for k in _kernels(lambda x: x.sum(-1), ((rows, width), jnp.float32)) if k.bytes_read]
    hw = get_profile("h200")
    nbytes = 4 * rows * width + 4 * rows  # read once, one f32 per row written
    stream = (nbytes + hw.memory.half_bytes) / (hw.hbm_bandwidth * hw.memory.efficiency)
    assert k.memory_s == pytest.approx(stream + rows * 0.18e-9, rel=1e-9)  # reduce_row_ns = 0.18 [MEAS]


def test_a_reduction_over_a_non_minor_dimension_streams():
    """The backward of torchtitan's repeat_kv (expand over a repeat axis, then reshape): a sum over the repeat axis
    of (b, s, kv, rep, d), the head dim kept. PyTorch's Reduce.cuh maps threads to the outputs there (no
    fastest-striding reduction): the bytes stream with no per-output time."""
    outs, rep, d = 1 << 12, 4, 128
    (k,) = [k for k in _kernels(lambda x: x.sum(1), ((outs, rep, d), jnp.float32)) if k.bytes_read]
    hw = get_profile("h200")
    nbytes = 4 * outs * rep * d + 4 + 4 * outs * d  # read once (and the f32 init value), each output written once
    assert k.bytes_read + k.bytes_written == nbytes
    stream = (nbytes + hw.memory.half_bytes) / (hw.hbm_bandwidth * hw.memory.efficiency)
    assert k.memory_s == pytest.approx(stream, rel=1e-9)  # no outs x 0.18 ns
    # the same bytes reduced over the minor dimension pay it: (outs x d) rows of rep elements
    (inner,) = [k for k in _kernels(lambda x: x.sum(-1), ((outs, d, rep), jnp.float32)) if k.bytes_read]
    assert inner.memory_s == pytest.approx(stream + outs * d * 0.18e-9, rel=1e-9)


def _row_time(k, nbytes: int) -> float:
    """The kernel's time beyond its stream of ``nbytes`` (the closed form's bytes, asserted first)."""
    hw = get_profile("h200")
    assert k.bytes_read + k.bytes_written == nbytes
    return k.memory_s - (nbytes + hw.memory.half_bytes) / (hw.hbm_bandwidth * hw.memory.efficiency)


def _reduce(fn, shape):
    (k,) = [k for k in _kernels(fn, (shape, jnp.float32)) if k.bytes_read]
    return k


def test_a_reduction_next_to_a_size_one_extent_is_innermost():
    """TensorIterator coalesces extents of 1: (65536, 256, 1) summed over dim 1 reduces the fastest-moving
    dimension, a warp per output: it pays reduce_row_ns (0.18 ns [MEAS]) for each of its 65536 outputs."""
    outs, width = 1 << 16, 256
    k = _reduce(lambda x: x.sum(1), (outs, width, 1))
    extra = _row_time(k, 4 * outs * width + 4 + 4 * outs)  # read once, the f32 init value, one f32 an output
    assert extra == pytest.approx(outs * 0.18e-9, rel=1e-6)


def test_a_reduction_that_could_be_over_the_minor_dimension_keeps_the_row_time():
    """(256, 64, 64) summed over (0, 2) gives (64,), the shape a sum over (0, 1) would give too: the shapes
    cannot tell whether the minor dimension is reduced, so it keeps the minor reduction's time per output."""
    k = _reduce(lambda x: x.sum((0, 2)), (256, 64, 64))
    extra = _row_time(k, 4 * 256 * 64 * 64 + 4 + 4 * 64)
    assert extra == pytest.approx(64 * 0.18e-9, rel=1e-6)


def test_a_reduction_with_many_inputs_per_output_keeps_the_row_time():
    """Outside the minor dimension Reduce.cuh's setReduceConfig puts 32 lanes on 4-wide output vectors (512 / 4
    = 128 threads, so block_height = 128 / 32 = 4 warps) and splits the input across those warps when the
    inputs per output reach 16 x 4 = 64: a block reduction per output, priced like the minor one. (2048, 64, 128)
    over dim 1 has 64 inputs per output and pays 2048 x 128 x 0.18 ns; (2048, 32, 128) has 32 and streams."""
    outs, d = 2048, 128
    k = _reduce(lambda x: x.sum(1), (outs, 64, d))
    extra = _row_time(k, 4 * outs * 64 * d + 4 + 4 * outs * d)
    assert extra == pytest.approx(outs * d * 0.18e-9, rel=1e-6)
    k = _reduce(lambda x: x.sum(1), (outs, 32, d))
    assert _row_time(k, 4 * outs * 32 * d + 4 + 4 * outs * d) == pytest.approx(0.0, abs=1e-12)
