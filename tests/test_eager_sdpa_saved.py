"""An SDPA call in eager PyTorch is one kernel whatever autograd keeps (issue 38): under ``--recompute none`` the
layer's JAX program saves the probabilities for its backward behind an ``optimization_barrier`` (JAX's fence over the
residuals), and the eager attention kernel must not take that fence in (it read every residual of the layer and wrote
them all again: 7.57 ms against 2.75 ms for torchtitan's Llama 3 8B layer on an A100). The independent checks: the
same SDPA kernel runs under ``--recompute full`` (the program saves no probability there), and the kernel's traffic is
the closed form of a flash forward (Q, K, V and the mask in, O out). Inductor took the same fence into its SDPA kernel
(the attention finder it shares with eager: :func:`mhlo_cost.roofline.attention_backward.find_attention_backward`)."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import analyse_layer, dense_layer
from mhlo_cost.studies.study import Study
from mhlo_cost.walk.row import short_name

A100 = resolve_profile("dgx-a100")
# a Llama-shaped layer: grouped-query attention (2 key/value heads of 4), a SwiGLU MLP, bf16, head dim 32
B, S, H, A, KV, F = 2, 64, 128, 4, 2, 384
D = H // A
LLAMA = dict(layers=2, hidden=H, heads=A, kv_heads=KV, ffn=F, seq=S, vocab=256, mlp_kind="swiglu", arch="llama",
             micro_batch=B, global_batch=B, dropout=False, attention="fused", execution="eager")


def _cfg(**kw) -> ScaleConfig:
    return ScaleConfig(**{**LLAMA, **kw})


def _chip():
    return A100.chip if hasattr(A100, "chip") else A100


def _forward_sdpa(cfg: ScaleConfig):
    """The eager kernels of the layer's forward attention (scope ``core``, a library attention) and the rows."""
    st = Study(dense_layer(cfg), training="always", hardware=_chip(), execution=cfg.execution,
               attention=cfg.attention, dataflow=True)
    a, fu = st.analysis, st.roofline.fusion
    ks = [k for k in fu.kernels if k.attention and a.phases.phase[k.members[0]] == "forward"]
    return ks, a.rows


def test_no_recompute_prices_the_forward_attention_as_under_full():
    """The forward seconds of the attention proper (scope ``core``) are the same SDPA kernel's under ``none`` and
    ``full``: the probabilities the ``none`` program saves change nothing that PyTorch runs."""
    none, full = analyse_layer(_cfg(recompute="none"), A100), analyse_layer(_cfg(recompute="full"), A100)
    assert none.core_s["forward"] > 0
    assert none.core_s["forward"] == pytest.approx(full.core_s["forward"], rel=1e-9)


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_the_sdpa_forward_reads_qkv_and_the_mask_and_writes_o(recompute):
    """One forward SDPA kernel of no fence: it writes O only (B x S x H bf16) and reads Q, K and V (B x S x H each: the
    layer repeats the key/value heads before the call, as torchtitan's ``repeat_kv``), the causal mask (S x S booleans)
    and the softmax's scalars (two bf16, one f32), a closed form of a flash forward; no ``optimization_barrier`` among
    its members."""
    ks, rows = _forward_sdpa(_cfg(recompute=recompute))
    assert len(ks) == 1
    k = ks[0]
    assert not any(short_name(rows[i].op) == "optimization_barrier" for i in k.members)
    assert k.bytes_written == B * S * H * 2
    assert k.bytes_read == 3 * B * S * H * 2 + S * S + 2 * 2 + 4


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_inductors_sdpa_forward_writes_o_only(recompute):
    """Under torch.compile the SDPA kernel Inductor calls holds no fence either: one forward attention kernel, O
    (B x S x H bf16) its only write, and it reads no more than Q, K and V at every head, the mask and three scalars
    (the closed form above; it read every residual the fence holds before)."""
    ks, rows = _forward_sdpa(_cfg(recompute=recompute, execution="inductor"))
    assert len(ks) == 1
    k = ks[0]
    assert not any(short_name(rows[i].op) == "optimization_barrier" for i in k.members)
    assert k.bytes_written == B * S * H * 2
    assert B * S * H * 2 <= k.bytes_read <= 3 * B * S * H * 2 + S * S + 2 * 2 + 4
