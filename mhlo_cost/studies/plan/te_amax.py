"""fp8 casts under Transformer Engine: delayed scaling records the amax in the cast kernel; current scaling (TE 2.x)
runs an amax kernel and a scale kernel before it; both cast each tensor once and keep it.

The lowered layer casts each fp8 GEMM's activation and gradient operands as torchao's tensorwise dynamic scaling does
(:func:`mhlo_cost.lower.models.quant._cast`): the tensor's amax (``abs``, a whole-tensor ``reduce``), its scale, the
divide and the convert, made again at each use (the forward's input, the backward's dy for the dgrad and again for the
wgrad, the input again for the wgrad: ``_fp8_backward``). The compiled fusion model (:mod:`mhlo_cost.roofline.fusion`)
puts the amax and the cast of a tensor its producer's kernel cannot take into a kernel of their own (where the producer
is a GEMM the ``abs`` joins its epilogue and the kernel reads it back in f32: 4 + 2 bytes an element).

Transformer Engine's delayed scaling (``DelayedScaling``, NeMo 24.07's ``fp8: hybrid`` with ``fp8_amax_history_len:
1024``; TE v1.7) runs none of that as separate work: its cast kernels (transformer_engine/common/util/cast.cu
``cast_to_fp8``, transpose/cast_transpose.cu ``fp8_cast_transpose_fused``, cast_transpose_fusion.cu
``fp8_cast_transpose_bgrad_fused``, transpose.cu ``fp8_transpose``) take the scale the recipe computed from the amax
history and write the tensor's amax into the history in the same pass that casts. The history's update runs at each
outermost ``fp8_autocast`` exit (``FP8GlobalStateManager.reduce_and_update_fp8_tensors``: after each micro-batch's
forward of a model chunk, and again at the end of its backward), not once a step: the amaxes of the chunk's fp8 tensors
concatenated, one small all-reduce (MAX) over the amax reduction group, one fused ``amax_and_scale_update`` kernel (the
all-reduce ``async_op=False``), priced by :mod:`.te_amax_update` (a few kernels and one latency-bound all-reduce of a
few KiB per micro-batch, chunk and direction). And TE keeps what it cast: the forward's fp8 input is saved for the
wgrad (its transpose made there: ``fp8_transpose``, or in the forward's ``fp8_cast_transpose_fused``), and the
backward's grad_output is cast once for both GEMMs (its fp8 copy and its transpose,
``fp8_cast_transpose(_bgrad)_fused``; module/base.py ``grad_output_preprocess``).

So under TE's delayed scaling (:func:`delayed`) each standalone amax-and-cast kernel of the priced layer
(:func:`standalone_casts`: no GEMM, every member a row of an fp8 cast of an activation or gradient, one of them its
whole-tensor amax; the weights' casts, scope ``fp8_weight``, are :mod:`.fp8_weights`') is taken out, with the f32
``abs`` a GEMM's epilogue wrote for it alone (:func:`epilogue_abs`: the GEMM kernel's time less its time without those
bytes), and TE's kernel for it put in, one per tensor and phase, per element ``n`` of its fp8 result
(:func:`te_kernels`):

* forward, e4m3 (a Linear's input the norm kernel did not cast: the projection's; fc2's): ``cast_to_fp8``, read 2,
  write 1; none for fc2's input where :mod:`.mlp_activation` runs the activation as the stack's own kernels (TE's cast
  of it is priced there);
* backward, e5m2 (dy, cast twice as lowered): ``fp8_cast_transpose(_bgrad)_fused`` makes both in one pass, read 2,
  write 1 + 1: half of that per lowered cast, one kernel per pair;
* backward, e4m3 (the wgrad's recast of the forward's input): TE reads its saved fp8 copy, ``fp8_transpose``, read 1,
  write 1; none for fc2's input under :mod:`.mlp_activation` (its ``fp8_transpose`` is priced there).

That is TE's path with sequence parallelism (module/linear.py: ``fp8_cast_transpose_fused`` only ``not
sequence_parallel``); without it a Linear's input cast in the forward (the projection's; fc2's, where not
:mod:`.mlp_activation`'s) is cast with its transpose in one pass, ``fp8_cast_transpose_fused``, read 2, write 1 + 1, and
its backward recast is nothing (the switch :data:`.mlp_activation.TE_FP8_CAST` takes for fc2's input). The
LayerNormLinear inputs (the QKV's, fc1's: cast in the norm's kernel) keep their backward ``fp8_transpose``. The bias
gradients' reductions stay as lowered (TE fuses them only without sequence parallelism). torchao's tensorwise
scaling (``fp8_weight_cache`` off: torchtitan) keeps the program's kernels.

Transformer Engine 2.x's current scaling (:func:`current`: ``fp8_amax_history = 1``, Megatron-Bridge 25.11's FP8-CS
rows, TE 2.9 = release_v2.9, 70f5366) keeps what it cast as the delayed recipe does (the module's Linear is the same
for every quantizer: the forward's quantized input saved for the wgrad, the grad_output quantized once for both
GEMMs in ``grad_output_preprocess``), but each quantize is ``Float8CurrentScalingQuantizer::quantize_impl``
(transformer_engine/pytorch/csrc/quantizer.cpp): ``nvte_compute_amax`` (a kernel reading the tensor, 2 bytes an
element), ``nvte_compute_scale_from_amax`` (a kernel, no tensor bytes), then ``nvte_quantize_v2`` (the cast, with
the transpose where the quantizer's column-wise usage is set): so per cast TE's kernel above plus 2 bytes an element
and 2 kernels. And a row-parallel Linear (the projection, fc2) gathers no input, so TE 2.9 casts it with its
transpose in the forward with or without sequence parallelism (module/linear.py: "Do not all-gather input tensor":
``columnwise=backward_needs_input``), and its backward recasts nothing. The norms' quantize (TE 2.9
normalization.cpp ``FUSED_NORM_AMAX_FP8``: the norm kernel writes bf16 and the amax, then ``quantize_with_amax``) is
not a standalone kernel of the program and is not re-priced here. Under sequence parallelism the quantizers whose
tensor is gathered in fp8 all-reduce their amax over the tensor-parallel group first (:func:`amax_reductions`).
"""
from __future__ import annotations

