"""What a lowered inference step costs on a chip: the figures hardware teams compare for serving.

Time comes from the project's roofline (:class:`mhlo_cost.roofline.Roofline`, fused elementwise with
attention as one kernel: the ``compiled`` execution model), on a profile of :mod:`mhlo_cost.machines.hardware`:

- decode: the step's time is the time per output token (each of the ``batch`` sequences gets one token per
  step); tokens/s = batch / step time. Prefill: the step's time is the time to first token.
- the arithmetic intensity of the step (FLOPs / bytes its fused kernels move) against the chip's ridge point
  (matrix peak of the dtype / HBM bandwidth); the step's ``bound`` is the block table's rule for the whole
  program (:meth:`~mhlo_cost.roofline.Roofline.program_bound`: ``overhead`` where fixed kernel costs outweigh
  the work, as ``report`` and the sweep say).
- memory per device = weights + KV cache + the step's other inputs (token ids, positions) + activations, of
  the compiled execution it is priced as (the fused liveness: ``report --fuse elementwise``'s
  ``peak_bytes_fused``). The cache is an argument of the program, donated: its updated copy aliases it, so it
  is counted once; activations are the program's peak live bytes less its arguments and that aliased copy.
  The largest batch that fits at the context (and the largest context at the batch) scale the cache exactly
  (:meth:`CacheLayout.at`) and the activations and inputs in proportion to the batch; the largest context is
  also no longer than the model's positions (``max_context_bound`` says which bound it is).
- tensor parallelism over ``tp`` devices (for a model that does not fit one): weights and cache split ``tp``
  ways, the step's device time divided by ``tp``, plus two all_reduces of the hidden state per layer (after
  attention and after the MLP, Megatron-style) priced by the profile's link (ring: 2(tp-1)/tp of the bytes).
  This scales the one-device program; it is not a sharded lowering.
- launch (:data:`LAUNCHES`): ``stream`` launches each fused kernel from the host, paying the profile's
  ``kernel_overhead_us`` per kernel (its datasheet note: the back-to-back launch gap without CUDA graphs);
  ``cuda-graphs`` replays the whole step as one captured graph (torch.compile ``mode="reduce-overhead"`` or
  ``"max-autotune"``, vLLM / SGLang / TensorRT-LLM decode), so no kernel pays a host launch. Each kernel
  still pays its own fill and drain on the device (the profile's memory ramp, ``half_size_mb``, measured on
  the GPU by events): only the launch is removed, nothing else changes.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

from .fits import context_limit, max_batch, max_context

#: How the step's kernels are launched: one by one from the host, or replayed as one CUDA graph.
LAUNCHES = ("stream", "cuda-graphs")


@dataclass
class Figures:
    """One step on one chip (and ``tp`` devices). Byte counts are exact ints."""

    step: str
    batch: int
    context: int
    tokens: int
    hardware: str
    tp: int
    kv_cache_bytes: int
    kv_cache_layer_bytes: list
    weight_bytes: int
    activation_bytes: int
    memory_bytes: int  # per device
    capacity_bytes: int
    fits: bool
    flops: int
    bytes_moved: int  # by the fused kernels
    step_time_s: float
    comm_time_s: float
    tokens_per_s: float
    intensity: float
    ridge: float
    bound: str
    max_batch: int
    max_context: int | None  # None: unbounded (every layer a sliding window)
    blocks: list = field(default_factory=list)  # (block, est_time_s, bound)
    launch: str = "stream"  # one of LAUNCHES
    input_bytes: int = 0  # the step's arguments beyond weights and cache (token ids, positions), not split by tp
    max_context_bound: str = "memory"  # what bounds max_context: memory, positions (the model's), none
    precision: str = "bf16"  # the step's precision recipe (mhlo_cost.machines.precision)
    flops_by_precision: dict = field(default_factory=dict)  # gemm_flops_fp8, ...: the low-precision dots' FLOPs
    precision_note: str = ""  # a precision the chip has no rate for, priced upcast
    execution: str = "compiled"  # the execution model priced (studies.serve.eager: compiled or eager)
    ep: int = 1  # devices the routed experts are split over (studies.serve.expert); tp: attention's split
    moe_imbalance: float = 1.0  # the busiest expert-parallel device's routed copies / the mean
    all_to_all_bytes: int = 0  # bytes one device sends in one dispatch (or combine) of the first MoE layer
    all_to_all_time_s: float = 0.0  # every MoE layer's dispatch and combine
    expert_weight_bytes: int = 0  # the routed experts' weights (all of them; / ep per device)

    def row(self) -> dict:
        d = asdict(self)
        d.pop("blocks")
        d.pop("kv_cache_layer_bytes")
        low = d.pop("flops_by_precision")
        note = d.pop("precision_note")
        if d.pop("execution") != "compiled":
            d["execution"] = self.execution
        for k in ("ep", "moe_imbalance", "all_to_all_bytes", "all_to_all_time_s", "expert_weight_bytes"):
            v = d.pop(k)
            if self.ep > 1:  # (a step without expert parallelism has the columns it had)
                d[k] = v
        if d.pop("precision") == "bf16":  # (a bf16 sweep's table is unchanged)
            return d
        return d | {"precision": self.precision} | low | ({"precision_note": note} if note else {})


def _blocks(study) -> list:
    df = study.roofline.block_frame(study.blocks)
    return [(str(b), float(t), str(bd)) for b, t, bd in zip(df["block"], df["est_time_fused_s"], df["bound"])]


def activation_bytes(mem, cache: int) -> int:
    """The program's peak live bytes less its arguments and less the updated cache where the liveness sweep
    kept it beside the donated argument instead of in place (what is live at the end beyond the arguments
    and the other outputs): a donated cache is one buffer."""
    end = mem.after[-1] if mem.after else mem.argument_bytes
    twice = min(cache, max(end - mem.argument_bytes - (mem.output_bytes - cache), 0))
    return max(mem.peak_bytes - mem.argument_bytes - twice, 0)


def _allreduce_s(hw, tp: int, batch: int, tokens: int, hidden: int, itemsize: int, layers: int) -> float:
    if tp <= 1:
        return 0.0
    size = batch * tokens * hidden * itemsize
    return 2 * layers * hw.comm_time(2 * (tp - 1) * size // tp, 2 * (tp - 1))


def launched(hw, launch: str = "stream"):
    """``hw`` as a step launched by ``launch`` sees it: under ``cuda-graphs`` no kernel pays the host's
    launch overhead (``kernel_overhead`` 0); every other figure of the profile is unchanged."""
    if launch not in LAUNCHES:
        raise ValueError(f"unknown launch {launch!r}: choose one of {', '.join(LAUNCHES)}")
    return hw if launch == "stream" else replace(hw, kernel_overhead=0.0)


def step_study(step, hw, analysis=None, execution: str = "compiled"):
    """The :class:`~mhlo_cost.studies.study.Study` of a lowered step on ``hw``: compiled (elementwise fused, attention
    one kernel) or eager (:mod:`.eager`), the data flow recorded; ``analysis``: the step's, where already made."""
    from ..study import Study

    fields = {"hardware": hw, "execution": execution, "dataflow": True}
    return Study(step.lowered.text, **fields) if analysis is None else Study.of(analysis, **fields)


