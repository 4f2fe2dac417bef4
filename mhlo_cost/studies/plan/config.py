"""A training configuration at scale: the model's shape and how it is split over devices.

A :class:`ScaleConfig` names a GPT-style decoder (layers, hidden, heads, sequence, vocabulary, MLP width)
and Megatron-LM's split of it: tensor degree ``t`` (the column/row split of the attention and MLP weights),
sequence parallelism ``sp`` (the norms and dropouts sharded along the sequence; each all_reduce becomes a
reduce_scatter + all_gather), pipeline degree ``p`` with ``interleave`` virtual stages per device (1: 1F1B),
data degree ``d`` with the gradient reduction ``dp_comm`` (``all_reduce``, or ``zero``: reduce_scatter +
all_gather with the optimizer state sharded d ways), the micro-batch ``micro_batch`` and the
``global_batch``, and the ``recompute`` policy (``none``; ``selective``: the core attention's forward again,
its scores not kept, :mod:`.recompute`; ``full``: the whole layer, only its input kept; ``op``: torchtitan's
selective op policy, every second linear's output and the elementwise ops recomputed, :data:`~.layer.OP_SAVED`).

The sharding of the data-parallel replicas, in one vocabulary (:mod:`.sharding` prices it): ``zero`` the
ZeRO stage (0: replicated, gradients all_reduced; 1: optimizer state sharded, Megatron's
``--use-distributed-optimizer`` and the old ``dp_comm="zero"``; 2: gradients too; 3: parameters too, FSDP),
``dp_shard`` the sharding group (HSDP: shard within groups of ``dp_shard`` replicas, replicate across
``d / dp_shard``; 0: all ``d``), ``reshard_after_forward`` (FSDP: the parameters all-gathered again for the
backward, or kept unsharded from the forward). Context parallelism ``cp`` splits the sequence (load-balanced
causal chunks; ``cp_comm``: ``p2p``, ring attention's send/recv of K/V, or ``all_gather``). Uneven
pipelines: ``first_stage_layers`` / ``last_stage_layers`` (Megatron's ``--decoder-first/last-pipeline-num-
layers``), the other stages splitting the rest evenly (:meth:`ScaleConfig.stage_layers`).
``arch``: the layer's architecture, ``gpt`` (the bundled GPT's: LayerNorm with biases, biased linears) or
``llama`` (RMSNorm, no biases, rotary embedding: :mod:`.llama_layer`). ``attention``:
``unfused`` (the attention as its separate kernels, Megatron 2022's; the default) or ``fused`` (one flash-attention
kernel, as NeMo, Megatron-Core and torchtitan run it), with ``attention_library`` the fused kernel's library
(``fa2``, ``fa3``, ``cudnn``; empty: the profile's default) as the training stack calls it. ``execution``: how
the step runs, ``compiled`` (fused kernels, the default), ``eager`` (PyTorch eager: one kernel per framework op, the
attention one SDPA call where fused) or ``inductor`` (torch.compile), priced by the execution models of
:mod:`mhlo_cost.roofline`. ``grad_reduce_fp32``: gradients reduced in fp32 (default) or
in the parameters' 2-byte dtype (Megatron 2021's fp16 runs without ``--accumulate-allreduce-grads-in-fp32``).

:meth:`ScaleConfig.invalid` says why a split cannot run (one sentence), or None.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .config_check import (ARCH, ATTENTION, CP_COMM, CROSS_ENTROPY, DP_COMM, EXECUTION, RECOMPUTE,  # noqa: F401
                           TP_OVERLAP_RS, invalid, model_invalid)
from .megatron_passes import ACTIVATION  # noqa: F401 (re-exported)
from .sharding_check import CP_TORCH, DP_REDUCE  # noqa: F401 (re-exported)

@dataclass(frozen=True)
class ScaleConfig:
    # the model
    layers: int = 4
    hidden: int = 256
    heads: int = 4
    seq: int = 128
    vocab: int = 1024
    ffn: int = 0  # MLP width; 0: 4 x hidden
    kv_heads: int = 0  # key/value heads (grouped-query attention); 0: heads
    mlp_kind: str = "gelu"  # gelu: fc1, GELU, fc2 (GPT); swiglu: gate and up, SiLU(gate) x up, down (Llama)
    arch: str = "gpt"  # the layer: gpt (LayerNorm, biases: .layer) | llama (RMSNorm, no biases, RoPE: .llama_layer)
    # the split
    t: int = 1
    p: int = 1
    d: int = 1
    sp: bool = False
    interleave: int = 1
    micro_batch: int = 1
    global_batch: int = 1
    recompute: str = "none"
    recompute_num_layers: int = 0  # with recompute full: the first K layers of each model chunk only (Megatron's
    # --recompute-method block --recompute-num-layers K), the others keeping everything (.partial_recompute)
    recompute_every: int = 0  # with recompute full: every N-th block only (torchtitan's selective_ac_option = "N")
    dp_comm: str = "all_reduce"
    dp_overlap: bool = False  # the data-parallel reduction overlaps the last micro-batch's backward
    dropout: bool = True  # Megatron's attention and hidden dropouts (their masks are activations)
    dtype: str = "bfloat16"
    precision: str = "bf16"  # the linears' recipe (mhlo_cost.machines.precision.TRAINING): bf16 or fp8
    zero: int = 0  # ZeRO stage 0-3 (3: FSDP); dp_comm="zero" (the old spelling) is stage 1
    dp_shard: int = 0  # HSDP: the sharding group's size (replicated d / dp_shard ways); 0: d
    reshard_after_forward: bool = True  # FSDP: parameters gathered again in the backward
    fsdp_version: int = 1  # FSDP's implementation: 1 (flat parameters: FSDP1, ZeRO 3) or 2 (fully_shard: .fsdp_copies)
    cp: int = 1  # context-parallel degree (the sequence split cp ways)
    cp_comm: str = "p2p"  # p2p: ring attention's K/V send/recv; all_gather: K/V all-gathered; CP_TORCH: PyTorch's
    kv_repeat: bool = False  # the model repeats its K/V heads to the query heads before the attention call
    # (torchtitan's Llama: repeat_kv before SDPA), so context parallelism exchanges heads, not kv_heads
    dp_reduce: str = "reduce_scatter"  # ZeRO 1's gradient reduction (DP_REDUCE)
    grad_accum_pass: bool = False  # gradients accumulated by a separate pass after each micro-batch's backward
    # (DeepSpeed's BF16 optimizer: 2-byte gradients zeroed, then added into its fp32 buffer), not by the wgrad GEMMs
    tied_embedding: bool = False  # the embedding and the LM head share one weight on the first and last stages:
    # its gradient all-reduced between them each iteration (Megatron's share_embeddings_and_output_weights)
    first_stage_layers: int = 0  # uneven pipeline: the first stage's layers (0: the default split)
    last_stage_layers: int = 0  # the last stage's
    account_embedding: bool = False  # the embedding counted as a layer of the first stage in the split
    account_loss: bool = False  # the loss (LM head) counted as a layer of the last stage
    attention: str = "unfused"  # unfused: Megatron 2022's separate kernels; fused: one flash-attention kernel
    grad_reduce_fp32: bool = True  # gradients reduced in fp32 (Megatron's main_grad); False: in the 2-byte dtype
    attention_library: str = ""  # fused attention's library (fa2, fa3, cudnn); "": the profile's default
    # mixture of experts (:mod:`.moe`; experts 0: a dense model, every field below unused)
    experts: int = 0  # routed experts E of each MoE layer
    top_k: int = 0  # experts each token is routed to
    expert_ffn: int = 0  # one expert's (SwiGLU) width
    shared_experts: int = 0  # shared experts, each expert_ffn wide, run on every token (one MLP of their width)
    dense_layers: int = 0  # the first layers keep the dense MLP (ffn wide): DeepSeek-V3's first_k_dense_replace
    ep: int = 1  # expert-parallel degree (Megatron's --expert-model-parallel-size), taken from the cp x d ranks
    capacity_factor: float = 0.0  # tokens an expert takes, x its balanced share (padded to it); 0: dropless
    expert_imbalance: float = 1.0  # the busiest EP rank's routed tokens / the balanced share (1.0: balanced)
    ep_overlap: bool = False  # the all_to_all hidden under another micro-batch's compute (DualPipe-style)
    expert_tp: int = 0  # expert tensor parallelism (--expert-tensor-parallel-size); 0: t, Megatron's default
    execution: str = "compiled"  # compiled (fused kernels), eager (PyTorch eager), inductor (torch.compile)
    inductor_comm_reorder: bool = False  # inductor: torch._inductor.config.reorder_for_compute_comm_overlap on, so
    # the collectives torch.compile traces (PyTorch's context parallel) overlap compute; off (torch's default): each
    # waited for where it is issued (.traced_waits)
    tp_comm_overlap: bool = False  # Transformer Engine's userbuffers: each TP collective overlapped with its GEMM
    # (Megatron-Core's --tp-comm-overlap, NeMo's tp_comm_overlap; needs sequence parallelism: .tp_overlap)
    tp_overlap_rs: str = "pipeline"  # its reduce_scatters: pipeline (4 splits, NeMo's) or ring_exchange
    async_tp: bool = False  # PyTorch's async TP (torchtitan's enable_async_tensor_parallel: Inductor's micro-pipeline
    # TP pass, symmetric memory): its fused all_gather-matmul / matmul-reduce_scatter pairs (.async_tp)
    pipeline_split: str = "megatron"  # whose rule splits interleaved uneven stages: megatron | torchtitan
    ddp: str = ""  # with dp_overlap: "" (hidden under one chunk's backward) | megatron (Megatron-Core's buckets: .dp_overlap)
    ddp_bucket_size: int = 0  # Megatron-Core's --ddp-bucket-size (elements; 0: its default); overlap_param_gather too:
    overlap_param_gather: bool = False  # the distributed optimizer's all-gather prefetched under the next forward
    cross_entropy: str = "fused"  # fused: the head's loss as lowered; megatron: Megatron-LM's eager kernels;
    # megatron-fused: Megatron-Core's cross_entropy_loss_fusion, torch.compile'd (.megatron_passes)
    loss_scale: bool = False  # fp16's dynamic loss scaling: Megatron's Float16Optimizer's grad copy and unscale passes
    main_grad_add: bool = False  # Megatron-LM's local DDP hook adding each micro-batch's gradients to main_grad
    scatter_gather: bool = False  # Megatron-LM's (2021-2022) / DeepSpeed's pipeline send of 1/t, all-gathered after
    torch_ddp: bool = False  # Megatron-LM 2021's --DDP-impl torch: PyTorch DDP's gradient bucket copies
    nccl_ub: bool = False  # Megatron-Core's --nccl-ub: FSDP's buffers NCCL-registered, its collectives on fewer SMs
    launch_blocking: bool = False  # CUDA_LAUNCH_BLOCKING=1: host time in series with each kernel (.launch_blocking)
    fp8_weight_cache: bool = False  # fp8 weight copies made on a step's first micro-batch and kept (Transformer
    # Engine's is_first_microbatch, as Megatron-Core / NeMo run it); False: cast at every use (torchao): .fp8_weights
    fp8_amax_history: int = 1024  # TE's delayed-scaling amax_history_len (its DelayedScaling default; NeMo's yamls);
    # 1 for current scaling (a scale and an amax per quantizer): TE's scaling state per GPU, .fp8_state
    fsdp_float8_all_gather: bool = False  # torchao Float8Linear's enable_fsdp_float8_all_gather under FSDP (ZeRO 3):
    # the fp8 linears' weights all-gathered in fp8, their unsharded copies 1 byte an element: .fp8_weights, .fp8_gather
    fsdp_float8_precompute_scale: bool = False  # with it, torchao's precompute_float8_dynamic_scale_for_fsdp: the
    # weights' amaxes in one all-reduce after the optimizer step instead of one per linear per gather: .fp8_gather
    activation: str = "gelu"  # a gelu MLP's activation: gelu (fused) | squared-relu: NeMo's eager relu and pow
    # kernels (Nemotron; the layer lowered with GELU, the same GEMMs: .megatron_passes)
    loss_upcast: bool = False  # memory: the loss as torchtitan's, PyTorch's eager cross_entropy of the logits upcast
    # to fp32, with the embedding, final norm and LM head under FSDP2's root: the peak at its backward (.torch_peak)
    activation_kernel: str = "compiled"  # the activation: compiled (in fc1's GEMM epilogue, as lowered) | megatron
    # (its own jitted kernel each way: bias_gelu / bias_swiglu; fp8: TE's cast of fc2's input: .mlp_activation)
    attention_kernel: str = "compiled"  # the unfused core attention: compiled (its lowered ops under the fusion
    # model) | megatron (Megatron-LM's fused causal softmax and PyTorch's dropout kernels: .attention_kernels)
    alibi: bool = False  # with attention_kernel megatron: Megatron-DeepSpeed's ALiBi bias as baddbmm's input, beta
    # != 0 (BLOOM): expanded and copied into the scores' buffer, read by the GEMM (.attention_kernels)
    clip_grad: float | None = None  # gradient clipping's max global L2 norm (the stacks' default 1.0; the CLI's);
    # None: not clipped. Its norm passes and scalar all-reduce(s) in the optimizer step (.grad_clip)
    dist_optimizer: str = "megatron"  # with ZeRO 1-2, whose distributed optimizer: megatron (Megatron-Core's) | apex
    # (Apex's DistributedFusedAdam, NeMo 1.x's optim.name distributed_fused_adam): its clip (.grad_clip)

    @property
    def mlp(self) -> int:
        return self.ffn or 4 * self.hidden

    @property
    def etp(self) -> int:
        """The expert tensor-parallel degree: ``expert_tp``, or ``t`` where not given (Megatron-Core's default)."""
        return self.expert_tp or self.t

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def gpus(self) -> int:
        return self.t * self.cp * self.p * self.d

    @property
    def zero_stage(self) -> int:
        """The ZeRO stage: ``zero``, or 1 where the old spelling ``dp_comm="zero"`` is given."""
        return self.zero or (1 if self.dp_comm == "zero" else 0)

    @property
    def shard_degree(self) -> int:
        """Ranks one replica's sharded state is split over: the sharding group (``dp_shard`` or ``d``) x ``cp``
        (weights are replicated over the context-parallel ranks, so Megatron and torchtitan shard over both);
        1 without ZeRO."""
        return (self.dp_shard or self.d) * self.cp if self.zero_stage else 1

    @property
    def replicate_degree(self) -> int:
        """HSDP's replicas of the sharded state (``d / dp_shard``; 1 without HSDP)."""
        return self.d // self.dp_shard if self.zero_stage and self.dp_shard else 1

    @property
    def grad_bytes(self) -> int:
        """Bytes of one gradient element as the data-parallel ranks reduce it: 4 (fp32, Megatron's
        ``--accumulate-allreduce-grads-in-fp32``, forced with bf16; torchtitan's ``reduce_dtype``) or 2 (Megatron
        2021's fp16 default: gradients reduced in the parameters' dtype)."""
        return 4 if self.grad_reduce_fp32 else 2

    @property
    def local_seq(self) -> int:
        """Positions one context-parallel rank holds: seq / cp."""
        return self.seq // self.cp

    @property
    def micro_batches(self) -> int:
        """m: micro-batches each pipeline runs per iteration (global batch / (micro-batch x d))."""
        return self.global_batch // (self.micro_batch * self.d)

    @property
    def layers_per_stage(self) -> int:
        """Layers one device holds (all its virtual stages together); uneven pipelines: the most any holds."""
        return max(self.stage_layers()) if self.stage_layers() else self.layers // self.p

    @property
    def uneven(self) -> bool:
        return len(set(self.stage_layers())) > 1

    @property
    def layers_per_chunk(self) -> int:
        """Layers of one virtual stage (a model chunk): layers / (p x interleave)."""
        return self.layers // (self.p * self.interleave)

    def stage_layers(self) -> tuple:
        """Layers of each pipeline stage; () where none can be made. As Megatron-core splits them: evenly where no
        option is given (``p`` must divide the layers); ``account_embedding`` / ``account_loss``
        (``--account-for-embedding-in-pipeline-split``, ``--account-for-loss-in-pipeline-split``) count the
        embedding / the loss as one layer of the first / last stage (126 layers on 16 stages with both: 7, 8 x 14,
        7); given first/last counts (``--decoder-first/last-pipeline-num-layers``), the other stages split the
        rest evenly."""
        L, p, first, last = self.layers, self.p, self.first_stage_layers, self.last_stage_layers
        if not (first or last):
            extra = int(self.account_embedding) + int(self.account_loss)
            if (L + extra) % p or (L + extra) // p <= (1 if p == 1 else 0) * extra:
                return ()
            per = (L + extra) // p
            if p == 1:
                return (L,)
            return ((per - int(self.account_embedding),) + (per,) * (p - 2) + (per - int(self.account_loss),)
                    if min(per - int(self.account_embedding), per - int(self.account_loss)) > 0 else ())
        inner = p - (1 if first else 0) - (1 if last else 0)
        rest = L - first - last
        if p < 2 or rest < 0 or (inner == 0 and rest) or (inner and (rest % inner or rest == 0)):
            return ()
        mid = (rest // inner,) * inner if inner else ()
        return ((first,) if first else ()) + mid + ((last,) if last else ())

    def model_invalid(self) -> str | None:
        """Why the model itself (whatever its split) cannot run, in one sentence; None where it can
        (:func:`.config_check.model_invalid`)."""
        return model_invalid(self)

    def invalid(self) -> str | None:
        """Why this configuration cannot run, in one sentence; None where it can (:func:`.config_check.invalid`)."""
        return invalid(self)

    def with_split(self, **kw) -> "ScaleConfig":
        return replace(self, **kw)

    def layer_key(self) -> tuple:
        """What decides the per-device layer's lowered program (configurations that share it share one
        lowering): shapes, the tensor degree, sequence parallelism, recompute and dropout."""
        key = (self.hidden, self.heads, self.seq, self.mlp, self.t, self.sp, self.micro_batch,
               self.recompute, self.dropout, self.dtype)
        key = key if (self.kv, self.mlp_kind) == (self.heads, "gelu") else key + (self.kv, self.mlp_kind)
        key = key if self.cp == 1 else key + (("cp", self.cp),)  # (keys without cp unchanged)
        key = key if self.precision == "bf16" else key + (self.precision,)  # (bf16 keys unchanged)
        key = key if self.attention == "unfused" else key + (("attention", self.attention),)
        key = key if self.execution == "compiled" else key + (("execution", self.execution),)
        key = key if self.arch == "gpt" else key + (("arch", self.arch),)  # (gpt keys unchanged)
        return key + (("attention_library", self.attention_library),) if self.attention_library else key

    def label(self) -> str:
        sp = "+sp" if self.sp else ""
        v = f" v{self.interleave}" if self.interleave > 1 else ""
        cp = f" cp{self.cp}{_CP_LABEL.get(self.cp_comm, '-ag')}" if self.cp > 1 else ""
        pp = f"({'/'.join(map(str, sorted(set(self.stage_layers()))))})" if self.uneven else ""
        fa = " fused-attn" if self.attention == "fused" else ""
        fa += f"({self.attention_library})" if self.attention_library else ""
        g = "" if self.grad_reduce_fp32 else " grads16"
        ep = f" ep{self.ep}{'-overlap' if self.ep_overlap else ''}" if self.experts else ""
        ep += f" etp{self.etp}" if self.experts and self.etp != self.t else ""
        ex = "" if self.execution == "compiled" else f" {self.execution}"
        ex += " tied-emb" if self.tied_embedding else ""
        ex += " launch-blocking" if self.launch_blocking else ""
        ex += " fp8-weights-once" if self.fp8_weight_cache and self.precision != "bf16" else ""
        ex += (" tp-overlap" + ("-rs-ring" if self.tp_overlap_rs == "ring_exchange" else "")
               if self.tp_comm_overlap and self.t > 1 else "")
        ex += " async-tp" if self.async_tp and self.t > 1 else ""
        rec = self.recompute + (f"-block{self.recompute_num_layers}" if self.recompute_num_layers else "")
        rec += f"-every{self.recompute_every}" if self.recompute_every else ""
        return (f"t{self.t}{sp}{cp} p{self.p}{pp}{v} d{self.d}{ep} mb{self.micro_batch} {rec}"
                f"{self._sharding_label()}{fa}{g}{ex}")

    def _sharding_label(self) -> str:
        z = self.zero_stage
        if z < 3:
            return ("", " zero-ar" if self.dp_reduce == "all_reduce" else " zero", " zero2")[z]
        hsdp = f" hsdp{self.dp_shard}x{self.replicate_degree}" if self.replicate_degree > 1 else " fsdp"
        return hsdp + ("" if self.reshard_after_forward else "-noreshard") + ("2" if self.fsdp_version == 2 else "")


_CP_LABEL = {"p2p": "", "torch-allgather": "-torch-ag", "torch-alltoall": "-torch-a2a"}

#: The models of Korthikanti et al. 2022 (Table 3), vocabulary 51,200 as Megatron pads GPT-2's.
MODELS = {
    "gpt-22b": dict(layers=48, hidden=6144, heads=64, seq=2048, vocab=51200),
    "gpt-175b": dict(layers=96, hidden=12288, heads=96, seq=2048, vocab=51200),
    "gpt-530b": dict(layers=105, hidden=20480, heads=128, seq=2048, vocab=51200),
    "gpt-1t": dict(layers=128, hidden=25600, heads=160, seq=2048, vocab=51200),
    # DeepSeek-V3 (config.json of deepseek-ai/DeepSeek-V3: hidden_size 7168, num_hidden_layers 61,
    # first_k_dense_replace 3, intermediate_size 18432, n_routed_experts 256, num_experts_per_tok 8,
    # moe_intermediate_size 2048, n_shared_experts 1, num_attention_heads 128, vocab_size 129280; the report's
    # pre-training sequence 4K, no dropout). Its MLA attention is priced as multi-head attention (:mod:`.moe`).
    "deepseek-v3": dict(layers=61, hidden=7168, heads=128, seq=4096, vocab=129280, ffn=18432, mlp_kind="swiglu",
                        dropout=False, experts=256, top_k=8, expert_ffn=2048, shared_experts=1, dense_layers=3),
}


def model_config(name: str, **split) -> ScaleConfig:
    """Model ``name`` of :data:`MODELS`; ``split`` (and sizes given) replacing its fields."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r} (known: {', '.join(MODELS)})")
    return ScaleConfig(**{**MODELS[name], **split})