from .fp8_weights import current, delayed
from .mlp_activation import SCOPE as ACT, runs_own

#: Ops of an fp8 cast chain (``_quantise``: abs, amax reduce, maximum with TINY, the scale's divide, x / scale, the
#: convert; a reshape where a kernel passes one through)
CAST_OPS = frozenset({"abs", "reduce", "maximum", "divide", "convert", "reshape", "broadcast_in_dim", "multiply"})
E4M3, E5M2 = "f8E4M3FN", "f8E5M2"


def _is_amax(r) -> bool:
    res = r.result
    return r.kind == "reduce" and not isinstance(res, tuple) and res.shape == () and res.dtype == "f32"


def standalone_casts(a, rf, weight_scope: str) -> list:
    """The fused kernels of the analysed layer that are an activation's or gradient's amax and fp8 cast alone: no
    GEMM, every member an op of :data:`CAST_OPS` outside ``weight_scope`` and outside the activation's scope
    :data:`ACT` (whose kernels :func:`.mlp_activation.activation_charge` charges), one a whole-tensor f32 reduce."""
    rows, out = a.rows, []
    for k in rf.fusion.kernels:
        mine = [rows[i] for i in k.members]
        if k.has_dot or k.attention or any({weight_scope, ACT} & set(r.scope.split("/")) for r in mine):
            continue
        if all(r.op.split(".")[-1] in CAST_OPS for r in mine) and any(_is_amax(r) for r in mine):
            out.append(k)
    return out


def fp8_result(k) -> tuple[str, int]:
    """(fp8 element type, elements) of a cast kernel's fp8 output (("", 0) without one)."""
    for t in k.outputs:
        if t.dtype in (E4M3, E5M2):
            return t.dtype, t.nelems
    return "", 0


#: Ops looked through back to the tensor a cast kernel casts (a widening convert or a reshape the kernel reads
#: through; the ``abs`` a GEMM's epilogue made for it)
THROUGH = frozenset({"convert", "reshape", "abs", "copy"})


