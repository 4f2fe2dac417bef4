"""A transformers decoder of the Llama family (or DeepSeek-V3's mixture of experts) as a
:class:`~mhlo_cost.studies.plan.config.ScaleConfig`.

The configuration is read as ``lower --hf`` reads it (:func:`mhlo_cost.lower.frontends.hub.hf_config`: a
config.json, a model type, ``--set`` overrides; no weights). A Llama-family model (``model_type`` llama,
mistral, qwen2) maps to: layers = ``num_hidden_layers``, hidden = ``hidden_size``, heads =
``num_attention_heads``, key/value heads = ``num_key_value_heads`` (grouped-query attention), ffn =
``intermediate_size`` with the SwiGLU MLP (gate, up, down: three ffn GEMMs), vocabulary = ``vocab_size``.
The per-device layer is the Llama block (``arch="llama"``, :mod:`.llama_layer`): RMSNorm, no biases, the rotary
embedding of q and k; the dropouts stay the caller's choice (Llama trains without: ``dropout=False``).
"""
from __future__ import annotations

from .config import ScaleConfig

LLAMA_LIKE = ("llama", "mistral", "qwen2")
#: Mixture-of-experts decoders mapped with their experts (:mod:`.moe`); their MLA attention as multi-head attention.
MOE_LIKE = ("deepseek_v3",)


def hf_scale_config(name: str, config: str | None, overrides: dict, seq: int | None = None) -> ScaleConfig:
    """The ScaleConfig of transformers class ``name`` with ``config`` (``seq``: else the configuration's
    ``max_position_embeddings``). ValueError says why a model does not fit."""
    from ...lower.frontends.hub import hf_config, import_library

    mod = import_library("hf")
    cls = getattr(mod, name, None)
    if cls is None:
        raise ValueError(f"transformers has no class {name!r}")
    cfg = hf_config(cls, config, overrides)
    kind = getattr(cfg, "model_type", "")
    if kind in MOE_LIKE:
        return _moe_scale_config(name, cfg, seq)
    if kind not in LLAMA_LIKE:
        raise ValueError(f"train-plan --hf maps Llama-family decoders ({', '.join(LLAMA_LIKE)}); "
                         f"{name} is a {kind or 'model without a model_type'}")
    if getattr(cfg, "hidden_act", "silu") != "silu":
        raise ValueError(f"{name}: hidden_act {cfg.hidden_act!r}: only the SiLU-gated (SwiGLU) MLP maps")
    heads = cfg.num_attention_heads
    return ScaleConfig(layers=cfg.num_hidden_layers, hidden=cfg.hidden_size, heads=heads,
                       kv_heads=getattr(cfg, "num_key_value_heads", None) or heads, ffn=cfg.intermediate_size,
                       vocab=cfg.vocab_size, seq=seq or cfg.max_position_embeddings, mlp_kind="swiglu", arch="llama")


def _moe_scale_config(name: str, cfg, seq: int | None) -> ScaleConfig:
    """A DeepSeek-V3-style configuration: the Llama-family fields, and ``n_routed_experts``,
    ``num_experts_per_tok``, ``moe_intermediate_size``, ``n_shared_experts``, ``first_k_dense_replace`` (every
    later layer a MoE layer). MLA (``q_lora_rank``, ``kv_lora_rank``) is priced as multi-head attention of
    ``num_attention_heads`` at ``hidden_size`` (the plan's facts say so)."""
    if getattr(cfg, "hidden_act", "silu") != "silu":
        raise ValueError(f"{name}: hidden_act {cfg.hidden_act!r}: only the SiLU-gated (SwiGLU) MLP maps")
    if getattr(cfg, "moe_layer_freq", 1) != 1:
        raise ValueError(f"{name}: moe_layer_freq {cfg.moe_layer_freq}: only every layer after the dense ones "
                         "being a MoE layer maps")
    heads = cfg.num_attention_heads
    return ScaleConfig(layers=cfg.num_hidden_layers, hidden=cfg.hidden_size, heads=heads,
                       kv_heads=getattr(cfg, "num_key_value_heads", None) or heads, ffn=cfg.intermediate_size,
                       vocab=cfg.vocab_size, seq=seq or cfg.max_position_embeddings, mlp_kind="swiglu",
                       experts=cfg.n_routed_experts, top_k=cfg.num_experts_per_tok,
                       expert_ffn=cfg.moe_intermediate_size, shared_experts=cfg.n_shared_experts or 0,
                       dense_layers=cfg.first_k_dense_replace)
