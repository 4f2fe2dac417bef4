"""One training iteration composed by arithmetic from the per-device layer's costs.

For a configuration with ``L`` layers on ``p`` stages (``v`` virtual stages each), ``m`` micro-batches per
pipeline and the layer's times F (forward), B (backward), R (recompute) per micro-batch:

* stage time per micro-batch: ``F_s = (L/p)(F + TP_f)``, ``B_s = (L/p)(B + R + TP_b)``, where TP_f / TP_b
  are the layer's tensor-parallel collectives (no sequence parallelism: 2 all_reduce forward, 2 backward;
  with it: 2 all_gather + 2 reduce_scatter forward, 2 + 2 backward and, Megatron's, 2 all_gather more that
  re-gather the sharded norm outputs the weight gradients need; full recompute repeats the forward's collectives),
  each of the full activation ``b x s x h`` (bf16) over the ``t`` devices of a tensor group, priced on the
  system's network. Megatron (2022) does not overlap them: all are exposed; with ``tp_comm_overlap`` (TE's
  userbuffers, NeMo's) each is priced against the GEMM it is overlapped with (:mod:`.tp_overlap`); with
  ``async_tp`` (PyTorch's, torch.compile) Inductor's fused all_gather-matmul / matmul-reduce_scatter pairs
  (:mod:`.async_tp`);
* Megatron's full recompute re-runs the layer's whole forward, so its R is priced as F (JAX's remat
  leaves out what the backward does not read; its IR count is kept beside, ``recompute_ir``);
* 1F1B: ``(m + p - 1)(F_s + B_s)``; interleaved with ``v`` chunks: ``(m + (p - 1)/v)(F_s + B_s)``; the
  bubble is the ``(p - 1)/v`` part (fraction ``(p - 1)/(v m)`` of the ideal time);
* point-to-point: each micro-batch crosses ``v`` chunk boundaries forward and ``v`` backward per device,
  1/t of the activation ``b x s x h`` bf16 (the ``s/t`` shard with sequence parallelism), device to the next
  stage's; without sequence parallelism the receiver all-gathers the whole over its tensor group before using it
  (Megatron's scatter/gather optimisation, :mod:`.megatron_passes`);
* the last stage's head: its program's seconds, with ``cross_entropy="megatron"`` its loss replaced by
  Megatron's own cross-entropy kernels over the fp32 logits; ``loss_scale`` (fp16): the optimizer's gradient
  copy and unscale passes; ``main_grad_add``: Megatron-LM's local DDP hook adding each micro-batch's gradients into
  ``main_grad`` (in the stage's backward, :mod:`.megatron_passes`);
* the tied embedding (``tied_embedding``, with a pipeline): its gradient all_reduce between the first and last
  stages after the flush, exposed (Megatron's ``_allreduce_embedding_grads``, DeepSpeed's tied-weight reduce);
* data parallel (:mod:`.sharding`): the stage's fp32 gradients all_reduce (or, ZeRO 1, reduce_scatter the
  fp32 gradients and all_gather the bf16 weights) over the ``cp x d`` replicas once per iteration, exposed
  unless ``dp_overlap``, where the last micro-batch's backward hides up to its length (the larger of the slowest
  stage's and the first stage's: the first stage runs the schedule's last backward), or with ``ddp="megatron"``
  Megatron-Core's buckets and chunks, launched as the backward makes their gradients (:mod:`.dp_overlap`); the
  embedding / LM head reduce with their stage's layers under ZeRO 0 / 1 (:func:`.sharding.optimizer_extra_elems`)
  and a sharded optimizer steps them; ZeRO 2 / FSDP's
  per-layer collectives are in each micro-batch's F_s / B_s, exposed where they outlast the layer's compute;
  every overlapped collective's NCCL kernel holds ``n`` of the chip's ``S`` SMs while it runs, so the compute
  beside it is slowed by ``n / S`` of the overlapped seconds (:mod:`.sm_share`);
* context parallelism: its K/V exchange per layer and micro-batch in F_s / B_s (what each ring step's attention
  call does not hide); the ring's calls, each at its own shape, in place of the layer's one kernel
  (:mod:`.cp_calls`: what they add to it is the layer's forward / backward and its recompute's); PyTorch's ring
  attention's own merges and fp32 accumulators (:mod:`.ring_passes`) and Transformer Engine's (``p2p``,
  :mod:`.te_cp_passes`) are kernels of the layer's forward / backward (and of its full recompute), as are FSDP2's
  copy-out of each all-gather and copy-in of each reduce-scatter (:mod:`.fsdp_copies`);
* uneven pipelines: every slot runs at the pace of the slowest stage (the most layers, or the head's);
  interleaved, a stage's layers are its ``v`` chunks together (torchtitan splits 126 layers into 16 virtual
  stages of 7, 8 x 14, 7: two a device, 15 or 16 layers), a chunk's time its stage's over ``v``;
* optimizer: the layer's optimizer phase x layers per stage (``/ (cp x d)`` sharded with ZeRO).

Counts (FLOPs, bytes, micro-batches, transfers) are exact ints; times are floats in seconds. The result,
:class:`.iteration.Iteration`, and its table row are :mod:`.iteration`'s.
"""
from __future__ import annotations