def cast_source(a, k, n: int) -> int:
    """The row whose result of ``n`` elements the cast kernel ``k`` casts (looking through :data:`THROUGH`), -1 where
    it is an argument of the program."""
    members, rows, seen = set(k.members), a.rows, set()
    todo = [p for i in k.members for p in a.producers[i] if p not in members]
    found = []
    while todo:
        p = todo.pop()
        if not isinstance(p, int):
            found.append(-1)
        elif p not in seen:
            seen.add(p)
            r = rows[p]
            if r.op.split(".")[-1] in THROUGH:
                todo.extend(q for q in a.producers[p] if q not in members)
            elif r.op.endswith("broadcast_in_dim") and all(o.nelems <= 1 for o in r.operands):
                continue  # (the scale, broadcast to the tensor's shape)
            elif not isinstance(r.result, tuple) and r.result.nelems == n:
                found.append(p)
    return max(found, default=-1)


def epilogue_abs(a, rf, removed: set) -> list[tuple]:
    """(kernel, bytes) of each GEMM kernel's ``abs`` outputs (f32, written in its epilogue) that only the removed cast
    kernels (``removed``: kernel ids) read: what the fusion model writes to take an amax after the GEMM."""
    rows, rk, prod = a.rows, rf.fusion.row_kernel, a.producers
    cand = {i for i, r in enumerate(rows) if rk[i] is not None and rf.fusion.kernels[rk[i]].has_dot
            and r.op.endswith(".abs") and rk[i] not in removed}
    readers: dict = {}
    for j, ps in enumerate(prod):
        for p in ps:
            if p in cand:
                readers.setdefault(p, set()).add(j)
    out: dict = {}
    for i, js in sorted(readers.items()):
        if js and all(rk[j] in removed for j in js):
            out[rk[i]] = out.get(rk[i], 0) + rows[i].result.nbytes
    return [(rf.fusion.kernels[k], n * rf.fusion.kernels[k].multiplicity) for k, n in sorted(out.items())]


def cast_charge(a, rf, hw, phases: tuple) -> tuple[dict, dict, dict]:
    """What the priced layer charged for its standalone amax-and-cast kernels (:func:`standalone_casts`), and for
    the f32 ``abs`` a GEMM's epilogue wrote for them alone (:func:`epilogue_abs`: the GEMM kernel's time less its
    time without writing them, on ``hw``): phase -> seconds, phase -> bytes, and ``"phase/dtype/n/source/act"`` (the
    phase, the fp8 result's element type and elements, the row it casts: :func:`cast_source`, and ``act`` where that
    row is of the activation's scope, fc2's input, else ``-``) -> kernels."""
    from ...lower.models.quant import WEIGHT_SCOPE

    secs, nbytes, kinds = {p: 0.0 for p in phases}, {p: 0 for p in phases}, {}
    kernels = standalone_casts(a, rf, WEIGHT_SCOPE)
    for k in kernels:
        p = a.phases.phase[k.members[-1]]
        secs[p] += k.time_s
        nbytes[p] += k.bytes_read + k.bytes_written
        dtype, n = fp8_result(k)
        src = cast_source(a, k, n)
        act = ACT if src >= 0 and ACT in a.rows[src].scope.split("/") else "-"
        key = f"{p}/{dtype}/{n}/{src}/{act}"
        kinds[key] = kinds.get(key, 0) + k.multiplicity
    ids = {id(k) for k in kernels}
    removed = {i for i, k in enumerate(rf.fusion.kernels) if id(k) in ids}
    for k, b in epilogue_abs(a, rf, removed):
        p = a.phases.phase[k.members[-1]]
        rest = max(k.compute_s, hw.memory_time(k.bytes_read + k.bytes_written - b, k.multiplicity)) + k.overhead_s
        secs[p] += max(0.0, k.time_s - rest)
        nbytes[p] += b
    return secs, nbytes, kinds


#: What current scaling's quantize adds to each cast from a bf16 tensor (per element bytes, kernels):
#: ``nvte_compute_amax`` reads it (2 bytes), ``nvte_compute_scale_from_amax`` is a kernel of its own (TE 2.9
#: quantizer.cpp ``Float8CurrentScalingQuantizer::quantize_impl``)
CURRENT_AMAX = (2, 2)


