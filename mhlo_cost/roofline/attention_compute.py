"""The compute time of one fused attention kernel: :func:`kernel_compute_s`.

Its GEMM FLOPs on the library's padded head dim (:data:`PADDED_HEAD_DIMS`) over the blocks a causal or windowed
mask lets it visit (:func:`is_causal`, :func:`.band.mask_fraction`), its exponentials and vector work, and for a
backward kernel the recomputed score product and its two memory-bound passes. The kernels themselves are found
by :mod:`.attention` and :mod:`.attention_backward`.
"""
from __future__ import annotations

import math

from ..machines.clock import clock_factor
from ..machines.kernels import backward_pass_bytes
from ..machines.power import activity_clock
from ..walk.row import short_name
from .attention import shape_of
from .band import mask_fraction
from .optime import matrix_key


def is_causal(rows, producers, members) -> bool:
    """Whether a forward attention masks with an index comparison (iota against iota: a causal or windowed
    mask): a ``select`` member whose outside operand comes from an ``iota`` within a few data ops, or an ``add``
    member whose outside operand is an additive bias made from such a comparison (:func:`additive_index_mask`)."""
    inside = set(members)
    if additive_index_mask(rows, producers, [i for i in members if short_name(rows[i].op) == "add"], inside):
        return True
    for i in members:
        if short_name(rows[i].op) != "select":
            continue
        stack = [(p, 0) for p in producers[i] if isinstance(p, int) and p not in inside]
        while stack:
            p, d = stack.pop()
            name = short_name(rows[p].op)
            if name == "iota":
                return True
            if d < 6 and (rows[p].kind in ("data", "free", "other", "elementwise") or name == "compare"):
                stack.extend((q, d + 1) for q in producers[p] if isinstance(q, int))
    return False


#: Rows walked back from an attention's members to the comparison of indices that makes its mask: a forward's
#: additive bias (broadcasts, the ``where`` of -inf and 0, ``not``, ``and``) sits about 8 rows behind its ``add``;
#: a backward reads the forward's probabilities, 4 rows (divide, exponential, subtract, add) further.
MASK_DEPTH = 16
#: Ops whose result is read from a table at computed indices, not the indices themselves: a bias looked up this way
#: (T5's relative-position buckets: comparisons of iotas index an embedding) is not an index mask.
LOOKUPS = frozenset({"gather", "dynamic_slice", "dynamic_gather", "torch_index_select"})


def additive_index_mask(rows, producers, starts, inside, depth: int = MASK_DEPTH) -> bool:
    """Whether an operand of rows ``starts`` from outside ``inside`` is made, within ``depth`` elementwise, data or
    transcendental rows (the forward's exponential, for a backward), from a ``compare`` of values made from ``iota``
    (an index mask). PyTorch's SDPA with ``is_causal=True`` lowered through torchax is of this form: torchax's
    ``_sdpa_reference`` (torchax/ops/jtorch.py, as ``torch.nn.functional.scaled_dot_product_attention``'s documented
    equivalent) builds ``ones(L, S).tril()``, fills a zero bias with -inf where it is False and adds it to the scores;
    the library kernel the call runs on a GPU (FlashAttention-2's ``Is_causal``: flash_fwd_kernel.h stops each query
    block's loop at the diagonal) skips the key blocks above the diagonal instead."""
    seen: set = set()
    stack = [(p, 0) for i in starts for p in producers[i] if isinstance(p, int) and p not in inside]
    while stack:
        p, d = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        if short_name(rows[p].op) == "compare" and _from_iota(rows, producers, p):
            return True
        if d < depth and rows[p].kind in ("data", "free", "other", "elementwise", "transcendental") and (
                short_name(rows[p].op) not in LOOKUPS):
            stack.extend((q, d + 1) for q in producers[p] if isinstance(q, int))
    return False


def _from_iota(rows, producers, i: int, depth: int = 6) -> bool:
    """Whether an operand of row ``i`` comes from an ``iota`` within ``depth`` data or elementwise rows."""
    stack = [(p, 0) for p in producers[i] if isinstance(p, int)]
    while stack:
        p, d = stack.pop()
        if short_name(rows[p].op) == "iota":
            return True
        if d < depth and rows[p].kind in ("data", "free", "other", "elementwise"):
            stack.extend((q, d + 1) for q in producers[p] if isinstance(q, int))
    return False


#: The head dims a library compiles its kernels for: a call runs the smallest at least its own, computing on the
#: padded width (both products scale with it). FlashAttention-2: ``HEADDIM_SWITCH`` in
#: Dao-AILab/flash-attention ``csrc/flash_attn/src/static_switch.h`` (the copy PyTorch's flash SDPA backend
#: bundles has the same ladder): 32, 64, 96, 128, 160, 192, 256; a head dim of 72 (STDiT3) runs the 96 kernel.
#: cuDNN 9 (its sm90 SDPA kernels, as PyTorch 2.11 calls them on an H200, [MEAS] kernel names in
#: benchmarks/data/measured_h200.toml): head dim 64 runs a ``..._64x128x64`` kernel, 72 and 128 ``..._64x128x128``.
PADDED_HEAD_DIMS = {"fa2": (32, 64, 96, 128, 160, 192, 256), "cudnn": (64, 128)}