from fractions import Fraction

from ...network import estimate
from .config import ScaleConfig
from .costs import LayerCost
from .iteration import Iteration
from .sharding import (cp_collectives, cp_exposure, dp_collectives, dp_exposure, embedding_collective, embedding_elems,
                       optimizer_extra_elems, seconds, step_seconds)
from .dp_overlap import bucketed, dp_overlap_exposed, grad_buffer_zero_seconds
from .grad_clip import clip_seconds
from .megatron_passes import (gather_seconds, head_seconds, loss_scale_seconds,
                              main_grad_add_seconds, send_bytes, torch_ddp_seconds)
from .embedding_pass import word_embedding_seconds
from .fsdp_copies import fsdp_copy_seconds
from .attention_kernels import attention_pass_seconds
from .mlp_activation import activation_pass_seconds
from .fp8_gather import tp_bytes
from .fp8_weights import per_micro_batch, saved_cast_backward, split_step
from .te_amax import AMAX_BYTES, amax_reductions, te_cast_seconds
from .te_amax_update import stage_seconds as amax_update_seconds
from .torchao_casts import torchao_cast_seconds
from .nccl_ub import ub_sms_of
from .partial_recompute import full_share, mean_layer, recomputed_layers, whole
from .partial_recompute import kept as without
from .recompute import recompute_flops, recompute_seconds, recomputed_collectives, reruns_attention
from .ring_passes import ring_pass_seconds
from .cp_calls import ring_call_seconds
from .te_cp_passes import te_cp_pass_seconds
from .sm_share import chip_sms, nccl_sms, taxed
from .tp_overlap import tp_overlap_exposure
from .async_tp import async_tp_exposure


def tp_collectives(cfg: ScaleConfig) -> dict:
    """(kind, count) of the tensor-parallel collectives of one layer, forward and backward, per micro-batch. With
    sequence parallelism Megatron's linears save the norm's output sharded and all-gather it again for the weight
    gradients (``LinearWithGradAccumulationAndAsyncCommunication.backward``, megatron/core/tensor_parallel/layers.py):
    2 all_gathers more. PyTorch's tensor parallel (execution eager / inductor: DTensor's ``PrepareModuleInput``
    gathers, then a plain ``mm``) has autograd keep the gathered input (``mm``'s derivative reads ``self`` for the
    weight's gradient, tools/autograd/derivatives.yaml), or with full recompute the recomputed forward gathers it:
    no re-gather. torchtitan's op-level selective recompute (``op``, 9dec370 ``_save_list``: mm, SDPA and the
    reduce-scatters saved, every second mm not, the rest ``PREFER_RECOMPUTE``) re-runs both gathers in its
    recompute (wk's and w3's outputs, and every linear's input for its weight gradient, are remade from them): 2, as
    Megatron's count (tests/test_train_plan_op_sac_gathers.py walks it)."""
    if cfg.t == 1:
        return {"forward": (), "backward": ()}
    if cfg.sp:
        fwd = (("all_gather", 2), ("reduce_scatter", 2))
        kept = cfg.execution != "compiled" and cfg.recompute in ("none", "full")  # PyTorch's: no re-gather ("op": 2)
        bwd = [("all_gather", 2 + (0 if kept else 2)), ("reduce_scatter", 2)]
    else:
        fwd = (("all_reduce", 2),)
        bwd = [("all_reduce", 2)]
    if cfg.recompute == "full":  # (torch.compile's: not the block's last scatter, .recompute.recomputed_collectives)
        bwd.extend(recomputed_collectives(cfg, fwd))
    return {"forward": fwd, "backward": tuple(bwd)}


