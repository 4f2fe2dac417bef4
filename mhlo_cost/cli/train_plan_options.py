"""``train-plan``'s parallelism, pipeline, kernel, expert and framework options (argparse registration only:
:mod:`mhlo_cost.cli.cmd_train_plan` reads them), in the spellings of the stacks that run them: Megatron-LM /
NeMo and PyTorch-native training (torchtitan)."""
from __future__ import annotations

import argparse
import math

from .common import positive_int


def clip_norm(value: str) -> float:
    """``--clip-grad``'s value: a positive max norm, or ``none`` (0.0: not clipped)."""
    if value.strip().lower() == "none":
        return 0.0
    try:
        x = float(value)
    except ValueError:
        x = 0.0
    if not (x > 0 and math.isfinite(x)):
        raise argparse.ArgumentTypeError(f"must be a positive max norm or none, got {value!r}")
    return x


def register_sharding(p) -> None:
    """The data-parallel sharding, context-parallel and uneven-pipeline options, in Megatron-LM's and PyTorch's
    (torchtitan's) spellings."""
    p.add_argument("--zero", type=int, choices=(0, 1, 2, 3),
                   help="ZeRO stage: 1 optimizer state sharded, 2 and gradients, 3 and parameters (FSDP); default 0")
    p.add_argument("--fsdp", action="store_true", help="FSDP (ZeRO 3): parameters all-gathered per layer, "
                                                       "gradients reduce-scattered, prefetched under compute")
    p.add_argument("--use-distributed-optimizer", action="store_true",
                   help="Megatron's distributed optimizer: ZeRO 1 (as --dp-comm zero)")
    p.add_argument("--dp-shard", type=positive_int, metavar="N",
                   help="HSDP: shard within groups of N data-parallel ranks (x cp), replicate across d / N "
                        "(torchtitan's data_parallel_shard_degree); default: all d")
    p.add_argument("--dp-replicate", type=positive_int, metavar="N",
                   help="HSDP: N replicas of the sharded state (data_parallel_replicate_degree; shard = d / N)")
    p.add_argument("--fsdp-reshard-after-forward", choices=("always", "never"), default="always",
                   help="FSDP: free the gathered parameters after the forward (always, default) or keep them "
                        "for the backward (never: no second all-gather, every layer's parameters held)")
    p.add_argument("--fsdp-version", choices=("1", "2"), default="1",
                   help="FSDP's implementation: 1 (flat parameters: FSDP1, ZeRO 3; default) or 2 (fully_shard, "
                        "torchtitan's: each all-gather copied out and each reduce-scatter copied in on the compute "
                        "stream)")
    p.add_argument("--loss-upcast", action="store_true",
                   help="the loss as torchtitan's: eager cross_entropy over the logits upcast to fp32, for memory "
                        "(the peak at its backward, with the embedding, final norm and LM head under FSDP2's root; "
                        "needs --zero 3 --fsdp-version 2, t = p = 1, one micro-batch, a dense untied model)")
    p.add_argument("--cp", "--context-parallel-size", dest="cp", type=positive_int,
                   help="context-parallel degree: the sequence split cp ways, load-balanced causal (default 1)")
    p.add_argument("--cp-comm-type", choices=("p2p", "all_gather", "torch-allgather", "torch-alltoall"),
                   default="p2p",
                   help="p2p: ring attention, K/V send/recv per step overlapping the attention, with Transformer "
                        "Engine's merge and copy passes (Megatron-Core's; default); "
                        "all_gather: K/V all-gathered, not overlapped; torch-allgather / torch-alltoall: PyTorch's "
                        "context_parallel by its rotate method (torchtitan's), the fp32 dK/dV passed round the ring")
    p.add_argument("--cp-kv-repeat", action="store_true",
                   help="the model repeats its K/V heads to the query heads before attention (torchtitan's "
                        "Llama): context parallelism exchanges heads/t heads, not kv_heads/t")
    p.add_argument("--dp-reduce", choices=("reduce_scatter", "all_reduce"), default="reduce_scatter",
                   help="ZeRO 1's gradient reduction: reduce_scatter (Megatron's distributed optimizer, default) "
                        "or all_reduce (DeepSpeed's BF16 optimizer under its pipeline engine)")
    p.add_argument("--grad-accum-pass", action="store_true",
                   help="gradients accumulated by a separate pass after each micro-batch's backward (DeepSpeed's "
                        "BF16 optimizer: bf16 gradients added into an fp32 buffer), not inside the wgrad GEMMs")
    p.add_argument("--launch-blocking", action="store_true",
                   help="CUDA_LAUNCH_BLOCKING=1 (BLOOM's training script): every kernel launch waits for the kernel, "
                        "so each framework call's host time adds to its kernel's time (compiled execution only)")
    p.add_argument("--share-embeddings-and-output-weights", dest="tied_embedding", action="store_true",
                   help="the embedding and the LM head share one weight: with a pipeline, its gradient is "
                        "all-reduced between the first and last stages each iteration")
    register_pipeline_and_kernels(p)


