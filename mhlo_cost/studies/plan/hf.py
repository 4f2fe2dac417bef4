"""A transformers decoder that fits the GPT pattern, as a :class:`~mhlo_cost.studies.plan.config.ScaleConfig`.

The configuration is read as ``lower --hf`` reads it (:func:`mhlo_cost.lower.frontends.hub.hf_config`: a
config.json, a model type, ``--set`` overrides; no weights). A Llama-family model (``model_type`` llama,
mistral, qwen2) maps to: layers = ``num_hidden_layers``, hidden = ``hidden_size``, heads =
``num_attention_heads``, key/value heads = ``num_key_value_heads`` (grouped-query attention), ffn =
``intermediate_size`` with the SwiGLU MLP (gate, up, down: three ffn GEMMs), vocabulary = ``vocab_size``.
What the per-device layer still does the GPT way: LayerNorm with bias where Llama has RMSNorm, biases on the
projections, no rotary embedding (elementwise work, a few percent of a layer's time; no GEMM FLOPs), the
dropouts (Llama trains without: ``dropout=False`` is the caller's choice).
"""
from __future__ import annotations

from .config import ScaleConfig

LLAMA_LIKE = ("llama", "mistral", "qwen2")


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
    if kind not in LLAMA_LIKE:
        raise ValueError(f"train-plan --hf maps Llama-family decoders ({', '.join(LLAMA_LIKE)}); "
                         f"{name} is a {kind or 'model without a model_type'}")
    if getattr(cfg, "hidden_act", "silu") != "silu":
        raise ValueError(f"{name}: hidden_act {cfg.hidden_act!r}: only the SiLU-gated (SwiGLU) MLP maps")
    heads = cfg.num_attention_heads
    return ScaleConfig(layers=cfg.num_hidden_layers, hidden=cfg.hidden_size, heads=heads,
                       kv_heads=getattr(cfg, "num_key_value_heads", None) or heads, ffn=cfg.intermediate_size,
                       vocab=cfg.vocab_size, seq=seq or cfg.max_position_embeddings, mlp_kind="swiglu")