def score_head_dim(r) -> int:
    """The contracted dimension of a score product Q K^T: its FLOPs / (2 x its elements); 0 where unknown."""
    n = r.out_elems * max(r.multiplicity, 1)
    return r.gemm_flops // (2 * n) if n else 0


def padded_head_dim(d: int, ladder: tuple) -> int:
    """The kernel head dim a call of head dim ``d`` runs (``d`` itself above the ladder)."""
    return next((k for k in ladder if k >= d), d)


def kernel_compute_s(rows, producers, times, members, hw, multiplicity: int, library: str = "",
                     masks: dict | None = None) -> tuple | None:
    """The compute time of one fused attention kernel on ``hw`` (totals over its multiplicity): its GEMM FLOPs over the
    blocks it computes at the library's fraction of the matrix peak plus the library's exposed share of its exponentials
    (``exp_exposed``), beside its exponentials and its vector work; a backward recomputes the score product; a library's
    kernel computes on its padded head dim (:data:`PADDED_HEAD_DIMS`). ``library``: the kernel's library where the
    profile has a model of it, else the profile's default. ``masks``: the walk's ``masks`` record
    (:mod:`mhlo_cost.roofline.band`): an index mask read from it that leaves fewer key tiles than a causal one (a
    sliding window) prices the blocks it visits; a causal kernel skips the blocks above the diagonal whole: their
    products, exponentials and vector work. On a profile marked sustained the compute runs at the SM clock the power
    limit leaves it (:func:`sm_clock`).
    A backward adds the HBM time of its two memory-bound passes (``backward_pass_bytes``). Returns (those seconds,
    the seconds its products would take at the tensor cores' full issue rate: their FLOPs over the blocks it visits
    over the matrix peak, what its power's activity is read from), None without a model."""
    model = getattr(hw, "attention", None)
    if model is None or model.get() is None:
        return None
    name = library if library and model.get(library) is not None else model.library
    lib = model.get(name)
    dots = [i for i in members if rows[i].kind == "dot"]
    gemm_flops = sum(rows[i].gemm_flops for i in dots)
    backward = len(dots) > 2
    recomputed = _recomputed_exps(rows, dots, gemm_flops) if backward and lib.exp_exposed else 0
    if backward:
        gemm_flops += gemm_flops // len(dots)  # the score product recomputed from Q and K
    qk = dots[0]
    if name in PADDED_HEAD_DIMS:
        d = score_head_dim(rows[qk])
        gemm_flops = gemm_flops * padded_head_dim(d, PADDED_HEAD_DIMS[name]) // d if d else gemm_flops
    sq, sk = shape_of(rows[qk].result)[-2:] if backward is False else _score_of(rows, dots)
    tiles = sk / model.tile
    n = max(1.0, -(-sk // model.tile))
    band = mask_fraction(rows, producers, masks, members, model.tile)
    if band is not None and band >= (n + 1) / (2 * n):
        band = None  # no fewer blocks than a causal mask visits: priced as one, as before
    if band is None and (is_causal(rows, producers, members) or (backward and (_masked(rows, members) or (
            additive_index_mask(rows, producers, members, set(members)))))):
        band = (n + 1) / (2 * n)  # causal: the blocks on and below the diagonal
    peak = times[qk].peak or 1.0
    trans = (sum(rows[i].transcendentals for i in members) + recomputed) / hw.transcendental_rate
    vector = sum(times[i].compute_s for i in members if rows[i].kind != "dot" and times[i].unit == "vector")
    if band is not None:  # a window or a causal mask: the blocks it visits, their exponentials and vector work
        trans, vector = trans * band, vector * band
    passes = hw.memory_time(_pass_bytes(rows, dots, sk), 2 * max(multiplicity, 1)) if backward else 0.0
    compute, matrix = fused_compute_s(lib, backward, gemm_flops * (1 if band is None else band), tiles, peak, trans,
                                      vector)
    tensor = lib.fraction(backward, tiles) * matrix  # its products at the tensor cores' full issue rate
    activity = tensor / compute if compute > 0 else 0.0
    return compute / sm_clock(rows[qk], hw, activity) + passes, tensor


def fused_compute_s(lib, backward: bool, flops: float, key_tiles: float, peak: float, trans_s: float,
                    vector_s: float = 0.0) -> tuple[float, float]:
    """(compute seconds, products' seconds) of a fused attention kernel of library model ``lib``: its products'
    ``flops`` (over the blocks it visits) at the library's fraction of ``peak``, reached from its ``key_tiles``, plus
    the library's exposed share of its exponentials (``trans_s``), beside them and its vector work (``vector_s``)."""
    matrix = flops / (peak * lib.fraction(backward, key_tiles))
    return max(matrix + lib.exp_exposed * trans_s, trans_s, vector_s), matrix


def sm_clock(qk, hw, activity: float) -> float:
    """The SM clock a fused attention kernel holds on ``hw`` over the clock its library's rate was measured at: 1
    on a profile not marked sustained; on a sustained one (train-plan's default), the clock the board's power limit
    leaves a kernel whose tensor cores issue ``activity`` of their peak per clock (its products' fraction of the
    peak times their share of its compute time), from the clock a stream of dots holds
    (:func:`mhlo_cost.machines.clock.clock_factor` of the score product's dtype, at the profile's large-shape GEMM
    efficiency), capped at 1.

    Why. The libraries' fractions (``[profile.<name>.attention]``) were read off short loops at the unthrottled clock,
    like the GEMM tables: the FA3 paper's bars (Dao-AILab/flash-attention ``hopper/benchmark_attn.py``, read at 20b84d6:
    ``triton.testing.do_bench`` of one call for a few ms, after ``time.sleep(1)`` "to avoid residual power throttling
    from the previous benchmark") and cudnn-frontend's ``benchmark/benchmark_flash_attention.py`` (mean of 30 repeats;
    its README locks the clocks, ``nvidia-smi -ac 3201,1980 -pl 700``). Under a power limit the power manager lowers the
    one SM clock until the board's draw is within it (machines/clock.py): the dynamic power is alpha C V(f)^2 f, and
    alpha, the switching, is set by how densely the tensor cores issue (clock.py: the same product on zeros held 1725
    MHz at 403 W, on random data 1440 at 692). Board power against clock is the measured curve of
    :mod:`mhlo_cost.machines.power` (an H100 under caps of 200-700 W), its part above the floor scaled by the activity
    for the stream and the kernel alike, so the kernel holds the clock at which its share of that part equals the
    stream's at the stream's clock (:func:`~mhlo_cost.machines.power. activity_clock` of activity / the stream's
    efficiency). A FlashAttention-2 kernel (fractions 0.35-0.42, activity 0.33-0.35 at head dim 128 with its
    exponentials) against a GEMM stream's 0.88 is left the peak's clock (the curve puts it above the peak at 700 W and
    at 500 W): what the lent H200 measured (benchmarks/cp_ring_measured.py, measured_h200_train_run1.jsonl: FA2 ring
    calls priced at the peak's clock 0.97-0.99 of measured, where the stream's 1440 MHz would have made them about
    1.25). A denser kernel (cuDNN's and FA3's, activity 0.57-0.65) is held at 0.94-0.99 of the peak's at 700 W,
    0.82-0.91 at 500 W. Its exponentials (the SFU, 16 per clock per SM) and its vector work issue on the same SM clock,
    so the kernel's whole compute time scales by it; its two memory-bound backward passes run at the HBM's clock and do
    not. The activity counts the tensor cores only (the exponentials, shared memory and register traffic switch too):
    the kernel's clock is an upper bound."""
    held = clock_factor(hw, matrix_key(qk, hw))
    if held >= 1.0 or activity <= 0.0 or hw.clock.step:  # (a step's own clock, --clock average: every kernel's)
        return held
    gemm = getattr(hw, "gemm", None)
    stream = gemm.base(1 << 62, matrix_key(qk, hw)) if gemm is not None else 1.0
    peak = hw.clock.peak_mhz
    return min(1.0, activity_clock(held * peak, activity / stream) / peak)


def _pass_bytes(rows, dots, sk: int) -> int:
    """:func:`~mhlo_cost.machines.kernels.backward_pass_bytes` of a backward kernel: its query rows (B x H x Sq:
    one product's FLOPs / 2d / Sk), head dim and narrowest operand type (Q, K, V, O and dO's)."""
    d = min((score_head_dim(rows[i]) for i in dots), default=0)
    if not d or not sk:
        return 0
    sizes = [t.nbytes // math.prod(t.shape) for i in dots for t in rows[i].operands
             if getattr(t, "shape", None) and getattr(t, "nbytes", 0) and math.prod(t.shape)]
    return backward_pass_bytes(rows[dots[0]].gemm_flops // (2 * d) // sk, d, max(1, min(sizes, default=2)))


def _recomputed_exps(rows, dots, gemm_flops: int) -> int:
    """The exponentials a backward kernel recomputes (P = exp(S - L), one per score): one product's FLOPs over
    2 x the head dim (the smallest contracted dimension of its products)."""
    d = min((score_head_dim(rows[i]) for i in dots), default=0)
    return gemm_flops // len(dots) // (2 * d) if d else 0


def _score_of(rows, dots) -> tuple:
    for i in dots:
        for t in (rows[i].result, *rows[i].operands):
            s = shape_of(t) if hasattr(t, "shape") else ()
            if len(s) >= 2 and s[-1] == s[-2]:
                return s[-2:]
    return shape_of(rows[dots[0]].result)[-2:]


def _masked(rows, members) -> bool:
    return any(short_name(rows[i].op) == "select" for i in members)