def _memory(step, mem) -> tuple[int, int, int]:
    """(activations, inputs, transient) of a step whose execution's liveness is ``mem``: a static cache donated
    (:func:`activation_bytes`), a dynamic one grown by concatenation (:func:`.eager.dynamic_memory`)."""
    if step.request.cache == "dynamic":
        from .eager import dynamic_memory

        return dynamic_memory(step, mem)
    cache = step.layout.nbytes
    return activation_bytes(mem, cache), max(mem.argument_bytes - step.weight_bytes - cache, 0), 0


def figures(step, hw, tp: int = 1, analysis=None, blocks: bool = True, launch: str = "stream",
            execution: str = "compiled", split=None) -> Figures:
    """The figures of a lowered :class:`~mhlo_cost.studies.serve.Step` on ``hw`` over ``tp`` devices, its kernels
    launched by ``launch`` (:data:`LAUNCHES`), from the step's study (:func:`step_study`) under ``execution``;
    ``split``: an :class:`~.expert.ExpertSplit` (experts over ``split.ep`` devices; :func:`.expert.apply`)."""
    hw = launched(hw, launch)
    study = step_study(step, hw, analysis, execution)
    return figures_of(step, hw, tp, study.roofline, study.fused_memory, _blocks(study) if blocks else [],
                      launch, execution, split)


