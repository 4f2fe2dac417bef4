"""What Megatron-LM runs beside the layers that the lowered programs fuse away or leave out, each from the
framework's code, as closed forms (bytes: exact ints; seconds on the chip's memory model or the system's network).

* **The vocabulary-parallel cross-entropy** (``cross_entropy="megatron"``). Megatron-LM (its code as read at the
  sc21 scripts' commit de7dc40, which Narayanan et al. 2021 ran; other versions not checked here) computes the loss
  of the ``E = b x s x V/t`` logits of a device with separate PyTorch kernels, each a pass over all of them:
  ``megatron/model/gpt_model.py`` (``post_language_model_processing``) casts the logits to fp32
  (``output.float()``, unless ``--fp16-lm-cross-entropy``), and ``megatron/mpu/cross_entropy.py``
  (``_VocabParallelCrossEntropy``) runs ``torch.max`` over the vocabulary, ``sub_`` of the maximum,
  ``torch.exp(out=)``, ``sum``, and keeps the softmax for the backward with ``div_`` (the same in-place
  ``torch.exp(vocab_parallel_logits, out=exp_logits)`` is in many public copies of the file; when it changed is
  not checked here); the backward ``mul_`` s it by the incoming gradient in place and autograd casts the fp32
  gradient back to the logits' dtype. Per logit, with ``d`` bytes of the logits' dtype, the forward moves
  ``(d + 4) + 4 + 8 + 8 + 4 + 8 = d + 36`` bytes in 6 kernels, the backward ``8 + (4 + d) = 12 + d`` in 2 (the
  target gathers and the ``b x s`` loss are left out: ``V/t`` times smaller). They replace the head program's own
  loss (scope ``loss``: XLA's fused reductions), whose seconds :class:`~.costs.LayerCost` keeps as ``loss_s``.
  Megatron-Core's unfused ``vocab_parallel_cross_entropy`` (``megatron/core/tensor_parallel/cross_entropy.py`` at
  338af51, the Megatron-Core of NeMo r2.0.0rc1's ``Dockerfile.ci``, the NeMo 24.07 release) runs the same kernels:
  ``calculate_logits_max`` casts with ``.float()`` and takes ``torch.max``, ``calculate_predicted_logits`` the
  in-place ``-=``, ``torch.exp(out=)`` and ``sum``, ``calculate_cross_entropy_loss`` the ``div_``; the backward's
  ``mul_``, and autograd casts the fp32 gradient the Function returns to the bf16 logits' dtype.
* **Megatron-Core's fused cross-entropy** (``cross_entropy="megatron-fused"``: ``cross_entropy_loss_fusion``, off
  by default in its ``ModelParallelConfig``; NeMo 24.07's launcher sets it for Llama 3 and Nemotron 3, not for GPT-3,
  Llama 2 or Nemotron 4). ``megatron/core/fusions/fused_cross_entropy.py`` (338af51) wraps the same steps in
  ``jit_fuser`` functions, ``torch.compile`` from torch 2.2 (``megatron/core/jit.py``): ``calculate_logits_max``
  returns the fp32 copy of the logits (read ``d``, write 4) with their maximum; ``calculate_predicted_logits``
  subtracts it in place, exponentiates and sums (read 4, write 4 back into that buffer: a mutated input is written
  back); ``calculate_cross_entropy_loss`` divides in place (4 + 4); the backward's ``calculate_gradients``
  subtracts the target's one, multiplies by the incoming gradient in place and returns ``.to(torch.bfloat16)``
  (read 4, the mutated softmax written back 4, the bf16 gradient ``d``). Per logit ``d + 20`` bytes forward in 3
  kernels, ``8 + d`` backward in 1, each compiled function taken as one kernel that reads and writes each tensor
  once (a lower bound: Inductor may split a reduction from its pointwise part; the target gathers and scatters,
  ``b x s`` elements, left out). Megatron-Bridge's performance scripts take Transformer Engine's one-pass kernel
  instead (``scripts/performance/utils/helpers.py`` at 13785e5: ``cross_entropy_fusion_impl = "te"``): the head's own loss.
* **NeMo's squared-ReLU** (``activation="squared-relu"``: Nemotron's ``activation: squared-relu``, with
  ``bias: false`` and ``bias_activation_fusion: false`` in its NeMo-Framework-Launcher 24.07 yamls). NeMo r2.0.0rc1's
  ``activation_to_func`` (``nemo/collections/nlp/parts/utils_funcs.py``) gives Megatron-Core
  ``squared_relu`` (``nemo/collections/nlp/modules/common/megatron/utils.py``: ``torch.pow(F.relu(x), 2)``, not
  jitted), which ``MLP.forward`` (``megatron/core/transformer/mlp.py`` at 338af51) calls on fc1's output without
  bias-activation fusion: PyTorch eager kernels over the ``b x s/cp x ffn/t`` elements, each a pass in the bf16
  activation dtype (2 bytes). Forward: ``relu`` (2 + 2), ``pow`` (2 + 2). Backward, autograd's formulas
  (``tools/autograd/derivatives.yaml``): ``pow_backward`` = ``grad * (2 * self.pow(1))``, ``self.pow(1)`` a copy
  (``pow_Tensor_Scalar_out``: ``out.copy_(base)`` for exponent 1, 2 + 2), the scalar product (2 + 2) and the
  product with the gradient (4 + 2); relu's ``threshold_backward(grad, result, 0)`` (4 + 2): 8 bytes in 2
  kernels forward, 20 in 4 backward. The layer is lowered with a GELU MLP (the same two GEMMs); these kernels
  replace what the compiled model charged for its activation (:mod:`.mlp_activation`).
* **PyTorch DDP's bucket copies** (``torch_ddp``). Megatron-LM 2021's ``--DDP-impl torch`` (``megatron/training.py``
  at de7dc40: ``torchDDP(model_module, device_ids=[i], output_device=i, process_group=...)``, so
  ``gradient_as_bucket_view`` is off, PyTorch's default; ``schedules.py`` runs every micro-batch but the last under
  ``model.no_sync``). PyTorch's reducer (``torch/csrc/distributed/c10d/reducer.cpp``) copies each gradient into its
  bucket as the backward makes it, scaled by 1/n (``mark_variable_ready_dense`` / ``copy_grad_to_bucket``:
  ``at::mul_out(bucket_view, grad, 1 / div_factor)``), and after the all-reduce copies the bucket back into the
  gradient (``finalize_backward`` / ``copy_bucket_to_grad``: "If gradient_as_bucket_view_ is false, after allreduce
  buckets, copy bucket results back to grads"): the 2-byte gradients read and written twice, 8 bytes a weight element
  in 2 kernels per parameter tensor, once an iteration (the last micro-batch), on the compute stream: priced with the
  stage's optimizer step (the copy back waits for the reduction; the copy in runs in the last backward).
* **The scatter/gather optimisation's all_gather** (``scatter_gather``; Narayanan et al. 2021, section 4.1).
  Megatron-LM's ``p2p_communication._communicate`` (``megatron/p2p_communication.py``, 2021-2022) sends 1/t of the
  activation (``split_tensor_into_1d_equal_chunks``) and the receiver rebuilds it with ``gather_split_1d_tensor``: an
  all_gather of the whole ``b x s x h`` over the tensor group, before the tensor can be used
  (``--scatter-gather-tensors-in-pipeline``, on by default there; with sequence parallelism the tensor is already the
  ``s/t`` shard and nothing is gathered). DeepSpeed's pipeline engine (Megatron-DeepSpeed, BLOOM's runs) does the
  same with tensor parallelism (``PipelineEngine``: ``is_pipe_partitioned = is_model_parallel``, the received
  ``PartitionedTensor``'s ``full()`` all-gathers it). Megatron-Core's ``megatron/core/pipeline_parallel/
  p2p_communication.py`` sends the whole tensor (the sequence-parallel shard with ``--sp``) and gathers nothing: the
  flag is off by default (NeMo, Megatron-Core, torchtitan, llm-foundry rows). Each of the ``2 v`` tensors a device
  receives per micro-batch (activation forward, gradient backward) waits for its gather.
* **fp16's loss scaling** (``loss_scale``). Megatron-LM's ``Float16OptimizerWithFloat16Params.step``
  (``megatron/optimizer/optimizer.py``) copies the fp16 gradients into fp32 main gradients
  (``_copy_model_grads_to_main_grads``: ``main_param.grad = model_param.main_grad.float()``, once per parameter
  tensor, 2 bytes read and 4 written a weight, only where ``main_grad`` is fp16: with fp32 main gradients,
  ``grad_bytes`` 4, ``.float()`` returns the tensor itself and copies nothing) and unscales them checking for inf/NaN
  (``_unscale_main_grads_and_check_for_nan``: ``torch._amp_foreach_non_finite_check_and_unscale_``, one foreach
  call, 4 read and 4 written), before the Adam step, which then reads 4-byte gradients where the lowered step reads
  the 2-byte ones cast on the fly (2 more): 16 bytes a weight element in a kernel per parameter tensor and 2 more
  (10 bytes in 2 kernels with fp32 main gradients). With bf16 there is no loss scaler and Megatron accumulates fp32
  main gradients (``--accumulate-allreduce-grads-in-fp32``, forced with bf16): nothing of this runs.
* **The main-gradient hook** (``main_grad_add``). Megatron-LM's local DDP (``--DDP-impl local``,
  ``megatron/model/distributed.py``) registers a hook on every parameter's gradient accumulator that adds the
  gradient the backward just made into the parameter's ``main_grad`` buffer and frees it
  (``_make_param_hook``: ``param.main_grad.add_(param.grad.data)``), once per micro-batch: the main gradient read and
  written (``grad_bytes`` each: 2 in fp16, 4 with fp32 accumulation) and the new one read (2), for every weight of
  the stage, the embedding and LM head too. From late 2021 (``--gradient-accumulation-fusion``, on by default in the
  2022 code Korthikanti et al. ran) the wgrad GEMMs accumulate into ``main_grad`` themselves and the hook finds no
  gradient on the linears' weights: ``main_grad_add`` is for the code before it (Narayanan et al. 2021's runs).
  The hook runs once per parameter tensor: :func:`layer_tensors` a layer (a GPT layer's 12: two LayerNorms' weight
  and bias, four linears' weight and bias; the biases' and norms' bytes, a few ``h`` each, are left out), one per
  embedding or LM head weight. Not with a separate accumulation pass (``grad_accum_pass``, DeepSpeed's) nor with
  FSDP (zero 3): :mod:`.sharding_check` refuses both.
"""
from __future__ import annotations

