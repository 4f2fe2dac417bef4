"""fp8 casts of activations and gradients as torchao eab345c's tensorwise ``Float8Linear`` runs them (torchtitan 12/24).

The lowered layer casts each fp8 GEMM's operands as :func:`mhlo_cost.lower.models.quant._fp8_backward` does: every
linear casts its own input in the forward (amax and cast), and the backward casts dy twice (for the dgrad and again
for the wgrad) and the input again (for the wgrad); the compiled fusion model puts each amax-and-cast of a tensor its
producer's kernel cannot take into a kernel of its own (:func:`.te_amax.standalone_casts`), fed by f32 copies of the
tensor and of its ``abs`` that the producer's kernel writes for it (:func:`feed_charge`).

torchao at eab345c (torchao/float8/float8_linear.py, tensorwise dynamic scaling: no axiswise cast config) runs:

* forward: ``Float8Linear.forward`` casts the input (``cast_input_to_float8`` -> ``hp_tensor_to_float8_dynamic``:
  ``tensor_to_amax`` = ``torch.max(torch.abs(x))``, a whole-tensor reduction, then ``hp_tensor_and_scale_to_float8``:
  ``x.to(float32) * scale``, clamp, ``.to(float8)``, one pointwise pass) and calls
  ``manual_float8_matmul_with_args_in_float8``, whose forward saves ``input_fp8`` and ``weight_fp8_t``;
* backward: ``cast_output_to_float8_in_bw`` (``NoopFwToFloat8BwDynamic.backward``, float8_scaling_utils.py) casts dy
  to e5m2 ONCE (its amax, its cast), and ``manual_float8_matmul_with_args_in_float8.backward`` runs both GEMMs on that
  one fp8 dy and on the saved ``input_fp8``: no input recast. Its wgrad ``torch.mm(grad_output_fp8_reshaped.t(),
  input_fp8_reshaped)`` goes through ``preprocess_addmm`` (float8_ops.py), which makes ``_scaled_mm``'s first
  operand row-major (``a_data.contiguous()`` of dy's transposed view) and its second column-major
  (``b_data.t().contiguous().t()`` of the row-major input): an fp8 transpose of dy and one of the input, 1 byte read
  and 1 written an element each (the dgrad's weight transpose is :func:`.fp8_weights.weight_transposes`').

Under torch.compile (``execution="inductor"``) AOTAutograd's partitioner runs its CSE pass on the joint graph before
partitioning (torch/_functorch/partitioners.py ``min_cut_rematerialization_partition``: ``if config.cse:
fx_graph_cse(fx_g)``, read at torch 00c07b9, the stored version nearest the rows' 1963fc8; functorch's ``cse``
defaults to True), so the identical casts of one tensor by several linears (wq, wk, wv of the attention norm's
output; w1, w3 of the MLP norm's) are one cast, and their wgrad transposes one transpose; eager casts in each linear.
Inductor cannot put a whole-tensor amax and the cast that divides by it in one kernel (the cast needs the finished
reduction), so an amax is a kernel reading the tensor (d bytes an element) and the cast another (d read, 1 written);
each fp8 transpose reads a realized fp8 buffer in the other order, a kernel of its own (ESTIMATE: an upper bound
where Inductor would write the transposed copy from the cast's kernel, 1 byte an element less).

torchtitan 9dec370's op-level checkpointing (``recompute="op"``, ``_save_list``: mm, SDPA, reduce-scatter, ``abs`` and
``max`` saved, the rest PREFER_RECOMPUTE) saves each amax but not the cast's output: the backward remakes
``input_fp8`` from the saved amax (one cast pass, d + 1 bytes an element, no amax) in its recompute, for the
recomputed GEMMs and the wgrad transposes alike.

So for ``fp8-tensorwise`` without TE's weight cache, on the planner's own layer
(:func:`applies`) the layer's standalone cast kernels (``LayerCost.amax_cast_s``) and the f32
feeds written for them (``LayerCost.cast_feed_s``) are taken out and torchao's kernels put in (:func:`torchao_kernels`,
per key of ``LayerCost.amax_casts``, ``n`` elements of the fp8 result, ``d`` bytes an element of the layer's dtype):

* forward input cast: amax (d n, 1 kernel) + cast (d n + n, 1 kernel); once a tensor compiled, once a linear eager;
* recompute input cast (op): the cast from the saved amax, d n + n, 1 kernel; compiled full recompute
  (:func:`.recompute.compiled_full`: torchtitan 9dec370's ``ptd_checkpoint_wrapper`` compiled per block, every node
  of the block PREFER_RECOMPUTE, nothing inside it saved but its inputs) runs the forward's input casts again, amax
  and cast (wo's too), and every fp8 weight's (:func:`compiled_full_weights`), in place of the program's recompute
  casts; eager full recompute re-runs the forward;
* backward dy (e5m2; the program's two casts): amax + cast + transpose, (2d + 3) n, 3 kernels;
* backward input recast (e4m3): none; the transpose of the fp8 input, 2n, 1 kernel (once a tensor compiled); under op
  an input the program's recompute does not cast (wo's, whose fp8 input serves only the wgrad) is remade there too.

The op policy remakes each linear's fp8 weight the same way (``weight_fp8_t`` is the cast's output, not saved; the
weight's ``max`` is): :func:`op_weight_recast`. A linear whose GEMM the policy recomputes (every second: wk, wo, w3;
the GPT layer's k, proj, fc2) needs it realized for that GEMM, a cast kernel of its own (d read, 1 written), beside
the dgrad's transpose (:func:`.fp8_weights.weight_transposes`); for the others the transpose is its only reader, and
Inductor computes the cast inside the transpose's kernel, which then reads the bf16 weight (d - 1 bytes an element
more than the priced fp8 transpose, no kernel more). Eager under the op policy is refused
(:func:`.config_check.fp8_invalid`): its recompute re-runs each linear's own input cast (no CSE) and casts each
weight in a kernel of its own before the transpose (no fusion), which these rules do not price.

Casts fused into a producer's kernel with other work (the SwiGLU backward's dy casts, the forward casts the fusion
model puts in the attention's or SwiGLU's kernel) stay as lowered. So does every cast under tensor parallelism
(``t`` > 1, :func:`applies`): torchtitan's float8 TP plans (``Float8ColwiseParallel``, ``PrepareFloat8ModuleInput``)
cast the sequence shard before the all-gather (:mod:`.fp8_gather`), where the program casts the gathered tensor, q, k
and v in one kernel; those casts are not modelled here.
"""
from __future__ import annotations