def figures_of(step, hw, tp: int, rf, mem, blocks: list, launch: str = "stream", execution: str = "compiled",
               split=None) -> Figures:
    """:func:`figures` from the step's priced estimate ``rf`` (a :class:`~mhlo_cost.roofline.Roofline` under its
    execution, ``hw`` launched by ``launch``), the liveness of that execution ``mem`` (its peak, arguments,
    outputs and what is live at the end) and the per-block times ``blocks`` ((block, est_time_fused_s, bound));
    the step priced from one layer (:mod:`.onelayer`) gives these without the full-depth study."""
    from ...analysis import precision_flops

    req, layout = step.request, step.layout
    tot = rf.totals()
    cache = layout.nbytes
    activations, inputs, transient = _memory(step, mem)
    activations += transient  # (a dynamic cache's concatenation: the largest layer's past beside its copy)
    tokens = req.tokens if req.mode == "prefill" else 1
    itemsize = layout.layers[0].itemsize if layout.layers else 2
    comm = _allreduce_s(hw, tp, req.batch, tokens, step.hidden, itemsize, step.layers)
    device = tot["est_time_fused_s"] - tot["comm_time_s"]
    step_s = device / tp + comm
    capacity = int(hw.hbm_capacity)
    memory = -(-step.weight_bytes // tp) + -(-cache // tp) + inputs + activations
    moved = tot["fused_bytes"]
    ridge = rf.reference_peak / hw.hbm_bandwidth  # the peak of report's utilisation (reference_peak_tflops)
    intensity = rf.flops / moved if moved else math.inf
    produced = req.batch * (tokens if req.mode == "prefill" else 1)
    longest, bound = context_limit(max_context(layout, step.weight_bytes, activations + inputs, capacity, tp),
                                   step.positions)
    fig = Figures(
        step=req.mode, batch=req.batch, context=req.context, tokens=tokens, hardware=hw.name, tp=tp,
        kv_cache_bytes=cache, kv_cache_layer_bytes=layout.per_layer_bytes, weight_bytes=step.weight_bytes,
        activation_bytes=activations, memory_bytes=memory, capacity_bytes=capacity, fits=memory <= capacity,
        flops=rf.flops, bytes_moved=moved, step_time_s=step_s, comm_time_s=comm,
        tokens_per_s=produced / step_s if step_s > 0 else math.inf, intensity=intensity, ridge=ridge,
        bound=rf.program_bound(),  # the block table's TOTAL and the sweep's rule; intensity and ridge beside it
        max_batch=max_batch(layout, step.weight_bytes, -(-(activations + inputs) // req.batch), capacity, tp),
        max_context=longest, blocks=blocks, launch=launch, input_bytes=inputs,
        max_context_bound=bound, precision=req.recipe().name,
        flops_by_precision=precision_flops(rf.analysis.rows),
        precision_note="; ".join(rf.precision_notes()), execution=execution)
    if split is None or split.ep <= 1:
        return fig
    from .expert import apply

    return apply(fig, step, rf, hw, split, activations + inputs)
