"""The per-device layer step analysed once: exact counts by phase, times on a chip, bytes it keeps.

:func:`layer_cost` lowers :func:`mhlo_cost.studies.plan.layer.lower_layer` for a configuration's layer key, walks it
with the training analysis (phases: forward, backward with dgrad / wgrad, recompute, optimizer), prices every op
with the roofline of the chip (elementwise fusion; attention as its separate kernels, Megatron's 2022 kernels, or
with ``attention="fused"`` one flash-attention kernel), and keeps the result, so that every configuration sharing
the layer's shapes shares one lowering (in memory, and on disk as a ``plan/layers`` entry of the one cache,
:mod:`mhlo_cost.files.cache`, under the cache root ``cache_dir`` when one is given: keyed by the layer's shapes, the
chip's figures and the code hash, so a changed rule is never served a stale cost).

Rows under the scopes ``tp_comm`` and ``cp_comm`` (the stand-ins of the tensor- and context-parallel
collectives) are left out of the compute; :mod:`.compose` and :mod:`.sharding` price the collectives
themselves. ``core_s`` keeps the attention proper's seconds by phase (scope ``core``: what ring attention's
send/recv overlaps).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

from ...files.cache import AMOUNT, COUNT, TEXT, DiskCache, MapOf, Record, Schema, digest
from ...machines.hardware import Hardware
from .config import ScaleConfig

PHASES = ("forward", "backward", "recompute", "optimizer")


@dataclass(frozen=True)
class LayerCost:
    """One device, one micro-batch, one layer (flops, bytes: exact ints; times: seconds on ``chip``)."""

    key: str
    chip: str
    gemm_flops: dict = field(default_factory=dict)  # phase -> matrix FLOPs
    vector_flops: dict = field(default_factory=dict)  # phase -> vector FLOPs
    time_s: dict = field(default_factory=dict)  # phase -> seconds (fused roofline, tp_comm rows left out)
    dgrad_flops: int = 0
    wgrad_flops: int = 0
    saved_bytes: int = 0  # activations the backward reads from the forward (per micro-batch)
    input_bytes: int = 0  # the layer's input x (what full recompute keeps)
    weight_elems: int = 0  # the layer's bf16 weights on this device
    weight_bytes: int = 0
    master_bytes: int = 0  # fp32 master weights
    moment_bytes: int = 0  # AdamW's first and second moments (fp32) and its step counter
    ops: int = 0
    core_s: dict = field(default_factory=lambda: {p: 0.0 for p in PHASES})  # phase -> seconds of the attention
    # proper (scope core)
    linear_s: dict = field(default_factory=dict)  # TE's GEMM name (qkv_fprop, fc1_wgrad, ...) -> seconds of that
    # tensor-parallel linear's GEMMs (what a userbuffers-overlapped collective hides under: .tp_overlap)
    loss_s: dict = field(default_factory=lambda: {p: 0.0 for p in PHASES})  # phase -> seconds of the head's
    # cross-entropy (scope loss: what a framework's own cross-entropy kernels replace, .megatron_passes)
    weight_cast_s: dict = field(default_factory=lambda: {p: 0.0 for p in PHASES})  # phase -> seconds of the fp8
    # recipe's weight casts (scope fp8_weight: what Transformer Engine makes once a step, .fp8_weights)
    core_tensor_s: dict = field(default_factory=lambda: {p: 0.0 for p in PHASES})  # phase -> seconds the fused
    # attention's products would take at the tensor cores' full issue rate (its power's activity: .power_clock)
    act_s: dict = field(default_factory=lambda: {p: 0.0 for p in PHASES})  # phase -> seconds the compiled model
    # charged for the MLP's activation in its GEMMs' epilogues (what Megatron's own kernels replace: .mlp_activation)
    core_own_s: dict = field(default_factory=lambda: {p: 0.0 for p in PHASES})  # phase -> seconds the compiled model
    # charged for the core attention's non-GEMM work (what Megatron's softmax and dropout replace: .attention_kernels)
    amax_cast_s: dict = field(default_factory=lambda: {p: 0.0 for p in PHASES})  # phase -> seconds of the standalone
    # amax-and-fp8-cast kernels of activations and gradients (what TE's delayed scaling replaces: .te_amax)
    amax_cast_bytes: dict = field(default_factory=lambda: {p: 0 for p in PHASES})  # phase -> their bytes
    amax_casts: dict = field(default_factory=dict)  # "phase/fp8 dtype/elements/source row/act or -" -> those
    # kernels (.te_amax.cast_charge: the row the cast reads, and whether it is of the activation's scope)
    cast_feed_s: dict = field(default_factory=lambda: {p: 0.0 for p in PHASES})  # phase -> seconds other kernels
    # spent writing the f32 copies and abs only those cast kernels read (what torchao's casts do not: .torchao_casts)

    @property
    def activation_bytes(self) -> int:
        """Bytes one micro-batch of this layer keeps until its backward: the saved tensors, or with full
        recompute the layer's input only."""
        return self.saved_bytes if self.saved_bytes else self.input_bytes


