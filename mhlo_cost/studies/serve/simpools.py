"""The serving simulation on several schedulers (``serve --pp N``, ``--dp N``, ``--disaggregate P:D``): the
options' checks, the run (:mod:`.pools`, stages priced by :mod:`.pipeline`), its memory, and the gain each
option predicts against the colocated server of the same GPUs (``--dp`` replicas of the same ``--tp``; for
``--dp`` itself: one replica of the same load).

Used by :class:`~.simstudy.SimStudy`; nothing here renders.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

#: Schedulers one simulation holds at most (replicas x pipeline stages, prefill + decode instances): each
#: keeps per-request arrays of the whole workload.
MOST_INSTANCES = 64


@dataclass(frozen=True)
class Parallel:
    """``pp`` stages, ``dp`` replicas, ``disaggregate`` (prefill instances, decode instances) or None,
    ``link_gbps`` the link of the stages' sends and the KV transfers (None: the chip's)."""

    pp: int = 1
    dp: int = 1
    disaggregate: tuple | None = None
    link_gbps: object = None  # a Fraction of GB/s

    def __post_init__(self):
        from ..limits import OptionError

        for name, v in (("--pp", self.pp), ("--dp", self.dp)):
            if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MOST_INSTANCES:
                raise OptionError(f"{name} must be a whole number in [1, {MOST_INSTANCES}], got {v!r}")
        if self.disaggregate is not None:
            p, d = self.disaggregate
            if not (isinstance(p, int) and isinstance(d, int) and p >= 1 and d >= 1 and p + d <= MOST_INSTANCES):
                raise OptionError(f"--disaggregate P:D needs P, D >= 1 and P + D <= {MOST_INSTANCES}, "
                                  f"got {p}:{d}")
            if self.pp > 1 or self.dp > 1:
                raise OptionError("--disaggregate P:D sets its own instances: no --pp or --dp with it")
        if self.pp * self.dp > MOST_INSTANCES:
            raise OptionError(f"--pp x --dp: {self.pp * self.dp} schedulers; the simulation holds at most "
                              f"{MOST_INSTANCES}")
        if self.link_gbps is not None and not self.link_gbps > 0:
            raise OptionError(f"--link-gbps must be a positive number, got {self.link_gbps}")

    @property
    def active(self) -> bool:
        return self.pp > 1 or self.dp > 1 or self.disaggregate is not None

    def instances(self) -> int:
        """Instances of ``tp x pp`` GPUs."""
        return sum(self.disaggregate) if self.disaggregate else self.dp


def check_with(par: Parallel, spec, tp: int) -> None:
    """What the other options refuse with these."""
    from ..limits import OptionError

    if par.active and spec is not None:
        raise OptionError("speculative decoding (--spec-tokens) is simulated on one server: not with --pp, --dp "
                          "or --disaggregate")
    if par.link_gbps is not None and par.pp == 1 and par.disaggregate is None:
        raise OptionError("--link-gbps is the link of --pp's sends and --disaggregate's KV transfers: give one")


class PoolRun:
    """One run on ``par`` (see the module) of ``study`` (a :class:`~.simstudy.SimStudy`): its engines
    (:attr:`pools`), the :class:`~.server.Memory` its KV blocks follow (:attr:`memory`, per engine) and the
    stages' rows (:attr:`stages`)."""

    def __init__(self, study, par: Parallel):
        self.study, self.par = study, par
        o, m = study.options, study.model
        self.tp, self.hw = o.tp, study.hardware
        self.parts = [m.shape["layers"]] if par.pp == 1 else _partition(m.shape["layers"], par.pp)
        self.stages, self.memory, self.blocks = self._memory()
        self.lanes_priced, self.placed = self._stage_steps()

    def _memory(self):
        from .parallel import activations_per_device, per_device
        from .pipeline import embedding_bytes, stage_kv, stage_weights, tied
        from .server import memory

        study, m, tp = self.study, self.study.model, self.tp
        if len(self.parts) == 1:
            return [], study.memory, study.memory.blocks
        itemsize = m.shape["itemsize"]
        weights = stage_weights(m.weight_bytes, embedding_bytes(study.options.request, itemsize),
                                tied(study.options.request), self.parts)
        kv = stage_kv(m.kv_token_bytes, self.parts)
        acts = activations_per_device(m.activation_token_bytes, m.shape["hidden"] * itemsize, tp)
        mems = [memory(study.options.server, int(self.hw.hbm_capacity), per_device(w, tp), per_device(k, tp), acts)
                for w, k in zip(weights, kv)]
        blocks = min(x.blocks for x in mems)
        rows = [{"layers": p, "weight_bytes": x.weights, "kv_token_bytes": per_device(k, tp), "kv_blocks": x.blocks}
                for p, x, k in zip(self.parts, mems, kv)]
        binding = min(mems, key=lambda x: x.blocks)
        return rows, replace(binding, blocks=blocks), blocks

    def _stage_steps(self):
        from .parallel import ShardedStep
        from .pipeline import stage_shares

        study, m = self.study, self.study.model
        if len(self.parts) == 1:
            return [study.step_time], True
        # (a model made without placement: one unplaced entry per kernel, so each kernel is split by layer shares)
        place, count = m.place if m.place is not None else ([()] * len(m._rates[0].overheads), 0)
        shares, placed = stage_shares(place, count, self.parts)
        steps = []
        for share, layers in zip(shares, self.parts):
            part = m.part(share)
            part.shape["layers"] = layers
            steps.append(ShardedStep(part, self.hw, self.tp, study.options.allreduce, study.step_time.kv_reads))
        return steps, placed

    def send_s(self, tokens: int) -> float:
        from .pipeline import link_time, send_bytes

        shape = self.study.model.shape
        return link_time(self.hw, -(-send_bytes(tokens, shape["hidden"], shape["itemsize"]) // self.tp),
                         self.par.link_gbps)

    def transfer_bytes(self, r: int) -> int:
        """Request ``r``'s prompt KV cache, every GPU's together."""
        return int(self.study.workload.inputs[r]) * self.study.model.kv_token_bytes

    def transfer_s(self, r: int) -> float:
        from .pipeline import link_time

        return link_time(self.hw, -(-self.transfer_bytes(r) // self.tp), self.par.link_gbps)

    def lane(self):
        from .pools import Lane

        return Lane(list(self.lanes_priced), self.send_s)

    @property
    def gpus(self) -> int:
        return self.tp * len(self.parts) * self.par.instances()

    def run(self):
        from .pools import simulate_pools

        p = self.par
        return simulate_pools(self.study.workload, self.study.options.server, self.lane, self.blocks, dp=p.dp,
                              pp=len(self.parts), disaggregate=p.disaggregate, transfer=self.transfer_s)


def _partition(layers: int, pp: int) -> list[int]:
    from ..limits import OptionError
    from .pipeline import pp_partition

    try:
        return pp_partition(layers, pp)
    except ValueError as e:
        raise OptionError(f"--pp {pp}: {e}") from None


def baseline(study, par: Parallel) -> Parallel:
    """The colocated server the option is measured against: ``pp`` or ``P + D`` replicas of the same tp (the
    same GPUs), one replica for ``--dp``."""
    if par.disaggregate is not None:
        return Parallel(dp=sum(par.disaggregate))
    if par.pp > 1:
        return Parallel(dp=par.pp * par.dp)
    return Parallel()


def pool_sections(run: PoolRun, pools, duration: float) -> dict:
    """The pools' figures (a section each: ``pool``, or ``prefill pool`` and ``decode pool``) and the stages'
    (``pipeline``)."""
    from .pools import pool_figures

    gpus_each = run.tp * len(run.parts)
    out = {}
    if run.par.disaggregate is not None:
        moved = [run.transfer_bytes(r) for r in range(len(run.study.workload))]
        out["prefill_pool"] = pool_figures(pools.front, duration, gpus_each)
        out["decode_pool"] = pool_figures(pools.back, duration, gpus_each) | {
            "kv_transfer_bytes_total": sum(moved), "kv_transfer_bytes_max": max(moved),
            "kv_transfer_s_max": run.transfer_s(max(range(len(moved)), key=moved.__getitem__))}
    else:
        out["pool"] = pool_figures(pools.front, duration, gpus_each)
    if len(run.parts) > 1:
        lanes = {id(e.lane): e.lane for e in pools.front}.values()
        sec = {"stages": len(run.parts), "layers_per_stage": ", ".join(map(str, run.parts)),
               "stage_program": "the kernels of its layers" if run.placed else
               "every kernel split by the stages' layer shares (the program's blocks are not its layers)"}
        for i, row in enumerate(run.stages):
            busy = sum(lane.busy[i] for lane in lanes) / len(lanes)
            sec |= {f"stage{i}.{k}": v for k, v in row.items()}
            sec[f"stage{i}.busy_fraction"] = busy / duration if duration > 0 else None
        sec["send_bytes_per_token"] = -(-2 * run.study.model.shape["hidden"] * run.study.model.shape["itemsize"]
                                        // run.tp)
        out["pipeline"] = sec
    return out
