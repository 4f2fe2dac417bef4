"""fp8 casts under Transformer Engine's delayed scaling (:mod:`mhlo_cost.studies.plan.te_amax`), against closed forms
worked out here.

The lowered layer casts each fp8 GEMM operand as ``_cast`` in ``mhlo_cost/lower/models/quant.py`` writes it: the
tensor read in f32 for its amax (a whole-tensor reduce, initial value 0), ``max(amax, TINY) / QMAX``, the tensor
divided by that scale and converted; the forward casts each linear's input, the backward casts dy twice (dgrad,
wgrad) and the input again (wgrad). On a GPT layer of ``n_h = b s h`` hidden and ``n_f = b s ffn`` MLP elements
(t = 1), the casts no producer's kernel takes are kernels of their own, each reading its bf16 source (2 bytes an
element; fc2's input and fc1's output gradient also as the f32 ``abs`` their GEMM's epilogue wrote: 4 more) and the
three f32 scalars (the reduce's initial value, TINY, QMAX: 12 bytes), writing the fp8 tensor (1) and its scale (4):

* forward: the projection's input (the attention's output) and fc2's input (the activation's output);
* backward: fc2's dy twice, fc2's input again, fc1's dy twice, fc1's input (LayerNorm 2's output) again, the
  projection's input again, the QKV's input (LayerNorm 1's output) again.

(The QKV's and fc1's forward casts sit in their LayerNorm's kernel; the projection's and the QKV's dy casts in the
LayerNorm backward's: neither is a kernel of its own, and TE's LayerNorm kernel writes fp8 too.) The f32 ``abs`` those
two kernels read back was written by a GEMM's epilogue for them alone: fc1's forward GEMM (its activation's, 4 n_f)
and fc2's dgrad GEMM (the activation's backward, one per cast of fc1's dy: 2 x 4 n_f); taken out with them.

What TE v1.7 runs instead, with the amax recorded in the cast: forward ``cast_to_fp8`` of the projection's input
(2 read, 1 written; without sequence parallelism ``fp8_cast_transpose_fused``, 1 + 1 written, and no backward
transpose of it) and nothing for fc2's (Megatron's activation kernels: :mod:`.mlp_activation` prices TE's cast of
it); backward one ``fp8_cast_transpose_bgrad_fused`` per dy (2 read, 1 + 1 written), ``fp8_transpose`` of each saved
fp8 input (1 read, 1 written), fc2's priced by :mod:`.mlp_activation`."""
from __future__ import annotations

from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.compose import _layer
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import analyse_layer
from mhlo_cost.studies.plan.te_amax import amax_reductions, current, delayed, te_cast_seconds, te_kernels

H100 = resolve_profile("dgx-h100")
PH = ("forward", "backward", "recompute", "optimizer")
B, S, H, F = 1, 128, 256, 1024
N_H, N_F = B * S * H, B * S * F
TE = dict(layers=1, hidden=H, heads=4, seq=S, vocab=1024, ffn=F, micro_batch=B, precision="fp8-tensorwise",
          fp8_weight_cache=True, activation_kernel="megatron", attention="fused", dropout=False)
SCALARS, SCALE = 12, 4  # f32 scalars each cast kernel reads; the scale it writes


def cast_kernel(n: int, abs_read: bool = False) -> int:
    """Bytes of one lowered amax-and-cast kernel of ``n`` bf16 elements (``abs_read``: also its f32 abs)."""
    return (2 + (4 if abs_read else 0)) * n + SCALARS + n + SCALE


def test_a_te_layer_charges_these_amax_and_cast_kernels_of_their_own():
    cost = analyse_layer(ScaleConfig(**TE), H100)
    forward = cast_kernel(N_H) + cast_kernel(N_F, abs_read=True) + 4 * N_F
    backward = 5 * cast_kernel(N_H) + cast_kernel(N_F) + 2 * cast_kernel(N_F, abs_read=True) + 2 * 4 * N_F
    assert cost.amax_cast_bytes == {"forward": forward, "backward": backward, "recompute": 0, "optimizer": 0}
    per_phase = {p: sum(n for k, n in cost.amax_casts.items() if k.startswith(p + "/")) for p in PH}
    assert per_phase == {"forward": 2, "backward": 8, "recompute": 0, "optimizer": 0}
    assert cost.amax_cast_s["forward"] > 0 and cost.amax_cast_s["backward"] > cost.amax_cast_s["forward"]


