"""Llama 4's expert layer, routed as the others are (:mod:`.moe`).

transformers' ``Llama4TextExperts`` is not made by ``use_experts_implementation``: it takes no routing at all.
Its holder, ``Llama4TextMoe``, repeats every token once per expert, scales each copy by its router score (the
sigmoid of the logit for the token's top-k experts, zero for the others) and runs every expert on every token
(two ``bmm`` over all ``E`` experts), so that a lowering of the library's code counts ``E / k`` times the
expert work of a routed deployment. While lowering, the holder's forward is :func:`holder_forward` instead:
the router runs as written, the top-k scores it kept become the copies' weights, and the experts run
:func:`.moe.static_forward` on the tokens' ``k`` copies, each copy scaled by its score *before* the experts
(as Llama 4 weighs its inputs) and the copies summed after them; the shared expert runs as written.
"""
from __future__ import annotations

CLASS = "Llama4TextExperts"


def is_experts(mod) -> bool:
    """Llama 4's expert layer: 3-D ``gate_up_proj`` [E, h, 2f] and ``down_proj`` [E, f, h] weights."""
    weights = (getattr(mod, "gate_up_proj", None), getattr(mod, "down_proj", None))
    return type(mod).__name__ == CLASS and all(getattr(w, "ndim", 0) == 3 for w in weights) \
        and isinstance(getattr(mod, "num_experts", None), int)


class ExpertsView:
    """Llama 4's experts as :func:`.moe.static_forward` reads an expert layer: weights ``[E, in, out]``
    (transposed), no bias, a gated ``gate_up_proj`` whose first half is the gate (``up * act(gate)``)."""

    is_transposed = True
    has_bias = False
    has_gate = True

    def __init__(self, mod):
        self._mod = mod

    def __getattr__(self, name):
        return getattr(self._mod, name)

    def _apply_gate(self, gate_up):
        gate, up = gate_up.chunk(2, dim=-1)
        return up * self._mod.act_fn(gate)


def holder_forward(holder):
    """``Llama4TextMoe.forward`` with its experts routed: ``(out, router_logits)`` as the library returns them."""
    import jax
    import torch

    def forward(hidden_states):
        hidden = hidden_states.reshape(-1, holder.hidden_dim)
        scores, logits = holder.router(hidden)  # [T, E]: the top-k experts' sigmoid scores, zero elsewhere
        with jax.named_scope("router"):
            weights, index = torch.topk(scores, holder.top_k, dim=1)  # the k scores the router kept
        routed = holder.experts(hidden, index, weights)
        return holder.shared_expert(hidden) + routed, logits

    return forward
