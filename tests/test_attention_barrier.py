"""A flash attention kernel with an ``optimization_barrier`` among its members (JAX keeps a training step's saved
values behind one): the barrier is an identity, XLA emits no kernel for it, so the kernel neither reads what the
barrier passes from outside it to outside it nor writes it, and the probabilities it passes on stay on chip (a
flash kernel writes O and its row statistics only: FlashAttention-2, Dao 2023, Algorithm 1; its backward recomputes
P from Q, K and the statistics, Algorithm 2). A value the kernel itself reads through the barrier is still read."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.roofline import Roofline

B, H, S, D, C = 2, 8, 1024, 128, 4096
QKV = B * H * S * D * 2  # one of Q, K, V, O, dO, dQ, dK, dV in bf16
Y = B * S * C * 2  # the value made outside the attention that rides the barrier


def _step(double: bool):
    def step(q, k, v, do, x):
        y = jnp.tanh(x)  # made by its own kernel, outside the attention
        scale = jnp.sqrt(jnp.float32(D)).astype(q.dtype)
        p = jax.nn.softmax(jnp.einsum("bhqd,bhkd->bhqk", q, k) / scale, axis=-1)
        o = jnp.einsum("bhqk,bhkd->bhqd", p, v)
        p, y = jax.lax.optimization_barrier((p, y))  # the saved probabilities and a passenger
        dv = jnp.einsum("bhqk,bhqd->bhkd", p, do)
        dp = jnp.einsum("bhqd,bhkd->bhqk", do, v)
        ds = p * (dp - jnp.sum(dp * p, axis=-1, keepdims=True))
        dq = jnp.einsum("bhqk,bhkd->bhqd", ds, k) / scale
        dk = jnp.einsum("bhqk,bhqd->bhkd", ds, q) / scale
        return o, dq, dk, dv, (y * 2 if double else y)
    return step


def _kernels(double: bool):
    spec = jax.ShapeDtypeStruct((B, H, S, D), jnp.bfloat16)
    text = jax.jit(_step(double)).lower(spec, spec, spec, spec, jax.ShapeDtypeStruct((B, S, C), jnp.bfloat16)).as_text()
    a = analyze(text, AnalysisOptions(dataflow=True))
    rf = Roofline(a, get_profile("h100"), execution="compiled")
    att = [k for k in rf.fusion.kernels if k.attention]
    barrier = [k for k in att if any(a.rows[i].op.endswith("optimization_barrier") for i in k.members)]
    assert len(att) == 2 and len(barrier) == 1  # the forward and the backward; the barrier in one of them
    return barrier[0]


def test_a_passenger_of_the_barrier_is_neither_read_nor_written_by_the_flash_kernel():
    k = _kernels(double=False)
    # the backward reads Q, K, V and dO (and two bf16 scalars: the scale) and writes dQ, dK, dV: not the
    # passenger (16 MiB, read once and written once before) nor the probabilities (B H S S)
    assert k.bytes_read == pytest.approx(4 * QKV, abs=16)
    assert k.bytes_read < 4 * QKV + Y
    assert k.bytes_written == 3 * QKV


def test_a_value_the_kernel_reads_through_the_barrier_is_read():
    k = _kernels(double=True)
    # y * 2 fused into the kernel reads the passenger through the barrier and writes its product
    assert k.bytes_read == pytest.approx(4 * QKV + Y, abs=16)
    assert k.bytes_written == 3 * QKV + Y
