"""A causal mask added to the scores as a bias (PyTorch's SDPA with ``is_causal=True`` lowered through torchax: the
-inf of ``where(tril)`` added to Q K^T) is read as causal: the flash kernel PyTorch runs skips the key blocks above
the diagonal, (n + 1) / (2 n) of the n x n blocks visited, forward and backward; a bias looked up from a table at
indices made from iotas (T5's relative positions) is not a mask."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.roofline import Roofline
from mhlo_cost.roofline.attention_compute import additive_index_mask

B, H, S, D = 1, 4, 1024, 64
RECORDS = ("masks", "layouts")


def _torch_sdpa_text(causal: bool, train: bool) -> str:
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    from mhlo_cost.lower.training.torchax_steps import module_forward

    class Call(torch.nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    forward, params, buffers = module_forward(Call())
    spec = jax.ShapeDtypeStruct((B, H, S, D), jnp.bfloat16)

    def fwd(q, k, v):
        return forward(params, buffers, (q, k, v), {})

    if not train:
        return jax.jit(fwd).lower(spec, spec, spec).as_text(debug_info=True)

    def step(q, k, v, g):
        out, vjp = jax.vjp(fwd, q, k, v)
        return out, vjp(g)

    return jax.jit(step).lower(spec, spec, spec, spec).as_text(debug_info=True)


def _attention_compute(text: str) -> list[float]:
    a = analyze(text, AnalysisOptions(dataflow=True, records=RECORDS))
    rf = Roofline(a, get_profile("h200"), execution="eager")
    return [k.compute_s for k in rf.fusion.kernels if k.attention]


@pytest.mark.parametrize("train", [False, True], ids=["forward", "forward+backward"])
def test_torchax_is_causal_visits_the_blocks_on_and_below_the_diagonal(train):
    hw = get_profile("h200")
    n = S // hw.attention.tile  # key tiles of 128
    causal, full = _attention_compute(_torch_sdpa_text(True, train)), _attention_compute(_torch_sdpa_text(False, train))
    assert len(causal) == len(full) == (2 if train else 1)
    # a backward's two memory-bound passes (D = rowsum(dO * O), the f32 dQ accumulator: 3 x 2 + 8 bytes per element
    # of Q, 4 per query row) read every row whatever the mask; the products and exponentials visit the blocks
    passes = [0.0, hw.memory_time(B * H * S * (D * (3 * 2 + 8) + 4), 2)]
    for c, f, p in zip(causal, full, passes):
        assert (c - p) / (f - p) == pytest.approx((n + 1) / (2 * n), rel=1e-6)


def _bias_rows(lookup: bool):
    def f(s):
        i = jnp.arange(S)
        keep = i[:, None] >= i[None, :]
        if lookup:  # a table read at indices made from comparing iotas: the bias's values, not an index mask
            bias = jnp.linspace(-1.0, 1.0, 2, dtype=jnp.float32)[keep.astype(jnp.int32)]
        else:
            bias = jnp.where(keep, 0.0, -jnp.inf).astype(jnp.float32)
        return s + bias
    a = analyze(jax.jit(f).lower(jax.ShapeDtypeStruct((S, S), jnp.float32)).as_text(), AnalysisOptions(dataflow=True))
    adds = [i for i, r in enumerate(a.rows) if r.op.endswith(".add") and r.shape == f"{S}x{S}"]
    return a, adds[-1:]


@pytest.mark.parametrize("lookup,expected", [(False, True), (True, False)], ids=["where-bias", "gathered-bias"])
def test_an_added_bias_is_an_index_mask_only_when_made_from_compared_iotas(lookup, expected):
    a, adds = _bias_rows(lookup)
    assert adds
    assert additive_index_mask(a.rows, a.producers, adds, set(adds)) is expected
