"""train-plan's ``--clock average``: the step's products priced at the clock the step's own average board power holds
at the power limit (:func:`mhlo_cost.machines.power.step_clock`), not at a stream's.

The step's time breakdown comes from pricing it twice: at the peak's clock and at the stream's (``sustained``).
The busiest device's kernels (forward, backward, recompute and the optimizer step, as :class:`~.compose.Iteration`
counts them: not the pipeline's fill and drain, which are waits) are what the clock moves. Of them, the products
other than the fused attention move by peak / stream (a dot's efficiency is multiplied by clock / peak,
:func:`mhlo_cost.machines.clock.clock_factor`), so their time at the peak's clock is the difference of the two
busy times, less the attention's own difference, over (peak / stream - 1). The attention kernels (scope ``core``,
clock-scaled by their own activity, :func:`mhlo_cost.roofline.attention_compute.sm_clock`) are tensor-core work
too and join them at their peak-clock seconds, as the recompute compose charges counts them. The rest of the busy
time is memory-bound kernels; what is left of the iteration (the pipeline bubble, exposed tensor-, data- and
context-parallel communication, point-to-point waits) is time the GPU waits. The clocks solved from that breakdown
(per dtype key of the profile's clock table) price the step a third time, every kernel at the one solved clock.
In the solve the attention is tensor-core work at its own power: the floor plus its activity's share of the
stream's part above it (:func:`mhlo_cost.machines.power.step_clock`'s ``others``), its activity the seconds its
products would take at the tensor cores' full issue rate (``core_tensor_s``, composed like its seconds) over its
seconds and the stream's GEMM efficiency (FlashAttention-2: about 0.4 of the products'). Where no fused kernel
gives that (the unfused attention's separate kernels), the attention stays with the products, as their power.
For an fp8 recipe the one difference is divided by the fp8 clock's step; the bf16 products in it (the attention's
scores) moved by the bf16 clock's, so they are a little under-counted.
"""
from __future__ import annotations

from .partial_recompute import full_share, partial
from .recompute import recompute_seconds


def dots_key(cfg) -> str:
    """The clock table's key of the step's linears: fp8 for an fp8 recipe, else bf16."""
    return "fp8" if str(getattr(cfg, "precision", "bf16")).startswith("fp8") else "bf16"


def breakdown(peak_it, stream_it, peak_mhz: float, stream_mhz: float, attention=(0.0, 0.0)) -> tuple:
    """(tensor-core work, memory-bound kernels, waits) seconds of the iteration at the peak's clock, from
    ``peak_it`` and ``stream_it`` (the same step priced at the peak's clock and at the stream's) and ``attention``,
    the attention kernels' seconds in each (tensor-core work with a clock of its own: counted with the products at
    its peak-clock seconds, as their power is the tensor cores')."""
    total = peak_it.total
    busy = min(_busy(peak_it), total)
    moved = (_busy(stream_it) - attention[1]) - (_busy(peak_it) - attention[0])
    dots = max(moved, 0.0) / (peak_mhz / stream_mhz - 1) if stream_mhz < peak_mhz else 0.0
    dots = min(dots + attention[0], busy)
    return dots, busy - dots, total - busy


def _busy(it) -> float:
    """The busiest device's kernel seconds of the iteration ``it``: its compute phases and the optimizer step."""
    return sum(it.compute.values()) + it.optimizer


def attention_seconds(p, field: str = "core_s") -> float:
    """The attention proper's seconds (scope ``core``) of the busiest stage per iteration in the plan ``p``: its
    forward and backward, and the recompute compose charges for it (:func:`.recompute.recompute_seconds`; under a
    partial recompute, for the share of layers checkpointed);
    ``field="core_tensor_s"``: the seconds its products would take at the tensor cores' full issue rate."""
    it, cost = p.iteration, p.cost
    if cost is None or not it.stages:
        return 0.0
    layers = it.stages[it.layer.get("slow_stage", 0)]["layers"]
    core = {k: getattr(cost, field).get(k, 0.0) for k in ("forward", "backward", "recompute")}
    share = float(full_share(it.cfg)) if partial(it.cfg) else 1.0  # (a partial recompute: its layers' share)
    one = core["forward"] + core["backward"] + share * recompute_seconds(it.cfg, core, core)
    return it.cfg.micro_batches * layers * one


def step_clocks(cfg, hw, at_peak, at_stream) -> dict:
    """The clocks (dtype key -> MHz) the step of ``cfg`` holds on ``hw``, from its plans at the peak's clock and
    at the stream's ({} where the profile's clock table has no power of the other kernels,
    :func:`mhlo_cost.machines.clock.step_average`)."""
    from ...machines.clock import step_average

    model = getattr(hw, "clock", None)
    if model is None or not model.has_power:
        return {}
    stream = dict(model.sustained_mhz).get(dots_key(cfg), model.peak_mhz)
    attention = (attention_seconds(at_peak), attention_seconds(at_stream))
    dots, memory, idle = breakdown(at_peak.iteration, at_stream.iteration, model.peak_mhz, stream, attention)
    tensor = attention_seconds(at_peak, "core_tensor_s")
    if tensor <= 0:  # no fused attention kernel (or none whose activity is known): with the products, as their power
        return step_average(hw, dots, memory, idle)
    own = min(attention[0], dots)
    return step_average(hw, dots - own, memory, idle, attention=(own, tensor * own / attention[0]))


def average_plan(cfg, hw, cache_dir=None, note=None):
    """The :class:`~.result.Plan` of ``cfg`` on ``hw`` at the step-average clock (at the sustained clock where the
    profile gives no power of the other kernels)."""
    from ...machines.clock import at_clocks, sustained
    from .plan import plan

    held = sustained(hw)
    at_stream = plan(cfg, held, cache_dir, note)
    if getattr(hw, "clock", None) is None or not hw.clock.has_power:
        return at_stream
    peak = hw if not getattr(hw, "sustained", False) else _unmarked(hw)
    clocks = step_clocks(cfg, hw, plan(cfg, peak, cache_dir, note), at_stream)
    out = plan(cfg, at_clocks(hw, clocks), cache_dir, note)
    out.iteration.counts["dot_clock_mhz"] = clocks.get(dots_key(cfg), hw.clock.peak_mhz)
    return out


def _unmarked(hw):
    import dataclasses

    return dataclasses.replace(hw, sustained=False)