def _time(topology, kind: str, nbytes: int, groups) -> float:
    if topology is None or nbytes == 0:
        return 0.0
    return estimate(topology, kind, nbytes, groups).time_s


def tp_group(cfg: ScaleConfig) -> tuple:
    return (tuple(range(cfg.t)),)


def activation_bytes(cfg: ScaleConfig) -> int:
    """S of one layer's activation b x s/cp x h, bf16 (the full buffer a TP collective moves)."""
    return cfg.micro_batch * cfg.local_seq * cfg.hidden * 2


def _layer(cfg: ScaleConfig, cost: LayerCost, topo, hw=None) -> dict:
    """One layer, one micro-batch, on one device (seconds): compute by phase, the tensor-parallel collectives,
    and what context parallelism and the per-layer data-parallel collectives expose (:mod:`.sharding`); ``hw``:
    the profile whose SMs the overlapped communication kernels share (:mod:`.sm_share`)."""
    t = cost.time_s
    cast_f, cast_b, cast_r = per_micro_batch(cfg, cost)  # fp8 weight copies made once a step (.fp8_weights)
    cast_b += saved_cast_backward(cfg, cost, hw)  # torchao eab345c's tensorwise: the fp8 weight saved, not recast
    rec = recompute_seconds(cfg, t, cost.core_s) - cast_r  # (none: no recompute pass; selective: .recompute)
    s_act = activation_bytes(cfg)
    if cfg.tp_comm_overlap and cfg.t > 1:  # TE's userbuffers: each collective against its own GEMM
        tp = tp_overlap_exposure(cfg, cost, s_act, lambda kind, n, groups: _time(topo, kind, n, groups),
                                 chip_sms(hw))
    elif cfg.async_tp and cfg.t > 1:  # PyTorch's async TP: Inductor's fused pairs, the rest exposed (.async_tp)
        tp = async_tp_exposure(cfg, cost, s_act, lambda kind, n, groups: _time(topo, kind, n, groups), hw)
    else:
        tp = {ph: sum(n * _time(topo, kind, tp_bytes(cfg, kind, s_act), tp_group(cfg)) for kind, n in kinds)
              for ph, kinds in tp_collectives(cfg).items()}
    tp = dict(tp)  # TE 2.9's current scaling under sequence parallelism: its synchronous amax all-reduces (.te_amax)
    for ph, n in amax_reductions(cfg).items():
        tp[ph] += n * _time(topo, "all_reduce", AMAX_BYTES, tp_group(cfg))
    cp = cp_exposure(cfg, topo, cost, nccl_sms(hw), hw)
    calls = ring_call_seconds(cfg, hw, cost.core_s)  # the ring's calls at their own shapes less the one kernel
    # PyTorch's ring attention's own merges and accumulators: kernels of the layer's compute (.ring_passes); full
    # recompute runs the forward's again
    ring_f, ring_b = ring_pass_seconds(cfg, hw)
    te_f, te_b = te_cp_pass_seconds(cfg, hw)  # TE's p2p ring (Megatron-Core's): its merges and copies (.te_cp_passes)
    ring_f, ring_b = ring_f + te_f, ring_b + te_b
    copy_f, copy_b = fsdp_copy_seconds(cfg, hw, cost.weight_elems)  # FSDP2's copy-out / copy-in (.fsdp_copies)
    act_f, act_b = activation_pass_seconds(cfg, hw, cost.act_s)  # Megatron's / NeMo's own kernels (.mlp_activation)
    attn_f, attn_b = attention_pass_seconds(cfg, hw, cost.core_own_s)  # Megatron's softmax, dropout
    # (.attention_kernels)
    act_f, act_b = act_f + attn_f, act_b + attn_b
    amax_f, amax_b, amax_r = te_cast_seconds(cfg, hw, cost)  # TE's delayed scaling: no amax pass (.te_amax)
    ao_f, ao_b, ao_r = torchao_cast_seconds(cfg, hw, cost)  # torchao eab345c: dy cast once, input_fp8 saved
    amax_f, amax_b, amax_r = amax_f + ao_f, amax_b + ao_b, amax_r + ao_r
    fwd = t["forward"] - cast_f + ring_f + copy_f + act_f + amax_f + calls.added_forward
    bwd = t["backward"] - cast_b + ring_b + copy_b + act_b + amax_b + calls.added_backward
    rec += amax_r
    rec += act_f - attn_f if cfg.recompute == "full" else 0.0
    rec += attn_f if reruns_attention(cfg) else 0.0  # (full or selective: the core's forward kernels again)
    rec += ring_f + calls.added_forward if reruns_attention(cfg) else 0.0  # the ring's passes: the forward's own
    f = fwd + tp["forward"] + cp.forward
    b = bwd + rec + tp["backward"] + cp.backward
    return {"forward": fwd, "backward": bwd, "recompute": rec, "tp_forward": tp["forward"],
            "tp_backward": tp["backward"], "cp": cp, "ring_forward": ring_f, "ring_backward": ring_b,
            "fsdp_copies": copy_f + copy_b, "f": f, "b": b}


