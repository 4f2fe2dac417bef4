"""One training iteration's per-device breakdown as :func:`.compose.compose` makes it, and its table row."""
from __future__ import annotations

from dataclasses import dataclass, field

from .config import ScaleConfig
from .partial_recompute import recomputed_layers


@dataclass(frozen=True)
class Iteration:
    """Per-device breakdown of one iteration (seconds), and the exact counts behind it."""

    cfg: ScaleConfig
    compute: dict  # phase -> seconds per iteration on the busiest device (forward, backward, recompute)
    tp_comm: float
    bubble: float
    p2p: float
    dp_exposed: float
    dp_total: float
    optimizer: float
    total: float
    counts: dict = field(default_factory=dict)
    cp_comm: float = 0.0  # context parallelism's exposed exchange (its ring steps beyond the attention's compute)
    stages: tuple = ()  # per stage: layers, f_s / b_s seconds per micro-batch, its dp Exposure (compose._stages)
    layer: dict = field(default_factory=dict)  # one layer, one micro-batch: seconds by part (compose._layer)
    ep_comm: float = 0.0  # expert parallelism's all_to_all dispatch and combine (not overlapped; :mod:`.moe_plan`)
    launch_host: float = 0.0  # CUDA_LAUNCH_BLOCKING=1: host call time in series, outside the bubble (.launch_blocking)

    def row(self, every: bool = False) -> dict:
        """The iteration as one table row (``every``: the sharding/CP/stage columns whether used or not)."""
        c = self.counts
        precision = {} if self.cfg.precision == "bf16" else {"precision": self.cfg.precision}  # (bf16: unchanged)
        return precision | {"config": self.cfg.label(), "t": self.cfg.t, "sp": self.cfg.sp, "p": self.cfg.p,
                "v": self.cfg.interleave, "d": self.cfg.d, "micro_batch": self.cfg.micro_batch,
                "micro_batches": self.cfg.micro_batches, "recompute": self.cfg.recompute,
                "dp_comm": "zero" if self.cfg.zero_stage else "all_reduce", "iteration_s": self.total,
                "forward_s": self.compute["forward"], "backward_s": self.compute["backward"],
                "recompute_s": self.compute["recompute"], "tp_comm_s": self.tp_comm, "bubble_s": self.bubble,
                "p2p_s": self.p2p, "dp_exposed_s": self.dp_exposed, "optimizer_s": self.optimizer,
                "model_flops": c["model_flops"], "hardware_flops": c["hardware_flops"],
                "mfu": c["mfu"], "hfu": c["hfu"]} | self._new_columns(every)


    def _new_columns(self, every: bool = False) -> dict:
        """The columns of the sharding, context parallelism and uneven stages, where any is used (rows without
        them are unchanged), or ``every`` one of them (a sweep over those dimensions)."""
        cfg, out = self.cfg, {}
        if cfg.cp > 1 or every:
            out.update(cp=cfg.cp, cp_comm=cfg.cp_comm, cp_comm_s=self.cp_comm)
        if cfg.zero_stage >= 2 or cfg.replicate_degree > 1 or not cfg.reshard_after_forward or every:
            out.update(zero=cfg.zero_stage, shard=cfg.shard_degree, replicate=cfg.replicate_degree)
        if cfg.recompute_num_layers or cfg.recompute_every:  # (a partial recompute: the layers recomputed whole)
            out["recompute_layers"] = recomputed_layers(cfg)
        if cfg.fsdp_version != 1:  # (FSDP1 rows and sweeps unchanged)
            out["fsdp_version"] = cfg.fsdp_version
        if cfg.uneven or every:
            out["stage_layers"] = "/".join(map(str, cfg.stage_layers()))
        if cfg.attention != "unfused":
            out["attention"] = cfg.attention
        if cfg.execution != "compiled":
            out["execution"] = cfg.execution
        if not cfg.grad_reduce_fp32:
            out["grad_bytes"] = cfg.grad_bytes
        if cfg.experts:
            out.update(experts=cfg.experts, top_k=cfg.top_k, ep=cfg.ep, ep_comm_s=self.ep_comm)
        if cfg.launch_blocking:
            out["launch_host_s"] = self.launch_host
        return out
