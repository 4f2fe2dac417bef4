"""STDiT3 (OpenSora 1.2's video diffusion transformer) trained as its authors train it: ZeRO-2 with optional
Ulysses sequence parallelism (ColossalAI's ``LowLevelZeroPlugin`` / OpenSora's ``ZeroSeqParallelPlugin``,
``plugin="zero2"`` / ``"zero2-seq"`` with ``sp_size``), bf16, block-wise gradient checkpointing.

What OpenSora 1.2 runs (github.com/hpcaitech/Open-Sora, tag v1.2.0): ``configs/opensora-v1-2/train/stage{1,2,3}
.py``: ``plugin = "zero2"``, ``dtype = "bf16"``, ``grad_checkpoint = True``, ``enable_flash_attn=True``, a bucket of
(resolution, frames) -> batch per GPU; ``scripts/train.py`` one optimizer step per batch (no accumulation), the VAE
and T5 encoders run in the step under ``no_grad`` (``stage1_feat.py`` reads precomputed features instead: the
plan prices the STDiT3 step only). ``opensora/models/stdit/stdit3.py``: with sequence parallelism the tokens are
split along S (each frame's spatial tokens); spatial blocks take ``SeqParallelAttention`` (one all_to_all of
q, k, v in, one of the output back: ``opensora/models/layers/blocks.py``) and ``SeqParallelMultiHeadCrossAttention``
(an all_to_all of the queries in and of the output back; the caption keys/values split by heads, all-gathered in
the backward); temporal blocks are local. ``opensora/acceleration/plugin.py``: the ZeRO optimizer is given no
group, so it shards and reduces over every rank (sp x dp); ColossalAI reduce-scatters the bf16 gradients in
buckets overlapped with the backward and all-gathers the bf16 parameters after the step.

The per-device layer is one spatial + one temporal block, forward + backward + AdamW on fp32 master weights, at
the Ulysses-sharded sequence (T frames x S/n tokens: OpenSora splits each frame's S tokens evenly, n must divide
S), lowered from shapes by :mod:`.stdit3_layer`; its all_to_alls are priced by
:meth:`STDiT3ScaleConfig.a2a_collectives` on the system's network, not overlapped. Cross-attention attends each
sample's own caption (OpenSora's xformers block-diagonal mask: the FLOPs of the diagonal blocks only).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import jax

from .attention_check import refusal as attention_kernel_refusal
from .config import ScaleConfig
from .megatron_passes import passes_invalid
from .sharding import Collective, cp_groups

#: ColossalAI LowLevelZero's gradient bucket (``reduce_bucket_size_in_m=12``: 12 Mi elements).
BUCKET_ELEMS = 12 * 1024 * 1024


@dataclass(frozen=True)
class STDiT3ScaleConfig(ScaleConfig):
    """STDiT3 at scale: ``layers`` spatial + temporal block pairs (28 for XL/2), ``frames`` x ``frame_tokens``
    video tokens per sample (``seq`` = their product), ``caption_tokens`` T5 tokens of ``hidden`` width after the
    caption embedder; ``cp`` is the Ulysses degree (OpenSora's ``sp_size``), ``d`` the data-parallel degree,
    ``micro_batch`` the batch per GPU (one micro-batch per step: OpenSora does not accumulate)."""

    layers: int = 28
    hidden: int = 1152
    heads: int = 16
    ffn: int = 4608
    vocab: int = 1  # (no vocabulary)
    frames: int = 15  # T: latent frames (patch 1)
    frame_tokens: int = 3600  # S: tokens per frame (latent H/2 x W/2)
    seq: int = 15 * 3600
    caption_tokens: int = 300
    caption_channels: int = 4096  # T5-XXL's width (the caption embedder's input)
    shape: str = ""  # the video shape it came from (FRAMES_WIDTH_HEIGHT), for the label
    dropout: bool = False
    recompute: str = "full"  # OpenSora's grad_checkpoint=True: every block checkpointed
    attention: str = "fused"  # enable_flash_attn=True
    zero: int = 2
    cp_comm: str = "a2a"
    grad_reduce_fp32: bool = False  # ColossalAI reduces the bf16 gradients as they are

    @property
    def local_frame_tokens(self) -> int:
        """Tokens of one frame on one Ulysses rank: S / n."""
        return self.frame_tokens // self.cp

    @property
    def local_seq(self) -> int:
        return self.frames * self.local_frame_tokens

    @property
    def block_config(self):
        """The lowering's :class:`~mhlo_cost.lower.models.config.STDiT3Config` of one block pair."""
        from ...lower.models.config import STDiT3Config

        return STDiT3Config(depth=1, hidden=self.hidden, heads=self.heads, mlp_ratio=self.mlp / self.hidden,
                            caption_tokens=self.caption_tokens, caption_channels=self.caption_channels,
                            dtype=self.dtype)

    @property
    def extra_weight_elems(self) -> int:
        """Parameters outside the blocks (embedders, t_block, final layer), from the model's parameter tree."""
        from ...lower.models.stdit3_params import is_spec_leaf, param_spec

        spec = param_spec(self.block_config)
        spec.pop("spatial_blocks"), spec.pop("temporal_blocks")
        leaves = jax.tree_util.tree_leaves(spec, is_leaf=is_spec_leaf)
        return sum(_prod(shape) for shape, _ in leaves)

    def model_invalid(self) -> str | None:
        for k in ("frames", "frame_tokens", "caption_tokens", "caption_channels"):
            v = getattr(self, k)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                return f"{k} must be a positive integer, got {v!r}"
        if self.seq != self.frames * self.frame_tokens:
            return f"seq {self.seq} must be frames x frame tokens ({self.frames} x {self.frame_tokens})"
        if self.recompute in ("selective", "op"):
            return "STDiT3 recomputes whole blocks (OpenSora's grad_checkpoint) or nothing: recompute full or none"
        return super().model_invalid()

    def invalid(self) -> str | None:
        why = self.model_invalid()
        if why:
            return why
        if (self.t, self.p, self.sp, self.interleave) != (1, 1, False, 1):
            return "STDiT3 trains with data and Ulysses sequence parallelism only (no tensor or pipeline split)"
        why = attention_kernel_refusal(self) or passes_invalid(self)  # Megatron's kernels: the GPT-style layer's
        if why:
            return why
        if self.heads % self.cp:
            return f"Ulysses degree {self.cp} does not divide heads {self.heads}"
        if self.frame_tokens % self.cp:
            return (f"Ulysses degree {self.cp} does not divide a frame's {self.frame_tokens} tokens (OpenSora splits "
                    "them evenly: communications._split asserts it)")
        if self.cp > 1 and self.cp_comm != "a2a":
            return "STDiT3's sequence parallelism is Ulysses (cp_comm a2a)"
        if self.zero_stage > 2 or self.dp_shard:
            return "OpenSora's ColossalAI plugin runs ZeRO stage 0-2 over every rank (no FSDP, no HSDP)"
        if self.global_batch != self.micro_batch * self.d:
            return (f"global batch {self.global_batch} must be batch per GPU x data degree ({self.micro_batch} x "
                    f"{self.d}): OpenSora steps once per batch (ZeRO-2 cannot accumulate gradients)")
        return None

    def layer_key(self) -> tuple:
        return ("stdit3", self.hidden, self.heads, self.mlp, self.frames, self.local_frame_tokens,
                self.frame_tokens, self.cp, self.caption_tokens, self.micro_batch, self.recompute, self.attention,
                self.attention_library, self.dtype) + (() if self.execution == "compiled" else (self.execution,))

    def label(self) -> str:
        sp = f" ulysses{self.cp}" if self.cp > 1 else ""
        z = f" zero{self.zero_stage}" if self.zero_stage else ""
        fa = " flash-attn" if self.attention == "fused" else ""
        fa += f"({self.attention_library})" if self.attention_library else ""
        return f"stdit3 {self.shape or f'{self.frames}x{self.frame_tokens}'}{sp} d{self.d} mb{self.micro_batch} " \
               f"{self.recompute}{z}{fa}"

    # -- what train-plan's generic parts ask of a model -------------------------------------------------------

    def lower_layer(self) -> str:
        from .stdit3_layer import lower_pair

        return lower_pair(self)

    def a2a_collectives(self) -> list[Collective]:
        """Ulysses' collectives of one block pair and micro-batch (see :func:`ulysses_collectives`)."""
        return ulysses_collectives(self)

    def model_flops(self) -> int:
        """Closed form of the iteration's forward + backward matrix FLOPs (:func:`pair_flops`)."""
        return self.layers * pair_flops(self) * self.global_batch


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


#: OpenSora 1.2's bucket resolutions at their base aspect ratio (``opensora/datasets/aspect.py``, v1.2.0: 9:16
#: landscape for the "p" names, 1:1 for the square ones), as (width, height) in pixels.
BUCKETS = {"144p": (256, 144), "240p": (426, 240), "360p": (640, 360), "480p": (854, 480), "720p": (1280, 720),
           "1080p": (1920, 1080), "2k": (2560, 1440), "256": (256, 256), "512": (512, 512), "1024": (1024, 1024),
           "2048": (2048, 2048)}


def bucket_shape(bucket: str) -> str:
    """``RESOLUTION:FRAMES`` (an OpenSora bucket: ``720p:51``) as the video shape FRAMES_WIDTH_HEIGHT
    (``51_1280_720``) at the resolution's base aspect ratio; ValueError says what is wrong."""
    res, _, frames = bucket.partition(":")
    if res not in BUCKETS or not frames.isdigit() or int(frames) < 1:
        raise ValueError(f"a bucket is RESOLUTION:FRAMES with RESOLUTION one of {', '.join(BUCKETS)} (OpenSora 1.2's) "
                         f"and FRAMES a positive integer, got {bucket!r}")
    w, h = BUCKETS[res]
    return f"{int(frames)}_{w}_{h}"


def stdit3_config(shape: str = "204_640_360", **fields) -> STDiT3ScaleConfig:
    """STDiT3-XL/2 at the video ``shape`` (FRAMES_WIDTH_HEIGHT, as ``lower --shape``), ``fields`` replacing its own."""
    from ...lower.models.config import STDiT3Config, VideoShape

    c = STDiT3Config().with_shape(VideoShape.parse(shape))
    base = dict(frames=c.tokens_t, frame_tokens=c.tokens_s, seq=c.tokens_t * c.tokens_s, shape=shape)
    cfg = STDiT3ScaleConfig(**{**base, **fields})
    if "seq" not in fields and ("frames" in fields or "frame_tokens" in fields):
        cfg = replace(cfg, seq=cfg.frames * cfg.frame_tokens)
    return cfg


def pair_flops(cfg: STDiT3ScaleConfig) -> int:
    """Forward + backward matrix FLOPs of one block pair on one sample (3 x forward): per block, the
    linears over N = T S tokens (qkv 3C^2, proj C^2, cross q and proj 2C^2, fc1 + fc2 2 C F) and the caption's
    kv (2C^2 over L tokens), cross-attention 4 N L C, self-attention 4 T S^2 C (spatial) or 4 S T^2 C (temporal)."""
    c, f, t, s, cap = cfg.hidden, cfg.mlp, cfg.frames, cfg.frame_tokens, cfg.caption_tokens
    n = t * s
    linears = 2 * n * (6 * c * c + 2 * c * f) + 2 * cap * 2 * c * c
    block = 2 * linears + 2 * 4 * n * cap * c
    return 3 * (block + 4 * t * s * s * c + 4 * s * t * t * c)


def ulysses_collectives(cfg: STDiT3ScaleConfig) -> list[Collective]:
    """Per block pair and micro-batch, over the Ulysses group (``cp`` ranks): the spatial self-attention's 4
    all_to_all (q, k, v in, output out) and the spatial cross-attention's 2 (queries in, output out), each of
    S = b x T x S/n x C bf16 (the operand one rank holds), forward and again backward (and their forward
    repeated by the recompute); the backward's all_gather of the caption keys' and values' gradients (b L 2C)."""
    if cfg.cp == 1:
        return []
    a = 2 * cfg.micro_batch * cfg.local_seq * cfg.hidden
    group = cp_groups(cfg)
    fwd = [Collective("spatial attention q, k, v, out", "all_to_all", a, group, "layer_forward", 4),
           Collective("spatial cross-attention q, out", "all_to_all", a, group, "layer_forward", 2)]
    bwd = [replace(c, per="layer_backward") for c in fwd]
    if cfg.recompute == "full":
        bwd += [replace(c, what=c.what + " (recompute)", per="layer_backward") for c in fwd]
    kv = Collective("spatial cross-attention dK, dV", "all_gather", 2 * cfg.micro_batch * cfg.caption_tokens * 2
                    * cfg.hidden, group, "layer_backward")
    return fwd + bwd + [kv]


# -- memory per GPU ----------------------------------------------------------------------------------------------


def memory(cfg: STDiT3ScaleConfig, cost, working=None, capacity: float | None = None) -> dict:
    """Bytes per GPU under ColossalAI's LowLevelZero (stage ``zero``, over every rank: ``cp x d``), exact ints:

    * weights: the bf16 working parameters, whole on every rank (the pairs' from the IR, plus the embedders');
    * gradients: stage 2: the bf16 gradient shard plus one 12 Mi-element bucket being reduced; else all of them;
    * optimizer state: fp32 master weights and AdamW's two moments (the step's donated fp32 arguments), sharded
      over every rank from stage 1; and OpenSora's fp32 EMA copy of the model, sharded over every rank whatever
      the stage (``scripts/train.py``: ``model_sharding(ema)``);
    * activations: each of the ``layers`` pairs' input and saved tensors (with recompute: the two blocks' inputs)
      plus, with recompute, the activations of the block being recomputed and back-propagated: half the pair's
      saved tensors without recompute (``working``: that pair's cost; the two blocks keep the same shapes with
      flash attention).
    """
    n, z, shard, extra = cfg.layers, cfg.zero_stage, cfg.shard_degree, cfg.extra_weight_elems
    elems = cost.weight_elems * n + extra
    state = (cost.master_bytes + cost.moment_bytes) * n + 12 * extra
    held = n * (cost.input_bytes + cost.saved_bytes)  # (a pair's input is the previous pair's output)
    if cfg.recompute == "full" and working is not None:
        held += working.saved_bytes // 2
    out = {"weights": 2 * elems,
           "gradients": 2 * elems // shard + 2 * min(BUCKET_ELEMS, elems) if z >= 2 else 2 * elems,
           "optimizer_state": (state // shard if z >= 1 else state) + 4 * elems // (cfg.cp * cfg.d),
           "activations": held}
    out["total"] = sum(out[k] for k in ("weights", "gradients", "optimizer_state", "activations"))
    if capacity:
        out["capacity"] = int(capacity)
        out["fits"] = out["total"] <= capacity
    return out


def comm_per_step(cost, cfg: STDiT3ScaleConfig) -> dict:
    """Bytes one GPU sends per step (exact ints), by collective: (n-1)/n S for all_to_all, all_gather and
    reduce_scatter (the ring convention), with the counts of the schedule (``layers`` pairs, one micro-batch)."""
    from .sharding import dp_collectives

    out = {}
    n_layers = cfg.layers
    for c in (*dp_collectives(cfg, cost, n_layers), *ulysses_collectives(cfg)):
        k = c.size
        times = c.count * (n_layers if c.per.startswith("layer") else 1)
        out[f"{c.what} ({c.kind})"] = out.get(f"{c.what} ({c.kind})", 0) + times * c.nbytes * (k - 1) // k
    return out


def facts(p, lines: list[str]) -> list[str]:
    """The plan's lines for STDiT3: the FLOPs line in its own closed form, comm per step, what is left out."""
    c, cfg = p.iteration.counts, p.cfg
    lines = list(lines)
    each = f", the caption's keys and values made on each of the {cfg.cp} Ulysses ranks" if cfg.cp > 1 else ""
    lines[1] = (f"model FLOPs {c['model_flops']:,} (forward + backward of the blocks from the IR{each}; closed form "
                f"{c['formula_flops']:,}); hardware FLOPs {c['hardware_flops']:,} (recompute "
                "included)")
    comm = comm_per_step(p.cost, cfg)
    lines.append(f"comm per step per GPU: {sum(comm.values()):,} bytes sent ("
                 + "; ".join(f"{k} {v:,}" for k, v in comm.items()) + ")")
    tokens = cfg.micro_batch * cfg.seq * cfg.d
    lines.append(f"throughput: {tokens / p.iteration.total:,.0f} tokens/s, {tokens / p.iteration.total / cfg.gpus:,.0f}"
                 f" tokens/s/GPU ({cfg.frames} x {cfg.frame_tokens} tokens a sample); the VAE and T5 encoders, "
                 "the embedders' and final layer's compute and the EMA update are left out")
    return lines


__all__ = ["BUCKETS", "STDiT3ScaleConfig", "bucket_shape", "stdit3_config", "pair_flops", "ulysses_collectives", "memory",
           "comm_per_step", "facts"]
