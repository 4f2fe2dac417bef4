"""One attention's training step in bf16 (B x H x S x D, softmax over the keys, forward and backward), lowered and
walked with its dataflow: the program the attention-kernel tests price."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from mhlo_cost.analysis import AnalysisOptions, analyze

B, H, S, D = 2, 8, 1024, 128


def _attention(q, k, v):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(jnp.float32(D)).astype(q.dtype)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)


def _step(q, k, v, do):
    out, vjp = jax.vjp(_attention, q, k, v)
    return (out, *vjp(do))


def attention_step_program(dtype=jnp.bfloat16):
    """The walked program of the attention's forward and backward on ``dtype`` inputs."""
    spec = jax.ShapeDtypeStruct((B, H, S, D), dtype)
    return analyze(jax.jit(_step).lower(spec, spec, spec, spec).as_text(), AnalysisOptions(dataflow=True))