from .fp8_weights import reads_saved_weight, saves_cast
from .te_amax import E5M2, standalone_casts

#: Ops whose f32 result a producer's kernel writes only to feed a standalone cast kernel (the widened tensor, its abs)
FEED_OPS = frozenset({"abs", "convert"})


def applies(cfg) -> bool:
    """Whether ``cfg``'s activation and gradient casts are priced as torchao eab345c's: its tensorwise
    ``Float8Linear`` (:func:`.fp8_weights.reads_saved_weight`) without tensor parallelism."""
    return reads_saved_weight(cfg) and cfg.t == 1


def _readers(a) -> dict:
    out: dict = {}
    for j, ps in enumerate(a.producers):
        for p in ps:
            if isinstance(p, int):
                out.setdefault(p, set()).add(j)
    return out


def _feed_bytes(a, rf, removed: set) -> dict:
    """kernel id -> bytes of its f32 ``abs`` / ``convert`` results that no other kernel than the ``removed`` cast
    kernels reads (a GEMM kernel's ``abs``: :func:`.te_amax.epilogue_abs`', left out here)."""
    rows, rk, kernels, out = a.rows, rf.fusion.row_kernel, rf.fusion.kernels, {}
    readers = _readers(a)
    for i, r in enumerate(rows):
        k, op = rk[i], r.op.split(".")[-1]
        if k is None or k in removed or op not in FEED_OPS or isinstance(r.result, tuple) or r.result.dtype != "f32":
            continue
        if op == "abs" and kernels[k].has_dot:
            continue
        js = {j for j in readers.get(i, ()) if rk[j] != k}  # (a reader in its own kernel needs no write)
        if js and all(rk[j] in removed for j in js):
            out[k] = out.get(k, 0) + r.result.nbytes
    return out


def feed_charge(a, rf, hw, phases: tuple) -> dict:
    """phase -> seconds the priced layer's kernels spent writing the f32 tensors only its standalone amax-and-cast
    kernels read (:func:`_feed_bytes`): each kernel's time less its time without writing them, on ``hw``."""
    from ...lower.models.quant import WEIGHT_SCOPE

    ids = {id(k) for k in standalone_casts(a, rf, WEIGHT_SCOPE)}
    kernels = rf.fusion.kernels
    removed = {i for i, k in enumerate(kernels) if id(k) in ids}
    secs = {p: 0.0 for p in phases}
    for i, n in sorted(_feed_bytes(a, rf, removed).items()):
        k = kernels[i]
        b = n * k.multiplicity
        rest = max(k.compute_s, hw.memory_time(k.bytes_read + k.bytes_written - b, k.multiplicity)) + k.overhead_s
        secs[a.phases.phase[k.members[-1]]] += max(0.0, k.time_s - rest)
    return secs


def _kernel(cfg, key: str, count: int, recast: frozenset) -> tuple[str, int, int]:
    """(phase, bytes, kernels) torchao runs for one key of the program's standalone casts (``count`` kernels):
    :mod:`this module's <.torchao_casts>` rules; ``recast``: the sources the program's recompute casts."""
    import jax.numpy as jnp

    phase, dtype, n, src, _ = key.split("/")
    n, d = int(n), jnp.dtype(cfg.dtype).itemsize
    m = count if cfg.execution == "eager" else 1  # (one cast of a tensor compiled: AOTAutograd's CSE)
    if phase == "forward":
        return phase, m * (2 * d + 1) * n, 2 * m
    if phase != "backward":  # the recompute's input cast, from the saved amax
        return phase, m * (d + 1) * n, m
    if dtype == E5M2:  # dy: amax, cast, the wgrad's transpose
        return phase, (2 * d + 3) * n, 3
    if cfg.recompute == "op" and src not in recast:  # the fp8 input remade for the wgrad alone
        return "recompute", m * (d + 3) * n, 2 * m
    return phase, m * 2 * n, m