_BY_PHASE = Record({p: COUNT for p in PHASES})
#: What a layer's entry holds: the fields of :class:`LayerCost`.
LAYERS = Schema("plan/layers", 12, Record({
    "key": TEXT, "chip": TEXT, "gemm_flops": _BY_PHASE, "vector_flops": _BY_PHASE,
    "time_s": Record({p: AMOUNT for p in PHASES}), "dgrad_flops": COUNT, "wgrad_flops": COUNT,
    "saved_bytes": COUNT, "input_bytes": COUNT, "weight_elems": COUNT, "weight_bytes": COUNT, "master_bytes": COUNT,
    "moment_bytes": COUNT, "ops": COUNT, "core_s": Record({p: AMOUNT for p in PHASES}),
    "linear_s": MapOf(AMOUNT), "loss_s": Record({p: AMOUNT for p in PHASES}),
    "weight_cast_s": Record({p: AMOUNT for p in PHASES}), "core_tensor_s": Record({p: AMOUNT for p in PHASES}),
    "act_s": Record({p: AMOUNT for p in PHASES}), "core_own_s": Record({p: AMOUNT for p in PHASES}),
    "amax_cast_s": Record({p: AMOUNT for p in PHASES}), "amax_cast_bytes": _BY_PHASE, "amax_casts": MapOf(COUNT),
    "cast_feed_s": Record({p: AMOUNT for p in PHASES})}))
#: Fields of a profile that name or describe it: a chip's cost does not depend on them.
_NAMING = ("name", "aliases", "vendor", "description", "source")

_MEMO: dict = {}


def _request(cfg: ScaleConfig, hw, chip: str, part: str) -> dict:
    """What the layer's cost depends on: the part, the layer's shapes, the chip and its figures."""
    layer, extra = list(cfg.layer_key()), []
    if part == "head":  # (one head serves every recompute policy and precision: a sweep lowers it once)
        layer = list(head_key(cfg))
    if part == "experts":  # a MoE layer's routed part (:mod:`.moe`)
        from .moe import experts_key

        extra = experts_key(cfg)
    return {"part": part, "layer": layer + extra, "chip": chip, "figures": _figures(hw)}


#: id(profile) -> (the profile, its figures' text): a sweep asks for one profile's thousands of times.
_FIGURES: dict = {}


def _figures(hw) -> str:
    """The text of the profile's figures (what a layer's cost depends on besides its shapes)."""
    held = _FIGURES.get(id(hw))
    if held is None or held[0] is not hw:
        if len(_FIGURES) > 256:  # (each entry holds its profile: kept bounded, as the keys and seconds are)
            _FIGURES.clear()
        figures = {f.name: getattr(hw, f.name) for f in dataclasses.fields(Hardware) if f.name not in _NAMING}
        held = _FIGURES[id(hw)] = (hw, repr(figures))
    return held[1]


def head_key(cfg: ScaleConfig) -> tuple:
    """What decides the last stage's head program (:func:`~.layer.lower_head`) and its pricing: the hidden size,
    vocabulary, tensor degree, sequence parallelism, the micro-batch's positions on one device, the dtype and the
    execution. Not the recompute policy nor the linears' precision (the LM head is a bf16 GEMM under every recipe),
    nor the attention (the head has none)."""
    return ("head", cfg.hidden, cfg.vocab, cfg.t, cfg.sp, cfg.micro_batch, cfg.seq, cfg.cp, cfg.dtype, cfg.execution)


