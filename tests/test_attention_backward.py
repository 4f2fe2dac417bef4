"""A training program's attention backward in the compiled, Inductor and eager estimates: one flash-attention backward
kernel (FlashAttention-2/3's algorithm: dV, dP, dQ, dK and the score product recomputed from Q, K, five products
of the score's size where the forward has two: 2.5x its FLOPs), compute-bound at the library's backward
fraction, the B x H x S x S scores never written."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import pytest
from attention_case import B, D, H, S, attention_step_program

from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.roofline import Roofline



@pytest.fixture(scope="module")
def program():
    return attention_step_program()


# The h100 profile's attention table gives each library's forward and backward fraction of the bf16 peak and its
# ramp (key tiles of 128); the compiled estimate runs the profile's default library (FA3), Inductor and eager torch's
# flash SDPA backend (FA2: eager PyTorch runs an SDPA call's backward as its backend's one backward kernel, not the
# ops autograd would run for the attention written out). The exposed exponentials (``exp_exposed``) are set to 0 here so that the kernel's time is its
# products' alone: 5 products of the score's size for the backward, 2 for the forward.
@pytest.mark.parametrize("execution, library", [("compiled", "fa3"), ("inductor", "fa2"), ("eager", "fa2")])
def test_backward_is_one_compute_bound_flash_kernel_of_2_5x_the_forward_flops(program, execution, library):
    h100 = get_profile("h100")
    libs = tuple((name, dataclasses.replace(lib, exp_exposed=0.0)) for name, lib in h100.attention.libraries)
    hw = dataclasses.replace(h100, attention=dataclasses.replace(h100.attention, libraries=libs))
    e = hw.attention.get(library)
    rf = Roofline(program, hw, execution=execution)
    kernels = [k for k in rf.fusion.kernels if k.attention]
    dots = [[i for i in k.members if program.rows[i].kind == "dot"] for k in kernels]
    assert [len(d) for d in dots] == [2, 4]  # the forward (QK^T, PV) and the backward (dV, dP, dQ, dK)
    fwd, bwd = kernels
    one = 2 * B * H * S * S * D  # one product of the score's size
    assert sum(program.rows[i].gemm_flops for i in dots[1]) == 4 * one
    tiles = S / 128
    ramp = tiles / (tiles + e.ramp)
    want = 5 * one / (989.4e12 * e.backward * ramp)  # 2.5x the forward's two products, recompute included
    # plus its two memory-bound passes (FlashAttention's bwd preprocess / postprocess): O and dO read (bf16), D
    # written (f32 per row), the f32 dQ accumulator zeroed, then read and written out as dQ (bf16)
    passes = B * H * S * D * (2 + 2 + 4 + 4 + 2) + B * H * S * 4
    want += hw.memory_time(passes, 2)
    assert bwd.compute_s == pytest.approx(want, rel=1e-9)
    # the backward of an SDPA call runs its forward's backend (torch's flash backward is FA2's, not the default FA3)
    assert fwd.library == bwd.library
    assert bwd.compute_s > bwd.memory_s  # compute-bound, not a memory-bound kernel
    assert fwd.compute_s == pytest.approx(2 * one / (989.4e12 * e.forward * ramp), rel=1e-9)
    scores = B * H * S * S * 2
    assert fwd.bytes_read + fwd.bytes_written < scores  # the forward saves no probabilities for the backward
    assert bwd.bytes_read + bwd.bytes_written < scores  # the scores (and probabilities) never reach HBM


def test_eager_math_backend_backward_is_the_ops_autograd_runs(program):
    """On the math backend the SDPA call is its ops, and so is its backward: no library kernel, the probabilities
    written to HBM (B x H x S x S, bf16) by the forward and read by the backward."""
    rf = Roofline(program, get_profile("h100"), execution="eager", sdpa="math")
    assert not any(k.attention for k in rf.fusion.kernels)
    assert max(k.bytes_written for k in rf.fusion.kernels) >= B * H * S * S * 2


@pytest.mark.parametrize("dtype, size", [(jnp.bfloat16, 2), (jnp.float32, 4)])
def test_backward_passes_move_q_sized_tensors_in_the_inputs_type_and_f32(dtype, size):
    """The backward's two memory-bound passes (FlashAttention's bwd preprocess and postprocess) move, per element of
    Q: O and dO read and dQ written in the inputs' type, the f32 dQ accumulator zeroed and read (2 x 4 bytes); and
    D (f32) written per query row. Worked out here from B, H, S, D."""
    from mhlo_cost.roofline.attention_compute import _pass_bytes

    a = attention_step_program(dtype)
    rf = Roofline(a, get_profile("h100"), execution="compiled")
    bwd = [k for k in rf.fusion.kernels if k.attention][-1]
    dots = [i for i in bwd.members if a.rows[i].kind == "dot"]
    assert _pass_bytes(a.rows, dots, S) == B * H * S * D * (3 * size + 2 * 4) + B * H * S * 4