def torchao_kernels(cfg, casts: dict, phases: tuple) -> dict:
    """phase -> (bytes, kernels) torchao eab345c runs in place of the program's standalone casts ``casts``
    (:func:`.te_amax.cast_charge`'s map: ``phase/dtype/n/source/act`` -> kernels)."""
    recast = frozenset(k.split("/")[3] for k in casts if k.startswith("recompute/"))
    out = {p: (0, 0) for p in phases}
    for key in sorted(casts):
        phase, b, k = _kernel(cfg, key, casts[key], recast)
        out[phase] = (out[phase][0] + b, out[phase][1] + k)
    return out


#: The dense layers' linears in the order the block calls them (torchtitan's Llama: wq, wk, wv, wo, w1, w3, w2; the
#: GPT layer under the op policy: q, k, v apart), whose every second GEMM the op policy recomputes
CALL_ORDER = {"llama": ("q", "k", "v", "proj", "fc1", "gate", "fc2"), "gpt": ("q", "k", "v", "proj", "fc1", "fc2")}


def op_weight_recast(cfg) -> tuple[int, int]:
    """(bytes, kernels) of one layer-micro-batch's fp8 weight casts remade by the op policy's recompute, where the
    forward's cast weight is saved otherwise (:func:`.fp8_weights.saves_cast`): (d + 1) bytes an element and a kernel
    for each linear whose GEMM is recomputed, d - 1 an element more in the transpose's kernel for the others."""
    if cfg.recompute != "op" or not saves_cast(cfg):
        return 0, 0
    import math

    import jax.numpy as jnp

    from .fp8_weights import _param_shapes

    d, shapes = jnp.dtype(cfg.dtype).itemsize, _param_shapes(cfg)
    nbytes = kernels = 0
    for i, name in enumerate(CALL_ORDER[cfg.arch]):
        n = math.prod(shapes[name]["w"].shape)
        again = i % 2 == 1  # (the 2nd, 4th, 6th GEMM)
        nbytes += (d + 1) * n if again else (d - 1) * n
        kernels += 1 if again else 0
    return nbytes, kernels


def compiled_full_weights(cfg, cost) -> float:
    """Seconds of the fp8 weight casts one layer's compiled full recompute (:func:`.recompute.compiled_full`) runs
    beyond the program's recompute phase's: every node of torchtitan 9dec370's ``ptd_checkpoint_wrapper`` region is
    recomputed (nothing inside the block saved), and each linear's dgrad reads its fp8 weight (w2's too, whose forward
    GEMM the recompute skips), so every weight's amax and cast runs again: the forward's (``weight_cast_s``) less what
    the program's recompute phase holds. 0.0 where no cast weight is saved otherwise
    (:func:`.fp8_weights.saves_cast`)."""
    from .recompute import compiled_full

    if not compiled_full(cfg) or not saves_cast(cfg):
        return 0.0
    return cost.weight_cast_s["forward"] - cost.weight_cast_s["recompute"]


def torchao_cast_seconds(cfg, hw, cost) -> tuple[float, float, float]:
    """(forward, backward, recompute) seconds to add to one layer's micro-batch for torchao's casts in place of the
    program's standalone ones and their f32 feeds (negative: less), where :func:`applies`; 0s otherwise or without a
    profile. Eager full recompute re-runs the forward, its casts with it; compiled full recompute
    (:func:`.recompute.compiled_full`) the forward's torchao kernels in place of the program's recompute-phase casts
    and feeds, and every weight's cast (:func:`compiled_full_weights`); op its own recompute phase
    (:func:`.recompute.recompute_seconds`), and the weights' casts it remakes (:func:`op_weight_recast`); the weights'
    with tensor parallelism too."""
    if hw is None:
        return 0.0, 0.0, 0.0
    from .recompute import compiled_full, recompute_seconds

    wb, wk = op_weight_recast(cfg)
    weights = (hw.memory_time(wb, kernels=wk) if wb else 0.0) + compiled_full_weights(cfg, cost)
    if not applies(cfg):
        return 0.0, 0.0, weights
    own = torchao_kernels(cfg, cost.amax_casts, tuple(cost.amax_cast_s))
    delta = {p: (hw.memory_time(b, kernels=k) if k else 0.0) - cost.amax_cast_s[p] - cost.cast_feed_s[p]
             for p, (b, k) in own.items()}
    if compiled_full(cfg):  # the forward's kernels again, wo's input cast too, not the program's recompute casts
        b, k = own["forward"]
        rec = hw.memory_time(b, kernels=k) - cost.amax_cast_s["recompute"] - cost.cast_feed_s["recompute"]
        return delta["forward"], delta["backward"], rec + weights
    return delta["forward"], delta["backward"], recompute_seconds(cfg, delta) + weights
