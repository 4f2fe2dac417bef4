"""Tensor-parallel communication overlapped with the GEMMs it feeds: Transformer Engine's userbuffers
(``tp_comm_overlap``, Megatron-Core / NeMo / Megatron-Bridge), priced per collective against its own GEMM.

With sequence parallelism a layer's ten tensor-parallel collectives of one micro-batch (:func:`.compose.
tp_collectives`: 2 all_gathers + 2 reduce_scatters forward, 4 + 2 backward) each pair with one linear's GEMM, as
TE's ``initialize_ub`` names them (``transformer_engine/pytorch/module/base.py``; the methods are those of NeMo's
and Megatron-Bridge's ``userbuffers_*_h100_*`` configurations, TE's defaults):

* ring exchange, all_gather (``qkv_fprop``, ``fc1_fprop``: the norm's output; ``proj_dgrad``, ``fc2_dgrad``: the
  output gradient): the GEMM runs in ``t`` chunks of ``s/t`` rows, the first on the local shard; while chunk ``i``
  computes, the next shard arrives from the neighbour (one ``collective_permute`` of ``S/t`` bytes). Exposed:
  ``(t - 1) max(0, c - G/t)``;
* pipeline, reduce_scatter (``proj_fprop``, ``fc2_fprop``; NeMo's configurations, :data:`RS_SPLITS` = 4 splits):
  the GEMM's output in ``n`` chunks, each chunk's reduce_scatter (``S/n`` bytes) overlapping the next chunk's
  GEMM, the last one after it. Exposed: ``(n - 1) max(0, c - G/n) + c``;
* ring exchange, reduce_scatter (the same two, ``tp_overlap_rs="ring_exchange"``: Megatron-Bridge's fp8 H100
  configurations): ``t`` chunks, each chunk's partial sent on (``S/t`` bytes) while the next computes; the last
  send after the last chunk. Exposed: ``(t - 1) max(0, c - G/t) + c``;
* bulk (``qkv_dgrad``, ``fc1_dgrad``: the all_gather of the norm's output the weight gradient needs, beside the
  data-gradient GEMM; ``qkv_wgrad``, ``fc1_wgrad``: the reduce_scatter of the data gradient, beside the
  weight-gradient GEMM): the whole collective on a few SMs while the GEMM runs. Exposed: ``max(0, C - G)``.

``S`` is the activation the collective moves (b x s/cp x h, bf16: :func:`.compose.activation_bytes`), ``G`` the
paired GEMM's seconds (:attr:`~.costs.LayerCost.linear_s`, from the program's rows; the fc1 GEMM of a SwiGLU MLP is
its gate and up projections, one GEMM in TE), ``c`` / ``C`` a chunk's / the collective's seconds on the system's
network. A chunked GEMM runs as its ``n`` chunks of ``s/n`` rows, launched on up to :data:`UB_STREAMS` compute
streams in turn (:func:`chunked_seconds`): the chunks run concurrently, the next chunk's tiles filling the SMs the
last wave of the one before leaves, so the ``n`` chunks take the whole GEMM's seconds (``"<name>@<n>"`` in
``linear_s``: one chunk priced alone on the GEMM model, what ``n`` chunks would take one after another on one
stream, whose wave quantization a chunk of fewer row tiles feels more); what the chunked GEMM takes beyond the whole
(the pipelined one's SM margin) is exposed, and the pair's formula takes the chunked GEMM's time. Full recompute
repeats the forward's pairs in the backward. The SMs the pipelined and bulk kernels take (TE's defaults,
:mod:`.sm_share`): a pipelined GEMM runs on ``S - 16`` SMs throughout (``set_sm_margin``: ``G S / (S - 16)``), a bulk
pair takes ``max(C, G + 16 C / S)``; the ring exchange sends by the copy engine. No factor: the chunking, the streams,
the pairing and the SMs are the frameworks'.
"""
from __future__ import annotations