def register_pipeline_and_kernels(p) -> None:
    """The uneven pipeline's options and the gradient reduction's (Megatron-LM's spellings), then the kernels'."""
    p.add_argument("--decoder-first-pipeline-num-layers", dest="first_stage_layers", type=positive_int,
                   metavar="N", help="uneven pipeline: the first stage's layers (the others split the rest)")
    p.add_argument("--decoder-last-pipeline-num-layers", dest="last_stage_layers", type=positive_int,
                   metavar="N", help="uneven pipeline: the last stage's layers")
    p.add_argument("--account-for-embedding-in-pipeline-split", dest="account_embedding", action="store_true",
                   help="count the embedding as a layer of the first stage when splitting the layers")
    p.add_argument("--account-for-loss-in-pipeline-split", dest="account_loss", action="store_true",
                   help="count the loss (LM head) as a layer of the last stage when splitting the layers")
    p.add_argument("--pipeline-split", choices=("megatron", "torchtitan"), default="megatron",
                   help="whose rule splits interleaved uneven stages: megatron (each stage's layers divisible by "
                        "--interleave; default) or torchtitan (uneven virtual stages, as generate_split_points)")
    p.add_argument("--overlap-grad-reduce", action="store_true",
                   help="Megatron-Core's DDP: each gradient bucket (each model chunk, interleaved) reduced as the "
                        "backward makes it, only the last exposed (with --ddp-bucket-size, --overlap-param-gather); "
                        "the word embedding's dense gradient and main_grad add priced each micro-batch")
    p.add_argument("--ddp-bucket-size", type=int, metavar="ELEMENTS",
                   help="with --overlap-grad-reduce: a gradient bucket's elements (default max(40M, 1M x dp))")
    p.add_argument("--overlap-param-gather", action="store_true",
                   help="with --overlap-grad-reduce and --zero 1: the parameter all-gather prefetched under the "
                        "next forward, bucket by bucket")
    p.add_argument("--loss-scale", action="store_true",
                   help="fp16's dynamic loss scaling: Megatron's fp16 optimizer copies the gradients to fp32 and "
                        "unscales them before the step")
    p.add_argument("--clip-grad", type=clip_norm, metavar="MAX|none",
                   help="gradient clipping by the global L2 norm at MAX (default 1.0, the LLM stacks' default: "
                        "Megatron's --clip-grad, NeMo's gradient_clip_val, torchtitan's max_norm, Composer's "
                        "clipping_threshold) or none: the norm's passes and all-reduce(s) priced in the optimizer step "
                        "as the stack runs them; not priced for --model stdit3, which refuses it")
    p.add_argument("--dist-optimizer", choices=("megatron", "apex"), default="megatron",
                   help="with --zero 1/2 (--use-distributed-optimizer): whose distributed optimizer steps and clips: "
                        "megatron (Megatron-Core's: the clip's norm and scale passes over the main-gradient shard) or "
                        "apex (Apex's DistributedFusedAdam, NeMo 1.x's optim.name distributed_fused_adam: the norm "
                        "over its gradient shard, the clip folded into Adam's gradient scale)")
    p.add_argument("--no-gradient-accumulation-fusion", action="store_true",
                   help="Megatron-LM's local DDP without fused wgrad accumulation: each micro-batch's gradients added "
                        "into main_grad by a hook (Megatron-LM before late 2021)")
    p.add_argument("--scatter-gather-tensors-in-pipeline", action="store_true",
                   help="without --sp: a pipeline send carries 1/t of the tensor and the receiver all-gathers it over "
                        "the tensor group (Megatron-LM 2021-2022's default, DeepSpeed's pipeline engine; "
                        "Megatron-Core sends it whole)")
    p.add_argument("--tp-comm-overlap", action="store_true",
                   help="Transformer Engine's userbuffers: each tensor-parallel collective overlapped with the GEMM "
                        "it feeds, in chunks (NeMo's and Megatron-Core's tp_comm_overlap; needs --sp)")
    p.add_argument("--tp-comm-overlap-rs", choices=("pipeline", "ring_exchange"), default="pipeline",
                   help="with --tp-comm-overlap: the reduce-scatters pipelined in 4 splits (NeMo's; default) or "
                        "ring-exchanged (Megatron-Bridge's fp8 H100 configurations)")
    p.add_argument("--async-tp", action="store_true",
                   help="PyTorch's async tensor parallelism (torchtitan's experimental.enable_async_tensor_parallel: "
                        "Inductor's micro-pipeline TP fusing each all-gather with the matmuls it feeds and each "
                        "matmul with its reduce-scatter, shards moved by the copy engine); needs --sp, -t > 1 and "
                        "--execution inductor")
    register_kernels(p)