from ...network import estimate

#: Megatron's cross-entropy kernels over the logits: (name, bytes read, bytes written) per logit, by phase; "d" is
#: the logits' own dtype (the fp32 cast's input, the cast back's output), every other tensor fp32.
CE_KERNELS = {
    "forward": (("output.float()", "d", 4), ("torch.max", 4, 0), ("sub_", 4, 4), ("torch.exp", 4, 4),
                ("sum", 4, 0), ("div_", 4, 4)),
    "backward": (("mul_", 4, 4), ("cast to the logits' dtype", 4, "d")),
}
#: Megatron-Core's fused cross-entropy (``fused_cross_entropy.py``), one kernel per compiled function; the backward
#: writes the mutated fp32 softmax back (4) and returns the gradient in bf16 ("d").
CE_FUSED_KERNELS = {
    "forward": (("calculate_logits_max: .float(), max", "d", 4), ("calculate_predicted_logits: -=, exp, sum", 4, 4),
                ("calculate_cross_entropy_loss: div_", 4, 4)),
    "backward": (("calculate_gradients: -=, mul_, .to(bfloat16)", 4, (4, "d")),),
}
#: The loss's kernels by ``ScaleConfig.cross_entropy`` (``fused``: the head program's own loss, none replaced)
CE_BY_KIND = {"megatron": CE_KERNELS, "megatron-fused": CE_FUSED_KERNELS}
#: A two-linear MLP's activation: GELU (fused, as lowered) or NeMo's squared ReLU (eager relu and pow)
ACTIVATION = ("gelu", "squared-relu")
#: NeMo's squared-ReLU by phase: its eager kernels (name, bytes read, bytes written per fc1-output element, bf16)
SQUARED_RELU = {
    "forward": (("relu", 2, 2), ("pow", 2, 2)),
    "backward": (("self.pow(1): copy", 2, 2), ("2 * ...", 2, 2), ("grad * ...", 4, 2), ("threshold_backward", 4, 2)),
}
#: fp16's optimizer passes per weight element: the fp32 copy of the gradient, the unscale-and-check, the Adam
#: step's wider gradient read (see the module's text).
LOSS_SCALE_COPY = 2 + 4  # main_grad.float(): only with 2-byte main gradients
LOSS_SCALE_BYTES = (4 + 4) + (4 - 2)  # the unscale and the Adam step's wider read, whatever the main gradients
#: Parameter tensors of one layer by MLP kind: gelu (Megatron-LM's GPT layer: input and post-attention LayerNorm,
#: QKV, projection, fc1, fc2, each a weight and a bias: 12); swiglu (Llama-style: RMSNorm weights, no linear biases
#: (--disable-bias-linear), Megatron's fused QKV and gate/up linears: 2 norms + 4 linears = 6).
LAYER_TENSORS = {"gelu": 12, "swiglu": 6}