def grad_accum_seconds(cfg: ScaleConfig, hw, cost: LayerCost, layers: int, extra: int = 0) -> float:
    """One micro-batch's separate gradient accumulation on a stage of ``layers`` layers and ``extra`` weight
    elements outside them (``grad_accum_pass``; 0 without): DeepSpeed's BF16 optimizer zeroes the 2-byte gradients
    before each backward (``clear_lp_grads``) and adds them into its fp32 buffer after it (``update_hp_grads``:
    ``hp_grad.add_(lp.grad.float())``, every parameter of its groups: the stage's embedding or LM head too), 2 + 2
    + 4 + 4 bytes per weight element through memory, two kernels a layer (and two for the ``extra``), where
    Megatron's wgrad GEMMs accumulate into ``main_grad`` themselves."""
    if not cfg.grad_accum_pass:
        return 0.0
    return hw.memory_time(12 * (cost.weight_elems * layers + extra), kernels=2 * layers + (2 if extra else 0))


def _stages(cfg: ScaleConfig, cost: LayerCost, topo, one: dict, head: LayerCost | None, hw=None) -> list[dict]:
    """Per pipeline stage: its layers, and its forward / backward seconds per micro-batch (the data-parallel
    per-layer collectives' exposure in them; the last stage's head)."""
    hf, hb = head_seconds(cfg, head, hw)  # (Megatron's own cross-entropy kernels where cfg says: .megatron_passes)
    ef, eb = word_embedding_seconds(cfg, hw)  # the first stage's word embedding (Megatron-Core's: .embedding_pass)
    out = []
    for s, n in enumerate(cfg.stage_layers()):
        last = s == cfg.p - 1
        ef_s, eb_s = (ef, eb) if s == 0 else (0.0, 0.0)
        uf, ub = amax_update_seconds(cfg, hw, n)  # TE's amax reduction and scale update per exit (.te_amax_update)
        ef_s, eb_s = ef_s + uf, eb_s + ub
        sms = nccl_sms(hw) if hw is not None else (0, 0)
        dp = dp_exposure(cfg, topo, cost, n, one["f"], one["b"], optimizer_extra_elems(cfg, s), sms,
                         ub_sms_of(cfg, topo, sms[1]))  # (nccl_ub's SM-efficient collectives: .nccl_ub)
        extra = embedding_elems(cfg, s)
        elems = cost.weight_elems * n + extra  # the stage's weights
        accum = grad_accum_seconds(cfg, hw, cost, n, extra) if hw is not None else 0.0
        accum += main_grad_add_seconds(cfg, hw, cost.weight_elems, n, extra)  # (.megatron_passes)
        step = (optimizer_seconds(cfg, cost, s, n) + grad_buffer_zero_seconds(cfg, hw, elems)  # (.dp_overlap)
                + step_seconds(cfg, topo, cost, n)  # (torchao's precomputed fp8 weight scales: .fp8_gather)
                + torch_ddp_seconds(cfg, hw, elems, n, extra)
                + loss_scale_seconds(cfg, hw, elems // cfg.shard_degree, n, extra)
                + clip_seconds(cfg, hw, elems, n, extra, last))  # gradient clipping (.grad_clip)
        out.append({"layers": n, "dp": dp, "head_forward": hf if last else 0.0, "head_backward": hb if last else 0.0,
                    "embed_forward": ef_s, "embed_backward": eb_s,
                    "f_s": n * (one["f"] + dp.forward) + (hf if last else 0.0) + ef_s,
                    "b_s": n * (one["b"] + dp.backward) + (hb if last else 0.0) + eb_s + accum, "grad_accum": accum,
                    "optimizer": step})
    return out


def compose(cfg: ScaleConfig, cost: LayerCost, hw, head: LayerCost | None = None,
            kept: LayerCost | None = None) -> Iteration:
    """The :class:`Iteration` of ``cfg`` from its layer's ``cost`` (and the last stage's ``head``: LM head
    and loss, which make that stage the slowest) on ``hw`` (a system profile). With stages of unequal layer
    counts the slowest stage sets the pace of every slot. ``kept``: under a partial recompute
    (:mod:`.partial_recompute`), the layer lowered without recompute, which the layers not checkpointed run."""
    topo = getattr(hw, "topology", None)
    m, p, v = cfg.micro_batches, cfg.p, cfg.interleave
    one = _layer(cfg, cost, topo, hw) if kept is None else mean_layer(
        full_share(cfg), _layer(whole(cfg), cost, topo, hw), _layer(without(cfg), kept, topo, hw))
    stages = _stages(cfg, cost, topo, one, head, hw)
    if cfg.launch_blocking:  # CUDA_LAUNCH_BLOCKING=1: each call's host time in series with its kernel
        from .launch_blocking import add_host, layer_calls

        add_host(cfg, hw, stages, layer_calls(cfg, head is not None), tp_collectives(cfg), cost.weight_elems,
                 lambda s: optimizer_extra_elems(cfg, s))
    slow_stage = max(reversed(range(p)), key=lambda s: stages[s]["f_s"] + stages[s]["b_s"])  # ties: the last
    slow = stages[slow_stage]
    n, f_s, b_s, dp = slow["layers"], slow["f_s"], slow["b_s"], slow["dp"]
    # the first stage runs the schedule's last backward, so its once-an-iteration reduction is never hidden
    # behind another stage's work: the larger of its and the slowest stage's sets the end of the iteration
    dp_stage = 0 if stages[0]["dp"].iteration > dp.iteration else slow_stage  # whose reduction ends it
    dp_iter = stages[dp_stage]["dp"].iteration
    p2p_bytes, p2p_per_mb = _p2p(cfg, topo)
    slots = Fraction(m) + Fraction(p - 1, v)  # micro-batch slots on the critical path
    per_mb = f_s + b_s + p2p_per_mb
    cast_own, cast_fill = split_step(cfg, cost, stages, n)  # TE's once-a-step fp8 weight copies (.fp8_weights)
    bubble = float(Fraction(p - 1, v)) * (f_s + b_s) + cast_fill
    dp_iter, hidden, tax = _dp_reduction(cfg, cost, hw, stages, dp_iter, b_s / v)
    opt = max(st["optimizer"] for st in stages)  # the slowest step: the next iteration starts after it
    emb = embedding_seconds(cfg, topo)  # after the flush, before the step: exposed
    total = float(slots) * per_mb + (dp_iter - hidden) + tax + emb + opt + cast_own + cast_fill
    compute = {"forward": m * (n * one["forward"] + slow["head_forward"] + slow["embed_forward"]) + cast_own,
               "backward": m * (n * one["backward"] + slow["head_backward"] + slow["embed_backward"]
                                + slow["grad_accum"]),
               "recompute": m * n * one["recompute"]}
    counts = flop_counts(cfg, cost, hw, total, head)
    counts.update(micro_batches=m, p2p_transfers=2 * v * m if p > 1 else 0, p2p_bytes=p2p_bytes,
                  tp_bytes=activation_bytes(cfg), dp_bytes=_dp_bytes(cfg, cost, stages[dp_stage]["layers"], dp_stage),
                  slots=str(slots), bubble_fraction=str(Fraction(p - 1, v * m)))
    counts.update(_extra_counts(cfg, cost, stages[dp_stage]["layers"], optimizer_extra_elems(cfg, dp_stage)))
    dp_layers = m * n * (dp.forward + dp.backward)
    one.update(optimizer=cost.time_s["optimizer"] / cfg.shard_degree, dp_iteration_exposed=dp_iter - hidden + tax,
               slow_stage=slow_stage, embedding_exposed=emb, dp_sm_tax=tax)
    return Iteration(cfg, compute, m * n * (one["tp_forward"] + one["tp_backward"]), bubble,
                     float(slots) * p2p_per_mb, dp_layers + dp_iter - hidden + tax + emb,
                     m * n * (dp.forward_total + dp.backward_total) + dp_iter + emb, opt, total, counts,
                     cp_comm=m * n * (one["cp"].forward + one["cp"].backward), stages=tuple(stages), layer=one,
                     launch_host=m * sum(slow.get("launch_host", (0.0, 0.0))[:2]))


def _p2p(cfg: ScaleConfig, topo) -> tuple:
    """``(bytes of one send, seconds of the pipeline's sends per micro-batch)``: v boundaries forward and v
    backward per micro-batch (none with one stage); 1/t of the activation with sequence parallelism or Megatron-LM's
    scatter/gather (all-gathered after), else all of it."""
    p2p_bytes = send_bytes(cfg, activation_bytes(cfg))
    if cfg.p == 1:
        return p2p_bytes, 0.0
    hop = cfg.t * cfg.cp * cfg.d  # the next stage's device with the same tensor, context and data rank
    one = _time(topo, "collective_permute", p2p_bytes, ((0, hop),))
    one += gather_seconds(cfg, topo)  # the receiver's all_gather of the whole tensor (.megatron_passes)
    return p2p_bytes, 2 * cfg.interleave * one


def _dp_reduction(cfg: ScaleConfig, cost: LayerCost, hw, stages, dp_iter: float, last_backward: float) -> tuple:
    """``(the data-parallel reduction's seconds, its part hidden under the last backward, the backward's SM tax)``
    from the once-an-iteration reduction's ``dp_iter``; Megatron-Core's or PyTorch DDP's buckets (.dp_overlap)
    reduce unit by unit instead."""
    topo = getattr(hw, "topology", None)
    hidden = min(dp_iter, last_backward) if cfg.dp_overlap else 0.0
    sms = nccl_sms(hw)
    # the backward beside the hidden reduction runs on the SMs NCCL leaves: the pair takes sm_share.contended; the
    # tax is what that adds beyond the reduction's own exposed part (none beyond it where the reduction outlasts)
    tax = taxed(last_backward, dp_iter, sms) - (dp_iter - hidden) if cfg.dp_overlap else 0.0
    if bucketed(cfg) and cfg.cp * cfg.d > 1:
        rs, ag, tax = dp_overlap_exposed(cfg, topo, cost.weight_elems, stages,
                                         lambda s: optimizer_extra_elems(cfg, s), sms)
        dp_iter = max(dp_iter, rs + ag)  # (unit by unit, each collective's latency: more than the whole at once)
        hidden = dp_iter - rs - ag
    return dp_iter, hidden, tax


def _dp_bytes(cfg: ScaleConfig, cost: LayerCost, layers: int, stage: int) -> int:
    """The gradient bytes one device's data-parallel reduction carries per iteration: the stage's ``layers``
    layers, the weights outside them (STDiT3's embedders) and those its optimizer reduces with them (DeepSpeed's
    embedding / LM head); 0 with no data-parallel group."""
    if cfg.cp * cfg.d == 1:
        return 0
    extra = getattr(cfg, "extra_weight_elems", 0) + optimizer_extra_elems(cfg, stage)
    return (cost.weight_elems * layers + extra) * cfg.grad_bytes


def optimizer_seconds(cfg: ScaleConfig, cost: LayerCost, stage: int, layers: int) -> float:
    """The optimizer step of ``stage`` (``layers`` layers): its layers' step and, under a sharded optimizer (ZeRO 1:
    Megatron's distributed optimizer, DeepSpeed's), its shard of the weights outside them (the embedding or LM head,
    :func:`.sharding.optimizer_extra_elems`) at the layer's seconds per element (the step is elementwise), over the
    sharding degree. (ZeRO 0's embedding step is left out, as Korthikanti et al.'s Table 5 was priced.)"""
    per_layer, w = cost.time_s["optimizer"], cost.weight_elems
    extra = Fraction(optimizer_extra_elems(cfg, stage), w) if w and cfg.zero_stage == 1 else 0
    return float((layers + extra) * per_layer) / cfg.shard_degree


def _extra_counts(cfg: ScaleConfig, cost: LayerCost, n: int, stage_extra: int = 0) -> dict:
    """The stage layer counts (uneven pipelines) and the sharding's and context parallelism's collectives (of a
    stage of ``n`` layers and ``stage_extra`` weight elements outside them)."""
    out = {"stage_layers": list(cfg.stage_layers())} if cfg.uneven else {}
    emb = embedding_collective(cfg)
    rows = [c.row() for c in (*dp_collectives(cfg, cost, n, stage_extra), *cp_collectives(cfg),
                              *([emb] if emb else []))]
    if cfg.zero_stage >= 2 or cfg.cp > 1 or cfg.replicate_degree > 1 or emb or cfg.dp_reduce != "reduce_scatter":
        out["collectives"] = rows
    return out


def embedding_seconds(cfg: ScaleConfig, topo) -> float:
    """The tied embedding's gradient all_reduce between the first and last stages (0 without one)."""
    c = embedding_collective(cfg)
    return seconds(topo, c) if c is not None else 0.0


def model_flops_6nd(cfg: ScaleConfig) -> int:
    """Megatron's model FLOPs per iteration (Narayanan et al. 2021, without recompute):
    ``72 B s L h^2 (1 + s/(6h) + V/(12 h L))`` (MLP 4h), as an exact int: forward + backward matrix FLOPs of
    every layer and the logits. (6ND with N = 12 L h^2 is its leading term.) Generalised to fewer key/value
    heads (the k and v projections h x kv d) and the SwiGLU MLP (three h x ffn GEMMs). A model with its own
    closed form (``cfg.model_flops()``: STDiT3's) gives that."""
    if hasattr(cfg, "model_flops"):
        return cfg.model_flops()
    b, s, h, n, vcb = cfg.global_batch, cfg.seq, cfg.hidden, cfg.layers, cfg.vocab
    f, kvd = cfg.mlp, cfg.kv * (h // cfg.heads)
    mlp_mats = 3 if cfg.mlp_kind == "swiglu" else 2  # SwiGLU: gate, up, down
    per_layer = 6 * b * s * (2 * h * h + 2 * h * kvd + mlp_mats * h * f) + 12 * b * s * s * h
    return n * per_layer + 6 * b * s * h * vcb


def flop_counts(cfg: ScaleConfig, cost: LayerCost, hw, total: float, head: LayerCost | None = None) -> dict:
    """Model FLOPs (forward + backward of every layer, from the IR, x devices' share) and hardware FLOPs
    (recompute included) per iteration, the 6ND-style closed form beside them, MFU and HFU."""
    g = cost.gemm_flops
    per_mb_model = g["forward"] + g["backward"]
    rec = recompute_flops(cfg, g)
    mbs = cfg.micro_batches * cfg.d  # micro-batches of the whole iteration per tensor/pipeline slot
    head_flops = head.gemm_flops["forward"] + head.gemm_flops["backward"] if head is not None else 0
    model = (per_mb_model * cfg.layers + head_flops) * cfg.t * cfg.cp * mbs
    hardware = model + rec * recomputed_layers(cfg) * cfg.t * cfg.cp * mbs
    peak = hw.matrix_peak("bf16")
    denom = total * peak * cfg.gpus
    return {"model_flops": model, "hardware_flops": hardware, "formula_flops": model_flops_6nd(cfg),
            "rule_6nd": 6 * cfg.global_batch * cfg.seq * 12 * cfg.layers * cfg.hidden ** 2,
            "mfu": model / denom if denom else 0.0, "hfu": hardware / denom if denom else 0.0}