def register_kernels(p) -> None:
    """The attention kernel, the experts, the framework's own passes and how the step runs."""
    p.add_argument("--attention", choices=("unfused", "fused"),
                   help="the layer's attention: unfused, its separate kernels as Megatron 2022 ran them (default), "
                        "or fused, one flash-attention kernel (NeMo, Megatron-Core, torchtitan; stdit3's default)")
    p.add_argument("--attention-library", choices=("fa2", "fa3", "cudnn"),
                   help="with --attention fused: the kernel's library as the training stack calls it (fa2: "
                        "flash-attn 2 and PyTorch SDPA's flash backend; fa3; cudnn: Transformer Engine's fused "
                        "attention on Hopper); default: the profile's")
    register_experts(p)
    register_framework_passes(p)
    p.add_argument("--execution", choices=("compiled", "eager", "inductor"), default="compiled",
                   help="how the step runs: compiled, fused kernels (Megatron, NeMo; default), eager (PyTorch eager, "
                        "one kernel per op) or inductor (torch.compile); eager and inductor need --attention fused")
    p.add_argument("--clock", choices=("peak", "sustained", "average"), default="sustained",
                   help="the clock the step's dots run at: sustained, what the chip holds under its power limit "
                        "through a stream of products (its clock table; default); peak, the datasheet's; or "
                        "average, the clock at which the step's own average board power is the limit (the "
                        "table's power of memory-bound kernels and waits; priced three times)")
    p.add_argument("--inductor-comm-reorder", action="store_true",
                   help="with --execution inductor: Inductor's reorder_for_compute_comm_overlap on, so the "
                        "collectives torch.compile traces (PyTorch's context parallel) overlap compute; off (torch's "
                        "default) each is waited for where it is issued, exposed")
    p.add_argument("--grad-reduce-in-bf16", action="store_true",
                   help="gradients reduced in the 2-byte dtype, not fp32 (Megatron-Core's option; Megatron 2021's "
                        "fp16 default without --accumulate-allreduce-grads-in-fp32)")


