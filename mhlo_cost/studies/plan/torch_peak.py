"""What PyTorch holds at a torchtitan step's memory peak beyond the layer's program: FSDP2's parameters, the tensors
op-level checkpointing keeps, and (``loss_upcast``) the embedding, final norm, LM head and the loss's logits.

Read from torchtitan 9dec370 (the 2024-12 tables' version: train.py, torchtitan/parallelisms/parallelize_llama.py,
torchtitan/models/llama/model.py, torchtitan/models/norms.py) and PyTorch's torch/utils/checkpoint.py and
torch/distributed/_composable/fsdp (as stored; the tables' torch 1963fc8 itself was not read, these mechanisms
predate it). Exact ints, bytes per GPU.

* **FSDP2's parameters** (``fsdp_version`` 2, ZeRO 3): torchtitan builds the model in fp32 (train.py:
  ``model.to_empty``, ``init_weights``, no cast) and ``apply_fsdp`` gives ``fully_shard`` a
  ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``: the sharded parameter is the fp32 tensor the
  optimizer steps on (train-plan's master weights), cast to bf16 only into the all-gather's buffer. No bf16 shard is
  kept (:func:`sharded_weight_bytes` is 0), unlike DeepSpeed's ZeRO 3 (bf16 shard and fp32 master).
* **op-level checkpointing** (``recompute="op"``, torchtitan's ``_apply_ac_to_transformer_block``, a non-reentrant
  ``torch.utils.checkpoint`` with ``create_selective_checkpoint_contexts``): the checkpoint keeps the block's input
  (its recompute re-runs the block from it), which the layer's program has as an argument, not a saved value; SDPA's
  flash kernel (``_scaled_dot_product_flash_attention`` in ``_save_list``) is kept with every output, its log-sum-exp
  (fp32, b x heads x s) with it; and eager, ``_CachingTorchDispatchMode`` stores the output of every MUST_SAVE op
  whether the backward reads it or not: w2's (the 7th mm, b x s x h), which the recompute (stopped early once the
  tensors it needs are made) never pops and the frame frees only after the block's backward. Compiled (each block
  under ``torch.compile``), AOTAutograd saves only what the backward graph reads: not w2's output.
  :func:`op_saved_extra` (per layer and micro-batch). Under sequence parallelism the reduce-scatters' outputs (in
  ``_save_list`` too) are not counted.
* **the loss** (``loss_upcast``: torchtitan 9dec370 train.py ``loss_fn`` =
  ``cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))``, eager, outside the compiled blocks; the LM
  head's output ``pred`` bf16 [b, s/cp, V], ``del pred`` before ``loss.backward()``). Forward: pred (2 N V bytes, N
  = b s/cp tokens), its fp32 copy (4 N V) and log_softmax's output (4 N V, saved for both its own and nll_loss's
  backward) are live at once: 10 N V. Backward: nll_loss_backward's gradient (4 N V, zeros then scattered) and
  log_softmax_backward's result (4 N V) with the saved output (4 N V): 12 N V, the larger (:func:`loss_peak_bytes`),
  at the start of the backward, every layer's activations still held. No gradient exists then:
  ``optimizers.zero_grad()`` (set_to_none) at the step's start, the first one made after the loss's backward.
* **the model's root** (``loss_upcast``): ``fully_shard(model)`` holds ``tok_embeddings``, ``norm`` and ``output``
  (untied, 2 V h + h parameters); their fp32 shards and AdamW's two fp32 moments (12 bytes an element, sharded by
  dim 0, :func:`head_state_bytes`) and, the root never resharded after forward (``FSDPState._lazy_init``:
  ``post_forward_mesh_info = None`` for the root), their bf16 unsharded copy through the loss (2 bytes an element,
  :func:`head_gathered_bytes`); the last block is not resharded either (``reshard_after_forward = int(layer_id) <
  len(model.layers) - 1``), the only block gathered then. The final RMSNorm (norms.py ``RMSNorm.forward``:
  ``output = self._norm(x.float()).type_as(x); return output * self.weight``, ``_norm(x) = x * rsqrt(x.pow(2)
  .mean(-1, keepdim=True) + eps)``, eager) keeps for autograd the fp32 copy of x (4 N h: pow's and mul's saved
  input), rsqrt's fp32 result (4 N: its own backward's and mul's), the bf16 ``output`` (2 N h: ``output *
  self.weight`` saves it, the weight requiring a gradient) and that product (2 N h, the output linear's saved
  input): 8 N h + 4 N bytes (:func:`head_saved_bytes`; ``_norm``'s fp32 product and the bf16 x are saved by none).

The layers' gradients then are left out (none exist at the loss's backward). The published memory is the caching
allocator's peak *reserved* bytes (torchtitan's ``max_reserved_gib``: ``reserved_bytes.all.peak``), beyond what is
live; none of that excess is priced. torchtitan 9dec370's run_llama_train.sh:22 sets
``PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"``: PyTorch's CUDA caching allocator (c10/cuda/
CUDACachingAllocator.cpp, ``find_expandable_block``, ``try_allocate_expandable_block``, ``should_split``,
``try_merge_blocks``) then keeps one segment per stream and pool whose pages it maps as requests need them (20 MiB,
``kLargeBuffer``, a page of the large pool), merges each freed block with free neighbours and splits any free block,
so pred's freed 2 N V and the fp32 copy's 4 N V can merge and serve the loss's backward: no cached block is certain
to be left unused (under the other mode, one segment per request, it would be). What reserved holds beyond the live
peak (freed blocks on other streams, FSDP's buffers, partly mapped pages) is not counted.
"""
from __future__ import annotations