def layer_cost(cfg: ScaleConfig, hw, cache_dir: str | os.PathLike | None = None, part: str = "layer",
               note: Callable[[str], None] | None = None) -> LayerCost:
    """The :class:`LayerCost` of ``cfg``'s per-device layer (``part="head"``: the last stage's LM head and
    loss) on ``hw`` (a chip or system profile); kept under the cache root ``cache_dir`` (``note(text)``: told
    of an entry not trusted or not kept)."""
    cost = known_cost(cfg, hw, cache_dir, part, note)
    if cost is None:
        chip, key, _ = layer_request(cfg, hw, part)
        cost = keep_cost(cfg, hw, cache_dir, part, analyse_layer(cfg, hw, key, chip, part), note)
    return cost


def layer_request(cfg: ScaleConfig, hw, part: str = "layer") -> tuple[str, str, dict]:
    """(chip, key, request) of a layer's cost: the key names it (this process's code is the code of every cost
    it holds); the request keys its cache entry."""
    chip = getattr(hw, "chip", "") or hw.name
    request = _request(cfg, hw, chip, part)
    memo = (id(hw), part, tuple(request["layer"]))
    held = _KEYS.get(memo)
    if held is None or held[0] is not hw or held[3] != request:
        if len(_KEYS) > 65536:
            _KEYS.clear()
        held = _KEYS[memo] = (hw, chip, digest(request)[:20], request)
    return held[1:]


#: (id(profile), part, layer key) -> (profile, chip, key, request): a sweep names each layer thousands of times.
_KEYS: dict = {}


def known_cost(cfg: ScaleConfig, hw, cache_dir=None, part: str = "layer", note=None) -> LayerCost | None:
    """The layer's cost where this process or the cache holds it (then kept in memory), else None."""
    _, key, request = layer_request(cfg, hw, part)
    if key in _MEMO:
        return _MEMO[key]
    kept = DiskCache(cache_dir, LAYERS, note).get(request)
    if kept is not None and kept["key"] == key:
        _MEMO[key] = LayerCost(**kept)
        return _MEMO[key]
    return None


def keep_cost(cfg: ScaleConfig, hw, cache_dir, part: str, cost: LayerCost, note=None) -> LayerCost:
    """``cost`` (analysed here or by a worker) kept in memory and under the cache root ``cache_dir``."""
    _, key, request = layer_request(cfg, hw, part)
    DiskCache(cache_dir, LAYERS, note).put(request, asdict(cost))
    _MEMO[key] = cost
    return cost


def library_refusal(cfg: ScaleConfig, hw) -> str | None:
    """Why ``cfg.attention_library`` cannot be priced on ``hw`` (one sentence: the profile has no model of that
    library's fused attention kernel), or None."""
    lib = cfg.attention_library
    if not lib or (hw.attention is not None and hw.attention.get(lib) is not None):
        return None
    have = ", ".join(name for name, _ in hw.attention.libraries) if hw.attention is not None else "none"
    return f"profile {hw.name} has no model of the {lib} attention library (it has: {have})"


