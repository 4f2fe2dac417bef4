"""Expert-parallel serving (``serve --ep N``): a mixture of experts' routed experts split over ``N`` devices, as
vLLM (``--enable-expert-parallel``, expert parallel size = data parallel x tensor parallel) and SGLang
(``--ep-size`` with DP attention) run it.

The ``N`` devices form ``N / tp`` attention groups (``--tp``, default 1; it divides ``N``): each group runs the
step's ``--batch`` sequences with attention and the dense parts tensor-parallel over its ``tp`` devices (data-parallel
attention where ``tp < N``), so the whole system makes ``batch x N / tp`` tokens per decode step. Each device holds
``E / N`` of every MoE layer's ``E`` routed experts. Per MoE layer the tokens' copies (a token to each of its ``k``
experts) go to the devices that hold their experts (dispatch) and the outputs come back (combine): two
``all_to_all``. A group's copies are spread over its ``tp`` devices, so each device sends its ``copies / tp``,
``S = copies / tp x hidden x itemsize``, of which ``(N - 1) / N`` leaves it, each way
(:func:`all_to_all_bytes`: exact, rounded up; the ring convention of :mod:`mhlo_cost.network.expert_parallel`).

The time of one device's step, from the lowered one-device step (every expert, the group's tokens):

- the non-expert kernels (attention, norms, router, shared experts, embeddings) divided by ``tp``, and the
  hidden state's all-reduces of the tensor-parallel step (:func:`~.serve.figures`);
- each routed-expert kernel (scope ``.../experts``) as one device runs it: its compute scaled to the rows the
  busiest device receives, ``imbalance x copies / tp`` of the lowered ``copies`` (``--moe-imbalance``, default
  1.0: balanced routing, every device the mean), its memory traffic to the device's ``1 / N`` of the experts'
  weights (the weights are most of an expert GEMM's bytes; its rows' activations are taken at the same share),
  its launch unchanged;
- the dispatch and combine of every MoE layer, priced by the profile's link (alpha-beta, ``N - 1`` peers) at
  the busiest device's receive: ``imbalance x`` the bytes each device sends.

Memory per device: the non-expert weights / ``tp`` + the routed experts' weights / ``N`` + the group's KV cache /
``tp`` + the step's inputs and activations (as the tensor-parallel step counts them).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import ceil


@dataclass(frozen=True)
class ExpertSplit:
    """``ep`` devices the routed experts are split over; ``imbalance``: the busiest device's routed copies over
    the mean (>= 1)."""

    ep: int
    imbalance: float = 1.0


def routing_facts(moe: dict | None, tokens: int) -> tuple[int, int]:
    """(experts per MoE layer, top-k) from a lowered step's ``info["moe"]`` and its ``tokens``; ValueError where
    the model has no routed experts or its layers differ."""
    if not moe or not moe.get("layers"):
        raise ValueError("--ep splits a mixture of experts' routed experts; this model has no expert layer that "
                         "mhlo-cost routes")
    experts = set(moe["experts"])
    routed = {sum(layer) for layer in moe["per_expert"]}
    if len(experts) != 1 or len(routed) != 1 or next(iter(routed)) % tokens:
        raise ValueError("--ep needs every MoE layer with the same experts and top-k")
    return experts.pop(), next(iter(routed)) // tokens


def check(split: ExpertSplit, tp: int, experts: int, top_k: int) -> None:
    """ValueError (one line) for a split the model or the devices cannot run."""
    ep, imb = split.ep, Fraction(str(split.imbalance))
    if ep % tp:
        raise ValueError(f"--tp {tp} must divide --ep {ep}: each of the ep / tp attention groups is tp devices")
    if experts % ep:
        raise ValueError(f"--ep {ep} does not divide the model's {experts} routed experts per layer")
    most = Fraction(ep * min(top_k, experts // ep), top_k)  # every token's copies on the busiest device
    if not 1 <= imb <= most:
        raise ValueError(f"--moe-imbalance must be in [1, {float(most):g}] (1: balanced; {float(most):g}: every "
                         f"token sends min(k, E / ep) = {min(top_k, experts // ep)} of its {top_k} copies to the "
                         f"busiest device), got {split.imbalance!r}")


def all_to_all_bytes(copies: int, hidden: int, itemsize: int, ep: int, tp: int = 1) -> int:
    """Bytes one device sends in one dispatch (or combine): ``copies / tp x hidden x itemsize x (ep - 1) / ep``,
    rounded up (``copies``: the group's token copies of one MoE layer)."""
    return -(-copies * hidden * itemsize * (ep - 1) // (tp * ep))


def is_expert_row(row) -> bool:
    """A row of the routed experts (its module path has an ``experts`` part; shared experts are not)."""
    return "experts" in str(getattr(row, "scope", "") or "").split("/")


def expert_time(rf, split: ExpertSplit, tp: int) -> tuple[float, float]:
    """(seconds of the routed-expert kernels on one device of the lowered step, seconds on the busiest device
    of the split); ``rf``: the step's Roofline (fused kernels)."""
    rows = rf.analysis.rows
    scale = Fraction(str(split.imbalance)) / tp
    whole = split_s = 0.0
    for k in rf.fusion.kernels:
        if not is_expert_row(rows[k.head]):
            continue
        whole += k.time_s
        split_s += max(k.compute_s * float(scale), k.memory_s / split.ep) + k.overhead_s
    return whole, split_s


def comm(hw, moe: dict, split: ExpertSplit, tp: int) -> tuple[int, float]:
    """(bytes one device sends in one dispatch of the first MoE layer, seconds of every layer's dispatch and
    combine at the busiest device's receive)."""
    if split.ep <= 1:
        return 0, 0.0
    imb = Fraction(str(split.imbalance))
    first, total = None, 0.0
    for rows, hidden, size in zip(moe["rows"], moe["hidden"], moe["dtype_bytes"]):
        sent = all_to_all_bytes(sum(rows), hidden, size, split.ep, tp)
        first = sent if first is None else first
        total += 2 * hw.comm_time(ceil(imb * sent), split.ep - 1)
    return first or 0, total


def weights_per_device(weight_bytes: int, expert_bytes: int, split: ExpertSplit, tp: int) -> int:
    """The non-expert weights / ``tp`` plus the routed experts' / ``ep`` (each rounded up)."""
    return -(-(weight_bytes - expert_bytes) // tp) + -(-expert_bytes // split.ep)


def apply(fig, step, rf, hw, split: ExpertSplit, per_step: int):
    """``fig`` (the tensor-parallel figures of ``step``; ``rf`` its Roofline) with the routed experts split over
    ``split.ep`` devices: the step's time, the all_to_all, memory per device, what fits and the system's
    tokens/s (``ep / tp`` groups of ``batch``); ``per_step``: the step's activations and inputs (bytes)."""
    from dataclasses import replace

    from .fits import context_limit, max_batch, max_context

    tp, layout = fig.tp, step.layout
    moe = step.lowered.info.get("moe")
    check(split, tp, *routing_facts(moe, fig.batch * fig.tokens))
    whole, busiest = expert_time(rf, split, tp)
    tot = rf.totals()
    device = tot["est_time_fused_s"] - tot["comm_time_s"]
    sent, a2a = comm(hw, moe, split, tp)
    step_s = (device - whole) / tp + busiest + fig.comm_time_s + a2a
    experts = int(step.lowered.info.get("expert_weight_bytes", 0))
    weights = weights_per_device(step.weight_bytes, experts, split, tp)
    memory = weights + -(-layout.nbytes // tp) + per_step
    longest, bound = context_limit(max_context(layout, weights * tp, per_step, fig.capacity_bytes, tp),
                                   step.positions)
    produced = (split.ep // tp) * fig.batch * fig.tokens
    return replace(fig, step_time_s=step_s, comm_time_s=fig.comm_time_s + a2a,
                   tokens_per_s=produced / step_s if step_s > 0 else float("inf"), memory_bytes=memory,
                   fits=memory <= fig.capacity_bytes,
                   max_batch=max_batch(layout, weights * tp, -(-per_step // fig.batch), fig.capacity_bytes, tp),
                   max_context=longest, max_context_bound=bound, ep=split.ep,
                   moe_imbalance=float(split.imbalance), all_to_all_bytes=sent, all_to_all_time_s=a2a,
                   expert_weight_bytes=experts)
