"""What a decode step is priced as: the donated cache updated in place (a scatter writes only its updates), a
cache transposed for ``Q K^T`` read in place by the attention kernel, the step's fused kernels moving the
weights and the cache once, and ``--launch cuda-graphs`` removing exactly one host launch per kernel. Every
expected number is a closed form worked out here from the shapes."""
from __future__ import annotations

import importlib.util

import jax
import jax.numpy as jnp
import pytest

from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.roofline import Roofline
from helpers import lowered

H100 = get_profile("h100")
B, H, L, D = 2, 4, 512, 64
BF16 = 2


def fused(text: str) -> Roofline:
    return Roofline(analyze(text, AnalysisOptions(dataflow=True)), H100, fuse_mode="elementwise")


def test_scatter_into_a_donated_cache_writes_only_its_updates():
    def update(cache, pos, new):  # index_copy_ of one position into every (batch, head) row
        return cache.at[:, :, pos].set(new)

    text = lowered(update, ((B, H, L, D), jnp.bfloat16), ((1,), jnp.int32), ((B, H, 1, D), jnp.bfloat16),
                   donate=(0,))
    assert "scatter" in text
    rf = fused(text)
    new = B * H * D * BF16
    # the kernels read the update and the index (and the scatter's clamp of it: a few bytes), write the update;
    # the B x H x L x D cache is neither read nor rewritten
    read = sum(k.bytes_read for k in rf.fusion.kernels)
    written = sum(k.bytes_written for k in rf.fusion.kernels)
    assert new <= read <= new + 64
    assert written == new or new <= written <= new + 64
    assert read + written < B * H * L * D * BF16 // 8


def test_scatter_into_fresh_zeros_writes_the_whole_buffer():
    def grad(pos, g):  # the gradient of a gather: its rows added into a zero table
        return jnp.zeros((L, D), jnp.float32).at[pos].add(g)

    rf = fused(lowered(grad, ((B,), jnp.int32), ((B, D), jnp.float32)))
    assert sum(k.bytes_written for k in rf.fusion.kernels) >= L * D * 4  # the zeros are written too


def test_attention_over_a_transposed_cache_reads_it_once():
    def decode_attention(q, k, v):  # torch's q @ k.transpose(-1, -2): the cache transposed, then multiplied
        s = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) / 8.0
        p = jax.nn.softmax(s.astype(jnp.float32), -1).astype(q.dtype)
        return jnp.matmul(p, v)

    q = ((B, H, 1, D), jnp.bfloat16)
    kv = ((B, H, L, D), jnp.bfloat16)
    text = lowered(decode_attention, q, kv, kv)
    assert "transpose" in text
    rf = fused(text)
    (att,) = [k for k in rf.fusion.kernels if k.attention]
    assert len(rf.fusion.kernels) == 1  # no kernel of its own copies K^T through memory
    qo, cache = B * H * D * BF16, B * H * L * D * BF16
    assert 0 <= att.bytes_read - (qo + 2 * cache) <= 16  # Q, K and V once (and a scalar constant)
    assert att.bytes_written == qo


pytestmark_hf = pytest.mark.skipif(importlib.util.find_spec("torchax") is None
                                   or importlib.util.find_spec("transformers") is None,
                                   reason="torchax and transformers lower the library decoder")
LAYERS, HIDDEN, HEADS, KV, INTER, VOCAB, CTX, BATCH = 2, 64, 4, 2, 128, 128, 512, 4
HD = HIDDEN // HEADS


@pytest.fixture(scope="module")
def llama_decode():
    from mhlo_cost.studies.serve import StepRequest, lower_step

    sets = dict(num_hidden_layers=LAYERS, hidden_size=HIDDEN, intermediate_size=INTER, num_attention_heads=HEADS,
                num_key_value_heads=KV, vocab_size=VOCAB)
    step = lower_step(StepRequest(mode="decode", batch=BATCH, context=CTX, hf="LlamaForCausalLM", config="llama",
                                  overrides=tuple(sorted(sets.items()))))
    return step, analyze(step.lowered.text, AnalysisOptions(dataflow=True))


@pytestmark_hf
def test_decode_kernels_move_weights_and_cache_once(llama_decode):
    step, a = llama_decode
    per_layer = HIDDEN * HIDDEN * 2 + 2 * HIDDEN * KV * HD + 3 * HIDDEN * INTER + 2 * HIDDEN
    embedding = VOCAB * HIDDEN * BF16  # gathered: only BATCH rows of it are read
    weights = (2 * VOCAB * HIDDEN + LAYERS * per_layer + HIDDEN) * BF16
    cache = 2 * LAYERS * KV * HD * CTX * BATCH * BF16
    assert step.weight_bytes == weights and step.layout.nbytes == cache
    moved = fused(step.lowered.text).totals()["fused_bytes"]
    # the rest is the token's activations (a few KB): far below one more pass over the cache (131 KB here),
    # which a copy of the cache, a transposed K or a scatter rewriting its buffer would each add
    assert weights - embedding + cache <= moved < weights - embedding + cache + cache // 4


@pytestmark_hf
def test_cuda_graphs_remove_one_host_launch_per_kernel(llama_decode):
    from mhlo_cost.studies.serve.serve import figures, launched
    from mhlo_cost.views.serve import step_view
    from mhlo_cost.views.render import render

    step, a = llama_decode
    stream = figures(step, H100, analysis=a, blocks=False)
    graphs = figures(step, H100, analysis=a, blocks=False, launch="cuda-graphs")
    kernels = Roofline(a, H100, fuse_mode="elementwise").totals()["fused_kernels"]
    assert graphs.step_time_s == pytest.approx(stream.step_time_s - kernels * H100.kernel_overhead, rel=1e-9)
    assert graphs.bytes_moved == stream.bytes_moved and graphs.launch == "cuda-graphs"
    assert launched(H100, "stream") is H100 and launched(H100, "cuda-graphs").kernel_overhead == 0.0
    assert "cuda-graphs" in render(step_view(graphs), "table") and "cuda-graphs" not in render(step_view(stream), "table")
    with pytest.raises(ValueError, match="unknown launch"):
        launched(H100, "eager")


def test_serve_rejects_an_unknown_launch(capsys):
    from mhlo_cost.cli import main
    from stderr_lines import error_line

    assert main(["serve", "--model", "gpt", "--launch", "graphs"]) == 2
    assert "--launch" in error_line(capsys.readouterr().err)
