"""Closed-form GEMM FLOPs of STDiT3, written from the architecture alone (not from the analyzer).

A GEMM of an (M, K) by (K, N) matrix costs 2*M*N*K FLOPs. Everything here is plain integer arithmetic on
the configuration so the tests can compare it with what the analyzer counts in the lowered IR.

Counted: every linear layer (qkv / q / kv / out projections, MLPs, embedders, t_block, final linear) and
the attention matmuls (q@k^T and scores@v). Not counted: the patch-embedding convolution (a conv, not a
dot_general), normalisations, softmax, RoPE and element-wise work.
"""
from __future__ import annotations


def _linear(tokens: int, fan_in: int, fan_out: int) -> int:
    return 2 * tokens * fan_in * fan_out


def gemm_flops(cfg) -> dict:
    """GEMM FLOPs of one STDiT3 forward for an ``STDiT3Config``-like object.

    Keys: ``spatial_block``, ``temporal_block`` (one block each), ``spatial_blocks``, ``temporal_blocks``
    (all ``depth`` of them), ``y_embedder``, ``t_embedder``, ``fps_embedder``, ``t_block``,
    ``final_layer``, ``embedders`` (sum of the five previous), and ``total``. Also the parts of one block
    (``self_attn_linear``, ``spatial_attn_core``, ``temporal_attn_core``, ``cross_attn``, ``mlp``).
    """
    b = cfg.batch
    c = cfg.hidden
    t = cfg.tokens_t
    s = cfg.tokens_s
    n = t * s  # video tokens per sample
    m = b * n  # video tokens in the batch
    lc = cfg.caption_tokens
    mlp_hidden = cfg.mlp_hidden
    patch_out = cfg.patch[0] * cfg.patch[1] * cfg.patch[2] * cfg.out_channels

    # Self-attention projections: qkv (C -> 3C) and the output projection (C -> C) over all tokens.
    self_attn_linear = _linear(m, c, 3 * c) + _linear(m, c, c)
    # q@k^T and scores@v: per sequence of length L, 2*L*L*C each (summed over heads), B*T sequences of S
    # tokens for the spatial block, B*S sequences of T tokens for the temporal one.
    spatial_core = 2 * (2 * (b * t) * s * s * c)
    temporal_core = 2 * (2 * (b * s) * t * t * c)
    # Cross-attention as OpenSora runs it: q over the B*N video tokens, kv over the B*Lc caption tokens,
    # then a dense (B*N) x (B*Lc) attention (block-diagonal mask applied to the dense scores).
    cross_attn = (
        _linear(m, c, c)  # q
        + _linear(b * lc, c, 2 * c)  # kv
        + 2 * (2 * m * (b * lc) * c)  # q@k^T and scores@v
        + _linear(m, c, c)  # out projection
    )
    mlp = _linear(m, c, mlp_hidden) + _linear(m, mlp_hidden, c)

    spatial_block = self_attn_linear + spatial_core + cross_attn + mlp
    temporal_block = self_attn_linear + temporal_core + cross_attn + mlp

    y_embedder = _linear(b * lc, cfg.caption_channels, c) + _linear(b * lc, c, c)
    t_embedder = _linear(b, cfg.freq_dim, c) + _linear(b, c, c)
    fps_embedder = _linear(b, cfg.freq_dim, c) + _linear(b, c, c)
    t_block = _linear(b, c, 6 * c)
    final_layer = _linear(m, c, patch_out)
    embedders = y_embedder + t_embedder + fps_embedder + t_block + final_layer

    total = cfg.depth * (spatial_block + temporal_block) + embedders
    return {
        "self_attn_linear": self_attn_linear,
        "spatial_attn_core": spatial_core,
        "temporal_attn_core": temporal_core,
        "cross_attn": cross_attn,
        "mlp": mlp,
        "spatial_block": spatial_block,
        "temporal_block": temporal_block,
        "spatial_blocks": cfg.depth * spatial_block,
        "temporal_blocks": cfg.depth * temporal_block,
        "y_embedder": y_embedder,
        "t_embedder": t_embedder,
        "fps_embedder": fps_embedder,
        "t_block": t_block,
        "final_layer": final_layer,
        "embedders": embedders,
        "total": total,
    }