def analyse_layer(cfg: ScaleConfig, hw, key: str = "", chip: str = "", part: str = "layer") -> LayerCost:
    """Lower, walk and price the layer or the head (no cache), as a :class:`~mhlo_cost.studies.study.Study`: a training
    step's walk, run as ``cfg.execution`` says (compiled; eager: one kernel per framework op, the attention PyTorch's
    SDPA call; inductor: torch.compile's kernels), with the attention as ``cfg.attention`` says (unfused: its
    separate kernels; fused: one flash-attention kernel, at ``cfg.attention_library``'s fractions where set, else
    the profile's default)."""
    from ..study import Study
    from .layer import lower_head
    from .attention_kernels import core_charge
    from .mlp_activation import activation_charge
    from .te_amax import cast_charge
    from .torchao_casts import feed_charge
    from .tp_overlap import linear_seconds

    why = library_refusal(cfg, hw)
    if why:
        raise ValueError(why)
    if cfg.attention_library:
        hw = replace(hw, attention=replace(hw.attention, library=cfg.attention_library))
    own = getattr(cfg, "lower_layer", None)  # a model's own per-device layer (STDiT3's block pair: .stdit3)
    if part == "experts":
        from .moe import lower_experts

        text = lower_experts(cfg)
    else:
        text = lower_head(cfg) if part == "head" else own() if own is not None else dense_layer(cfg)
    study = Study(text, training="always", hardware=hw, split_phases=True,
                  execution=cfg.execution, attention=cfg.attention, dataflow=True)
    a, rf = study.analysis, study.roofline
    gemm, vec, times, core, loss, cast, dgrad, wgrad = _row_sums(a, rf, _aten_rows(a, cfg))
    saved = _saved_bytes(a, a.phases, cfg, hw, part == "layer" and own is None)
    weights = [x for x in a.arguments if x.donated and x.name.startswith("params")]
    master = [x for x in a.arguments if x.donated and x.name.startswith("master")]
    moments = [x for x in a.arguments if x.donated and x.name.startswith("opt_state")]
    inputs = [x for x in a.arguments if not x.donated and x.name.startswith("x")]
    amax_s, amax_bytes, amax_casts = cast_charge(a, rf, hw, PHASES)
    return LayerCost(
        key=key, chip=chip or hw.name, gemm_flops=gemm, vector_flops=vec, time_s=times,
        dgrad_flops=dgrad, wgrad_flops=wgrad, saved_bytes=saved,
        input_bytes=sum(x.type.nbytes for x in inputs), weight_elems=sum(x.type.nelems for x in weights),
        weight_bytes=sum(x.type.nbytes for x in weights), master_bytes=sum(x.type.nbytes for x in master),
        moment_bytes=sum(x.type.nbytes for x in moments), ops=len(a.rows), core_s=core, loss_s=loss,
        weight_cast_s=cast, linear_s=linear_seconds(a, rf.times, hw, cfg.t), core_tensor_s=_core_tensor(a, rf),
        act_s=activation_charge(a, rf, PHASES), core_own_s=core_charge(a, rf, PHASES), amax_cast_s=amax_s,
        amax_cast_bytes=amax_bytes, amax_casts=amax_casts, cast_feed_s=feed_charge(a, rf, hw, PHASES))


def dense_layer(cfg: ScaleConfig) -> str:
    """The StableHLO text of ``cfg``'s dense per-device layer: the GPT layer (:mod:`.layer`) or, with ``arch="llama"``,
    the Llama layer (:mod:`.llama_layer`)."""
    if cfg.arch == "llama":
        from .llama_layer import lower_llama_layer

        return lower_llama_layer(cfg)
    from .layer import lower_layer

    return lower_layer(cfg)


def _aten_rows(a, cfg: ScaleConfig) -> frozenset:
    """Rows that torch.compile leaves to ATen: under ``inductor``, the Llama layer's complex product of its rotary
    embedding (scope ``rope/complex``: Inductor does not generate code for complex operators, :mod:`.llama_layer`;
    the casts around it are Triton kernels, as the H200 profile of torchtitan's ``apply_rotary_emb`` compiled shows:
    the ATen complex ``mul`` kept, the ``.float()`` and ``type_as`` copies ``triton_poi_fused__to_copy_view``)."""
    if cfg.execution != "inductor" or cfg.arch != "llama":
        return frozenset()
    return frozenset(i for i, r in enumerate(a.rows) if {"rope", "complex"} <= set(r.scope.split("/")))