def test_te_runs_one_cast_per_tensor_its_amax_inside():
    cfg = ScaleConfig(**TE)
    cost = analyse_layer(cfg, H100)
    own = te_kernels(cfg, cost.amax_casts, PH)
    # forward, no sequence parallelism: fp8_cast_transpose_fused of the projection's input (TE's Linear: 2 read,
    # 1 + 1 written); fc2's input is .mlp_activation's
    assert own["forward"] == (4 * N_H, 1)
    # backward: fc2's and fc1's dy, one cast-transpose each; the saved fp8 inputs of fc1 and the QKV (LayerNormLinear's
    # ln_out) transposed; the projection's transpose made in the forward; fc2's is .mlp_activation's
    assert own["backward"] == (4 * N_H + 4 * N_F + 2 * 2 * N_H, 4)
    assert own["recompute"] == own["optimizer"] == (0, 0)
    f, b, r = te_cast_seconds(cfg, H100, cost)
    assert f == H100.memory_time(4 * N_H, kernels=1) - cost.amax_cast_s["forward"]
    assert b == H100.memory_time(8 * N_H + 4 * N_F, kernels=4) - cost.amax_cast_s["backward"]
    assert r == 0.0 and f < 0 and b < 0


def test_under_sequence_parallelism_each_gathered_input_is_transposed_once():
    """t = 2 with sequence parallelism: the projection's input is b s h/t; fc2's input and fc1's dy b s ffn/t; the
    QKV's and fc1's inputs the all-gathered b s h (two tensors, one fp8_transpose each)."""
    cfg = ScaleConfig(**TE, t=2, sp=True)
    cost = analyse_layer(cfg, H100)
    own = te_kernels(cfg, cost.amax_casts, PH)
    assert own["forward"] == (3 * N_H // 2, 1)
    assert own["backward"] == (4 * N_F // 2 + 2 * 2 * N_H + 2 * N_H // 2, 4)


def test_without_sequence_parallelism_the_linears_input_is_cast_with_its_transpose():
    """t = 2 without sequence parallelism: TE's Linear (the projection) runs fp8_cast_transpose_fused on its input
    (b s h/t: read 2, write 1 + 1) and no backward transpose of it; the QKV's and fc1's inputs (b s h, whole on every
    rank) keep LayerNormLinear's fp8_transpose; fc2's dy (b s h) and fc1's (b s ffn/t) one cast-transpose each."""
    cfg = ScaleConfig(**TE, t=2)
    cost = analyse_layer(cfg, H100)
    own = te_kernels(cfg, cost.amax_casts, PH)
    assert own["forward"] == (4 * N_H // 2, 1)
    assert own["backward"] == (4 * N_H + 4 * N_F // 2 + 2 * 2 * N_H, 4)  # fc2's dy: b s h (fc2 row-parallel)


def test_only_tes_stack_changes_the_plan():
    """torchao's tensorwise scaling (no kept weight copies) and the row-wise recipe keep the program's kernels; TE's
    delayed and current scaling (history 1: Megatron-Bridge's FP8-CS) replace them."""
    cfg = ScaleConfig(**TE)
    cs = ScaleConfig(**TE, fp8_amax_history=1)
    torchao = ScaleConfig(**dict(TE, fp8_weight_cache=False, activation_kernel="compiled"))
    assert delayed(cfg) and not delayed(cs) and not delayed(torchao)
    assert current(cs) and not current(cfg) and not current(torchao)
    assert not delayed(ScaleConfig(**dict(TE, precision="bf16"))) and not current(ScaleConfig(**dict(TE, precision=
                                                                                                    "bf16")))
    assert not current(ScaleConfig(**dict(TE, precision="fp8-rowwise"), fp8_amax_history=1))
    cost = analyse_layer(cfg, H100)
    assert te_cast_seconds(torchao, H100, cost) == (0.0, 0.0, 0.0)
    f, b, _ = te_cast_seconds(cfg, H100, cost)
    f_cs, b_cs, _ = te_cast_seconds(cs, H100, cost)
    one, other = _layer(cfg, cost, None, H100), _layer(cs, cost, None, H100)
    # both add TE's cast of fc2's input beside bias_gelu's kernel (2 + 2), t = 1: delayed, fp8_cast_transpose_fused
    # (2 read, 1 + 1 written, one kernel); current, amax (2 read) + scale + cast with transpose (2 + 2): 3 kernels
    fc2 = H100.memory_time(N_F * (4 + 4), kernels=2) - H100.memory_time(N_F * (4 + 6), kernels=4)
    assert abs(one["forward"] - (other["forward"] + f - f_cs + fc2)) < 1e-15
    assert abs(one["backward"] - (other["backward"] + b - b_cs)) < 1e-15


def test_te_current_scaling_adds_an_amax_kernel_and_a_scale_kernel_to_each_cast():
    """TE 2.9's Float8CurrentScalingQuantizer::quantize_impl (transformer_engine/pytorch/csrc/quantizer.cpp): each
    quantize of a bf16 tensor is nvte_compute_amax (read 2 bytes an element), nvte_compute_scale_from_amax (a kernel,
    no tensor bytes) and the cast; what it saved (the forward's fp8 input, dy's fp8 copy and transpose) is kept as
    under delayed scaling. t = 1: forward, the projection's input cast with its transpose (2 read + 1 + 1 written)
    after its amax (2): 6 n_h, 3 kernels; backward, fc2's dy (b s h) and fc1's (b s ffn) each amax + scale +
    cast-transpose (2 + 4 bytes, 3 kernels), the LayerNormLinear inputs (QKV's, fc1's: b s h each) one fp8_transpose
    each (1 + 1, no amax: already fp8), the projection's transpose made in the forward."""
    cfg = ScaleConfig(**TE, fp8_amax_history=1)
    cost = analyse_layer(cfg, H100)
    own = te_kernels(cfg, cost.amax_casts, PH)
    assert own["forward"] == (6 * N_H, 3)
    assert own["backward"] == (6 * N_H + 6 * N_F + 2 * 2 * N_H, 3 + 3 + 2)
    assert own["recompute"] == own["optimizer"] == (0, 0)
    f, b, r = te_cast_seconds(cfg, H100, cost)
    assert f == H100.memory_time(6 * N_H, kernels=3) - cost.amax_cast_s["forward"]
    assert b == H100.memory_time(10 * N_H + 6 * N_F, kernels=8) - cost.amax_cast_s["backward"]
    assert r == 0.0 and b < 0


def test_te_current_scaling_casts_the_row_parallel_input_with_its_transpose_under_sequence_parallelism():
    """t = 2 with sequence parallelism: TE 2.9's row-parallel Linear (the projection) gathers no input, so it casts
    it with its transpose in the forward (module/linear.py "Do not all-gather input tensor": columnwise =
    backward_needs_input): b s h/t elements, amax 2 + cast 2 + 1 + 1, 3 kernels; no backward transpose of it. The
    backward: fc1's dy (b s ffn/t) amax + scale + cast-transpose, the gathered QKV and fc1 inputs (b s h each) one
    fp8_transpose each."""
    cfg = ScaleConfig(**TE, t=2, sp=True, fp8_amax_history=1)
    cost = analyse_layer(cfg, H100)
    own = te_kernels(cfg, cost.amax_casts, PH)
    assert own["forward"] == (6 * N_H // 2, 3)
    assert own["backward"] == (6 * N_F // 2 + 2 * 2 * N_H, 3 + 2)


def test_full_recompute_runs_the_forwards_casts_again():
    cfg = ScaleConfig(**TE, recompute="full")
    cost = analyse_layer(cfg, H100)
    f, _, r = te_cast_seconds(cfg, H100, cost)
    assert r == f < 0


def test_fc2s_input_is_told_by_its_scope_not_its_size():
    """t = 4, ffn = 4h, sequence parallelism (GPT-3 175B's shape): fc2's input (b s ffn/t) has as many elements as
    the all-gathered QKV and fc1 inputs (b s h); only fc2's (its source of scope ``act``) is left to
    :mod:`.mlp_activation`, the other two keep one ``fp8_transpose`` each (1 read, 1 written)."""
    cfg = ScaleConfig(**TE, t=4, sp=True)
    assert N_F // 4 == N_H
    cost = analyse_layer(cfg, H100)
    own = te_kernels(cfg, cost.amax_casts, PH)
    # forward: cast_to_fp8 of the projection's input (b s h/t)
    assert own["forward"] == (3 * N_H // 4, 1)
    # backward: one cast-transpose per dy cast on its own (fc1's, b s ffn/t; the QKV's, b s 3h/t), the projection's
    # saved input transposed (b s h/t), and the gathered QKV and fc1 inputs (b s h each)
    assert own["backward"] == (4 * N_F // 4 + 4 * 3 * N_H // 4 + 2 * N_H // 4 + 2 * 2 * N_H, 5)


def test_no_kernel_is_both_a_standalone_cast_and_the_activations():
    """Each kernel charged once: the kernels :func:`standalone_casts` takes (te_amax's) hold no row of the
    activation's scope ``act``, whose kernels :func:`.mlp_activation.activation_charge` charges; and the kernels with
    such a row, as counted here from the rows' scopes, are none of them. GELU and SwiGLU, t = 1 and t = 2 with SP."""
    from mhlo_cost.lower.models.quant import WEIGHT_SCOPE
    from mhlo_cost.studies.plan.costs import dense_layer
    from mhlo_cost.studies.study import Study
    from mhlo_cost.studies.plan.te_amax import standalone_casts

    for kw in (dict(), dict(t=2, sp=True), dict(mlp_kind="swiglu", arch="llama")):
        cfg = ScaleConfig(**TE, **kw)
        study = Study(dense_layer(cfg), training="always", hardware=H100, split_phases=True,
                      execution=cfg.execution, attention=cfg.attention, dataflow=True)
        a, rf = study.analysis, study.roofline
        act = {id(k) for k in rf.fusion.kernels if any("act" in a.rows[i].scope.split("/") for i in k.members)}
        casts = {id(k) for k in standalone_casts(a, rf, WEIGHT_SCOPE)}
        assert act and casts and not act & casts


def test_te_current_scaling_under_sequence_parallelism_all_reduces_four_amaxes_a_layer():
    """TE 2.9 sets with_amax_reduction (the tensor-parallel group) on the column-parallel modules' input quantizers
    (the QKV's and fc1's LayerNormLinear) and the row-parallel ones' grad_output quantizers (the projection's, fc2's)
    under sequence parallelism, and quantize_impl waits for each 4-byte MAX all-reduce: 2 in the forward, 2 in the
    backward, 2 more there under full recompute; none without sequence parallelism or under delayed scaling."""
    from mhlo_cost.network import estimate

    cs = ScaleConfig(**TE, t=2, sp=True, fp8_amax_history=1)
    dl = ScaleConfig(**TE, t=2, sp=True)
    assert amax_reductions(cs) == {"forward": 2, "backward": 2}
    assert amax_reductions(ScaleConfig(**TE, t=2, sp=True, fp8_amax_history=1, recompute="full")) == {
        "forward": 2, "backward": 4}
    assert amax_reductions(dl) == amax_reductions(ScaleConfig(**TE, t=2, fp8_amax_history=1)) == {
        "forward": 0, "backward": 0}
    cost = analyse_layer(cs, H100)
    one = estimate(H100.topology, "all_reduce", 4, ((0, 1),)).time_s
    a, b = _layer(cs, cost, H100.topology, H100), _layer(dl, cost, H100.topology, H100)
    assert one > 0
    assert abs(a["tp_forward"] - b["tp_forward"] - 2 * one) < 1e-15
    assert abs(a["tp_backward"] - b["tp_backward"] - 2 * one) < 1e-15