def _te_kernel(cfg, phase: str, dtype: str, n: int, fc2: bool, fused: bool) -> tuple[int, int]:
    """(bytes, kernels) of TE's kernels in place of the lowered casts of one tensor of ``n`` elements to ``dtype``
    in ``phase`` (the rules of the module's text; ``fc2``: the tensor is fc2's input, its source of scope ``act``;
    ``fused``: a Linear's input TE casts with its transpose in the forward): one cast kernel, and under
    :func:`current` its amax and scale kernels (:data:`CURRENT_AMAX`) before each cast from bf16."""
    fc2_own = runs_own(cfg) and fc2
    amax = (CURRENT_AMAX[0] * n, CURRENT_AMAX[1]) if current(cfg) else (0, 0)
    if phase != "backward":  # the forward's (or a recompute's) input cast: cast_to_fp8 or fp8_cast_transpose_fused
        return (0, 0) if fc2_own else ((4 if fused else 3) * n + amax[0], 1 + amax[1])
    if dtype == E5M2:  # dy's casts in one fp8_cast_transpose(_bgrad)_fused
        return 4 * n + amax[0], 1 + amax[1]
    return (0, 0) if fc2_own or fused else (2 * n, 1)  # the saved input's fp8_transpose


def te_kernels(cfg, casts: dict, phases: tuple) -> dict:
    """phase -> (bytes, kernels) TE runs in place of the lowered casts ``casts`` (:func:`cast_charge`'s map): one
    kernel per tensor and phase, however many times the program casts it. Without sequence parallelism (TE's
    ``not sequence_parallel``, as :data:`.mlp_activation.TE_FP8_CAST`) a Linear's input cast in the forward is cast
    with its transpose there, and its backward recast is nothing; under TE 2.x's :func:`current` scaling with it
    too (a row-parallel Linear gathers no input)."""
    split = bool(cfg.sp and cfg.t > 1) and not current(cfg)
    forward = set() if split else {k.split("/")[3] for k in casts if not k.startswith("backward/")} - {"-1"}
    out = {p: (0, 0) for p in phases}
    for key in sorted(casts):
        phase, dtype, n, src, act = key.split("/")
        fused = not split if phase != "backward" else src in forward
        b, k = _te_kernel(cfg, phase, dtype, int(n), act == ACT, fused)
        out[phase] = (out[phase][0] + b, out[phase][1] + k)
    return out


def te_cast_seconds(cfg, hw, cost) -> tuple[float, float, float]:
    """(forward, backward, recompute) seconds to add to one layer's micro-batch for TE's casts in place of the
    lowered standalone amax-and-cast kernels (negative: less), where :func:`delayed` or :func:`current`; 0s
    otherwise or without a profile. Full recompute runs the forward's again; a recompute phase of the program its
    own."""
    if not (delayed(cfg) or current(cfg)) or hw is None:
        return 0.0, 0.0, 0.0
    from .recompute import recompute_seconds

    own = te_kernels(cfg, cost.amax_casts, tuple(cost.amax_cast_s))
    delta = {p: (hw.memory_time(b, kernels=k) if k else 0.0) - cost.amax_cast_s[p] for p, (b, k) in own.items()}
    return delta["forward"], delta["backward"], recompute_seconds(cfg, delta)


#: fp32 amax bytes each TE 2.9 current-scaling quantizer ``with_amax_reduction`` all-reduces (MAX) over the
#: tensor-parallel group
AMAX_BYTES = 4


def amax_reductions(cfg) -> dict:
    """phase -> how many synchronous amax all-reduces (:data:`AMAX_BYTES` over the tensor-parallel group) one layer
    runs for one micro-batch under TE 2.9's :func:`current` scaling with sequence parallelism: TE sets
    ``with_amax_reduction`` on a column-parallel module's input quantizer (the QKV's, fc1's: their sequence-split
    norm output is gathered in fp8 with one scale) and on a row-parallel module's grad_output quantizer (the
    projection's, fc2's: dy gathered the same way) (module/linear.py, layernorm_linear.py
    ``_customize_quantizers_float8_current_scaling`` at release_v2.9); ``quantize_impl`` runs each one and waits
    for it before the scale (``amax_reduction_group->allreduce(...)->wait()``). Full recompute runs the forward's
    two again in the backward. None without sequence parallelism or under other recipes."""
    if not (current(cfg) and cfg.sp and cfg.t > 1):
        return {"forward": 0, "backward": 0}
    return {"forward": 2, "backward": 2 + (2 if cfg.recompute == "full" else 0)}
