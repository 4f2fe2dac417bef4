"""Context parallelism's ring attention as the fused attention calls the ring makes, each at its own shape.

The layer train-plan lowers prices the attention of a cp-way ring as one fused kernel (scope ``core``,
:attr:`.costs.LayerCost.core_s`): the rank's ``L = s/cp`` queries against all ``cp L`` keys under a causal mask
(:mod:`.layer`). Both rings call the kernel once per step instead, with the load-balanced split (each rank holds
chunks ``r`` and ``2 cp - 1 - r`` of ``2 cp``), on the last rank (``cp - 1``, the one :mod:`.te_cp_passes` and
:mod:`.ring_passes` price):

* the local step: the ``L`` queries against the ``L`` local keys, causally (the diagonal block: half the square);
* each of the ``cp - 1`` other steps ``i <= rank``: the ``L`` queries against the first half (``L / 2``) of the
  received keys, unmasked (the second half lies wholly above the diagonal of both query chunks).

Transformer Engine's ``AttnFuncWithCP`` (``transformer_engine/pytorch/attention.py`` at v1.8: forward ``i == 0``
the diagonal, ``i <= rank`` half K/V; backward in reverse, ``i == cp - 1`` the diagonal, ``i >= cp - rank - 1``
half K/V) and PyTorch's ``_templated_ring_attention`` / ``_templated_ring_attention_backward``
(``torch/distributed/tensor/experimental/_attention.py`` at 0123248a, round-robin load balancing: step 0 the local
causal block, ``i <= rank`` every query against the first half of the keys, forward and backward in the same order).

Each call is priced by the profile's fused attention model (``[profile.*.attention]``,
:func:`mhlo_cost.roofline.attention_compute.kernel_compute_s`'s terms, from shapes alone: its products over the
blocks it visits at the library's fraction of the peak reached from the key tiles it visits, ``n / (n + ramp)``,
plus the exposed share of its exponentials) relative to the layer's single kernel priced the same way, and takes
that share of the single kernel's seconds: ``call = core x model(call) / model(kernel)``. The single kernel's
other terms (its vector work, the clock it holds) scale with it. A backward call's two memory-bound passes are not
scaled: the single kernel's (over the rank's ``L`` query rows) stay with one call, the further calls' are priced by
:mod:`.te_cp_passes` / :mod:`.ring_passes`. Without a profile's attention model, or with the attention unfused
(``attention="unfused"``: separate kernels, not the fused model's), each call is ``core / cp``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...machines.kernels import backward_pass_bytes
from ...roofline.attention_compute import PADDED_HEAD_DIMS, fused_compute_s, padded_head_dim
from .config import ScaleConfig
from .sharding_check import CP_TORCH


@dataclass(frozen=True)
class Call:
    """One fused attention call of a ring step: ``sq`` queries against ``sk`` keys, ``causal`` (the diagonal
    block) or not; ``rows``: batch x heads (the query heads of one tensor rank), ``d`` the head dim."""

    sq: int
    sk: int
    causal: bool
    rows: int
    d: int

    def flops(self, tile: int = 0) -> int:
        """Forward FLOPs of its two products (Q K^T, P V) over the scores it computes: ``4 rows sq sk d``, a causal
        call the square's lower half with its diagonal (``sq (sq + 1) / 2`` scores; with ``tile``, the blocks of
        ``tile`` x ``tile`` on and below the diagonal, as a kernel visits them)."""
        if not self.causal:
            return 4 * self.rows * self.sq * self.sk * self.d
        if tile:
            n = -(-self.sk // tile)
            return 4 * self.rows * self.sq * self.sk * self.d * (n + 1) // (2 * n)
        return 4 * self.rows * self.sq * (self.sq + 1) // 2 * self.d


def single_kernel(cfg: ScaleConfig) -> Call:
    """The layer's one attention kernel (:mod:`.layer`): the local queries against every key, causal."""
    return Call(cfg.local_seq, cfg.cp * cfg.local_seq, True, _rows(cfg), cfg.hidden // cfg.heads)


def _rows(cfg: ScaleConfig) -> int:
    return cfg.micro_batch * (cfg.heads // cfg.t)


def ring_calls(cfg: ScaleConfig) -> tuple[tuple[Call, ...], tuple[Call, ...]]:
    """(forward, backward) calls of rank ``cp - 1`` in the order the ring runs them: the local causal block first
    forward; last backward under TE's ring (``p2p``), first under PyTorch's. cp 1: the single kernel."""
    rows, d, n = _rows(cfg), cfg.hidden // cfg.heads, cfg.local_seq
    if cfg.cp == 1:
        return (single_kernel(cfg),), (single_kernel(cfg),)
    local = Call(n, n, True, rows, d)
    half = (Call(n, n // 2, False, rows, d),) * (cfg.cp - 1)
    backward = half + (local,) if cfg.cp_comm == "p2p" else (local,) + half
    return (local,) + half, backward


def model_seconds(c: Call, hw, library: str, backward: bool) -> float:
    """Compute seconds of call ``c`` by ``hw``'s fused attention model of ``library`` (its products at the
    library's fraction, reached from its key tiles, plus the exposed exponentials; no memory-bound passes), bf16;
    0 without a model."""
    model = getattr(hw, "attention", None)
    lib = model.get(library) if model is not None else None
    if lib is None:
        return 0.0
    d = padded_head_dim(c.d, PADDED_HEAD_DIMS[library]) if library in PADDED_HEAD_DIMS else c.d
    n = max(1, -(-c.sk // model.tile))
    band = (n + 1) / (2 * n) if c.causal else 1.0
    products = 5 if backward else 2  # a backward's four products and the score product recomputed
    flops = products * 2 * c.rows * c.sq * c.sk * d * band
    trans = c.rows * c.sq * c.sk * band / hw.transcendental_rate  # one exponential a score (recomputed backward)
    return fused_compute_s(lib, backward, flops, c.sk / model.tile, hw.matrix_peak("bf16"), trans)[0]


@dataclass(frozen=True)
class RingCalls:
    """Seconds of each call (in the ring's order) by phase, and what they add to the single kernel's."""

    forward: tuple = ()
    backward: tuple = ()
    added_forward: float = 0.0
    added_backward: float = 0.0


def ring_call_seconds(cfg: ScaleConfig, hw, core_s: dict | None) -> RingCalls:
    """The :class:`RingCalls` of ``cfg`` from the layer's ``core_s``: each call ``core x model(call) /
    model(kernel)``; a backward's passes over the rank's query rows kept whole with each call (they run in its step;
    the single kernel's once in ``added_backward``). Without a model, a core, a ring (``cp_comm`` all_gather: TE's
    ``AttnFuncWithCPAndKVAllGather`` calls per local chunk, not per ring step; a2a: Ulysses) or a fused attention
    (``attention`` unfused: the layer's separate kernels, which the fused model does not price): ``core / cp``
    each, nothing added."""
    core = core_s or {}
    f_core, b_core = core.get("forward", 0.0), core.get("backward", 0.0)
    fwd, bwd = ring_calls(cfg)
    library = cfg.attention_library or (hw.attention.library if getattr(hw, "attention", None) else "")
    one = single_kernel(cfg)
    base_f = model_seconds(one, hw, library, False) if hw is not None else 0.0
    base_b = model_seconds(one, hw, library, True) if hw is not None else 0.0
    ring = cfg.cp_comm == "p2p" or cfg.cp_comm in CP_TORCH  # (all_gather, a2a: no ring of calls)
    if cfg.cp == 1 or not ring or cfg.attention != "fused" or min(base_f, base_b, f_core, b_core) <= 0:
        return RingCalls((f_core / cfg.cp,) * cfg.cp, (b_core / cfg.cp,) * cfg.cp)
    passes = min(hw.memory_time(backward_pass_bytes(one.rows * one.sq, one.d, 2), 2), b_core)
    b_compute = b_core - passes
    f = tuple(f_core * model_seconds(c, hw, library, False) / base_f for c in fwd)
    b = tuple(b_compute * model_seconds(c, hw, library, True) / base_b + passes for c in bwd)
    return RingCalls(f, b, sum(f) - f_core, sum(b) - (cfg.cp - 1) * passes - b_core)