from .config import ScaleConfig
from .sm_share import TE_SMS, contended, margin

#: NeMo's and Megatron-Bridge's PipelineOverlapCfg(num_splits=4) for proj_fprop / fc2_fprop
RS_SPLITS = 4
#: The compute streams TE's userbuffers launch a chunked GEMM's chunks on, in turn (TE v1.7, commit 4e7caa1c, the
#: NeMo 24.07 container's: transformer_engine/pytorch/module/base.py ``_NUM_MAX_UB_STREAMS = 3``, passed to every
#: overlap as ``num_max_streams``; csrc/comm_gemm_overlap.h makes ``min(num_max_streams, num_splits)`` streams, the
#: ring exchange's ``num_splits`` being ``tp_size``, and ``split_overlap_rs`` / ``split_overlap_ag`` run chunk ``i``
#: on ``_stream_compute[i % _stream_compute.size()]``, a chunk waiting only for its own input: the ring exchange's
#: chunk for the receive of its shard, the pipeline's for nothing, not for the chunk before)
UB_STREAMS = 3
#: The GEMM of each overlapped pair (LayerCost.linear_s keys), TE's names.
LINEARS = ("qkv_fprop", "proj_fprop", "fc1_fprop", "fc2_fprop", "qkv_dgrad", "qkv_wgrad", "proj_dgrad",
           "proj_wgrad", "fc1_dgrad", "fc1_wgrad", "fc2_dgrad", "fc2_wgrad")
#: The GEMMs TE splits in chunks along their rows, and in how many (``t``: the tensor degree; the row-parallel
#: forward GEMMs in :data:`RS_SPLITS` with the pipelined reduce_scatter, in t with the ring exchange)
CHUNKED = {"qkv_fprop": ("t",), "fc1_fprop": ("t",), "proj_dgrad": ("t",), "fc2_dgrad": ("t",),
           "proj_fprop": ("t", RS_SPLITS), "fc2_fprop": ("t", RS_SPLITS)}
#: The forward pairs: (GEMM, collective, method) and the backward's (``rs``: ``tp_overlap_rs``'s method).
FORWARD = (("qkv_fprop", "all_gather", "ring_ag"), ("proj_fprop", "reduce_scatter", "rs"),
           ("fc1_fprop", "all_gather", "ring_ag"), ("fc2_fprop", "reduce_scatter", "rs"))
BACKWARD = (("fc2_dgrad", "all_gather", "ring_ag"), ("fc1_dgrad", "all_gather", "bulk"),
            ("fc1_wgrad", "reduce_scatter", "bulk"), ("proj_dgrad", "all_gather", "ring_ag"),
            ("qkv_dgrad", "all_gather", "bulk"), ("qkv_wgrad", "reduce_scatter", "bulk"))


def linear_seconds(a, times, hw=None, t: int = 1) -> dict:
    """Seconds of each tensor-parallel linear's GEMMs (:data:`LINEARS`) in the analysed layer ``a``: each dot's own
    kernel time on the roofline (``times[i].kernel_s``, its epilogue's elementwise ops left out), the dots as
    :func:`linear_rows` finds them; with ``hw`` and ``t`` > 1, also ``"<name>@<n>"``: one chunk of a chunked GEMM
    (:data:`CHUNKED`: ``n`` of ``t`` or :data:`RS_SPLITS`), its dots re-priced at 1/n of their rows
    (:func:`chunk_seconds`)."""
    rows = linear_rows(a)
    out = {name: sum(times[i].kernel_s for i in idx) for name, idx in rows.items()}
    if hw is not None and t > 1:
        for name, splits in CHUNKED.items():
            for n in sorted({t if k == "t" else k for k in splits}):
                out[f"{name}@{n}"] = sum(chunk_seconds(a.rows[i], hw, n) for i in rows[name])
    return out


