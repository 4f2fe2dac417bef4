"""The word embedding's own kernels on the first stage, as Megatron-Core runs them (``ddp="megatron"``).

The layer and head programs leave out the first stage's embedding lookup. Megatron-Core's ``VocabParallelEmbedding``
(``megatron/core/tensor_parallel/layers.py`` at fd5cfec, July 2024) is ``F.embedding`` over the device's ``V/t x h``
shard, its output reduced over the tensor group (``reduce_from_tensor_model_parallel_region``, or with sequence
parallelism ``reduce_scatter_to_sequence_parallel_region``, whose backward all-gathers). Per micro-batch:

forward
  * the gather: ``b x s/cp`` rows of ``h`` read and written, bf16;
  * with ``t > 1`` the tensor group's all_reduce (reduce_scatter with sequence parallelism) of ``b x s/cp x h`` bf16;

backward
  * PyTorch's dense embedding gradient (``aten/src/ATen/native/cuda/Embedding.cu``, ``embedding_dense_backward_cuda``
    and ``EmbeddingBackwardKernel.cu``): ``at::zeros({num_weights, dim})`` in the gradient's dtype, written whole
    (``V/t x h`` bf16), then the rows' gradients (``b x s/cp x h`` bf16) read and summed into it (the sort of the
    indices and the segmented sum taken as one kernel each, their index traffic left out: a lower bound);
  * Megatron-Core's DDP hook (``distributed_data_parallel.py`` ``_make_param_hook``): the embedding is not a
    gradient-accumulation-fused linear (``grad_added_to_main_grad`` unset), so every micro-batch runs
    ``param.main_grad.add_(param.grad.data)``: the bf16 gradient and the fp32 ``main_grad`` read, ``main_grad``
    written (``V/t x h``). With ``tied_embedding`` too: on one stage the LM head's fused wgrad adds into the shared
    weight's ``main_grad`` and sets ``grad_added_to_main_grad``, but Megatron marks that weight ``zero_out_wgrad``
    (``LanguageModule.setup_embeddings_and_output_layer`` with one pipeline stage), and the hook adds where
    ``not param.grad_added_to_main_grad or getattr(param, 'zero_out_wgrad', False)``: the add runs (the head's
    dummy zeroed wgrad that autograd sums into ``.grad`` is left out: a lower bound);
  * with sequence parallelism, the all_gather of the incoming ``b x s/cp x h`` gradient over the tensor group.

Counts are exact ints; times are the profile's memory model and the system's network.
"""
from __future__ import annotations

from ...network import estimate

#: Bytes per embedding element (``V/t x h``) each micro-batch's backward moves: the dense gradient zeroed (bf16
#: written), the hook's add (bf16 gradient and fp32 main_grad read, main_grad written).
ZERO_BYTES = 2
HOOK_ADD_BYTES = 2 + 4 + 4


def applies(cfg) -> bool:
    """Whether the first stage's embedding is priced: Megatron-Core's DDP (``ddp="megatron"``) on a model whose
    embedding the plan counts (not STDiT3's own weights)."""
    return cfg.ddp == "megatron" and not hasattr(cfg, "extra_weight_elems")


def embedding_bytes(cfg) -> dict:
    """phase -> (bytes, kernels) of the embedding's own kernels for one micro-batch on one device of the first stage
    ((0, 0) each where :func:`applies` does not)."""
    if not applies(cfg):
        return {"forward": (0, 0), "backward": (0, 0)}
    rows = cfg.micro_batch * cfg.local_seq * cfg.hidden  # the looked-up rows' elements
    table = cfg.vocab // cfg.t * cfg.hidden
    backward = table * (ZERO_BYTES + HOOK_ADD_BYTES) + rows * (2 + 2)  # zeroed, hook add; the rows' grads summed in
    kernels = 4  # zero, sort, segmented sum, hook add
    return {"forward": (rows * (2 + 2), 1), "backward": (backward, kernels)}


def embedding_comm_seconds(cfg, topo) -> tuple[float, float]:
    """(forward, backward) seconds of the embedding's tensor-group collectives per micro-batch (0 with ``t`` 1, no
    network or where :func:`applies` does not)."""
    if not applies(cfg) or cfg.t == 1 or topo is None:
        return 0.0, 0.0
    n, group = cfg.micro_batch * cfg.local_seq * cfg.hidden * 2, (tuple(range(cfg.t)),)
    if cfg.sp:
        return estimate(topo, "reduce_scatter", n, group).time_s, estimate(topo, "all_gather", n, group).time_s
    return estimate(topo, "all_reduce", n, group).time_s, 0.0


def word_embedding_seconds(cfg, hw) -> tuple[float, float]:
    """(forward, backward) seconds of the first stage's embedding per micro-batch on ``hw`` (its kernels and its
    tensor-group collectives, exposed: they sit between the embedding and the first layer; 0, 0 without a
    profile)."""
    if hw is None or not applies(cfg):
        return 0.0, 0.0
    b = embedding_bytes(cfg)
    cf, cb = embedding_comm_seconds(cfg, getattr(hw, "topology", None))
    return (hw.memory_time(b["forward"][0], b["forward"][1]) + cf, hw.memory_time(b["backward"][0], b["backward"][1])
            + cb)
