"""The data-parallel sharding (ZeRO 1-3, FSDP, HSDP) and context parallelism of a training configuration: the
collectives of one iteration, their bytes (exact ints), their groups and their seconds on the system's network.

Ranks in Megatron's order (tensor fastest, then context, then data, then pipeline): rank
``k + t (c + cp (r + d s))`` for tensor rank ``k``, context rank ``c``, data rank ``r``, stage ``s``. The weights
are replicated over the ``cp x d`` ranks of one tensor rank and stage, which reduce their gradients together;
ZeRO shards over ``cp x dp_shard`` of them (HSDP: ``d / dp_shard`` such groups, replicas of each other).

Per ``W``, the layer's weight elements on one device (1/t of the layer's), ``n`` layers on the stage, ``m``
micro-batches (S: the full buffer, as :func:`mhlo_cost.network.estimate` takes it; gradients reduce in fp32,
parameters gather in bf16, as Megatron's ``main_grad`` and torchtitan's default ``reduce_dtype`` do;
``grad_reduce_fp32`` off: 2 bytes a gradient for 4 below):

* ZeRO 0: ``all_reduce`` of ``4 n W`` over the ``cp d`` ranks once per iteration (exposed unless ``dp_overlap``);
* ZeRO 1 (Megatron's distributed optimizer): ``reduce_scatter`` of ``4 n W`` and, after the step, ``all_gather``
  of ``2 n W`` over the sharding group once per iteration; HSDP adds an ``all_reduce`` of the shard,
  ``4 n W / shard``, over the replicas;
* ZeRO 2: each micro-batch's backward reduce-scatters each layer's ``4 W`` (DeepSpeed's and FSDP's default
  with gradient accumulation: the gradients are sharded, so they cannot accumulate whole), HSDP's
  ``all_reduce`` of ``4 W / shard`` after it; the ``all_gather`` of ``2 n W`` after the step;
* ZeRO 3 (FSDP): each micro-batch's forward all-gathers each layer's ``2 W``, its backward again (unless
  reshard-after-forward is off) and reduce-scatters ``4 W`` (HSDP: + ``all_reduce`` of ``4 W / shard``); with
  torchao's fp8 all-gather (``fsdp_float8_all_gather``) the fp8 linears' elements of ``W`` at 1 byte, and the
  weights' amaxes all-reduced before each gather or, precomputed, once a step after the optimizer (:mod:`.fp8_gather`).

The per-layer collectives run on their own stream, prefetched one layer ahead, so a layer exposes
``max(0, comm - compute)`` of them (its forward, or its backward with recompute; the first layer's gather
is counted the same way); on a chip whose NCCL channels are known, the layer's compute runs on the SMs the
collective's kernel leaves while it runs, so at least ``comm x n / S`` is exposed (:mod:`.sm_share`).

Context parallelism (``cp`` > 1), per layer and micro-batch, K and V being ``b (s/cp) kv/t d`` bf16 each:
ring attention (``p2p``) sends and receives the local K and V ``cp - 1`` times forward, K, V and their
gradients ``cp - 1`` times backward, each step overlapping that step's attention call (:mod:`.cp_calls`: exposed
``max(step - call, step n / S)`` a step, the second term the SMs the send/recv kernel takes, :mod:`.sm_share`);
``all_gather`` gathers K and V forward (S = ``cp`` x the local K and V),
gathers again and reduce-scatters their gradients backward, not overlapped. ``a2a`` (Ulysses, STDiT3's): the
model's own all_to_alls (:meth:`mhlo_cost.studies.plan.stdit3.STDiT3ScaleConfig.a2a_collectives`), not overlapped.
Weights outside the repeated layers (a config's ``extra_weight_elems``: STDiT3's embedders; with ZeRO 0 / 1 the
embedding and LM head of the first and last stages, :func:`optimizer_extra_elems`) reduce and gather once per
iteration with the rest.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ...network import estimate
from .config import CP_TORCH, ScaleConfig
from .costs import LayerCost
from .cp_calls import ring_call_seconds
from .fp8_gather import AMAX_BYTES, amax_per_gather, amax_step_bytes
from .fp8_weights import gathered_bytes
from .recompute import reruns_attention
from .sm_share import taxed
from .traced_waits import cp_waits_at_once


@dataclass(frozen=True)
class Collective:
    """One collective of the schedule: ``nbytes`` S, over ``groups`` (every tensor rank's group, at once;
    collective_permute: the (source, target) pairs of every ring), ``size`` the ranks of one group (or ring),
    ``per``: when it runs (``iteration``; ``layer_forward`` / ``layer_backward``: each layer, each micro-batch;
    ``ring_step_forward`` / ``ring_step_backward``: each of the cp - 1 ring steps of those; ``step``: once, after the
    optimizer step); ``count``: how many such run each time (Ulysses' all_to_alls of q, k, v and the output; the fp8
    linears' amaxes)."""

    what: str
    kind: str
    nbytes: int
    groups: tuple
    per: str
    count: int = 1

    @property
    def size(self) -> int:
        if self.kind == "collective_permute":  # one ring per tensor rank, each of its ranks sending once
            return len(self.groups) // len({src % _stride(self.groups) for src, _ in self.groups})
        return len(self.groups[0])

    def row(self) -> dict:
        r = {"what": self.what, "kind": self.kind, "bytes": self.nbytes, "group_size": self.size, "per": self.per}
        return r if self.count == 1 else r | {"count": self.count}


def _stride(pairs) -> int:
    """The tensor degree behind a ring's pairs: the step from a rank to the next in its ring."""
    return abs(pairs[0][1] - pairs[0][0]) or 1


def _rank(cfg: ScaleConfig, k: int = 0, c: int = 0, r: int = 0, s: int = 0) -> int:
    return k + cfg.t * (c + cfg.cp * (r + cfg.d * s))


def _all_tp(cfg: ScaleConfig, group_of) -> tuple:
    """The groups of every tensor rank at once (they run together and share the node's links)."""
    return tuple(group_of(k) for k in range(cfg.t))


def grad_groups(cfg: ScaleConfig) -> tuple:
    """The ``cp x d`` ranks of each tensor rank (stage 0) that hold the same weights."""
    return _data_groups(cfg.t, cfg.cp, cfg.d, cfg.d)


def shard_groups(cfg: ScaleConfig) -> tuple:
    """The first sharding group (``cp x dp_shard`` ranks) of each tensor rank."""
    return _data_groups(cfg.t, cfg.cp, cfg.d, cfg.dp_shard or cfg.d)


@lru_cache(maxsize=1024)
def _data_groups(t: int, cp: int, d: int, n: int) -> tuple:
    """The first ``n`` data ranks x every context rank, of each tensor rank (made once per split: a sweep prices
    thousands of configurations on a few)."""
    return tuple(tuple(k + t * (c + cp * r) for r in range(n) for c in range(cp)) for k in range(t))


def replicate_groups(cfg: ScaleConfig) -> tuple:
    """HSDP: the ranks that hold the same shard (one per sharding group), for each tensor rank."""
    n = cfg.dp_shard or cfg.d
    return _all_tp(cfg, lambda k: tuple(_rank(cfg, k, 0, r * n) for r in range(cfg.replicate_degree)))


def cp_ring(cfg: ScaleConfig) -> tuple:
    """Ring attention's (source, target) pairs: each context rank to the next, every tensor rank."""
    return tuple((_rank(cfg, k, c), _rank(cfg, k, (c + 1) % cfg.cp)) for k in range(cfg.t) for c in range(cfg.cp))


def cp_groups(cfg: ScaleConfig) -> tuple:
    return _all_tp(cfg, lambda k: tuple(_rank(cfg, k, c) for c in range(cfg.cp)))


def kv_bytes(cfg: ScaleConfig) -> int:
    """One context rank's K and V of one layer and micro-batch: 2 x b x s/cp x kv/t x head dim, bf16 (heads/t
    where the model repeats its K/V heads before the attention call, ``kv_repeat``)."""
    heads = cfg.heads if cfg.kv_repeat else cfg.kv
    return 2 * cfg.micro_batch * cfg.local_seq * (heads // cfg.t) * (cfg.hidden // cfg.heads) * 2


def embedding_elems(cfg: ScaleConfig, stage: int) -> int:
    """Weight elements a pipeline stage holds outside its layers, on one device: the word embedding (``V/t x h``)
    on the first stage, the LM head's ``V/t x h`` on the last (with ``tied_embedding`` a copy of the same
    weight, on a stage of its own; on one stage, tied, a single one). The embedding LayerNorm and the final
    norm (a few ``h``) are left out."""
    if hasattr(cfg, "extra_weight_elems"):  # a model that names its own weights outside the layers (STDiT3's)
        return 0
    one = cfg.vocab // cfg.t * cfg.hidden
    if cfg.p == 1:
        return one if cfg.tied_embedding else 2 * one
    return one if stage in (0, cfg.p - 1) else 0


def optimizer_extra_elems(cfg: ScaleConfig, stage: int) -> int:
    """Weight elements of ``stage`` outside its layers that its data-parallel reduction carries with the layers'
    and its optimizer steps (:func:`embedding_elems`: the word embedding, the LM head): DeepSpeed's BF16 optimizer
    (``dp_reduce`` all_reduce) flattens every parameter of the stage into its fp32 gradient buffer
    (``fp32_groups_gradients_flat``, all-reduced whole by ``_bf16_reduce_grads``) and all-gathers every bf16
    parameter after the step (``all_gather_dp_groups``); Megatron's DDP puts every parameter of a model chunk in
    its gradient buffer (``param_and_grad_buffer.py``), reduce-scattered (the distributed optimizer, which steps its
    shard and all-gathers them) or all-reduced whole (ZeRO 0). ZeRO 2 / 3 (FSDP): 0 (their embedding is not
    priced yet)."""
    return embedding_elems(cfg, stage) if cfg.zero_stage < 2 else 0


def dp_collectives(cfg: ScaleConfig, cost: LayerCost, layers: int, stage_extra: int = 0) -> list[Collective]:
    """The data-parallel collectives of a stage of ``layers`` layers (none where ``cp x d`` is 1);
    ``stage_extra``: the stage's weight elements outside its layers that reduce with them
    (:func:`optimizer_extra_elems`)."""
    if cfg.cp * cfg.d == 1:
        return []
    w, z, shard, g = cost.weight_elems, cfg.zero_stage, cfg.shard_degree, cfg.grad_bytes
    # weights outside the repeated layers (STDiT3's embedders; DeepSpeed's embedding on its stages)
    extra = getattr(cfg, "extra_weight_elems", 0) + stage_extra
    if z == 0:
        return [Collective("gradients", "all_reduce", g * (w * layers + extra), grad_groups(cfg), "iteration")]
    out = []
    if z == 3:  # (torchao's fp8 all-gather: the fp8 linears' weights at 1 byte, each gather's amaxes: .fp8_gather)
        p, amaxes = gathered_bytes(cfg, 2 * w), amax_per_gather(cfg)
        for per in ("layer_forward", "layer_backward")[:2 if cfg.reshard_after_forward else 1]:
            out.append(Collective("parameters", "all_gather", p, shard_groups(cfg), per))
            if amaxes:
                out.append(Collective("weight amaxes", "all_reduce", AMAX_BYTES, shard_groups(cfg), per, amaxes))
        if amax_step_bytes(cfg, layers):
            out.append(Collective("weight amaxes", "all_reduce", amax_step_bytes(cfg, layers), shard_groups(cfg),
                                  "step"))
    if z >= 2:
        out.append(Collective("gradients", "reduce_scatter", g * w, shard_groups(cfg), "layer_backward"))
        if cfg.replicate_degree > 1:
            out.append(Collective("gradient shard", "all_reduce", g * w // shard, replicate_groups(cfg),
                                  "layer_backward"))
        if extra:
            out.append(Collective("other gradients", "reduce_scatter", g * extra, shard_groups(cfg), "iteration"))
    elif cfg.dp_reduce == "all_reduce":  # DeepSpeed's BF16 optimizer: the whole fp32 gradients all-reduced
        out.append(Collective("gradients", "all_reduce", g * (w * layers + extra), grad_groups(cfg), "iteration"))
    else:
        out.append(Collective("gradients", "reduce_scatter", g * (w * layers + extra), shard_groups(cfg),
                              "iteration"))
        if cfg.replicate_degree > 1:
            out.append(Collective("gradient shard", "all_reduce", g * w * layers // shard,
                                  replicate_groups(cfg), "iteration"))
    if z < 3:
        out.append(Collective("parameters", "all_gather", 2 * (w * layers + extra), shard_groups(cfg), "iteration"))
    return out


def cp_collectives(cfg: ScaleConfig) -> list[Collective]:
    """Context parallelism's collectives of one layer (none where cp is 1)."""
    if cfg.cp == 1:
        return []
    if cfg.cp_comm == "a2a":  # Ulysses: the model says which all_to_alls its layer runs (.stdit3)
        return cfg.a2a_collectives()
    kv = kv_bytes(cfg)
    if cfg.cp_comm in CP_TORCH:
        return _torch_cp_collectives(cfg, kv)
    if cfg.cp_comm == "p2p":
        ring = cp_ring(cfg)
        return [Collective("K, V", "collective_permute", kv, ring, "ring_step_forward"),
                Collective("K, V, dK, dV", "collective_permute", 2 * kv, ring, "ring_step_backward")]
    group = cp_groups(cfg)
    return [Collective("K, V", "all_gather", kv * cfg.cp, group, "layer_forward"),
            Collective("K, V", "all_gather", kv * cfg.cp, group, "layer_backward"),
            Collective("dK, dV", "reduce_scatter", kv * cfg.cp, group, "layer_backward")]


def _torch_cp_collectives(cfg: ScaleConfig, kv: int) -> list[Collective]:
    """PyTorch's context parallel (``_templated_ring_attention`` and its backward): with ``torch-allgather`` the
    K/V all-gathered once per attention call (forward, and again in the backward), with ``torch-alltoall`` sent
    to the next rank each of the cp - 1 steps; in the backward the dK/dV accumulators, fp32 (``convert_to_f32``),
    are passed to the next rank after every one of the cp steps (an all_to_all permute: the dK/dV rotater is
    always ALL_TO_ALL)."""
    ring, group = cp_ring(cfg), cp_groups(cfg)
    if cfg.cp_comm == "torch-allgather":
        kv_ops = [Collective("K, V", "all_gather", kv * cfg.cp, group, "layer_forward"),
                  Collective("K, V", "all_gather", kv * cfg.cp, group, "layer_backward")]
    else:
        kv_ops = [Collective("K, V", "collective_permute", kv, ring, "ring_step_forward"),
                  Collective("K, V", "collective_permute", kv, ring, "ring_step_backward")]
    return kv_ops + [Collective("dK, dV (fp32)", "collective_permute", 2 * kv, ring, "grad_step", count=cfg.cp)]


def embedding_collective(cfg: ScaleConfig) -> Collective | None:
    """The tied embedding's gradient all_reduce between the first and the last stage (``tied_embedding`` with a
    pipeline): V/t x h elements of ``grad_bytes``, every tensor, context and data rank's pair at once; None
    without it."""
    if not cfg.tied_embedding or cfg.p == 1:
        return None
    pairs = tuple((_rank(cfg, k, c, r, 0), _rank(cfg, k, c, r, cfg.p - 1))
                  for r in range(cfg.d) for c in range(cfg.cp) for k in range(cfg.t))
    return Collective("tied embedding gradients", "all_reduce", cfg.grad_bytes * (cfg.vocab // cfg.t) * cfg.hidden,
                      pairs, "iteration")


#: (id(topology), kind, bytes, groups) -> (topology, seconds): a sweep asks for the same collectives many times.
_SECONDS: dict = {}


def seconds(topo, c: Collective) -> float:
    """One execution of ``c`` on ``topo`` (every tensor rank's group at once); 0 without a network."""
    if topo is None or c.nbytes == 0:
        return 0.0
    key = (id(topo), c.kind, c.nbytes, c.groups)
    try:
        held = _SECONDS.get(key)
    except TypeError:  # (groups given as lists: not kept)
        return estimate(topo, c.kind, c.nbytes, c.groups).time_s
    if held is None or held[0] is not topo:
        if len(_SECONDS) > 65536:
            _SECONDS.clear()
        held = _SECONDS[key] = (topo, estimate(topo, c.kind, c.nbytes, c.groups).time_s)
    return held[1]


@dataclass(frozen=True)
class Exposure:
    """Seconds a device spends on these collectives: per layer and micro-batch (``forward``, ``backward``: the
    exposed part; ``*_total``: all of it), and once per iteration (``iteration``: exposed unless overlapped)."""

    forward: float = 0.0
    backward: float = 0.0
    forward_total: float = 0.0
    backward_total: float = 0.0
    iteration: float = 0.0


def dp_exposure(cfg: ScaleConfig, topo, cost: LayerCost, layers: int, f_layer: float, b_layer: float,
                stage_extra: int = 0, sms: tuple[int, int] = (0, 0), sms_of=None) -> Exposure:
    """The data-parallel collectives' seconds; ``f_layer`` / ``b_layer``: one layer's forward / backward compute
    (what the prefetched per-layer collectives hide under); ``stage_extra`` as :func:`dp_collectives` takes it;
    ``sms``: (SMs the NCCL kernels take, the chip's SMs): the layer's compute runs on the others while its
    collectives run (:func:`.sm_share.taxed`: ``max(C - G, C n / S)`` exposed); ``sms_of``: each collective's own
    SMs where they differ by kind (``nccl_ub``: :mod:`.nccl_ub`), the phase taxed at their seconds-weighted mean."""
    per = {"iteration": 0.0, "layer_forward": 0.0, "layer_backward": 0.0, "step": 0.0}  # (step: step_seconds)
    held = dict.fromkeys(per, 0.0)  # seconds x SMs, with sms_of
    for c in dp_collectives(cfg, cost, layers, stage_extra):
        t = c.count * seconds(topo, c)
        per[c.per] += t
        held[c.per] += t * sms_of(c) if sms_of is not None else 0.0
    f, b = per["layer_forward"], per["layer_backward"]

    def phase(k: str) -> tuple:
        return (held[k] / per[k], sms[1]) if sms_of is not None and per[k] else sms

    return Exposure(taxed(f_layer, f, phase("layer_forward")), taxed(b_layer, b, phase("layer_backward")), f, b,
                    per["iteration"])


def step_seconds(cfg: ScaleConfig, topo, cost: LayerCost, layers: int) -> float:
    """Seconds of a stage's data-parallel collectives that run once a step after the optimizer (``per="step"``:
    torchao's precomputed fp8 weight scales, :mod:`.fp8_gather`), exposed: nothing runs beside them."""
    return sum(c.count * seconds(topo, c) for c in dp_collectives(cfg, cost, layers) if c.per == "step")


def cp_exposure(cfg: ScaleConfig, topo, cost: LayerCost, sms: tuple[int, int] = (0, 0), hw=None) -> Exposure:
    """Context parallelism's seconds per layer and micro-batch: each of the cp - 1 ring steps' exchange overlapping
    that step's attention call (:func:`.cp_calls.ring_call_seconds`: each call at its own shape on ``hw``; without
    it 1/cp of ``core_s`` each), or the all_gather variant's collectives, not overlapped (PyTorch's:
    :func:`torch_cp_exposure`). ``sms``: (SMs an NCCL send/recv or collective takes, the chip's SMs): the attention
    block beside a ring step runs on the others (:func:`.sm_share.taxed`). A recompute that re-runs the attention
    (:func:`.recompute.reruns_attention`: TE's ``AttnFuncWithCP*`` is re-run whole by the checkpoint) sends the
    forward's K/V again in the backward, exposed as in the forward."""
    if cfg.cp_comm in CP_TORCH and cfg.cp > 1:
        return torch_cp_exposure(cfg, topo, cost, sms, hw)
    per = {"ring_step_forward": 0.0, "ring_step_backward": 0.0, "layer_forward": 0.0, "layer_backward": 0.0}
    for c in cp_collectives(cfg):
        per[c.per] += c.count * seconds(topo, c)
    calls = ring_call_seconds(cfg, hw, cost.core_s)
    steps = cfg.cp - 1  # the exchange for step i + 1 runs beside step i's call (backward: issued at step i, beside it)
    fx = sum(taxed(x, per["ring_step_forward"], sms) for x in calls.forward[:steps])
    bx = sum(taxed(x, per["ring_step_backward"], sms) for x in calls.backward[:steps])
    f = steps * per["ring_step_forward"] + per["layer_forward"]
    b = steps * per["ring_step_backward"] + per["layer_backward"]
    fx += per["layer_forward"]
    bx += per["layer_backward"]
    # the recompute's attention runs the forward's exchange again, as exposed (Ulysses' model lists its own: .stdit3)
    if reruns_attention(cfg) and cfg.cp_comm != "a2a":
        bx, b = bx + fx, b + f
    return Exposure(fx, bx, f, b)


def torch_cp_exposure(cfg: ScaleConfig, topo, cost: LayerCost, sms: tuple[int, int] = (0, 0), hw=None) -> Exposure:
    """PyTorch's context parallel as ``_templated_ring_attention`` runs it, per layer and micro-batch. Each of the
    cp steps computes one load-balanced block, its own call (:func:`.cp_calls.ring_call_seconds` on ``hw``; without
    it 1/cp of ``core_s``). Forward: the K/V all-gather is issued before the first (local) block and waited for
    after it (exposed beyond that block), or each of the cp - 1 permutes overlaps one block. Backward: the same for
    K/V; the dK/dV permute of each of the cp steps is waited for after the next block, the last one after the loop
    (exposed whole). A recompute that re-runs the attention (full; :func:`.recompute.reruns_attention`) runs the
    forward's exchange again in the backward. Traced by torch.compile
    without Inductor's reordering, each exchange is waited for where it is issued (:mod:`.traced_waits`): all of
    it exposed."""
    per = {"layer_forward": 0.0, "layer_backward": 0.0, "ring_step_forward": 0.0, "ring_step_backward": 0.0,
           "grad_step": 0.0}
    for c in cp_collectives(cfg):
        per[c.per] += seconds(topo, c)
    calls = ring_call_seconds(cfg, hw, cost.core_s)
    fc, bc = calls.forward, calls.backward
    f = taxed(fc[0], per["layer_forward"], sms) + sum(taxed(x, per["ring_step_forward"], sms) for x in fc[:-1])
    f_total = per["layer_forward"] + (cfg.cp - 1) * per["ring_step_forward"]
    dkv = per["grad_step"]
    b = (taxed(bc[0], per["layer_backward"], sms) + sum(taxed(x, per["ring_step_backward"], sms) for x in bc[:-1])
         + sum(taxed(x, dkv, sms) for x in bc[1:]) + dkv)
    b_total = per["layer_backward"] + (cfg.cp - 1) * per["ring_step_backward"] + cfg.cp * dkv
    if reruns_attention(cfg):
        b, b_total = b + f, b_total + f_total
    if cp_waits_at_once(cfg):
        return Exposure(f_total, b_total, f_total, b_total)
    return Exposure(f, b, f_total, b_total)
