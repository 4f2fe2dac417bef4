"""Whether a mixture-of-experts configuration can be priced (:func:`moe_invalid`): the checks
:meth:`~.config.ScaleConfig.invalid` runs, apart from :mod:`.moe` (which lowers the experts and imports the
configuration) so that the configuration does not import back the module that imports it."""
from __future__ import annotations

from fractions import Fraction
from math import isfinite


def moe_invalid(cfg) -> str | None:
    """Why the experts of ``cfg`` (a :class:`~.config.ScaleConfig`) cannot be priced, in one sentence; None where
    they can."""
    if not cfg.experts:
        return f"expert parallelism (ep {cfg.ep}{', overlapped' if cfg.ep_overlap else ''}) needs experts"
    for k in ("experts", "top_k", "expert_ffn", "ep"):
        v = getattr(cfg, k)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            return f"{k} must be a positive integer with experts, got {v!r}"
    for k in ("shared_experts", "dense_layers", "expert_tp"):
        v = getattr(cfg, k)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            return f"{k} must be a non-negative integer, got {v!r}"
    return _moe_split_invalid(cfg)


def _moe_split_invalid(cfg) -> str | None:
    if cfg.top_k > cfg.experts:
        return f"top-k {cfg.top_k} exceeds the experts {cfg.experts}"
    if not cfg.shared_experts:
        return "a MoE layer without shared experts is not priced yet (the layer's program keeps an MLP)"
    if cfg.dense_layers >= cfg.layers:
        return f"dense layers {cfg.dense_layers} leave no MoE layer of {cfg.layers}"
    if cfg.experts % cfg.ep:
        return f"expert-parallel degree {cfg.ep} does not divide the experts {cfg.experts}"
    n = cfg.t * cfg.cp * cfg.d
    if n % (cfg.ep * cfg.etp):
        what = f"expert-parallel degree {cfg.ep}" + (f" x expert tensor degree {cfg.etp}" if cfg.etp > 1 else "")
        return f"{what} does not divide {'t x ' if cfg.t > 1 else ''}cp x d ({n}), the ranks it is taken from"
    if cfg.dp_shard and (cfg.t * cfg.cp * cfg.dp_shard) % (cfg.ep * cfg.etp):
        return (f"HSDP with experts: expert-parallel degree {cfg.ep} x expert tensor degree {cfg.etp} does not divide "
                f"the sharding group's t x cp x dp_shard ({cfg.t * cfg.cp * cfg.dp_shard} ranks)")
    if cfg.expert_ffn % cfg.etp:
        return f"expert tensor degree {cfg.etp} does not divide the expert width {cfg.expert_ffn}"
    if cfg.t > 1 and not cfg.sp:
        return "experts with tensor parallelism need sequence parallelism (--sp), as Megatron-Core requires"
    if not (isfinite(cfg.capacity_factor) and isfinite(cfg.expert_imbalance) and cfg.capacity_factor >= 0
            and cfg.expert_imbalance >= 1):
        return (f"capacity factor must be >= 0 (0: dropless) and imbalance >= 1, got {cfg.capacity_factor} and "
                f"{cfg.expert_imbalance}")
    # the busiest rank receives at most every token's copies that its E/ep experts can take: ep T min(k, E/ep) of
    # the balanced T k (a token's k experts are distinct), as serve --ep bounds it (studies/serve/expert.py)
    most = Fraction(cfg.ep * min(cfg.top_k, cfg.experts // cfg.ep), cfg.top_k)
    if Fraction(str(cfg.expert_imbalance)) > most or cfg.capacity_factor > cfg.experts / cfg.top_k:
        return (f"imbalance {cfg.expert_imbalance} above ep x min(top-k, experts / ep) / top-k ({float(most):g}: "
                f"every token's copies on one rank as far as its experts can take them) or capacity factor "
                f"{cfg.capacity_factor} above experts / top-k ({cfg.experts / cfg.top_k:g}: every token at every expert)")
    if cfg.recompute == "op":
        return "experts with torchtitan's op recompute are not priced yet (its save list names no grouped expert GEMM)"
    return None