def fsdp2(cfg) -> bool:
    """Whether ``cfg`` shards as FSDP2 (``fully_shard``) does: ZeRO 3 with ``fsdp_version`` 2."""
    return cfg.zero_stage == 3 and cfg.fsdp_version == 2


def sharded_weight_bytes(cfg, weight_bytes: int) -> int:
    """The 2-byte weights' shard a GPU keeps under ZeRO 3: none under FSDP2 (the fp32 shard is the master)."""
    return 0 if fsdp2(cfg) else weight_bytes // cfg.shard_degree


def tokens(cfg) -> int:
    """N: the positions one GPU's micro-batch holds (b x s / cp)."""
    return cfg.micro_batch * cfg.local_seq


def op_saved_extra(cfg) -> int:
    """Bytes one layer and micro-batch keeps under torchtitan's op policy beyond the program's saved values: the
    block's input (b x s x h x 2, s / t under sequence parallelism), the flash kernel's log-sum-exp (fp32) and, eager,
    w2's output (b x s x h x 2); 0 under another policy."""
    if cfg.recompute != "op":
        return 0
    n = cfg.local_seq // cfg.t if cfg.sp else cfg.local_seq
    block_input = cfg.micro_batch * n * cfg.hidden * 2
    lse = tokens(cfg) * (cfg.heads // cfg.t) * 4 if cfg.attention == "fused" else 0
    w2 = tokens(cfg) * cfg.hidden * 2 if cfg.execution == "eager" else 0
    return block_input + lse + w2


def head_shapes(cfg) -> tuple:
    """The root's parameters (dim 0, other dims): tok_embeddings (V, h), norm (h,), output (V, h)."""
    return ((cfg.vocab, cfg.hidden), (cfg.hidden, 1), (cfg.vocab, cfg.hidden))


def head_state_bytes(cfg) -> int:
    """The root's fp32 shards and AdamW's two fp32 moments on one GPU: 12 bytes an element of each parameter's
    dim-0 shard (ceil(dim0 / shard) rows: FSDP2 pads the last)."""
    shard = cfg.shard_degree
    return sum(12 * -(-rows // shard) * cols for rows, cols in head_shapes(cfg))


def head_gathered_bytes(cfg) -> int:
    """The root's bf16 unsharded parameters, held from the forward through the loss: 2 bytes an element."""
    return sum(2 * rows * cols for rows, cols in head_shapes(cfg))


def head_saved_bytes(cfg) -> int:
    """The final RMSNorm's saved tensors: x's fp32 copy (4 N h), rsqrt's fp32 result (4 N), the bf16 normalized
    output (2 N h) and its product with the weight (2 N h, the output linear's input): 8 N h + 4 N."""
    return 8 * tokens(cfg) * cfg.hidden + 4 * tokens(cfg)


def loss_peak_bytes(cfg) -> int:
    """The loss's peak: three fp32 N x V tensors at log_softmax's backward (12 N V; the forward's 10 N V is less)."""
    return 12 * tokens(cfg) * cfg.vocab


def loss_moment(cfg, out: dict, weights: int) -> dict:
    """The step's peak under ``loss_upcast``: the larger of the loss's backward and the other moments (``out``,
    :func:`.memory.memory`'s categories and total, the root's fp32 shards, moments and gradient shard added: 12 + 4
    bytes an element of its shard). At the loss: no gradients, the layers' ``weights`` then (the last block gathered,
    every one with reshard-after-forward off), the root's state, unsharded copy, saved norm and the loss's tensors;
    those given apart, with ``loss_total``, whichever moment is the peak. ``out`` itself where the flag is off."""
    if not getattr(cfg, "loss_upcast", False):
        return out
    parts = {"head_state": head_state_bytes(cfg), "head_weights": head_gathered_bytes(cfg),
             "head_activations": head_saved_bytes(cfg), "loss_logits": loss_peak_bytes(cfg)}
    other = {"weights": out["weights"], "gradients": out["gradients"] + parts["head_state"] // 3,
             "optimizer_state": out["optimizer_state"] + parts["head_state"], "activations": out["activations"]}
    at_loss = {"weights": weights + parts["head_weights"], "gradients": 0,
               "optimizer_state": out["optimizer_state"] + parts["head_state"],
               "activations": out["activations"] + parts["head_activations"] + parts["loss_logits"]}
    parts["loss_total"] = sum(at_loss.values())
    peak = at_loss if parts["loss_total"] >= sum(other.values()) else other
    return out | parts | peak | {"total": sum(peak.values())}