def _row_sums(a, rf, aten: frozenset = frozenset()) -> tuple:
    """The program's rows summed by phase: GEMM and vector FLOPs, seconds (the tensor- and context-parallel
    collectives left out), the seconds of scopes ``core``, ``loss`` and ``fp8_weight``, and the backward's dgrad and
    wgrad FLOPs.
    The rows of ``aten`` take their eager seconds (ATen kernels under torch.compile: :func:`_aten_rows`)."""
    from ...lower.models.quant import WEIGHT_SCOPE

    ph = a.phases
    row_time = list(rf.fusion.row_time)
    when = _time_phases(a, rf)
    if aten:
        eager = rf.gain.eager.row_time
        for i in aten:
            row_time[i] = eager[i]
    gemm = {p: 0 for p in PHASES}
    vec = {p: 0 for p in PHASES}
    times = {p: 0.0 for p in PHASES}
    core = {p: 0.0 for p in PHASES}
    loss = {p: 0.0 for p in PHASES}
    cast = {p: 0.0 for p in PHASES}
    dgrad = wgrad = 0
    for i, r in enumerate(a.rows):
        p = ph.phase[i]
        gemm[p] += r.gemm_flops + r.conv_flops
        vec[p] += r.vector_flops
        scopes = r.scope.split("/")
        if "tp_comm" not in scopes and "cp_comm" not in scopes:
            t = when[i]
            times[t] += row_time[i]
            core[t] += row_time[i] if "core" in scopes else 0.0
            loss[t] += row_time[i] if "loss" in scopes else 0.0
            cast[t] += row_time[i] if WEIGHT_SCOPE in scopes else 0.0
        if p == "backward" and ph.grad[i] == "dgrad":
            dgrad += r.gemm_flops
        elif p == "backward" and ph.grad[i] == "wgrad":
            wgrad += r.gemm_flops
    return gemm, vec, times, core, loss, cast, dgrad, wgrad


def _time_phases(a, rf) -> list:
    """The phase each row's seconds are counted in: its own, but a compiled fused attention kernel's rows its
    latest member's (the phase it runs in, :meth:`mhlo_cost.roofline.fusion.Grouper.same_phase`: a flash backward
    kernel remakes the scores inside, so rows of the program's recompute it holds are the backward's seconds)."""
    when = list(a.phases.phase)
    if rf.execution != "compiled":
        return when
    for k in rf.fusion.kernels:
        if k.attention:
            for i in k.members:
                when[i] = a.phases.phase[k.members[-1]]
    return when


def _core_tensor(a, rf) -> dict:
    """Phase -> seconds the fused attention kernels of scope ``core`` would spend at the tensor cores' full issue
    rate (:attr:`mhlo_cost.roofline.fusion.Kernel.tensor_s`; 0 where the attention is not one fused kernel), shared
    among the phases its rows' seconds count in as its time is (:func:`_time_phases`)."""
    out = {p: 0.0 for p in PHASES}
    row_time, when = rf.fusion.row_time, _time_phases(a, rf)
    for k in rf.fusion.kernels:
        if not (k.attention and k.tensor_s > 0 and k.time_s > 0):
            continue
        for i in k.members:
            if "core" in a.rows[i].scope.split("/"):
                out[when[i]] += k.tensor_s * row_time[i] / k.time_s
    return out


def _saved_bytes(a, phases, cfg: ScaleConfig, hw, dense_layer: bool) -> int:
    """The activations one micro-batch of the layer keeps for its backward, from the program's data flow (a dense
    layer with one flash-attention kernel and no recompute: :func:`flash_saved_bytes`)."""
    if dense_layer and cfg.attention == "fused" and cfg.recompute == "none":
        return flash_saved_bytes(cfg, hw)
    from ...analysis.training import memory_categories

    return memory_categories(a, phases)["saved_activations"]


def flash_saved_bytes(cfg: ScaleConfig, hw) -> int:
    """Bytes one layer keeps for its backward when its attention is one flash kernel and nothing is recomputed:
    the kernel keeps no s x s probabilities, dropout mask or dropped probabilities (its backward remakes them
    tile by tile), only its output (the projection's input, kept anyway) and the log-sum-exp of each query row,
    b x heads/t x s/cp fp32. The program's saved tensors without the scores are those of the same layer lowered
    with Megatron's selective recompute (which leaves out exactly those three); the pricing stays the fused
    kernel's, from the layer as lowered (:func:`analyse_layer`)."""
    from ...analysis.training import memory_categories
    from ..study import Study

    study = Study(dense_layer(cfg.with_split(recompute="selective")), training="always", hardware=hw,
                  split_phases=True, execution=cfg.execution, attention=cfg.attention, dataflow=True)
    lse = cfg.micro_batch * (cfg.heads // cfg.t) * cfg.local_seq * 4
    return memory_categories(study.analysis, study.analysis.phases)["saved_activations"] + lse
