"""The SMs an NCCL collective takes with Megatron-Core's ``nccl_ub`` (``ScaleConfig.nccl_ub``: NCCL user buffers
registered for the parameter and gradient buffers of Megatron FSDP).

Megatron-Core's ``DistributedDataParallelConfig.nccl_ub`` (``megatron/core/distributed/
distributed_data_parallel_config.py``, at c69e6c3, the Megatron-Core of Megatron-Bridge's 25.11 performance
configurations, and at 92c8482) allocates the buffers from NCCL's registered memory so that NCCL can take its
"SM efficient" algorithms, and states the SMs each collective then uses ("a reference number ... could vary on
message size, communication domain size and nccl version"):

    ==================== =========== ===================
    communication domain use_sharp   SM usage of AG / RS
    ==================== =========== ===================
    NVL                  N/A         4 / 5
    NVL+IB               False       16 / 16
    IB                   False       1 / 4
    ==================== =========== ===================

(SHARP rows left out: no system profile here has it). The domain is the tiers the collective's group crosses on the
system (the network model's ``tier``: the intra-node link alone, both, or the network alone: one rank a node). The
table is the Hopper systems' (132 SMs, whose NCCL channels :mod:`.sm_share` takes as 16, as the table's NVL+IB row);
on another chip nothing changes. Megatron-Bridge's 25.11 H100 configuration of Llama 3 8B
(``scripts/performance/configs/llama3/llama3_llm_pretrain.py`` at 13785e5: ``if cfg.ddp.use_megatron_fsdp:
cfg.ddp.nccl_ub = True``) sets it. Priced for the per-layer collectives of ZeRO 2 / 3 (what
:func:`.sharding.dp_exposure` taxes), where FSDP's parameter and gradient buffers are registered; a replicated or
ZeRO-1 reduction is refused with it (not priced).
"""
from __future__ import annotations

from ...network import estimate
from .sm_share import NCCL_CHANNELS

#: Megatron-Core's SMs per collective with nccl_ub by domain (no SHARP): all_gather, reduce_scatter
UB_SMS = {"nvl": {"all_gather": 4, "reduce_scatter": 5}, "nvl+ib": {"all_gather": 16, "reduce_scatter": 16},
          "ib": {"all_gather": 1, "reduce_scatter": 4}}
#: The chip (SMs) the table is stated for: Hopper's 132
UB_CHIP_SMS = 132


def domain(topo, c) -> str:
    """``nvl``, ``nvl+ib`` or ``ib``: the tiers collective ``c``'s groups cross on ``topo`` (the network model's
    ``tier``: the intra-node link's name, both joined by ``+``, or the network's alone)."""
    tier = estimate(topo, c.kind, c.nbytes, c.groups).tier
    intra = getattr(getattr(topo, "intra", None), "name", None)
    if "+" in tier:
        return "nvl+ib"
    return "nvl" if tier == intra else "ib"


def ub_sms_of(cfg, topo, total: int):
    """A function giving the SMs a per-layer collective takes under ``nccl_ub`` (:data:`UB_SMS`), or None where it
    does not apply: ``nccl_ub`` off, no network or no node of NVLink, another chip than the table's, a kind the
    table does not state."""
    if not getattr(cfg, "nccl_ub", False) or topo is None or total != UB_CHIP_SMS:
        return None
    if getattr(topo, "intra", None) is None:  # no NVLink node (a mesh template): the table's domains do not apply
        return None
    default = NCCL_CHANNELS.get(total, 0)

    def sms_of(c) -> int:
        return UB_SMS[domain(topo, c)].get(c.kind, default) if c.nbytes else default

    return sms_of