def layer_tensors(cfg) -> int:
    """Parameter tensors of one layer (:data:`LAYER_TENSORS`), each a launch of a per-parameter loop."""
    return LAYER_TENSORS[cfg.mlp_kind]


def extra_tensors(cfg, extra: int) -> int:
    """Weights outside the layers in ``extra`` elements: one a ``V/t x h`` embedding or LM head copy."""
    one = cfg.vocab // cfg.t * cfg.hidden
    return -(-extra // one) if one and extra else 0


def logits(cfg) -> int:
    """The logits one device holds for one micro-batch: ``b x s/cp x V/t`` (the LM head's output is gathered to
    the whole local sequence under sequence parallelism)."""
    return cfg.micro_batch * cfg.local_seq * (cfg.vocab // cfg.t)


def _bytes(n, d: int) -> int:
    """Bytes of one kernel table entry: an int, ``"d"`` (the logits' dtype) or a tuple of them (several writes)."""
    if isinstance(n, tuple):
        return sum(_bytes(x, d) for x in n)
    return d if n == "d" else n


def cross_entropy_bytes(cfg, dtype_bytes: int = 2) -> dict:
    """phase -> (bytes, kernels) of Megatron's cross-entropy of one micro-batch on one device, by
    ``cfg.cross_entropy`` (:data:`CE_BY_KIND`; ``megatron`` when it names none, as the fused head has none)."""
    n = logits(cfg)
    out = {}
    for phase, kernels in CE_BY_KIND.get(cfg.cross_entropy, CE_KERNELS).items():
        per = sum(_bytes(r, dtype_bytes) + _bytes(w, dtype_bytes) for _, r, w in kernels)
        out[phase] = (n * per, len(kernels))
    return out


def head_seconds(cfg, head, hw) -> tuple[float, float]:
    """(forward, backward) seconds of the last stage's head per micro-batch: the head program's, its own loss
    replaced by Megatron's kernels where ``cfg.cross_entropy`` names them (:data:`CE_BY_KIND`; 0, 0 without a
    head)."""
    if head is None:
        return 0.0, 0.0
    f, b = head.time_s["forward"], head.time_s["backward"]
    if cfg.cross_entropy not in CE_BY_KIND or hw is None:
        return f, b
    loss = head.loss_s or {}
    ce = {ph: hw.memory_time(n, kernels=k) for ph, (n, k) in cross_entropy_bytes(cfg).items()}
    return (f - loss.get("forward", 0.0) + ce["forward"], b - loss.get("backward", 0.0) + ce["backward"])


def scatter_gathered(cfg) -> bool:
    """Whether a received pipeline tensor is all-gathered over the tensor group: the scatter/gather optimisation on,
    more than one stage and tensor rank, no sequence parallelism."""
    return getattr(cfg, "scatter_gather", False) and cfg.p > 1 and cfg.t > 1 and not cfg.sp


def send_bytes(cfg, whole: int) -> int:
    """Bytes of one pipeline send of a ``whole``-byte activation: 1/t with sequence parallelism (the ``s/t`` shard)
    or the scatter/gather optimisation, else all of it (Megatron-Core's p2p_communication)."""
    return whole // cfg.t if cfg.sp or getattr(cfg, "scatter_gather", False) else whole


def gather_bytes(cfg) -> int:
    """S of the all_gather that rebuilds a received pipeline tensor (0 where nothing is gathered: see
    :func:`scatter_gathered`): the whole ``b x s/cp x h`` in bf16."""
    if not scatter_gathered(cfg):
        return 0
    return cfg.micro_batch * cfg.local_seq * cfg.hidden * 2


def gather_seconds(cfg, topo) -> float:
    """One received tensor's all_gather over the tensor group (0 without one or without a network)."""
    n = gather_bytes(cfg)
    if topo is None or n == 0:
        return 0.0
    return estimate(topo, "all_gather", n, (tuple(range(cfg.t)),)).time_s


def loss_scale_bytes(cfg, elems: int) -> int:
    """Bytes of fp16's optimizer passes over ``elems`` weight elements: the copy to fp32 only with 2-byte main
    gradients (0 without ``loss_scale``)."""
    if not cfg.loss_scale:
        return 0
    return (LOSS_SCALE_BYTES + (LOSS_SCALE_COPY if cfg.grad_bytes == 2 else 0)) * elems


def loss_scale_kernels(cfg, tensors: int) -> int:
    """Launches of fp16's optimizer passes: the copy's ``.float()`` once per parameter tensor (with 2-byte main
    gradients), the foreach unscale and the Adam step's read once each."""
    return 2 + (tensors if cfg.grad_bytes == 2 else 0)


def loss_scale_seconds(cfg, hw, elems: int, layers: int = 0, extra: int = 0) -> float:
    """fp16's optimizer passes over ``elems`` weight elements, those of ``layers`` layers and ``extra`` elements
    outside them (their parameter tensors: :func:`layer_tensors`, :func:`extra_tensors`; 0 without ``loss_scale``
    or a profile)."""
    if not cfg.loss_scale or hw is None or elems == 0:
        return 0.0
    tensors = layer_tensors(cfg) * layers + extra_tensors(cfg, extra)
    return hw.memory_time(loss_scale_bytes(cfg, elems), kernels=loss_scale_kernels(cfg, tensors))


def main_grad_add_bytes(cfg, elems: int) -> int:
    """Bytes of one micro-batch's main-gradient hook over ``elems`` weight elements (0 without ``main_grad_add``):
    the main gradient read and written at ``grad_bytes``, the new 2-byte gradient read."""
    return (2 * cfg.grad_bytes + 2) * elems if cfg.main_grad_add else 0


def main_grad_add_seconds(cfg, hw, layer_elems: int, layers: int, extra: int = 0) -> float:
    """One micro-batch's main-gradient hook on a stage of ``layers`` layers of ``layer_elems`` weights and ``extra``
    weights outside them (0 without ``main_grad_add`` or a profile): one launch per parameter tensor."""
    n = main_grad_add_bytes(cfg, layer_elems * layers + extra)
    if n == 0 or hw is None:
        return 0.0
    return hw.memory_time(n, kernels=layer_tensors(cfg) * layers + extra_tensors(cfg, extra))


#: PyTorch DDP's reducer per weight element: the 2-byte gradient copied into its bucket (scaled) and back
TORCH_DDP_BYTES = (2 + 2) + (2 + 2)


def torch_ddp_seconds(cfg, hw, elems: int, layers: int = 0, extra: int = 0) -> float:
    """PyTorch DDP's two bucket copies over a stage's ``elems`` weight elements, those of ``layers`` layers and
    ``extra`` outside them (one launch each per parameter tensor: :func:`layer_tensors`, :func:`extra_tensors`);
    0 without ``torch_ddp`` or a profile."""
    if not getattr(cfg, "torch_ddp", False) or hw is None or elems == 0:
        return 0.0
    tensors = layer_tensors(cfg) * layers + extra_tensors(cfg, extra)
    return hw.memory_time(TORCH_DDP_BYTES * elems, kernels=2 * tensors)


def torch_ddp_bucket_bytes(cfg, elems: int) -> int:
    """Bytes of PyTorch DDP's flat gradient buckets over a stage's ``elems`` weight elements (``torch_ddp``; 0
    without): with ``gradient_as_bucket_view`` off (its default, and Megatron-LM 2021's ``torchDDP(...)`` call leaves
    it so) the reducer allocates each bucket as its own flat tensor of the gradients' dtype
    (``torch/csrc/distributed/c10d/reducer.cpp`` ``initialize_buckets``: ``at::empty`` of the bucket's elements,
    v1.9.0's ``replica.contents``, 2.x's ``bucket.gradients``), beside each parameter's ``.grad``
    (``copy_grad_to_bucket`` / ``copy_bucket_to_grad`` copy between them), held from construction on: 2 bytes an
    element (bf16 / fp16 gradients). The bucket's separate storage is what pytorch/pytorch#41954 (97d594b9f7, 2020,
    the PR that added ``gradient_as_bucket_view``) measured: making ``.grad`` a view of the bucket dropped a ~1 GB
    model's peak by ~1 GB (8250 -> 7183 MB)."""
    return 2 * elems if getattr(cfg, "torch_ddp", False) else 0


def passes_invalid(cfg) -> str | None:
    """Why the Megatron options of ``cfg`` (the activation and its kernels, nccl_ub, torch_ddp) cannot go together;
    None where they can."""
    if cfg.activation not in ACTIVATION:
        return f"activation must be one of {', '.join(ACTIVATION)}, got {cfg.activation!r}"
    if cfg.activation_kernel not in ("compiled", "megatron"):  # (.mlp_activation's ACTIVATION_KERNEL)
        return f"activation_kernel must be compiled or megatron, got {cfg.activation_kernel!r}"
    if cfg.activation_kernel == "megatron" and (cfg.experts or cfg.execution != "compiled"
                                                  or getattr(cfg, "lower_layer", None) is not None):
        return ("activation_kernel megatron (Megatron's own activation kernels) is priced for the GPT-style layer's "
                "dense MLP under the compiled execution model only")
    if cfg.activation != "gelu" and (cfg.mlp_kind != "gelu" or cfg.experts):
        return (f"activation {cfg.activation} is for the dense two-linear (gelu) MLP, not {cfg.mlp_kind}"
                + (" with experts" if cfg.experts else ""))
    if cfg.nccl_ub and cfg.zero_stage < 2:
        return "nccl_ub is priced for the per-layer collectives of ZeRO 2 / 3 (FSDP) only"
    if cfg.nccl_ub and (cfg.experts or cfg.fsdp_version == 2):
        return ("nccl_ub is Megatron-Core's (Megatron FSDP's buffers registered with NCCL): not with experts (the MoE "
                "plan's data-parallel collectives are not priced with it) or PyTorch's FSDP2 (fsdp_version 2)")
    if cfg.torch_ddp and (cfg.zero_stage or cfg.main_grad_add or cfg.ddp or cfg.experts):
        return ("torch_ddp (PyTorch DDP's bucket copies) is a replicated optimizer's reduction: not with ZeRO, "
                "local DDP's main_grad hook, Megatron-Core's DDP or experts")
    if cfg.torch_ddp and cfg.grad_reduce_fp32:
        # Megatron-LM de7dc40 arguments.py: accumulating and all-reducing in fp32 asserts DDP_impl == 'local'
        return "torch_ddp reduces the 2-byte gradients (Megatron-LM allows fp32 reduction only with local DDP): " \
               "add --grad-reduce-in-bf16"
    return None
