"""Prologue fusion: a weight-only dequantise (unpack int4, subtract the zeros, scale) fused into its GEMM, as
Marlin / AWQ / Machete kernels run it; the expected bytes are closed forms worked out here."""
from __future__ import annotations

import dataclasses
import json

import jax.numpy as jnp
from jax import lax

from mhlo_cost import analyze
from mhlo_cost.analysis import AnalysisOptions
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.roofline import fuse
from helpers import lowered, run_cli

H100 = dataclasses.replace(get_profile("h100"), gemm=None)
M, K, N, G = 1, 256, 512, 64  # G: the quantisation group along K


def unpack(q, axis):
    """uint8 holding two int4 (low nibble first) -> uint8 twice as long along ``axis``."""
    both = jnp.stack([q & jnp.uint8(15), lax.shift_right_logical(q, jnp.uint8(4))], axis=axis + 1)
    shape = list(q.shape)
    shape[axis] *= 2
    return both.reshape(shape)


def dequantised(x, packed, scales, zeros):
    w = unpack(packed, 0).reshape(K // G, G, N).astype(x.dtype)
    w = w - unpack(zeros, 1).astype(x.dtype)[:, None, :]
    w = (w * scales.astype(x.dtype)[:, None, :]).reshape(K, N)
    return x @ w


SHAPES = (((M, K), jnp.bfloat16), ((K // 2, N), jnp.uint8), ((K // G, N), jnp.float16), ((K // G, N // 2), jnp.uint8))
X, PACKED, SCALES, ZEROS, OUT = 2 * M * K, K // 2 * N, 2 * K // G * N, K // G * N // 2, 2 * M * N


def fused(f, *shapes):
    d = analyze(lowered(f, *shapes), AnalysisOptions(dataflow=True))
    return d, fuse(d, H100)


def test_dequantise_joins_the_gemm_as_one_kernel_reading_the_packed_weight():
    d, f = fused(dequantised, *SHAPES)
    assert len(f.kernels) == 1
    k = f.kernels[0]
    assert k.has_dot and d.rows[k.head].kind == "dot"
    # + 4: the four one-byte scalar constants of the unpacking (the masks 15 and shifts 4), read as inputs
    assert k.bytes_read == X + PACKED + SCALES + ZEROS + 4
    assert k.bytes_written == OUT
    # the bf16 weight (2 K N bytes) is neither written nor read back
    assert k.bytes_read + k.bytes_written < 2 * K * N


def test_activation_producer_stays_its_own_kernel():
    # only the dequantising operand's kernels join the dot: the activation's elementwise kernel still writes x
    d, f = fused(lambda x, p, s, z: dequantised(x * x, p, s, z), *SHAPES)
    assert len(f.kernels) == 2
    act, gemm = f.kernels
    assert (act.bytes_read, act.bytes_written) == (X, X)
    assert gemm.bytes_read == X + PACKED + SCALES + ZEROS + 4 and gemm.bytes_written == OUT


def test_bf16_gemm_kernel_is_unchanged():
    d, f = fused(lambda x, w: x @ w, ((M, K), jnp.bfloat16), ((K, N), jnp.bfloat16))
    assert len(f.kernels) == 1
    assert (f.kernels[0].bytes_read, f.kernels[0].bytes_written) == (X + 2 * K * N, OUT)


def test_dequantised_weight_read_by_two_dots_is_written_once():
    d, f = fused(_shared, *SHAPES, ((M, K), jnp.bfloat16))
    dots = [k for k in f.kernels if k.has_dot]
    # neither dot takes the dequantise in: it writes the bf16 weight once and each dot reads it back
    assert [len(k.members) for k in dots] == [1, 1]
    assert all(k.bytes_read == X + 2 * K * N for k in dots)
    written = [t.shape for k in f.kernels if not k.has_dot for t in k.outputs]
    assert written.count((K, N)) == 1


def _shared(x, packed, scales, zeros, x2):
    w = unpack(packed, 0).reshape(K // G, G, N).astype(x.dtype)
    w = w - unpack(zeros, 1).astype(x.dtype)[:, None, :]
    w = (w * scales.astype(x.dtype)[:, None, :]).reshape(K, N)
    return x @ w, x2 @ w


def _step(capsys, precision: str) -> float:
    code, out, _ = run_cli(["serve", "--model", "gpt", "--decode", "--set", "layers=2", "--set", "hidden=2048",
                            "--set", "heads=16", "--batch", "1", "--context", "1024", "--precision", precision,
                            "--hardware", "h100", "--format", "json", "-q"], capsys)
    assert code == 0
    return json.loads(out)["summary"]["step_time_s"]


def test_w4a16_awq_decode_at_batch_1_is_faster_than_bf16(capsys):
    # batch 1 decode is weight-bound: the packed int4 weight is about a quarter of the bf16 bytes
    assert _step(capsys, "w4a16-awq") < _step(capsys, "bf16")