def chunk_seconds(r, hw, n: int) -> float:
    """One of ``n`` chunks of the dot ``r`` along its rows (the result's second-to-last axis: the sequence), as TE
    runs it under the overlap, on the roofline of ``hw``: 1/n of its FLOPs and bytes (the weight each chunk reads
    again is not charged: these GEMMs are compute-bound), at the GEMM model's efficiency for the chunk's shape
    (fewer row tiles: a later wave less full)."""
    from dataclasses import replace

    from ...ir.tensorinfo import TensorInfo
    from ...roofline.optime import op_time

    res = r.result if not isinstance(r.result, (list, tuple)) else r.result[0]
    if len(res.shape) < 2 or res.shape[-2] % n:
        return op_time(r, hw).kernel_s / n
    shape = (*res.shape[:-2], res.shape[-2] // n, res.shape[-1])
    part = TensorInfo.make(shape, res.dtype, res.nelems // n, res.nbytes // n)
    c = r.cost
    cost = type(c)(c.gemm_flops // n, c.conv_flops // n, c.vector_flops // n, c.transcendentals // n,
                   c.bytes_read // n, c.bytes_written // n, 0)
    return op_time(replace(r, result=part, cost=cost), hw).kernel_s


def linear_rows(a) -> dict:
    """The rows of each tensor-parallel linear's GEMMs (:data:`LINEARS`) in the analysed layer ``a``: the dots of the
    scopes ``attn`` and ``mlp`` outside the attention proper (``core``). Forward, in program order: the last
    ``attn`` dot is the output projection, the others the QKV projection (three with torchtitan's op policy); the
    last ``mlp`` dot is fc2, the others fc1 (and the gate). The backward runs them in reverse, two dots a forward
    dot (proj's before the attention's backward, qkv's after; fc2's first); of each pair, the dot with a 2-D
    (weight-shaped) result is the weight gradient."""
    ph = a.phases
    dots = {"forward": {"attn": [], "mlp": []}, "backward": {"attn": [], "mlp": []}}
    core_seen = {"forward": False, "backward": False}
    for i, r in enumerate(a.rows):
        p = ph.phase[i]
        if p not in dots or r.kind != "dot" or not r.gemm_flops:
            continue
        scopes = r.scope.split("/")
        if "core" in scopes:
            core_seen[p] = True
            continue
        block = "attn" if "attn" in scopes else "mlp" if "mlp" in scopes else None
        if block is not None and "tp_comm" not in scopes and "cp_comm" not in scopes:
            dots[p][block].append((i, core_seen[p]))
    out = {name: [] for name in LINEARS}
    for block, first, last in (("attn", "qkv_fprop", "proj_fprop"), ("mlp", "fc1_fprop", "fc2_fprop")):
        rows = [i for i, _ in dots["forward"][block]]
        out[last] += rows[-1:]
        out[first] += rows[:-1]
    back = dots["backward"]
    _grads(a.rows, [i for i, after in back["attn"] if not after], "proj", out)
    _grads(a.rows, [i for i, after in back["attn"] if after], "qkv", out)
    mlp = [i for i, _ in back["mlp"]]
    n_fc2 = 2 if dots["forward"]["mlp"] else 0  # fc2: one forward dot, two backward
    _grads(a.rows, mlp[:n_fc2], "fc2", out)
    _grads(a.rows, mlp[n_fc2:], "fc1", out)
    return out


def _grads(rows, idx: list, name: str, out: dict) -> None:
    for i in idx:
        res = rows[i].result if not isinstance(rows[i].result, (list, tuple)) else rows[i].result[0]
        out[name + ("_wgrad" if len(res.shape) == 2 else "_dgrad")].append(i)


def exposed(method: str, gemm: float, t: int, whole: float, chunk: float) -> float:
    """Seconds one pair exposes beyond its GEMM of ``gemm`` seconds: ``whole`` the collective's time, ``chunk``
    one chunk's (a ring step's permute, or one of the pipeline's reduce_scatters); ``method`` one of ``ring_ag``,
    ``ring_rs``, ``pipeline_rs``, ``bulk`` (the module's formulas)."""
    if method == "bulk":
        return max(0.0, whole - gemm)
    if method == "ring_ag":
        return (t - 1) * max(0.0, chunk - gemm / t)
    n = t if method == "ring_rs" else RS_SPLITS
    return (n - 1) * max(0.0, chunk - gemm / n) + chunk


def tp_overlap_exposure(cfg: ScaleConfig, cost, s: int, price, sms: int = 0) -> dict:
    """Exposed tensor-parallel seconds of one layer and micro-batch, by phase (``forward``, ``backward``), with
    TE's userbuffers overlap. ``s``: the bytes of the activation a collective moves (S); ``price(kind, nbytes,
    groups)``: one collective's seconds on the system's network; ``sms``: the chip's SMs, of which the pipelined
    and bulk overlaps' kernels take :data:`.sm_share.TE_SMS` (0: not charged)."""
    t = cfg.t
    if t == 1:
        return {"forward": 0.0, "backward": 0.0}
    group = (tuple(range(t)),)
    step = price("collective_permute", s // t, ((0, 1),))  # one ring step: S/t to the neighbour
    rs = "ring_rs" if cfg.tp_overlap_rs == "ring_exchange" else "pipeline_rs"
    chunk = {"ring_ag": step, "ring_rs": step, "bulk": 0.0,
             "pipeline_rs": price("reduce_scatter", s // RS_SPLITS, group)}
    whole = {"all_gather": price("all_gather", s, group), "reduce_scatter": price("reduce_scatter", s, group)}
    lin = cost.linear_s or {}

    def one(gemm: str, kind: str, method: str) -> float:
        method = rs if method == "rs" else method
        g = lin.get(gemm, 0.0)
        if method == "bulk":  # the GEMM beside the collective's kernel (TE_SMS["bulk"] of the SMs)
            return contended(g, whole[kind], TE_SMS["bulk"], sms) - g
        n = RS_SPLITS if method == "pipeline_rs" else t
        chunked = chunked_seconds(g, lin.get(f"{gemm}@{n}", g / n), n)  # the GEMM as its n chunks run
        if method == "pipeline_rs":  # set_sm_margin: every chunk on the SMs its reduce-scatters leave
            chunked = margin(chunked, TE_SMS["pipeline"], sms)
        return max(0.0, chunked - g) + exposed(method, chunked, t, whole[kind], chunk[method])

    def total(pairs) -> float:
        return sum(one(*pair) for pair in pairs)

    fwd = total(FORWARD)
    return {"forward": fwd, "backward": total(BACKWARD) + (fwd if cfg.recompute == "full" else 0.0)}


def chunked_seconds(whole: float, chunk: float, n: int, streams: int = UB_STREAMS) -> float:
    """Seconds of a GEMM of ``whole`` seconds run as ``n`` chunks of ``chunk`` seconds each (priced alone) on
    ``min(streams, n)`` compute streams in turn (:data:`UB_STREAMS`): on more than one the chunks run concurrently,
    the next one's thread blocks taking the SMs the last wave of the one before leaves, so together they are the
    whole GEMM's waves (its row tiles, split among the chunks): ``whole``; on one stream, one after another:
    ``n x chunk``. ESTIMATE: ``whole`` is the ideal, a lower bound: it assumes the streams always hold a chunk ready
    to fill the SMs, where a chunk waits for its own communication step (userbuffers' per-chunk flags; torch's
    local-shard consumer runs first alone, and ``_pipelined_produce_and_all2all`` waits on a barrier after each
    producer), so a chunk's tail wave can run with nothing beside it; ``n x chunk`` would be the upper bound."""
    return whole if min(streams, n) > 1 else n * chunk