def register_framework_passes(p) -> None:
    """What a framework runs beside the lowered layer that it does its own way (``studies/plan/megatron_passes``,
    ``studies/plan/nccl_ub``): the loss's kernels, PyTorch DDP's bucket copies, FSDP's NCCL-registered buffers,
    NeMo's activation."""
    p.add_argument("--cross-entropy", choices=("fused", "megatron", "megatron-fused"), default="fused",
                   help="the loss: fused, the head program's own (default); megatron, Megatron-LM's / "
                        "Megatron-Core's vocabulary-parallel cross-entropy (separate kernels over the fp32 logits); "
                        "megatron-fused, Megatron-Core's cross_entropy_loss_fusion (its torch.compile'd functions)")
    p.add_argument("--torch-ddp", action="store_true",
                   help="Megatron-LM 2021's --DDP-impl torch: PyTorch DDP copies each gradient into its bucket and "
                        "back after the all-reduce (gradient_as_bucket_view off), once an iteration")
    p.add_argument("--use-nccl-ub", action="store_true",
                   help="with --zero 2|3: Megatron-Core's nccl_ub, FSDP's buffers registered with NCCL so that its "
                        "per-layer all-gathers and reduce-scatters run on fewer SMs (4 / 5 within a node on H100)")
    p.add_argument("--activation", choices=("gelu", "squared-relu"), default="gelu",
                   help="the two-linear MLP's activation: gelu (fused, default) or squared-relu, NeMo's "
                        "torch.pow(F.relu(x), 2) run as eager kernels (Nemotron; the layer lowered with GELU)")
    p.add_argument("--activation-kernel", choices=("compiled", "megatron"), default="compiled",
                   help="how the MLP's activation runs: compiled, fused into the fc1 GEMM's epilogue (default); "
                        "megatron, Megatron's own kernel forward and backward (--bias-gelu-fusion / "
                        "bias_activation_fusion: bias_gelu, bias_swiglu; under fp8 Transformer Engine's cast of "
                        "fc2's input after it)")
    p.add_argument("--attention-kernel", choices=("compiled", "megatron"), default="compiled",
                   help="how the unfused attention's softmax and dropout run: compiled, the lowered ops fused "
                        "(default); megatron, Megatron-LM's scaled_upper_triang_masked_softmax and PyTorch's fused "
                        "dropout, each its own kernel each way (with --attention unfused)")


def register_experts(p) -> None:
    """The mixture-of-experts options, in Megatron-LM's spellings (``--moe-shared-experts``, ``--moe-dense-layers``
    and ``--moe-imbalance`` are this tool's: Megatron gives the shared experts' width and a layer pattern)."""
    p.add_argument("--num-experts", type=positive_int, metavar="E", help="routed experts of each MoE layer")
    p.add_argument("--moe-router-topk", type=positive_int, metavar="K", help="experts each token is routed to")
    p.add_argument("--moe-ffn-hidden-size", type=positive_int, metavar="N", help="one expert's (SwiGLU) width")
    p.add_argument("--moe-shared-experts", type=positive_int, metavar="N", help="shared experts, each N wide")
    p.add_argument("--moe-dense-layers", type=int, metavar="N", help="the first N layers keep the dense MLP")
    p.add_argument("--ep", "--expert-model-parallel-size", dest="ep", type=positive_int, metavar="N",
                   help="expert-parallel degree: each MoE layer's experts split over N of the data-parallel ranks, "
                        "tokens sent to them and back by all_to_all (default 1)")
    p.add_argument("--moe-expert-capacity-factor", type=float, metavar="C",
                   help="each expert takes C x its balanced share of tokens, padded to it (default: dropless)")
    p.add_argument("--moe-imbalance", type=float, metavar="F",
                   help="dropless routing: the busiest expert-parallel rank gets F x the balanced share of tokens "
                        "(default 1.0: balanced)")
    p.add_argument("--moe-a2a-overlap", action="store_true", default=None,
                   help="the all_to_all hidden under another micro-batch's compute, as DeepSeek's DualPipe runs it "
                        "(default: not overlapped, Megatron's dispatcher)")
    p.add_argument("--expert-tensor-parallel-size", type=positive_int, metavar="N",
                   help="expert tensor parallelism: each expert's width split over N ranks, the dispatched tokens "
                        "all-gathered over them (default: -t, Megatron-Core's default; 1: whole experts)")
