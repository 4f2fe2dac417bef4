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


# --------------------------------------------------------------------------------------------------------
# Collective volumes of the parallel strategies (mhlo_cost/lower/models/parallel.py), per device, in bytes
# --------------------------------------------------------------------------------------------------------

_ELEM_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def ring_bytes(kind: str, full: int, n: int) -> int:
    """Per-device bytes of one collective over n devices, full = S of the nccl-tests convention.

    all_reduce 2(n-1)/n S; all_gather, reduce_scatter, all_to_all (n-1)/n S; collective_permute S;
    a fractional result rounded up (as the analyzer does).
    """
    if n <= 1:
        return 0
    if kind == "all_reduce":
        return _ceil_div(2 * (n - 1) * full, n)
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return _ceil_div((n - 1) * full, n)
    if kind == "collective_permute":
        return full
    raise ValueError(kind)


def comm_bytes(cfg, strategy: str, mesh: tuple) -> dict:
    """Closed-form per-device collective bytes of STDiT3 under ``strategy`` on ``mesh``.

    ``mesh``: (n,) for megatron / ulysses / ring, (N_x, N_y) for 2d. Keys: ``spatial_block``,
    ``temporal_block`` (one block each), ``blocks`` (all 2*depth), ``final_layer``, ``embedders``
    (x/t/fps/y embedders and t_block), ``total``; and per-block counts of each collective kind in
    ``spatial_counts`` / ``temporal_counts``.
    """
    e = _ELEM_BYTES[cfg.dtype]
    b, c, t, s = cfg.batch, cfg.hidden, cfg.tokens_t, cfg.tokens_s
    n_tok = t * s
    f = cfg.mlp_hidden
    patch_out = cfg.patch[0] * cfg.patch[1] * cfg.patch[2] * cfg.out_channels
    act = b * n_tok * c * e  # one (B, T*S, C) activation
    spatial = temporal = final = 0
    sc, tc = {}, {}
    if strategy == "megatron":
        (n,) = mesh
        # all_reduce after the attention out-projection, the cross-attention out-projection and fc2
        spatial = temporal = 3 * ring_bytes("all_reduce", act, n)
        sc = tc = {"all_reduce": 3}
    elif strategy == "2d":
        nx, ny = mesh
        act_x = (b // nx) * n_tok * c * e  # the tokens of the local samples, gathered over Y
        pairs = 3 * (ring_bytes("all_gather", act_x, ny) + ring_bytes("reduce_scatter", act_x, ny))
        weights = [(c, 3 * c), (c, c), (c, c), (c, 2 * c), (c, c), (c, f), (f, c)]  # qkv proj q kv proj fc1 fc2
        wgather = sum(ring_bytes("all_gather", fi * fo // ny * e, nx) for fi, fo in weights)
        spatial = temporal = pairs + wgather
        sc = tc = {"all_gather": 3 + len(weights), "reduce_scatter": 3}
        final = ring_bytes("all_gather", (b // nx) * n_tok * patch_out * e, ny)
    elif strategy in ("ulysses", "ring"):
        (n,) = mesh
        s_loc = _ceil_div(s, n)  # frame tokens per device, S padded to s_loc * n
        local = b * t * s_loc * c * e  # q, k, v or the attention output held by one device
        if strategy == "ulysses":
            spatial = 4 * ring_bytes("all_to_all", local, n)  # q, k, v in; output back
            sc = {"all_to_all": 4}
        else:
            spatial = 2 * (n - 1) * ring_bytes("collective_permute", local, n)  # K and V, n-1 steps each
            sc = {"collective_permute": 2 * (n - 1)}
        temporal = 0  # T is whole on every device: temporal attention is local
        final = ring_bytes("all_gather", b * t * s_loc * n * patch_out * e, n)
    else:
        raise ValueError(f"no closed form for {strategy!r}")
    blocks = cfg.depth * (spatial + temporal)
    return {"spatial_block": spatial, "temporal_block": temporal, "blocks": blocks, "final_layer": final,
            "embedders": 0, "total": blocks + final, "spatial_counts": sc, "temporal_counts": tc}
